//! `floe offsets`, `floe delete-records` and `floe configs`: a topic's
//! offsets by partition (like `kafka-get-offsets.sh`), moving a partition's
//! start (like `kafka-delete-records.sh`), and the configs of a topic or a
//! broker (like `kafka-configs.sh --describe`).

#![allow(clippy::print_stdout)]

use std::collections::BTreeMap;

use anyhow::bail;
use clap::{ArgGroup, Args};
use floe_client::{EARLIEST, KafkaClient, LATEST, RESOURCE_BROKER, RESOURCE_GROUP, RESOURCE_TOPIC};

use crate::kafka_args::BootstrapArgs;
use crate::table::{Table, cell};

#[derive(Debug, Args)]
pub struct OffsetsArgs {
    #[command(flatten)]
    conn: BootstrapArgs,
    /// The topic.
    topic: String,
    /// Only this partition (default: all).
    #[arg(long, value_parser = clap::value_parser!(i32).range(0..))]
    partition: Option<i32>,
    /// Also the offset of the first record at or after this time (-1 when
    /// there is none): ms since the epoch, 2024-05-01T12:00:00[Z|+02:00],
    /// 2024-05-01, or -DURATION before now (-15m, -2h, -1d).
    #[arg(long, value_name = "TIME", value_parser = crate::time_arg::parse_time, allow_hyphen_values = true)]
    time: Option<i64>,
    /// One JSON object per partition instead of a table.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub struct DeleteRecordsArgs {
    #[command(flatten)]
    conn: BootstrapArgs,
    /// The topic.
    topic: String,
    /// Only this partition (default: all).
    #[arg(long, value_parser = clap::value_parser!(i32).range(0..))]
    partition: Option<i32>,
    /// Delete the records before this offset: it becomes the partition's
    /// first offset. `end` deletes every record written so far.
    #[arg(long, value_name = "OFFSET|end", value_parser = parse_before)]
    before: i64,
}

#[derive(Debug, Args)]
#[command(group(ArgGroup::new("resource").required(true).multiple(false)))]
pub struct ConfigsArgs {
    #[command(flatten)]
    conn: BootstrapArgs,
    /// A topic's configs.
    #[arg(long, group = "resource")]
    topic: Option<String>,
    /// A broker's configs, by the id clients see in Metadata (a proxy's id).
    #[arg(long, group = "resource", value_name = "ID")]
    broker: Option<i32>,
    /// A group's configs (Kafka 4's group configs; `floe group alter`
    /// changes them). A group never altered shows the defaults.
    #[arg(long, group = "resource", value_name = "GROUP")]
    group: Option<String>,
}

/// An offset, or `end` (-1: DeleteRecords' "the high watermark").
fn parse_before(s: &str) -> Result<i64, String> {
    match s {
        "end" | "latest" => Ok(LATEST),
        _ => match s.parse::<i64>() {
            Ok(n) if n >= 0 => Ok(n),
            _ => Err(format!("expected an offset or `end`, got {s:?}")),
        },
    }
}

/// The partitions of `topic` to work on: all, or the one asked.
async fn partitions(
    client: &mut KafkaClient,
    topic: &str,
    only: Option<i32>,
) -> anyhow::Result<Vec<i32>> {
    let all = client.topic(topic).await?.partition_ids();
    match only {
        None => Ok(all),
        Some(p) if all.contains(&p) => Ok(vec![p]),
        Some(p) => bail!(
            "topic {topic} has {} partition(s); there is no partition {p}",
            all.len()
        ),
    }
}

pub async fn offsets(args: OffsetsArgs) -> anyhow::Result<()> {
    let mut client = args.conn.connect().await?;
    let ps = partitions(&mut client, &args.topic, args.partition).await?;
    let first = client.list_offsets(&args.topic, &ps, EARLIEST).await?;
    let end = client.list_offsets(&args.topic, &ps, LATEST).await?;
    let at: BTreeMap<i32, i64> = match args.time {
        Some(t) => client.list_offsets(&args.topic, &ps, t).await?,
        None => BTreeMap::new(),
    };
    if args.json {
        for p in &ps {
            let (f, e) = (first.get(p).copied(), end.get(p).copied());
            let v = serde_json::json!({
                "topic": args.topic,
                "partition": p,
                "earliest": f,
                "latest": e,
                "records": f.zip(e).map(|(f, e)| (e - f).max(0)),
                "at_time": args.time.map(|_| at.get(p).copied()),
            });
            println!("{v}");
        }
        return Ok(());
    }
    let mut header = vec!["TOPIC", "PARTITION", "EARLIEST", "LATEST", "RECORDS"];
    if args.time.is_some() {
        header.push("AT-TIME");
    }
    let mut table = Table::new(&header);
    for p in &ps {
        let (f, e) = (first.get(p).copied(), end.get(p).copied());
        let mut row = vec![
            args.topic.clone(),
            p.to_string(),
            cell(f),
            cell(e),
            cell(f.zip(e).map(|(f, e)| (e - f).max(0))),
        ];
        if args.time.is_some() {
            row.push(cell(at.get(p).copied()));
        }
        table.row(row);
    }
    print!("{}", table.render());
    Ok(())
}

pub async fn delete_records(args: DeleteRecordsArgs) -> anyhow::Result<()> {
    let mut client = args.conn.connect().await?;
    let ps = partitions(&mut client, &args.topic, args.partition).await?;
    let before: BTreeMap<i32, i64> = ps.iter().map(|p| (*p, args.before)).collect();
    let low = client.delete_records(&args.topic, &before).await?;
    let mut table = Table::new(&["TOPIC", "PARTITION", "EARLIEST"]);
    for (p, o) in low {
        table.row(vec![args.topic.clone(), p.to_string(), o.to_string()]);
    }
    print!("{}", table.render());
    Ok(())
}

pub async fn configs(args: ConfigsArgs) -> anyhow::Result<()> {
    let mut client = args.conn.connect().await?;
    let (kind, name) = match (&args.topic, args.broker, &args.group) {
        (Some(t), _, _) => (RESOURCE_TOPIC, t.clone()),
        (None, Some(b), _) => (RESOURCE_BROKER, b.to_string()),
        (None, None, Some(g)) => (RESOURCE_GROUP, g.clone()),
        (None, None, None) => bail!("give --topic NAME, --broker ID or --group GROUP"),
    };
    let configs = client.describe_configs(kind, &name).await?;
    crate::topic_cmd::print_configs(configs);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn before_is_an_offset_or_the_end() {
        assert_eq!(parse_before("12"), Ok(12));
        assert_eq!(parse_before("end"), Ok(LATEST));
        assert!(parse_before("-3").is_err());
        assert!(parse_before("soon").is_err());
    }
}
