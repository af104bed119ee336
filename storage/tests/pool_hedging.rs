//! The pool's adaptive write deadline, hedged writes and probes, against
//! in-process stores with injected delays and hangs. Time is tokio's paused
//! clock: the durations asserted are virtual, so they are exact whatever
//! the machine's load.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use bytes::Bytes;
use floe_storage::fault::{Fault, FaultOps};
use floe_storage::{EndpointId, ObjectKey, ObjectRef, PoolOptions};
use tokio::time::Instant;

mod common;
use common::pool::{Fixture, fixture, keys_in};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

impl Fixture {
    async fn write(&self, bytes: usize) -> (ObjectRef, Duration) {
        let started = Instant::now();
        let obj = self
            .pool
            .put_new(
                |t| ObjectKey::new(format!("wal/1/{t}.wal")),
                Bytes::from(vec![7u8; bytes]).into(),
            )
            .await
            .unwrap();
        (obj, started.elapsed())
    }

    /// Enough fast writes that every endpoint's deadline is learnt (the
    /// in-memory stores answer at once: the deadline falls to its floor).
    async fn warm(&self) {
        for _ in 0..40 {
            self.write(100).await;
        }
        for id in self.pool.endpoint_ids() {
            assert_eq!(self.pool.write_deadline(id, 0).unwrap(), ms(250));
        }
    }

    fn counts(&self) -> Vec<(u64, u64, u64)> {
        self.pool
            .stats()
            .iter()
            .map(|s| (s.written, s.abandoned, s.hedged))
            .collect()
    }
}

#[tokio::test(start_paused = true)]
async fn a_new_endpoint_allows_the_ceiling_and_a_warm_one_the_floor() {
    let f = fixture(1, PoolOptions::default());
    let e0 = EndpointId::new("e0");
    assert_eq!(f.pool.write_deadline(&e0, 0).unwrap(), ms(1000));
    f.warm().await;
    // 16 MiB more: 64 ms per MiB.
    assert_eq!(
        f.pool.write_deadline(&e0, 16 * 1024 * 1024).unwrap(),
        ms(250 + 1024)
    );
}

#[tokio::test(start_paused = true)]
async fn a_hung_endpoint_costs_a_write_its_adaptive_deadline_not_the_hard_one() {
    let f = fixture(2, PoolOptions::default());
    f.warm().await;
    let before = f.counts();
    f.faults[0].set(Fault::Hang, FaultOps::Writes);
    let mut slowest = Duration::ZERO;
    for _ in 0..6 {
        let (obj, took) = f.write(64 * 1024).await;
        assert_eq!(obj.endpoint.as_str(), "e1");
        slowest = slowest.max(took);
    }
    // The one write that started on e0 was hedged after 250 ms + 4 ms for
    // its 64 KiB, and the hedge on e1 landed at once; the others skipped
    // the benched e0.
    assert_eq!(slowest, ms(254));
    assert_eq!(f.faults[0].puts(), before[0].0 + 1);
    let after = f.counts();
    assert_eq!(after[0].2, 1, "one hedge away from e0");
    assert_eq!(after[0].1, 1, "and that attempt abandoned");
    assert!(f.pool.is_benched(&EndpointId::new("e0")));
    // The hung attempt ends at the hard deadline (10 s); nothing of it stays.
    tokio::time::sleep(Duration::from_secs(12)).await;
    let on_e1 = keys_in(&f.raw[1]).await.len();
    assert_eq!(
        on_e1 as u64, after[1].0,
        "one object per landed write on e1"
    );
}

#[tokio::test(start_paused = true)]
async fn a_slow_endpoint_loses_the_race_and_its_late_object_is_deleted() {
    let f = fixture(2, PoolOptions::default());
    f.warm().await;
    let settled = |f: &Fixture| {
        let raw = f.raw.clone();
        async move { (keys_in(&raw[0]).await.len(), keys_in(&raw[1]).await.len()) }
    };
    let (n0, n1) = settled(&f).await;
    f.faults[0].set(Fault::Delay(ms(500)), FaultOps::Writes);
    let mut landed = Vec::new();
    for _ in 0..4 {
        let (obj, took) = f.write(1024).await;
        assert!(took <= ms(251), "{took:?}");
        landed.push(obj);
    }
    assert!(landed.iter().all(|o| o.endpoint.as_str() == "e1"));
    // e0's attempt landed 250 ms after the hedge won: it is deleted.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(settled(&f).await, (n0, n1 + 4));
    for obj in &landed {
        assert_eq!(f.pool.get(obj).await.unwrap().len(), 1024);
    }
}

