//! DescribeConfigs, AlterConfigs and IncrementalAlterConfigs.
//!
//! Topic configs live in the metadata service (`TopicInfo.configs`: every
//! known key with its value and whether it is the default). Broker configs
//! are the proxy's own static settings (a few are described, read-only)
//! and Kafka's dynamic broker configs, kept in the metadata service per
//! broker id or for every broker (`floe_metadata::broker_config`), which
//! Floe stores and describes but does not apply.
//! Group configs (resource type 32, Kafka 4) live in the metadata service
//! too (`floe_metadata::group_config`), per group id, whether or not the
//! group exists.

use std::collections::BTreeMap;

use floe_metadata::api::MetaApi;
use floe_metadata::broker_config::{self, BrokerConfigType, BrokerConfigs};
use floe_metadata::error::MetaError;
use floe_metadata::group_config::{GroupConfigType, GroupConfigs};
use floe_metadata::topic_config::TopicConfig;
use futures::future::join_all;
use kafka_protocol::ResponseError;
use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use kafka_protocol::messages::describe_configs_response::{
    DescribeConfigsResourceResult, DescribeConfigsResult, DescribeConfigsSynonym,
};
use kafka_protocol::messages::{
    AlterConfigsRequest, AlterConfigsResponse, DescribeConfigsRequest, DescribeConfigsResponse,
    IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse, alter_configs_request,
    alter_configs_response, incremental_alter_configs_request, incremental_alter_configs_response,
};
use kafka_protocol::protocol::StrBytes;

use super::{AdminConfig, Refusal, check_topic_name, repeated, str_bytes};
use crate::nodes::KafkaNodes;

/// Kafka's config resource types.
const RESOURCE_TOPIC: i8 = 2;
const RESOURCE_BROKER: i8 = 4;
const RESOURCE_GROUP: i8 = 32;

/// Kafka's config sources.
const SOURCE_DYNAMIC_TOPIC: i8 = 1;
const SOURCE_DYNAMIC_BROKER: i8 = 2;
const SOURCE_DYNAMIC_DEFAULT_BROKER: i8 = 3;
const SOURCE_STATIC_BROKER: i8 = 4;
const SOURCE_DEFAULT: i8 = 5;
const SOURCE_GROUP: i8 = 8;

/// Kafka's config types (DescribeConfigs v3+).
const TYPE_UNKNOWN: i8 = 0;
const TYPE_BOOLEAN: i8 = 1;
const TYPE_STRING: i8 = 2;
const TYPE_INT: i8 = 3;
const TYPE_SHORT: i8 = 4;
const TYPE_LONG: i8 = 5;
const TYPE_DOUBLE: i8 = 6;
const TYPE_LIST: i8 = 7;
const TYPE_PASSWORD: i8 = 9;

/// IncrementalAlterConfigs operations.
const OP_SET: i8 = 0;
const OP_DELETE: i8 = 1;
const OP_APPEND: i8 = 2;
const OP_SUBTRACT: i8 = 3;

/// The Kafka type of each topic config `floe_metadata::topic_config` knows
/// (that module validates values but does not name types).
const TOPIC_CONFIG_TYPES: &[(&str, i8)] = &[
    ("retention.ms", TYPE_LONG),
    ("retention.bytes", TYPE_LONG),
    ("max.message.bytes", TYPE_INT),
    ("cleanup.policy", TYPE_LIST),
    ("compression.type", TYPE_STRING),
    ("message.timestamp.type", TYPE_STRING),
    ("segment.bytes", TYPE_INT),
    ("segment.ms", TYPE_LONG),
    ("min.compaction.lag.ms", TYPE_LONG),
    ("max.compaction.lag.ms", TYPE_LONG),
    ("min.cleanable.dirty.ratio", TYPE_DOUBLE),
    ("delete.retention.ms", TYPE_LONG),
    ("export.enabled", TYPE_BOOLEAN),
    ("export.index", TYPE_STRING),
    ("export.roll.ms", TYPE_LONG),
    ("export.file.bytes", TYPE_LONG),
    ("export.row.group.rows", TYPE_INT),
    ("export.compression", TYPE_STRING),
    ("export.retention.ms", TYPE_LONG),
    ("table.format", TYPE_STRING),
    ("table.partition", TYPE_STRING),
    ("table.mode", TYPE_STRING),
    ("table.target.file.bytes", TYPE_LONG),
    ("table.snapshot.max.age.ms", TYPE_LONG),
    ("floe.delayed.delivery", TYPE_BOOLEAN),
    ("flush.messages", TYPE_LONG),
    ("flush.ms", TYPE_LONG),
    ("index.interval.bytes", TYPE_INT),
    ("segment.index.bytes", TYPE_INT),
    ("segment.jitter.ms", TYPE_LONG),
    ("file.delete.delay.ms", TYPE_LONG),
    ("preallocate", TYPE_BOOLEAN),
    ("min.insync.replicas", TYPE_INT),
    ("unclean.leader.election.enable", TYPE_BOOLEAN),
    ("leader.replication.throttled.replicas", TYPE_LIST),
    ("follower.replication.throttled.replicas", TYPE_LIST),
];

