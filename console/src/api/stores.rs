//! `/ui/api/stores`: the object-store endpoints this process writes to,
//! with its writes, errors, hedges and whether the pool has benched each
//! (this process's view, from its own metrics). DESCRIBE on the cluster
//! needed, as for the brokers on the overview.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use floe_metadata::acl::Operation;
use serde_json::{Value, json};

use crate::Console;
use crate::caller::Asker;
use crate::error::{ApiError, ApiResult, Kind};
use crate::stores;

pub async fn endpoints(State(c): State<Arc<Console>>, Asker(who): Asker) -> ApiResult<Json<Value>> {
    let snap = c.ctx.view.current();
    let allowed = c
        .ctx
        .authz
        .check(&snap.acls, &who)
        .cluster(Operation::Describe);
    drop(snap);
    if !allowed {
        return Err(ApiError::new(
            Kind::Denied,
            "not allowed: the store endpoints need DESCRIBE on the cluster",
        ));
    }
    let endpoints = stores::endpoints(&c.rates.text());
    Ok(Json(json!({
        "scope": "this process",
        "broker_here": c.ctx.local.is_some(),
        "endpoints": endpoints,
    })))
}
