//! The broker's metrics, recorded on the process's `metrics` recorder (the
//! `floe` binary serves them on `/metrics`). One function per event, so the
//! names live here and the call sites stay one line.

use std::collections::BTreeMap;
use std::sync::PoisonError;
use std::time::Duration;

use metrics::{
    Unit, counter, describe_counter, describe_gauge, describe_histogram, gauge, histogram,
};

const FLUSHES: &str = "floe_broker_flushes_total";
const FLUSHED_BYTES: &str = "floe_broker_flushed_bytes_total";
const FLUSH_SECONDS: &str = "floe_broker_flush_duration_seconds";
const FLUSH_PHASE_SECONDS: &str = "floe_broker_flush_phase_seconds";
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
const TXN_OPEN: &str = "floe_broker_txn_open";
const TXN_COMPLETED: &str = "floe_broker_txn_completed_total";
const TXN_TIMED_OUT: &str = "floe_broker_txn_timed_out_total";
const TXN_MARKERS: &str = "floe_broker_txn_marker_writes_total";
const TXN_MARKER_RETRIES: &str = "floe_broker_txn_marker_retries_total";
const TXN_MARKERS_SECONDS: &str = "floe_broker_txn_markers_duration_seconds";
const TXN_STEPS_HELD: &str = "floe_broker_txn_steps_held_total";
const TXN_COMMITS_REFUSED: &str = "floe_broker_txn_commits_refused_total";
const LSO_LAG: &str = "floe_broker_partition_lso_lag";
pub(crate) const SHARE_FILTERED: &str = "floe_broker_share_records_filtered_total";
pub(crate) const SHARE_DELAYED: &str = "floe_broker_share_records_delayed_total";
pub(crate) const SHARE_DELAYED_IN_WINDOW: &str = "floe_broker_share_delayed_in_window_total";
pub(crate) const SHARE_DELAY_MALFORMED: &str = "floe_broker_share_delay_headers_malformed_total";
pub(crate) const SHARE_DELAY_LATENESS: &str = "floe_broker_share_delay_lateness_seconds";
const SHARE_BACKOFFS: &str = "floe_broker_share_redelivery_backoffs_total";
const SHARE_DEAD_LETTERED: &str = "floe_broker_share_dead_lettered_total";
const SHARE_DEAD_LETTER_FAILURES: &str = "floe_broker_share_dead_letter_failures_total";
const SHARE_STATE_WRITES: &str = "floe_broker_share_state_writes_total";
const SHARE_TIMERS: &str = "floe_broker_share_timer_entries_total";
const SHARE_TIMER_BUCKETS: &str = "floe_broker_share_timer_buckets_total";
const SHARE_TIMER_ERRORS: &str = "floe_broker_share_timer_errors_total";
const DELAYED_PENDING: &str = "floe_broker_delayed_pending";
const DELAYED_REAPPENDED: &str = "floe_broker_delayed_reappended_total";
const DELAYED_DROPPED: &str = "floe_broker_delayed_dropped_total";
const DELAYED_LATENESS: &str = "floe_broker_delayed_lateness_seconds";
const DELAYED_SCANS: &str = "floe_broker_delayed_scans_total";
const COMPACTIONS: &str = "floe_broker_compactions_total";
const COMPACTED_ENTRIES: &str = "floe_broker_compacted_entries_total";
const COMPACTED_BYTES: &str = "floe_broker_compacted_bytes_total";
const COMPACTION_READS: &str = "floe_broker_compaction_range_reads_total";
const INDEX_ENTRIES: &str = "floe_broker_index_entries";
const SEGMENTS: &str = "floe_broker_segments";
const ORPHAN_SCANS: &str = "floe_broker_orphan_scans_total";
const ORPHANS_UNKNOWN: &str = "floe_broker_orphan_objects_unknown";
const ORPHANS_DELETED: &str = "floe_broker_orphan_objects_deleted_total";
const ORPHAN_BYTES_DELETED: &str = "floe_broker_orphan_bytes_deleted_total";
const GROUP_LAG_RECORDS: &str = "floe_broker_group_lag";
const GROUP_LAG_MAX: &str = "floe_broker_group_lag_max";

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
    describe_histogram!(
        FLUSH_PHASE_SECONDS,
        Unit::Seconds,
        "a flush's steps: `write` (the WAL object into the store, retries included), `wait` (for the flush before it to commit, with several in flight) and `commit` (the metadata command)"
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
    describe_counter!(
        SHARE_FILTERED,
        "records a share group's floe.filter archived as they entered its window"
    );
    describe_counter!(
        SHARE_DELAYED,
        "records entering a share group's window before their floe-deliver-at / floe-delay-ms time"
    );
    describe_counter!(
        SHARE_DELAYED_IN_WINDOW,
        "delayed records kept in the window (holding up the start offset) because the share-partition's parked list was full"
    );
    describe_counter!(
        SHARE_DELAY_MALFORMED,
        "records whose delay header was not decimal text, or whose batch did not decode, delivered at once"
    );
    describe_histogram!(
        SHARE_DELAY_LATENESS,
        Unit::Seconds,
        "how long after its due time a delayed record was first acquired"
    );
    for name in [
        SHARE_FILTERED,
        SHARE_DELAYED,
        SHARE_DELAYED_IN_WINDOW,
        SHARE_DELAY_MALFORMED,
    ] {
        counter!(name).increment(0);
    }
    counter!(LEASE_LAPSES).increment(0);
    counter!(BACKPRESSURE).increment(0);
    describe_counter!(
        BATCHES_NOT_DECODED,
        "stored batches a timestamp lookup passed over: reason=over_bounds (a decompression bomb) or malformed"
    );
    for reason in ["over_bounds", "malformed"] {
        counter!(BATCHES_NOT_DECODED, "reason" => reason).increment(0);
    }
    describe_gauge!(
        TXN_OPEN,
        "transactions open (ongoing or being decided) in the coordinator shards this broker serves"
    );
    describe_counter!(
        TXN_COMPLETED,
        "transactions this coordinator completed (markers written), outcome=commit or abort"
    );
    describe_counter!(
        TXN_TIMED_OUT,
        "transactions this coordinator aborted past their transaction.timeout.ms"
    );
    describe_counter!(
        TXN_MARKERS,
        "COMMIT/ABORT markers this coordinator had written (one per partition of a transaction)"
    );
    describe_counter!(
        TXN_MARKER_RETRIES,
        "marker writes that failed and were tried again"
    );
    describe_histogram!(
        TXN_MARKERS_SECONDS,
        Unit::Seconds,
        "from a transaction's decision (EndTxn, a timeout, or the take-over resuming it) to its completion stored, every marker written"
    );
    describe_counter!(
        TXN_STEPS_HELD,
        "client steps (the next transaction's AddPartitionsToTxn, AddOffsetsToTxn, InitProducerId) held until the previous transaction completed, instead of answered CONCURRENT_TRANSACTIONS"
    );
    describe_counter!(
        TXN_COMMITS_REFUSED,
        "EndTxn commits refused as abortable because a partition's owner may have lost batches of the transaction it answered (a take-over or a failed flush since the transaction began there)"
    );
    describe_gauge!(
        LSO_LAG,
        "per partition served: high watermark minus last stable offset (offsets held back by open transactions)"
    );
    gauge!(TXN_OPEN).set(0.0);
    for outcome in ["commit", "abort"] {
        counter!(TXN_COMPLETED, "outcome" => outcome).increment(0);
    }
    counter!(TXN_TIMED_OUT).increment(0);
    counter!(TXN_MARKERS).increment(0);
    counter!(TXN_MARKER_RETRIES).increment(0);
    counter!(TXN_STEPS_HELD).increment(0);
    counter!(TXN_COMMITS_REFUSED).increment(0);
    describe_counter!(
        SHARE_BACKOFFS,
        "share-group records released or expired that wait for a redelivery backoff (floe.retry.backoff.base.ms) before they are delivered again"
    );
    describe_counter!(
        SHARE_DEAD_LETTERED,
        "share-group records appended to their group's dead-letter topic (floe.dlq.topic) and archived, by reason (rejected, delivery-count-limit)"
    );
    describe_counter!(
        SHARE_DEAD_LETTER_FAILURES,
        "appends to a dead-letter topic that failed (the record stays waiting and is tried again), by error (missing_topic, refused_sequence, append)"
    );
    describe_counter!(
        SHARE_STATE_WRITES,
        "share-partition state writes asked for, by outcome (written; coalesced: already in the write of a call before it)"
    );
    for outcome in ["written", "coalesced"] {
        counter!(SHARE_STATE_WRITES, "outcome" => outcome).increment(0);
    }
    counter!(SHARE_BACKOFFS).increment(0);
    for reason in ["rejected", "delivery-count-limit"] {
        counter!(SHARE_DEAD_LETTERED, "reason" => reason).increment(0);
    }
    for error in ["missing_topic", "refused_sequence", "append"] {
        counter!(SHARE_DEAD_LETTER_FAILURES, "error" => error).increment(0);
    }
    describe_counter!(
        SHARE_TIMERS,
        "share-group delayed records by timer-index event: sealed (written out of the parked list to a timer bucket in the object store), lost (in a bucket found missing or damaged: never delivered)"
    );
    describe_counter!(
        SHARE_TIMER_BUCKETS,
        "share-group timer buckets by event: written, merged (small buckets merged into a new one), deleted (emptied, or left by an owner that died)"
    );
    describe_counter!(
        SHARE_TIMER_ERRORS,
        "object-store operations on share-group timer buckets that failed and are tried again later, by operation (put, read, delete, list)"
    );
    for event in ["sealed", "lost"] {
        counter!(SHARE_TIMERS, "event" => event).increment(0);
    }
    for event in ["written", "merged", "deleted"] {
        counter!(SHARE_TIMER_BUCKETS, "event" => event).increment(0);
    }
    for op in ["put", "read", "delete", "list"] {
        counter!(SHARE_TIMER_ERRORS, "op" => op).increment(0);
    }
    describe_gauge!(
        DELAYED_PENDING,
        "delayed records of a delayed topic's partition held in memory, not due or not re-appended yet (floe.delayed.delivery)"
    );
    describe_counter!(
        DELAYED_REAPPENDED,
        "delayed records appended to their topic once due"
    );
    describe_counter!(
        DELAYED_DROPPED,
        "delayed records gone from the log (DeleteRecords, retention) before they were due"
    );
    describe_histogram!(
        DELAYED_LATENESS,
        Unit::Seconds,
        "from a delayed record's due time to its re-append's commit"
    );
    describe_counter!(
        DELAYED_SCANS,
        "readings of a delayed partition's log from its cursor (take-over, the memory bound)"
    );
    describe_counter!(
        COMPACTIONS,
        "segments written by compaction: `kind` wal (WAL ranges into a segment) or merge (small segments into one)"
    );
    describe_counter!(
        COMPACTED_ENTRIES,
        "index entries replaced by compaction (`kind` wal or merge)"
    );
    describe_counter!(
        COMPACTED_BYTES,
        Unit::Bytes,
        "bytes rewritten by compaction (`kind` wal or merge)"
    );
    describe_counter!(
        COMPACTION_READS,
        "WAL ranges compaction read, `from` the partition's in-memory tail or the store"
    );
    describe_gauge!(
        INDEX_ENTRIES,
        "committed index entries of the partitions this broker serves (WAL ranges and segments), after the last compaction pass"
    );
    describe_gauge!(
        SEGMENTS,
        "segments of the partitions this broker serves, after the last compaction pass"
    );
    for kind in ["wal", "merge"] {
        counter!(COMPACTIONS, "kind" => kind).increment(0);
        counter!(COMPACTED_ENTRIES, "kind" => kind).increment(0);
        counter!(COMPACTED_BYTES, "kind" => kind).increment(0);
    }
    describe_counter!(
        ORPHAN_SCANS,
        "orphan scans of the store (on the broker serving coordinator shard 0), by outcome: completed, stopped (the shard moved or the broker stops), failed"
    );
    describe_gauge!(
        ORPHANS_UNKNOWN,
        "objects under the log prefixes that the last orphan scan found unknown to the metadata, young or old"
    );
    describe_counter!(
        ORPHANS_DELETED,
        "unknown objects older than the safe age that orphan scans deleted"
    );
    describe_counter!(
        ORPHAN_BYTES_DELETED,
        Unit::Bytes,
        "bytes of the unknown objects orphan scans deleted"
    );
    for outcome in ["completed", "stopped", "failed"] {
        counter!(ORPHAN_SCANS, "outcome" => outcome).increment(0);
    }
    counter!(ORPHANS_DELETED).increment(0);
    counter!(ORPHAN_BYTES_DELETED).increment(0);
    counter!(DELAYED_REAPPENDED).increment(0);
    counter!(DELAYED_DROPPED).increment(0);
    counter!(DELAYED_SCANS).increment(0);
    counter!(FLUSHES).increment(0);
    counter!(FLUSHED_BYTES).increment(0);
    counter!(COMMIT_REFUSALS).increment(0);
    gauge!(OWNED_PARTITIONS).increment(0.0);
    gauge!(OWNED_SHARDS).increment(0.0);
}

