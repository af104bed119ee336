//! Delayed topics for classic consumers (`floe.delayed.delivery`): records
//! produced with a due time later than now are held in the partition's own
//! log as delayed batches (`hold`), and a scheduler per owned partition
//! appends each to the topic when due, at a new offset, with its key,
//! value, timestamp and headers (`run`, over the in-memory
//! `schedule` and the durable `cursor`). `docs/queues.md`, "Delayed
//! topics for classic consumers", says what a client sees.

pub(crate) mod cursor;
pub(crate) mod hold;
pub(crate) mod run;
pub(crate) mod schedule;

use std::collections::HashMap;
use std::sync::Mutex;

use floe_storage::PartitionKey;

use crate::partitions::Partitions;
use crate::partitions::log::Status;

pub use crate::config::DEFAULT_MAX_PENDING;

/// The schedulers running on this broker: one per owned partition of a
/// delayed topic, at the epoch it was started for.
#[derive(Debug, Default)]
pub(crate) struct Schedulers {
    running: Mutex<HashMap<PartitionKey, u64>>,
}

impl Schedulers {
    fn running(&self) -> std::sync::MutexGuard<'_, HashMap<PartitionKey, u64>> {
        self.running.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Starts a scheduler for each owned partition of a delayed topic that
    /// has none at its epoch (a take-over, or the config turned on).
    pub fn start_owned(b: &Partitions) {
        let limit = b.inner.cfg.delayed_max_pending;
        for log in b.logs() {
            let (epoch, wanted) = {
                let st = log.lock();
                (st.epoch, st.config.delayed && st.status == Status::Active)
            };
            if !wanted {
                continue;
            }
            let mut running = b.inner.delayed.running();
            if running.get(&log.key) == Some(&epoch) {
                continue;
            }
            running.insert(log.key, epoch);
            tokio::spawn(run::run(b.clone(), log.key, epoch, limit));
        }
    }

    /// A scheduler ended (the partition moved, or its topic is no longer
    /// delayed).
    pub fn finished(&self, key: &PartitionKey, epoch: u64) {
        let mut running = self.running();
        if running.get(key) == Some(&epoch) {
            running.remove(key);
        }
    }
}
