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

#[derive(Debug, Deserialize)]
pub struct Across {
    /// Milliseconds since the Unix epoch: each partition from its first
    /// record at or after it (absent: from each partition's first offset).
    pub timestamp: Option<i64>,
    /// Where the previous page left each partition: `P:O,P:O,…`.
    pub cursor: Option<String>,
    pub limit: Option<usize>,
}

/// A cursor's positions: partition → the next offset to read there.
fn parse_cursor(cursor: &str) -> ApiResult<std::collections::BTreeMap<i32, i64>> {
    cursor
        .split(',')
        .filter(|s| !s.is_empty())
        .map(|pair| {
            let (p, o) = pair.split_once(':').ok_or_else(|| {
                ApiError::new(
                    Kind::Invalid,
                    format!("cursor: {pair:?} is not PARTITION:OFFSET"),
                )
            })?;
            match (p.parse::<i32>(), o.parse::<i64>()) {
                (Ok(p), Ok(o)) if p >= 0 && o >= 0 => Ok((p, o)),
                _ => Err(ApiError::new(
                    Kind::Invalid,
                    format!("cursor: {pair:?} is not PARTITION:OFFSET"),
                )),
            }
        })
        .collect()
}

/// Records of every partition merged by time: the first `limit` at or
/// after the start, in (timestamp, partition, offset) order, and where
/// each partition is left.
fn merge(
    mut read: Vec<(i32, Vec<floe_client::Record>)>,
    mut at: std::collections::BTreeMap<i32, i64>,
    limit: usize,
) -> (
    Vec<(i32, floe_client::Record)>,
    std::collections::BTreeMap<i32, i64>,
    bool,
) {
    let mut all: Vec<(i32, floe_client::Record)> = read
        .drain(..)
        .flat_map(|(p, rs)| rs.into_iter().map(move |r| (p, r)))
        .collect();
    all.sort_by_key(|(p, r)| (r.timestamp, *p, r.offset));
    let more = all.len() > limit;
    all.truncate(limit);
    for (p, r) in &all {
        at.insert(*p, r.offset + 1);
    }
    (all, at, more)
}

/// `/ui/api/topics/{name}/records/all`: a page of the records of every
/// partition (the asker may read) merged by timestamp, from a time or from
/// the start, paged with a cursor of each partition's position.
pub async fn across(
    State(c): State<Arc<Console>>,
    Asker(who): Asker,
    Path(name): Path<String>,
    Query(q): Query<Across>,
) -> ApiResult<Json<Value>> {
    let limit = q.limit.unwrap_or(20);
    if limit == 0 || limit > MAX_RECORDS {
        return Err(ApiError::new(
            Kind::Invalid,
            format!("limit={limit}: between 1 and {MAX_RECORDS}"),
        ));
    }
    let md = kafka::metadata(&c.ctx, &who, Some(std::slice::from_ref(&name))).await?;
    let Some(t) = md.topics.iter().find(|t| t.error_code == 0) else {
        let code = md.topics.first().map_or(3, |t| t.error_code);
        return Err(ApiError::from_code(code, &format!("topic {name}")));
    };
    let mut ids: Vec<i32> = t.partitions.iter().map(|p| p.partition_index).collect();
    ids.sort_unstable();
    let keys: Vec<(String, i32)> = ids.iter().map(|p| (name.clone(), *p)).collect();
    let at: std::collections::BTreeMap<i32, i64> = match (&q.cursor, q.timestamp) {
        (Some(_), Some(_)) => {
            return Err(ApiError::new(
                Kind::Invalid,
                "give a cursor or a timestamp, not both",
            ));
        }
        (Some(cursor), None) => parse_cursor(cursor)?,
        (None, Some(ts)) => {
            let found = kafka::list_offsets(&c.ctx, &who, &keys, Spec::Time(ts)).await?;
            let ends = kafka::list_offsets(&c.ctx, &who, &keys, Spec::Stable).await?;
            ids.iter()
                .zip(found.into_iter().zip(ends))
                .map(|(p, (f, e))| (*p, f.or(e).unwrap_or(0)))
                .collect()
        }
        (None, None) => {
            let first = kafka::list_offsets(&c.ctx, &who, &keys, Spec::Earliest).await?;
            ids.iter()
                .zip(first)
                .map(|(p, f)| (*p, f.unwrap_or(0)))
                .collect()
        }
    };
    let reads = futures::future::join_all(at.iter().map(|(p, o)| {
        let (c, who, name) = (&c, &who, &name);
        async move { (*p, read(c, who, name, *p, *o, limit).await) }
    }))
    .await;
    let mut got = Vec::with_capacity(reads.len());
    let mut ends = std::collections::BTreeMap::new();
    for (p, r) in reads {
        let (records, _, end) = r?;
        ends.insert(p, end);
        got.push((p, records));
    }
    let (page, left, _) = merge(got, at, limit);
    // More to read: a partition left before its last stable offset.
    let more = left
        .iter()
        .any(|(p, o)| ends.get(p).copied().flatten().is_some_and(|e| e > *o));
    let ends: serde_json::Map<String, Value> = ends
        .into_iter()
        .map(|(p, e)| (p.to_string(), json!(e)))
        .collect();
    let cursor = left
        .iter()
        .map(|(p, o)| format!("{p}:{o}"))
        .collect::<Vec<_>>()
        .join(",");
    let rows: Vec<Value> = page
        .iter()
        .map(|(p, r)| {
            let mut row = record_json(r);
            row["partition"] = json!(p);
            row
        })
        .collect();
    Ok(Json(json!({
        "partitions": ids,
        "cursor": cursor,
        "more": more,
        "end_offsets": ends,
        "records": rows,
    })))
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

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(offset: i64, timestamp: i64) -> floe_client::Record {
        floe_client::Record {
            offset,
            timestamp,
            key: None,
            value: None,
            headers: Vec::new(),
        }
    }

    #[test]
    fn partitions_merge_by_time_and_the_cursor_moves_past_what_was_shown() {
        let at = [(0, 10), (1, 0), (2, 5)].into_iter().collect();
        let read = vec![
            (0, vec![rec(10, 100), rec(11, 300)]),
            (1, vec![rec(0, 200), rec(1, 200)]),
            (2, vec![]),
        ];
        let (page, left, more) = merge(read, at, 3);
        let shown: Vec<(i32, i64)> = page.iter().map(|(p, r)| (*p, r.offset)).collect();
        assert_eq!(shown, vec![(0, 10), (1, 0), (1, 1)]);
        assert!(more, "offset 11 of partition 0 is left");
        assert_eq!(
            left.into_iter().collect::<Vec<_>>(),
            vec![(0, 11), (1, 2), (2, 5)]
        );
        assert_eq!(
            parse_cursor("0:11,1:2,2:5")
                .expect("a cursor")
                .into_iter()
                .collect::<Vec<_>>(),
            vec![(0, 11), (1, 2), (2, 5)]
        );
        assert!(parse_cursor("0:x").is_err());
        assert!(parse_cursor("-1:3").is_err());
    }
}
