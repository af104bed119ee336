//! `kafka-configs.sh`: describe and alter the configs of topics, brokers
//! and groups, printed as Kafka's ConfigCommand prints them.

use anyhow::{Context as _, bail};
use floe_client::{
    ConfigEntry, ConfigSource, KafkaClient, RESOURCE_BROKER, RESOURCE_GROUP, RESOURCE_TOPIC,
};

use super::{Arity, Parsed, Spec};

const V: Arity = Arity::Value;
const S: Arity = Arity::Switch;

pub const SPEC: Spec = Spec {
    flags: &[
        ("bootstrap-server", V),
        ("command-config", V),
        ("entity-type", V),
        ("entity-name", V),
        ("entity-default", S),
        ("topic", V),
        ("broker", V),
        ("broker-defaults", S),
        ("group", V),
        ("describe", S),
        ("all", S),
        ("alter", S),
        ("add-config", V),
        ("add-config-file", V),
        ("delete-config", V),
        ("help", S),
    ],
    unsupported: &[
        ("user", "Floe's SCRAM users are managed with `floe user`"),
        (
            "client",
            "client quotas are not managed by Floe's kafka-configs.sh",
        ),
        (
            "user-defaults",
            "client quotas are not managed by Floe's kafka-configs.sh",
        ),
        (
            "client-defaults",
            "client quotas are not managed by Floe's kafka-configs.sh",
        ),
        ("ip", "connection quotas are not offered by Floe"),
        ("ip-defaults", "connection quotas are not offered by Floe"),
        ("broker-logger", "set RUST_LOG on the Floe process instead"),
        (
            "client-metrics",
            "client metrics subscriptions are not offered by Floe",
        ),
        ("force", "this flag was removed in Kafka 4.0"),
        ("zk-tls-config-file", "Floe has no ZooKeeper"),
    ],
};

/// The entity a command is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entity {
    /// A topic; `None`: every topic (describe only).
    Topic(Option<String>),
    /// A broker id, `Some("")` for the cluster default, `None` for every
    /// broker (describe only).
    Broker(Option<String>),
    Group(Option<String>),
}

impl Entity {
    fn kind(&self) -> (i8, &'static str) {
        match self {
            Entity::Topic(_) => (RESOURCE_TOPIC, "topics"),
            Entity::Broker(_) => (RESOURCE_BROKER, "brokers"),
            Entity::Group(_) => (RESOURCE_GROUP, "groups"),
        }
    }

    fn name(&self) -> Option<&str> {
        match self {
            Entity::Topic(n) | Entity::Broker(n) | Entity::Group(n) => n.as_deref(),
        }
    }

    /// The source of the values set on the entity itself (what describe
    /// shows without --all).
    fn own_source(&self) -> ConfigSource {
        match self {
            Entity::Topic(_) => ConfigSource::Topic,
            Entity::Broker(Some(n)) if n.is_empty() => ConfigSource::DynamicDefaultBroker,
            Entity::Broker(_) => ConfigSource::DynamicBroker,
            Entity::Group(_) => ConfigSource::Group,
        }
    }
}

