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
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(floe_broker::server::serve(
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

    // A produce refused before it is sequenced is refused by `append`
    // itself, not by its acknowledgement: the proxy then knows the write
    // was not stored and sends it again once the partition has an owner.
    match owner
        .append(&other, batch("c"), Acks::All, Duration::from_secs(5))
        .await
    {
        Err(CallError::Broker(e)) => assert!(
            matches!(
                e.kind(),
                ErrorKind::NotOwner | ErrorKind::UnknownTopicOrPartition
            ),
            "{e}"
        ),
        Err(e) => panic!("expected a broker error, got {e}"),
        Ok(_) => panic!("a refused produce was taken as sequenced"),
    }

    let coordinator: Arc<dyn Coordinator> = Arc::new(client);
    assert!(coordinator.list_groups(&[]).await.is_empty());

    // A broker that is gone is a routing failure.
    server.abort();
    let _ = server.await;
    let gone: Arc<dyn PartitionOwner> = Arc::new(RemoteBroker::new(free_addr().to_string()));
    match gone.fetch(&key, 0, 1024, None).await {
        Err(CallError::Routing(e)) => {
            assert_eq!(e.kind(), RoutingErrorKind::Unreachable);
            // Nothing listens there: the connection is refused, which the
            // proxy reports so that the owner's partitions move at once.
            assert!(e.is_refused(), "{e}");
        }
        r => panic!("expected an unreachable owner, got {r:?}"),
    }
    match gone
        .append(&key, Bytes::new(), floe_broker::Acks::All, Duration::ZERO)
        .await
    {
        Err(CallError::Routing(e)) => assert!(e.is_refused(), "{e}"),
        r => panic!("expected a refused connection, got {r:?}"),
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

/// A stand-in owner on 127.0.0.1:0 whose produce route runs `answer`; the
/// server task is returned so that a test can stop it mid-call.
async fn fake_owner<F, Fut>(answer: F) -> (String, tokio::task::JoinHandle<std::io::Result<()>>)
where
    F: Fn() -> Fut + Clone + Send + Sync + 'static,
    Fut: std::future::Future<Output = axum::response::Response> + Send + 'static,
{
    use floe_broker::rpc::routes::{Produce, Route};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let router = axum::Router::new().route(Produce::PATH, axum::routing::post(answer));
    let server = tokio::spawn(floe_metadata::http_server::serve(
        listener,
        router,
        floe_metadata::http_server::HttpLimits::with_body_limit(1 << 20),
        "fake_owner",
    ));
    (addr, server)
}

/// A produce that reached its owner and lost its answer may be stored: it
/// fails as OutcomeUnknown (REQUEST_TIMED_OUT for Kafka clients, retried
/// as possibly persisted), never as a routing failure (NOT_LEADER, which
/// tells an idempotent producer it was not stored, so that it may send it
/// again under a new epoch: a duplicate). Only a refused connect is a
/// routing failure.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_produce_whose_answer_is_lost_has_an_unknown_outcome() {
    let key = PartitionKey::new(floe_storage::TopicId::random(), 0);

    // Sequenced (the headers came), then the body breaks off.
    let (addr, server) = fake_owner(|| async {
        use futures::StreamExt;
        // The error comes a little after the headers, as from an owner
        // killed while it waited for the store.
        let broken = futures::stream::iter([true, false]).then(|first| async move {
            if first {
                Ok::<_, std::io::Error>(Bytes::from_static(b"\x08"))
            } else {
                tokio::time::sleep(Duration::from_millis(100)).await;
                Err(std::io::Error::other("owner killed"))
            }
        });
        axum::response::Response::new(axum::body::Body::from_stream(broken))
    })
    .await;
    let owner = RemoteBroker::new(addr);
    let pending = owner
        .append(&key, batch("a"), Acks::All, Duration::from_secs(1))
        .await
        .expect("sequenced");
    match pending.wait().await {
        Err(CallError::Broker(e)) => assert_eq!(e.kind(), ErrorKind::OutcomeUnknown, "{e}"),
        r => panic!("expected an unknown outcome, got {r:?}"),
    }
    server.abort();

    // Taken, and the owner goes away before it answers.
    let (taken_tx, taken_rx) = tokio::sync::mpsc::unbounded_channel::<()>();
    let (addr, server) = fake_owner(move || {
        let taken = taken_tx.clone();
        async move {
            let _ = taken.send(());
            std::future::pending::<axum::response::Response>().await
        }
    })
    .await;
    let owner = RemoteBroker::new(addr);
    let call = tokio::spawn(async move {
        owner
            .append(&key, batch("b"), Acks::All, Duration::from_secs(1))
            .await
            .map(|_| ())
    });
    let mut taken_rx = taken_rx;
    taken_rx.recv().await.expect("the owner took the produce");
    server.abort();
    let _ = server.await;
    match call.await.unwrap() {
        Err(CallError::Broker(e)) => assert_eq!(e.kind(), ErrorKind::OutcomeUnknown, "{e}"),
        r => panic!("expected an unknown outcome, got {r:?}"),
    }

    // Nobody listens: never sent, a routing failure the proxy may retry.
    let closed = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = closed.local_addr().unwrap().to_string();
    drop(closed);
    let owner = RemoteBroker::new(addr);
    match owner
        .append(&key, batch("c"), Acks::All, Duration::from_secs(1))
        .await
    {
        Err(CallError::Routing(e)) => assert_eq!(e.kind(), RoutingErrorKind::Unreachable, "{e}"),
        r => panic!("expected an unreachable owner, got {r:?}"),
    }
}

/// The share groups' admin routes over the RPC: a share-partition's start
/// moved (kept within the log) and deleted at the partition's owner, and a
/// group's kind, listing and deletion at its coordinator.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_share_admin_routes_answer_over_the_rpc() {
    use floe_broker::share::{
        GroupKind, MemberId, ShareCall, ShareGroupAdmin, ShareGroupError, SharePartitionAdmin,
        ShareSettings,
    };

    let env = Cluster::start().await;
    let t = env.create_topic("share-admin", 1, &[]).await;
    let key = PartitionKey::new(t, 0);
    let b = env.broker(|_| {}).await;
    wait_owned(&b, key).await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(floe_broker::server::serve(
        listener,
        b.clone(),
        floe_metadata::http_server::HttpLimits::with_body_limit(floe_broker::rpc::MAX_BODY_BYTES),
    ));
    let client = RemoteBroker::new(addr.to_string());
    for value in ["a", "b", "c"] {
        let owner: &dyn PartitionOwner = &client;
        owner
            .append(&key, batch(value), Acks::All, Duration::from_secs(5))
            .await
            .unwrap()
            .wait()
            .await
            .unwrap();
    }

    let call = ShareCall {
        group: "g".into(),
        key,
        member: MemberId::new(""),
        settings: ShareSettings::default(),
    };
    let owner: &dyn SharePartitionAdmin = &client;
    assert_eq!(owner.share_reset(&call, Some(1)).await.unwrap(), Some(1));
    // Past the end: kept at the end.
    assert_eq!(owner.share_reset(&call, Some(99)).await.unwrap(), Some(3));

    // The coordinator takes its shards over in the background.
    let coordinator: &dyn ShareGroupAdmin = &client;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let kind = loop {
        match coordinator.share_check_empty("g", false).await {
            Err(ShareGroupError::NotCoordinator) if tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            other => break other,
        }
    };
    // Its stored state makes it a share group, without members.
    assert_eq!(kind, Ok(Some(GroupKind::Share)));
    assert_eq!(coordinator.share_groups().await, Ok(vec![]));
    assert_eq!(coordinator.share_delete_group("g").await, Ok(()));

    // Deleted at the owner: nothing stored, the id is free again.
    assert_eq!(owner.share_reset(&call, None).await.unwrap(), None);
    assert_eq!(coordinator.share_check_empty("g", false).await, Ok(None));

    // A check that holds the group: a member's join waits for the release.
    assert_eq!(coordinator.share_check_empty("g", true).await, Ok(None));
    let joining = {
        let client = client.clone();
        tokio::spawn(async move {
            let join = floe_broker::share::Heartbeat {
                member_id: MemberId::new("m"),
                member_epoch: 0,
                subscribed_topics: Some(vec!["share-admin".into()]),
                rack_id: None,
            };
            let c: &dyn floe_broker::share::ShareCoordinator = &client;
            c.share_heartbeat("g", &join, &ShareSettings::default())
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !joining.is_finished(),
        "a member joined a group held by an admin request"
    );
    coordinator.share_release("g").await;
    let joined = tokio::time::timeout(Duration::from_secs(10), joining)
        .await
        .expect("the join did not go on after the release")
        .unwrap();
    assert!(joined.is_ok(), "{joined:?}");
    // Now it has a member: an admin check is refused, and holds nothing.
    assert_eq!(
        coordinator.share_check_empty("g", true).await,
        Err(ShareGroupError::NonEmptyGroup)
    );
    server.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_coordinator_whose_address_refuses_connections_is_known_as_refused() {
    // Nothing listens at the address: a group call is NOT_COORDINATOR, and
    // the client notes the refusal (the proxy then reports the broker down).
    let addr = free_addr();
    let remote = RemoteBroker::new(addr.to_string());
    assert!(!remote.refused());
    let d = Coordinator::describe_group(&remote, "g").await;
    assert_eq!(
        d.error,
        Some(floe_broker::group::GroupError::NotCoordinator)
    );
    assert!(remote.refused(), "a refused connection was not noted");
}
