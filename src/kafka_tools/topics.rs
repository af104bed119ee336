//! `kafka-topics.sh`: create, list, describe, alter (partitions) and delete
//! topics, printed as Kafka's TopicCommand prints them.

use anyhow::{Context as _, bail};
use floe_client::{ClientError, ConfigSource, KafkaClient, ResponseError, TopicMetadata};

use super::pattern::Pattern;
use super::{Arity, Parsed, Spec, is_internal};

const V: Arity = Arity::Value;
const S: Arity = Arity::Switch;

pub const SPEC: Spec = Spec {
    flags: &[
        ("bootstrap-server", V),
        ("command-config", V),
        ("create", S),
        ("alter", S),
        ("describe", S),
        ("list", S),
        ("delete", S),
        ("topic", V),
        ("partitions", V),
        ("replication-factor", V),
        ("config", V),
        ("if-not-exists", S),
        ("if-exists", S),
        ("exclude-internal", S),
        ("under-replicated-partitions", S),
        ("unavailable-partitions", S),
        ("help", S),
    ],
    unsupported: &[
        (
            "topic-id",
            "describe by --topic (the id is in the --describe output)",
        ),
        (
            "replica-assignment",
            "Floe places partitions itself; every partition has one owner at a time",
        ),
        (
            "under-min-isr-partitions",
            "Floe has no ISR: a partition is durable once its object-store write returns",
        ),
        (
            "at-min-isr-partitions",
            "Floe has no ISR: a partition is durable once its object-store write returns",
        ),
        (
            "topics-with-overrides",
            "describe the topics and read their Configs",
        ),
        (
            "delete-config",
            "removed from kafka-topics.sh in Kafka 4.0: use kafka-configs.sh --alter --delete-config",
        ),
        (
            "partition-size-limit-per-response",
            "every partition is described in one answer",
        ),
    ],
};

const ACTIONS: &[&str] = &["list", "describe", "create", "alter", "delete"];

/// What a `kafka-topics.sh` command does, checked before connecting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TopicsAction {
    Create {
        topic: String,
        partitions: i32,
        configs: Vec<(String, String)>,
        if_not_exists: bool,
    },
    List {
        topic: Option<String>,
        exclude_internal: bool,
    },
    Describe {
        topic: Option<String>,
        exclude_internal: bool,
        if_exists: bool,
        /// Only partitions without a leader (--unavailable-partitions), or
        /// none (--under-replicated-partitions: Floe has no replicas to
        /// lag).
        only: Option<PartitionReport>,
    },
    Alter {
        topic: String,
        partitions: Option<i32>,
        configs: Vec<(String, String)>,
        if_exists: bool,
    },
    Delete {
        topic: String,
        if_exists: bool,
    },
}

/// A partition report of `--describe`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PartitionReport {
    UnderReplicated,
    Unavailable,
}

