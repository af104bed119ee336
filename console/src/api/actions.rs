//! The console's actions: topics created, altered, grown and deleted,
//! records produced, group offsets reset and groups deleted. Each is the
//! Kafka request a tool would send (CreateTopics, IncrementalAlterConfigs,
//! CreatePartitions, DeleteTopics, Produce, OffsetCommit or, for a share
//! group's start offsets, AlterShareGroupOffsets, DeleteGroups),
//! answered by the proxy for the signed-in principal, so the ACLs decide
//! as on the Kafka port. Bodies are JSON: a request of another type is
//! refused before it is read, so that a page of another site (a form
//! posting across origins) cannot make a browser act here. A deletion
//! needs the name it deletes typed again (`confirm`).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use axum::Json;
use axum::extract::rejection::JsonRejection;
use axum::extract::{Path, State};
use floe_client::ResetTo;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::Console;
use crate::caller::Asker;
use crate::error::{ApiError, ApiResult, Kind};
use crate::kafka::{self, Outcome, Spec};

/// The body, or why it is refused (not JSON, or not of the action's shape).
pub(crate) fn body<T>(b: Result<Json<T>, JsonRejection>) -> ApiResult<T> {
    b.map(|Json(t)| t).map_err(|e| {
        ApiError::new(
            Kind::Invalid,
            format!("the body must be JSON (Content-Type: application/json) of this action's fields: {e}"),
        )
    })
}

/// An action's outcome: done, or the Kafka error it answered.
fn done(what: &str, (code, message): Outcome) -> ApiResult<()> {
    if code == 0 {
        Ok(())
    } else {
        Err(ApiError::from_answer(code, message.as_deref(), what))
    }
}

