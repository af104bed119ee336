//! `/ui/api/transactions` and `/ui/api/topics/{name}/producers`: the
//! transactions the coordinators hold (ListTransactions, then
//! DescribeTransactions for the page shown) and the producers each of a
//! topic's partitions knows (DescribeProducers), as the asker may see them.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, Query, State};
use serde_json::{Value, json};

use super::Page;
use super::topics::metadata_of;
use crate::Console;
use crate::caller::Asker;
use crate::error::{ApiError, ApiResult};
use crate::kafka;

/// States in which a transaction is open (its start time means something).
fn is_open(state: &str) -> bool {
    matches!(
        state,
        "Ongoing" | "PrepareCommit" | "PrepareAbort" | "PrepareEpochFence"
    )
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

pub async fn list(
    State(c): State<Arc<Console>>,
    Asker(who): Asker,
    Query(page): Query<Page>,
) -> ApiResult<Json<Value>> {
    let listed = kafka::list_transactions(&c.ctx, &who).await?;
    let mut ids: Vec<String> = listed
        .transaction_states
        .iter()
        .map(|t| t.transactional_id.0.to_string())
        .filter(|id| page.matches(id))
        .collect();
    ids.sort();
    ids.dedup();
    let total = ids.len();
    let (offset, limit) = page.bounds(total)?;
    let shown: Vec<String> = ids.into_iter().skip(offset).take(limit).collect();
    let described = kafka::describe_transactions(&c.ctx, &who, &shown).await?;
    let now = now_ms();
    let rows: Vec<Value> = described
        .iter()
        .filter(|t| t.error_code == 0)
        .map(|t| {
            let state = t.transaction_state.as_str();
            let open = is_open(state) && t.transaction_start_time_ms >= 0;
            json!({
                "id": t.transactional_id.0.as_str(),
                "state": state,
                "producer_id": t.producer_id.0,
                "producer_epoch": t.producer_epoch,
                "timeout_ms": t.transaction_timeout_ms,
                "start_ms": open.then_some(t.transaction_start_time_ms),
                "age_ms": open.then(|| (now - t.transaction_start_time_ms).max(0)),
                "partitions": t.topics.iter().map(|d| json!({
                    "topic": d.topic.0.as_str(),
                    "partitions": d.partitions,
                })).collect::<Vec<_>>(),
            })
        })
        .collect();
    Ok(Json(
        json!({ "total": total, "offset": offset, "limit": limit, "transactions": rows }),
    ))
}

pub async fn producers(
    State(c): State<Arc<Console>>,
    Asker(who): Asker,
    Path(name): Path<String>,
) -> ApiResult<Json<Value>> {
    let t = metadata_of(&c, &who, &name).await?;
    let mut partitions: Vec<i32> = t.partitions.iter().map(|p| p.partition_index).collect();
    partitions.sort_unstable();
    let answered = kafka::describe_producers(&c.ctx, &who, &name, &partitions).await?;
    let rows: Vec<Value> = answered
        .iter()
        .map(|p| {
            let error = (p.error_code != 0).then(|| {
                ApiError::from_answer(
                    p.error_code,
                    p.error_message.as_deref(),
                    &format!("partition {}", p.partition_index),
                )
                .message
            });
            json!({
                "partition": p.partition_index,
                "error": error,
                "producers": p.active_producers.iter().map(|s| json!({
                    "producer_id": s.producer_id.0,
                    "producer_epoch": s.producer_epoch,
                    "last_sequence": s.last_sequence,
                    "last_timestamp": s.last_timestamp,
                    "coordinator_epoch": s.coordinator_epoch,
                    "current_txn_start_offset": s.current_txn_start_offset,
                })).collect::<Vec<_>>(),
            })
        })
        .collect();
    Ok(Json(json!({ "topic": name, "partitions": rows })))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_open_transaction_has_an_age() {
        assert!(is_open("Ongoing") && is_open("PrepareCommit"));
        assert!(!is_open("Empty") && !is_open("CompleteCommit") && !is_open("CompleteAbort"));
    }
}