fn topic_config_type(name: &str) -> i8 {
    TOPIC_CONFIG_TYPES
        .iter()
        .find(|(n, _)| *n == name)
        .map_or(TYPE_UNKNOWN, |(_, t)| *t)
}

/// The Kafka config source of a topic config.
pub(super) fn config_source(is_default: bool) -> i8 {
    if is_default {
        SOURCE_DEFAULT
    } else {
        SOURCE_DYNAMIC_TOPIC
    }
}

/// One described config, before it is shaped for a request version.
struct Setting {
    name: String,
    value: String,
    source: i8,
    read_only: bool,
    config_type: i8,
    doc: Option<&'static str>,
    /// The default, listed as a synonym below a set value.
    default: Option<String>,
    /// A password: described without its value, as Kafka does.
    sensitive: bool,
}

impl Setting {
    fn to_kafka(&self, version: i16, synonyms: bool, docs: bool) -> DescribeConfigsResourceResult {
        let value = (!self.sensitive).then(|| str_bytes(self.value.clone()));
        let mut r = DescribeConfigsResourceResult::default()
            .with_name(str_bytes(self.name.clone()))
            .with_value(value.clone())
            .with_read_only(self.read_only)
            .with_config_source(self.source)
            .with_is_sensitive(self.sensitive);
        if synonyms {
            // Highest precedence first, as Kafka lists them.
            let mut list = vec![
                DescribeConfigsSynonym::default()
                    .with_name(str_bytes(self.name.clone()))
                    .with_value(value)
                    .with_source(self.source),
            ];
            if let Some(default) = &self.default
                && self.source != SOURCE_DEFAULT
            {
                list.push(synonym(&self.name, default, SOURCE_DEFAULT));
            }
            r = r.with_synonyms(list);
        }
        if version >= 3 {
            let doc = self.doc.filter(|_| docs).map(str_bytes);
            r = r.with_config_type(self.config_type).with_documentation(doc);
        }
        r
    }
}

fn synonym(name: &str, value: &str, source: i8) -> DescribeConfigsSynonym {
    DescribeConfigsSynonym::default()
        .with_name(str_bytes(name))
        .with_value(Some(str_bytes(value)))
        .with_source(source)
}

pub(super) async fn describe_configs(
    meta: &dyn MetaApi,
    cfg: &AdminConfig,
    nodes: &KafkaNodes,
    version: i16,
    req: &DescribeConfigsRequest,
) -> DescribeConfigsResponse {
    let synonyms = req.include_synonyms;
    let docs = version >= 3 && req.include_documentation;
    let results = join_all(req.resources.iter().map(|r| async move {
        let result = DescribeConfigsResult::default()
            .with_resource_type(r.resource_type)
            .with_resource_name(r.resource_name.clone());
        let settings = match r.resource_type {
            RESOURCE_TOPIC => topic_settings(meta, r.resource_name.as_str()).await,
            RESOURCE_BROKER => broker_settings(meta, cfg, nodes, r.resource_name.as_str()).await,
            RESOURCE_GROUP => group_settings(meta, r.resource_name.as_str()).await,
            other => Err(unsupported_resource(other)),
        };
        match settings {
            Ok(settings) => result.with_error_message(None).with_configs(
                settings
                    .iter()
                    .filter(|s| asked_for(r, &s.name))
                    .map(|s| s.to_kafka(version, synonyms, docs))
                    .collect(),
            ),
            Err(refusal) => result
                .with_error_code(refusal.code())
                .with_error_message(refusal.message()),
        }
    }))
    .await;
    DescribeConfigsResponse::default()
        .with_throttle_time_ms(0)
        .with_results(results)
}