/// What compaction rewrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CompactionKind {
    /// WAL ranges into a segment.
    Wal,
    /// Small segments into one.
    Merge,
}

/// Compaction wrote one segment for `entries` index entries of `bytes`.
pub(crate) fn compacted(kind: CompactionKind, entries: usize, bytes: u64) {
    let kind = match kind {
        CompactionKind::Wal => "wal",
        CompactionKind::Merge => "merge",
    };
    counter!(COMPACTIONS, "kind" => kind).increment(1);
    counter!(COMPACTED_ENTRIES, "kind" => kind).increment(entries as u64);
    counter!(COMPACTED_BYTES, "kind" => kind).increment(bytes);
}

/// Compaction read a WAL range from the partition's tail or from the store.
pub(crate) fn compaction_range_read(from_tail: bool) {
    let from = if from_tail { "tail" } else { "store" };
    counter!(COMPACTION_READS, "from" => from).increment(1);
}

/// The index entries and segments of the partitions served, after a
/// compaction pass.
pub(crate) fn index_size(entries: usize, segments: usize) {
    gauge!(INDEX_ENTRIES).set(entries as f64);
    gauge!(SEGMENTS).set(segments as f64);
}

/// A flush's WAL object of `bytes` is committed, `took` after it started.
pub(crate) fn flushed(bytes: u64, took: Duration) {
    counter!(FLUSHES).increment(1);
    counter!(FLUSHED_BYTES).increment(bytes);
    histogram!(FLUSH_SECONDS).record(took);
}

