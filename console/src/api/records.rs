//! `/ui/api/topics/{name}/records`: a page of a partition's committed
//! records from an offset or a time, read with a Fetch the proxy answers as
//! it would a read_committed consumer's (READ on the topic needed).

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, Query, State};
use base64::Engine as _;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::Console;
use crate::caller::Asker;
use crate::error::{ApiError, ApiResult, Kind};
use crate::kafka::{self, Spec};

/// The most records one page holds.
pub const MAX_RECORDS: usize = 200;
/// Bytes one fetch asks for: a page of small records in one round, and a
/// bound on what a page of large ones holds.
const FETCH_BYTES: i32 = 1024 * 1024;
/// Fetches one page makes at most (a partition of control batches and
/// aborted records may need more than one to find a page of records).
const MAX_ROUNDS: usize = 4;

#[derive(Debug, Deserialize)]
pub struct From {
    pub partition: Option<i32>,
    pub offset: Option<i64>,
    /// Milliseconds since the Unix epoch: the first record at or after it.
    pub timestamp: Option<i64>,
    pub limit: Option<usize>,
}

fn b64(b: &Option<bytes::Bytes>) -> Value {
    match b {
        Some(b) => json!(base64::engine::general_purpose::STANDARD.encode(b)),
        None => Value::Null,
    }
}

/// A record as the pages show it: key, value and header values in base64.
pub(crate) fn record_json(r: &floe_client::Record) -> Value {
    json!({
        "offset": r.offset,
        "timestamp": r.timestamp,
        "key": b64(&r.key),
        "value": b64(&r.value),
        "headers": r.headers.iter().map(|h| json!({
            "key": String::from_utf8_lossy(&h.key),
            "value": b64(&h.value),
        })).collect::<Vec<_>>(),
    })
}

pub async fn records(
    State(c): State<Arc<Console>>,
    Asker(who): Asker,
    Path(name): Path<String>,
    Query(from): Query<From>,
) -> ApiResult<Json<Value>> {
    let partition = from.partition.unwrap_or(0);
    if partition < 0 {
        return Err(ApiError::new(Kind::Invalid, "partition: 0 or more"));
    }
    let limit = from.limit.unwrap_or(20);
    if limit == 0 || limit > MAX_RECORDS {
        return Err(ApiError::new(
            Kind::Invalid,
            format!("limit={limit}: between 1 and {MAX_RECORDS}"),
        ));
    }
    let key = [(name.clone(), partition)];
    let start = match (from.offset, from.timestamp) {
        (Some(_), Some(_)) => {
            return Err(ApiError::new(
                Kind::Invalid,
                "give offset or timestamp, not both",
            ));
        }
        (Some(o), None) if o < 0 => return Err(ApiError::new(Kind::Invalid, "offset: 0 or more")),
        (Some(o), None) => o,
        (None, Some(t)) => match kafka::list_offsets(&c.ctx, &who, &key, Spec::Time(t)).await?[0] {
            Some(o) => o,
            // No record at or after that time: the page starts at the end.
            None => kafka::list_offsets(&c.ctx, &who, &key, Spec::Stable).await?[0].ok_or_else(
                || {
                    ApiError::new(
                        Kind::Unavailable,
                        "the partition's end offset could not be read",
                    )
                },
            )?,
        },
        (None, None) => kafka::list_offsets(&c.ctx, &who, &key, Spec::Earliest).await?[0]
            .ok_or_else(|| {
                ApiError::new(
                    Kind::Unavailable,
                    "the partition's first offset could not be read",
                )
            })?,
    };
    let (out, position, end) = read(&c, &who, &name, partition, start, limit).await?;
    let next_offset = out.last().map_or(position, |r| r.offset + 1);
    let rows: Vec<Value> = out.iter().map(record_json).collect();
    Ok(Json(json!({
        "partition": partition,
        "from": start,
        "next_offset": next_offset,
        "end_offset": end,
        "records": rows,
    })))
}

/// Up to `limit` committed records of `topic`'s `partition` from `start`
/// (fewer at the partition's end), read as a read_committed consumer
/// would: the records, the offset read up to, and the last stable offset.
pub(crate) async fn read(
    c: &Console,
    who: &floe_proxy::groups::ClientInfo,
    name: &str,
    partition: i32,
    start: i64,
    limit: usize,
) -> ApiResult<(Vec<floe_client::Record>, i64, Option<i64>)> {
    let mut position = start;
    let mut out = Vec::new();
    let mut end = None;
    for _ in 0..MAX_ROUNDS {
        let (data, pieces) =
            kafka::fetch(&c.ctx, who, name, partition, position, FETCH_BYTES).await?;
        if data.error_code != 0 {
            return Err(ApiError::from_code(
                data.error_code,
                &format!("{name} partition {partition}"),
            ));
        }
        end = Some(data.last_stable_offset.max(0));
        let bytes: bytes::Bytes = pieces.concat().into();
        let aborted: Vec<(i64, i64)> = data
            .aborted_transactions
            .unwrap_or_default()
            .iter()
            .map(|a| (a.producer_id.0, a.first_offset))
            .collect();
        let (recs, next) =
            floe_client::decode_committed(&bytes, position, &aborted).map_err(|e| {
                ApiError::new(
                    Kind::Unavailable,
                    format!("records at offset {position} do not decode: {e}"),
                )
            })?;
        let progressed = next > position;
        position = next;
        out.extend(recs);
        if out.len() >= limit || !progressed || end.is_some_and(|e| position >= e) {
            break;
        }
    }
    out.truncate(limit);
    Ok((out, position, end))
}
