//! `/ui/api/topics` and `/ui/api/topics/{name}`: topics with their
//! partitions' offsets (ListOffsets), settings (DescribeConfigs), and the
//! owner and epoch of each partition from the proxy's cluster view.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, Query, State};
use kafka_protocol::messages::metadata_response::MetadataResponseTopic;
use serde_json::{Value, json};

use super::Page;
use crate::Console;
use crate::caller::Asker;
use crate::error::{ApiError, ApiResult};
use crate::kafka::{self, Spec};

/// The topic's name as Metadata answers it.
fn name_of(t: &MetadataResponseTopic) -> String {
    t.name.as_ref().map(|n| n.0.to_string()).unwrap_or_default()
}

/// Every (topic, partition) of `topics`, in order.
fn partitions_of(topics: &[&MetadataResponseTopic]) -> Vec<(String, i32)> {
    let mut out = Vec::new();
    for t in topics {
        let name = name_of(t);
        let mut ps: Vec<i32> = t.partitions.iter().map(|p| p.partition_index).collect();
        ps.sort_unstable();
        out.extend(ps.into_iter().map(|p| (name.clone(), p)));
    }
    out
}

/// The value of setting `key` in a DescribeConfigs answer.
fn setting<'a>(
    configs: &'a [kafka_protocol::messages::describe_configs_response::DescribeConfigsResourceResult],
    key: &str,
) -> Option<&'a str> {
    configs
        .iter()
        .find(|c| c.name.as_str() == key)
        .and_then(|c| c.value.as_deref())
}

pub async fn list(
    State(c): State<Arc<Console>>,
    Asker(who): Asker,
    Query(page): Query<Page>,
) -> ApiResult<Json<Value>> {
    let md = kafka::metadata(&c.ctx, &who, None).await?;
    let mut topics: Vec<&MetadataResponseTopic> = md
        .topics
        .iter()
        .filter(|t| t.error_code == 0 && page.matches(&name_of(t)))
        .collect();
    topics.sort_by_key(|t| name_of(t));
    let total = topics.len();
    let (offset, limit) = page.bounds(total)?;
    let shown: Vec<&MetadataResponseTopic> = topics.into_iter().skip(offset).take(limit).collect();
    let parts = partitions_of(&shown);
    let first = kafka::list_offsets(&c.ctx, &who, &parts, Spec::Earliest).await?;
    let end = kafka::list_offsets(&c.ctx, &who, &parts, Spec::Latest).await?;
    let names: Vec<String> = shown.iter().map(|t| name_of(t)).collect();
    let configs = kafka::topic_configs(&c.ctx, &who, &names).await?;
    let mut rows = Vec::new();
    let mut at = 0;
    for t in &shown {
        let name = name_of(t);
        let n = t.partitions.len();
        // The records of every partition, or null when one did not answer.
        let records =
            (at..at + n).try_fold(0i64, |sum, i| Some(sum + (end[i]? - first[i]?).max(0)));
        at += n;
        let cfg = configs
            .iter()
            .find(|(tn, _)| *tn == name)
            .and_then(|(_, r)| r.as_ref().ok());
        rows.push(json!({
            "name": name,
            "id": t.topic_id.to_string(),
            "partitions": n,
            "internal": t.is_internal,
            "records": records,
            "cleanup_policy": cfg.and_then(|c| setting(c, "cleanup.policy")),
            "retention_ms": cfg.and_then(|c| setting(c, "retention.ms")).and_then(|v| v.parse::<i64>().ok()),
        }));
    }
    Ok(Json(
        json!({ "total": total, "offset": offset, "limit": limit, "topics": rows }),
    ))
}

/// One topic as Metadata answers the asker: not found, refused, or its
/// partitions.
pub async fn metadata_of(
    c: &Console,
    who: &floe_proxy::groups::ClientInfo,
    name: &str,
) -> ApiResult<MetadataResponseTopic> {
    let md = kafka::metadata(&c.ctx, who, Some(&[name.to_string()])).await?;
    let Some(t) = md.topics.into_iter().find(|t| name_of(t) == name) else {
        return Err(ApiError::from_code(3, &format!("topic {name}")));
    };
    if t.error_code != 0 {
        return Err(ApiError::from_code(t.error_code, &format!("topic {name}")));
    }
    Ok(t)
}

pub async fn describe(
    State(c): State<Arc<Console>>,
    Asker(who): Asker,
    Path(name): Path<String>,
) -> ApiResult<Json<Value>> {
    let t = &metadata_of(&c, &who, &name).await?;
    let parts = partitions_of(&[t]);
    let first = kafka::list_offsets(&c.ctx, &who, &parts, Spec::Earliest).await?;
    let end = kafka::list_offsets(&c.ctx, &who, &parts, Spec::Latest).await?;
    let lso = kafka::list_offsets(&c.ctx, &who, &parts, Spec::Stable).await?;
    // Owner and epoch: the proxy's view of who serves each partition (the
    // asker may describe the topic: Metadata answered it).
    let snap = c.ctx.view.current();
    let info = snap.topics.get(&name).cloned();
    drop(snap);
    let partitions: Vec<Value> = parts
        .iter()
        .enumerate()
        .map(|(i, (_, p))| {
            let held = info.as_ref().and_then(|t| {
                t.partitions
                    .iter()
                    .find(|x| i64::from(x.partition) == i64::from(*p))
            });
            json!({
                "partition": p,
                "first_offset": first[i],
                "end_offset": end[i],
                "lso": lso[i],
                "records": first[i].zip(end[i]).map(|(f, e)| (e - f).max(0)),
                "owner": held.and_then(|h| h.owner).map(|b| b.0),
                "epoch": held.filter(|h| h.owner.is_some()).map(|h| h.epoch.0),
                "handover_to": held.and_then(|h| h.handover_to).map(|b| b.0),
            })
        })
        .collect();
    let configs = kafka::topic_configs(&c.ctx, &who, std::slice::from_ref(&name)).await?;
    let (configs, configs_error) = match configs.into_iter().next() {
        Some((_, Ok(entries))) => {
            let mut rows: Vec<Value> = entries
                .iter()
                .map(|e| {
                    // Source 1 (DYNAMIC_TOPIC_CONFIG): set on the topic;
                    // any other is a default of the broker or of Kafka.
                    let default = e.config_source != 1;
                    json!({
                        "name": e.name.as_str(),
                        "value": if e.is_sensitive { None } else { e.value.as_deref() },
                        "default": default,
                        "sensitive": e.is_sensitive,
                    })
                })
                .collect();
            rows.sort_by_key(|r| {
                (
                    r["default"].as_bool(),
                    r["name"].as_str().map(str::to_string),
                )
            });
            (json!(rows), Value::Null)
        }
        Some((_, Err(code))) => (
            Value::Null,
            json!(ApiError::from_code(code, "settings").message),
        ),
        None => (Value::Null, json!("DescribeConfigs answered nothing")),
    };
    let stored_bytes = match c.ctx.meta.describe_topic(&name).await {
        Ok(t) => t
            .partitions
            .iter()
            .map(|p| p.stored_bytes)
            .sum::<Option<u64>>(),
        Err(_) => None,
    };
    Ok(Json(json!({
        "name": name,
        "id": t.topic_id.to_string(),
        "internal": t.is_internal,
        "stored_bytes": stored_bytes,
        "partitions": partitions,
        "configs": configs,
        "configs_error": configs_error,
    })))
}