/// The action of the flags `p`, with Kafka's checks of which flag goes
/// with which.
pub fn action(p: &Parsed) -> anyhow::Result<TopicsAction> {
    let action = p.action(ACTIONS)?;
    if !p.has("bootstrap-server") {
        bail!("--bootstrap-server must be specified");
    }
    let topic = p.value("topic").map(str::to_owned);
    let need_topic = || {
        topic
            .clone()
            .with_context(|| format!("Missing required argument \"[topic]\" (for --{action})"))
    };
    if action != "create" {
        p.refuse(&["replication-factor", "if-not-exists"], action)?;
    }
    if !matches!(action, "create" | "alter") {
        p.refuse(&["partitions", "config"], action)?;
    }
    if !matches!(action, "alter" | "delete" | "describe") {
        p.refuse(&["if-exists"], action)?;
    }
    if !matches!(action, "list" | "describe") {
        p.refuse(&["exclude-internal"], action)?;
    }
    if action != "describe" {
        p.refuse(
            &["under-replicated-partitions", "unavailable-partitions"],
            action,
        )?;
    }
    let configs = p
        .values("config")
        .iter()
        .map(|c| super::key_value("config", c))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let partitions = p.number::<i32>("partitions")?;
    if partitions.is_some_and(|n| n < 1) {
        bail!("The partitions must be greater than 0");
    }
    Ok(match action {
        "create" => {
            let rf = p.number::<i32>("replication-factor")?;
            if rf.is_some_and(|rf| !(1..=i32::from(i16::MAX)).contains(&rf)) {
                bail!(
                    "The replication factor must be between 1 and {} inclusive",
                    i16::MAX
                );
            }
            TopicsAction::Create {
                topic: need_topic()?,
                partitions: partitions.unwrap_or(1),
                configs,
                if_not_exists: p.has("if-not-exists"),
            }
        }
        "list" => TopicsAction::List {
            topic,
            exclude_internal: p.has("exclude-internal"),
        },
        "describe" => TopicsAction::Describe {
            topic,
            exclude_internal: p.has("exclude-internal"),
            if_exists: p.has("if-exists"),
            only: if p.has("unavailable-partitions") {
                Some(PartitionReport::Unavailable)
            } else if p.has("under-replicated-partitions") {
                Some(PartitionReport::UnderReplicated)
            } else {
                None
            },
        },
        "alter" => {
            if partitions.is_none() && configs.is_empty() {
                bail!(
                    "Missing required argument \"[partitions]\" (to alter topic configs, use \
                     kafka-configs.sh; Floe also takes --config here)"
                );
            }
            TopicsAction::Alter {
                topic: need_topic()?,
                partitions,
                configs,
                if_exists: p.has("if-exists"),
            }
        }
        _ => TopicsAction::Delete {
            topic: need_topic()?,
            if_exists: p.has("if-exists"),
        },
    })
}

pub async fn run(args: &[String]) -> anyhow::Result<()> {
    let Some(p) = super::parse_or_help("kafka-topics.sh", &SPEC, args)? else {
        return Ok(());
    };
    let action = action(&p)?;
    let props =
        super::client_properties(&p.values("command-config").iter().collect::<Vec<_>>(), &[])?;
    let mut client = super::connection(&p, &[], &props)?.connect().await?;
    match action {
        TopicsAction::Create {
            topic,
            partitions,
            configs,
            if_not_exists,
        } => create(&mut client, &topic, partitions, &configs, if_not_exists).await,
        TopicsAction::List {
            topic,
            exclude_internal,
        } => {
            for name in matching(&mut client, topic.as_deref(), exclude_internal).await? {
                println!("{name}");
            }
            Ok(())
        }
        TopicsAction::Describe {
            topic,
            exclude_internal,
            if_exists,
            only,
        } => {
            let names = matching(&mut client, topic.as_deref(), exclude_internal).await?;
            ensure_found(&names, topic.as_deref(), if_exists)?;
            for name in &names {
                describe(&mut client, name, only).await?;
            }
            Ok(())
        }
        TopicsAction::Alter {
            topic,
            partitions,
            configs,
            if_exists,
        } => {
            let names = matching(&mut client, Some(&topic), false).await?;
            ensure_found(&names, Some(&topic), if_exists)?;
            for name in &names {
                if let Some(n) = partitions {
                    client.create_partitions(name, n).await?;
                    let timeout = client.timeout();
                    if let Err(e) = client.wait_for_leaders(name, n, timeout).await {
                        eprintln!("floe: warning: {e:#}");
                    }
                }
                if !configs.is_empty() {
                    client.alter_topic_configs(name, &configs, &[]).await?;
                }
            }
            Ok(())
        }
        TopicsAction::Delete { topic, if_exists } => {
            let names = matching(&mut client, Some(&topic), false).await?;
            ensure_found(&names, Some(&topic), if_exists)?;
            for name in &names {
                match client.delete_topic(name).await {
                    // Deleted meanwhile: what was asked is done.
                    Err(e) if if_exists && unknown_topic(&e) => {}
                    other => other?,
                }
            }
            Ok(())
        }
    }
}

fn unknown_topic(e: &ClientError) -> bool {
    e.broker_error() == Some(ResponseError::UnknownTopicOrPartition)
}

