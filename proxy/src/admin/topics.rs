//! CreateTopics, DeleteTopics and CreatePartitions.

use std::collections::{BTreeMap, HashMap};

use floe_metadata::api::MetaApi;
use floe_metadata::error::MetaError;
use floe_metadata::state::MAX_PARTITIONS;
use floe_metadata::topic_config::TopicConfig;
use futures::future::join_all;
use kafka_protocol::ResponseError;
use kafka_protocol::messages::create_partitions_request::CreatePartitionsTopic;
use kafka_protocol::messages::create_partitions_response::CreatePartitionsTopicResult;
use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreatableTopicConfig};
use kafka_protocol::messages::create_topics_response::{
    CreatableTopicConfigs, CreatableTopicResult,
};
use kafka_protocol::messages::delete_topics_response::DeletableTopicResult;
use kafka_protocol::messages::{
    BrokerId, CreatePartitionsRequest, CreatePartitionsResponse, CreateTopicsRequest,
    CreateTopicsResponse, DeleteTopicsRequest, DeleteTopicsResponse, TopicName,
};
use uuid::Uuid;

use super::configs::config_source;
use super::{AdminConfig, Refusal, check_topic_name, repeated, str_bytes};

/// What a topic Kafka clients see has as its replication factor.
const REPLICATION_FACTOR: i16 = 1;

pub(super) async fn create_topics(
    meta: &dyn MetaApi,
    cfg: &AdminConfig,
    version: i16,
    req: &CreateTopicsRequest,
) -> CreateTopicsResponse {
    let twice = repeated(req.topics.iter().map(|t| t.name.as_str()));
    let results = join_all(req.topics.iter().map(|t| {
        let duplicate = twice.contains(t.name.as_str());
        create_topic(meta, cfg, version, req.validate_only, t, duplicate)
    }))
    .await;
    CreateTopicsResponse::default()
        .with_throttle_time_ms(0)
        .with_topics(results)
}

/// A topic created (or that would be, for `validate_only`).
struct Created {
    /// `None` when only validated.
    topic_id: Option<Uuid>,
    partitions: u32,
    config: TopicConfig,
}

async fn create_topic(
    meta: &dyn MetaApi,
    cfg: &AdminConfig,
    version: i16,
    validate_only: bool,
    t: &CreatableTopic,
    duplicate: bool,
) -> CreatableTopicResult {
    let result = CreatableTopicResult::default().with_name(t.name.clone());
    match try_create(meta, cfg, validate_only, t, duplicate).await {
        Ok(created) => {
            let mut result = result.with_error_message(None);
            if version >= 5 {
                result = result
                    .with_num_partitions(i32::try_from(created.partitions).unwrap_or(i32::MAX))
                    .with_replication_factor(REPLICATION_FACTOR)
                    .with_configs(Some(creatable_configs(&created.config)));
            }
            if version >= 7 {
                result = result.with_topic_id(created.topic_id.unwrap_or_else(Uuid::nil));
            }
            result
        }
        Err(refusal) => {
            tracing::debug!(
                topic = %t.name.as_str(),
                error = %refusal.error,
                reason = %refusal.message,
                "create topic refused"
            );
            result
                .with_error_code(refusal.code())
                .with_error_message(refusal.message())
        }
    }
}

async fn try_create(
    meta: &dyn MetaApi,
    cfg: &AdminConfig,
    validate_only: bool,
    t: &CreatableTopic,
    duplicate: bool,
) -> Result<Created, Refusal> {
    let name = t.name.as_str();
    check_topic_name(name)?;
    if duplicate {
        return Err(Refusal::new(
            ResponseError::InvalidRequest,
            format!("topic '{name}' appears more than once in the request"),
        ));
    }
    let partitions = if t.assignments.is_empty() {
        partition_count(t.num_partitions, cfg.default_partitions)?
    } else {
        assigned_partition_count(t)?
    };
    if t.replication_factor != -1 && t.replication_factor < 1 {
        return Err(Refusal::new(
            ResponseError::InvalidReplicationFactor,
            format!(
                "replication factor must be at least 1 (or -1 for the default), not {}",
                t.replication_factor
            ),
        ));
    }
    let settings = settings_of(&t.configs)?;
    let config = TopicConfig::from_settings(&settings).map_err(|e| Refusal::from_meta(&e, name))?;
    if validate_only {
        return match meta.describe_topic(name).await {
            Ok(_) => Err(Refusal::from_meta(
                &MetaError::TopicExists(name.to_string()),
                name,
            )),
            Err(MetaError::UnknownTopic(_)) => Ok(Created {
                topic_id: None,
                partitions,
                config,
            }),
            Err(e) => Err(Refusal::from_meta(&e, name)),
        };
    }
    let id = meta
        .create_topic(name, partitions, settings.into_iter().collect())
        .await
        .map_err(|e| Refusal::from_meta(&e, name))?;
    tracing::info!(topic = %name, topic_id = %id, partitions, "topic created");
    Ok(Created {
        topic_id: Some(id.0),
        partitions,
        config,
    })
}