/// Whether the request asked for `name` (no keys, or an empty list: all).
fn asked_for(r: &DescribeConfigsResource, name: &str) -> bool {
    match &r.configuration_keys {
        None => true,
        Some(keys) => keys.is_empty() || keys.iter().any(|k| k.as_str() == name),
    }
}

fn unsupported_resource(resource_type: i8) -> Refusal {
    Refusal::new(
        ResponseError::InvalidRequest,
        format!(
            "config resource type {resource_type} is not supported \
             (topics: 2, brokers: 4, groups: 32)"
        ),
    )
}

async fn topic_settings(meta: &dyn MetaApi, name: &str) -> Result<Vec<Setting>, Refusal> {
    check_topic_name(name)?;
    let info = meta
        .describe_topic(name)
        .await
        .map_err(|e| Refusal::from_meta(&e, name))?;
    let known = TopicConfig::default().describe();
    Ok(info
        .configs
        .into_iter()
        .map(|c| {
            let key = known.iter().find(|k| k.name == c.name);
            Setting {
                source: config_source(c.is_default),
                read_only: false,
                config_type: topic_config_type(&c.name),
                doc: key.map(|k| k.doc),
                default: key.map(|k| k.value.clone()),
                sensitive: false,
                name: c.name,
                value: c.value,
            }
        })
        .collect())
}

/// A group id as a config resource names it: not empty.
fn check_group(name: &str) -> Result<(), Refusal> {
    floe_metadata::group_config::check_group_id(name).map_err(|e| Refusal::from_meta(&e, name))
}

/// The configs set on a group (none for a group never altered).
async fn group_configs(meta: &dyn MetaApi, name: &str) -> Result<GroupConfigs, Refusal> {
    check_group(name)?;
    meta.group_configs(name)
        .await
        .map_err(|e| Refusal::from_meta(&e, name))
}

/// Every group config, set (source GROUP_CONFIG) or at its default.
async fn group_settings(meta: &dyn MetaApi, name: &str) -> Result<Vec<Setting>, Refusal> {
    let configs = group_configs(meta, name).await?;
    Ok(configs
        .describe()
        .into_iter()
        .map(|c| Setting {
            name: c.name.to_string(),
            value: c.value,
            source: if c.is_default {
                SOURCE_DEFAULT
            } else {
                SOURCE_GROUP
            },
            read_only: false,
            config_type: match c.kind {
                GroupConfigType::Int => TYPE_INT,
                GroupConfigType::String => TYPE_STRING,
            },
            doc: Some(c.doc),
            default: Some(c.default.to_string()),
            sensitive: false,
        })
        .collect())
}

/// Alters a group's configs in the metadata service.
async fn alter_group(
    meta: &dyn MetaApi,
    name: &str,
    set: BTreeMap<String, String>,
    delete: Vec<String>,
) -> Result<(), Refusal> {
    meta.alter_group_configs(name, set.into_iter().collect(), delete)
        .await
        .map_err(|e| Refusal::from_meta(&e, name))?;
    tracing::info!(group = %name, "group configs altered");
    Ok(())
}

/// The dynamic configs of a broker resource as described settings: those
/// set on it (`source`), then those of `defaults` it does not set (the
/// cluster-wide ones, DYNAMIC_DEFAULT_BROKER_CONFIG).
fn dynamic_settings(set: &BrokerConfigs, defaults: &BrokerConfigs, source: i8) -> Vec<Setting> {
    let shown = |(k, v): (&String, &String), source: i8| {
        let kind = broker_config::key_type(k).ok();
        Setting {
            name: k.clone(),
            value: v.clone(),
            source,
            read_only: false,
            config_type: kind.map_or(TYPE_UNKNOWN, broker_config_type),
            doc: Some(broker_config::DOC),
            default: None,
            sensitive: kind == Some(BrokerConfigType::Password),
        }
    };
    let mut out: Vec<Setting> = set.overrides().iter().map(|kv| shown(kv, source)).collect();
    out.extend(
        defaults
            .overrides()
            .iter()
            .filter(|(k, _)| !set.overrides().contains_key(*k))
            .map(|kv| shown(kv, SOURCE_DYNAMIC_DEFAULT_BROKER)),
    );
    out
}