/// A deletion's confirmation: the name typed again.
fn confirmed(confirm: &str, name: &str, what: &str) -> ApiResult<()> {
    if confirm == name {
        Ok(())
    } else {
        Err(ApiError::new(
            Kind::Invalid,
            format!("not deleted: type the {what}'s name ({name}) to confirm"),
        ))
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewTopic {
    pub name: String,
    /// Absent: the cluster's default.
    pub partitions: Option<i32>,
    #[serde(default)]
    pub configs: BTreeMap<String, String>,
}

/// `POST /ui/api/topics`.
pub async fn create_topic(
    State(c): State<Arc<Console>>,
    Asker(who): Asker,
    b: Result<Json<NewTopic>, JsonRejection>,
) -> ApiResult<Json<Value>> {
    let t = body(b)?;
    if t.partitions.is_some_and(|n| n < 1) {
        return Err(ApiError::new(Kind::Invalid, "partitions: 1 or more"));
    }
    let configs: Vec<(String, String)> = t.configs.into_iter().collect();
    let what = format!("creating topic {}", t.name);
    let outcome =
        kafka::create_topic(&c.ctx, &who, &t.name, t.partitions.unwrap_or(-1), &configs).await?;
    done(&what, outcome)?;
    Ok(Json(json!({ "created": t.name })))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Confirm {
    pub confirm: String,
}

/// `POST /ui/api/topics/{name}/delete`.
pub async fn delete_topic(
    State(c): State<Arc<Console>>,
    Asker(who): Asker,
    Path(name): Path<String>,
    b: Result<Json<Confirm>, JsonRejection>,
) -> ApiResult<Json<Value>> {
    confirmed(&body(b)?.confirm, &name, "topic")?;
    let outcome = kafka::delete_topic(&c.ctx, &who, &name).await?;
    done(&format!("deleting topic {name}"), outcome)?;
    Ok(Json(json!({ "deleted": name })))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AlterConfigs {
    #[serde(default)]
    pub set: BTreeMap<String, String>,
    #[serde(default)]
    pub delete: Vec<String>,
}

/// `POST /ui/api/topics/{name}/configs`.
pub async fn alter_configs(
    State(c): State<Arc<Console>>,
    Asker(who): Asker,
    Path(name): Path<String>,
    b: Result<Json<AlterConfigs>, JsonRejection>,
) -> ApiResult<Json<Value>> {
    let a = body(b)?;
    if a.set.is_empty() && a.delete.is_empty() {
        return Err(ApiError::new(
            Kind::Invalid,
            "nothing to change: give set or delete",
        ));
    }
    let set: Vec<(String, String)> = a.set.into_iter().collect();
    let outcome = kafka::alter_topic_configs(&c.ctx, &who, &name, &set, &a.delete).await?;
    done(&format!("altering topic {name}'s settings"), outcome)?;
    Ok(Json(json!({ "altered": name })))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AddPartitions {
    /// The topic's partition count after (more than it has).
    pub count: i32,
}

/// `POST /ui/api/topics/{name}/partitions`.
pub async fn add_partitions(
    State(c): State<Arc<Console>>,
    Asker(who): Asker,
    Path(name): Path<String>,
    b: Result<Json<AddPartitions>, JsonRejection>,
) -> ApiResult<Json<Value>> {
    let a = body(b)?;
    let outcome = kafka::add_partitions(&c.ctx, &who, &name, a.count).await?;
    done(&format!("adding partitions to topic {name}"), outcome)?;
    Ok(Json(json!({ "topic": name, "partitions": a.count })))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Header {
    pub key: String,
    pub value: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewRecord {
    /// Absent: by the key's hash (Kafka's partitioner), partition 0 without one.
    pub partition: Option<i32>,
    pub key: Option<String>,
    pub value: Option<String>,
    #[serde(default)]
    pub headers: Vec<Header>,
}

/// `POST /ui/api/topics/{name}/produce`: one record, as text (for
/// testing a consumer), acknowledged by every replica's rule (acks=all).
pub async fn produce(
    State(c): State<Arc<Console>>,
    Asker(who): Asker,
    Path(name): Path<String>,
    b: Result<Json<NewRecord>, JsonRejection>,
) -> ApiResult<Json<Value>> {
    let r = body(b)?;
    let count = c
        .ctx
        .view
        .current()
        .topics
        .get(&name)
        .map(|t| t.partition_count as i32);
    let partition = match (r.partition, &r.key) {
        (Some(p), _) => p,
        (None, Some(k)) => {
            floe_client::partitioner::partition_for_key(k.as_bytes(), count.unwrap_or(1))
        }
        (None, None) => 0,
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    let mut spec = floe_storage::records::RecordSpec::new(
        r.key.map(String::into_bytes),
        r.value.map(String::into_bytes),
        0,
    );
    spec.headers = r
        .headers
        .into_iter()
        .map(|h| (h.key.into_bytes(), h.value.map(String::into_bytes)))
        .collect();
    let mut builder = floe_storage::records::BatchBuilder::new(0, now);
    builder.push(spec);
    let batch = builder
        .build(floe_storage::batch::Compression::None)
        .map_err(|e| ApiError::new(Kind::Invalid, format!("the record cannot be encoded: {e}")))?;
    match kafka::produce(&c.ctx, &who, &name, partition, batch).await {
        Ok(offset) => Ok(Json(
            json!({ "topic": name, "partition": partition, "offset": offset }),
        )),
        Err((code, message)) => Err(ApiError::from_answer(
            code,
            message.as_deref(),
            &format!("producing to {name} partition {partition}"),
        )),
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Reset {
    /// One topic (its partitions, or those listed); absent: every
    /// partition the group has an offset in.
    pub topic: Option<String>,
    pub partitions: Option<Vec<i32>>,
    /// `earliest`, `latest`, `offset`, `shift` or `time`.
    pub to: String,
    /// The offset, the shift, or the time in ms, for those three.
    pub value: Option<i64>,
    /// Commit the plan; without it (the default) the plan is only shown.
    #[serde(default)]
    pub execute: bool,
}

impl Reset {
    fn target(&self) -> ApiResult<ResetTo> {
        let value = || {
            self.value
                .ok_or_else(|| ApiError::new(Kind::Invalid, format!("to={}: give value", self.to)))
        };
        Ok(match self.to.as_str() {
            "earliest" => ResetTo::Earliest,
            "latest" => ResetTo::Latest,
            "offset" => ResetTo::Offset(value()?),
            "shift" => ResetTo::ShiftBy(value()?),
            "time" => ResetTo::Time(value()?),
            other => {
                return Err(ApiError::new(
                    Kind::Invalid,
                    format!("to={other}: earliest, latest, offset, shift or time"),
                ));
            }
        })
    }
}

/// `POST /ui/api/groups/{id}/reset-offsets`: where each partition would
/// move (a dry run, the default), or moved (`execute`), by the rules of
/// `floe group reset-offsets`: only while the group has no live member.
pub async fn reset_offsets(
    State(c): State<Arc<Console>>,
    Asker(who): Asker,
    Path(id): Path<String>,
    b: Result<Json<Reset>, JsonRejection>,
) -> ApiResult<Json<Value>> {
    let r = body(b)?;
    let to = r.target()?;
    let ctx = &c.ctx;
    let what = format!("group {id}");
    let kind = super::groups::group_type(ctx, &who, &id).await?;
    let share = kind.as_deref() == Some("share");
    let (state, members) = match kind.as_deref() {
        Some("share") => {
            let g = kafka::describe_share(ctx, &who, &id).await?;
            if g.error_code != 0 {
                return Err(ApiError::from_answer(
                    g.error_code,
                    g.error_message.as_deref(),
                    &what,
                ));
            }
            (g.group_state.to_string(), g.members.len())
        }
        Some("consumer") => {
            let g = kafka::describe_consumer(ctx, &who, &id).await?;
            if g.error_code != 0 {
                return Err(ApiError::from_code(g.error_code, &what));
            }
            (g.group_state.to_string(), g.members.len())
        }
        _ => {
            let g = kafka::describe_classic(ctx, &who, &id).await?;
            if g.error_code != 0 {
                return Err(ApiError::from_code(g.error_code, &what));
            }
            (g.group_state.to_string(), g.members.len())
        }
    };
    // A share group's current offsets are its start offsets.
    let committed = if share {
        kafka::share_offsets(ctx, &who, &id)
            .await?
            .map_err(|code| ApiError::from_code(code, &format!("{what}'s start offsets")))?
    } else {
        kafka::committed_offsets(ctx, &who, &id)
            .await?
            .map_err(|code| ApiError::from_code(code, &format!("{what}'s offsets")))?
    };
    let current: BTreeMap<(String, i32), i64> = committed
        .iter()
        .map(|(t, p, o)| ((t.clone(), *p), *o))
        .collect();
    let partitions: BTreeSet<(String, i32)> = match &r.topic {
        None => current.keys().cloned().collect(),
        Some(topic) => {
            let md = kafka::metadata(ctx, &who, Some(std::slice::from_ref(topic))).await?;
            let t = md
                .topics
                .iter()
                .find(|t| t.name.as_ref().is_some_and(|n| n.0.as_str() == topic))
                .ok_or_else(|| ApiError::from_code(3, &format!("topic {topic}")))?;
            if t.error_code != 0 {
                return Err(ApiError::from_code(t.error_code, &format!("topic {topic}")));
            }
            let all: BTreeSet<i32> = t.partitions.iter().map(|p| p.partition_index).collect();
            let wanted: BTreeSet<i32> = match &r.partitions {
                None => all.clone(),
                Some(ps) => ps.iter().copied().collect(),
            };
            if let Some(p) = wanted.difference(&all).next() {
                return Err(ApiError::new(
                    Kind::NotFound,
                    format!("topic {topic} has no partition {p}"),
                ));
            }
            wanted.into_iter().map(|p| (topic.clone(), p)).collect()
        }
    };
    if partitions.is_empty() {
        return Err(ApiError::new(
            Kind::Invalid,
            format!(
                "nothing to reset: {what} has no {}",
                if share {
                    "start offsets"
                } else {
                    "committed offsets"
                }
            ),
        ));
    }
    let keys: Vec<(String, i32)> = partitions.into_iter().collect();
    let first = kafka::list_offsets(ctx, &who, &keys, Spec::Earliest).await?;
    let end = kafka::list_offsets(ctx, &who, &keys, Spec::Latest).await?;
    let at_time = match to {
        ResetTo::Time(t) => Some(kafka::list_offsets(ctx, &who, &keys, Spec::Time(t)).await?),
        _ => None,
    };
    let mut plan = Vec::new();
    for (i, (topic, p)) in keys.iter().enumerate() {
        let (Some(f), Some(e)) = (first[i], end[i]) else {
            return Err(ApiError::new(
                Kind::Unavailable,
                format!("{topic} partition {p}: its offsets could not be read"),
            ));
        };
        let found = at_time.as_ref().and_then(|a| a[i]);
        let target =
            floe_client::reset_target(to, f, e, current.get(&(topic.clone(), *p)).copied(), found)
                .map_err(|e| ApiError::new(Kind::Invalid, format!("{topic} partition {p}: {e}")))?;
        plan.push((topic.clone(), *p, target));
    }
    let warning = busy(&id, share, &state, members);
    let mut errors: BTreeMap<(String, i32), (i16, Option<String>)> = BTreeMap::new();
    if r.execute {
        if let Some(w) = warning {
            return Err(ApiError::new(Kind::Conflict, w));
        }
        if share {
            let (outcome, answered) =
                kafka::alter_share_group_offsets(ctx, &who, &id, &plan).await?;
            done(&format!("resetting {what}'s start offsets"), outcome)?;
            errors.extend(
                answered
                    .into_iter()
                    .map(|(t, p, code, message)| ((t, p), (code, message))),
            );
        } else {
            let answered = kafka::commit_as_admin(ctx, &who, &id, &plan).await?;
            errors.extend(
                answered
                    .into_iter()
                    .map(|(t, p, code)| ((t, p), (code, None))),
            );
        }
        if let Some(((t, p), (code, message))) = errors.iter().find(|(_, (code, _))| *code != 0) {
            let moving = if share { "start offset" } else { "offset" };
            return Err(ApiError::from_answer(
                *code,
                message.as_deref(),
                &format!("committing {what}'s {moving} in {t} partition {p}"),
            ));
        }
    }
    let rows: Vec<Value> = plan
        .iter()
        .map(|(t, p, target)| {
            json!({
                "topic": t,
                "partition": p,
                "current": current.get(&(t.clone(), *p)),
                "target": target,
            })
        })
        .collect();
    Ok(Json(json!({
        "group": id,
        "executed": r.execute,
        "warning": warning,
        "offsets": rows,
    })))
}

/// Why a group's offsets cannot be reset now, if they cannot: a live
/// member (a classic or consumer group not Empty or Dead either; a share
/// group, like `floe group reset-offsets`, by its members alone).
fn busy(id: &str, share: bool, state: &str, members: usize) -> Option<String> {
    if share {
        return (members > 0).then(|| {
            format!(
                "share group {id} has {members} member(s) (state {state}): its start offsets can only be reset while it has none; stop its consumers first"
            )
        });
    }
    let active = members > 0 || !matches!(state, "Empty" | "Dead" | "");
    active.then(|| {
        format!(
            "group {id} has {members} live member(s) (state {state}): offsets can only be reset while it is inactive (Empty); stop its consumers first"
        )
    })
}

/// `POST /ui/api/groups/{id}/delete`: the group and its committed offsets
/// (refused by the coordinator while it has members).
pub async fn delete_group(
    State(c): State<Arc<Console>>,
    Asker(who): Asker,
    Path(id): Path<String>,
    b: Result<Json<Confirm>, JsonRejection>,
) -> ApiResult<Json<Value>> {
    confirmed(&body(b)?.confirm, &id, "group")?;
    let outcome = kafka::delete_group(&c.ctx, &who, &id).await?;
    done(&format!("deleting group {id}"), outcome)?;
    Ok(Json(json!({ "deleted": id })))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_deletion_needs_its_name_typed_again() {
        assert!(confirmed("orders", "orders", "topic").is_ok());
        let e = confirmed("order", "orders", "topic").unwrap_err();
        assert_eq!(e.kind, Kind::Invalid);
        assert!(e.message.contains("(orders)"), "{}", e.message);
    }

    #[test]
    fn a_reset_names_its_target() {
        let reset = |to: &str, value| Reset {
            topic: None,
            partitions: None,
            to: to.into(),
            value,
            execute: false,
        };
        assert_eq!(reset("earliest", None).target(), Ok(ResetTo::Earliest));
        assert_eq!(reset("shift", Some(-2)).target(), Ok(ResetTo::ShiftBy(-2)));
        assert_eq!(
            reset("offset", None).target().unwrap_err().kind,
            Kind::Invalid
        );
        assert_eq!(
            reset("sideways", None).target().unwrap_err().kind,
            Kind::Invalid
        );
    }

    #[test]
    fn offsets_are_reset_only_without_live_members() {
        assert_eq!(busy("g", false, "Empty", 0), None);
        assert_eq!(busy("g", false, "Dead", 0), None);
        assert!(busy("g", false, "Stable", 0).is_some());
        assert!(busy("g", false, "Empty", 1).is_some());
        // A share group, like the CLI: its members alone.
        assert_eq!(busy("g", true, "Empty", 0), None);
        assert_eq!(busy("g", true, "Stable", 0), None);
        let w = busy("g", true, "Stable", 2).unwrap();
        assert!(w.contains("share group g has 2 member(s)"), "{w}");
    }
}