async fn create(
    client: &mut KafkaClient,
    name: &str,
    partitions: i32,
    configs: &[(String, String)],
    if_not_exists: bool,
) -> anyhow::Result<()> {
    if name.contains('.') && name.contains('_') {
        println!(
            "WARNING: Due to limitations in metric names, topics with a period ('.') or \
             underscore ('_') could collide. To avoid issues it is best to use either, but not both."
        );
    }
    match client.create_topic(name, partitions, configs).await {
        Ok(()) => {}
        Err(e) if e.broker_error() == Some(ResponseError::TopicAlreadyExists) => {
            if if_not_exists {
                return Ok(());
            }
            bail!("Topic '{name}' already exists.");
        }
        Err(e) => return Err(e.into()),
    }
    println!("Created topic {name}.");
    // The topic is usable once every partition has a leader: wait, so that
    // the next command of a script finds it.
    let timeout = client.timeout();
    if let Err(e) = client.wait_for_leaders(name, partitions, timeout).await {
        eprintln!("floe: warning: {e:#}");
    }
    Ok(())
}

/// The topics, sorted, that `pattern` matches (every one without it).
async fn matching(
    client: &mut KafkaClient,
    pattern: Option<&str>,
    exclude_internal: bool,
) -> anyhow::Result<Vec<String>> {
    let pattern = pattern
        .map(Pattern::new)
        .transpose()
        .map_err(anyhow::Error::msg)?;
    let mut names: Vec<String> = client
        .list_topics()
        .await?
        .into_iter()
        .map(|t| t.name)
        .filter(|n| !(exclude_internal && is_internal(n)))
        .filter(|n| pattern.as_ref().is_none_or(|p| p.matches(n)))
        .collect();
    names.sort();
    Ok(names)
}

fn ensure_found(found: &[String], asked: Option<&str>, if_exists: bool) -> anyhow::Result<()> {
    match asked {
        Some(t) if !t.is_empty() && found.is_empty() && !if_exists => {
            bail!("Topic '{t}' does not exist as expected")
        }
        _ => Ok(()),
    }
}

/// A topic id as Kafka prints it: base64 (URL alphabet) without padding.
pub fn kafka_uuid(id: &uuid::Uuid) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(id.as_bytes())
}

/// The topic's line: name, id, partition count, replication factor and the
/// configs not at their defaults.
pub fn topic_line(t: &TopicMetadata, configs: &[floe_client::ConfigEntry]) -> String {
    let mut line = format!("Topic: {}", t.name);
    if !t.id.is_nil() {
        line.push_str(&format!("\tTopicId: {}", kafka_uuid(&t.id)));
    }
    let rf = t.partitions.first().map_or(0, |p| p.replicas.len());
    let set: Vec<String> = configs
        .iter()
        .filter(|c| c.source != ConfigSource::Default)
        .map(|c| format!("{}={}", c.name, c.value.as_deref().unwrap_or("null")))
        .collect();
    line.push_str(&format!(
        "\tPartitionCount: {}\tReplicationFactor: {rf}\tConfigs: {}",
        t.partitions.len(),
        set.join(",")
    ));
    line
}

/// A partition's line.
pub fn partition_line(topic: &str, p: &floe_client::PartitionMetadata) -> String {
    let ids = |v: &[i32]| v.iter().map(i32::to_string).collect::<Vec<_>>().join(",");
    let leader = if p.leader >= 0 {
        p.leader.to_string()
    } else {
        "none".to_owned()
    };
    format!(
        "\tTopic: {topic}\tPartition: {}\tLeader: {leader}\tReplicas: {}\tIsr: {}\tElr: N/A\tLastKnownElr: N/A",
        p.partition,
        ids(&p.replicas),
        ids(&p.isr)
    )
}

async fn describe(
    client: &mut KafkaClient,
    name: &str,
    only: Option<PartitionReport>,
) -> anyhow::Result<()> {
    let topic = client.topic(name).await?;
    match only {
        None => {
            let configs = client.describe_topic_configs(name).await?;
            println!("{}", topic_line(&topic, &configs));
            for p in &topic.partitions {
                println!("{}", partition_line(name, p));
            }
        }
        // One copy per partition: never under-replicated.
        Some(PartitionReport::UnderReplicated) => {}
        Some(PartitionReport::Unavailable) => {
            for p in topic.partitions.iter().filter(|p| p.leader < 0) {
                println!("{}", partition_line(name, p));
            }
        }
    }
    Ok(())
}
