//! `floe topic …`: create, list, describe, alter and delete topics over the
//! Kafka protocol, like a small `kafka-topics.sh` / `kafka-configs.sh`.

#![allow(clippy::print_stdout)]

use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Subcommand;
use kafka_protocol::ResponseError;
use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreatableTopicConfig};
use kafka_protocol::messages::delete_topics_request::DeleteTopicState;
use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use kafka_protocol::messages::incremental_alter_configs_request::{
    AlterConfigsResource, AlterableConfig,
};
use kafka_protocol::messages::metadata_response::MetadataResponseTopic;
use kafka_protocol::messages::{
    BrokerId, CreateTopicsRequest, DeleteTopicsRequest, DescribeConfigsRequest,
    IncrementalAlterConfigsRequest,
};
use kafka_protocol::protocol::StrBytes;

use crate::kafka_client::{BootstrapArgs, KafkaClient, check_code, kafka_error_name, topic_name};

/// Kafka's resource type for topics (DescribeConfigs, IncrementalAlterConfigs).
const RESOURCE_TOPIC: i8 = 2;
/// IncrementalAlterConfigs operations.
const OP_SET: i8 = 0;
const OP_DELETE: i8 = 1;

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
    },
    /// List topics with their partition counts (Metadata).
    List {
        #[command(flatten)]
        conn: BootstrapArgs,
    },
    /// Show a topic's partitions and configs (Metadata, DescribeConfigs).
    Describe {
        #[command(flatten)]
        conn: BootstrapArgs,
        /// The topic's name.
        name: String,
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
    },
    /// Delete a topic (DeleteTopics).
    Delete {
        #[command(flatten)]
        conn: BootstrapArgs,
        /// The topic's name.
        name: String,
    },
}

pub async fn run(cmd: TopicCommand) -> anyhow::Result<()> {
    match cmd {
        TopicCommand::Create {
            conn,
            name,
            partitions,
            configs,
        } => create(&mut conn.connect().await?, &name, partitions, &configs).await,
        TopicCommand::List { conn } => list(&mut conn.connect().await?).await,
        TopicCommand::Describe { conn, name } => describe(&mut conn.connect().await?, &name).await,
        TopicCommand::Alter {
            conn,
            name,
            set,
            delete,
        } => {
            if set.is_empty() && delete.is_empty() {
                bail!("nothing to alter: give --config KEY=VALUE or --delete-config KEY");
            }
            alter(&mut conn.connect().await?, &name, &set, &delete).await
        }
        TopicCommand::Delete { conn, name } => delete(&mut conn.connect().await?, &name).await,
    }
}

/// Parses `KEY=VALUE` (the value may contain `=`; the key may not be empty).
pub fn parse_key_value(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.trim().is_empty() => Ok((k.trim().to_owned(), v.to_owned())),
        _ => Err(format!("expected KEY=VALUE, got {s:?}")),
    }
}

fn sb(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_owned())
}

async fn create(
    client: &mut KafkaClient,
    name: &str,
    partitions: i32,
    configs: &[(String, String)],
) -> anyhow::Result<()> {
    let version = client.version::<CreateTopicsRequest>()?;
    let mut topic = CreatableTopic::default();
    topic.name = topic_name(name);
    topic.num_partitions = partitions;
    // From v4 the broker may choose (-1); before, it must be given.
    topic.replication_factor = if version >= 4 { -1 } else { 1 };
    topic.configs = configs
        .iter()
        .map(|(k, v)| {
            CreatableTopicConfig::default()
                .with_name(sb(k))
                .with_value(Some(sb(v)))
        })
        .collect();
    let mut req = CreateTopicsRequest::default();
    req.topics = vec![topic];
    req.timeout_ms = client.timeout_ms();
    let resp = client.send(version, req).await?;
    let result = resp
        .topics
        .iter()
        .find(|t| t.name.0.as_str() == name)
        .with_context(|| format!("the CreateTopics answer does not mention topic {name}"))?;
    check_code(result.error_code, result.error_message.as_ref(), || {
        format!("cannot create topic {name}")
    })?;
    println!("created topic {name} with {partitions} partition(s)");
    // The topic is usable once every partition has a leader.
    if let Err(e) = wait_for_leaders(client, name, partitions).await {
        eprintln!("floe: warning: {e:#}");
    }
    Ok(())
}

