//! The indexer's HTTP API (served on the admin port):
//!
//! - `GET /v1/topics/{topic}/records?key=&from=&to=&limit=`: lookups.
//! - `GET /v1/topics/{topic}/exports`: export progress per partition.
//! - `POST /v1/topics/{topic}/backfill`: rebuild a topic's exports.
//! - `POST /v1/tables/{topic}/compact`: compact a table's small files now.
//! - `POST /v1/tables/{topic}/expire?older_than_ms=`: expire a table's
//!   snapshots now (default: older than `table.snapshot.max.age.ms`) and
//!   delete the files only they named.
//! - `/iceberg/v1/…`: Iceberg's REST catalog over the topics that are
//!   tables (`crate::table::catalog`).
//!
//! Cluster members may call them all; a person with a bearer token
//! (`--admin-token-file`) needs a topic READ ACL for lookups and backfills,
//! DESCRIBE (which READ implies) for export progress, ALTER for a table's
//! compaction and expiry.

use std::collections::HashMap;

use axum::extract::{Path, Query as QueryParams, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Router};
use base64::Engine as _;
use bytes::Bytes;
use serde_json::{Value, json};

use floe_metadata::acl::{Decision, Operation, ResourceType};
use floe_metadata::http_server::{Caller, PeerAddr};

use crate::error::{ErrorKind, IndexerError};
use crate::exporter::Indexer;
use crate::lookup::{Found, Query};
use crate::query;
use crate::settings::ExportSettings;

/// Default number of records a lookup returns.
pub const DEFAULT_LIMIT: usize = 100;

pub fn router(ix: Indexer) -> Router {
    Router::new()
        .route("/v1/topics/{topic}/records", get(records))
        .route("/v1/topics/{topic}/exports", get(exports))
        .route("/v1/topics/{topic}/backfill", post(backfill))
        .route("/v1/tables/{topic}/compact", post(compact))
        .route("/v1/tables/{topic}/expire", post(expire))
        .nest("/iceberg", crate::table::catalog::router())
        .with_state(ix)
}

pub(crate) fn error_reply(e: &IndexerError) -> Response {
    let status = match e.kind {
        ErrorKind::UnknownTopic => StatusCode::NOT_FOUND,
        ErrorKind::InvalidRequest => StatusCode::BAD_REQUEST,
        ErrorKind::Conflict => StatusCode::CONFLICT,
        ErrorKind::Corrupt => StatusCode::INTERNAL_SERVER_ERROR,
        ErrorKind::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
    };
    (status, axum::Json(json!({ "error": e.message }))).into_response()
}

/// Epoch milliseconds or RFC 3339.
pub fn parse_time(name: &str, v: &str) -> Result<i64, IndexerError> {
    if let Ok(ms) = v.parse::<i64>() {
        return Ok(ms);
    }
    chrono::DateTime::parse_from_rfc3339(v)
        .map(|t| t.timestamp_millis())
        .map_err(|_| {
            IndexerError::invalid(format!(
                "{name}={v:?}: use epoch milliseconds or RFC 3339 (2026-11-29T14:00:00Z)"
            ))
        })
}

/// Builds a lookup from query parameters.
pub fn parse_query(params: &HashMap<String, String>) -> Result<Query, IndexerError> {
    for k in params.keys() {
        if !["key", "from", "to", "limit"].contains(&k.as_str()) {
            return Err(IndexerError::invalid(format!(
                "unknown parameter {k:?} (key, from, to, limit)"
            )));
        }
    }
    let from_ms = params
        .get("from")
        .map(|v| parse_time("from", v))
        .transpose()?;
    let to_ms = params.get("to").map(|v| parse_time("to", v)).transpose()?;
    let limit = match params.get("limit") {
        None => DEFAULT_LIMIT,
        Some(v) => v
            .parse::<usize>()
            .ok()
            .filter(|n| (1..=query::MAX_LIMIT).contains(n))
            .ok_or_else(|| {
                IndexerError::invalid(format!("limit={v:?}: 1 to {}", query::MAX_LIMIT))
            })?,
    };
    Ok(Query {
        key: params
            .get("key")
            .map(|k| Bytes::from(k.clone().into_bytes())),
        from_ms,
        to_ms,
        limit,
    })
}

/// Bytes as JSON: a string when UTF-8, else null plus `{name}_base64`.
fn put_bytes(obj: &mut serde_json::Map<String, Value>, name: &str, b: Option<&Bytes>) {
    match b {
        None => {
            obj.insert(name.to_string(), Value::Null);
        }
        Some(b) => match std::str::from_utf8(b) {
            Ok(s) => {
                obj.insert(name.to_string(), Value::String(s.to_string()));
            }
            Err(_) => {
                obj.insert(name.to_string(), Value::Null);
                obj.insert(
                    format!("{name}_base64"),
                    Value::String(base64::engine::general_purpose::STANDARD.encode(b)),
                );
            }
        },
    }
}

