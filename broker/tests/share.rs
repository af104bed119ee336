//! Share groups across two brokers in one process, each serving its
//! internal RPC on 127.0.0.1: the coordinator of a group and the owner of
//! a partition are different brokers, as in a cluster of processes.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use bytes::Bytes;
use floe_broker::share::{
    AutoOffsetReset, Heartbeat, MemberId, ShareCall, ShareCoordinator, ShareOwner, ShareSettings,
};
use floe_broker::{Acks, Broker};
use floe_storage::PartitionKey;
use floe_storage::records::{BatchBuilder, RecordSpec};
use floe_testkit::Cluster;

/// A broker with id `id` whose advertised RPC address is served.
async fn served_broker(env: &Cluster, id: u32) -> Broker {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let b = env
        .broker(|c| {
            c.id = id;
            c.advertise = addr;
        })
        .await;
    tokio::spawn(floe_broker::server::serve(
        listener,
        b.clone(),
        floe_metadata::http_server::HttpLimits::with_body_limit(floe_broker::rpc::MAX_BODY_BYTES),
    ));
    b
}

fn records(n: usize) -> Bytes {
    let mut b = BatchBuilder::new(0, 1);
    for i in 0..n {
        b.push(RecordSpec::new(None, Some(vec![i as u8]), 0));
    }
    b.build(floe_storage::batch::Compression::None).unwrap()
}

/// Waits (up to 20 s) for `pick` to find something.
async fn eventually<T>(mut pick: impl FnMut() -> Option<T>) -> T {
    let started = Instant::now();
    loop {
        if let Some(found) = pick() {
            return found;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "never happened"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_leaving_at_its_coordinator_releases_its_records_at_another_owner() {
    let env = Cluster::start().await;
    let t = env.create_topic("queue", 1, &[]).await;
    let key = PartitionKey::new(t, 0);
    let one = served_broker(&env, 1).await;
    let two = served_broker(&env, 2).await;
    // Which broker owns the partition, and a group coordinated by the other.
    let (owner, other) = eventually(|| {
        if one.owned().contains(&key) {
            Some((one.clone(), two.clone()))
        } else if two.owned().contains(&key) {
            Some((two.clone(), one.clone()))
        } else {
            None
        }
    })
    .await;
    let group = eventually(|| {
        let shards = other.view().current().shard_count();
        let owned = other.owned_shards();
        (0..1000)
            .map(|i| format!("g{i}"))
            .find(|g| owned.contains(&floe_broker::group::shard_of(g, shards)))
    })
    .await;
    // Both brokers see each other's address.
    eventually(|| {
        let snap = other.view().current();
        snap.broker_addr(floe_types::BrokerId(owner.id()))
            .map(|_| ())
    })
    .await;
    owner
        .append(&key, &records(3), Acks::All)
        .unwrap()
        .wait()
        .await
        .unwrap();

    let settings = ShareSettings {
        reset: AutoOffsetReset::Earliest,
        ..ShareSettings::default()
    };
    let leaver = MemberId::new("leaver");
    let join = Heartbeat {
        member_id: leaver.clone(),
        member_epoch: 0,
        subscribed_topics: Some(vec!["queue".into()]),
        rack_id: None,
    };
    let epoch = other
        .share()
        .share_heartbeat(&group, &join, &settings)
        .await
        .unwrap()
        .member_epoch;
    let call = |member: &MemberId| ShareCall {
        group: group.clone(),
        key,
        member: member.clone(),
        settings: settings.clone(),
    };
    let got = owner
        .share()
        .share_fetch(&call(&leaver), 10, 1 << 20)
        .await
        .unwrap();
    assert_eq!(got.acquired.len(), 1);
    assert_eq!(got.acquired[0].delivery_count, 1);

    // It leaves through its coordinator, which does not own the partition.
    let leave = Heartbeat {
        member_epoch: -1,
        subscribed_topics: None,
        ..join
    };
    assert!(epoch > 0);
    other
        .share()
        .share_heartbeat(&group, &leave, &settings)
        .await
        .unwrap();

    // Its records come back at the owner long before their 30 s locks.
    let taker = MemberId::new("taker");
    let started = Instant::now();
    loop {
        let got = owner
            .share()
            .share_fetch(&call(&taker), 10, 1 << 20)
            .await
            .unwrap();
        if let Some(a) = got.acquired.first() {
            assert_eq!((a.first.0, a.last.0, a.delivery_count), (0, 2, 2));
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the left member's records were not released at the owner"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_share_state_is_deleted_only_by_the_owner_at_the_epoch_it_holds() {
    use floe_broker::share::durable::ShareStore;
    use floe_broker::share::partition::ShareSnapshot;

    let env = Cluster::start().await;
    let t = env.create_topic("queue", 1, &[]).await;
    let key = PartitionKey::new(t, 0);
    let b = served_broker(&env, 1).await;
    let epoch = eventually(|| b.share().owned_epoch(&key)).await;
    let state = ShareSnapshot {
        start: floe_types::Offset(7),
        ..ShareSnapshot::default()
    };
    b.share().save("sg", &key, epoch, &state).await.unwrap();

    // Not at the epoch the partition is held at (as an owner paused past
    // a move would send): refused, and the state stays.
    let refused = b.share().forget("sg", &key, epoch + 1).await;
    assert!(refused.is_err(), "{refused:?}");
    let kept = b
        .share()
        .load("sg", &key)
        .await
        .unwrap()
        .expect("state kept");
    assert_eq!(kept.start, floe_types::Offset(7));

    b.share().forget("sg", &key, epoch).await.unwrap();
    assert!(b.share().load("sg", &key).await.unwrap().is_none());
}
