//! Metadata lookup: which topics exist, their partitions and leaders.
//!
//! Never asks the broker to create a topic, whatever its
//! `auto.create.topics.enable` says.

use kafka_protocol::ResponseError;
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::metadata_response::MetadataResponseTopic;
use kafka_protocol::messages::{BrokerId, MetadataRequest, MetadataResponse};
use uuid::Uuid;

use crate::connection::{KafkaClient, topic_name};
use crate::error::{ClientError, check_code};

/// A topic as the broker describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicMetadata {
    pub name: String,
    /// The topic's id (nil if the broker's Metadata version has none).
    pub id: Uuid,
    /// Sorted by partition index.
    pub partitions: Vec<PartitionMetadata>,
}

/// One partition of a topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionMetadata {
    pub partition: i32,
    /// The leader's broker id, or -1 while there is none.
    pub leader: i32,
    pub replicas: Vec<i32>,
    pub isr: Vec<i32>,
    /// The error the broker reports for this partition, if any.
    pub error: Option<ResponseError>,
}

impl TopicMetadata {
    /// The partition indexes, in order.
    pub fn partition_ids(&self) -> Vec<i32> {
        self.partitions.iter().map(|p| p.partition).collect()
    }

    /// Whether the topic has `count` partitions and each has a leader.
    pub fn has_all_leaders(&self, count: i32) -> bool {
        self.partitions.len() == usize::try_from(count).unwrap_or(0)
            && self.partitions.iter().all(|p| p.leader >= 0)
    }

    fn from_response(name: &str, t: MetadataResponseTopic) -> Self {
        let ids = |v: &[BrokerId]| v.iter().map(|b| b.0).collect::<Vec<_>>();
        let mut partitions: Vec<PartitionMetadata> = t
            .partitions
            .iter()
            .map(|p| PartitionMetadata {
                partition: p.partition_index,
                leader: p.leader_id.0,
                replicas: ids(&p.replica_nodes),
                isr: ids(&p.isr_nodes),
                error: ResponseError::try_from_code(p.error_code),
            })
            .collect();
        partitions.sort_by_key(|p| p.partition);
        Self {
            name: name.to_owned(),
            id: t.topic_id,
            partitions,
        }
    }
}

/// A topic in a listing.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct TopicListing {
    pub name: String,
    pub partitions: usize,
}

impl KafkaClient {
    /// The raw Metadata answer for the named topics, or for every topic with
    /// `None`.
    pub async fn metadata(
        &mut self,
        topics: Option<&[&str]>,
    ) -> Result<MetadataResponse, ClientError> {
        let version = self.version::<MetadataRequest>()?;
        let mut req = MetadataRequest::default();
        req.allow_auto_topic_creation = false;
        req.topics = topics.map(|names| {
            names
                .iter()
                .map(|n| MetadataRequestTopic::default().with_name(Some(topic_name(n))))
                .collect()
        });
        self.send(version, req).await
    }

    /// One topic; an error of kind `NotFound` if it does not exist, or the
    /// error the broker reports for it.
    pub async fn topic(&mut self, name: &str) -> Result<TopicMetadata, ClientError> {
        let response = self.metadata(Some(&[name])).await?;
        topic_in(&response, name)
    }
    /// Every topic with its partition count, sorted by name.
    pub async fn list_topics(&mut self) -> Result<Vec<TopicListing>, ClientError> {
        let response = self.metadata(None).await?;
        let mut topics: Vec<TopicListing> = response
            .topics
            .iter()
            .filter_map(|t| {
                Some(TopicListing {
                    name: t.name.as_ref()?.0.to_string(),
                    partitions: t.partitions.len(),
                })
            })
            .collect();
        topics.sort();
        Ok(topics)
    }
}

/// Topic `name` of a Metadata answer; an error as [`KafkaClient::topic`] gives.
pub(crate) fn topic_in(
    response: &MetadataResponse,
    name: &str,
) -> Result<TopicMetadata, ClientError> {
    let found = response
        .topics
        .iter()
        .find(|t| t.name.as_ref().is_some_and(|n| n.0.as_str() == name));
    match found {
        Some(t) => {
            check_code(t.error_code, None, || format!("topic {name}"))?;
            Ok(TopicMetadata::from_response(name, t.clone()))
        }
        None => Err(ClientError::Broker {
            what: format!("topic {name}"),
            error: ResponseError::UnknownTopicOrPartition,
            message: Some("not in the metadata response".into()),
        }),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use kafka_protocol::messages::ResponseKind;
    use kafka_protocol::messages::metadata_response::MetadataResponsePartition;

    use super::*;
    use crate::error::ErrorKind;
    use crate::test_support::{answer_metadata, fake_broker};

    fn partition(index: i32, leader: i32) -> MetadataResponsePartition {
        MetadataResponsePartition::default()
            .with_partition_index(index)
            .with_leader_id(BrokerId(leader))
            .with_replica_nodes(vec![BrokerId(leader)])
            .with_isr_nodes(vec![BrokerId(leader)])
    }

    fn topic(name: &str, partitions: Vec<MetadataResponsePartition>) -> MetadataResponseTopic {
        MetadataResponseTopic::default()
            .with_name(Some(topic_name(name)))
            .with_partitions(partitions)
    }

    async fn client_with(topics: Vec<MetadataResponseTopic>) -> KafkaClient {
        let addr = fake_broker(move |req| {
            answer_metadata(req, || {
                ResponseKind::Metadata(MetadataResponse::default().with_topics(topics.clone()))
            })
        })
        .await;
        KafkaClient::connect(&addr, Duration::from_secs(5))
            .await
            .expect("connects")
    }

    #[tokio::test]
    async fn a_topic_comes_back_with_sorted_partitions_and_leaders() {
        let mut client =
            client_with(vec![topic("t", vec![partition(1, 2), partition(0, -1)])]).await;
        let t = client.topic("t").await.expect("found");
        assert_eq!(t.name, "t");
        assert_eq!(t.partition_ids(), vec![0, 1]);
        assert_eq!(t.partitions[1].leader, 2);
        assert_eq!(t.partitions[1].replicas, vec![2]);
        assert!(!t.has_all_leaders(2), "partition 0 has no leader");
        assert!(!t.has_all_leaders(3));
    }

    #[tokio::test]
    async fn a_topic_missing_from_the_answer_is_not_found() {
        let mut client = client_with(vec![topic("other", vec![partition(0, 1)])]).await;
        let err = client.topic("t").await.expect_err("not there");
        assert_eq!(err.kind(), ErrorKind::NotFound);
        assert!(
            err.to_string()
                .starts_with("topic t: UNKNOWN_TOPIC_OR_PARTITION"),
            "{err}"
        );
    }

    #[tokio::test]
    async fn an_error_code_on_the_topic_is_returned() {
        let mut unknown = topic("t", vec![]);
        unknown.error_code = ResponseError::UnknownTopicOrPartition.code();
        let mut client = client_with(vec![unknown]).await;
        let err = client.topic("t").await.expect_err("unknown");
        assert_eq!(err.kind(), ErrorKind::NotFound);
    }

    #[tokio::test]
    async fn listings_are_sorted_by_name() {
        let mut client = client_with(vec![
            topic("b", vec![partition(0, 1)]),
            topic("a", vec![partition(0, 1), partition(1, 1)]),
        ])
        .await;
        let listing = client.list_topics().await.expect("lists");
        assert_eq!(
            listing,
            vec![
                TopicListing {
                    name: "a".into(),
                    partitions: 2
                },
                TopicListing {
                    name: "b".into(),
                    partitions: 1
                },
            ]
        );
    }
}