/// The entity of `--entity-type/--entity-name/--entity-default` or of the
/// shorthands `--topic`, `--broker`, `--broker-defaults`, `--group`.
pub fn entity(p: &Parsed) -> anyhow::Result<Entity> {
    let shorthand = ["topic", "broker", "broker-defaults", "group"]
        .iter()
        .filter(|f| p.has(f))
        .count();
    let long = p.has("entity-type") || p.has("entity-name") || p.has("entity-default");
    if shorthand > 0 && long {
        bail!(
            "--entity-{{type,name,default}} should not be used in conjunction with specific entity flags"
        );
    }
    if shorthand > 1 {
        bail!("give one of --topic, --broker, --broker-defaults, --group");
    }
    if shorthand == 1 {
        return Ok(if let Some(t) = p.value("topic") {
            Entity::Topic(Some(t.to_owned()))
        } else if let Some(b) = p.value("broker") {
            Entity::Broker(Some(b.to_owned()))
        } else if p.has("broker-defaults") {
            Entity::Broker(Some(String::new()))
        } else {
            Entity::Group(p.value("group").map(str::to_owned))
        });
    }
    let types = p.values("entity-type");
    let kind = match types {
        [one] => one.as_str(),
        [] => bail!("At least one entity type must be specified"),
        _ => bail!("Floe's kafka-configs.sh takes one --entity-type"),
    };
    if p.has("entity-name") && p.has("entity-default") {
        bail!("give --entity-name or --entity-default, not both");
    }
    let name = match (p.value("entity-name"), p.has("entity-default")) {
        (Some(n), _) => Some(n.to_owned()),
        (None, true) => Some(String::new()),
        (None, false) => None,
    };
    Ok(match kind {
        "topics" => {
            if name.as_deref() == Some("") {
                bail!("--entity-default does not apply to topics");
            }
            Entity::Topic(name)
        }
        "brokers" => {
            if let Some(n) = name.as_deref().filter(|n| !n.is_empty())
                && n.parse::<i32>().is_err()
            {
                bail!(
                    "The entity name for brokers must be a valid integer broker id, but it is: {n}"
                );
            }
            Entity::Broker(name)
        }
        "groups" => Entity::Group(name),
        "users" | "clients" | "ips" | "client-metrics" | "broker-loggers" => bail!(
            "--entity-type {kind} is not supported by Floe's kafka-configs.sh (topics, brokers, groups)"
        ),
        other => bail!(
            "Invalid entity type {other}, the entity type must be one of topics, brokers, groups"
        ),
    })
}

/// `--add-config`: `k=v,k2=[a,b]` — commas inside `[]` belong to the
/// value, the brackets are dropped, keys and values trimmed.
pub fn parse_add_config(s: &str) -> anyhow::Result<Vec<(String, String)>> {
    let mut pairs = Vec::new();
    let mut depth = 0usize;
    let mut current = String::new();
    let mut pieces = Vec::new();
    for c in s.chars() {
        match c {
            '[' => {
                depth += 1;
                current.push(c);
            }
            ']' => {
                depth = depth.saturating_sub(1);
                current.push(c);
            }
            ',' if depth == 0 => pieces.push(std::mem::take(&mut current)),
            c => current.push(c),
        }
    }
    pieces.push(current);
    for piece in pieces {
        let Some((k, v)) = piece.split_once('=') else {
            bail!(
                "Invalid entity config: all configs to be added must be in the format \"key=val\"."
            );
        };
        let key = k.trim();
        if key.is_empty()
            || !key
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c))
        {
            bail!("Invalid character found for config key: {key}");
        }
        let value: String = v.chars().filter(|c| *c != '[' && *c != ']').collect();
        pairs.push((key.to_owned(), value.trim().to_owned()));
    }
    Ok(pairs)
}

/// Kafka's name of a config source.
pub fn source_name(s: ConfigSource) -> &'static str {
    match s {
        ConfigSource::Topic => "DYNAMIC_TOPIC_CONFIG",
        ConfigSource::Group => "DYNAMIC_GROUP_CONFIG",
        ConfigSource::DynamicBroker => "DYNAMIC_BROKER_CONFIG",
        ConfigSource::DynamicDefaultBroker => "DYNAMIC_DEFAULT_BROKER_CONFIG",
        ConfigSource::StaticBroker => "STATIC_BROKER_CONFIG",
        ConfigSource::Default => "DEFAULT_CONFIG",
        ConfigSource::Unknown(_) => "UNKNOWN",
    }
}

/// One config as `--describe` prints it.
pub fn config_line(c: &ConfigEntry) -> String {
    let value = c.value.as_deref().unwrap_or("null");
    format!(
        "  {}={value} sensitive={} synonyms={{{}:{}={value}}}",
        c.name,
        c.sensitive,
        source_name(c.source),
        c.name
    )
}