/// One record as the API and `floe query` print it.
pub fn record_json(r: &Found) -> Value {
    let mut o = serde_json::Map::new();
    o.insert("partition".into(), json!(r.partition));
    o.insert("offset".into(), json!(r.offset));
    o.insert("timestamp".into(), json!(r.timestamp));
    put_bytes(&mut o, "key", r.key.as_ref());
    put_bytes(&mut o, "value", r.value.as_ref());
    let headers: Vec<Value> = r
        .headers
        .iter()
        .map(|(k, v)| {
            let mut h = serde_json::Map::new();
            h.insert("key".into(), json!(k));
            put_bytes(&mut h, "value", v.as_ref());
            Value::Object(h)
        })
        .collect();
    o.insert("headers".into(), Value::Array(headers));
    Value::Object(o)
}

/// Whether the caller may do `op` on `topic`: a cluster member (or anyone,
/// on a cluster without security) may; a person with a bearer token may
/// when the ACLs allow its principal `op` on the topic (deny by default).
pub(crate) async fn permit(
    ix: &Indexer,
    caller: Option<&Caller>,
    peer: Option<&PeerAddr>,
    topic: &str,
    op: Operation,
) -> Result<(), Response> {
    let principal = match caller {
        Some(Caller::User(p)) => p,
        Some(Caller::Anonymous) => {
            return Err((
                StatusCode::UNAUTHORIZED,
                axum::Json(json!({ "error": "a member certificate or a bearer token is needed" })),
            )
                .into_response());
        }
        _ => return Ok(()),
    };
    let acls = match ix.acls().await {
        Ok(a) => a,
        Err(e) => return Err(error_reply(&e)),
    };
    let host = peer.map_or_else(|| "*".to_string(), |p| p.0.ip().to_string());
    let decision = acls.decide(principal, &host, op, ResourceType::Topic, topic, false);
    if decision == Decision::Allowed {
        Ok(())
    } else {
        crate::metrics::query_denied();
        tracing::info!(%principal, %topic, ?op, "query API refused: not authorized");
        Err((
            StatusCode::FORBIDDEN,
            axum::Json(json!({
                "error": format!("{principal} is not authorized to {op:?} topic {topic:?}")
            })),
        )
            .into_response())
    }
}

async fn records(
    State(ix): State<Indexer>,
    caller: Option<Extension<Caller>>,
    peer: Option<Extension<PeerAddr>>,
    Path(topic): Path<String>,
    QueryParams(params): QueryParams<HashMap<String, String>>,
) -> Response {
    if let Err(r) = permit(
        &ix,
        caller.as_deref(),
        peer.as_deref(),
        &topic,
        Operation::Read,
    )
    .await
    {
        return r;
    }
    let q = match parse_query(&params) {
        Ok(q) => q,
        Err(e) => return error_reply(&e),
    };
    match query::run(&ix, &topic, &q).await {
        Ok(a) => axum::Json(json!({
            "records": a.records.iter().map(record_json).collect::<Vec<_>>(),
            "stats": a.stats,
        }))
        .into_response(),
        Err(e) => error_reply(&e),
    }
}

async fn exports(
    State(ix): State<Indexer>,
    caller: Option<Extension<Caller>>,
    peer: Option<Extension<PeerAddr>>,
    Path(topic): Path<String>,
) -> Response {
    if let Err(r) = permit(
        &ix,
        caller.as_deref(),
        peer.as_deref(),
        &topic,
        Operation::Describe,
    )
    .await
    {
        return r;
    }
    let described = ix.meta().describe_topic(&topic).await;
    let info = match described {
        Ok(t) => t,
        Err(e) => return error_reply(&IndexerError::from(e)),
    };
    let state = match ix.meta().export_state(&topic).await {
        Ok(s) => s,
        Err(e) => return error_reply(&IndexerError::from(e)),
    };
    let settings = ExportSettings::from_topic(&info);
    let partitions: Vec<Value> = state
        .partitions
        .iter()
        .map(|p| {
            json!({
                "partition": p.partition,
                "generation": p.generation,
                "exported_offset": p.next_offset.max(p.log_start_offset.min(p.high_watermark)),
                "high_watermark": p.high_watermark,
                "log_start_offset": p.log_start_offset,
                "files": p.files.len(),
                "rows": p.files.iter().map(|f| f.rows).sum::<u64>(),
                "bytes": p.files.iter().map(|f| f.size).sum::<u64>(),
                "pending": p.pending.as_ref().map(|f| f.key.clone()),
            })
        })
        .collect();
    axum::Json(json!({
        "topic": topic,
        "enabled": settings.enabled,
        "generation": state.partitions.iter().map(|p| p.generation).max().unwrap_or(0),
        "partitions": partitions,
    }))
    .into_response()
}

