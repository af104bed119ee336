//! Topic administration: create, describe configs, alter configs, delete —
//! what `kafka-topics.sh` and `kafka-configs.sh` do for one topic.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use kafka_protocol::messages::create_partitions_request::CreatePartitionsTopic;
use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreatableTopicConfig};
use kafka_protocol::messages::delete_records_request::{
    DeleteRecordsPartition, DeleteRecordsTopic,
};
use kafka_protocol::messages::delete_topics_request::DeleteTopicState;
use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use kafka_protocol::messages::describe_log_dirs_request::DescribableLogDirTopic;
use kafka_protocol::messages::incremental_alter_configs_request::{
    AlterConfigsResource, AlterableConfig,
};
use kafka_protocol::messages::{
    CreatePartitionsRequest, CreateTopicsRequest, DeleteRecordsRequest, DeleteTopicsRequest,
    DescribeConfigsRequest, DescribeLogDirsRequest, IncrementalAlterConfigsRequest,
};
use kafka_protocol::protocol::StrBytes;

use crate::connection::{KafkaClient, topic_name};
use crate::error::{ClientError, check_code};

/// Kafka's resource type for topics (DescribeConfigs, IncrementalAlterConfigs).
pub const RESOURCE_TOPIC: i8 = 2;
/// Kafka's resource type for brokers (DescribeConfigs).
pub const RESOURCE_BROKER: i8 = 4;
/// Kafka's config resource type for groups (Kafka 4; DescribeConfigs,
/// IncrementalAlterConfigs).
pub const RESOURCE_GROUP: i8 = 32;
/// IncrementalAlterConfigs operations.
const OP_SET: i8 = 0;
const OP_DELETE: i8 = 1;

/// Where a config's value comes from (DescribeConfigs' `config_source`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigSource {
    /// Set on the topic itself.
    Topic,
    DynamicBroker,
    DynamicDefaultBroker,
    StaticBroker,
    /// The built-in default.
    Default,
    /// Set on the group itself (a group config).
    Group,
    /// A source code this client does not know.
    Unknown(i8),
}

impl ConfigSource {
    pub fn from_code(code: i8) -> Self {
        match code {
            1 => Self::Topic,
            2 => Self::DynamicBroker,
            3 => Self::DynamicDefaultBroker,
            4 => Self::StaticBroker,
            5 => Self::Default,
            8 => Self::Group,
            other => Self::Unknown(other),
        }
    }
}

/// One config of a topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigEntry {
    pub name: String,
    /// `None` for a sensitive value, or a config without one.
    pub value: Option<String>,
    pub sensitive: bool,
    pub source: ConfigSource,
}

/// A config resource type named as an error message says it.
fn resource_kind(resource_type: i8) -> &'static str {
    match resource_type {
        RESOURCE_BROKER => "broker",
        RESOURCE_GROUP => "group",
        _ => "topic",
    }
}

fn sb(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_owned())
}

fn missing(api: &str, name: &str) -> ClientError {
    ClientError::MissingAnswer {
        what: format!("the {api} answer does not mention topic {name}"),
    }
}

impl KafkaClient {
    /// Creates a topic with `partitions` partitions and the given configs.
    /// Returns once the broker accepted it; see [`Self::wait_for_leaders`].
    pub async fn create_topic(
        &mut self,
        name: &str,
        partitions: i32,
        configs: &[(String, String)],
    ) -> Result<(), ClientError> {
        if partitions < 1 {
            return Err(ClientError::InvalidInput(format!(
                "a topic needs at least 1 partition, not {partitions}"
            )));
        }
        let version = self.version::<CreateTopicsRequest>()?;
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
        req.timeout_ms = self.timeout_ms();
        let resp = self.send(version, req).await?;
        let result = resp
            .topics
            .iter()
            .find(|t| t.name.0.as_str() == name)
            .ok_or_else(|| missing("CreateTopics", name))?;
        check_code(result.error_code, result.error_message.as_ref(), || {
            format!("cannot create topic {name}")
        })
    }

