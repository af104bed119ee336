//! A share group's internals and its dead letters:
//! - `/ui/api/groups/{id}/share`: each share-partition's records by state
//!   and delivery count, delayed records by the minute they come due, the
//!   records locked and by whom (asked of each partition's owner), and the
//!   group's dead-letter topic with how much of it is not redriven yet;
//! - `/ui/api/groups/{id}/dead-letters`: a page of the dead-letter topic,
//!   each record with where it came from and why;
//! - `POST /ui/api/groups/{id}/redrive`: the group's dead letters produced
//!   back where they came from ([`floe_client::redrive`]), a dry run unless
//!   executed with the group's name typed again.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::Json;
use axum::extract::rejection::JsonRejection;
use axum::extract::{Path, Query, State};
use floe_client::redrive::{self, Redrive};
use floe_proxy::groups::ClientInfo;
use floe_proxy::handlers::Context;
use serde::Deserialize;
use serde_json::{Value, json};

use super::records::{read, record_json};
use crate::Console;
use crate::caller::Asker;
use crate::error::{ApiError, ApiResult, Kind};
use crate::kafka::{self, Spec};

/// Acquired records listed per partition, at most.
const ACQUIRED_LISTED: u32 = 50;
/// The group config naming its dead-letter topic.
const DLQ_CONFIG: &str = "floe.dlq.topic";
/// Records one redrive call reads at most (the answer says how many are
/// left; the page calls again).
pub const MAX_REDRIVE: usize = 10_000;
/// Records read from the dead-letter topic per round of a redrive.
const REDRIVE_CHUNK: usize = 200;

/// Refuses a group that is not a share group (or not listed to the asker).
async fn must_be_share(ctx: &Context, who: &ClientInfo, id: &str) -> ApiResult<()> {
    match super::groups::group_type(ctx, who, id).await?.as_deref() {
        Some("share") => Ok(()),
        Some(t) => Err(ApiError::new(
            Kind::Invalid,
            format!("group {id} is a {t} group: only a share group has share state"),
        )),
        None => Err(ApiError::new(
            Kind::NotFound,
            format!("group {id}: not found"),
        )),
    }
}

/// The group's configs as name → value, or the error code they answered.
async fn group_configs(
    ctx: &Context,
    who: &ClientInfo,
    id: &str,
) -> ApiResult<Result<BTreeMap<String, String>, i16>> {
    Ok(kafka::group_configs(ctx, who, id).await?.map(|entries| {
        entries
            .into_iter()
            .filter_map(|e| Some((e.name.to_string(), e.value?.to_string())))
            .collect()
    }))
}

fn inspection_json(i: &floe_proxy::share_admin::ShareInspection) -> Value {
    json!({
        "start": i.start,
        "end": i.end,
        "in_memory": i.in_memory,
        "available": i.available,
        "backing_off": i.backing_off,
        "acquired": i.acquired,
        "acknowledged": i.acknowledged,
        "archived": i.archived,
        "dead_lettering": i.dead_lettering,
        "parked": i.parked,
        "timer_pending": i.timer_pending,
        "deliveries": i.deliveries.iter().map(|(d, n)| json!({ "deliveries": d, "records": n })).collect::<Vec<_>>(),
        "due": i.due.iter().map(|(m, n)| json!({ "minute_ms": m, "records": n })).collect::<Vec<_>>(),
        "timer_buckets": i.timer_buckets.iter().map(|b| json!({ "next_due_ms": b.next_due_ms, "pending": b.pending })).collect::<Vec<_>>(),
        "acquired_records": i.acquired_records.iter().map(|a| json!({
            "offset": a.offset,
            "member_id": a.member,
            "deliveries": a.deliveries,
            "lock_until_ms": a.lock_until_ms,
        })).collect::<Vec<_>>(),
    })
}

/// The counts of every share-partition added up.
#[derive(Default)]
struct Totals {
    counts: BTreeMap<&'static str, u64>,
    deliveries: BTreeMap<u16, u64>,
    due: BTreeMap<u64, u64>,
}

