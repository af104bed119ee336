//! `floe group …`: consumer groups over the Kafka protocol, like
//! `kafka-consumer-groups.sh`: list, describe with lag, reset offsets,
//! delete a group or some of its offsets.

#![allow(clippy::print_stdout)]

use std::collections::{BTreeMap, BTreeSet};

use anyhow::{Context, bail};
use clap::{ArgGroup, Args, Subcommand};
use floe_client::{EARLIEST, GroupDescription, Isolation, KafkaClient, LATEST, TopicPartition};

use crate::kafka_args::{BootstrapArgs, IsolationArg};
use crate::table::{Table, cell};

#[derive(Debug, Subcommand)]
pub enum GroupCommand {
    /// List the groups (classic, consumer and share) with their type and
    /// state (ListGroups).
    List {
        #[command(flatten)]
        conn: BootstrapArgs,
        /// One JSON object per group instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Show a group's state, members, and per partition its committed
    /// offset, log end offset and lag, with the total lag. For a share
    /// group: per partition its start offset, log end offset, lag (end
    /// minus start) and the members assigned it.
    Describe {
        #[command(flatten)]
        conn: BootstrapArgs,
        /// The group's id.
        group: String,
        /// The lag of which readers: `read_uncommitted` (the default, as
        /// kafka-consumer-groups.sh) measures it to the log end offset (the
        /// high watermark); `read_committed` to the last stable offset
        /// (shown in a LAST-STABLE-OFFSET column), which such consumers
        /// cannot pass while a transaction is open.
        #[arg(long, value_enum, value_name = "LEVEL", default_value_t = IsolationArg::ReadUncommitted, conflicts_with = "members")]
        isolation: IsolationArg,
        /// List the members instead (member id, host, client id, partitions).
        #[arg(long, conflicts_with = "json")]
        members: bool,
        /// One JSON object (state, members, partitions with offsets and
        /// lag, total lag) instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Move a group's committed offsets, or a share group's start offsets
    /// (AlterShareGroupOffsets), only while it has no live members, as in
    /// Kafka. Shows the plan and changes nothing unless --execute.
    ResetOffsets(ResetArgs),
    /// Delete groups (classic, consumer or share) and their committed
    /// offsets or share state (refused while a group has members).
    Delete {
        #[command(flatten)]
        conn: BootstrapArgs,
        /// The groups' ids.
        #[arg(required = true)]
        groups: Vec<String>,
    },
    /// Delete a group's committed offsets of some topics or partitions
    /// (refused for topics its live members subscribe to), or a share
    /// group's start offsets of whole topics (DeleteShareGroupOffsets,
    /// refused while it has members).
    DeleteOffsets {
        #[command(flatten)]
        conn: BootstrapArgs,
        /// The group's id.
        group: String,
        /// TOPIC (every partition the group has an offset for) or
        /// TOPIC:P,P,…; repeat for several.
        #[arg(long = "topic", value_name = "TOPIC[:PARTITIONS]", required = true, value_parser = parse_topic_spec)]
        topics: Vec<TopicSpec>,
    },
    /// Show a group's configs, set or default (DescribeConfigs on the
    /// group; the group need not exist).
    Configs {
        #[command(flatten)]
        conn: BootstrapArgs,
        /// The group's id.
        group: String,
    },
    /// Set or remove a group's configs (IncrementalAlterConfigs on the
    /// group): consumer.session.timeout.ms, share.record.lock.duration.ms
    /// and the other keys `floe group configs` lists.
    Alter {
        #[command(flatten)]
        conn: BootstrapArgs,
        /// The group's id.
        group: String,
        /// A config to set, as KEY=VALUE; repeat for several.
        #[arg(long = "config", value_name = "KEY=VALUE", value_parser = crate::topic_cmd::parse_key_value)]
        set: Vec<(String, String)>,
        /// A config to remove (back to its default); repeat for several.
        #[arg(long = "delete-config", value_name = "KEY")]
        delete: Vec<String>,
    },
}

/// Where `reset-offsets` moves each partition.
#[derive(Debug, Args)]
#[command(group(ArgGroup::new("target").required(true).multiple(false)))]
#[command(group(ArgGroup::new("scope").required(true).multiple(false)))]
#[command(group(ArgGroup::new("mode").required(false).multiple(false)))]
pub struct ResetArgs {
    #[command(flatten)]
    pub(crate) conn: BootstrapArgs,
    /// The group's id.
    pub(crate) group: String,
    /// TOPIC (all its partitions) or TOPIC:P,P,…; repeat for several.
    #[arg(long = "topic", value_name = "TOPIC[:PARTITIONS]", group = "scope", value_parser = parse_topic_spec)]
    pub(crate) topics: Vec<TopicSpec>,
    /// Every topic the group has committed offsets for.
    #[arg(long, group = "scope")]
    pub(crate) all_topics: bool,
    /// To the first offset of each partition.
    #[arg(long, group = "target")]
    pub(crate) to_earliest: bool,
    /// To the end of each partition (the next offset to be written).
    #[arg(long, group = "target")]
    pub(crate) to_latest: bool,
    /// To the first record at or after this time (the end if there is none);
    /// ms since the epoch, 2024-05-01T12:00:00[Z|+02:00], 2024-05-01, or
    /// -DURATION before now (-15m, -2h, -1d).
    #[arg(long, group = "target", value_name = "TIME", value_parser = crate::time_arg::parse_time, allow_hyphen_values = true)]
    pub(crate) to_datetime: Option<i64>,
    /// To this offset (kept within the partition's first and end offsets).
    #[arg(long, group = "target", value_name = "OFFSET")]
    pub(crate) to_offset: Option<i64>,
    /// By N from the committed offset (negative: back), kept within the
    /// partition's first and end offsets.
    #[arg(long, group = "target", value_name = "N", allow_hyphen_values = true)]
    pub(crate) shift_by: Option<i64>,
    /// Only show the plan (the default).
    #[arg(long, group = "mode")]
    pub(crate) dry_run: bool,
    /// Commit the new offsets.
    #[arg(long, group = "mode")]
    pub(crate) execute: bool,
}

impl ResetArgs {
    /// The target the flags name.
    pub(crate) fn target(&self) -> anyhow::Result<floe_client::ResetTo> {
        use floe_client::ResetTo;
        Ok(if self.to_earliest {
            ResetTo::Earliest
        } else if self.to_latest {
            ResetTo::Latest
        } else if let Some(o) = self.to_offset {
            ResetTo::Offset(o)
        } else if let Some(n) = self.shift_by {
            ResetTo::ShiftBy(n)
        } else if let Some(t) = self.to_datetime {
            ResetTo::Time(t)
        } else {
            bail!(
                "no target: give --to-earliest, --to-latest, --to-datetime, --to-offset or --shift-by"
            );
        })
    }
}

/// `TOPIC` or `TOPIC:P,P,…`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicSpec {
    pub topic: String,
    /// `None`: every partition.
    pub partitions: Option<Vec<i32>>,
}

pub fn parse_topic_spec(s: &str) -> Result<TopicSpec, String> {
    let (topic, partitions) = match s.split_once(':') {
        None => (s, None),
        Some((t, ps)) => {
            let parsed: Result<Vec<i32>, _> = ps.split(',').map(|p| p.trim().parse()).collect();
            match parsed {
                Ok(v) if !v.is_empty() && v.iter().all(|p| *p >= 0) => (t, Some(v)),
                _ => return Err(format!("expected TOPIC or TOPIC:P,P,…, got {s:?}")),
            }
        }
    };
    if topic.is_empty() {
        return Err(format!("no topic in {s:?}"));
    }
    Ok(TopicSpec {
        topic: topic.to_owned(),
        partitions,
    })
}

pub async fn run(cmd: GroupCommand) -> anyhow::Result<()> {
    match cmd {
        GroupCommand::List { conn, json } => list(&mut conn.connect().await?, json).await,
        GroupCommand::Describe {
            conn,
            group,
            isolation,
            members,
            json,
        } => {
            let mut client = conn.connect().await?;
            if let Some(share) = client.describe_share_group(&group).await? {
                crate::share_group_cmd::describe(&mut client, &share, members, json).await
            } else if members {
                describe_members(&mut client, &group).await
            } else {
                describe(&mut client, &group, isolation.into(), json).await
            }
        }
        GroupCommand::ResetOffsets(args) => reset(args).await,
        GroupCommand::Delete { conn, groups } => {
            let mut client = conn.connect().await?;
            for g in &groups {
                client.delete_group(g).await?;
                println!("deleted group {g}");
            }
            Ok(())
        }
        GroupCommand::DeleteOffsets {
            conn,
            group,
            topics,
        } => delete_offsets(&mut conn.connect().await?, &group, &topics).await,
        GroupCommand::Configs { conn, group } => {
            let configs = conn
                .connect()
                .await?
                .describe_configs(floe_client::RESOURCE_GROUP, &group)
                .await?;
            crate::topic_cmd::print_configs(configs);
            Ok(())
        }
        GroupCommand::Alter {
            conn,
            group,
            set,
            delete,
        } => alter_configs(&mut conn.connect().await?, &group, &set, &delete).await,
    }
}

async fn alter_configs(
    client: &mut KafkaClient,
    group: &str,
    set: &[(String, String)],
    delete: &[String],
) -> anyhow::Result<()> {
    if set.is_empty() && delete.is_empty() {
        bail!("nothing to alter: give --config KEY=VALUE or --delete-config KEY");
    }
    client
        .alter_configs(floe_client::RESOURCE_GROUP, group, set, delete)
        .await?;
    println!(
        "altered group {group}: {}",
        crate::topic_cmd::altered(set, delete)
    );
    Ok(())
}

async fn list(client: &mut KafkaClient, json: bool) -> anyhow::Result<()> {
    let groups = client.list_groups().await?;
    if json {
        for g in groups {
            let v = serde_json::json!({
                "group": g.group_id,
                "type": group_type(&g),
                "state": g.state,
                "protocol_type": g.protocol_type,
            });
            println!("{v}");
        }
        return Ok(());
    }
    let mut table = Table::new(&["GROUP", "TYPE", "STATE", "PROTOCOL-TYPE"]);
    for g in groups {
        table.row(vec![
            g.group_id.clone(),
            group_type(&g),
            g.state.unwrap_or_default(),
            g.protocol_type,
        ]);
    }
    print!("{}", table.render());
    Ok(())
}

/// A listed group's type: as the broker says (ListGroups v5), else from
/// its protocol type.
fn group_type(g: &floe_client::GroupListing) -> String {
    match &g.group_type {
        Some(t) if !t.is_empty() => t.clone(),
        _ if g.protocol_type == "share" => "share".to_owned(),
        _ => "classic".to_owned(),
    }
}

/// The end offset (`LATEST`) or first offset (`EARLIEST`) of each partition
/// asked, by topic; a topic that no longer exists has none.
pub(crate) async fn offsets_at(
    client: &mut KafkaClient,
    partitions: &BTreeSet<TopicPartition>,
    at: i64,
) -> anyhow::Result<BTreeMap<TopicPartition, i64>> {
    offsets_isolated(client, partitions, at, Isolation::ReadUncommitted).await
}

/// [`offsets_at`] at an isolation level (`LATEST` read committed is the
/// last stable offset).
async fn offsets_isolated(
    client: &mut KafkaClient,
    partitions: &BTreeSet<TopicPartition>,
    at: i64,
    isolation: Isolation,
) -> anyhow::Result<BTreeMap<TopicPartition, i64>> {
    let mut by_topic: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
    for (t, p) in partitions {
        by_topic.entry(t).or_default().push(*p);
    }
    let mut out = BTreeMap::new();
    for (topic, ps) in by_topic {
        match client
            .list_offsets_isolated(topic, &ps, at, isolation)
            .await
        {
            Ok(offsets) => out.extend(offsets.into_iter().map(|(p, o)| ((topic.to_owned(), p), o))),
            Err(e) if e.kind() == floe_client::ErrorKind::NotFound => {}
            Err(e) => return Err(e).context(format!("listing the offsets of {topic}")),
        }
    }
    Ok(out)
}

/// Who a partition is assigned to, from the group's members.
fn owners(desc: &GroupDescription) -> BTreeMap<TopicPartition, usize> {
    let mut out = BTreeMap::new();
    for (i, m) in desc.members.iter().enumerate() {
        for tp in &m.assignment {
            out.insert(tp.clone(), i);
        }
    }
    out
}

async fn describe(
    client: &mut KafkaClient,
    group: &str,
    isolation: Isolation,
    json: bool,
) -> anyhow::Result<()> {
    let desc = client.describe_group(group).await?;
    let committed = client.committed_offsets(group).await?;
    if desc.state == "Dead" && committed.is_empty() {
        bail!("group {group} does not exist");
    }
    let owners = owners(&desc);
    let partitions: BTreeSet<TopicPartition> =
        committed.keys().chain(owners.keys()).cloned().collect();
    let ends = offsets_at(client, &partitions, LATEST).await?;
    // The lag is measured to the offset these readers can reach: the log
    // end (high watermark), or read committed the last stable offset.
    let stable = match isolation {
        Isolation::ReadUncommitted => None,
        Isolation::ReadCommitted => {
            Some(offsets_isolated(client, &partitions, LATEST, isolation).await?)
        }
    };
    let lag_to = stable.as_ref().unwrap_or(&ends);
    let lag_of = |tp: &TopicPartition| match (committed.get(tp), lag_to.get(tp)) {
        (Some(c), Some(e)) => Some((e - c).max(0)),
        _ => None,
    };
    let total: i64 = partitions.iter().filter_map(lag_of).sum();
    if json {
        let rows: Vec<serde_json::Value> = partitions
            .iter()
            .map(|tp| {
                let member = owners.get(tp).map(|i| &desc.members[*i]);
                let mut row = serde_json::json!({
                    "topic": tp.0,
                    "partition": tp.1,
                    "current_offset": committed.get(tp),
                    "log_end_offset": ends.get(tp),
                    "lag": lag_of(tp),
                    "consumer_id": member.map(|m| &m.member_id),
                    "host": member.map(|m| &m.client_host),
                    "client_id": member.map(|m| &m.client_id),
                });
                if let Some(stable) = &stable {
                    row["last_stable_offset"] = serde_json::json!(stable.get(tp));
                }
                row
            })
            .collect();
        let v = serde_json::json!({
            "group": group,
            "state": desc.state,
            "protocol_type": desc.protocol_type,
            "assignor": desc.protocol,
            "members": desc.members.len(),
            "partitions": rows,
            "total_lag": total,
            "lag_to": if stable.is_some() { "last_stable_offset" } else { "log_end_offset" },
        });
        println!("{v}");
        return Ok(());
    }
    println!(
        "group {group}: state {}, {} member(s){}",
        desc.state,
        desc.members.len(),
        if desc.protocol.is_empty() {
            String::new()
        } else {
            format!(", assignor {}", desc.protocol)
        }
    );
    let mut header = vec![
        "GROUP",
        "TOPIC",
        "PARTITION",
        "CURRENT-OFFSET",
        "LOG-END-OFFSET",
    ];
    if stable.is_some() {
        header.push("LAST-STABLE-OFFSET");
    }
    header.extend(["LAG", "CONSUMER-ID", "HOST", "CLIENT-ID"]);
    let mut table = Table::new(&header);
    for tp in &partitions {
        let current = committed.get(tp).copied();
        let end = ends.get(tp).copied();
        let lag = lag_of(tp);
        let member = owners.get(tp).map(|i| &desc.members[*i]);
        let mut row = vec![
            group.to_owned(),
            tp.0.clone(),
            tp.1.to_string(),
            cell(current),
            cell(end),
        ];
        if let Some(stable) = &stable {
            row.push(cell(stable.get(tp).copied()));
        }
        row.extend([
            cell(lag),
            member.map(|m| m.member_id.clone()).unwrap_or_default(),
            member.map(|m| m.client_host.clone()).unwrap_or_default(),
            member.map(|m| m.client_id.clone()).unwrap_or_default(),
        ]);
        table.row(row);
    }
    print!("{}", table.render());
    println!("TOTAL-LAG {total}");
    Ok(())
}

async fn describe_members(client: &mut KafkaClient, group: &str) -> anyhow::Result<()> {
    let desc = client.describe_group(group).await?;
    println!(
        "group {group}: state {}, {} member(s)",
        desc.state,
        desc.members.len()
    );
    let mut table = Table::new(&[
        "GROUP",
        "CONSUMER-ID",
        "GROUP-INSTANCE-ID",
        "HOST",
        "CLIENT-ID",
        "#PARTITIONS",
        "ASSIGNMENT",
    ]);
    for m in &desc.members {
        let assignment: Vec<String> = m
            .assignment
            .iter()
            .map(|(t, p)| format!("{t}:{p}"))
            .collect();
        table.row(vec![
            group.to_owned(),
            m.member_id.clone(),
            m.group_instance_id.clone().unwrap_or_default(),
            m.client_host.clone(),
            m.client_id.clone(),
            m.assignment.len().to_string(),
            assignment.join(","),
        ]);
    }
    print!("{}", table.render());
    Ok(())
}

/// The partitions a spec names: those listed, or every partition of the
/// topic.
pub(crate) async fn partitions_of(
    client: &mut KafkaClient,
    spec: &TopicSpec,
) -> anyhow::Result<Vec<TopicPartition>> {
    let all = client.topic(&spec.topic).await?.partition_ids();
    let ps = match &spec.partitions {
        None => all,
        Some(ps) => {
            if let Some(p) = ps.iter().find(|p| !all.contains(p)) {
                bail!(
                    "topic {} has {} partition(s); there is no partition {p}",
                    spec.topic,
                    all.len()
                );
            }
            ps.clone()
        }
    };
    Ok(ps.into_iter().map(|p| (spec.topic.clone(), p)).collect())
}

/// What a reset names and where it moves it, printed: the partitions with a
/// `current` position (--all-topics) and those of each --topic, each with
/// its current and its new position under the two `columns`. Refused, with
/// `nothing` as the reason, when no partition is named.
pub(crate) async fn plan_and_print(
    client: &mut KafkaClient,
    args: &ResetArgs,
    group: &str,
    current: &BTreeMap<TopicPartition, i64>,
    columns: [&str; 2],
    nothing: &str,
) -> anyhow::Result<BTreeMap<TopicPartition, i64>> {
    let mut partitions: BTreeSet<TopicPartition> = BTreeSet::new();
    if args.all_topics {
        partitions.extend(current.keys().cloned());
    }
    for spec in &args.topics {
        partitions.extend(partitions_of(client, spec).await?);
    }
    if partitions.is_empty() {
        bail!("no partition to reset: {nothing}");
    }
    let plan = plan(client, args, group, &partitions, current).await?;
    let mut table = Table::new(&["GROUP", "TOPIC", "PARTITION", columns[0], columns[1]]);
    for (tp, new) in &plan {
        table.row(vec![
            group.to_owned(),
            tp.0.clone(),
            tp.1.to_string(),
            cell(current.get(tp).copied()),
            new.to_string(),
        ]);
    }
    print!("{}", table.render());
    Ok(plan)
}

/// Where each of `partitions` moves: the target `args` names, from the
/// `current` offsets (for --shift-by), kept within the partition.
pub(crate) async fn plan(
    client: &mut KafkaClient,
    args: &ResetArgs,
    group: &str,
    partitions: &BTreeSet<TopicPartition>,
    current: &BTreeMap<TopicPartition, i64>,
) -> anyhow::Result<BTreeMap<TopicPartition, i64>> {
    let earliest = offsets_at(client, partitions, EARLIEST).await?;
    let latest = offsets_at(client, partitions, LATEST).await?;
    let at_time = match args.to_datetime {
        Some(t) => Some(offsets_at(client, partitions, t).await?),
        None => None,
    };
    let to = args.target()?;
    let mut plan: BTreeMap<TopicPartition, i64> = BTreeMap::new();
    for tp in partitions {
        let (Some(&first), Some(&end)) = (earliest.get(tp), latest.get(tp)) else {
            bail!("topic {} does not exist", tp.0);
        };
        let found = at_time.as_ref().and_then(|f| f.get(tp).copied());
        let target = floe_client::reset_target(to, first, end, current.get(tp).copied(), found)
            .map_err(|e| anyhow::anyhow!("group {group}, {} partition {}: {e}", tp.0, tp.1))?;
        plan.insert(tp.clone(), target);
    }
    Ok(plan)
}

async fn reset(args: ResetArgs) -> anyhow::Result<()> {
    let mut client = args.conn.connect().await?;
    let group = args.group.as_str();
    if let Some(share) = client.describe_share_group(group).await? {
        return crate::share_group_cmd::reset(&mut client, &share, &args).await;
    }
    let desc = client.describe_group(group).await?;
    let committed = client.committed_offsets(group).await?;
    if desc.is_active() {
        let why = format!(
            "group {group} has {} live member(s) (state {}): offsets can only be reset while \
             it is inactive (Empty); stop its consumers first",
            desc.members.len(),
            desc.state
        );
        if args.execute {
            bail!(why);
        }
        eprintln!("floe: warning: {why}");
    }
    let nothing = format!("group {group} has no committed offsets");
    let columns = ["CURRENT-OFFSET", "NEW-OFFSET"];
    let plan = plan_and_print(&mut client, &args, group, &committed, columns, &nothing).await?;
    if args.execute {
        client.commit_offsets(group, &plan).await?;
        println!("reset {} partition(s) of group {group}", plan.len());
    } else {
        println!("dry run: nothing committed (add --execute to commit these offsets)");
    }
    Ok(())
}

async fn delete_offsets(
    client: &mut KafkaClient,
    group: &str,
    specs: &[TopicSpec],
) -> anyhow::Result<()> {
    if client.describe_share_group(group).await?.is_some() {
        return crate::share_group_cmd::delete_offsets(client, group, specs).await;
    }
    let committed = client.committed_offsets(group).await?;
    let mut partitions = Vec::new();
    for spec in specs {
        match &spec.partitions {
            Some(ps) => partitions.extend(ps.iter().map(|p| (spec.topic.clone(), *p))),
            None => partitions.extend(committed.keys().filter(|(t, _)| *t == spec.topic).cloned()),
        }
    }
    if partitions.is_empty() {
        bail!("group {group} has no committed offsets in the topics given");
    }
    client.delete_offsets(group, &partitions).await?;
    for (t, p) in &partitions {
        println!("deleted the offset of group {group} in {t} partition {p}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topic_specs_name_a_topic_and_maybe_partitions() {
        assert_eq!(
            parse_topic_spec("t"),
            Ok(TopicSpec {
                topic: "t".into(),
                partitions: None
            })
        );
        assert_eq!(
            parse_topic_spec("t:0,2"),
            Ok(TopicSpec {
                topic: "t".into(),
                partitions: Some(vec![0, 2])
            })
        );
        for bad in ["t:", ":1", "t:x", "t:-1"] {
            assert!(parse_topic_spec(bad).is_err(), "{bad}");
        }
    }
}