fn broker_config_type(t: BrokerConfigType) -> i8 {
    match t {
        BrokerConfigType::Boolean => TYPE_BOOLEAN,
        BrokerConfigType::String => TYPE_STRING,
        BrokerConfigType::Int => TYPE_INT,
        BrokerConfigType::Short => TYPE_SHORT,
        BrokerConfigType::Long => TYPE_LONG,
        BrokerConfigType::Double => TYPE_DOUBLE,
        BrokerConfigType::List => TYPE_LIST,
        BrokerConfigType::Password => TYPE_PASSWORD,
    }
}

/// The dynamic configs set on broker resource `name` and those set for
/// every broker.
async fn broker_configs(
    meta: &dyn MetaApi,
    name: &str,
) -> Result<(BrokerConfigs, BrokerConfigs), Refusal> {
    meta.broker_configs(name)
        .await
        .map_err(|e| Refusal::from_meta(&e, name))
}

/// The broker settings that hold for the proxy, the only broker clients
/// see: its static settings and the dynamic configs set on it or for every
/// broker. An empty name is the cluster-wide default resource: the dynamic
/// configs set for every broker.
async fn broker_settings(
    meta: &dyn MetaApi,
    cfg: &AdminConfig,
    nodes: &KafkaNodes,
    name: &str,
) -> Result<Vec<Setting>, Refusal> {
    if name.is_empty() {
        let (_, defaults) = broker_configs(meta, name).await?;
        return Ok(dynamic_settings(
            &BrokerConfigs::default(),
            &defaults,
            SOURCE_DYNAMIC_DEFAULT_BROKER,
        ));
    }
    let Some(node_id) = name
        .parse::<i32>()
        .ok()
        .and_then(|id| nodes.get(id))
        .map(|n| n.id)
    else {
        let ids: Vec<String> = nodes.all().iter().map(|n| n.id.to_string()).collect();
        return Err(Refusal::new(
            ResponseError::InvalidRequest,
            format!(
                "unexpected broker id {name:?}: expected one of {} or an empty name",
                ids.join(", ")
            ),
        ));
    };
    let setting = |name: &str, value: String, config_type: i8, doc: &'static str| Setting {
        name: name.to_string(),
        value,
        source: SOURCE_STATIC_BROKER,
        read_only: true,
        config_type,
        doc: Some(doc),
        default: None,
        sensitive: false,
    };
    let (set, defaults) = broker_configs(meta, name).await?;
    let mut settings = dynamic_settings(&set, &defaults, SOURCE_DYNAMIC_BROKER);
    settings.extend([
        setting(
            "broker.id",
            node_id.to_string(),
            TYPE_INT,
            "the id of this broker (a Floe proxy) in Metadata answers",
        ),
        setting(
            "num.partitions",
            cfg.default_partitions.to_string(),
            TYPE_INT,
            "partitions of a topic created without a partition count",
        ),
        setting(
            "default.replication.factor",
            "1".to_string(),
            TYPE_SHORT,
            "the replication factor every topic reports; the object store keeps the data durable",
        ),
        setting(
            "connections.max.reauth.ms",
            cfg.connections_max_reauth_ms.to_string(),
            TYPE_LONG,
            "the longest a SASL session lasts before the client must authenticate again (KIP-368; 0: no limit)",
        ),
        setting(
            "delete.topic.enable",
            "true".to_string(),
            TYPE_BOOLEAN,
            "topics can be deleted",
        ),
    ]);
    Ok(settings)
}

/// Checks that a resource of an alter request is a topic config resource
/// that can be altered.
fn alterable(resource_type: i8, name: &str, duplicate: bool) -> Result<(), Refusal> {
    if duplicate {
        return Err(Refusal::new(
            ResponseError::InvalidRequest,
            format!("resource {name:?} appears more than once in the request"),
        ));
    }
    match resource_type {
        RESOURCE_TOPIC => check_topic_name(name),
        RESOURCE_GROUP => check_group(name),
        RESOURCE_BROKER => {
            broker_config::check_resource(name).map_err(|e| Refusal::from_meta(&e, name))
        }
        other => Err(unsupported_resource(other)),
    }
}

