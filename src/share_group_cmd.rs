//! `floe group …` for share groups (KIP-932), like `kafka-share-groups.sh`:
//! describe with each partition's start offset and lag (log end minus
//! start offset), reset the start offsets (AlterShareGroupOffsets) and
//! delete them per topic (DeleteShareGroupOffsets), refused while the
//! group has members. `crate::group_cmd` sends a share group here.

#![allow(clippy::print_stdout)]

use std::collections::{BTreeMap, BTreeSet};

use anyhow::bail;
use floe_client::{KafkaClient, LATEST, ShareGroupDescription, TopicPartition};

use crate::group_cmd::{ResetArgs, TopicSpec, offsets_at, plan_and_print};
use crate::table::{Table, cell};

/// Who holds each partition: the members assigned it (several may share
/// one).
fn holders(desc: &ShareGroupDescription) -> BTreeMap<TopicPartition, Vec<String>> {
    let mut out: BTreeMap<TopicPartition, Vec<String>> = BTreeMap::new();
    for m in &desc.members {
        for tp in &m.assignment {
            out.entry(tp.clone()).or_default().push(m.member_id.clone());
        }
    }
    out
}

/// A partition's lag: records from the start offset to the log end.
fn lag(start: Option<i64>, end: Option<i64>) -> Option<i64> {
    Some((end? - start?).max(0))
}

pub async fn describe(
    client: &mut KafkaClient,
    desc: &ShareGroupDescription,
    members: bool,
    json: bool,
) -> anyhow::Result<()> {
    let group = desc.group_id.as_str();
    if members {
        println!(
            "share group {group}: state {}, {} member(s)",
            desc.state,
            desc.members.len()
        );
        let mut table = Table::new(&[
            "GROUP",
            "CONSUMER-ID",
            "MEMBER-EPOCH",
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
                m.member_epoch.to_string(),
                m.client_host.clone(),
                m.client_id.clone(),
                m.assignment.len().to_string(),
                assignment.join(","),
            ]);
        }
        print!("{}", table.render());
        return Ok(());
    }
    let starts = client.share_start_offsets(group).await?;
    let holders = holders(desc);
    let partitions: BTreeSet<TopicPartition> =
        starts.keys().chain(holders.keys()).cloned().collect();
    let ends = offsets_at(client, &partitions, LATEST).await?;
    let lag_of = |tp: &TopicPartition| lag(starts.get(tp).copied(), ends.get(tp).copied());
    let total: i64 = partitions.iter().filter_map(lag_of).sum();
    if json {
        let rows: Vec<serde_json::Value> = partitions
            .iter()
            .map(|tp| {
                serde_json::json!({
                    "topic": tp.0,
                    "partition": tp.1,
                    "start_offset": starts.get(tp),
                    "log_end_offset": ends.get(tp),
                    "lag": lag_of(tp),
                    "members": holders.get(tp).cloned().unwrap_or_default(),
                })
            })
            .collect();
        let v = serde_json::json!({
            "group": group,
            "type": "share",
            "state": desc.state,
            "group_epoch": desc.group_epoch,
            "members": desc.members.len(),
            "partitions": rows,
            "total_lag": total,
        });
        println!("{v}");
        return Ok(());
    }
    println!(
        "share group {group}: state {}, {} member(s)",
        desc.state,
        desc.members.len()
    );
    let mut table = Table::new(&[
        "GROUP",
        "TOPIC",
        "PARTITION",
        "START-OFFSET",
        "LOG-END-OFFSET",
        "LAG",
        "MEMBERS",
    ]);
    for tp in &partitions {
        table.row(vec![
            group.to_owned(),
            tp.0.clone(),
            tp.1.to_string(),
            cell(starts.get(tp).copied()),
            cell(ends.get(tp).copied()),
            cell(lag_of(tp)),
            holders.get(tp).map(|m| m.join(",")).unwrap_or_default(),
        ]);
    }
    print!("{}", table.render());
    println!("TOTAL-LAG {total}");
    Ok(())
}

/// Why a share group's offsets cannot be changed now, if they cannot.
fn busy(desc: &ShareGroupDescription) -> Option<String> {
    (!desc.members.is_empty()).then(|| {
        format!(
            "share group {} has {} member(s) (state {}): its start offsets can only be changed \
             while it has none; stop its consumers first",
            desc.group_id,
            desc.members.len(),
            desc.state
        )
    })
}

pub async fn reset(
    client: &mut KafkaClient,
    desc: &ShareGroupDescription,
    args: &ResetArgs,
) -> anyhow::Result<()> {
    let group = desc.group_id.as_str();
    if let Some(why) = busy(desc) {
        if args.execute {
            bail!(why);
        }
        eprintln!("floe: warning: {why}");
    }
    let starts = client.share_start_offsets(group).await?;
    let nothing = format!("share group {group} has no start offsets");
    let columns = ["START-OFFSET", "NEW-START-OFFSET"];
    let plan = plan_and_print(client, args, group, &starts, columns, &nothing).await?;
    if args.execute {
        client.alter_share_offsets(group, &plan).await?;
        println!("reset {} partition(s) of share group {group}", plan.len());
    } else {
        println!("dry run: nothing changed (add --execute to move these start offsets)");
    }
    Ok(())
}

pub async fn delete_offsets(
    client: &mut KafkaClient,
    group: &str,
    specs: &[TopicSpec],
) -> anyhow::Result<()> {
    if let Some(spec) = specs.iter().find(|s| s.partitions.is_some()) {
        bail!(
            "a share group's offsets are deleted per topic (DeleteShareGroupOffsets): give --topic {} without partitions",
            spec.topic
        );
    }
    let topics: Vec<String> = specs.iter().map(|s| s.topic.clone()).collect();
    client.delete_share_offsets(group, &topics).await?;
    for t in &topics {
        println!("deleted the start offsets of share group {group} in {t}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_share_partitions_lag_runs_from_its_start_to_the_log_end() {
        assert_eq!(lag(Some(3), Some(10)), Some(7));
        assert_eq!(lag(Some(10), Some(10)), Some(0));
        // A start past an end that moved back (not expected) is no lag.
        assert_eq!(lag(Some(12), Some(10)), Some(0));
        assert_eq!(lag(None, Some(10)), None);
        assert_eq!(lag(Some(1), None), None);
    }

    #[test]
    fn a_share_group_with_members_is_busy() {
        let mut desc = ShareGroupDescription {
            group_id: "g".into(),
            state: "Empty".into(),
            group_epoch: 3,
            members: vec![],
        };
        assert_eq!(busy(&desc), None);
        desc.state = "Stable".into();
        desc.members.push(floe_client::ShareMember {
            member_id: "m".into(),
            member_epoch: 1,
            client_id: "c".into(),
            client_host: "h".into(),
            assignment: vec![("t".into(), 0), ("t".into(), 1)],
        });
        assert!(busy(&desc).is_some_and(|w| w.contains("1 member(s)")));
        assert_eq!(
            holders(&desc).get(&("t".to_owned(), 1)),
            Some(&vec!["m".to_owned()])
        );
    }
}
