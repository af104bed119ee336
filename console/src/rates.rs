//! This process's counters for the console's live charts, read from its
//! Prometheus text: totals now, and Produce latency percentiles over the
//! last few seconds from the request histogram's buckets.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Counters summed over their labels, by name.
const REQUESTS: &str = "floe_proxy_requests_total";
const BAD_REQUESTS: &str = "floe_proxy_bad_requests_total";
const PRODUCE_ERRORS: &str = "floe_proxy_produce_errors_total";
const BYTES_IN: &str = "floe_proxy_bytes_in_total";
const BYTES_OUT: &str = "floe_proxy_bytes_out_total";
const LATENCY_BUCKET: &str = "floe_proxy_request_seconds_bucket";

/// The API whose answer times the latency chart shows: a Produce's answer
/// time is the write path's (a Fetch's holds its long-poll wait).
const LATENCY_API: &str = "Produce";

/// The shortest interval latency percentiles are taken over: shorter, a
/// poll right after another would show a handful of requests.
const MIN_SPAN: Duration = Duration::from_millis(1500);
/// Samples older than this are dropped.
const KEEP: Duration = Duration::from_secs(60);
/// An answer younger than this is answered again (the pages poll every 2 s).
const FRESH: Duration = Duration::from_secs(1);

/// One reading of the process's metrics.
#[derive(Debug, Clone, Default, PartialEq)]
struct Sample {
    counters: BTreeMap<String, f64>,
    /// Cumulative Produce counts by bucket bound (seconds), in bound order.
    buckets: Vec<(f64, f64)>,
}

/// Reads the process's metrics and keeps recent readings.
pub struct Rates {
    render: Arc<dyn Fn() -> String + Send + Sync>,
    recent: Mutex<VecDeque<(Instant, Sample)>>,
    /// The last answer and when it was read.
    answered: Mutex<Option<(Instant, serde_json::Value)>>,
}

impl Rates {
    pub fn new(render: Arc<dyn Fn() -> String + Send + Sync>) -> Self {
        Rates {
            render,
            recent: Mutex::new(VecDeque::new()),
            answered: Mutex::new(None),
        }
    }

    /// The totals now and the latency percentiles since a reading at
    /// least 1.5 s old (null when none, or no request in between). A
    /// reading less than a second old is answered again: rendering every
    /// metric of a process that owns thousands of partitions costs more
    /// than a chart's point is worth, however many pages poll.
    pub fn now(&self) -> serde_json::Value {
        let at = Instant::now();
        if let Some(v) = self
            .answered
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .filter(|(t, _)| at.duration_since(*t) < FRESH)
            .map(|(_, v)| v.clone())
        {
            return v;
        }
        let v = self.read(at);
        *self.answered.lock().unwrap_or_else(|p| p.into_inner()) = Some((at, v.clone()));
        v
    }

    /// The process's Prometheus text now.
    pub(crate) fn text(&self) -> String {
        (self.render)()
    }

    fn read(&self, at: Instant) -> serde_json::Value {
        let sample = parse(&(self.render)());
        let latency = {
            let mut recent = self.recent.lock().unwrap_or_else(|p| p.into_inner());
            while recent
                .front()
                .is_some_and(|(t, _)| at.duration_since(*t) > KEEP)
            {
                recent.pop_front();
            }
            let before = recent
                .iter()
                .rev()
                .find(|(t, _)| at.duration_since(*t) >= MIN_SPAN)
                .map(|(_, s)| s.buckets.clone());
            // One reading a second at most is enough to find one old enough.
            if recent
                .back()
                .is_none_or(|(t, _)| at.duration_since(*t) >= Duration::from_secs(1))
            {
                recent.push_back((at, sample.clone()));
            }
            before.and_then(|b| percentiles(&b, &sample.buckets))
        };
        let c = |name: &str| sample.counters.get(name).copied().unwrap_or(0.0);
        let t_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        serde_json::json!({
            "t_ms": t_ms,
            "requests": c(REQUESTS),
            "errors": c(BAD_REQUESTS) + c(PRODUCE_ERRORS),
            "bytes_in": c(BYTES_IN),
            "bytes_out": c(BYTES_OUT),
            "latency": latency.map(|(p50, p99)| serde_json::json!({
                "p50_ms": p50 * 1000.0,
                "p99_ms": p99 * 1000.0,
            })),
        })
    }
}

