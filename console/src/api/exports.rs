//! `/ui/api/exports` and `/ui/api/topics/{name}/export`: the Parquet
//! export of each topic with `export.enabled=true`, as the indexer records
//! it in the metadata service (files, rows, bytes, and how far behind the
//! log it is), for topics the asker may describe.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State};
use floe_metadata::api::{proto, routes};
use serde_json::{Value, json};

use super::topics::metadata_of;
use crate::Console;
use crate::caller::Asker;
use crate::error::{ApiError, ApiResult, Kind};
use crate::kafka;

/// Whether the topic's setting `name` is `value` in the proxy's view.
fn setting_is(c: &Console, topic: &str, name: &str, value: &str) -> bool {
    c.ctx
        .view
        .current()
        .topics
        .get(topic)
        .is_some_and(|t| t.configs.iter().any(|e| e.name == name && e.value == value))
}

/// Whether the topic is an Iceberg table (`table.format=iceberg`).
fn is_table(c: &Console, topic: &str) -> bool {
    setting_is(c, topic, "table.format", "iceberg")
}

/// Whether the topic's export is on: `export.enabled`, or a table (whose
/// data files are its exports).
fn export_enabled(c: &Console, topic: &str) -> bool {
    setting_is(c, topic, "export.enabled", "true") || is_table(c, topic)
}

/// One partition's export: what it holds and how far behind the log.
fn partition_row(p: &proto::PartitionExport) -> Value {
    let rows: u64 = p.files.iter().map(|f| f.rows).sum();
    let bytes: u64 = p.files.iter().map(|f| f.size).sum();
    let latest = p.files.iter().max_by_key(|f| f.last_offset).map(|f| {
        json!({
            "key": f.key,
            "first_offset": f.first_offset,
            "last_offset": f.last_offset,
            "rows": f.rows,
            "bytes": f.size,
            "min_timestamp": f.min_timestamp,
            "max_timestamp": f.max_timestamp,
        })
    });
    json!({
        "partition": p.partition,
        "next_offset": p.next_offset,
        "high_watermark": p.high_watermark,
        "lag": (p.high_watermark - p.next_offset).max(0),
        "files": p.files.len(),
        "rows": rows,
        "bytes": bytes,
        "pending": p.pending.is_some(),
        "latest": latest,
    })
}

/// The export's state from the metadata service.
async fn state_of(c: &Console, topic: &str) -> ApiResult<proto::ExportStateResponse> {
    c.ctx
        .meta
        .call::<routes::ExportState>(proto::ExportStateRequest {
            topic: topic.to_string(),
        })
        .await
        .map_err(|e| {
            ApiError::new(
                Kind::Unavailable,
                format!("the export state of {topic}: {e}"),
            )
        })
}

pub async fn list(State(c): State<Arc<Console>>, Asker(who): Asker) -> ApiResult<Json<Value>> {
    let md = kafka::metadata(&c.ctx, &who, None).await?;
    let mut names: Vec<String> = md
        .topics
        .iter()
        .filter(|t| t.error_code == 0)
        .filter_map(|t| t.name.as_ref().map(|n| n.0.to_string()))
        .filter(|n| export_enabled(&c, n))
        .collect();
    names.sort();
    let mut rows = Vec::new();
    for name in names {
        let state = state_of(&c, &name).await?;
        let files = state
            .partitions
            .iter()
            .map(|p| p.files.len())
            .sum::<usize>();
        let rows_total: u64 = state
            .partitions
            .iter()
            .flat_map(|p| &p.files)
            .map(|f| f.rows)
            .sum();
        let bytes: u64 = state
            .partitions
            .iter()
            .flat_map(|p| &p.files)
            .map(|f| f.size)
            .sum();
        let lag: i64 = state
            .partitions
            .iter()
            .map(|p| (p.high_watermark - p.next_offset).max(0))
            .sum();
        let latest = state
            .partitions
            .iter()
            .flat_map(|p| &p.files)
            .map(|f| f.max_timestamp)
            .max();
        rows.push(json!({
            "topic": name,
            "partitions": state.partitions.len(),
            "files": files,
            "rows": rows_total,
            "bytes": bytes,
            "lag": lag,
            "latest_max_timestamp": latest,
        }));
    }
    Ok(Json(json!({ "topics": rows })))
}

pub async fn topic(
    State(c): State<Arc<Console>>,
    Asker(who): Asker,
    Path(name): Path<String>,
) -> ApiResult<Json<Value>> {
    // The asker may describe the topic (else this is refused).
    metadata_of(&c, &who, &name).await?;
    if !export_enabled(&c, &name) {
        return Ok(Json(
            json!({ "topic": name, "enabled": false, "partitions": [] }),
        ));
    }
    let state = state_of(&c, &name).await?;
    let partitions: Vec<Value> = state.partitions.iter().map(partition_row).collect();
    let generation = state.partitions.iter().map(|p| p.generation).max();
    Ok(Json(json!({
        "topic": name,
        "enabled": true,
        "generation": generation,
        "backfill": c.search.is_some(),
        "table": is_table(&c, &name),
        "partitions": partitions,
    })))
}

