//! The indexer's metrics, recorded on the process's `metrics` recorder (the
//! `floe` binary serves them on `/metrics`).

use metrics::{Unit, counter, describe_counter};

const FILES_WRITTEN: &str = "floe_indexer_files_written_total";
const ROWS_WRITTEN: &str = "floe_indexer_rows_written_total";
const QUERY_DENIED: &str = "floe_indexer_query_denied_total";
const LOG_BYTES_READ: &str = "floe_indexer_log_bytes_read_total";
const PARQUET_BYTES_WRITTEN: &str = "floe_indexer_parquet_bytes_written_total";
const FILES_DELETED: &str = "floe_indexer_files_deleted_total";
const ERRORS: &str = "floe_indexer_errors_total";
const BATCHES_SKIPPED: &str = "floe_indexer_batches_skipped_total";
const NOT_JSON: &str = "floe_indexer_values_not_json_total";
const MISTYPED: &str = "floe_indexer_fields_mistyped_total";
const TABLE_COMMITS: &str = "floe_indexer_table_commits_total";
const TABLE_FILES: &str = "floe_indexer_table_files_added_total";
const TABLE_RECORDS: &str = "floe_indexer_table_records_added_total";
const TABLE_COMPACTIONS: &str = "floe_indexer_table_compactions_total";
const TABLE_FILES_COMPACTED: &str = "floe_indexer_table_files_compacted_total";
const TABLE_FILES_REMOVED: &str = "floe_indexer_table_files_removed_total";
const TABLE_SNAPSHOTS_EXPIRED: &str = "floe_indexer_table_snapshots_expired_total";
const CATALOG_PUBLISHES: &str = "floe_indexer_catalog_publishes_total";
const CATALOG_ERRORS: &str = "floe_indexer_catalog_errors_total";

/// Describes the indexer's metrics and registers them at zero.
pub(crate) fn register() {
    describe_counter!(FILES_WRITTEN, "export files written and committed");
    describe_counter!(
        QUERY_DENIED,
        "query API calls refused (403) because a bearer token's principal has no topic ACL for them"
    );
    describe_counter!(ROWS_WRITTEN, "rows in the export files committed");
    describe_counter!(
        LOG_BYTES_READ,
        Unit::Bytes,
        "log bytes read to build export files"
    );
    describe_counter!(
        PARQUET_BYTES_WRITTEN,
        Unit::Bytes,
        "bytes of the export files committed"
    );
    describe_counter!(
        FILES_DELETED,
        "export files deleted by retention or the sweep"
    );
    describe_counter!(
        ERRORS,
        "export rounds or topics that failed (retried next round)"
    );
    describe_counter!(
        BATCHES_SKIPPED,
        "stored batches passed over because they cannot be decoded: reason=over_bounds (a decompression bomb, too many records) or malformed"
    );
    describe_counter!(
        NOT_JSON,
        "rows written for a topic with typed columns whose value is not a JSON document (not JSON, not UTF-8, empty, a tombstone): their typed columns are NULL, the raw value is in the value column"
    );
    describe_counter!(
        MISTYPED,
        "typed fields written as NULL because the value there has another type than the column's"
    );
    describe_counter!(
        TABLE_COMMITS,
        "Iceberg table commits (new metadata files the table's pointer moved to)"
    );
    describe_counter!(TABLE_FILES, "data files added to Iceberg tables");
    describe_counter!(TABLE_RECORDS, "records added to Iceberg tables");
    describe_counter!(
        TABLE_COMPACTIONS,
        "compacted files written for Iceberg tables (each replaces adjacent small files of a partition)"
    );
    describe_counter!(
        TABLE_FILES_COMPACTED,
        "export files those compactions replaced"
    );
    describe_counter!(
        TABLE_FILES_REMOVED,
        "data files table commits removed from the current snapshot (compacted, or past export.retention.ms)"
    );
    describe_counter!(
        TABLE_SNAPSHOTS_EXPIRED,
        "Iceberg snapshots expired (older than table.snapshot.max.age.ms, or beyond the 500 kept)"
    );
    describe_counter!(
        CATALOG_PUBLISHES,
        "table rows moved in the external SQL catalog (--table-catalog) to a table's new metadata file"
    );
    describe_counter!(
        CATALOG_ERRORS,
        "failed publications to the external SQL catalog (retried next round): reason=conflict (the row names a commit that is not Floe's; left alone) or unavailable"
    );
    for reason in ["conflict", "unavailable"] {
        counter!(CATALOG_ERRORS, "reason" => reason).increment(0);
    }
    for reason in ["over_bounds", "malformed"] {
        counter!(BATCHES_SKIPPED, "reason" => reason).increment(0);
    }
    for name in [
        FILES_WRITTEN,
        ROWS_WRITTEN,
        LOG_BYTES_READ,
        PARQUET_BYTES_WRITTEN,
        FILES_DELETED,
        ERRORS,
        TABLE_COMMITS,
        TABLE_FILES,
        TABLE_RECORDS,
        TABLE_COMPACTIONS,
        TABLE_FILES_COMPACTED,
        TABLE_FILES_REMOVED,
        TABLE_SNAPSHOTS_EXPIRED,
        CATALOG_PUBLISHES,
        NOT_JSON,
        MISTYPED,
    ] {
        counter!(name).increment(0);
    }
}

