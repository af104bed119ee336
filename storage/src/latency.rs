//! The adaptive write deadline of one endpoint, from the latency of its
//! recent successful writes.
//!
//! Each sample is a write's latency minus the allowance for its size (so
//! that large objects do not make the deadline of small ones long), and the
//! deadline of an `n`-byte write is
//!
//! `clamp(multiplier × p90(samples), min, max) + n × per_mib / MiB`,
//!
//! and never more than the hard `write_timeout`. With fewer than
//! [`MIN_SAMPLES`] samples (a new endpoint) the deadline is `max`, plus the
//! size allowance.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::Duration;

/// Samples kept per endpoint.
const WINDOW: usize = 64;
/// Samples needed before the percentile is trusted.
pub(crate) const MIN_SAMPLES: usize = 8;

/// How the deadline is derived (part of [`crate::PoolOptions`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DeadlinePolicy {
    /// Least deadline of the latency part.
    pub min: Duration,
    /// Most deadline of the latency part.
    pub max: Duration,
    /// Added per MiB of the write, so a large object is not abandoned for
    /// being large (64 ms per MiB: 16 MiB may take a second more).
    pub per_mib: Duration,
    /// How many times the 90th percentile of recent latencies a write may
    /// take before it is hedged.
    pub multiplier: f64,
}

impl Default for DeadlinePolicy {
    fn default() -> Self {
        Self {
            min: Duration::from_millis(250),
            max: Duration::from_millis(1000),
            per_mib: Duration::from_millis(64),
            multiplier: 4.0,
        }
    }
}

impl DeadlinePolicy {
    /// The time allowed for `bytes` on top of the latency part.
    pub fn size_allowance(&self, bytes: u64) -> Duration {
        self.per_mib.mul_f64(bytes as f64 / (1024.0 * 1024.0))
    }
}

/// Recent write latencies of one endpoint, size allowance taken off.
#[derive(Debug, Default)]
pub(crate) struct LatencyWindow {
    samples: Mutex<VecDeque<Duration>>,
}

impl LatencyWindow {
    /// Records a successful write of `bytes` that took `took`.
    pub(crate) fn record(&self, policy: &DeadlinePolicy, took: Duration, bytes: u64) {
        let base = took.saturating_sub(policy.size_allowance(bytes));
        let mut s = self.samples.lock().unwrap_or_else(|p| p.into_inner());
        if s.len() == WINDOW {
            s.pop_front();
        }
        s.push_back(base);
    }

    /// The 90th percentile of the samples; `None` with too few.
    pub(crate) fn p90(&self) -> Option<Duration> {
        let s = self.samples.lock().unwrap_or_else(|p| p.into_inner());
        if s.len() < MIN_SAMPLES {
            return None;
        }
        let mut v: Vec<Duration> = s.iter().copied().collect();
        v.sort_unstable();
        let i = ((v.len() * 9).div_ceil(10)).saturating_sub(1);
        v.get(i).copied()
    }

    /// The deadline of a write of `bytes`, capped by `hard`.
    pub(crate) fn deadline(&self, policy: &DeadlinePolicy, bytes: u64, hard: Duration) -> Duration {
        let latency = match self.p90() {
            Some(p) => p.mul_f64(policy.multiplier).clamp(policy.min, policy.max),
            None => policy.max,
        };
        (latency + policy.size_allowance(bytes)).min(hard)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn a_new_endpoint_gets_the_ceiling_plus_the_size_allowance() {
        let p = DeadlinePolicy::default();
        let w = LatencyWindow::default();
        assert_eq!(w.deadline(&p, 0, ms(10_000)), ms(1000));
        assert_eq!(w.deadline(&p, 16 * 1024 * 1024, ms(10_000)), ms(2024));
        assert_eq!(w.deadline(&p, 16 * 1024 * 1024, ms(1500)), ms(1500));
    }

    #[test]
    fn fast_writes_bring_the_deadline_down_to_the_floor() {
        let p = DeadlinePolicy::default();
        let w = LatencyWindow::default();
        for _ in 0..20 {
            w.record(&p, ms(20), 1024);
        }
        assert_eq!(w.deadline(&p, 0, ms(10_000)), ms(250));
        // A quarter MiB: 16 ms more.
        assert_eq!(w.deadline(&p, 256 * 1024, ms(10_000)), ms(266));
    }

    #[test]
    fn slower_writes_raise_it_up_to_the_ceiling() {
        let p = DeadlinePolicy::default();
        let w = LatencyWindow::default();
        for _ in 0..20 {
            w.record(&p, ms(100), 0);
        }
        assert_eq!(w.deadline(&p, 0, ms(10_000)), ms(400));
        for _ in 0..64 {
            w.record(&p, ms(900), 0);
        }
        assert_eq!(w.deadline(&p, 0, ms(10_000)), ms(1000));
    }

    #[test]
    fn large_objects_do_not_lengthen_the_deadline_of_small_ones() {
        let p = DeadlinePolicy::default();
        let w = LatencyWindow::default();
        // 16 MiB in 600 ms is fast for its size: its sample is 0.
        for _ in 0..20 {
            w.record(&p, ms(600), 16 * 1024 * 1024);
        }
        assert_eq!(w.p90(), Some(Duration::ZERO));
        assert_eq!(w.deadline(&p, 0, ms(10_000)), ms(250));
    }

    #[test]
    fn the_percentile_ignores_a_few_outliers() {
        let p = DeadlinePolicy::default();
        let w = LatencyWindow::default();
        for i in 0..50 {
            w.record(&p, if i % 25 == 0 { ms(5000) } else { ms(30) }, 0);
        }
        assert_eq!(w.p90(), Some(ms(30)));
    }
}
