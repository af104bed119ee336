//! One group behind its lock, the task that wakes it when something in it
//! times out, and the task that writes it to the [`GroupStore`]. The timer
//! task runs only while the group has a deadline and sleeps on Tokio's
//! clock, so tests can pause and advance time; the writer runs only while
//! the store is behind the group, one write at a time, each of the group as
//! it is then (so writes land in order and the last one wins).

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::sync::Notify;
use tokio::time::Instant;

use super::record::GroupStore;
use super::state::{Durable, Group};
use super::types::{GroupConfig, GroupError};

/// How long one write to the store may take before it counts as failed.
const STORE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

#[derive(Debug)]
pub(super) struct GroupHandle {
    group: Mutex<Group>,
    /// Wakes the timer task early: a deadline earlier than the one it sleeps
    /// until was set, or the group died.
    wake: Notify,
    /// `None`: nothing is stored (every change counts as stored at once).
    store: Option<Arc<dyn GroupStore>>,
}

impl GroupHandle {
    pub fn new(
        id: String,
        first_generation: i32,
        shard_epoch: u64,
        store: Option<Arc<dyn GroupStore>>,
    ) -> Arc<Self> {
        Self::with_group(Group::new(id, first_generation, shard_epoch), store)
    }

    pub fn with_group(group: Group, store: Option<Arc<dyn GroupStore>>) -> Arc<Self> {
        Arc::new(Self {
            group: Mutex::new(group),
            wake: Notify::new(),
            store,
        })
    }

    pub fn lock(&self) -> MutexGuard<'_, Group> {
        // A panic under the lock leaves the group as it was at that point;
        // later calls still get answers.
        self.group.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Makes sure the store is brought up to date and the timer task wakes
    /// for the group's next deadline. Called with the lock held after every
    /// change.
    pub fn arm(self: &Arc<Self>, group: &mut Group, cfg: &Arc<GroupConfig>) {
        self.persist(group, cfg);
        self.arm_timer(group, cfg);
    }

    /// Starts the writer if the store is behind the group (without a store,
    /// the change counts as stored now).
    fn persist(self: &Arc<Self>, group: &mut Group, cfg: &Arc<GroupConfig>) {
        if group.persist_running {
            return;
        }
        let Some(store) = self.store.clone() else {
            while let Some((version, durable)) = group.next_write() {
                let forget = durable == Durable::Forget;
                group.on_written(version, forget, Ok(()), cfg, Instant::now());
            }
            return;
        };
        if group.next_write().is_none() {
            return;
        }
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => {
                group.persist_running = true;
                rt.spawn(run_writer(self.clone(), cfg.clone(), store));
            }
            Err(_) => {
                tracing::error!(group = %group.id, "no tokio runtime: the group cannot be stored");
            }
        }
    }

    fn arm_timer(self: &Arc<Self>, group: &mut Group, cfg: &Arc<GroupConfig>) {
        let Some(next) = group.next_deadline() else {
            if group.timer_running {
                // Let it notice there is nothing left and stop.
                self.wake.notify_one();
            }
            return;
        };
        if !group.timer_running {
            match tokio::runtime::Handle::try_current() {
                Ok(rt) => {
                    group.timer_running = true;
                    group.timer_wake = Some(next);
                    rt.spawn(run_timer(self.clone(), cfg.clone()));
                }
                Err(_) => {
                    tracing::error!(group = %group.id, "no tokio runtime: group timers cannot run");
                }
            }
        } else if group.timer_wake.is_none_or(|wake| next < wake) {
            group.timer_wake = Some(next);
            self.wake.notify_one();
        }
    }
}

/// Sleeps until the group's next deadline, acts on what timed out, and
/// stops when the group has no deadline left (or is dead).
async fn run_timer(handle: Arc<GroupHandle>, cfg: Arc<GroupConfig>) {
    loop {
        let wake_at = {
            let mut group = handle.lock();
            group.on_timer(&cfg, Instant::now());
            handle.persist(&mut group, &cfg);
            match group.next_deadline() {
                Some(next) => {
                    group.timer_wake = Some(next);
                    next
                }
                None => {
                    group.timer_running = false;
                    group.timer_wake = None;
                    return;
                }
            }
        };
        tokio::select! {
            () = tokio::time::sleep_until(wake_at) => {}
            () = handle.wake.notified() => {}
        }
    }
}

/// Writes the group while the store is behind it, one write at a time. A
/// failed write stops it (the next change starts it again), so a store that
/// is down is not called in a loop.
async fn run_writer(handle: Arc<GroupHandle>, cfg: Arc<GroupConfig>, store: Arc<dyn GroupStore>) {
    loop {
        let (version, durable, id, shard_epoch) = {
            let mut group = handle.lock();
            match group.next_write() {
                Some((version, durable)) => (version, durable, group.id.clone(), group.shard_epoch),
                None => {
                    group.persist_running = false;
                    return;
                }
            }
        };
        let forget = durable == Durable::Forget;
        let bytes = match durable {
            Durable::Record(r) => Some(r.to_bytes()),
            Durable::Forget => None,
        };
        let shard = super::shard_of(&id, cfg.shards);
        let result =
            tokio::time::timeout(STORE_TIMEOUT, store.write(shard, shard_epoch, &id, bytes))
                .await
                .unwrap_or(Err(GroupError::CoordinatorNotAvailable));
        let mut group = handle.lock();
        group.on_written(version, forget, result, &cfg, Instant::now());
        if result.is_err() {
            group.persist_running = false;
        }
        handle.arm_timer(&mut group, &cfg);
        if result.is_err() {
            return;
        }
    }
}
