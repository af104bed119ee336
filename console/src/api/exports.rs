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

/// Whether the topic's export is on (its `export.enabled` setting in the
/// proxy's view).
fn export_enabled(c: &Console, topic: &str) -> bool {
    c.ctx.view.current().topics.get(topic).is_some_and(|t| {
        t.configs
            .iter()
            .any(|e| e.name == "export.enabled" && e.value == "true")
    })
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
        "partitions": partitions,
    })))
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
