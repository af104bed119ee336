//! One group behind its lock, and the task that wakes it when something in
//! it times out. The task runs only while the group has a deadline and
//! sleeps on Tokio's clock, so tests can pause and advance time.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::sync::Notify;
use tokio::time::Instant;

use super::state::Group;
use super::types::GroupConfig;

#[derive(Debug)]
pub(super) struct GroupHandle {
    group: Mutex<Group>,
    /// Wakes the timer task early: a deadline earlier than the one it sleeps
    /// until was set, or the group died.
    wake: Notify,
}

impl GroupHandle {
    pub fn new(id: String, first_generation: i32) -> Arc<Self> {
        Arc::new(Self {
            group: Mutex::new(Group::new(id, first_generation)),
            wake: Notify::new(),
        })
    }

    pub fn lock(&self) -> MutexGuard<'_, Group> {
        // A panic under the lock leaves the group as it was at that point;
        // later calls still get answers.
        self.group.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Makes sure the timer task wakes for the group's next deadline. Called
    /// with the lock held after every change.
    pub fn arm(self: &Arc<Self>, group: &mut Group, cfg: &Arc<GroupConfig>) {
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