/// One step of a flush took `took`: `write`, `wait` or `commit`.
pub(crate) fn flush_phase(phase: &'static str, took: Duration) {
    histogram!(FLUSH_PHASE_SECONDS, "phase" => phase).record(took);
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

/// Transactions open in the shards served, after a pass over them.
pub(crate) fn txn_open(n: usize) {
    gauge!(TXN_OPEN).set(n as f64);
}

/// A transaction completed here, `took` after its decision (or take-over).
pub(crate) fn txn_completed(commit: bool, took: Duration) {
    let outcome = if commit { "commit" } else { "abort" };
    counter!(TXN_COMPLETED, "outcome" => outcome).increment(1);
    histogram!(TXN_MARKERS_SECONDS).record(took);
}

/// A client's step waited for the previous transaction's completion and
/// was applied again.
pub(crate) fn txn_step_held() {
    counter!(TXN_STEPS_HELD).increment(1);
}

/// A commit was refused: batches a partition's owner answered may be lost.
pub(crate) fn txn_commit_refused() {
    counter!(TXN_COMMITS_REFUSED).increment(1);
}

/// A transaction was aborted by its timeout.
pub(crate) fn txn_timed_out() {
    counter!(TXN_TIMED_OUT).increment(1);
}

/// A marker was written (`retry`: an attempt failed, to be tried again).
pub(crate) fn txn_marker(written: bool) {
    if written {
        counter!(TXN_MARKERS).increment(1);
    } else {
        counter!(TXN_MARKER_RETRIES).increment(1);
    }
}

/// A partition's high watermark minus its last stable offset (0 once it is
/// no longer served).
pub(crate) fn lso_lag(topic: &str, partition: u32, lag: i64) {
    gauge!(LSO_LAG, "topic" => topic.to_string(), "partition" => partition.to_string())
        .set(lag.max(0) as f64);
}

/// `n` share-group records were made available again after a backoff.
pub(crate) fn share_backoffs(n: u64) {
    if n > 0 {
        counter!(SHARE_BACKOFFS).increment(n);
    }
}

/// Share-group delayed records by timer-index event (`sealed`, `lost`).
pub(crate) fn share_timers(event: &'static str, n: u64) {
    counter!(SHARE_TIMERS, "event" => event).increment(n);
}

/// Share-group timer buckets by event (`written`, `merged`, `deleted`).
pub(crate) fn share_timer_buckets(event: &'static str, n: u64) {
    counter!(SHARE_TIMER_BUCKETS, "event" => event).increment(n);
}

/// A timer-bucket operation on the object store failed (`put`, `read`,
/// `delete`, `list`).
pub(crate) fn share_timer_error(op: &'static str) {
    counter!(SHARE_TIMER_ERRORS, "op" => op).increment(1);
}

/// A share-group record was appended to its dead-letter topic.
pub(crate) fn share_dead_lettered(reason: &'static str) {
    counter!(SHARE_DEAD_LETTERED, "reason" => reason).increment(1);
}

/// An append to a dead-letter topic failed (`error`: `missing_topic`,
/// `refused_sequence` or `append`).
pub(crate) fn share_dead_letter_failed(error: &'static str) {
    counter!(SHARE_DEAD_LETTER_FAILURES, "error" => error).increment(1);
}

/// A share-partition's state was asked to be written: `written` when it
/// was, `false` when a write before it already held it.
pub(crate) fn share_state_write(written: bool) {
    let outcome = if written { "written" } else { "coalesced" };
    counter!(SHARE_STATE_WRITES, "outcome" => outcome).increment(1);
}

/// The delayed records a partition holds in memory (0 once it is no
/// longer served here).
pub(crate) fn delayed_pending(topic: &str, partition: u32, n: usize) {
    gauge!(DELAYED_PENDING, "topic" => topic.to_string(), "partition" => partition.to_string())
        .set(n as f64);
}

/// Delayed records appended once due, each `lateness_ms` after its due time.
pub(crate) fn delayed_reappended(lateness_ms: &[u64]) {
    counter!(DELAYED_REAPPENDED).increment(lateness_ms.len() as u64);
    for ms in lateness_ms {
        histogram!(DELAYED_LATENESS).record(Duration::from_millis(*ms));
    }
}

/// Delayed records no longer in the log when due.
pub(crate) fn delayed_dropped(n: usize) {
    if n > 0 {
        counter!(DELAYED_DROPPED).increment(n as u64);
    }
}

/// A reading of a delayed partition's log from its cursor.
pub(crate) fn delayed_scan() {
    counter!(DELAYED_SCANS).increment(1);
}

/// An orphan scan ran to its end (or `stopped` early): it found `unknown`
/// objects and deleted `deleted` of them, `deleted_bytes` in all.
pub(crate) fn orphan_scan(stopped: bool, unknown: u64, deleted: u64, deleted_bytes: u64) {
    let outcome = if stopped { "stopped" } else { "completed" };
    counter!(ORPHAN_SCANS, "outcome" => outcome).increment(1);
    if !stopped {
        gauge!(ORPHANS_UNKNOWN).set(unknown as f64);
    }
    counter!(ORPHANS_DELETED).increment(deleted);
    counter!(ORPHAN_BYTES_DELETED).increment(deleted_bytes);
}

/// An orphan scan failed (the store or the metadata).
pub(crate) fn orphan_scan_failed() {
    counter!(ORPHAN_SCANS, "outcome" => "failed").increment(1);
}

/// One group's lag series: its id, its type (`classic`, `consumer`), the
/// sum and the max of its partitions' lag.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct GroupLag {
    pub group: String,
    pub group_type: &'static str,
    pub sum: i64,
    pub max: i64,
}

