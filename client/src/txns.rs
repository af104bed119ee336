//! Transactions and producers as the brokers describe them: what
//! `kafka-transactions.sh` shows (ListTransactions, DescribeTransactions,
//! DescribeProducers).
//!
//! Every request goes to the connected address: a Floe proxy routes a
//! transactional id's requests to its coordinator and asks every
//! coordinator for a listing, and answers DescribeProducers for any
//! partition, so neither FindCoordinator nor the partition's leader is
//! looked up.

use std::collections::BTreeMap;

use kafka_protocol::messages::describe_producers_request::TopicRequest;
use kafka_protocol::messages::{
    DescribeProducersRequest, DescribeTransactionsRequest, ListTransactionsRequest, ProducerId,
    TransactionalId,
};
use kafka_protocol::protocol::StrBytes;

use crate::connection::{KafkaClient, topic_name};
use crate::error::{ClientError, check_code};

/// A transactional id in a listing.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct TransactionListing {
    pub transactional_id: String,
    pub producer_id: i64,
    /// Kafka's state names: `Empty`, `Ongoing`, `PrepareCommit`,
    /// `PrepareAbort`, `CompleteCommit`, `CompleteAbort`, `Dead`.
    pub state: String,
}

/// A transactional id as its coordinator describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransactionDescription {
    pub transactional_id: String,
    pub state: String,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub timeout_ms: i32,
    /// When the open transaction started (ms since the epoch); -1 when none.
    pub start_ms: i64,
    /// The partitions in the transaction, by topic.
    pub partitions: Vec<(String, Vec<i32>)>,
}

/// A producer a partition's owner knows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProducerDescription {
    pub producer_id: i64,
    pub producer_epoch: i32,
    pub last_sequence: i32,
    /// Its last write (ms since the epoch); -1 when unknown.
    pub last_timestamp: i64,
    /// The epoch of the coordinator that wrote its last marker; -1 when
    /// unknown.
    pub coordinator_epoch: i32,
    /// The first offset of its transaction open on the partition; -1 when
    /// none is.
    pub current_txn_start_offset: i64,
}

fn sb(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_owned())
}

impl KafkaClient {
    /// Every transactional id the coordinators know, in the given states
    /// (all when empty), sorted by id.
    pub async fn list_transactions(
        &mut self,
        states: &[String],
    ) -> Result<Vec<TransactionListing>, ClientError> {
        let version = self.version::<ListTransactionsRequest>()?;
        let req = ListTransactionsRequest::default()
            .with_state_filters(states.iter().map(|s| sb(s)).collect())
            .with_producer_id_filters(Vec::<ProducerId>::new());
        let resp = self.send(version, req).await?;
        check_code(resp.error_code, None, || "listing transactions".to_owned())?;
        if let Some(s) = resp.unknown_state_filters.first() {
            return Err(ClientError::InvalidInput(format!(
                "unknown transaction state {s:?} (Empty, Ongoing, PrepareCommit, PrepareAbort, \
                 CompleteCommit, CompleteAbort)"
            )));
        }
        let mut out: Vec<TransactionListing> = resp
            .transaction_states
            .iter()
            .map(|t| TransactionListing {
                transactional_id: t.transactional_id.0.to_string(),
                producer_id: t.producer_id.0,
                state: t.transaction_state.to_string(),
            })
            .collect();
        out.sort();
        Ok(out)
    }

    /// Describes transactional ids, in the order asked; an id the
    /// coordinator does not know is an error (TRANSACTIONAL_ID_NOT_FOUND).
    pub async fn describe_transactions(
        &mut self,
        ids: &[String],
    ) -> Result<Vec<TransactionDescription>, ClientError> {
        let version = self.version::<DescribeTransactionsRequest>()?;
        let req = DescribeTransactionsRequest::default().with_transactional_ids(
            ids.iter()
                .map(|id| TransactionalId(sb(id)))
                .collect::<Vec<_>>(),
        );
        let resp = self.send(version, req).await?;
        let mut out = Vec::with_capacity(ids.len());
        for id in ids {
            let t = resp
                .transaction_states
                .iter()
                .find(|t| t.transactional_id.0.as_str() == id)
                .ok_or_else(|| ClientError::MissingAnswer {
                    what: format!("the DescribeTransactions answer does not mention {id}"),
                })?;
            check_code(t.error_code, None, || {
                format!("describing transactional id {id}")
            })?;
            out.push(TransactionDescription {
                transactional_id: id.clone(),
                state: t.transaction_state.to_string(),
                producer_id: t.producer_id.0,
                producer_epoch: t.producer_epoch,
                timeout_ms: t.transaction_timeout_ms,
                start_ms: t.transaction_start_time_ms,
                partitions: t
                    .topics
                    .iter()
                    .map(|d| (d.topic.0.to_string(), d.partitions.clone()))
                    .collect(),
            });
        }
        Ok(out)
    }

    /// The producers of each partition asked (all the topic's when
    /// `partitions` is `None`), by partition, sorted by producer id.
    pub async fn describe_producers(
        &mut self,
        topic: &str,
        partitions: Option<&[i32]>,
    ) -> Result<BTreeMap<i32, Vec<ProducerDescription>>, ClientError> {
        let asked = match partitions {
            Some(ps) => ps.to_vec(),
            None => self.topic(topic).await?.partition_ids(),
        };
        let version = self.version::<DescribeProducersRequest>()?;
        let req = DescribeProducersRequest::default().with_topics(vec![
            TopicRequest::default()
                .with_name(topic_name(topic))
                .with_partition_indexes(asked.clone()),
        ]);
        let resp = self.send(version, req).await?;
        let mut out = BTreeMap::new();
        for t in resp.topics.iter().filter(|t| t.name.0.as_str() == topic) {
            for p in &t.partitions {
                check_code(p.error_code, p.error_message.as_ref(), || {
                    format!(
                        "describing the producers of {topic} partition {}",
                        p.partition_index
                    )
                })?;
                let mut producers: Vec<ProducerDescription> = p
                    .active_producers
                    .iter()
                    .map(|s| ProducerDescription {
                        producer_id: s.producer_id.0,
                        producer_epoch: s.producer_epoch,
                        last_sequence: s.last_sequence,
                        last_timestamp: s.last_timestamp,
                        coordinator_epoch: s.coordinator_epoch,
                        current_txn_start_offset: s.current_txn_start_offset,
                    })
                    .collect();
                producers.sort_by_key(|s| s.producer_id);
                out.insert(p.partition_index, producers);
            }
        }
        if let Some(p) = asked.iter().find(|p| !out.contains_key(p)) {
            return Err(ClientError::MissingAnswer {
                what: format!("DescribeProducers did not answer for {topic} partition {p}"),
            });
        }
        Ok(out)
    }
}