/// The partition count for a requested `num_partitions` (-1: the default).
fn partition_count(requested: i32, default: u32) -> Result<u32, Refusal> {
    let n = if requested == -1 {
        i64::from(default)
    } else {
        i64::from(requested)
    };
    match u32::try_from(n) {
        Ok(n) if (1..=MAX_PARTITIONS).contains(&n) => Ok(n),
        _ => Err(Refusal::new(
            ResponseError::InvalidPartitions,
            format!(
                "number of partitions must be between 1 and {MAX_PARTITIONS} \
                 (or -1 for the default of {default}), not {requested}"
            ),
        )),
    }
}

/// The partition count of a topic created with explicit replica
/// assignments. They are checked as Kafka checks them (partitions numbered
/// 0..n-1, each with the same number of distinct replicas, and neither
/// `num_partitions` nor `replication_factor` set beside them) and then
/// ignored: Floe places partitions itself and the object store replicates
/// their data, so the broker ids are not looked at.
fn assigned_partition_count(t: &CreatableTopic) -> Result<u32, Refusal> {
    if t.num_partitions != -1 || t.replication_factor != -1 {
        return Err(Refusal::new(
            ResponseError::InvalidRequest,
            format!(
                "replica assignments were given with num_partitions {} and replication_factor {}: \
                 both must be -1 beside assignments",
                t.num_partitions, t.replication_factor
            ),
        ));
    }
    for (i, a) in t.assignments.iter().enumerate() {
        if i64::from(a.partition_index) != i as i64 {
            return Err(Refusal::new(
                ResponseError::InvalidReplicaAssignment,
                format!(
                    "replica assignments must number partitions 0 to {} in order, \
                 found partition {} at place {i}",
                    t.assignments.len() - 1,
                    a.partition_index
                ),
            ));
        }
    }
    check_replica_lists(t.assignments.iter().map(|a| a.broker_ids.as_slice()))?;
    match u32::try_from(t.assignments.len()) {
        Ok(n) if n <= MAX_PARTITIONS => Ok(n),
        _ => Err(Refusal::new(
            ResponseError::InvalidPartitions,
            format!(
                "a topic has at most {MAX_PARTITIONS} partitions, not {}",
                t.assignments.len()
            ),
        )),
    }
}

/// Checks the replica lists of new partitions as Kafka does: none empty,
/// no broker twice in one, all of the same length.
fn check_replica_lists<'a>(lists: impl Iterator<Item = &'a [BrokerId]>) -> Result<(), Refusal> {
    let invalid = |m: String| Refusal::new(ResponseError::InvalidReplicaAssignment, m);
    let mut replicas = None;
    for (i, brokers) in lists.enumerate() {
        if brokers.is_empty() {
            return Err(invalid(format!("new partition {i} is assigned no replica")));
        }
        if !repeated(brokers.iter().map(|b| b.0)).is_empty() {
            return Err(invalid(format!(
                "new partition {i} names a broker more than once in its replicas"
            )));
        }
        match replicas {
            None => replicas = Some(brokers.len()),
            Some(n) if n != brokers.len() => {
                return Err(invalid(format!(
                    "new partition {i} has {} replicas, the first has {n}: \
                     every partition needs the same number",
                    brokers.len()
                )));
            }
            Some(_) => {}
        }
    }
    Ok(())
}

/// The configs of a CreateTopics request as settings: a null value is
/// refused (as Kafka does), so is a key given twice.
fn settings_of(configs: &[CreatableTopicConfig]) -> Result<BTreeMap<String, String>, Refusal> {
    let mut settings = BTreeMap::new();
    for c in configs {
        let Some(value) = &c.value else {
            return Err(Refusal::new(
                ResponseError::InvalidConfig,
                format!("null value for config '{}'", c.name.as_str()),
            ));
        };
        if settings
            .insert(c.name.to_string(), value.to_string())
            .is_some()
        {
            return Err(Refusal::new(
                ResponseError::InvalidRequest,
                format!("config '{}' given more than once", c.name.as_str()),
            ));
        }
    }
    Ok(settings)
}