async fn wait_for_leaders(
    client: &mut KafkaClient,
    name: &str,
    partitions: i32,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_millis(client.timeout_ms().max(0) as u64);
    loop {
        let last = match client.topic(name).await {
            Ok(t) if has_all_leaders(&t, partitions) => return Ok(()),
            Ok(t) => format!("{} partition(s) listed", t.partitions.len()),
            Err(e) if e.is_retriable() => e.to_string(),
            Err(e) => return Err(e.into()),
        };
        if Instant::now() >= deadline {
            bail!("topic {name} has no leader for every partition yet ({last})");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn has_all_leaders(t: &MetadataResponseTopic, partitions: i32) -> bool {
    t.partitions.len() == usize::try_from(partitions).unwrap_or(0)
        && t.partitions.iter().all(|p| p.leader_id.0 >= 0)
}

async fn list(client: &mut KafkaClient) -> anyhow::Result<()> {
    let resp = client.metadata(None).await?;
    let mut topics: Vec<(String, usize)> = resp
        .topics
        .iter()
        .filter_map(|t| Some((t.name.as_ref()?.0.to_string(), t.partitions.len())))
        .collect();
    topics.sort();
    for (name, partitions) in topics {
        println!("{name}\t{partitions}");
    }
    Ok(())
}

async fn describe(client: &mut KafkaClient, name: &str) -> anyhow::Result<()> {
    let topic = client.topic(name).await?;
    let mut partitions: Vec<_> = topic.partitions.iter().collect();
    partitions.sort_by_key(|p| p.partition_index);
    println!(
        "topic {name}\tid {}\tpartitions {}",
        topic.topic_id,
        partitions.len()
    );
    for p in partitions {
        let ids = |v: &[BrokerId]| {
            v.iter()
                .map(|b| b.0.to_string())
                .collect::<Vec<_>>()
                .join(",")
        };
        let mut line = format!(
            "  partition {}\tleader {}\treplicas [{}]\tisr [{}]",
            p.partition_index,
            p.leader_id.0,
            ids(&p.replica_nodes),
            ids(&p.isr_nodes)
        );
        if let Some(e) = ResponseError::try_from_code(p.error_code) {
            line.push_str(&format!("\terror {}", kafka_error_name(e)));
        }
        println!("{line}");
    }

    let version = client.version::<DescribeConfigsRequest>()?;
    let mut resource = DescribeConfigsResource::default();
    resource.resource_type = RESOURCE_TOPIC;
    resource.resource_name = sb(name);
    resource.configuration_keys = None;
    let mut req = DescribeConfigsRequest::default();
    req.resources = vec![resource];
    let resp = client.send(version, req).await?;
    let result = resp
        .results
        .iter()
        .find(|r| r.resource_name.as_str() == name)
        .with_context(|| format!("the DescribeConfigs answer does not mention topic {name}"))?;
    check_code(result.error_code, result.error_message.as_ref(), || {
        format!("cannot describe the configs of topic {name}")
    })?;
    let mut configs: Vec<_> = result.configs.iter().collect();
    configs.sort_by(|a, b| a.name.as_str().cmp(b.name.as_str()));
    println!("configs:");
    for c in configs {
        let value = match (&c.value, c.is_sensitive) {
            (Some(v), _) => v.to_string(),
            (None, true) => "(sensitive)".to_owned(),
            (None, false) => "(null)".to_owned(),
        };
        match source_mark(c.config_source) {
            Some(mark) => println!("  {}={value}\t({mark})", c.name),
            None => println!("  {}={value}", c.name),
        }
    }
    Ok(())
}

/// How a config's source is marked: `None` for a value set on the topic.
fn source_mark(source: i8) -> Option<&'static str> {
    match source {
        1 => None,
        2 => Some("default: dynamic broker config"),
        3 => Some("default: dynamic default broker config"),
        4 => Some("default: static broker config"),
        5 => Some("default"),
        _ => Some("default: unknown source"),
    }
}

async fn alter(
    client: &mut KafkaClient,
    name: &str,
    set: &[(String, String)],
    delete: &[String],
) -> anyhow::Result<()> {
    let version = client.version::<IncrementalAlterConfigsRequest>()?;
    let mut configs: Vec<AlterableConfig> = set
        .iter()
        .map(|(k, v)| {
            AlterableConfig::default()
                .with_name(sb(k))
                .with_config_operation(OP_SET)
                .with_value(Some(sb(v)))
        })
        .collect();
    configs.extend(delete.iter().map(|k| {
        AlterableConfig::default()
            .with_name(sb(k))
            .with_config_operation(OP_DELETE)
            .with_value(None)
    }));
    let mut resource = AlterConfigsResource::default();
    resource.resource_type = RESOURCE_TOPIC;
    resource.resource_name = sb(name);
    resource.configs = configs;
    let mut req = IncrementalAlterConfigsRequest::default();
    req.resources = vec![resource];
    let resp = client.send(version, req).await?;
    let result = resp
        .responses
        .iter()
        .find(|r| r.resource_name.as_str() == name)
        .with_context(|| {
            format!("the IncrementalAlterConfigs answer does not mention topic {name}")
        })?;
    check_code(result.error_code, result.error_message.as_ref(), || {
        format!("cannot alter the configs of topic {name}")
    })?;
    let mut done: Vec<String> = set.iter().map(|(k, v)| format!("set {k}={v}")).collect();
    done.extend(delete.iter().map(|k| format!("deleted {k}")));
    println!("altered topic {name}: {}", done.join(", "));
    Ok(())
}

async fn delete(client: &mut KafkaClient, name: &str) -> anyhow::Result<()> {
    let version = client.version::<DeleteTopicsRequest>()?;
    let mut req = DeleteTopicsRequest::default();
    if version >= 6 {
        req.topics = vec![DeleteTopicState::default().with_name(Some(topic_name(name)))];
    } else {
        req.topic_names = vec![topic_name(name)];
    }
    req.timeout_ms = client.timeout_ms();
    let resp = client.send(version, req).await?;
    let result = resp
        .responses
        .iter()
        .find(|r| r.name.as_ref().is_some_and(|n| n.0.as_str() == name))
        .with_context(|| format!("the DeleteTopics answer does not mention topic {name}"))?;
    check_code(result.error_code, result.error_message.as_ref(), || {
        format!("cannot delete topic {name}")
    })?;
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
        assert_eq!(source_mark(1), None);
        assert_eq!(source_mark(5), Some("default"));
        assert!(source_mark(4).is_some_and(|m| m.starts_with("default")));
    }
}