fn refuse_repeated_keys<'a>(keys: impl IntoIterator<Item = &'a str>) -> Result<(), Refusal> {
    let twice = repeated(keys);
    let mut twice: Vec<&str> = twice.into_iter().collect();
    twice.sort_unstable();
    match twice.first() {
        None => Ok(()),
        Some(_) => Err(Refusal::new(
            ResponseError::InvalidRequest,
            format!("configs given more than once: {}", twice.join(", ")),
        )),
    }
}

/// The topic's set (non-default) configs.
fn overrides(info: &floe_metadata::model::TopicInfo) -> BTreeMap<String, String> {
    info.configs
        .iter()
        .filter(|c| !c.is_default)
        .map(|c| (c.name.clone(), c.value.clone()))
        .collect()
}

async fn alter_topic(
    meta: &dyn MetaApi,
    name: &str,
    set: BTreeMap<String, String>,
    delete: Vec<String>,
) -> Result<(), Refusal> {
    let altered: Result<(), MetaError> = meta.alter_topic_config(name, set, delete).await;
    match altered {
        Ok(_) => {
            tracing::info!(topic = %name, "topic configs altered");
            Ok(())
        }
        Err(e) => Err(Refusal::from_meta(&e, name)),
    }
}

pub(super) async fn alter_configs(
    meta: &dyn MetaApi,
    req: &AlterConfigsRequest,
) -> AlterConfigsResponse {
    let twice = repeated(
        req.resources
            .iter()
            .map(|r| (r.resource_type, r.resource_name.as_str())),
    );
    let results = join_all(req.resources.iter().map(|r| {
        let duplicate = twice.contains(&(r.resource_type, r.resource_name.as_str()));
        async move {
            let result = alter_configs_response::AlterConfigsResourceResponse::default()
                .with_resource_type(r.resource_type)
                .with_resource_name(r.resource_name.clone());
            match replace_configs(meta, req.validate_only, r, duplicate).await {
                Ok(()) => result.with_error_message(None),
                Err(refusal) => result
                    .with_error_code(refusal.code())
                    .with_error_message(refusal.message()),
            }
        }
    }))
    .await;
    AlterConfigsResponse::default()
        .with_throttle_time_ms(0)
        .with_responses(results)
}

/// AlterConfigs: the given configs become the topic's whole set; keys not
/// given go back to their defaults. A null value is the same as not giving
/// the key.
async fn replace_configs(
    meta: &dyn MetaApi,
    validate_only: bool,
    r: &alter_configs_request::AlterConfigsResource,
    duplicate: bool,
) -> Result<(), Refusal> {
    let name = r.resource_name.as_str();
    alterable(r.resource_type, name, duplicate)?;
    refuse_repeated_keys(r.configs.iter().map(|c| c.name.as_str()))?;
    let wanted: BTreeMap<String, String> = r
        .configs
        .iter()
        .filter_map(|c| Some((c.name.to_string(), c.value.as_ref()?.to_string())))
        .collect();
    if r.resource_type == RESOURCE_BROKER {
        let (current, _) = broker_configs(meta, name).await?;
        let delete: Vec<String> = current
            .overrides()
            .keys()
            .filter(|k| !wanted.contains_key(*k))
            .cloned()
            .collect();
        BrokerConfigs::default()
            .alter(&wanted, &[])
            .map_err(|e| Refusal::from_meta(&e, name))?;
        if validate_only {
            return Ok(());
        }
        return alter_broker(meta, name, wanted, delete).await;
    }
    if r.resource_type == RESOURCE_GROUP {
        let current = group_configs(meta, name).await?;
        let delete: Vec<String> = current
            .overrides()
            .keys()
            .filter(|k| !wanted.contains_key(*k))
            .cloned()
            .collect();
        GroupConfigs::default()
            .alter(&wanted, &[])
            .map_err(|e| Refusal::from_meta(&e, name))?;
        if validate_only {
            return Ok(());
        }
        return alter_group(meta, name, wanted, delete).await;
    }
    let info = meta
        .describe_topic(name)
        .await
        .map_err(|e| Refusal::from_meta(&e, name))?;
    TopicConfig::from_settings(&wanted).map_err(|e| Refusal::from_meta(&e, name))?;
    let delete: Vec<String> = overrides(&info)
        .into_keys()
        .filter(|k| !wanted.contains_key(k))
        .collect();
    if validate_only {
        return Ok(());
    }
    alter_topic(meta, name, wanted, delete).await
}