/// Every config of a new topic, for CreateTopics v5+.
fn creatable_configs(config: &TopicConfig) -> Vec<CreatableTopicConfigs> {
    config
        .describe()
        .into_iter()
        .map(|e| {
            CreatableTopicConfigs::default()
                .with_name(str_bytes(e.name))
                .with_value(Some(str_bytes(e.value)))
                .with_read_only(false)
                .with_config_source(config_source(e.is_default))
                .with_is_sensitive(false)
        })
        .collect()
}

pub(super) async fn delete_topics(
    meta: &dyn MetaApi,
    version: i16,
    req: &DeleteTopicsRequest,
) -> DeleteTopicsResponse {
    // v6 names topics by name or id; before, by name only.
    let targets: Vec<(Option<&TopicName>, Uuid)> = if version >= 6 {
        req.topics
            .iter()
            .map(|t| (t.name.as_ref(), t.topic_id))
            .collect()
    } else {
        req.topic_names
            .iter()
            .map(|n| (Some(n), Uuid::nil()))
            .collect()
    };
    let twice_named = repeated(targets.iter().filter_map(|(n, _)| n.map(|n| n.as_str())));
    let twice_id = repeated(targets.iter().map(|(_, id)| *id).filter(|id| !id.is_nil()));
    // v6 answers carry topic ids, and ids must be resolved to names: one
    // listing serves both.
    let listing = if version >= 6 && !targets.is_empty() {
        Some(list_topic_ids(meta).await)
    } else {
        None
    };
    let results = join_all(targets.iter().map(|(name, id)| {
        let duplicate =
            name.is_some_and(|n| twice_named.contains(n.as_str())) || twice_id.contains(id);
        delete_topic(meta, version, *name, *id, duplicate, listing.as_ref())
    }))
    .await;
    DeleteTopicsResponse::default()
        .with_throttle_time_ms(0)
        .with_responses(results)
}

/// Topic name → topic id of every topic.
async fn list_topic_ids(meta: &dyn MetaApi) -> Result<HashMap<String, Uuid>, MetaError> {
    let listed = meta.list_topics().await?;
    Ok(listed.into_iter().map(|t| (t.name, t.id.0)).collect())
}

async fn delete_topic(
    meta: &dyn MetaApi,
    version: i16,
    name: Option<&TopicName>,
    id: Uuid,
    duplicate: bool,
    listing: Option<&Result<HashMap<String, Uuid>, MetaError>>,
) -> DeletableTopicResult {
    let mut result = DeletableTopicResult::default().with_name(name.cloned());
    if version >= 6 {
        result = result.with_topic_id(id);
    }
    let outcome = match resolve(name, id, duplicate, listing) {
        Ok((name, resolved_id)) => {
            result = result.with_name(Some(TopicName(str_bytes(name.as_str()))));
            if version >= 6 {
                result = result.with_topic_id(resolved_id);
            }
            let deleted: Result<(), MetaError> = meta.delete_topic(&name).await;
            match deleted {
                Ok(_) => {
                    tracing::info!(topic = %name, "topic deleted");
                    Ok(())
                }
                Err(e) => Err(Refusal::from_meta(&e, &name)),
            }
        }
        Err(refusal) => Err(refusal),
    };
    match outcome {
        Ok(()) => result,
        Err(refusal) => {
            result = result.with_error_code(refusal.code());
            if version >= 5 {
                result = result.with_error_message(refusal.message());
            }
            result
        }
    }
}