/// An export file of `rows` rows and `bytes` bytes is committed.
pub(crate) fn file_written(rows: u64, bytes: u64) {
    counter!(FILES_WRITTEN).increment(1);
    counter!(ROWS_WRITTEN).increment(rows);
    counter!(PARQUET_BYTES_WRITTEN).increment(bytes);
}

pub(crate) fn log_read(bytes: u64) {
    counter!(LOG_BYTES_READ).increment(bytes);
}

pub(crate) fn file_deleted() {
    counter!(FILES_DELETED).increment(1);
}

/// A stored batch was passed over: it cannot be decoded within the bounds.
pub(crate) fn batch_skipped(over_bounds: bool) {
    let reason = if over_bounds {
        "over_bounds"
    } else {
        "malformed"
    };
    counter!(BATCHES_SKIPPED, "reason" => reason).increment(1);
}

pub(crate) fn error() {
    counter!(ERRORS).increment(1);
}

/// A query API call refused by the ACLs.
pub fn query_denied() {
    counter!(QUERY_DENIED).increment(1);
}

/// A batch of rows had `not_json` values that are not JSON documents and
/// `mistyped` typed fields of another type than their column's.
pub(crate) fn typing(not_json: u64, mistyped: u64) {
    if not_json > 0 {
        counter!(NOT_JSON).increment(not_json);
    }
    if mistyped > 0 {
        counter!(MISTYPED).increment(mistyped);
    }
}

/// A table commit added `files` data files of `records` records.
pub(crate) fn table_commit(files: u64, records: u64) {
    counter!(TABLE_COMMITS).increment(1);
    counter!(TABLE_FILES).increment(files);
    counter!(TABLE_RECORDS).increment(records);
}

/// A compaction wrote one file in place of `files`.
pub(crate) fn table_compaction(files: u64) {
    counter!(TABLE_COMPACTIONS).increment(1);
    counter!(TABLE_FILES_COMPACTED).increment(files);
}

/// A table commit removed `files` data files and expired `snapshots`.
pub(crate) fn table_removed(files: u64, snapshots: u64) {
    counter!(TABLE_FILES_REMOVED).increment(files);
    counter!(TABLE_SNAPSHOTS_EXPIRED).increment(snapshots);
}

/// A table's row in the external catalog moved to its new metadata file.
pub(crate) fn catalog_published() {
    counter!(CATALOG_PUBLISHES).increment(1);
}

/// A publication to the external catalog failed.
pub(crate) fn catalog_error(kind: crate::error::ErrorKind) {
    let reason = if kind == crate::error::ErrorKind::Conflict {
        "conflict"
    } else {
        "unavailable"
    };
    counter!(CATALOG_ERRORS, "reason" => reason).increment(1);
}

#[cfg(test)]
mod tests {
    use metrics_util::debugging::{DebugValue, DebuggingRecorder};

    /// The metrics `f` records (after registering them), by name.
    fn recorded(f: impl FnOnce()) -> Vec<(String, DebugValue)> {
        let recorder = DebuggingRecorder::new();
        let snap = recorder.snapshotter();
        metrics::with_local_recorder(&recorder, || {
            super::register();
            f();
        });
        snap.snapshot()
            .into_vec()
            .into_iter()
            .map(|(k, .., v)| (k.key().name().to_string(), v))
            .collect()
    }

    #[test]
    fn a_written_file_counts_its_rows_and_bytes() {
        let values = recorded(|| super::file_written(10, 2048));
        let value = |name: &str| values.iter().find(|(n, _)| n == name).map(|(_, v)| v);
        assert_eq!(value(super::FILES_WRITTEN), Some(&DebugValue::Counter(1)));
        assert_eq!(value(super::ROWS_WRITTEN), Some(&DebugValue::Counter(10)));
        assert_eq!(
            value(super::PARQUET_BYTES_WRITTEN),
            Some(&DebugValue::Counter(2048))
        );
        assert_eq!(value(super::ERRORS), Some(&DebugValue::Counter(0)));
    }

    #[test]
    fn values_that_are_not_json_and_fields_of_another_type_are_counted() {
        let def = floe_metadata::export_def::IndexDefinition::parse(
            r#"[{"name":"a","path":"$.a","type":"int64"},{"name":"b","path":"$.b","type":"string"}]"#,
        )
        .unwrap();
        let rec = |offset: i64, v: Option<&'static [u8]>| floe_storage::records::Record {
            offset,
            timestamp: 0,
            key: None,
            value: v.map(bytes::Bytes::from_static),
            headers: vec![],
        };
        let records = vec![
            rec(0, Some(br#"{"a":1,"b":"x"}"#)),
            rec(1, Some(b"not json")),
            rec(2, None),
            rec(3, Some(br#"{"a":"1","b":null}"#)),
            rec(4, Some(br#"{"a":1.5}"#)),
        ];
        let values = recorded(|| {
            crate::columns::write_file(0, &records, &def, &Default::default()).unwrap();
        });
        let value = |name: &str| values.iter().find(|(n, _)| n == name).map(|(_, v)| v);
        assert_eq!(value(super::NOT_JSON), Some(&DebugValue::Counter(2)));
        // "1" for an int64 and 1.5 for an int64; a null or a missing field is no mismatch.
        assert_eq!(value(super::MISTYPED), Some(&DebugValue::Counter(2)));
    }
}
