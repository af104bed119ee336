//! The internal RPC end to end: a broker served on 127.0.0.1 and called
//! through `RemoteBroker`, the client the proxy holds as a
//! `dyn PartitionOwner` and `dyn Coordinator`. Every route of the table is
//! served, and a produce answers in two steps (sequenced, then
//! acknowledged).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use floe_broker::rpc::routes::ALL_PATHS;
use floe_broker::{
    Acks, CallError, Coordinator, ErrorKind, OffsetSpec, PartitionOwner, RemoteBroker,
    RoutingErrorKind,
};
use floe_storage::PartitionKey;
use floe_storage::records::{BatchBuilder, RecordSpec};
use floe_testkit::{Cluster, free_addr, wait_owned};

fn batch(value: &str) -> Bytes {
    let mut b = BatchBuilder::new(0, 1);
    b.push(RecordSpec::new(None, Some(value.as_bytes().to_vec()), 0));
    b.build(floe_storage::batch::Compression::None).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_broker_answers_every_route_of_the_table() {
    let env = Cluster::start().await;
    let t = env.create_topic("rpc", 1, &[]).await;
    let key = PartitionKey::new(t, 0);
    let b = env.broker(|_| {}).await;
    wait_owned(&b, key).await;
    let addr = free_addr();
    let listener = tokio::net::TcpListener::bind(addr).await.unwrap();
    let server = tokio::spawn(floe_broker::rpc::serve(
        listener,
        b.clone(),
        floe_metadata::http_server::HttpLimits::with_body_limit(floe_broker::rpc::MAX_BODY_BYTES),
    ));

    // Every path is routed: a body that is not the route's request is a
    // 400, not a 404.
    let client = RemoteBroker::new(addr.to_string());
    for path in ALL_PATHS {
        let status = post_garbage(&addr.to_string(), path).await;
        assert_eq!(status, 400, "{path}");
    }

    let owner: Arc<dyn PartitionOwner> = Arc::new(client.clone());
    let pending = owner
        .append(&key, batch("a"), Acks::All, Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(pending.wait().await.unwrap().base_offset, 0);
    let pending = owner
        .append(&key, batch("b"), Acks::All, Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(pending.wait().await.unwrap().base_offset, 1);
    let data = owner.fetch(&key, 0, 1 << 20, None).await.unwrap();
    assert_eq!(data.high_watermark, 2);
    let (latest, epoch) = owner
        .list_offset(&key, OffsetSpec::Latest, None)
        .await
        .unwrap();
    assert_eq!(latest.offset, 2);
    assert!(epoch >= 0);
    // The client's current leader epoch travels and is checked by the owner.
    let epoch = epoch as u64;
    assert_eq!(
        owner
            .fetch(&key, 0, 1024, Some(epoch))
            .await
            .unwrap()
            .high_watermark,
        2
    );
    owner
        .list_offset(&key, OffsetSpec::Earliest, Some(epoch))
        .await
        .unwrap();
    let kind = |r: Result<_, CallError>| match r {
        Err(CallError::Broker(e)) => e.kind(),
        Err(e) => panic!("expected a broker error, got {e}"),
        Ok(_) => panic!("expected an error"),
    };
    assert_eq!(
        kind(
            owner
                .fetch(&key, 0, 1024, Some(epoch + 1))
                .await
                .map(|_| ())
        ),
        ErrorKind::UnknownLeaderEpoch
    );
    assert_eq!(
        kind(
            owner
                .list_offset(&key, OffsetSpec::Latest, Some(epoch + 1))
                .await
                .map(|_| ())
        ),
        ErrorKind::UnknownLeaderEpoch
    );
    if epoch > 0 {
        assert_eq!(
            kind(
                owner
                    .fetch(&key, 0, 1024, Some(epoch - 1))
                    .await
                    .map(|_| ())
            ),
            ErrorKind::FencedLeaderEpoch
        );
        assert_eq!(
            kind(
                owner
                    .list_offset(&key, OffsetSpec::Latest, Some(epoch - 1))
                    .await
                    .map(|_| ())
            ),
            ErrorKind::FencedLeaderEpoch
        );
    }
    // A broker error comes back as the broker's error, not a routing one.
    let other = PartitionKey::new(t, 7);
    match owner.fetch(&other, 0, 1024, None).await {
        Err(CallError::Broker(e)) => assert!(
            matches!(
                e.kind(),
                ErrorKind::NotOwner | ErrorKind::UnknownTopicOrPartition
            ),
            "{e}"
        ),
        r => panic!("expected a broker error, got {r:?}"),
    }

    let coordinator: Arc<dyn Coordinator> = Arc::new(client);
    assert!(coordinator.list_groups(&[]).await.is_empty());

    // A broker that is gone is a routing failure.
    server.abort();
    let _ = server.await;
    let gone: Arc<dyn PartitionOwner> = Arc::new(RemoteBroker::new(free_addr().to_string()));
    match gone.fetch(&key, 0, 1024, None).await {
        Err(CallError::Routing(e)) => assert_eq!(e.kind(), RoutingErrorKind::Unreachable),
        r => panic!("expected an unreachable owner, got {r:?}"),
    }
}

async fn post_garbage(addr: &str, path: &str) -> u16 {
    use http_body_util::Full;
    use hyper_util::client::legacy::Client;
    use hyper_util::rt::TokioExecutor;
    let client: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new())
        .http2_only(true)
        .build_http();
    let req = hyper::Request::post(format!("http://{addr}{path}"))
        .body(Full::new(Bytes::from_static(&[0xff, 0xff, 0xff])))
        .unwrap();
    client.request(req).await.unwrap().status().as_u16()
}
