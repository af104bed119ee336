//! The coordinator runtime on its own: a `Runtime` over a broker's
//! partitions with a coordinator that records what the runtime asks of it.
//! Every shard the view gives the broker is loaded before it is served and
//! served once; a failed load leaves the shard unserved, is forgotten by
//! every coordinator, and is tried again.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use floe_broker::coordinator::{Runtime, ShardCoordinator, ShardTable};
use floe_metadata::command::ShardFence;
use floe_testkit::Cluster;

/// What the runtime asked, shard by shard.
#[derive(Debug, Default)]
struct Calls {
    taking: HashMap<u32, usize>,
    loads: HashMap<u32, usize>,
    served: HashMap<u32, usize>,
    dropped: HashMap<u32, usize>,
    /// Whether the table served the shard while it was being loaded.
    served_while_loading: bool,
}

/// Fails the first load of `fail_once`.
struct Recorder {
    calls: Mutex<Calls>,
    fail_once: u32,
    table: Mutex<Option<Arc<ShardTable>>>,
}

fn bump(m: &mut HashMap<u32, usize>, shard: u32) -> usize {
    let n = m.entry(shard).or_default();
    *n += 1;
    *n
}

#[async_trait::async_trait]
impl ShardCoordinator for Recorder {
    fn name(&self) -> &'static str {
        "recorder"
    }

    fn taking(&self, fence: &ShardFence) {
        bump(&mut self.calls.lock().unwrap().taking, fence.shard.0);
    }

    async fn load(&self, fence: &ShardFence) -> Result<usize, String> {
        let shard = fence.shard.0;
        let table = self.table.lock().unwrap().clone();
        let mut calls = self.calls.lock().unwrap();
        if table.is_some_and(|t| t.fence(shard).is_some()) {
            calls.served_while_loading = true;
        }
        if bump(&mut calls.loads, shard) == 1 && shard == self.fail_once {
            return Err("the store did not answer".into());
        }
        Ok(1)
    }

    fn served(&self, fence: &ShardFence) {
        bump(&mut self.calls.lock().unwrap().served, fence.shard.0);
    }

    fn dropped(&self, shard: u32) -> usize {
        bump(&mut self.calls.lock().unwrap().dropped, shard);
        0
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shards_are_loaded_before_they_are_served_and_a_failed_load_is_tried_again() {
    let env = Cluster::start().await;
    let broker = env.broker(|c| c.id = 1).await;
    // The broker's own runtime takes every shard over.
    let started = Instant::now();
    while broker.owned_shards().len() < 16 {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "shards never served"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // A second runtime over the same partitions, with its own table.
    let table = Arc::new(ShardTable::new(broker.partitions().clone()));
    let recorder = Arc::new(Recorder {
        calls: Mutex::default(),
        fail_once: 3,
        table: Mutex::new(Some(table.clone())),
    });
    let runtime = Arc::new(Runtime::new(
        broker.partitions().clone(),
        table.clone(),
        vec![recorder.clone() as Arc<dyn ShardCoordinator>],
    ));
    tokio::spawn(runtime.run());
    let started = Instant::now();
    while table.len() < 16 {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "served {:?}",
            table.owned()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let calls = std::mem::take(&mut *recorder.calls.lock().unwrap());
    assert!(
        !calls.served_while_loading,
        "a shard was served before its load ended"
    );
    for shard in 0..16u32 {
        let want_loads = if shard == 3 { 2 } else { 1 };
        assert_eq!(
            calls.loads.get(&shard),
            Some(&want_loads),
            "loads of {shard}"
        );
        assert_eq!(
            calls.taking.get(&shard),
            Some(&want_loads),
            "taking of {shard}"
        );
        assert_eq!(calls.served.get(&shard), Some(&1), "served of {shard}");
        // The failed load is forgotten by every coordinator, nothing else.
        let want_dropped = if shard == 3 { Some(&1) } else { None };
        assert_eq!(
            calls.dropped.get(&shard),
            want_dropped,
            "dropped of {shard}"
        );
        // The fence is the broker's own, at the epoch the metadata gave.
        let fence = table.fence(shard).expect("served");
        assert!(table.holds(&fence));
        assert_eq!(broker.shards().fence(shard), Some(fence));
    }
    broker.shutdown().await;
}
