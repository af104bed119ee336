//! `kafka-consumer-groups.sh`: list, describe (offsets, members, state),
//! delete, reset offsets and delete offsets of consumer groups, printed as
//! Kafka's ConsumerGroupCommand prints them. The offsets and lags come from
//! `floe group`'s code (`group_cmd`).

use std::collections::{BTreeMap, BTreeSet};

use anyhow::{Context as _, bail};
use floe_client::{GroupDescription, KafkaClient, LATEST, TopicPartition};

use super::{Arity, Parsed, Spec};
use crate::group_cmd::{self, ResetArgs, TopicSpec, parse_topic_spec};

const V: Arity = Arity::Value;
const S: Arity = Arity::Switch;
const O: Arity = Arity::Optional;

pub const SPEC: Spec = Spec {
    flags: &[
        ("bootstrap-server", V),
        ("command-config", V),
        ("list", S),
        ("describe", S),
        ("delete", S),
        ("reset-offsets", S),
        ("delete-offsets", S),
        ("group", V),
        ("all-groups", S),
        ("topic", V),
        ("all-topics", S),
        ("members", S),
        ("offsets", S),
        ("state", O),
        ("type", O),
        ("verbose", S),
        ("to-earliest", S),
        ("to-latest", S),
        ("to-current", S),
        ("to-offset", V),
        ("shift-by", V),
        ("to-datetime", V),
        ("by-duration", V),
        ("dry-run", S),
        ("execute", S),
        ("timeout", V),
        ("help", S),
    ],
    unsupported: &[
        (
            "from-file",
            "give the target with --to-offset, --to-datetime, … per --topic",
        ),
        ("export", "the plan is printed as a table"),
    ],
};

const ACTIONS: &[&str] = &[
    "list",
    "describe",
    "delete",
    "reset-offsets",
    "delete-offsets",
];
const TARGETS: &[&str] = &[
    "to-earliest",
    "to-latest",
    "to-current",
    "to-offset",
    "shift-by",
    "to-datetime",
    "by-duration",
];
/// Kafka's mark of a cell with no value.
const MISSING: &str = "-";

pub async fn run(args: &[String]) -> anyhow::Result<()> {
    let Some(p) = super::parse_or_help("kafka-consumer-groups.sh", &SPEC, args)? else {
        return Ok(());
    };
    let action = p.action(ACTIONS)?;
    if !p.has("bootstrap-server") {
        bail!("--bootstrap-server must be specified");
    }
    if action != "reset-offsets" {
        let given: Vec<&str> = TARGETS
            .iter()
            .chain(&["dry-run", "execute", "all-topics"])
            .copied()
            .filter(|f| p.has(f))
            .collect();
        p.refuse(&given, action)?;
    }
    let reset = if action == "reset-offsets" {
        Some(reset_args(&p)?)
    } else {
        None
    };
    let props =
        super::client_properties(&p.values("command-config").iter().collect::<Vec<_>>(), &[])?;
    let mut conn = super::connection(&p, &[], &props)?;
    if let Some(ms) = p.number::<u64>("timeout")? {
        conn.request_timeout_ms = ms;
    }
    let mut client = conn.connect().await?;
    match action {
        "list" => list(&mut client, &p).await,
        "describe" => {
            for g in groups(&mut client, &p).await? {
                if p.has("members") {
                    describe_members(&mut client, &g, p.has("verbose")).await?;
                } else if p.has("state") {
                    describe_state(&mut client, &g).await?;
                } else {
                    describe_offsets(&mut client, &g).await?;
                }
            }
            Ok(())
        }
        "delete" => {
            let gs = groups(&mut client, &p).await?;
            delete(&mut client, &gs).await
        }
        "delete-offsets" => {
            let [group] = p.values("group") else {
                bail!("--delete-offsets takes exactly one --group");
            };
            let specs = topic_specs(&p)?;
            if specs.is_empty() {
                bail!("--delete-offsets needs at least one --topic");
            }
            delete_offsets(&mut client, group, &specs).await
        }
        _ => {
            let mut args = reset.context("reset flags")?;
            let mut all: BTreeMap<(String, TopicPartition), i64> = BTreeMap::new();
            for g in groups(&mut client, &p).await? {
                args.group = g.clone();
                for (tp, o) in reset_group(&mut client, &args).await? {
                    all.insert((g.clone(), tp), o);
                }
            }
            print_reset(&all);
            if !args.execute {
                eprintln!(
                    "floe: note: nothing committed (a dry run, Kafka's default); add --execute to \
                     commit these offsets"
                );
            }
            Ok(())
        }
    }
}