pub(super) async fn incremental_alter_configs(
    meta: &dyn MetaApi,
    req: &IncrementalAlterConfigsRequest,
) -> IncrementalAlterConfigsResponse {
    let twice = repeated(
        req.resources
            .iter()
            .map(|r| (r.resource_type, r.resource_name.as_str())),
    );
    let results = join_all(req.resources.iter().map(|r| {
        let duplicate = twice.contains(&(r.resource_type, r.resource_name.as_str()));
        async move {
            let result =
                incremental_alter_configs_response::AlterConfigsResourceResponse::default()
                    .with_resource_type(r.resource_type)
                    .with_resource_name(r.resource_name.clone());
            match change_configs(meta, req.validate_only, r, duplicate).await {
                Ok(()) => result.with_error_message(None),
                Err(refusal) => result
                    .with_error_code(refusal.code())
                    .with_error_message(refusal.message()),
            }
        }
    }))
    .await;
    IncrementalAlterConfigsResponse::default()
        .with_throttle_time_ms(0)
        .with_responses(results)
}

/// IncrementalAlterConfigs: SET and DELETE keys; APPEND to and SUBTRACT
/// from list configs (starting from the value in force, the default
/// included). Keys not named keep their values.
async fn change_configs(
    meta: &dyn MetaApi,
    validate_only: bool,
    r: &incremental_alter_configs_request::AlterConfigsResource,
    duplicate: bool,
) -> Result<(), Refusal> {
    let name = r.resource_name.as_str();
    alterable(r.resource_type, name, duplicate)?;
    refuse_repeated_keys(r.configs.iter().map(|c| c.name.as_str()))?;
    if r.resource_type == RESOURCE_GROUP {
        return change_group_configs(meta, validate_only, r).await;
    }
    if r.resource_type == RESOURCE_BROKER {
        return change_broker_configs(meta, validate_only, r).await;
    }
    let info = meta
        .describe_topic(name)
        .await
        .map_err(|e| Refusal::from_meta(&e, name))?;
    let mut set = BTreeMap::new();
    let mut delete = Vec::new();
    for c in &r.configs {
        let key = c.name.as_str();
        match c.config_operation {
            OP_SET => {
                set.insert(key.to_string(), value_of(c)?.to_string());
            }
            OP_DELETE => delete.push(key.to_string()),
            op @ (OP_APPEND | OP_SUBTRACT) => {
                let current = info
                    .configs
                    .iter()
                    .find(|e| e.name == key)
                    .map(|e| e.value.as_str())
                    .ok_or_else(|| {
                        Refusal::new(
                            ResponseError::InvalidConfig,
                            format!("unknown topic config {key:?}"),
                        )
                    })?;
                if topic_config_type(key) != TYPE_LIST {
                    return Err(not_a_list(key));
                }
                set.insert(key.to_string(), list_op(current, value_of(c)?, op));
            }
            other => {
                return Err(Refusal::new(
                    ResponseError::InvalidRequest,
                    format!("unknown config operation {other} for {key:?}"),
                ));
            }
        }
    }
    // The same checks the metadata service applies, so that validate_only
    // answers what the change would.
    let mut config =
        TopicConfig::from_settings(&overrides(&info)).map_err(|e| Refusal::from_meta(&e, name))?;
    config
        .alter(&set, &delete)
        .map_err(|e| Refusal::from_meta(&e, name))?;
    if validate_only {
        return Ok(());
    }
    alter_topic(meta, name, set, delete).await
}

/// IncrementalAlterConfigs on a group: SET and DELETE (no group config is
/// a list, so APPEND and SUBTRACT are refused, as Kafka refuses them on
/// non-list configs).
async fn change_group_configs(
    meta: &dyn MetaApi,
    validate_only: bool,
    r: &incremental_alter_configs_request::AlterConfigsResource,
) -> Result<(), Refusal> {
    let name = r.resource_name.as_str();
    let mut set = BTreeMap::new();
    let mut delete = Vec::new();
    for c in &r.configs {
        let key = c.name.as_str();
        match c.config_operation {
            OP_SET => {
                set.insert(key.to_string(), value_of(c)?.to_string());
            }
            OP_DELETE => delete.push(key.to_string()),
            OP_APPEND | OP_SUBTRACT => return Err(not_a_list(key)),
            other => {
                return Err(Refusal::new(
                    ResponseError::InvalidRequest,
                    format!("unknown config operation {other} for {key:?}"),
                ));
            }
        }
    }
    // The metadata service's checks, so that validate_only answers what
    // the change would.
    let mut configs = group_configs(meta, name).await?;
    configs
        .alter(&set, &delete)
        .map_err(|e| Refusal::from_meta(&e, name))?;
    if validate_only {
        return Ok(());
    }
    alter_group(meta, name, set, delete).await
}