/// The counters and latency buckets of a Prometheus text.
fn parse(text: &str) -> Sample {
    let mut out = Sample::default();
    let mut buckets: BTreeMap<u64, (f64, f64)> = BTreeMap::new();
    for line in text.lines() {
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let Some((series, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let Ok(value) = value.trim().parse::<f64>() else {
            continue;
        };
        let (name, labels) = match series.split_once('{') {
            Some((n, rest)) => (n, rest.trim_end_matches('}')),
            None => (series, ""),
        };
        if name == LATENCY_BUCKET {
            if label(labels, "api") != Some(LATENCY_API) {
                continue;
            }
            let Some(le) = label(labels, "le") else {
                continue;
            };
            let bound = if le == "+Inf" {
                f64::INFINITY
            } else {
                match le.parse::<f64>() {
                    Ok(b) => b,
                    Err(_) => continue,
                }
            };
            // Ordered by the bound's bits: bounds are positive, so their
            // bit patterns sort as the numbers do.
            let e = buckets.entry(bound.to_bits()).or_insert((bound, 0.0));
            e.1 += value;
        } else if [REQUESTS, BAD_REQUESTS, PRODUCE_ERRORS, BYTES_IN, BYTES_OUT].contains(&name) {
            *out.counters.entry(name.to_string()).or_default() += value;
        }
    }
    out.buckets = buckets.into_values().collect();
    out
}

/// The value of label `key` in `a="x",b="y"`.
pub(crate) fn label<'a>(labels: &'a str, key: &str) -> Option<&'a str> {
    labels.split(',').find_map(|kv| {
        let (k, v) = kv.split_once('=')?;
        (k.trim() == key).then(|| v.trim().trim_matches('"'))
    })
}

/// p50 and p99 (seconds) of the requests counted between two readings of
/// the same buckets, interpolated within the bucket each falls in.
fn percentiles(before: &[(f64, f64)], now: &[(f64, f64)]) -> Option<(f64, f64)> {
    let counts: Vec<(f64, f64)> = now
        .iter()
        .map(|&(bound, n)| {
            let was = before
                .iter()
                .find(|(b, _)| *b == bound)
                .map_or(0.0, |(_, c)| *c);
            (bound, (n - was).max(0.0))
        })
        .collect();
    let total = counts.last()?.1;
    if total <= 0.0 {
        return None;
    }
    let at = |q: f64| {
        let rank = q * total;
        let mut lower = (0.0, 0.0);
        for &(bound, cum) in &counts {
            if cum >= rank {
                if bound.is_infinite() {
                    return lower.0;
                }
                let span = cum - lower.1;
                let within = if span > 0.0 {
                    (rank - lower.1) / span
                } else {
                    1.0
                };
                return lower.0 + (bound - lower.0) * within;
            }
            lower = (bound, cum);
        }
        lower.0
    };
    Some((at(0.5), at(0.99)))
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "# TYPE floe_proxy_requests_total counter\n\
        floe_proxy_requests_total 42\n\
        floe_proxy_bytes_in_total 1000\n\
        floe_proxy_produce_errors_total{error=\"NotLeaderOrFollower\"} 2\n\
        floe_proxy_produce_errors_total{error=\"RequestTimedOut\"} 1\n\
        floe_proxy_request_seconds_bucket{api=\"Produce\",le=\"0.01\"} 5\n\
        floe_proxy_request_seconds_bucket{api=\"Produce\",le=\"0.1\"} 9\n\
        floe_proxy_request_seconds_bucket{api=\"Produce\",le=\"+Inf\"} 10\n\
        floe_proxy_request_seconds_bucket{api=\"Fetch\",le=\"0.01\"} 0\n\
        floe_proxy_request_seconds_bucket{api=\"Fetch\",le=\"0.1\"} 0\n\
        floe_proxy_request_seconds_bucket{api=\"Fetch\",le=\"+Inf\"} 10\n";

    #[test]
    fn counters_are_summed_over_their_labels() {
        let s = parse(TEXT);
        assert_eq!(s.counters[REQUESTS], 42.0);
        assert_eq!(s.counters[PRODUCE_ERRORS], 3.0);
        // Produce's answer times only: a Fetch's hold its long-poll wait.
        assert_eq!(
            s.buckets,
            vec![(0.01, 5.0), (0.1, 9.0), (f64::INFINITY, 10.0)]
        );
    }

    #[test]
    fn percentiles_come_from_the_requests_between_two_readings() {
        let before = vec![(0.01, 0.0), (0.1, 0.0), (f64::INFINITY, 0.0)];
        let now = vec![(0.01, 50.0), (0.1, 100.0), (f64::INFINITY, 100.0)];
        let (p50, p99) = percentiles(&before, &now).expect("requests");
        assert!((p50 - 0.01).abs() < 1e-9, "{p50}");
        assert!(p99 > 0.09 && p99 <= 0.1, "{p99}");
        // Nothing new in between: no percentiles.
        assert_eq!(percentiles(&now, &now), None);
    }

    #[test]
    fn readings_a_second_apart_at_most_are_rendered() {
        let renders = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = renders.clone();
        let r = Rates::new(Arc::new(move || {
            counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            TEXT.to_string()
        }));
        for _ in 0..5 {
            assert_eq!(r.now()["requests"], 42.0);
        }
        assert_eq!(renders.load(std::sync::atomic::Ordering::SeqCst), 1);
    }

    #[test]
    fn a_reading_needs_an_older_one_for_latency() {
        let r = Rates::new(Arc::new(|| TEXT.to_string()));
        let v = r.now();
        assert_eq!(v["requests"], 42.0);
        assert_eq!(v["errors"], 3.0);
        assert!(v["latency"].is_null());
    }
}