fn topic_specs(p: &Parsed) -> anyhow::Result<Vec<TopicSpec>> {
    p.values("topic")
        .iter()
        .map(|t| parse_topic_spec(t).map_err(|e| anyhow::anyhow!("--topic: {e}")))
        .collect()
}

/// The reset the flags ask for (the group filled in per group).
pub fn reset_args(p: &Parsed) -> anyhow::Result<ResetArgs> {
    let targets: Vec<&str> = TARGETS.iter().copied().filter(|f| p.has(f)).collect();
    if targets.len() != 1 {
        bail!(
            "--reset-offsets needs exactly one of {}",
            TARGETS
                .iter()
                .map(|t| format!("--{t}"))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    if p.has("dry-run") && p.has("execute") {
        bail!("give --dry-run or --execute, not both");
    }
    let topics = topic_specs(p)?;
    if topics.is_empty() != p.has("all-topics") {
        bail!("--reset-offsets needs --topic TOPIC[:PARTITIONS] or --all-topics (one of them)");
    }
    let to_datetime = match (p.value("to-datetime"), p.value("by-duration")) {
        (Some(t), _) => Some(
            crate::time_arg::parse_time(t).map_err(|e| anyhow::anyhow!("--to-datetime: {e}"))?,
        ),
        (None, Some(d)) => {
            let ms = parse_iso_duration(d).map_err(|e| anyhow::anyhow!("--by-duration: {e}"))?;
            Some(crate::time_arg::now_ms().saturating_sub(ms))
        }
        _ => None,
    };
    Ok(ResetArgs {
        conn: crate::kafka_args::BootstrapArgs {
            bootstrap: Vec::new(),
            request_timeout_ms: 30_000,
            command_config: None,
            properties: None,
        },
        group: String::new(),
        topics,
        all_topics: p.has("all-topics"),
        to_earliest: p.has("to-earliest"),
        to_latest: p.has("to-latest"),
        to_datetime,
        to_offset: p.number::<i64>("to-offset")?,
        // --to-current: where the group is.
        shift_by: if p.has("to-current") {
            Some(0)
        } else {
            p.number::<i64>("shift-by")?
        },
        dry_run: p.has("dry-run"),
        execute: p.has("execute"),
    })
}

/// An ISO-8601 duration as Java's `Duration.parse` reads it (`PT15M`,
/// `P1DT2H`, `PT0.5S`), in ms.
pub fn parse_iso_duration(s: &str) -> Result<i64, String> {
    let bad = || format!("expected an ISO-8601 duration such as PT15M or P1DT2H, got {s:?}");
    let upper = s.trim().to_ascii_uppercase();
    let rest = upper.strip_prefix('P').ok_or_else(bad)?;
    let (days, time) = match rest.split_once('T') {
        Some((d, t)) => (d, t),
        None => (rest, ""),
    };
    let mut ms: f64 = 0.0;
    let mut any = false;
    let mut take = |part: &str, units: &[(char, f64)]| -> Result<(), String> {
        let mut number = String::new();
        for c in part.chars() {
            if c.is_ascii_digit() || c == '.' || c == '-' {
                number.push(c);
                continue;
            }
            let scale = units
                .iter()
                .find(|(u, _)| *u == c)
                .map(|(_, f)| *f)
                .ok_or_else(bad)?;
            let n: f64 = number.parse().map_err(|_| bad())?;
            ms += n * scale;
            any = true;
            number.clear();
        }
        if number.is_empty() {
            Ok(())
        } else {
            Err(bad())
        }
    };
    take(days, &[('D', 86_400_000.0)])?;
    take(time, &[('H', 3_600_000.0), ('M', 60_000.0), ('S', 1_000.0)])?;
    if !any || !ms.is_finite() || ms < 0.0 {
        return Err(bad());
    }
    Ok(ms.round() as i64)
}

/// The groups of `--group` (repeatable) or `--all-groups`.
async fn groups(client: &mut KafkaClient, p: &Parsed) -> anyhow::Result<Vec<String>> {
    match (p.has("all-groups"), p.values("group")) {
        (true, []) => Ok(consumer_groups(client)
            .await?
            .into_iter()
            .map(|g| g.group_id)
            .collect()),
        (false, []) => bail!("Option --group (or --all-groups) is required"),
        (false, gs) => Ok(gs.to_vec()),
        (true, _) => bail!("give --group or --all-groups, not both"),
    }
}

/// The groups a consumer may be in (not share groups).
async fn consumer_groups(
    client: &mut KafkaClient,
) -> anyhow::Result<Vec<floe_client::GroupListing>> {
    Ok(client
        .list_groups()
        .await?
        .into_iter()
        .filter(|g| g.protocol_type != "share" && g.group_type.as_deref() != Some("share"))
        .collect())
}

async fn list(client: &mut KafkaClient, p: &Parsed) -> anyhow::Result<()> {
    let groups = consumer_groups(client).await?;
    let (with_state, with_type) = (p.has("state"), p.has("type"));
    if !with_state && !with_type {
        for g in groups {
            println!("{}", g.group_id);
        }
        return Ok(());
    }
    let wanted = |flag: &str| -> BTreeSet<String> {
        p.value(flag)
            .unwrap_or_default()
            .split(',')
            .map(|s| s.trim().to_ascii_lowercase())
            .filter(|s| !s.is_empty())
            .collect()
    };
    let (states, types) = (wanted("state"), wanted("type"));
    let type_of =
        |g: &floe_client::GroupListing| g.group_type.clone().unwrap_or_else(|| "classic".into());
    let rows: Vec<(String, String, String)> = groups
        .iter()
        .map(|g| {
            (
                g.group_id.clone(),
                type_of(g),
                g.state.clone().unwrap_or_else(|| "Unknown".into()),
            )
        })
        .filter(|(_, t, s)| {
            (states.is_empty() || states.contains(&s.to_ascii_lowercase()))
                && (types.is_empty() || types.contains(&t.to_ascii_lowercase()))
        })
        .collect();
    let width = rows.iter().map(|r| r.0.len().max(15)).max().unwrap_or(15) + 10;
    let line = |g: &str, t: &str, s: &str| {
        let mut out = format!("{g:<width$}");
        if with_type {
            out.push_str(&format!(" {t:<20}"));
        }
        if with_state {
            out.push_str(&format!(" {s:<20}"));
        }
        out
    };
    println!("{}", line("GROUP", "TYPE", "STATE"));
    for (g, t, s) in &rows {
        println!("{}", line(g, t, s));
    }
    Ok(())
}

/// The group's description, or an error when it does not exist; a note on
/// stderr when it has no members or is rebalancing, as Kafka prints.
async fn existing(
    client: &mut KafkaClient,
    group: &str,
) -> anyhow::Result<(GroupDescription, BTreeMap<TopicPartition, i64>)> {
    let desc = client.describe_group(group).await?;
    let committed = client.committed_offsets(group).await?;
    if desc.state == "Dead" && committed.is_empty() {
        bail!("Consumer group '{group}' does not exist.");
    }
    match desc.state.as_str() {
        "Empty" | "Dead" => eprintln!("\nConsumer group '{group}' has no active members."),
        "Stable" => {}
        _ => eprintln!("\nWarning: Consumer group '{group}' is rebalancing."),
    }
    Ok((desc, committed))
}

/// Rows left-aligned in columns at least `widths` wide (the last column as
/// it is), each after a newline, as Kafka's printf formats do.
fn print_rows(widths: &[usize], rows: &[Vec<String>]) {
    let mut out = String::new();
    for row in rows {
        out.push('\n');
        let cells: Vec<String> = row
            .iter()
            .enumerate()
            .map(|(i, c)| match widths.get(i) {
                Some(w) => format!("{c:<w$}"),
                None => c.clone(),
            })
            .collect();
        out.push_str(&cells.join(" "));
    }
    println!("{out}");
}

fn width(min: usize, cells: impl Iterator<Item = usize>) -> usize {
    cells.fold(min, usize::max)
}

async fn describe_offsets(client: &mut KafkaClient, group: &str) -> anyhow::Result<()> {
    let (desc, committed) = existing(client, group).await?;
    let mut owner: BTreeMap<TopicPartition, usize> = BTreeMap::new();
    for (i, m) in desc.members.iter().enumerate() {
        for tp in &m.assignment {
            owner.insert(tp.clone(), i);
        }
    }
    let partitions: BTreeSet<TopicPartition> =
        committed.keys().chain(owner.keys()).cloned().collect();
    let ends = group_cmd::offsets_at(client, &partitions, LATEST).await?;
    let cell = |v: Option<i64>| v.map_or_else(|| MISSING.to_owned(), |v| v.to_string());
    let mut rows = vec![
        [
            "GROUP",
            "TOPIC",
            "PARTITION",
            "CURRENT-OFFSET",
            "LOG-END-OFFSET",
            "LAG",
            "CONSUMER-ID",
            "HOST",
            "CLIENT-ID",
        ]
        .map(str::to_owned)
        .to_vec(),
    ];
    for tp in &partitions {
        let (c, e) = (committed.get(tp).copied(), ends.get(tp).copied());
        let lag = c.zip(e).map(|(c, e)| (e - c).max(0));
        let m = owner.get(tp).map(|i| &desc.members[*i]);
        rows.push(vec![
            group.to_owned(),
            tp.0.clone(),
            tp.1.to_string(),
            cell(c),
            cell(e),
            cell(lag),
            m.map_or(MISSING.into(), |m| m.member_id.clone()),
            m.map_or(MISSING.into(), |m| m.client_host.clone()),
            m.map_or(MISSING.into(), |m| m.client_id.clone()),
        ]);
    }
    // Members without partitions, as Kafka lists them.
    for m in desc.members.iter().filter(|m| m.assignment.is_empty()) {
        rows.push(vec![
            group.to_owned(),
            MISSING.into(),
            MISSING.into(),
            MISSING.into(),
            MISSING.into(),
            MISSING.into(),
            m.member_id.clone(),
            m.client_host.clone(),
            m.client_id.clone(),
        ]);
    }
    let col = |i: usize| width(15, rows.iter().skip(1).map(|r| r[i].len()));
    print_rows(&[col(0), col(1), 10, 15, 15, 15, col(6), col(7)], &rows);
    Ok(())
}

async fn describe_members(
    client: &mut KafkaClient,
    group: &str,
    verbose: bool,
) -> anyhow::Result<()> {
    let (desc, _) = existing(client, group).await?;
    let with_instance = desc.members.iter().any(|m| m.group_instance_id.is_some());
    let mut header = vec!["GROUP", "CONSUMER-ID"];
    if with_instance {
        header.push("GROUP-INSTANCE-ID");
    }
    header.extend(["HOST", "CLIENT-ID", "#PARTITIONS"]);
    if verbose {
        header.push("ASSIGNMENT");
    }
    let mut rows = vec![header.iter().map(|h| (*h).to_owned()).collect::<Vec<_>>()];
    for m in &desc.members {
        let mut row = vec![group.to_owned(), m.member_id.clone()];
        if with_instance {
            row.push(m.group_instance_id.clone().unwrap_or_default());
        }
        row.extend([
            m.client_host.clone(),
            m.client_id.clone(),
            m.assignment.len().to_string(),
        ]);
        if verbose {
            let mut by_topic: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
            for (t, p) in &m.assignment {
                by_topic.entry(t).or_default().push(*p);
            }
            let text: Vec<String> = by_topic
                .iter()
                .map(|(t, ps)| {
                    let ps: Vec<String> = ps.iter().map(i32::to_string).collect();
                    format!("{t}({})", ps.join(","))
                })
                .collect();
            row.push(if text.is_empty() {
                MISSING.into()
            } else {
                text.join(", ")
            });
        }
        rows.push(row);
    }
    let n = rows[0].len();
    let mins = if with_instance {
        vec![15, 15, 17, 15, 15, 15]
    } else {
        vec![15, 15, 15, 15, 15]
    };
    let widths: Vec<usize> = (0..n.min(mins.len()))
        .map(|i| width(mins[i], rows.iter().skip(1).map(|r| r[i].len())))
        .collect();
    print_rows(&widths, &rows);
    Ok(())
}

async fn describe_state(client: &mut KafkaClient, group: &str) -> anyhow::Result<()> {
    let (desc, _) = existing(client, group).await?;
    // Any Floe proxy serves every group: the one answering is the coordinator.
    let meta = client.metadata(Some(&[])).await?;
    let addr = client.addr().to_owned();
    let id = meta
        .brokers
        .iter()
        .find(|b| format!("{}:{}", b.host.as_str(), b.port) == addr)
        .map_or(-1, |b| b.node_id.0);
    let coordinator = format!("{addr}  ({id})");
    let rows = vec![
        [
            "GROUP",
            "COORDINATOR (ID)",
            "ASSIGNMENT-STRATEGY",
            "STATE",
            "#MEMBERS",
        ]
        .map(str::to_owned)
        .to_vec(),
        vec![
            group.to_owned(),
            coordinator.clone(),
            desc.protocol.clone(),
            desc.state.clone(),
            desc.members.len().to_string(),
        ],
    ];
    print_rows(&[coordinator.len().max(25), 25, 20, 15], &rows);
    Ok(())
}

async fn delete(client: &mut KafkaClient, groups: &[String]) -> anyhow::Result<()> {
    let mut done = Vec::new();
    let mut failed = Vec::new();
    for g in groups {
        match client.delete_group(g).await {
            Ok(()) => done.push(g.clone()),
            Err(e) => failed.push((g.clone(), e)),
        }
    }
    if failed.is_empty() {
        println!(
            "Deletion of requested consumer groups ('{}') was successful.",
            done.join("', '")
        );
        return Ok(());
    }
    for (g, e) in &failed {
        println!("* Group '{g}' could not be deleted due to: {e}");
    }
    if !done.is_empty() {
        println!(
            "\nThese consumer groups were deleted successfully: '{}'",
            done.join("', '")
        );
    }
    bail!("Deletion of some consumer groups failed")
}

async fn delete_offsets(
    client: &mut KafkaClient,
    group: &str,
    specs: &[TopicSpec],
) -> anyhow::Result<()> {
    let committed = client.committed_offsets(group).await?;
    let mut partitions: Vec<TopicPartition> = Vec::new();
    for s in specs {
        match &s.partitions {
            Some(ps) => partitions.extend(ps.iter().map(|p| (s.topic.clone(), *p))),
            None => partitions.extend(committed.keys().filter(|(t, _)| *t == s.topic).cloned()),
        }
    }
    if partitions.is_empty() {
        bail!("group '{group}' has no committed offsets in the topics given");
    }
    client.delete_offsets(group, &partitions).await?;
    let topics: Vec<&str> = specs.iter().map(|s| s.topic.as_str()).collect();
    println!(
        "Request succeed for deleting offsets with topic {} group {group}",
        topics.join(", ")
    );
    let mut rows = vec![["TOPIC", "PARTITION", "STATUS"].map(str::to_owned).to_vec()];
    partitions.sort();
    for (t, p) in &partitions {
        rows.push(vec![t.clone(), p.to_string(), "Successful".into()]);
    }
    print_rows(&[30, 15], &rows);
    Ok(())
}

/// The new offsets of one group (committed with --execute).
async fn reset_group(
    client: &mut KafkaClient,
    args: &ResetArgs,
) -> anyhow::Result<BTreeMap<TopicPartition, i64>> {
    let group = args.group.as_str();
    let desc = client.describe_group(group).await?;
    if desc.is_active() {
        bail!(
            "Assignments can only be reset if the group '{group}' is inactive, but the current \
             state is {}.",
            desc.state
        );
    }
    let committed = client.committed_offsets(group).await?;
    let mut partitions: BTreeSet<TopicPartition> = BTreeSet::new();
    if args.all_topics {
        partitions.extend(committed.keys().cloned());
    }
    for spec in &args.topics {
        partitions.extend(group_cmd::partitions_of(client, spec).await?);
    }
    if partitions.is_empty() {
        return Ok(BTreeMap::new());
    }
    let plan = group_cmd::plan(client, args, group, &partitions, &committed).await?;
    if args.execute {
        client.commit_offsets(group, &plan).await?;
    }
    Ok(plan)
}

fn print_reset(all: &BTreeMap<(String, TopicPartition), i64>) {
    if all.is_empty() {
        println!();
        return;
    }
    let mut rows = vec![
        ["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"]
            .map(str::to_owned)
            .to_vec(),
    ];
    for ((g, (t, p)), o) in all {
        rows.push(vec![g.clone(), t.clone(), p.to_string(), o.to_string()]);
    }
    print_rows(&[30, 30, 10, 15], &rows);
}