pub async fn run(args: &[String]) -> anyhow::Result<()> {
    let Some(p) = super::parse_or_help("kafka-configs.sh", &SPEC, args)? else {
        return Ok(());
    };
    let action = p.action(&["describe", "alter"])?;
    if !p.has("bootstrap-server") {
        bail!(
            "One of the required --bootstrap-server or --bootstrap-controller arguments must be specified"
        );
    }
    let entity = entity(&p)?;
    if action == "describe" {
        p.refuse(
            &["add-config", "add-config-file", "delete-config"],
            "describe",
        )?;
    } else {
        p.refuse(&["all"], "alter")?;
    }
    let mut add: Vec<(String, String)> = Vec::new();
    for f in p.values("add-config-file") {
        let text = std::fs::read_to_string(f).with_context(|| format!("cannot read {f}"))?;
        add.extend(super::parse_java_properties(&text));
    }
    for s in p.values("add-config") {
        add.extend(parse_add_config(s)?);
    }
    let delete: Vec<String> = p
        .values("delete-config")
        .iter()
        .flat_map(|s| s.split(','))
        .map(|k| k.trim().to_owned())
        .filter(|k| !k.is_empty())
        .collect();
    if action == "alter" {
        if entity.name().is_none() {
            bail!(
                "An entity name must be specified with --alter of {}",
                entity.kind().1
            );
        }
        if add.is_empty() && delete.is_empty() {
            bail!("--alter needs --add-config, --add-config-file or --delete-config");
        }
    }
    let props =
        super::client_properties(&p.values("command-config").iter().collect::<Vec<_>>(), &[])?;
    let mut client = super::connection(&p, &[], &props)?.connect().await?;
    match action {
        "alter" => alter(&mut client, &entity, &add, &delete).await,
        _ => describe(&mut client, &entity, p.has("all")).await,
    }
}

async fn alter(
    client: &mut KafkaClient,
    entity: &Entity,
    add: &[(String, String)],
    delete: &[String],
) -> anyhow::Result<()> {
    let (kind, plural) = entity.kind();
    let name = entity.name().unwrap_or_default();
    if !delete.is_empty() {
        let own = entity.own_source();
        let set: Vec<String> = client
            .describe_configs(kind, name)
            .await?
            .into_iter()
            .filter(|c| c.source == own)
            .map(|c| c.name)
            .collect();
        let missing: Vec<&str> = delete
            .iter()
            .filter(|k| !set.contains(k))
            .map(String::as_str)
            .collect();
        if !missing.is_empty() {
            bail!("Invalid config(s): {}", missing.join(","));
        }
    }
    client.alter_configs(kind, name, add, delete).await?;
    if name.is_empty() {
        println!("Completed updating default config for {plural} in the cluster.");
    } else {
        println!(
            "Completed updating config for {} {name}.",
            plural.trim_end_matches('s')
        );
    }
    Ok(())
}

async fn describe(client: &mut KafkaClient, entity: &Entity, all: bool) -> anyhow::Result<()> {
    let (kind, plural) = entity.kind();
    let names: Vec<String> = match entity {
        Entity::Topic(Some(n)) | Entity::Broker(Some(n)) | Entity::Group(Some(n)) => {
            vec![n.clone()]
        }
        Entity::Topic(None) => client
            .list_topics()
            .await?
            .into_iter()
            .map(|t| t.name)
            .collect(),
        Entity::Broker(None) => {
            let meta = client.metadata(Some(&[])).await?;
            let mut ids: Vec<String> = meta
                .brokers
                .iter()
                .map(|b| b.node_id.0.to_string())
                .collect();
            ids.sort();
            ids.dedup();
            ids.push(String::new());
            ids
        }
        Entity::Group(None) => client
            .list_groups()
            .await?
            .into_iter()
            .map(|g| g.group_id)
            .collect(),
    };
    for name in names {
        let own = match entity {
            Entity::Broker(_) if name.is_empty() => ConfigSource::DynamicDefaultBroker,
            other => other.own_source(),
        };
        if name.is_empty() {
            println!("Default configs for {plural} in the cluster are:");
        } else {
            println!(
                "{} configs for {} {name} are:",
                if all { "All" } else { "Dynamic" },
                plural.trim_end_matches('s')
            );
        }
        for c in client.describe_configs(kind, &name).await? {
            if all || c.source == own {
                println!("{}", config_line(&c));
            }
        }
    }
    Ok(())
}
