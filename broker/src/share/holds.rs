//! Admin holds on share groups: AlterShareGroupOffsets,
//! DeleteShareGroupOffsets and DeleteGroups of a share group are decided at
//! the group's coordinator (no members) and carried out at the partitions'
//! owners after. Between the two, a member that joins would read from start
//! offsets about to move. So the coordinator holds the group from its
//! decision until the proxy that asked releases it (or [`ADMIN_HOLD`] has
//! passed, should that proxy go away): a join of the group waits meanwhile,
//! as in Kafka, where the join waits for the group's lock.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

/// The longest a group stays held without a release: the admin call's
/// deadline at the coordinator plus the resets at the owners.
pub const ADMIN_HOLD: Duration = Duration::from_secs(15);

#[derive(Debug, Default)]
pub struct AdminHolds {
    until: Mutex<HashMap<String, Instant>>,
    released: Notify,
}

impl AdminHolds {
    /// Lifts the hold on `group`, if any.
    pub fn release(&self, group: &str) {
        let removed = self
            .until
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(group)
            .is_some();
        if removed {
            self.released.notify_waiters();
        }
    }

    /// When the hold on `group` ends, if it is held now.
    fn held_until(&self, group: &str) -> Option<Instant> {
        let until = self.until.lock().unwrap_or_else(PoisonError::into_inner);
        until.get(group).copied().filter(|t| *t > Instant::now())
    }

    /// Holds `group` and runs `check` (its look at the group's members)
    /// in one step: a join runs either before both or after the hold
    /// ([`AdminHolds::join`]). A `check` that fails leaves it unheld.
    pub fn hold_while<T, E>(
        &self,
        group: &str,
        check: impl FnOnce() -> Result<T, E>,
    ) -> Result<T, E> {
        let now = Instant::now();
        let mut until = self.until.lock().unwrap_or_else(PoisonError::into_inner);
        until.retain(|_, t| *t > now);
        until.insert(group.to_string(), now + ADMIN_HOLD);
        let checked = check();
        if checked.is_err() {
            until.remove(group);
        }
        checked
    }

    /// Runs `join` (a member joining `group`) once the group is not held,
    /// in one step with that look ([`AdminHolds::hold_while`]).
    pub async fn join<R>(&self, group: &str, join: impl FnOnce() -> R) -> R {
        let mut join = Some(join);
        loop {
            self.wait_released(group).await;
            let until = self.until.lock().unwrap_or_else(PoisonError::into_inner);
            if until.get(group).is_none_or(|t| *t <= Instant::now())
                && let Some(join) = join.take()
            {
                let joined = join();
                drop(until);
                return joined;
            }
        }
    }

    /// Waits while `group` is held.
    pub async fn wait_released(&self, group: &str) {
        loop {
            let released = self.released.notified();
            tokio::pin!(released);
            // Registered before the check: a release in between wakes it.
            released.as_mut().enable();
            let Some(until) = self.held_until(group) else {
                return;
            };
            tokio::select! {
                _ = released => {}
                _ = tokio::time::sleep_until(until) => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hold(holds: &AdminHolds, group: &str) {
        holds.hold_while(group, || Ok::<(), ()>(())).expect("held");
    }

    #[tokio::test]
    async fn a_join_waits_for_the_release_or_the_end_of_the_hold() {
        let holds = std::sync::Arc::new(AdminHolds::default());
        holds.wait_released("g").await; // not held
        hold(&holds, "g");
        let waiter = {
            let holds = holds.clone();
            tokio::spawn(async move { holds.wait_released("g").await })
        };
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(
            !waiter.is_finished(),
            "a join went on while the group was held"
        );
        holds.wait_released("other").await; // another group is not held
        holds.release("g");
        waiter.await.unwrap();
        // Without a release, the hold ends on its own.
        hold(&holds, "g");
        let ends = holds.held_until("g").expect("held");
        assert!(ends <= Instant::now() + ADMIN_HOLD);
    }

    #[tokio::test]
    async fn a_failed_check_leaves_the_group_unheld_and_a_join_runs_once() {
        let holds = AdminHolds::default();
        let r: Result<(), &str> = holds.hold_while("g", || Err("not empty"));
        assert!(r.is_err());
        let mut runs = 0;
        holds.join("g", || runs += 1).await;
        assert_eq!(runs, 1);
        assert_eq!(holds.hold_while("g", || Ok::<_, ()>(7)), Ok(7));
        holds.release("g");
        assert_eq!(holds.join("g", || 8).await, 8);
    }
}
