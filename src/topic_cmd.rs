//! `floe topic …`: create, list, describe, alter and delete topics over the
//! Kafka protocol, like a small `kafka-topics.sh` / `kafka-configs.sh`.

#![allow(clippy::print_stdout)]

use anyhow::bail;
use clap::Subcommand;
use floe_client::{
    ClientError, ConfigEntry, ConfigSource, EARLIEST, KafkaClient, LATEST, ResponseError,
    kafka_error_name,
};

use crate::kafka_args::BootstrapArgs;

#[derive(Debug, Subcommand)]
pub enum TopicCommand {
    /// Create a topic (CreateTopics).
    Create {
        #[command(flatten)]
        conn: BootstrapArgs,
        /// The topic's name.
        name: String,
        /// Number of partitions.
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(i32).range(1..))]
        partitions: i32,
        /// A topic config, as KEY=VALUE; repeat for several.
        #[arg(long = "config", value_name = "KEY=VALUE", value_parser = parse_key_value)]
        configs: Vec<(String, String)>,
        /// Succeed without doing anything if the topic exists already.
        #[arg(long)]
        if_not_exists: bool,
    },
    /// List topics with their partition counts (Metadata).
    List {
        #[command(flatten)]
        conn: BootstrapArgs,
    },
    /// Show a topic's partitions (leader, first and end offsets, record
    /// count, stored bytes) and configs; every topic without a name
    /// (Metadata, ListOffsets, DescribeLogDirs, DescribeConfigs).
    Describe {
        #[command(flatten)]
        conn: BootstrapArgs,
        /// The topic's name (default: every topic).
        name: Option<String>,
    },
    /// Raise a topic's partition count to --total (CreatePartitions). Keyed
    /// records then map to other partitions; partitions are never removed.
    AddPartitions {
        #[command(flatten)]
        conn: BootstrapArgs,
        /// The topic's name.
        name: String,
        /// The partition count wanted (more than it has now).
        #[arg(long, alias = "partitions", value_parser = clap::value_parser!(i32).range(1..))]
        total: i32,
        /// Succeed without doing anything if the topic does not exist.
        #[arg(long)]
        if_exists: bool,
    },
    /// Set or remove topic configs (IncrementalAlterConfigs).
    Alter {
        #[command(flatten)]
        conn: BootstrapArgs,
        /// The topic's name.
        name: String,
        /// A config to set, as KEY=VALUE; repeat for several.
        #[arg(long = "config", value_name = "KEY=VALUE", value_parser = parse_key_value)]
        set: Vec<(String, String)>,
        /// A config to remove (back to its default); repeat for several.
        #[arg(long = "delete-config", value_name = "KEY")]
        delete: Vec<String>,
        /// Succeed without doing anything if the topic does not exist.
        #[arg(long)]
        if_exists: bool,
    },
    /// Delete a topic (DeleteTopics).
    Delete {
        #[command(flatten)]
        conn: BootstrapArgs,
        /// The topic's name.
        name: String,
        /// Succeed without doing anything if the topic does not exist.
        #[arg(long)]
        if_exists: bool,
    },
}

/// `Ok` for a result, and for the error `tolerated` explains away (printed
/// as a note): `--if-exists` and `--if-not-exists`.
fn tolerate(
    result: anyhow::Result<()>,
    enabled: bool,
    tolerated: ResponseError,
    note: &str,
) -> anyhow::Result<()> {
    match result {
        Err(e)
            if enabled
                && e.downcast_ref::<ClientError>()
                    .and_then(ClientError::broker_error)
                    == Some(tolerated) =>
        {
            println!("{note}");
            Ok(())
        }
        other => other,
    }
}