/// The summary of a table's metadata (the catalog's LoadTable answer) the
/// page shows: where it is, its schema with field ids, its partitioning,
/// its current snapshot and its latest snapshots (at most `keep`), newest
/// first, each with what it added and the log offsets it covers.
pub fn table_summary(topic: &str, load: &Value, keep: usize) -> Value {
    let m = &load["metadata"];
    let schema_id = m["current-schema-id"].as_i64();
    let fields: Vec<Value> = m["schemas"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|s| s["schema-id"].as_i64() == schema_id)
        .and_then(|s| s["fields"].as_array())
        .into_iter()
        .flatten()
        .map(|f| {
            let ty = match &f["type"] {
                Value::String(t) => t.clone(),
                other => other["type"].as_str().unwrap_or("?").to_string(),
            };
            json!({"id": f["id"], "name": f["name"], "type": ty, "required": f["required"]})
        })
        .collect();
    let spec_id = m["default-spec-id"].as_i64();
    let partitioning: Vec<Value> = m["partition-specs"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|s| s["spec-id"].as_i64() == spec_id)
        .and_then(|s| s["fields"].as_array())
        .into_iter()
        .flatten()
        .map(|f| json!({"name": f["name"], "transform": f["transform"]}))
        .collect();
    let current_id = m["current-snapshot-id"].as_i64();
    let mut snaps: Vec<&Value> = m["snapshots"].as_array().into_iter().flatten().collect();
    snaps.sort_by_key(|s| std::cmp::Reverse(s["timestamp-ms"].as_i64()));
    let summary = |s: &Value, k: &str| s["summary"][k].as_str().and_then(|v| v.parse::<u64>().ok());
    let current = snaps
        .iter()
        .find(|s| s["snapshot-id"].as_i64() == current_id)
        .map(|s| {
            // An upsert table's position deletes each hide one record.
            let deletes = summary(s, "total-position-deletes").unwrap_or(0);
            json!({
                "snapshot_id": s["snapshot-id"],
                "records": summary(s, "total-records"),
                "files": summary(s, "total-data-files"),
                "bytes": summary(s, "total-files-size"),
                "mode": s["summary"]["floe.table-mode"].as_str().unwrap_or("append"),
                "position_deletes": deletes,
                "rows": summary(s, "total-records").map(|r| r.saturating_sub(deletes)),
            })
        });
    let snapshots: Vec<Value> = snaps
        .iter()
        .take(keep)
        .map(|s| {
            let offsets: Value = s["summary"]["floe.offsets"]
                .as_str()
                .and_then(|o| serde_json::from_str(o).ok())
                .unwrap_or(Value::Null);
            json!({
                "snapshot_id": s["snapshot-id"],
                "timestamp_ms": s["timestamp-ms"],
                "operation": s["summary"]["operation"],
                "added_records": summary(s, "added-records"),
                "added_files": summary(s, "added-data-files"),
                "offsets": offsets,
            })
        })
        .collect();
    json!({
        "topic": topic,
        "table": true,
        "name": format!("floe.{topic}"),
        "metadata_location": load["metadata-location"],
        "location": m["location"],
        "format_version": m["format-version"],
        "schema": fields,
        "partitioning": partitioning,
        "current": current,
        "snapshot_count": snaps.len(),
        "snapshots": snapshots,
    })
}

/// The most snapshots the table route answers.
pub const TABLE_SNAPSHOTS: usize = 50;

/// `GET /ui/api/topics/{name}/table`: the topic's Iceberg table as the
/// indexer's catalog serves it (READ on the topic, as loading it from the
/// catalog needs).
pub async fn table(
    State(c): State<Arc<Console>>,
    Asker(who): Asker,
    Path(name): Path<String>,
) -> ApiResult<Json<Value>> {
    c.may_topic(
        &who,
        floe_metadata::acl::Operation::Read,
        &name,
        "its table is its records: READ on it is needed",
    )?;
    metadata_of(&c, &who, &name).await?;
    if !is_table(&c, &name) {
        return Ok(Json(json!({ "topic": name, "table": false })));
    }
    let Some(search) = &c.search else {
        return Err(ApiError::new(
            Kind::Unavailable,
            "this console reaches no indexer, so it cannot show the table (a proxy of a cluster \
             reaches one with --console-indexer http://HOST:PORT): `floe table describe` asks the \
             indexer",
        ));
    };
    match search
        .table(&name)
        .await
        .map_err(super::search::api_error)?
    {
        Some(load) => Ok(Json(table_summary(&name, &load, TABLE_SNAPSHOTS))),
        None => Ok(Json(
            json!({ "topic": name, "table": true, "current": null, "snapshots": [], "pending": true }),
        )),
    }
}

