//! The clocks of the node proposing a command.
//!
//! [`now_ms`] is the wall clock, for what clients see as dates (producer
//! state, transactions, commit times).
//!
//! [`lease_now_ms`] is the clock leases are measured on (registrations,
//! heartbeats, their expiry, hand-over deadlines, dead nodes' times): the
//! wall clock as this process first read it, advanced by the monotonic
//! clock since. A step of the wall clock while the process runs (set by
//! hand, stepped by NTP, a virtual machine resumed) moves no lease: a leader
//! whose wall clock jumped forward would otherwise declare every broker's
//! lease over at once while each broker, counting on its own monotonic clock
//! (`broker/src/partitions/lease.rs`), still serves for up to a lease, and
//! a cut-off owner would answer with a stale view while another broker
//! takes writes (found by `tests/test_faults_net.py`). Leases are only ever
//! compared with stamps of the same leader: a new leader renews every lease
//! on its own clock first (`controller::renew_all`).

use std::sync::OnceLock;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch (0 if the clock is before it).
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// The lease clock: milliseconds since the Unix epoch as the wall clock
/// read when this process first asked, plus the monotonic time since.
pub fn lease_now_ms() -> u64 {
    static ANCHOR: OnceLock<(u64, Instant)> = OnceLock::new();
    let (wall, at) = *ANCHOR.get_or_init(|| (now_ms(), Instant::now()));
    anchored(wall, at, Instant::now())
}

/// `wall` (read at `at`) advanced by the monotonic time from `at` to `now`.
fn anchored(wall: u64, at: Instant, now: Instant) -> u64 {
    let elapsed = now.saturating_duration_since(at).as_millis();
    wall.saturating_add(u64::try_from(elapsed).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn the_lease_clock_advances_with_the_monotonic_clock_only() {
        let at = Instant::now();
        assert_eq!(anchored(1_000, at, at), 1_000);
        assert_eq!(
            anchored(1_000, at, at + Duration::from_millis(2_500)),
            3_500
        );
        // An instant before the anchor (never, but) does not go back.
        assert_eq!(anchored(1_000, at + Duration::from_secs(1), at), 1_000);
        assert_eq!(
            anchored(u64::MAX - 1, at, at + Duration::from_secs(1)),
            u64::MAX
        );
    }

    #[test]
    fn the_lease_clock_starts_at_the_wall_clock_and_never_goes_back() {
        let wall = now_ms();
        let first = lease_now_ms();
        let second = lease_now_ms();
        assert!(second >= first);
        // Anchored at the first read in this process: close to the wall clock
        // when nothing stepped it.
        assert!(first.abs_diff(wall) < 60_000, "{first} vs {wall}");
    }
}