pub async fn run(cmd: TopicCommand) -> anyhow::Result<()> {
    match cmd {
        TopicCommand::Create {
            conn,
            name,
            partitions,
            configs,
            if_not_exists,
        } => tolerate(
            create(&mut conn.connect().await?, &name, partitions, &configs).await,
            if_not_exists,
            ResponseError::TopicAlreadyExists,
            &format!("topic {name} exists already"),
        ),
        TopicCommand::List { conn } => list(&mut conn.connect().await?).await,
        TopicCommand::Describe { conn, name } => {
            let mut client = conn.connect().await?;
            let names = match name {
                Some(n) => vec![n],
                None => client
                    .list_topics()
                    .await?
                    .into_iter()
                    .map(|t| t.name)
                    .collect(),
            };
            for (i, n) in names.iter().enumerate() {
                if i > 0 {
                    println!();
                }
                describe(&mut client, n).await?;
            }
            Ok(())
        }
        TopicCommand::AddPartitions {
            conn,
            name,
            total,
            if_exists,
        } => tolerate(
            add_partitions(&mut conn.connect().await?, &name, total).await,
            if_exists,
            ResponseError::UnknownTopicOrPartition,
            &format!("topic {name} does not exist"),
        ),
        TopicCommand::Alter {
            conn,
            name,
            set,
            delete,
            if_exists,
        } => {
            if set.is_empty() && delete.is_empty() {
                bail!("nothing to alter: give --config KEY=VALUE or --delete-config KEY");
            }
            tolerate(
                alter(&mut conn.connect().await?, &name, &set, &delete).await,
                if_exists,
                ResponseError::UnknownTopicOrPartition,
                &format!("topic {name} does not exist"),
            )
        }
        TopicCommand::Delete {
            conn,
            name,
            if_exists,
        } => tolerate(
            delete(&mut conn.connect().await?, &name).await,
            if_exists,
            ResponseError::UnknownTopicOrPartition,
            &format!("topic {name} does not exist"),
        ),
    }
}

/// Parses `KEY=VALUE` (the value may contain `=`; the key may not be empty).
pub fn parse_key_value(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.trim().is_empty() => Ok((k.trim().to_owned(), v.to_owned())),
        _ => Err(format!("expected KEY=VALUE, got {s:?}")),
    }
}

async fn create(
    client: &mut KafkaClient,
    name: &str,
    partitions: i32,
    configs: &[(String, String)],
) -> anyhow::Result<()> {
    client.create_topic(name, partitions, configs).await?;
    println!("created topic {name} with {partitions} partition(s)");
    // The topic is usable once every partition has a leader.
    let timeout = client.timeout();
    if let Err(e) = client.wait_for_leaders(name, partitions, timeout).await {
        eprintln!("floe: warning: {e:#}");
    }
    Ok(())
}

async fn list(client: &mut KafkaClient) -> anyhow::Result<()> {
    for t in client.list_topics().await? {
        println!("{}\t{}", t.name, t.partitions);
    }
    Ok(())
}

async fn add_partitions(client: &mut KafkaClient, name: &str, total: i32) -> anyhow::Result<()> {
    client.create_partitions(name, total).await?;
    println!("topic {name} now has {total} partition(s)");
    let timeout = client.timeout();
    if let Err(e) = client.wait_for_leaders(name, total, timeout).await {
        eprintln!("floe: warning: {e:#}");
    }
    Ok(())
}

