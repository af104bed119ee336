//! `floe transactions …` and `floe producers …`: transactions and the
//! producers of a partition over the Kafka protocol, like
//! `kafka-transactions.sh` (ListTransactions, DescribeTransactions,
//! DescribeProducers).

#![allow(clippy::print_stdout)]

use clap::Subcommand;
use floe_client::KafkaClient;

use crate::kafka_args::BootstrapArgs;
use crate::table::{Table, cell};

#[derive(Debug, Subcommand)]
pub enum TransactionsCommand {
    /// List the transactional ids the coordinators know, with their
    /// producer id and state (ListTransactions).
    List {
        #[command(flatten)]
        conn: BootstrapArgs,
        /// Only ids in this state (Empty, Ongoing, PrepareCommit,
        /// PrepareAbort, CompleteCommit, CompleteAbort); repeat for several.
        #[arg(long = "state", value_name = "STATE")]
        states: Vec<String>,
        /// One JSON object per transactional id instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Describe transactional ids: state, producer id and epoch, timeout,
    /// start time and the partitions of the open transaction
    /// (DescribeTransactions).
    Describe {
        #[command(flatten)]
        conn: BootstrapArgs,
        /// The transactional ids.
        #[arg(required = true)]
        ids: Vec<String>,
        /// One JSON object per transactional id instead of a table.
        #[arg(long)]
        json: bool,
    },
}

/// `floe producers`.
#[derive(Debug, clap::Args)]
pub struct ProducersArgs {
    #[command(flatten)]
    conn: BootstrapArgs,
    /// The topic.
    topic: String,
    /// Only this partition (default: every partition of the topic).
    #[arg(value_parser = clap::value_parser!(i32).range(0..))]
    partition: Option<i32>,
    /// One JSON object per producer and partition instead of a table.
    #[arg(long)]
    json: bool,
}

pub async fn run(cmd: TransactionsCommand) -> anyhow::Result<()> {
    match cmd {
        TransactionsCommand::List { conn, states, json } => {
            list(&mut conn.connect().await?, &states, json).await
        }
        TransactionsCommand::Describe { conn, ids, json } => {
            describe(&mut conn.connect().await?, &ids, json).await
        }
    }
}

/// A time in ms since the epoch as RFC 3339 (UTC); empty for none (-1).
fn time_cell(ms: i64) -> String {
    if ms < 0 {
        return String::new();
    }
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
        .unwrap_or_default()
}

async fn list(client: &mut KafkaClient, states: &[String], json: bool) -> anyhow::Result<()> {
    let listed = client.list_transactions(states).await?;
    if json {
        for t in listed {
            let v = serde_json::json!({
                "transactional_id": t.transactional_id,
                "producer_id": t.producer_id,
                "state": t.state,
            });
            println!("{v}");
        }
        return Ok(());
    }
    let mut table = Table::new(&["TRANSACTIONAL-ID", "PRODUCER-ID", "STATE"]);
    for t in listed {
        table.row(vec![t.transactional_id, t.producer_id.to_string(), t.state]);
    }
    print!("{}", table.render());
    Ok(())
}

async fn describe(client: &mut KafkaClient, ids: &[String], json: bool) -> anyhow::Result<()> {
    let described = client.describe_transactions(ids).await?;
    let partitions_of = |parts: &[(String, Vec<i32>)]| -> Vec<String> {
        parts
            .iter()
            .flat_map(|(t, ps)| ps.iter().map(move |p| format!("{t}-{p}")))
            .collect()
    };
    if json {
        for d in described {
            let v = serde_json::json!({
                "transactional_id": d.transactional_id,
                "state": d.state,
                "producer_id": d.producer_id,
                "producer_epoch": d.producer_epoch,
                "timeout_ms": d.timeout_ms,
                "start_ms": (d.start_ms >= 0).then_some(d.start_ms),
                "partitions": partitions_of(&d.partitions),
            });
            println!("{v}");
        }
        return Ok(());
    }
    let mut table = Table::new(&[
        "TRANSACTIONAL-ID",
        "STATE",
        "PRODUCER-ID",
        "EPOCH",
        "TIMEOUT-MS",
        "START",
        "PARTITIONS",
    ]);
    for d in described {
        table.row(vec![
            d.transactional_id.clone(),
            d.state.clone(),
            d.producer_id.to_string(),
            d.producer_epoch.to_string(),
            d.timeout_ms.to_string(),
            time_cell(d.start_ms),
            partitions_of(&d.partitions).join(","),
        ]);
    }
    print!("{}", table.render());
    Ok(())
}

pub async fn producers(args: ProducersArgs) -> anyhow::Result<()> {
    let mut client = args.conn.connect().await?;
    let asked = args.partition.map(|p| vec![p]);
    let by_partition = client
        .describe_producers(&args.topic, asked.as_deref())
        .await?;
    let known = |v: i64| (v >= 0).then_some(v);
    if args.json {
        for (p, producers) in &by_partition {
            for s in producers {
                let v = serde_json::json!({
                    "topic": args.topic,
                    "partition": p,
                    "producer_id": s.producer_id,
                    "producer_epoch": s.producer_epoch,
                    "last_sequence": s.last_sequence,
                    "last_timestamp": known(s.last_timestamp),
                    "coordinator_epoch": known(i64::from(s.coordinator_epoch)),
                    "current_txn_start_offset": known(s.current_txn_start_offset),
                });
                println!("{v}");
            }
        }
        return Ok(());
    }
    let mut table = Table::new(&[
        "TOPIC",
        "PARTITION",
        "PRODUCER-ID",
        "EPOCH",
        "LAST-SEQUENCE",
        "LAST-TIMESTAMP",
        "COORDINATOR-EPOCH",
        "TXN-START-OFFSET",
    ]);
    for (p, producers) in &by_partition {
        for s in producers {
            table.row(vec![
                args.topic.clone(),
                p.to_string(),
                s.producer_id.to_string(),
                s.producer_epoch.to_string(),
                s.last_sequence.to_string(),
                time_cell(s.last_timestamp),
                cell(known(i64::from(s.coordinator_epoch))),
                cell(known(s.current_txn_start_offset)),
            ]);
        }
    }
    print!("{}", table.render());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_print_as_utc_and_none_as_empty() {
        assert_eq!(time_cell(-1), "");
        assert_eq!(time_cell(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(time_cell(1_700_000_000_123), "2023-11-14T22:13:20.123Z");
    }
}