/// The name to delete and, for v6, its topic id.
fn resolve(
    name: Option<&TopicName>,
    id: Uuid,
    duplicate: bool,
    listing: Option<&Result<HashMap<String, Uuid>, MetaError>>,
) -> Result<(String, Uuid), Refusal> {
    if duplicate {
        return Err(Refusal::new(
            ResponseError::InvalidRequest,
            "topic given more than once in the request",
        ));
    }
    let topics = match listing {
        None => None,
        Some(Ok(topics)) => Some(topics),
        Some(Err(e)) => return Err(Refusal::from_meta(e, name.map_or("", |n| n.as_str()))),
    };
    match (name, id.is_nil()) {
        (Some(_), false) => Err(Refusal::new(
            ResponseError::InvalidRequest,
            "give a topic name or a topic id, not both",
        )),
        (None, true) => Err(Refusal::new(
            ResponseError::InvalidRequest,
            "give a topic name or a topic id",
        )),
        (Some(name), true) => {
            let name = name.to_string();
            match topics {
                // Before v6 the delete itself tells whether the topic exists.
                None => Ok((name, Uuid::nil())),
                Some(topics) => match topics.get(&name) {
                    Some(id) => Ok((name, *id)),
                    None => Err(Refusal::from_meta(
                        &MetaError::UnknownTopic(name.clone()),
                        &name,
                    )),
                },
            }
        }
        (None, false) => topics
            .and_then(|topics| topics.iter().find(|(_, t)| **t == id))
            .map(|(name, _)| (name.clone(), id))
            .ok_or_else(|| {
                Refusal::new(
                    ResponseError::UnknownTopicId,
                    format!("no topic has the id {id}"),
                )
            }),
    }
}

pub(super) async fn create_partitions(
    meta: &dyn MetaApi,
    req: &CreatePartitionsRequest,
) -> CreatePartitionsResponse {
    let twice = repeated(req.topics.iter().map(|t| t.name.as_str()));
    let results = join_all(req.topics.iter().map(|t| {
        let duplicate = twice.contains(t.name.as_str());
        async move {
            let result = CreatePartitionsTopicResult::default().with_name(t.name.clone());
            match grow(meta, req.validate_only, t, duplicate).await {
                Ok(()) => result.with_error_message(None),
                Err(refusal) => result
                    .with_error_code(refusal.code())
                    .with_error_message(refusal.message()),
            }
        }
    }))
    .await;
    CreatePartitionsResponse::default()
        .with_throttle_time_ms(0)
        .with_results(results)
}

async fn grow(
    meta: &dyn MetaApi,
    validate_only: bool,
    t: &CreatePartitionsTopic,
    duplicate: bool,
) -> Result<(), Refusal> {
    let name = t.name.as_str();
    if duplicate {
        return Err(Refusal::new(
            ResponseError::InvalidRequest,
            format!("topic '{name}' appears more than once in the request"),
        ));
    }
    let info = meta
        .describe_topic(name)
        .await
        .map_err(|e| Refusal::from_meta(&e, name))?;
    let current = i64::from(info.partition_count);
    let wanted = i64::from(t.count);
    if wanted == current {
        return Err(Refusal::new(
            ResponseError::InvalidPartitions,
            format!("topic '{name}' already has {current} partitions"),
        ));
    }
    if wanted < current {
        return Err(Refusal::new(
            ResponseError::InvalidPartitions,
            format!(
                "topic '{name}' has {current} partitions, more than the {wanted} asked for; \
                 partitions can only be added"
            ),
        ));
    }
    // Assignments of the new partitions are checked as Kafka checks them,
    // then ignored: Floe places partitions itself.
    if let Some(assignments) = t.assignments.as_ref().filter(|a| !a.is_empty()) {
        let added = wanted - current;
        if i64::try_from(assignments.len()) != Ok(added) {
            return Err(Refusal::new(
                ResponseError::InvalidReplicaAssignment,
                format!(
                    "{} replica assignments given for {added} new partitions",
                    assignments.len()
                ),
            ));
        }
        check_replica_lists(assignments.iter().map(|a| a.broker_ids.as_slice()))?;
    }
    let total = match u32::try_from(wanted) {
        Ok(n) if n <= MAX_PARTITIONS => n,
        _ => {
            return Err(Refusal::new(
                ResponseError::InvalidPartitions,
                format!("a topic has at most {MAX_PARTITIONS} partitions, not {wanted}"),
            ));
        }
    };
    if validate_only {
        return Ok(());
    }
    let grown: Result<(), MetaError> = meta.create_partitions(name, total).await;
    match grown {
        Ok(_) => {
            tracing::info!(topic = %name, partitions = total, "partitions added");
            Ok(())
        }
        // The count changed since the describe above (another client grew it).
        Err(MetaError::InvalidRequest(m)) => Err(Refusal::new(ResponseError::InvalidPartitions, m)),
        Err(e) => Err(Refusal::from_meta(&e, name)),
    }
}