#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Backfill {
    /// The topic's name typed again: every file of the export is rewritten.
    pub confirm: String,
}

/// `POST /ui/api/topics/{name}/export/backfill`: the topic's export rebuilt
/// from its log by the indexer (a new generation), as `floe indexer
/// backfill` asks; READ on the topic (as the indexer's API needs) and the
/// name typed again. The export's page follows it by its lag.
pub async fn backfill(
    State(c): State<Arc<Console>>,
    Asker(who): Asker,
    Path(name): Path<String>,
    b: Result<Json<Backfill>, axum::extract::rejection::JsonRejection>,
) -> ApiResult<Json<Value>> {
    let body = super::actions::body(b)?;
    if body.confirm != name {
        return Err(ApiError::new(
            Kind::Invalid,
            format!("not backfilled: type the topic's name ({name}) to confirm"),
        ));
    }
    c.may_topic(
        &who,
        floe_metadata::acl::Operation::Read,
        &name,
        "a backfill needs READ on it",
    )?;
    if !export_enabled(&c, &name) {
        return Err(ApiError::new(
            Kind::Invalid,
            format!("topic {name} is not exported: set export.enabled=true first"),
        ));
    }
    let Some(indexer) = &c.search else {
        return Err(ApiError::new(
            Kind::Unavailable,
            format!(
                "no indexer is reachable from this console (a proxy needs --console-indexer): \
                 floe indexer backfill --topic {name} --indexer URL does it"
            ),
        ));
    };
    let generation = indexer
        .backfill(&name)
        .await
        .map_err(super::search::api_error)?;
    Ok(Json(json!({ "topic": name, "generation": generation })))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_table_summary_has_the_schema_partitioning_and_latest_snapshots() {
        let load = json!({
            "metadata-location": "file:///d/tables/t/metadata/00003-x.metadata.json",
            "metadata": {
                "format-version": 2, "location": "file:///d/tables/t",
                "current-schema-id": 1,
                "schemas": [{"schema-id": 0, "fields": []}, {"schema-id": 1, "fields": [
                    {"id": 2, "name": "offset", "required": true, "type": "long"},
                    {"id": 6, "name": "headers", "required": true, "type": {"type": "list"}}]}],
                "default-spec-id": 1,
                "partition-specs": [{"spec-id": 0, "fields": []},
                    {"spec-id": 1, "fields": [{"name": "timestamp_day", "transform": "day"}]}],
                "current-snapshot-id": 8,
                "snapshots": [
                    {"snapshot-id": 7, "timestamp-ms": 1, "summary": {"operation": "append",
                        "added-records": "3", "floe.offsets": "{\"0\":3}"}},
                    {"snapshot-id": 8, "timestamp-ms": 2, "summary": {"operation": "append",
                        "added-records": "2", "total-records": "5", "total-data-files": "2",
                        "total-files-size": "900", "floe.offsets": "{\"0\":5}"}}]
            }
        });
        let s = table_summary("t", &load, 1);
        assert_eq!(
            s["schema"][1],
            json!({"id": 6, "name": "headers", "type": "list", "required": true})
        );
        assert_eq!(s["partitioning"][0]["transform"], "day");
        assert_eq!(
            s["current"],
            json!({"snapshot_id": 8, "records": 5, "files": 2, "bytes": 900,
                "mode": "append", "position_deletes": 0, "rows": 5})
        );
        assert_eq!(s["snapshot_count"], 2);
        assert_eq!(
            s["snapshots"].as_array().map(Vec::len),
            Some(1),
            "newest only"
        );
        assert_eq!(s["snapshots"][0]["offsets"], json!({"0": 5}));
    }

    #[test]
    fn a_partitions_lag_is_what_the_log_holds_past_the_export() {
        let file = |first, last, rows| proto::ExportFile {
            first_offset: first,
            last_offset: last,
            rows,
            size: 100,
            ..Default::default()
        };
        let p = proto::PartitionExport {
            partition: 2,
            next_offset: 20,
            high_watermark: 25,
            files: vec![file(0, 9, 10), file(10, 19, 10)],
            ..Default::default()
        };
        let row = partition_row(&p);
        assert_eq!(row["lag"], 5);
        assert_eq!(row["rows"], 20);
        assert_eq!(row["bytes"], 200);
        assert_eq!(row["latest"]["first_offset"], 10);
    }
}