/// Each broker's last round of group lag (several brokers run in one
/// process in tests), by broker id.
static GROUP_LAG: std::sync::Mutex<BTreeMap<u32, Vec<GroupLag>>> =
    std::sync::Mutex::new(BTreeMap::new());

/// Replaces broker `broker`'s lag series with `lags` (empty: none).
///
/// The `metrics` crate cannot remove a series, and the exporter's idle
/// timeout applies to every gauge of the process, so these two gauges are
/// kept here and rendered by [`render_group_lag`] after the recorder's
/// output: a group that is not in the last round (deleted, without
/// offsets, its shard moved) has no series.
pub(crate) fn set_group_lag(broker: u32, lags: Vec<GroupLag>) {
    let mut all = GROUP_LAG.lock().unwrap_or_else(PoisonError::into_inner);
    if lags.is_empty() {
        all.remove(&broker);
    } else {
        all.insert(broker, lags);
    }
}

/// The group lag series of this process's brokers, in Prometheus text
/// (nothing when there are none): `floe_broker_group_lag` and
/// `floe_broker_group_lag_max`, labelled `group` and `type`. The `floe`
/// binary appends this to the recorder's `/metrics`.
pub fn render_group_lag() -> String {
    use std::fmt::Write;
    let all = GROUP_LAG.lock().unwrap_or_else(PoisonError::into_inner);
    let mut out = String::new();
    if all.values().all(Vec::is_empty) {
        return out;
    }
    for (name, help, pick) in [
        (
            GROUP_LAG_RECORDS,
            "per group coordinated here: sum over its partitions of end offset minus committed offset (at least 0)",
            (|l: &GroupLag| l.sum) as fn(&GroupLag) -> i64,
        ),
        (
            GROUP_LAG_MAX,
            "per group coordinated here: the largest lag of one of its partitions",
            |l: &GroupLag| l.max,
        ),
    ] {
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} gauge");
        for lag in all.values().flatten() {
            let _ = writeln!(
                out,
                "{name}{{group=\"{}\",type=\"{}\"}} {}",
                escape_label(&lag.group),
                lag.group_type,
                pick(lag)
            );
        }
        out.push('\n');
    }
    out
}

