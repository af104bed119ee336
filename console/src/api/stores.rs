//! `/ui/api/stores`: the object-store endpoints this process writes to,
//! with its writes, errors, hedges and whether the pool has benched each
//! (this process's view, from its own metrics), and each broker's pool as
//! the broker answers it (`/rpc/store/stats`). DESCRIBE on the cluster
//! needed, as for the brokers on the overview.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use floe_metadata::acl::Operation;
use serde_json::{Value, json};

use crate::Console;
use crate::caller::Asker;
use crate::error::ApiResult;
use crate::stores;

/// How long each broker may take to answer for its store endpoints.
const BROKER_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(3);

pub async fn endpoints(State(c): State<Arc<Console>>, Asker(who): Asker) -> ApiResult<Json<Value>> {
    c.may_cluster(
        &who,
        Operation::Describe,
        "the store endpoints need DESCRIBE on the cluster",
    )?;
    let endpoints = stores::endpoints(&c.rates.text());
    // Every broker's pool, asked of it: on a proxy of a cluster the
    // process's own figures hold none.
    let brokers: Vec<Value> = c
        .ctx
        .brokers_store_stats(BROKER_TIMEOUT)
        .await
        .into_iter()
        .map(|(id, addr, stats)| match stats {
            Ok(s) => json!({
                "broker": id,
                "addr": addr,
                "endpoints": s.endpoints.iter().map(|e| json!({
                    "endpoint": e.id,
                    "written": e.written,
                    "abandoned": e.abandoned,
                    "hedged": e.hedged,
                    "benched": e.benched,
                    "write_deadline_ms": (e.write_deadline_ms > 0).then_some(e.write_deadline_ms),
                })).collect::<Vec<_>>(),
                "error": null,
            }),
            Err(e) => json!({ "broker": id, "addr": addr, "endpoints": [], "error": e }),
        })
        .collect();
    Ok(Json(json!({
        "scope": "this process",
        "broker_here": c.ctx.local.is_some(),
        "endpoints": endpoints,
        "brokers": brokers,
    })))
}