#[tokio::test(start_paused = true)]
async fn a_large_object_is_not_hedged_for_its_size() {
    let f = fixture(2, PoolOptions::default());
    f.warm().await;
    // 800 ms for 16 MiB on both: inside 250 ms + 1024 ms.
    f.faults[0].set(Fault::Delay(ms(800)), FaultOps::Writes);
    f.faults[1].set(Fault::Delay(ms(800)), FaultOps::Writes);
    for _ in 0..2 {
        let (_, took) = f.write(16 * 1024 * 1024).await;
        assert_eq!(took, ms(800));
    }
    assert!(f.counts().iter().all(|c| c.2 == 0), "{:?}", f.counts());
    // The same 800 ms for a small object is slow: hedged.
    f.faults[1].clear();
    let mut hedged = false;
    for _ in 0..2 {
        let (obj, took) = f.write(1024).await;
        assert_eq!(obj.endpoint.as_str(), "e1");
        hedged |= took >= ms(250);
    }
    assert!(hedged);
    assert_eq!(f.counts()[0].2, 1);
}

#[tokio::test(start_paused = true)]
async fn with_one_endpoint_the_hedge_goes_to_the_same_endpoint_under_a_new_key() {
    let f = fixture(1, PoolOptions::default());
    f.warm().await;
    let n = keys_in(&f.raw[0]).await.len();
    // One request hangs (a dead connection); the next one goes through.
    f.faults[0].set_times(Fault::Hang, FaultOps::Writes, 1);
    let (obj, took) = f.write(1024).await;
    // 250 ms and a sliver for 1 KiB, rounded up to the timer's millisecond.
    assert!(took >= ms(250) && took <= ms(252), "{took:?}");
    assert_eq!(obj.endpoint.as_str(), "e0");
    assert_eq!(f.counts()[0].2, 1);
    // The hedge landed within its deadline: the endpoint is not benched.
    assert!(!f.pool.is_benched(&EndpointId::new("e0")));
    tokio::time::sleep(Duration::from_secs(12)).await;
    assert_eq!(keys_in(&f.raw[0]).await.len(), n + 1);
}

#[tokio::test(start_paused = true)]
async fn a_benched_endpoint_takes_writes_again_only_after_a_probe_passes() {
    let f = fixture(2, PoolOptions::default());
    f.warm().await;
    let cooldown = f.pool.options().bench_cooldown;
    f.faults[0].set(Fault::Error, FaultOps::Writes);
    for _ in 0..2 {
        f.write(1024).await;
    }
    assert!(f.pool.is_benched(&EndpointId::new("e0")));
    // Back, but slow: after the cooldown its probe is too slow, so it stays
    // benched and no real write goes there.
    f.faults[0].set(Fault::Delay(ms(2000)), FaultOps::Writes);
    tokio::time::sleep(cooldown + ms(10)).await;
    let puts = f.faults[0].puts();
    for _ in 0..20 {
        let (obj, _) = f.write(1024).await;
        assert_eq!(obj.endpoint.as_str(), "e1");
        tokio::time::sleep(ms(100)).await;
    }
    assert_eq!(f.faults[0].puts(), puts + 1, "one probe, no real write");
    assert!(f.pool.is_benched(&EndpointId::new("e0")));
    // Healthy again: the next probe passes and e0 takes its share.
    f.faults[0].clear();
    tokio::time::sleep(cooldown).await;
    let mut on_e0 = 0;
    for _ in 0..20 {
        let (obj, _) = f.write(1024).await;
        on_e0 += (obj.endpoint.as_str() == "e0") as usize;
        tokio::time::sleep(ms(10)).await;
    }
    assert!(on_e0 >= 5, "{on_e0}");
    assert!(!f.pool.is_benched(&EndpointId::new("e0")));
    // The probes deleted their objects.
    tokio::time::sleep(Duration::from_secs(12)).await;
    let left = keys_in(&f.raw[0]).await;
    assert!(left.iter().all(|k| !k.starts_with("_floe/")), "{left:?}");
}

#[tokio::test(start_paused = true)]
async fn a_read_slower_than_usual_is_asked_again_beside_the_first() {
    let f = fixture(1, PoolOptions::default());
    let (obj, _) = f.write(4096).await;
    // Reads learn the endpoint's read latency too (the floor, here).
    for _ in 0..20 {
        f.pool.get(&obj).await.unwrap();
    }
    let gets = f.faults[0].gets();
    // One request hangs (a dead connection): the second answers after the
    // deadline, not after the 10 s read timeout.
    f.faults[0].set_times(Fault::Hang, FaultOps::Reads, 1);
    let started = Instant::now();
    assert_eq!(f.pool.get(&obj).await.unwrap().len(), 4096);
    let took = started.elapsed();
    assert!(took >= ms(250) && took <= ms(252), "{took:?}");
    assert_eq!(f.faults[0].gets(), gets + 2);
    // An endpoint whose reads all hang still fails the read, after the
    // read timeout of each attempt: the object is nowhere else.
    f.faults[0].set(Fault::Hang, FaultOps::Reads);
    let started = Instant::now();
    let err = f.pool.get(&obj).await.unwrap_err();
    assert_eq!(err.kind(), floe_storage::ErrorKind::Timeout);
    assert!(started.elapsed() >= Duration::from_secs(30));
}