async fn backfill(
    State(ix): State<Indexer>,
    caller: Option<Extension<Caller>>,
    peer: Option<Extension<PeerAddr>>,
    Path(topic): Path<String>,
) -> Response {
    if let Err(r) = permit(
        &ix,
        caller.as_deref(),
        peer.as_deref(),
        &topic,
        Operation::Read,
    )
    .await
    {
        return r;
    }
    match ix.backfill(&topic).await {
        Ok(generation) => (
            StatusCode::ACCEPTED,
            axum::Json(json!({ "generation": generation })),
        )
            .into_response(),
        Err(e) => error_reply(&e),
    }
}

async fn compact(
    State(ix): State<Indexer>,
    caller: Option<Extension<Caller>>,
    peer: Option<Extension<PeerAddr>>,
    Path(topic): Path<String>,
) -> Response {
    if let Err(r) = permit(
        &ix,
        caller.as_deref(),
        peer.as_deref(),
        &topic,
        Operation::Alter,
    )
    .await
    {
        return r;
    }
    match ix.compact_now(&topic).await {
        Ok(done) => axum::Json(json!({
            "files_written": done.written,
            "files_replaced": done.replaced,
        }))
        .into_response(),
        Err(e) => error_reply(&e),
    }
}

async fn expire(
    State(ix): State<Indexer>,
    caller: Option<Extension<Caller>>,
    peer: Option<Extension<PeerAddr>>,
    Path(topic): Path<String>,
    QueryParams(params): QueryParams<HashMap<String, String>>,
) -> Response {
    if let Err(r) = permit(
        &ix,
        caller.as_deref(),
        peer.as_deref(),
        &topic,
        Operation::Alter,
    )
    .await
    {
        return r;
    }
    let older_than = match params.get("older_than_ms").map(|v| v.parse::<u64>()) {
        None => None,
        Some(Ok(ms)) => Some(std::time::Duration::from_millis(ms)),
        Some(Err(_)) => {
            return error_reply(&IndexerError::invalid(
                "older_than_ms must be a number of milliseconds",
            ));
        }
    };
    if let Some(k) = params.keys().find(|k| k.as_str() != "older_than_ms") {
        return error_reply(&IndexerError::invalid(format!(
            "unknown parameter {k:?} (older_than_ms is known)"
        )));
    }
    match ix.expire_now(&topic, older_than).await {
        Ok((expired, deleted)) => axum::Json(json!({
            "snapshots_expired": expired,
            "files_deleted": deleted,
        }))
        .into_response(),
        Err(e) => error_reply(&e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn query_parameters_parse_or_explain() {
        let q = parse_query(&params(&[
            ("key", "k1"),
            ("from", "2026-11-29T14:00:00Z"),
            ("to", "1795964400000"),
        ]))
        .unwrap();
        assert_eq!(q.key.as_deref(), Some(&b"k1"[..]));
        assert_eq!(q.from_ms, Some(1_795_960_800_000));
        assert_eq!(q.to_ms, Some(1_795_964_400_000));
        assert_eq!(q.limit, DEFAULT_LIMIT);
        for bad in [
            params(&[("from", "yesterday")]),
            params(&[("limit", "0")]),
            params(&[("limit", "10001")]),
            params(&[("limit", "-3")]),
            params(&[("keys", "x")]),
        ] {
            let e = parse_query(&bad).unwrap_err();
            assert_eq!(e.kind, ErrorKind::InvalidRequest, "{bad:?}");
        }
    }

    #[test]
    fn bytes_that_are_not_utf8_travel_as_base64() {
        let r = Found {
            partition: 1,
            offset: 7,
            timestamp: 5,
            key: Some(Bytes::from_static(b"k")),
            value: Some(Bytes::from_static(&[0xff, 0x00])),
            headers: vec![("h".into(), None)],
        };
        let v = record_json(&r);
        assert_eq!(v["key"], "k");
        assert_eq!(v["value"], Value::Null);
        assert_eq!(v["value_base64"], "/wA=");
        assert_eq!(v["headers"][0]["value"], Value::Null);
    }
}
