//! The broker's metrics, recorded on the process's `metrics` recorder (the
//! `floe` binary serves them on `/metrics`). One function per event, so the
//! names live here and the call sites stay one line.

use std::time::Duration;

use metrics::{
    Unit, counter, describe_counter, describe_gauge, describe_histogram, gauge, histogram,
};

const FLUSHES: &str = "floe_broker_flushes_total";
const FLUSHED_BYTES: &str = "floe_broker_flushed_bytes_total";
const FLUSH_SECONDS: &str = "floe_broker_flush_duration_seconds";
const COMMIT_REFUSALS: &str = "floe_broker_commit_refusals_total";
const OWNED_PARTITIONS: &str = "floe_broker_owned_partitions";
const OWNED_SHARDS: &str = "floe_broker_owned_shards";
const OWNED_SHARD: &str = "floe_broker_owned_shard";
const LEASE_REFUSALS: &str = "floe_broker_lease_refusals_total";
const LEASE_LAPSES: &str = "floe_broker_lease_lapses_total";
const BACKPRESSURE: &str = "floe_broker_backpressure_refusals_total";
const UNFLUSHED_BYTES: &str = "floe_broker_unflushed_bytes";
const FLUSHES_IN_FLIGHT: &str = "floe_broker_flushes_in_flight";
const BATCHES_NOT_DECODED: &str = "floe_broker_batches_not_decoded_total";

/// Describes the broker's metrics and registers the counters and gauges, so
/// that a broker serves them at zero before its first flush.
pub(crate) fn register() {
    describe_counter!(FLUSHES, "WAL objects written and committed");
    describe_counter!(
        FLUSHED_BYTES,
        Unit::Bytes,
        "bytes of the WAL objects committed"
    );
    describe_histogram!(
        FLUSH_SECONDS,
        Unit::Seconds,
        "from taking the queued batches to their commit in metadata"
    );
    describe_counter!(
        COMMIT_REFUSALS,
        "flush commits the metadata refused (epoch or end moved)"
    );
    describe_gauge!(OWNED_PARTITIONS, "partitions this broker serves");
    describe_gauge!(OWNED_SHARDS, "group coordinator shards this broker serves");
    describe_gauge!(
        OWNED_SHARD,
        "1 for each coordinator shard served, 0 once given up"
    );
    describe_counter!(
        LEASE_REFUSALS,
        "requests refused because the broker's lease ran out"
    );
    describe_counter!(
        LEASE_LAPSES,
        "times the lease ran out and was renewed again"
    );
    describe_counter!(
        BACKPRESSURE,
        "produces refused after waiting for room under max-unflushed-bytes"
    );
    describe_gauge!(
        UNFLUSHED_BYTES,
        Unit::Bytes,
        "bytes sequenced and not yet committed"
    );
    describe_gauge!(
        FLUSHES_IN_FLIGHT,
        "flushes started (WAL object being written or committed) and not yet committed"
    );
    gauge!(FLUSHES_IN_FLIGHT).set(0.0);
    counter!(LEASE_REFUSALS).increment(0);
    counter!(LEASE_LAPSES).increment(0);
    counter!(BACKPRESSURE).increment(0);
    describe_counter!(
        BATCHES_NOT_DECODED,
        "stored batches a timestamp lookup passed over: reason=over_bounds (a decompression bomb) or malformed"
    );
    for reason in ["over_bounds", "malformed"] {
        counter!(BATCHES_NOT_DECODED, "reason" => reason).increment(0);
    }
    counter!(FLUSHES).increment(0);
    counter!(FLUSHED_BYTES).increment(0);
    counter!(COMMIT_REFUSALS).increment(0);
    gauge!(OWNED_PARTITIONS).increment(0.0);
    gauge!(OWNED_SHARDS).increment(0.0);
}

/// A flush's WAL object of `bytes` is committed, `took` after it started.
pub(crate) fn flushed(bytes: u64, took: Duration) {
    counter!(FLUSHES).increment(1);
    counter!(FLUSHED_BYTES).increment(bytes);
    histogram!(FLUSH_SECONDS).record(took);
}

/// A timestamp lookup passed over a stored batch it could not decode.
pub(crate) fn batch_not_decoded(over_bounds: bool) {
    let reason = if over_bounds {
        "over_bounds"
    } else {
        "malformed"
    };
    counter!(BATCHES_NOT_DECODED, "reason" => reason).increment(1);
}

/// The metadata refused a flush's commit.
pub(crate) fn commit_refused() {
    counter!(COMMIT_REFUSALS).increment(1);
}

/// The number of partitions served, after a pass over the cluster view.
pub(crate) fn owned_partitions(n: usize) {
    gauge!(OWNED_PARTITIONS).set(n as f64);
}

/// A coordinator shard is served (`true`) or given up.
pub(crate) fn owned_shard(shard: u32, owned: bool) {
    gauge!(OWNED_SHARD, "shard" => shard.to_string()).set(if owned { 1.0 } else { 0.0 });
}

/// The number of coordinator shards served.
pub(crate) fn owned_shards(n: usize) {
    gauge!(OWNED_SHARDS).set(n as f64);
}

/// A request was refused because the lease ran out.
pub(crate) fn lease_refusal() {
    counter!(LEASE_REFUSALS).increment(1);
}

/// The lease was renewed after it had run out.
pub(crate) fn lease_lapse() {
    counter!(LEASE_LAPSES).increment(1);
}

/// A produce found no room under the unflushed cap.
pub(crate) fn backpressure() {
    counter!(BACKPRESSURE).increment(1);
}

/// Bytes sequenced and not yet committed, now.
pub(crate) fn unflushed_bytes(bytes: usize) {
    gauge!(UNFLUSHED_BYTES).set(bytes as f64);
}

/// Flushes in flight now.
pub(crate) fn flushes_in_flight(n: usize) {
    gauge!(FLUSHES_IN_FLIGHT).set(n as f64);
}

#[cfg(test)]
mod tests {
    use metrics_util::debugging::{DebugValue, DebuggingRecorder};

    #[test]
    fn a_flush_counts_once_with_its_bytes_and_duration() {
        let recorder = DebuggingRecorder::new();
        let snap = recorder.snapshotter();
        metrics::with_local_recorder(&recorder, || {
            super::register();
            super::flushed(4096, std::time::Duration::from_millis(30));
        });
        let values: Vec<(String, DebugValue)> = snap
            .snapshot()
            .into_vec()
            .into_iter()
            .map(|(k, .., v)| (k.key().name().to_string(), v))
            .collect();
        let value = |name: &str| values.iter().find(|(n, _)| n == name).map(|(_, v)| v);
        assert_eq!(value(super::FLUSHES), Some(&DebugValue::Counter(1)));
        assert_eq!(
            value(super::FLUSHED_BYTES),
            Some(&DebugValue::Counter(4096))
        );
        assert_eq!(value(super::COMMIT_REFUSALS), Some(&DebugValue::Counter(0)));
        assert_eq!(
            value(super::FLUSH_SECONDS),
            Some(&DebugValue::Histogram(vec![0.03.into()]))
        );
    }
}