impl Totals {
    fn add(&mut self, i: &floe_proxy::share_admin::ShareInspection) {
        for (name, n) in [
            ("available", i.available),
            ("backing_off", i.backing_off),
            ("acquired", i.acquired),
            ("acknowledged", i.acknowledged),
            ("archived", i.archived),
            ("dead_lettering", i.dead_lettering),
            ("parked", i.parked),
            ("timer_pending", i.timer_pending),
            ("in_flight", (i.end - i.start).max(0) as u64),
        ] {
            *self.counts.entry(name).or_default() += n;
        }
        for (d, n) in &i.deliveries {
            *self.deliveries.entry(*d).or_default() += n;
        }
        for (m, n) in &i.due {
            *self.due.entry(*m).or_default() += n;
        }
    }

    fn json(&self) -> Value {
        let mut out = json!(self.counts);
        out["deliveries"] = self
            .deliveries
            .iter()
            .map(|(d, n)| json!({ "deliveries": d, "records": n }))
            .collect();
        out["due"] = self
            .due
            .iter()
            .map(|(m, n)| json!({ "minute_ms": m, "records": n }))
            .collect();
        out
    }
}

pub async fn internals(
    State(c): State<Arc<Console>>,
    Asker(who): Asker,
    Path(id): Path<String>,
) -> ApiResult<Json<Value>> {
    let ctx = &c.ctx;
    must_be_share(ctx, &who, &id).await?;
    let offsets = kafka::share_offsets(ctx, &who, &id)
        .await?
        .map_err(|code| ApiError::from_code(code, &format!("group {id}'s start offsets")))?;
    let looks = futures::future::join_all(offsets.iter().map(|(topic, partition, _)| {
        ctx.inspect_share_partition(&who, &id, topic, *partition as u32, ACQUIRED_LISTED)
    }))
    .await;
    let mut totals = Totals::default();
    let mut partitions = Vec::new();
    for ((topic, partition, start), look) in offsets.iter().zip(looks) {
        let (state, error) = match look {
            Ok(Some(i)) => {
                totals.add(&i);
                (inspection_json(&i), Value::Null)
            }
            Ok(None) => (Value::Null, Value::Null),
            Err(code) => (
                Value::Null,
                json!(ApiError::from_code(code, &format!("{topic} partition {partition}")).message),
            ),
        };
        partitions.push(json!({
            "topic": topic,
            "partition": partition,
            "start_offset": start,
            "state": state,
            "error": error,
        }));
    }
    let (configs, configs_error) = match group_configs(ctx, &who, &id).await? {
        Ok(m) => (m, Value::Null),
        Err(code) => (
            BTreeMap::new(),
            json!(ApiError::from_code(code, &format!("group {id}'s configs")).message),
        ),
    };
    let dead_letters = match configs.get(DLQ_CONFIG).filter(|t| !t.is_empty()) {
        Some(topic) => dead_letter_summary(ctx, &who, &id, topic).await?,
        None => Value::Null,
    };
    Ok(Json(json!({
        "id": id,
        "configs": configs,
        "configs_error": configs_error,
        "totals": totals.json(),
        "partitions": partitions,
        "dead_letters": dead_letters,
    })))
}

/// The redrive mark on each partition of `topic`: the committed offset of
/// the group's mark group, if any.
async fn marks(
    ctx: &Context,
    who: &ClientInfo,
    id: &str,
    topic: &str,
) -> ApiResult<Result<BTreeMap<i32, i64>, i16>> {
    Ok(kafka::committed_offsets(ctx, who, &redrive::mark_group(id))
        .await?
        .map(|all| {
            all.into_iter()
                .filter(|(t, _, _)| t == topic)
                .map(|(_, p, o)| (p, o))
                .collect()
        }))
}

/// The partitions of `topic` the asker may describe, with their first and
/// last stable offsets.
async fn partition_bounds(
    ctx: &Context,
    who: &ClientInfo,
    topic: &str,
) -> ApiResult<Vec<(i32, Option<i64>, Option<i64>)>> {
    let md = kafka::metadata(ctx, who, Some(&[topic.to_owned()])).await?;
    let Some(t) = md.topics.iter().find(|t| t.error_code == 0) else {
        let code = md.topics.first().map_or(3, |t| t.error_code);
        return Err(ApiError::from_code(
            code,
            &format!("dead-letter topic {topic}"),
        ));
    };
    let mut ids: Vec<i32> = t.partitions.iter().map(|p| p.partition_index).collect();
    ids.sort_unstable();
    let parts: Vec<(String, i32)> = ids.iter().map(|p| (topic.to_owned(), *p)).collect();
    let first = kafka::list_offsets(ctx, who, &parts, Spec::Earliest).await?;
    let end = kafka::list_offsets(ctx, who, &parts, Spec::Stable).await?;
    Ok(ids
        .into_iter()
        .zip(first.into_iter().zip(end))
        .map(|(p, (f, e))| (p, f, e))
        .collect())
}