/// A label value in Prometheus text: `\`, `"` and newlines escaped.
fn escape_label(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
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

    #[test]
    fn a_flush_step_is_recorded_under_its_phase() {
        let recorder = DebuggingRecorder::new();
        let snap = recorder.snapshotter();
        metrics::with_local_recorder(&recorder, || {
            super::flush_phase("write", std::time::Duration::from_millis(3));
            super::flush_phase("commit", std::time::Duration::from_millis(1));
        });
        let mut phases: Vec<(String, DebugValue)> = snap
            .snapshot()
            .into_vec()
            .into_iter()
            .filter(|(k, ..)| k.key().name() == super::FLUSH_PHASE_SECONDS)
            .map(|(k, .., v)| {
                let phase = k.key().labels().find(|l| l.key() == "phase");
                (phase.map(|l| l.value().to_string()).unwrap_or_default(), v)
            })
            .collect();
        phases.sort_by(|a, b| a.0.cmp(&b.0));
        assert_eq!(
            phases,
            vec![
                (
                    "commit".to_string(),
                    DebugValue::Histogram(vec![0.001.into()])
                ),
                (
                    "write".to_string(),
                    DebugValue::Histogram(vec![0.003.into()])
                ),
            ]
        );
    }

    #[test]
    fn share_arrivals_count_filtered_delayed_held_malformed_and_lateness() {
        let recorder = DebuggingRecorder::new();
        let snap = recorder.snapshotter();
        metrics::with_local_recorder(&recorder, || {
            super::register();
            let stats = crate::share::ArrivalStats {
                filtered: 3,
                delayed: 2,
                delayed_in_window: 1,
                lateness_ms: vec![250],
            };
            stats.record(4);
        });
        let values: Vec<(String, DebugValue)> = snap
            .snapshot()
            .into_vec()
            .into_iter()
            .map(|(k, .., v)| (k.key().name().to_string(), v))
            .collect();
        let value = |name: &str| values.iter().find(|(n, _)| n == name).map(|(_, v)| v);
        assert_eq!(value(super::SHARE_FILTERED), Some(&DebugValue::Counter(3)));
        assert_eq!(value(super::SHARE_DELAYED), Some(&DebugValue::Counter(2)));
        assert_eq!(
            value(super::SHARE_DELAYED_IN_WINDOW),
            Some(&DebugValue::Counter(1))
        );
        assert_eq!(
            value(super::SHARE_DELAY_MALFORMED),
            Some(&DebugValue::Counter(4))
        );
        assert_eq!(
            value(super::SHARE_DELAY_LATENESS),
            Some(&DebugValue::Histogram(vec![0.25.into()]))
        );
    }

    #[test]
    fn group_lag_is_rendered_per_group_and_gone_once_replaced() {
        let lag = |group: &str, sum, max| super::GroupLag {
            group: group.to_string(),
            group_type: "classic",
            sum,
            max,
        };
        // A broker id no other test uses: the table is the process's.
        super::set_group_lag(4_000_001, vec![lag("a\"b", 11, 7), lag("c", 0, 0)]);
        let text = super::render_group_lag();
        assert!(
            text.contains("# TYPE floe_broker_group_lag gauge\n"),
            "{text}"
        );
        assert!(
            text.contains("floe_broker_group_lag{group=\"a\\\"b\",type=\"classic\"} 11\n"),
            "{text}"
        );
        assert!(
            text.contains("floe_broker_group_lag_max{group=\"a\\\"b\",type=\"classic\"} 7\n"),
            "{text}"
        );
        assert!(text.contains("floe_broker_group_lag_max{group=\"c\",type=\"classic\"} 0\n"));
        super::set_group_lag(4_000_001, vec![lag("c", 1, 1)]);
        let text = super::render_group_lag();
        assert!(!text.contains("group=\"a"), "{text}");
        super::set_group_lag(4_000_001, Vec::new());
        assert!(!super::render_group_lag().contains("group=\"c\""));
    }
}