async fn describe(client: &mut KafkaClient, name: &str) -> anyhow::Result<()> {
    let topic = client.topic(name).await?;
    let ids_asked = topic.partition_ids();
    let first = client.list_offsets(name, &ids_asked, EARLIEST).await?;
    let end = client.list_offsets(name, &ids_asked, LATEST).await?;
    // Sizes come from DescribeLogDirs; a broker without it (not Floe) leaves
    // them out rather than failing the description.
    let sizes = match client.partition_sizes(name).await {
        Ok(s) => s,
        Err(e) => {
            eprintln!("floe: partition sizes unknown: {e}");
            Default::default()
        }
    };
    println!(
        "topic {name}\tid {}\tpartitions {}",
        topic.id,
        topic.partitions.len()
    );
    let ids = |v: &[i32]| v.iter().map(i32::to_string).collect::<Vec<_>>().join(",");
    for p in &topic.partitions {
        let mut line = format!(
            "  partition {}\tleader {}\treplicas [{}]\tisr [{}]",
            p.partition,
            p.leader,
            ids(&p.replicas),
            ids(&p.isr)
        );
        if let (Some(f), Some(e)) = (first.get(&p.partition), end.get(&p.partition)) {
            line.push_str(&format!(
                "\tearliest {f}\tlatest {e}\trecords {}",
                (e - f).max(0)
            ));
        }
        if let Some(b) = sizes.get(&p.partition) {
            line.push_str(&format!("\tbytes {b}"));
        }
        if let Some(e) = p.error {
            line.push_str(&format!("\terror {}", kafka_error_name(e)));
        }
        println!("{line}");
    }
    let configs = client.describe_topic_configs(name).await?;
    println!("configs:");
    print_configs(configs);
    Ok(())
}

/// `  name=value[\t(mark)]` per config.
pub fn print_configs(configs: Vec<ConfigEntry>) {
    for c in configs {
        let value = match (c.value, c.sensitive) {
            (Some(v), _) => v,
            (None, true) => "(sensitive)".to_owned(),
            (None, false) => "(null)".to_owned(),
        };
        match source_mark(c.source) {
            Some(mark) => println!("  {}={value}\t({mark})", c.name),
            None => println!("  {}={value}", c.name),
        }
    }
}

/// How a config's source is marked: `None` for a value set on the topic
/// (or the group).
fn source_mark(source: ConfigSource) -> Option<&'static str> {
    match source {
        ConfigSource::Topic | ConfigSource::Group => None,
        ConfigSource::DynamicBroker => Some("default: dynamic broker config"),
        ConfigSource::DynamicDefaultBroker => Some("default: dynamic default broker config"),
        ConfigSource::StaticBroker => Some("default: static broker config"),
        ConfigSource::Default => Some("default"),
        ConfigSource::Unknown(_) => Some("default: unknown source"),
    }
}

async fn alter(
    client: &mut KafkaClient,
    name: &str,
    set: &[(String, String)],
    delete: &[String],
) -> anyhow::Result<()> {
    client.alter_topic_configs(name, set, delete).await?;
    println!("altered topic {name}: {}", altered(set, delete));
    Ok(())
}

/// What an alter did: `set K=V, …, deleted K, …`.
pub fn altered(set: &[(String, String)], delete: &[String]) -> String {
    let mut done: Vec<String> = set.iter().map(|(k, v)| format!("set {k}={v}")).collect();
    done.extend(delete.iter().map(|k| format!("deleted {k}")));
    done.join(", ")
}

async fn delete(client: &mut KafkaClient, name: &str) -> anyhow::Result<()> {
    client.delete_topic(name).await?;
    println!("deleted topic {name}");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_value_splits_at_the_first_equals_sign() {
        assert_eq!(
            parse_key_value("retention.ms=1000"),
            Ok(("retention.ms".into(), "1000".into()))
        );
        assert_eq!(parse_key_value("a=b=c"), Ok(("a".into(), "b=c".into())));
        assert_eq!(parse_key_value("a="), Ok(("a".into(), String::new())));
        assert!(parse_key_value("novalue").is_err());
        assert!(parse_key_value("=v").is_err());
    }

    #[test]
    fn only_topic_level_configs_are_unmarked() {
        assert_eq!(source_mark(ConfigSource::Topic), None);
        assert_eq!(source_mark(ConfigSource::Group), None);
        assert_eq!(source_mark(ConfigSource::Default), Some("default"));
        for other in [
            ConfigSource::DynamicBroker,
            ConfigSource::DynamicDefaultBroker,
            ConfigSource::StaticBroker,
            ConfigSource::Unknown(9),
        ] {
            assert!(source_mark(other).is_some_and(|m| m.starts_with("default")));
        }
    }
}