/// The dead-letter topic's partitions with their offsets and the redrive
/// mark: records past the mark are not redriven yet.
async fn dead_letter_summary(
    ctx: &Context,
    who: &ClientInfo,
    id: &str,
    topic: &str,
) -> ApiResult<Value> {
    let bounds = match partition_bounds(ctx, who, topic).await {
        Ok(b) => b,
        Err(e) => return Ok(json!({ "topic": topic, "error": e.message })),
    };
    let (marks, marks_error) = match marks(ctx, who, id, topic).await? {
        Ok(m) => (m, Value::Null),
        Err(code) => (
            BTreeMap::new(),
            json!(
                ApiError::from_code(
                    code,
                    &format!("reading the redrive mark ({})", redrive::mark_group(id))
                )
                .message
            ),
        ),
    };
    let mut pending = 0i64;
    let partitions: Vec<Value> = bounds
        .iter()
        .map(|&(p, first, end)| {
            let mark = marks.get(&p).copied();
            let from = mark.unwrap_or(0).max(first.unwrap_or(0));
            let left = end.map(|e| (e - from).max(0));
            pending += left.unwrap_or(0);
            json!({
                "partition": p,
                "first_offset": first,
                "end_offset": end,
                "redrive_mark": mark,
                "not_redriven": left,
            })
        })
        .collect();
    Ok(json!({
        "topic": topic,
        "mark_group": redrive::mark_group(id),
        "marks_error": marks_error,
        "partitions": partitions,
        "not_redriven": pending,
    }))
}

/// The group's dead-letter topic, or why there is none.
async fn dead_letter_topic(ctx: &Context, who: &ClientInfo, id: &str) -> ApiResult<String> {
    let configs = group_configs(ctx, who, id)
        .await?
        .map_err(|code| ApiError::from_code(code, &format!("group {id}'s configs")))?;
    configs
        .get(DLQ_CONFIG)
        .filter(|t| !t.is_empty())
        .cloned()
        .ok_or_else(|| {
            ApiError::new(
                Kind::NotFound,
                format!("group {id} names no dead-letter topic ({DLQ_CONFIG})"),
            )
        })
}

#[derive(Debug, Deserialize)]
pub struct DeadLetterPage {
    pub partition: Option<i32>,
    /// Absent: from the redrive mark (or the partition's first offset).
    pub offset: Option<i64>,
    pub limit: Option<usize>,
}

