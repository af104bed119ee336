//! `/ui/api/groups` and `/ui/api/groups/{id}`: groups of every type with
//! their members, committed offsets and lag, as ListGroups, DescribeGroups
//! (or ConsumerGroupDescribe, ShareGroupDescribe), OffsetFetch (or
//! DescribeShareGroupOffsets) and ListOffsets answer the asker.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, Query, State};
use serde_json::{Value, json};

use super::Page;
use crate::Console;
use crate::caller::Asker;
use crate::error::{ApiError, ApiResult, Kind};
use crate::kafka::{self, Spec};

/// A group's type as ListGroups names it (`classic`, `consumer`, `share`).
fn type_of(group_type: &str) -> String {
    match group_type.to_ascii_lowercase().as_str() {
        "" => "classic".to_string(),
        t => t.to_string(),
    }
}

pub async fn list(
    State(c): State<Arc<Console>>,
    Asker(who): Asker,
    Query(page): Query<Page>,
) -> ApiResult<Json<Value>> {
    let resp = kafka::list_groups(&c.ctx, &who).await?;
    if resp.error_code != 0 {
        return Err(ApiError::from_code(resp.error_code, "listing groups"));
    }
    let mut groups: Vec<_> = resp
        .groups
        .iter()
        .filter(|g| page.matches(g.group_id.0.as_str()))
        .collect();
    groups.sort_by(|a, b| a.group_id.0.as_str().cmp(b.group_id.0.as_str()));
    let total = groups.len();
    let (offset, limit) = page.bounds(total)?;
    let rows: Vec<Value> = groups
        .into_iter()
        .skip(offset)
        .take(limit)
        .map(|g| {
            json!({
                "id": g.group_id.0.as_str(),
                "type": type_of(g.group_type.as_str()),
                "state": g.group_state.as_str(),
                "protocol_type": g.protocol_type.as_str(),
            })
        })
        .collect();
    Ok(Json(
        json!({ "total": total, "offset": offset, "limit": limit, "groups": rows }),
    ))
}

/// One member as the page shows it.
fn member(id: &str, client_id: &str, host: &str, assignment: Vec<(String, Vec<i32>)>) -> Value {
    json!({
        "member_id": id,
        "client_id": client_id,
        "host": host,
        "assignment": assignment.into_iter().map(|(topic, partitions)| json!({
            "topic": topic,
            "partitions": partitions,
        })).collect::<Vec<_>>(),
    })
}

/// (topic, partition) pairs grouped by topic, partitions sorted.
fn by_topic(mut pairs: Vec<(String, i32)>) -> Vec<(String, Vec<i32>)> {
    pairs.sort();
    let mut out: Vec<(String, Vec<i32>)> = Vec::new();
    for (t, p) in pairs {
        match out.last_mut() {
            Some((last, ps)) if *last == t => ps.push(p),
            _ => out.push((t, vec![p])),
        }
    }
    out
}

/// An assignment (topic, its partitions), grouped by topic.
fn pairs<'a>(
    tps: impl Iterator<Item = (&'a kafka_protocol::messages::TopicName, &'a [i32])>,
) -> Vec<(String, Vec<i32>)> {
    by_topic(
        tps.flat_map(|(t, ps)| ps.iter().map(move |p| (t.0.to_string(), *p)))
            .collect(),
    )
}

/// The group's type as ListGroups answers the asker (`classic`,
/// `consumer`, `share`), or none when it does not list it: each type is
/// described, and its offsets moved, by its own API.
pub(crate) async fn group_type(
    ctx: &floe_proxy::handlers::Context,
    who: &floe_proxy::groups::ClientInfo,
    id: &str,
) -> ApiResult<Option<String>> {
    let listed = kafka::list_groups(ctx, who).await?;
    Ok(listed
        .groups
        .iter()
        .find(|g| g.group_id.0.as_str() == id)
        .map(|g| type_of(g.group_type.as_str())))
}

pub async fn describe(
    State(c): State<Arc<Console>>,
    Asker(who): Asker,
    Path(id): Path<String>,
) -> ApiResult<Json<Value>> {
    let ctx = &c.ctx;
    let kind = group_type(ctx, &who, &id).await?;
    let what = format!("group {id}");
    let (kind, state, members) = match kind.as_deref() {
        Some("consumer") => {
            let g = kafka::describe_consumer(ctx, &who, &id).await?;
            if g.error_code != 0 {
                return Err(ApiError::from_code(g.error_code, &what));
            }
            let members = g
                .members
                .iter()
                .map(|m| {
                    let tps = m.assignment.topic_partitions.iter();
                    let pairs = pairs(tps.map(|t| (&t.topic_name, t.partitions.as_slice())));
                    member(&m.member_id, &m.client_id, &m.client_host, pairs)
                })
                .collect::<Vec<_>>();
            ("consumer", g.group_state.to_string(), members)
        }
        Some("share") => {
            let g = kafka::describe_share(ctx, &who, &id).await?;
            if g.error_code != 0 {
                return Err(ApiError::from_code(g.error_code, &what));
            }
            let members = g
                .members
                .iter()
                .map(|m| {
                    let tps = m.assignment.topic_partitions.iter();
                    let pairs = pairs(tps.map(|t| (&t.topic_name, t.partitions.as_slice())));
                    member(&m.member_id, &m.client_id, &m.client_host, pairs)
                })
                .collect::<Vec<_>>();
            ("share", g.group_state.to_string(), members)
        }
        // A classic group, or one ListGroups did not show (DescribeGroups
        // tells a missing group from a refused one).
        _ => {
            let g = kafka::describe_classic(ctx, &who, &id).await?;
            if g.error_code != 0 {
                return Err(ApiError::from_code(g.error_code, &what));
            }
            if g.group_state.as_str() == "Dead" && kind.is_none() {
                return Err(ApiError::new(Kind::NotFound, format!("{what}: not found")));
            }
            let members = g
                .members
                .iter()
                .map(|m| {
                    // A member's assignment is the client's own bytes: one
                    // that does not decode is shown empty, not an error.
                    let pairs =
                        floe_client::decode_assignment(&m.member_assignment).unwrap_or_default();
                    member(&m.member_id, &m.client_id, &m.client_host, by_topic(pairs))
                })
                .collect::<Vec<_>>();
            ("classic", g.group_state.to_string(), members)
        }
    };
    let offsets = if kind == "share" {
        kafka::share_offsets(ctx, &who, &id).await?
    } else {
        kafka::committed_offsets(ctx, &who, &id).await?
    };
    let offsets =
        offsets.map_err(|code| ApiError::from_code(code, &format!("{what}'s offsets")))?;
    let parts: Vec<(String, i32)> = offsets.iter().map(|(t, p, _)| (t.clone(), *p)).collect();
    let ends = kafka::list_offsets(ctx, &who, &parts, Spec::Latest).await?;
    let mut total_lag = 0i64;
    let rows: Vec<Value> = offsets
        .iter()
        .zip(ends)
        .map(|((topic, partition, committed), end)| {
            let lag = end.map(|e| (e - committed).max(0));
            total_lag += lag.unwrap_or(0);
            json!({
                "topic": topic,
                "partition": partition,
                "committed": committed,
                "end_offset": end,
                "lag": lag,
            })
        })
        .collect();
    Ok(Json(json!({
        "id": id,
        "type": kind,
        "state": state,
        "members": members,
        "offsets": rows,
        "total_lag": total_lag,
    })))
}