/// IncrementalAlterConfigs on a broker resource: SET and DELETE; APPEND
/// to and SUBTRACT from list configs, starting from the value in force (set
/// on the resource, else for every broker, else empty).
async fn change_broker_configs(
    meta: &dyn MetaApi,
    validate_only: bool,
    r: &incremental_alter_configs_request::AlterConfigsResource,
) -> Result<(), Refusal> {
    let name = r.resource_name.as_str();
    let (mut configs, defaults) = broker_configs(meta, name).await?;
    let mut set = BTreeMap::new();
    let mut delete = Vec::new();
    for c in &r.configs {
        let key = c.name.as_str();
        match c.config_operation {
            OP_SET => {
                set.insert(key.to_string(), value_of(c)?.to_string());
            }
            OP_DELETE => delete.push(key.to_string()),
            op @ (OP_APPEND | OP_SUBTRACT) => {
                let kind =
                    broker_config::key_type(key).map_err(|e| Refusal::from_meta(&e, name))?;
                if kind != BrokerConfigType::List {
                    return Err(not_a_list(key));
                }
                let current = configs
                    .overrides()
                    .get(key)
                    .or_else(|| defaults.overrides().get(key))
                    .map_or("", String::as_str);
                set.insert(key.to_string(), list_op(current, value_of(c)?, op));
            }
            other => {
                return Err(Refusal::new(
                    ResponseError::InvalidRequest,
                    format!("unknown config operation {other} for {key:?}"),
                ));
            }
        }
    }
    // The metadata service's checks, so that validate_only answers what
    // the change would.
    configs
        .alter(&set, &delete)
        .map_err(|e| Refusal::from_meta(&e, name))?;
    if validate_only {
        return Ok(());
    }
    alter_broker(meta, name, set, delete).await
}

/// Alters a broker resource's dynamic configs in the metadata service.
async fn alter_broker(
    meta: &dyn MetaApi,
    name: &str,
    set: BTreeMap<String, String>,
    delete: Vec<String>,
) -> Result<(), Refusal> {
    meta.alter_broker_configs(name, set.into_iter().collect(), delete)
        .await
        .map_err(|e| Refusal::from_meta(&e, name))?;
    tracing::info!(broker = %name, "dynamic broker configs altered");
    Ok(())
}

fn value_of(c: &incremental_alter_configs_request::AlterableConfig) -> Result<&StrBytes, Refusal> {
    c.value.as_ref().ok_or_else(|| {
        Refusal::new(
            ResponseError::InvalidRequest,
            format!("null value for config {:?}", c.name.as_str()),
        )
    })
}

/// IncrementalAlterConfigs' APPEND (items not there yet, at the end) or
/// SUBTRACT of `given` on the list value `current`.
fn list_op(current: &str, given: &str, op: i8) -> String {
    let given = list_items(given);
    let mut items = list_items(current);
    if op == OP_APPEND {
        for item in given {
            if !items.contains(&item) {
                items.push(item);
            }
        }
    } else {
        items.retain(|i| !given.contains(i));
    }
    items.join(",")
}

fn not_a_list(key: &str) -> Refusal {
    Refusal::new(
        ResponseError::InvalidConfig,
        format!("config {key:?} is not a list: values cannot be appended to or subtracted from it"),
    )
}

/// The items of a comma-separated list value.
fn list_items(value: &str) -> Vec<String> {
    value
        .split(',')
        .map(str::trim)
        .filter(|i| !i.is_empty())
        .map(str::to_string)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_topic_config_has_a_kafka_type() {
        for key in TopicConfig::default().describe() {
            assert_ne!(
                topic_config_type(key.name),
                TYPE_UNKNOWN,
                "{} has no type in TOPIC_CONFIG_TYPES",
                key.name
            );
        }
    }

    #[test]
    fn list_items_ignore_blanks_and_spaces() {
        assert_eq!(list_items(" delete, compact,,"), vec!["delete", "compact"]);
        assert!(list_items("").is_empty());
    }
}
