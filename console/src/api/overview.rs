//! `/ui/api/overview`: the cluster at a glance. Its id and the topic counts
//! come from Kafka answers (so only what the asker may describe is
//! counted); the metadata service's Raft state and the brokers with what
//! they own are Floe's own, shown to a principal that may describe the
//! cluster.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use floe_metadata::acl::Operation;
use floe_metadata::api::{proto, routes};
use serde_json::{Value, json};

use crate::Console;
use crate::caller::Asker;
use crate::error::ApiResult;
use crate::kafka;

/// Partitions and shards a broker owns, and the range of their epochs.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Owned {
    partitions: u64,
    shards: u64,
    epochs: Option<(u64, u64)>,
}

impl Owned {
    fn epoch(&mut self, e: u64) {
        self.epochs = Some(match self.epochs {
            None => (e, e),
            Some((lo, hi)) => (lo.min(e), hi.max(e)),
        });
    }
}

pub async fn overview(State(c): State<Arc<Console>>, Asker(who): Asker) -> ApiResult<Json<Value>> {
    let ctx = &c.ctx;
    let md = kafka::metadata(ctx, &who, None).await?;
    let topics = md.topics.iter().filter(|t| t.error_code == 0).count();
    let partitions: usize = md
        .topics
        .iter()
        .filter(|t| t.error_code == 0)
        .map(|t| t.partitions.len())
        .sum();
    let cluster_id = md.cluster_id.as_ref().map(|s| s.to_string());
    let snap = ctx.view.current();
    let check = ctx.authz.check(&snap.acls, &who);
    let mut out = json!({
        "cluster_id": cluster_id,
        "topics": topics,
        "partitions": partitions,
        "metadata": null,
        "metadata_error": null,
        "brokers": [],
        "proxies": [],
        "unowned_partitions": null,
    });
    if !check.cluster(Operation::Describe) {
        out["metadata_error"] = json!("not allowed: describing the cluster needs DESCRIBE on it");
        return Ok(Json(out));
    }
    let mut owned: BTreeMap<u32, Owned> = BTreeMap::new();
    let mut unowned = 0u64;
    for t in snap.topics.values() {
        for p in &t.partitions {
            match p.owner {
                Some(b) => {
                    let o = owned.entry(b.0).or_default();
                    o.partitions += 1;
                    o.epoch(p.epoch.0);
                }
                None => unowned += 1,
            }
        }
    }
    for s in &snap.shards {
        if let Some(b) = s.owner {
            owned.entry(b.0).or_default().shards += 1;
        }
    }
    out["unowned_partitions"] = json!(unowned);
    drop(snap);
    match ctx.meta.call::<routes::Status>(proto::Empty {}).await {
        Ok(s) => {
            out["metadata"] = json!({
                "leader_id": s.leader_id,
                "term": s.term,
                "last_applied": s.last_applied,
                "members": s.members.iter().map(|m| json!({
                    "id": m.id,
                    "addr": m.addr,
                    "voter": m.voter,
                    "leader": m.id == s.leader_id,
                })).collect::<Vec<_>>(),
            });
        }
        Err(e) => {
            out["metadata_error"] = json!(format!("the metadata service did not answer: {e}"))
        }
    }
    match ctx.meta.call::<routes::ListNodes>(proto::Empty {}).await {
        Ok(nodes) => {
            let now = nodes.now_ms as i64;
            let mut brokers = Vec::new();
            let mut proxies = Vec::new();
            for n in &nodes.nodes {
                if n.kind == "proxy" {
                    proxies.push(json!({ "id": n.id, "addr": n.addr, "state": n.state }));
                    continue;
                }
                let o = owned.get(&n.id).copied().unwrap_or_default();
                brokers.push(json!({
                    "id": n.id,
                    "addr": n.addr,
                    "state": n.state,
                    "lease_left_ms": n.lease_until_ms as i64 - now,
                    "partitions": o.partitions,
                    "shards": o.shards,
                    "epochs": o.epochs.map(|(min, max)| json!({ "min": min, "max": max })),
                }));
            }
            out["brokers"] = json!(brokers);
            out["proxies"] = json!(proxies);
        }
        Err(e) => {
            if out["metadata_error"].is_null() {
                out["metadata_error"] =
                    json!(format!("the metadata service did not list its nodes: {e}"));
            }
        }
    }
    Ok(Json(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn epochs_are_a_range() {
        let mut o = Owned::default();
        o.epoch(5);
        o.epoch(2);
        o.epoch(9);
        assert_eq!(o.epochs, Some((2, 9)));
    }
}