pub async fn dead_letters(
    State(c): State<Arc<Console>>,
    Asker(who): Asker,
    Path(id): Path<String>,
    Query(q): Query<DeadLetterPage>,
) -> ApiResult<Json<Value>> {
    let ctx = &c.ctx;
    must_be_share(ctx, &who, &id).await?;
    let topic = dead_letter_topic(ctx, &who, &id).await?;
    let partition = q.partition.unwrap_or(0);
    let limit = q.limit.unwrap_or(20);
    if partition < 0 || limit == 0 || limit > super::records::MAX_RECORDS {
        return Err(ApiError::new(
            Kind::Invalid,
            format!(
                "partition 0 or more, limit between 1 and {}",
                super::records::MAX_RECORDS
            ),
        ));
    }
    let from = match q.offset {
        Some(o) if o < 0 => return Err(ApiError::new(Kind::Invalid, "offset: 0 or more")),
        Some(o) => o,
        None => {
            let mark = marks(ctx, &who, &id, &topic)
                .await?
                .ok()
                .and_then(|m| m.get(&partition).copied());
            let first =
                kafka::list_offsets(ctx, &who, &[(topic.clone(), partition)], Spec::Earliest)
                    .await?[0]
                    .unwrap_or(0);
            mark.unwrap_or(0).max(first)
        }
    };
    let (records, position, end) = read(&c, &who, &topic, partition, from, limit).await?;
    let next_offset = records.last().map_or(position, |r| r.offset + 1);
    let rows: Vec<Value> = records
        .iter()
        .map(|r| {
            let mut row = record_json(r);
            row["origin"] = match redrive::origin(r) {
                Some(o) => json!({
                    "group": o.group,
                    "topic": o.topic,
                    "partition": o.partition,
                    "offset": o.offset,
                    "deliveries": o.deliveries,
                    "reason": o.reason,
                }),
                None => Value::Null,
            };
            row["of_this_group"] = json!(redrive::origin(r).is_some_and(|o| o.group == id));
            row
        })
        .collect();
    Ok(Json(json!({
        "topic": topic,
        "partition": partition,
        "from": from,
        "next_offset": next_offset,
        "end_offset": end,
        "records": rows,
    })))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RedriveBody {
    /// The group's name typed again (needed to execute).
    #[serde(default)]
    pub confirm: String,
    /// Produce the records; without it (the default) only count them.
    #[serde(default)]
    pub execute: bool,
    /// Records to read at most (default and most: [`MAX_REDRIVE`]).
    pub limit: Option<usize>,
}

/// One dead-letter partition's redrive: what was read and what it did.
#[derive(Debug, Default)]
struct PartitionRedrive {
    from: i64,
    to: i64,
    redriven: u64,
    skipped: u64,
    targets: BTreeMap<(String, i32), u64>,
    /// The refusal that stopped it (Kafka's code and message).
    error: Option<ApiError>,
}

pub async fn redrive_dead_letters(
    State(c): State<Arc<Console>>,
    Asker(who): Asker,
    Path(id): Path<String>,
    b: Result<Json<RedriveBody>, JsonRejection>,
) -> ApiResult<Json<Value>> {
    let body = super::actions::body(b)?;
    let ctx = &c.ctx;
    if body.execute && body.confirm != id {
        return Err(ApiError::new(
            Kind::Invalid,
            format!("not redriven: type the group's name ({id}) to confirm"),
        ));
    }
    let budget = body.limit.unwrap_or(MAX_REDRIVE);
    if budget == 0 || budget > MAX_REDRIVE {
        return Err(ApiError::new(
            Kind::Invalid,
            format!("limit={budget}: between 1 and {MAX_REDRIVE}"),
        ));
    }
    must_be_share(ctx, &who, &id).await?;
    let topic = dead_letter_topic(ctx, &who, &id).await?;
    let marks = marks(ctx, &who, &id, &topic).await?.map_err(|code| {
        ApiError::from_code(
            code,
            &format!("reading the redrive mark ({})", redrive::mark_group(&id)),
        )
    })?;
    let bounds = partition_bounds(ctx, &who, &topic).await?;
    let mark_group = redrive::mark_group(&id);
    let mut left = budget;
    let mut done = Vec::new();
    let mut remaining = 0i64;
    for (partition, first, end) in bounds {
        let from = marks
            .get(&partition)
            .copied()
            .unwrap_or(0)
            .max(first.unwrap_or(0));
        let end = end.unwrap_or(from);
        let mut r = PartitionRedrive {
            from,
            to: from,
            ..PartitionRedrive::default()
        };
        if from < end && left > 0 {
            if body.execute {
                // The mark must move with what is produced: a principal that
                // may not commit it is refused before anything is produced.
                commit_mark(ctx, &who, &mark_group, &topic, partition, from).await?;
            }
            redrive_partition(
                &c,
                &who,
                &id,
                &topic,
                partition,
                end,
                &mut left,
                body.execute,
                &mut r,
            )
            .await?;
        }
        remaining += (end - r.to).max(0);
        done.push((partition, r));
    }
    let redriven: u64 = done.iter().map(|(_, r)| r.redriven).sum();
    let skipped: u64 = done.iter().map(|(_, r)| r.skipped).sum();
    // Refused before anything was produced: the refusal is the answer.
    // Else the answer says what was done, and what stopped it.
    if redriven == 0
        && let Some(e) = done.iter_mut().find_map(|(_, r)| r.error.take())
    {
        return Err(e);
    }
    let failed = done
        .iter()
        .find_map(|(_, r)| r.error.as_ref().map(|e| e.message.clone()));
    Ok(Json(json!({
        "topic": topic,
        "executed": body.execute,
        "redriven": redriven,
        "skipped": skipped,
        "remaining": remaining,
        "error": failed,
        "partitions": done.iter().map(|(p, r)| json!({
            "partition": p,
            "from": r.from,
            "to": r.to,
            "redriven": r.redriven,
            "skipped": r.skipped,
            "targets": r.targets.iter().map(|((t, tp), n)| json!({
                "topic": t, "partition": tp, "records": n,
            })).collect::<Vec<_>>(),
            "error": r.error.as_ref().map(|e| e.message.clone()),
        })).collect::<Vec<_>>(),
    })))
}

/// Commits the redrive mark of `topic`'s `partition` at `offset`.
async fn commit_mark(
    ctx: &Context,
    who: &ClientInfo,
    mark_group: &str,
    topic: &str,
    partition: i32,
    offset: i64,
) -> ApiResult<()> {
    let answered = kafka::commit_as_admin(
        ctx,
        who,
        mark_group,
        &[(topic.to_owned(), partition, offset)],
    )
    .await?;
    match answered.iter().find(|(_, _, code)| *code != 0) {
        None if !answered.is_empty() => Ok(()),
        None => Err(ApiError::new(
            Kind::Unavailable,
            "OffsetCommit of the redrive mark answered no partition",
        )),
        Some((_, _, code)) => Err(ApiError::from_code(
            *code,
            &format!("committing the redrive mark ({mark_group})"),
        )),
    }
}

/// Reads `partition` of the dead-letter topic from `r.from` up to `end`
/// (at most `left` records), and, when `execute`, produces the group's
/// dead letters back where they came from, a run of records bound for
/// one partition at a time, moving the mark past each run once it is
/// stored. The first failure stops the partition (the mark stays at the
/// last run stored).
#[allow(clippy::too_many_arguments)]
async fn redrive_partition(
    c: &Console,
    who: &ClientInfo,
    id: &str,
    topic: &str,
    partition: i32,
    end: i64,
    left: &mut usize,
    execute: bool,
    r: &mut PartitionRedrive,
) -> ApiResult<()> {
    let mark_group = redrive::mark_group(id);
    while r.to < end && *left > 0 {
        let want = (*left).min(REDRIVE_CHUNK);
        let (records, position, _) = read(c, who, topic, partition, r.to, want).await?;
        let read_to = records.last().map_or(position, |x| x.offset + 1);
        if read_to <= r.to {
            break;
        }
        *left = left.saturating_sub(records.len());
        // Runs of consecutive records bound for one partition, in order.
        let mut runs: Vec<((String, i32), Vec<floe_storage::records::RecordSpec>, i64)> =
            Vec::new();
        for rec in &records {
            match redrive::redrive(rec, id, topic, partition) {
                Redrive::To {
                    topic: t,
                    partition: p,
                    record,
                } => {
                    let target = (t, p);
                    match runs.last_mut() {
                        Some((last, specs, upto)) if *last == target => {
                            specs.push(record);
                            *upto = rec.offset + 1;
                        }
                        _ => runs.push((target, vec![record], rec.offset + 1)),
                    }
                }
                Redrive::Skip => r.skipped += 1,
            }
        }
        if !execute {
            for (target, specs, _) in runs {
                r.redriven += specs.len() as u64;
                *r.targets.entry(target).or_default() += specs.len() as u64;
            }
            r.to = read_to;
            continue;
        }
        for ((t, p), specs, upto) in runs {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as i64);
            let mut builder = floe_storage::records::BatchBuilder::new(0, now);
            let n = specs.len() as u64;
            for s in specs {
                builder.push(s);
            }
            let batch = builder
                .build(floe_storage::batch::Compression::None)
                .map_err(|e| ApiError::new(Kind::Invalid, format!("cannot encode: {e}")))?;
            if let Err((code, message)) = kafka::produce(&c.ctx, who, &t, p, batch).await {
                r.error = Some(ApiError::from_answer(
                    code,
                    message.as_deref(),
                    &format!("not redriven: producing to {t} partition {p}"),
                ));
                return Ok(());
            }
            r.redriven += n;
            *r.targets.entry((t, p)).or_default() += n;
            commit_mark(&c.ctx, who, &mark_group, topic, partition, upto).await?;
            r.to = upto;
        }
        // Skipped records after the last run: the mark moves past them too.
        if r.to < read_to {
            commit_mark(&c.ctx, who, &mark_group, topic, partition, read_to).await?;
            r.to = read_to;
        }
    }
    Ok(())
}