    /// Waits until the topic lists `partitions` partitions, each with a
    /// leader (a topic is usable then), polling Metadata for at most
    /// `timeout`.
    pub async fn wait_for_leaders(
        &mut self,
        name: &str,
        partitions: i32,
        timeout: Duration,
    ) -> Result<(), ClientError> {
        let deadline = Instant::now() + timeout;
        loop {
            let last = match self.topic(name).await {
                Ok(t) if t.has_all_leaders(partitions) => return Ok(()),
                Ok(t) => format!("{} partition(s) listed", t.partitions.len()),
                Err(e) if e.is_retriable() => e.to_string(),
                Err(e) => return Err(e),
            };
            if Instant::now() >= deadline {
                return Err(ClientError::NotReady(format!(
                    "topic {name} has no leader for every partition yet ({last})"
                )));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Every config of a topic, sorted by name.
    pub async fn describe_topic_configs(
        &mut self,
        name: &str,
    ) -> Result<Vec<ConfigEntry>, ClientError> {
        self.describe_configs(RESOURCE_TOPIC, name).await
    }

    /// Every config of a resource ([`RESOURCE_TOPIC`] or
    /// [`RESOURCE_BROKER`] and its name), sorted by name.
    pub async fn describe_configs(
        &mut self,
        resource_type: i8,
        name: &str,
    ) -> Result<Vec<ConfigEntry>, ClientError> {
        let version = self.version::<DescribeConfigsRequest>()?;
        let mut resource = DescribeConfigsResource::default();
        resource.resource_type = resource_type;
        resource.resource_name = sb(name);
        resource.configuration_keys = None;
        let mut req = DescribeConfigsRequest::default();
        req.resources = vec![resource];
        let resp = self.send(version, req).await?;
        let result = resp
            .results
            .iter()
            .find(|r| r.resource_name.as_str() == name)
            .ok_or_else(|| missing("DescribeConfigs", name))?;
        check_code(result.error_code, result.error_message.as_ref(), || {
            let what = resource_kind(resource_type);
            format!("cannot describe the configs of {what} {name}")
        })?;
        let mut configs: Vec<ConfigEntry> = result
            .configs
            .iter()
            .map(|c| ConfigEntry {
                name: c.name.to_string(),
                value: c.value.as_ref().map(|v| v.to_string()),
                sensitive: c.is_sensitive,
                source: ConfigSource::from_code(c.config_source),
            })
            .collect();
        configs.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(configs)
    }

    /// Sets the configs in `set` and removes those in `delete` (back to
    /// their defaults), in one request.
    pub async fn alter_topic_configs(
        &mut self,
        name: &str,
        set: &[(String, String)],
        delete: &[String],
    ) -> Result<(), ClientError> {
        self.alter_configs(RESOURCE_TOPIC, name, set, delete).await
    }

    /// Sets and removes configs of a resource ([`RESOURCE_TOPIC`] or
    /// [`RESOURCE_GROUP`] and its name) with IncrementalAlterConfigs; keys
    /// not named keep their values.
    pub async fn alter_configs(
        &mut self,
        resource_type: i8,
        name: &str,
        set: &[(String, String)],
        delete: &[String],
    ) -> Result<(), ClientError> {
        if set.is_empty() && delete.is_empty() {
            return Err(ClientError::InvalidInput(
                "nothing to alter: no config to set or delete".into(),
            ));
        }
        let version = self.version::<IncrementalAlterConfigsRequest>()?;
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
        resource.resource_type = resource_type;
        resource.resource_name = sb(name);
        resource.configs = configs;
        let mut req = IncrementalAlterConfigsRequest::default();
        req.resources = vec![resource];
        let resp = self.send(version, req).await?;
        let result = resp
            .responses
            .iter()
            .find(|r| r.resource_name.as_str() == name)
            .ok_or_else(|| missing("IncrementalAlterConfigs", name))?;
        check_code(result.error_code, result.error_message.as_ref(), || {
            format!(
                "cannot alter the configs of {} {name}",
                resource_kind(resource_type)
            )
        })
    }

    /// Raises the topic's partition count to `total` (CreatePartitions);
    /// partitions are never removed.
    pub async fn create_partitions(&mut self, name: &str, total: i32) -> Result<(), ClientError> {
        let version = self.version::<CreatePartitionsRequest>()?;
        let mut req = CreatePartitionsRequest::default();
        req.topics = vec![
            CreatePartitionsTopic::default()
                .with_name(topic_name(name))
                .with_count(total)
                .with_assignments(None),
        ];
        req.timeout_ms = self.timeout_ms();
        let resp = self.send(version, req).await?;
        let result = resp
            .results
            .iter()
            .find(|r| r.name.0.as_str() == name)
            .ok_or_else(|| missing("CreatePartitions", name))?;
        check_code(result.error_code, result.error_message.as_ref(), || {
            format!("cannot add partitions to topic {name}")
        })
    }

    /// Moves the start of each partition in `before` up to its offset
    /// (DeleteRecords: the records before it are deleted); returns each
    /// partition's new start (low watermark).
    pub async fn delete_records(
        &mut self,
        name: &str,
        before: &BTreeMap<i32, i64>,
    ) -> Result<BTreeMap<i32, i64>, ClientError> {
        let version = self.version::<DeleteRecordsRequest>()?;
        let mut req = DeleteRecordsRequest::default();
        req.topics = vec![
            DeleteRecordsTopic::default()
                .with_name(topic_name(name))
                .with_partitions(
                    before
                        .iter()
                        .map(|(p, o)| {
                            DeleteRecordsPartition::default()
                                .with_partition_index(*p)
                                .with_offset(*o)
                        })
                        .collect(),
                ),
        ];
        req.timeout_ms = self.timeout_ms();
        let resp = self.send(version, req).await?;
        let mut out = BTreeMap::new();
        for t in resp.topics.iter().filter(|t| t.name.0.as_str() == name) {
            for p in &t.partitions {
                check_code(p.error_code, None, || {
                    format!("deleting records of {name} partition {}", p.partition_index)
                })?;
                out.insert(p.partition_index, p.low_watermark);
            }
        }
        if let Some(p) = before.keys().find(|p| !out.contains_key(p)) {
            return Err(missing("DeleteRecords", &format!("{name} partition {p}")));
        }
        Ok(out)
    }

    /// The bytes each partition of `name` stores, as its leader reports them
    /// (DescribeLogDirs: a broker lists the partitions it leads, so each
    /// leader is asked for its own; this connection when it is one of them).
    /// A partition no leader reports is left out.
    pub async fn partition_sizes(&mut self, name: &str) -> Result<BTreeMap<i32, i64>, ClientError> {
        let meta = self.metadata(Some(&[name])).await?;
        let topic = crate::metadata::topic_in(&meta, name)?;
        let mut sizes = BTreeMap::new();
        let mut leaders: Vec<i32> = topic.partitions.iter().map(|p| p.leader).collect();
        leaders.sort_unstable();
        leaders.dedup();
        for leader in leaders.into_iter().filter(|l| *l >= 0) {
            let Some(b) = meta.brokers.iter().find(|b| b.node_id.0 == leader) else {
                continue;
            };
            let addr = format!("{}:{}", b.host.as_str(), b.port);
            let mut other;
            let conn = if addr == self.addr() {
                &mut *self
            } else {
                other = self.connect_to(&addr).await?;
                &mut other
            };
            let led: Vec<i32> = topic
                .partitions
                .iter()
                .filter(|p| p.leader == leader)
                .map(|p| p.partition)
                .collect();
            for (p, bytes) in conn.log_dir_sizes(name, led).await? {
                *sizes.entry(p).or_insert(0) += bytes;
            }
        }
        Ok(sizes)
    }

    /// The sizes of `partitions` of `name` this broker reports, summed over
    /// its log directories.
    async fn log_dir_sizes(
        &mut self,
        name: &str,
        partitions: Vec<i32>,
    ) -> Result<BTreeMap<i32, i64>, ClientError> {
        let version = self.version::<DescribeLogDirsRequest>()?;
        let req = DescribeLogDirsRequest::default().with_topics(Some(vec![
            DescribableLogDirTopic::default()
                .with_topic(topic_name(name))
                .with_partitions(partitions),
        ]));
        let resp = self.send(version, req).await?;
        check_code(resp.error_code, None, || {
            format!("describing the log dirs of {name}")
        })?;
        let mut sizes = BTreeMap::new();
        for dir in &resp.results {
            check_code(dir.error_code, None, || {
                format!("log dir {} of {}", dir.log_dir.as_str(), self.addr())
            })?;
            for t in dir.topics.iter().filter(|t| t.name.0.as_str() == name) {
                for p in t.partitions.iter().filter(|p| p.partition_size >= 0) {
                    *sizes.entry(p.partition_index).or_insert(0) += p.partition_size;
                }
            }
        }
        Ok(sizes)
    }

    /// Deletes a topic.
    pub async fn delete_topic(&mut self, name: &str) -> Result<(), ClientError> {
        let version = self.version::<DeleteTopicsRequest>()?;
        let mut req = DeleteTopicsRequest::default();
        if version >= 6 {
            req.topics = vec![DeleteTopicState::default().with_name(Some(topic_name(name)))];
        } else {
            req.topic_names = vec![topic_name(name)];
        }
        req.timeout_ms = self.timeout_ms();
        let resp = self.send(version, req).await?;
        let result = resp
            .responses
            .iter()
            .find(|r| r.name.as_ref().is_some_and(|n| n.0.as_str() == name))
            .ok_or_else(|| missing("DeleteTopics", name))?;
        check_code(result.error_code, result.error_message.as_ref(), || {
            format!("cannot delete topic {name}")
        })
    }
}

#[cfg(test)]
mod tests {
    use kafka_protocol::messages::create_topics_response::CreatableTopicResult;
    use kafka_protocol::messages::{CreateTopicsResponse, RequestKind, ResponseKind};

    use super::*;
    use crate::error::ErrorKind;
    use crate::test_support::{fake_broker, modern};

    #[test]
    fn config_sources_map_kafkas_codes() {
        assert_eq!(ConfigSource::from_code(1), ConfigSource::Topic);
        assert_eq!(ConfigSource::from_code(5), ConfigSource::Default);
        assert_eq!(ConfigSource::from_code(4), ConfigSource::StaticBroker);
        assert_eq!(ConfigSource::from_code(8), ConfigSource::Group);
        assert_eq!(ConfigSource::from_code(42), ConfigSource::Unknown(42));
    }

    /// A broker whose CreateTopics answers `code` for every topic asked,
    /// or leaves them out of the answer with `None`.
    async fn create_answering(code: Option<i16>) -> KafkaClient {
        let addr = fake_broker(move |req| {
            modern(req, |req| {
                let RequestKind::CreateTopics(create) = &req.body else {
                    return None;
                };
                let topics = match code {
                    None => vec![],
                    Some(code) => create
                        .topics
                        .iter()
                        .map(|t| {
                            CreatableTopicResult::default()
                                .with_name(t.name.clone())
                                .with_error_code(code)
                        })
                        .collect(),
                };
                Some(ResponseKind::CreateTopics(
                    CreateTopicsResponse::default().with_topics(topics),
                ))
            })
        })
        .await;
        KafkaClient::connect(&addr, Duration::from_secs(5))
            .await
            .expect("connects")
    }

    #[tokio::test]
    async fn creating_a_topic_reports_the_brokers_error() {
        let mut ok = create_answering(Some(0)).await;
        ok.create_topic("t", 3, &[]).await.expect("created");
        let mut exists = create_answering(Some(36)).await;
        let err = exists
            .create_topic("t", 3, &[])
            .await
            .expect_err("already there");
        assert!(err.to_string().contains("TOPIC_ALREADY_EXISTS"), "{err}");
        assert_eq!(err.kind(), ErrorKind::Broker);
    }

    #[tokio::test]
    async fn an_answer_without_the_topic_is_a_protocol_error() {
        let mut client = create_answering(None).await;
        let err = client
            .create_topic("t", 1, &[])
            .await
            .expect_err("no answer");
        assert_eq!(err.kind(), ErrorKind::Protocol);
        assert_eq!(
            err.to_string(),
            "the CreateTopics answer does not mention topic t"
        );
    }

    #[tokio::test]
    async fn impossible_requests_are_refused_before_sending() {
        let mut client = create_answering(Some(0)).await;
        let err = client
            .create_topic("t", 0, &[])
            .await
            .expect_err("0 partitions");
        assert_eq!(err.kind(), ErrorKind::InvalidInput);
        let err = client
            .alter_topic_configs("t", &[], &[])
            .await
            .expect_err("nothing to alter");
        assert_eq!(err.kind(), ErrorKind::InvalidInput);
    }
}
