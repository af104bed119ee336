//! Producing: records to a topic's partitions, one Produce request per
//! [`Producer::send`], with one record batch (magic 2) per partition.
//!
//! Keyed records go to the partition Kafka's default partitioner picks
//! (murmur2 of the key); unkeyed ones to one partition per call, in turn.
//! Partitions the broker answers with a retriable error are sent again,
//! with a backoff, up to [`ProducerConfig::max_attempts`] times.

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;
use floe_storage::batch::{BatchError, Compression};
use floe_storage::records::{BatchBuilder, RecordSpec};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{InitProducerIdRequest, ProduceRequest};

use crate::connection::{KafkaClient, topic_name};
use crate::error::{ClientError, check_code};
use crate::partitioner::choose_partition;

/// Which acknowledgement a Produce request waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Acks {
    /// Until the records are durable (acks=-1).
    #[default]
    All,
    /// Until the partition's leader has them (acks=1).
    Leader,
    /// No answer at all (acks=0).
    None,
}

impl Acks {
    /// The value of the request's `acks` field.
    pub fn kafka(self) -> i16 {
        match self {
            Self::All => -1,
            Self::Leader => 1,
            Self::None => 0,
        }
    }
}

/// How a [`Producer`] writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProducerConfig {
    pub acks: Acks,
    pub compression: Compression,
    /// Every record to this partition (else by key, or in turn).
    pub partition: Option<i32>,
    /// Attempts of one request while the broker answers retriable errors.
    pub max_attempts: u32,
    /// Write as an idempotent producer (a producer id from InitProducerId
    /// and a sequence per partition), so that a retried request is not
    /// written twice. Needs `acks=all`, as in Kafka.
    pub idempotent: bool,
}

impl Default for ProducerConfig {
    fn default() -> Self {
        Self {
            acks: Acks::All,
            compression: Compression::None,
            partition: None,
            max_attempts: 10,
            idempotent: true,
        }
    }
}

/// One record to produce.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ProducerRecord {
    pub key: Option<Vec<u8>>,
    /// `None` is a null value: a tombstone in a compacted topic.
    pub value: Option<Vec<u8>>,
    /// Creation time, ms since the Unix epoch.
    pub timestamp_ms: i64,
    /// Headers in order: name and value (`None` for a null value).
    pub headers: Vec<(Vec<u8>, Option<Vec<u8>>)>,
}

impl ProducerRecord {
    /// A record with a value and no key nor headers.
    pub fn value(value: impl Into<Vec<u8>>, timestamp_ms: i64) -> Self {
        Self {
            value: Some(value.into()),
            timestamp_ms,
            ..Self::default()
        }
    }

    /// Key, value and header bytes.
    pub fn size(&self) -> usize {
        let headers: usize = self
            .headers
            .iter()
            .map(|(k, v)| k.len() + v.as_ref().map_or(0, Vec::len))
            .sum();
        self.key.as_ref().map_or(0, Vec::len) + self.value.as_ref().map_or(0, Vec::len) + headers
    }
}

/// The identity of an idempotent producer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProducerIdentity {
    pub id: i64,
    pub epoch: i16,
}

/// What was written to one partition.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PartitionStats {
    pub records: u64,
    /// Offsets of the first and last record written (unknown with acks=0).
    pub first_offset: Option<i64>,
    pub last_offset: Option<i64>,
}

/// Record batches ready to send, by partition: the bytes and the record count.
type Batches = BTreeMap<i32, (Bytes, i64)>;

/// Writes records to one topic over one connection.
#[derive(Debug)]
pub struct Producer {
    client: KafkaClient,
    topic: String,
    version: i16,
    config: ProducerConfig,
    partitions: i32,
    next_round_robin: i32,
    requests: u64,
    stats: BTreeMap<i32, PartitionStats>,
    /// The producer id when idempotent, and the next sequence per partition.
    identity: Option<ProducerIdentity>,
    sequences: BTreeMap<i32, i32>,
}

impl Producer {
    /// Looks the topic up and checks `config.partition` against it.
    pub async fn new(
        mut client: KafkaClient,
        topic: &str,
        config: ProducerConfig,
    ) -> Result<Self, ClientError> {
        let partitions = client.topic(topic).await?.partitions.len();
        let partitions = i32::try_from(partitions).map_err(|_| {
            ClientError::InvalidInput(format!("topic {topic}: too many partitions"))
        })?;
        if partitions == 0 {
            return Err(ClientError::InvalidInput(format!(
                "topic {topic} has no partitions"
            )));
        }
        if let Some(p) = config.partition
            && !(0..partitions).contains(&p)
        {
            return Err(ClientError::InvalidInput(format!(
                "topic {topic} has {partitions} partition(s); there is no partition {p}"
            )));
        }
        let version = client.version::<ProduceRequest>()?;
        let identity = if config.idempotent && config.acks == Acks::All {
            Some(init_producer_id(&mut client).await?)
        } else {
            None
        };
        Ok(Self {
            client,
            topic: topic.to_owned(),
            version,
            config: ProducerConfig {
                max_attempts: config.max_attempts.max(1),
                ..config
            },
            partitions,
            next_round_robin: 0,
            requests: 0,
            stats: BTreeMap::new(),
            identity,
            sequences: BTreeMap::new(),
        })
    }

    pub fn topic(&self) -> &str {
        &self.topic
    }

    pub fn config(&self) -> &ProducerConfig {
        &self.config
    }

    /// The topic's partition count.
    pub fn partitions(&self) -> i32 {
        self.partitions
    }

    /// The producer id and epoch, when writing idempotently.
    pub fn identity(&self) -> Option<ProducerIdentity> {
        self.identity
    }

    /// Produce requests sent so far (retries included).
    pub fn requests(&self) -> u64 {
        self.requests
    }

    /// What was written, by partition.
    pub fn stats(&self) -> &BTreeMap<i32, PartitionStats> {
        &self.stats
    }

    /// Sends `records` in one request, one batch per partition; returns once
    /// the broker acknowledged every partition (at once with acks=0).
    pub async fn send(&mut self, records: Vec<ProducerRecord>) -> Result<(), ClientError> {
        if records.is_empty() {
            return Ok(());
        }
        let round_robin = self.next_round_robin;
        self.next_round_robin = (self.next_round_robin + 1) % self.partitions;
        let mut by_partition: BTreeMap<i32, Vec<ProducerRecord>> = BTreeMap::new();
        for r in records {
            let p = choose_partition(
                r.key.as_deref(),
                self.config.partition,
                self.partitions,
                round_robin,
            );
            by_partition.entry(p).or_default().push(r);
        }
        let compression = self.config.compression;
        let identity = self.identity;
        let sequences = self.sequences.clone();
        // Compression is CPU work: keep it off the async threads.
        let batches = tokio::task::spawn_blocking(move || {
            build_batches(by_partition, compression, identity, &sequences)
        })
        .await
        .map_err(|source| ClientError::Task {
            what: "the batch-building task failed".into(),
            source,
        })?
        .map_err(|source| ClientError::Records {
            what: "building record batches".into(),
            source,
        })?;
        self.produce_with_retries(batches).await
    }

    /// With acks=0 nothing is answered: a Metadata round trip makes sure
    /// the broker has read every request sent before. A no-op otherwise.
    pub async fn flush(&mut self) -> Result<(), ClientError> {
        if self.config.acks == Acks::None {
            self.client.metadata(Some(&[self.topic.as_str()])).await?;
        }
        Ok(())
    }

    /// Gives the connection back.
    pub fn into_client(self) -> KafkaClient {
        self.client
    }

    async fn produce_with_retries(&mut self, mut batches: Batches) -> Result<(), ClientError> {
        let mut backoff = Duration::from_millis(100);
        let attempts = self.config.max_attempts;
        let mut retriable: Option<ClientError> = None;
        for attempt in 1..=attempts {
            if attempt > 1 {
                tracing::debug!(attempt, ?backoff, "retrying produce");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(1));
            }
            let req = self.request(&batches);
            self.requests += 1;
            if self.config.acks == Acks::None {
                self.client.send_only(self.version, req).await?;
                for (p, (_, n)) in batches {
                    self.stats.entry(p).or_default().records += n as u64;
                }
                return Ok(());
            }
            let resp = self.client.send(self.version, req).await?;
            retriable = None;
            let answers = resp
                .responses
                .iter()
                .filter(|t| t.name.0.as_str() == self.topic)
                .flat_map(|t| t.partition_responses.iter());
            for answer in answers {
                let Some((_, count)) = batches.get(&answer.index) else {
                    continue;
                };
                let count = *count;
                let topic = &self.topic;
                let checked = check_code(answer.error_code, answer.error_message.as_ref(), || {
                    format!("producing to {topic} partition {}", answer.index)
                });
                match checked {
                    Ok(()) => {
                        batches.remove(&answer.index);
                        if self.identity.is_some() {
                            let next = self.sequences.entry(answer.index).or_insert(0);
                            *next = next_sequence(*next, count);
                        }
                        let s = self.stats.entry(answer.index).or_default();
                        s.records += count as u64;
                        if answer.base_offset >= 0 {
                            s.first_offset.get_or_insert(answer.base_offset);
                            s.last_offset = Some(answer.base_offset + count - 1);
                        }
                    }
                    Err(e) if e.is_retriable() => retriable = Some(e),
                    Err(e) => return Err(e),
                }
            }
            if batches.is_empty() {
                return Ok(());
            }
        }
        match retriable {
            Some(ClientError::Broker {
                what,
                error,
                message,
            }) => Err(ClientError::Broker {
                what: format!("{what} (still failing after {attempts} attempts)"),
                error,
                message,
            }),
            Some(other) => Err(other),
            None => {
                let missing: Vec<String> = batches.keys().map(i32::to_string).collect();
                Err(ClientError::MissingAnswer {
                    what: format!(
                        "the broker did not answer for partition(s) {} of {}",
                        missing.join(", "),
                        self.topic
                    ),
                })
            }
        }
    }

    fn request(&self, batches: &Batches) -> ProduceRequest {
        let partition_data = batches
            .iter()
            .map(|(p, (records, _))| {
                PartitionProduceData::default()
                    .with_index(*p)
                    .with_records(Some(records.clone()))
            })
            .collect();
        ProduceRequest::default()
            .with_acks(self.config.acks.kafka())
            .with_timeout_ms(self.client.timeout_ms())
            .with_topic_data(vec![
                TopicProduceData::default()
                    .with_name(topic_name(&self.topic))
                    .with_partition_data(partition_data),
            ])
    }
}

/// A new producer id (InitProducerId without a transactional id).
async fn init_producer_id(client: &mut KafkaClient) -> Result<ProducerIdentity, ClientError> {
    let version = client.version::<InitProducerIdRequest>()?;
    let req = InitProducerIdRequest::default()
        .with_transactional_id(None)
        .with_transaction_timeout_ms(client.timeout_ms())
        .with_producer_id(kafka_protocol::messages::ProducerId(-1))
        .with_producer_epoch(-1);
    let resp = client.send(version, req).await?;
    check_code(resp.error_code, None, || "getting a producer id".into())?;
    Ok(ProducerIdentity {
        id: resp.producer_id.0,
        epoch: resp.producer_epoch,
    })
}

/// The sequence after `count` records from `sequence`: Kafka's sequences
/// wrap from `i32::MAX` to 0.
fn next_sequence(sequence: i32, count: i64) -> i32 {
    let next = (i64::from(sequence) + count) % (i64::from(i32::MAX) + 1);
    i32::try_from(next).unwrap_or(0)
}

/// Encodes one batch per partition, with the records' own timestamps, and
/// the producer id and each partition's next sequence when idempotent.
fn build_batches(
    by_partition: BTreeMap<i32, Vec<ProducerRecord>>,
    compression: Compression,
    identity: Option<ProducerIdentity>,
    sequences: &BTreeMap<i32, i32>,
) -> Result<Batches, BatchError> {
    let mut out = Batches::new();
    for (p, records) in by_partition {
        let base = records.iter().map(|r| r.timestamp_ms).min().unwrap_or(0);
        let mut builder = BatchBuilder::new(0, base);
        if let Some(id) = identity {
            let sequence = sequences.get(&p).copied().unwrap_or(0);
            builder = builder.producer(id.id, id.epoch, sequence, false);
        }
        let count = records.len() as i64;
        for r in records {
            let mut spec = RecordSpec::new(r.key, r.value, r.timestamp_ms - base);
            spec.headers = r.headers;
            builder.push(spec);
        }
        out.insert(p, (builder.build(compression)?, count));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use floe_storage::records::{DEFAULT_MAX_DECOMPRESSED, decode_records};
    use kafka_protocol::ResponseError;
    use kafka_protocol::messages::produce_response::{
        PartitionProduceResponse, TopicProduceResponse,
    };
    use kafka_protocol::messages::{ProduceResponse, RequestKind, ResponseKind};

    use super::*;
    use crate::error::ErrorKind;
    use crate::test_support::{fake_broker, modern, one_topic};

    fn record(key: Option<&str>, value: &str) -> ProducerRecord {
        ProducerRecord {
            key: key.map(|k| k.as_bytes().to_vec()),
            value: Some(value.as_bytes().to_vec()),
            timestamp_ms: 1_000,
            headers: vec![],
        }
    }

    #[test]
    fn batches_are_grouped_per_partition_with_their_counts() {
        let mut by_partition = BTreeMap::new();
        for p in 0..2 {
            let records = (0..3)
                .map(|i| ProducerRecord::value(format!("{p}-{i}"), 1_000 + i))
                .collect();
            by_partition.insert(p, records);
        }
        let batches =
            build_batches(by_partition, Compression::Gzip, None, &BTreeMap::new()).expect("builds");
        assert_eq!(batches.len(), 2);
        for (p, (bytes, count)) in batches {
            assert_eq!(count, 3);
            let recs = decode_records(&bytes, DEFAULT_MAX_DECOMPRESSED).expect("decodes");
            assert_eq!(recs[2].value.as_deref(), Some(format!("{p}-2").as_bytes()));
            assert_eq!(recs[2].timestamp, 1_002);
        }
    }

    #[test]
    fn sequences_wrap_to_zero_after_i32_max() {
        assert_eq!(next_sequence(0, 3), 3);
        assert_eq!(next_sequence(i32::MAX - 1, 1), i32::MAX);
        assert_eq!(next_sequence(i32::MAX, 1), 0);
        assert_eq!(next_sequence(i32::MAX - 1, 4), 2);
    }

    #[test]
    fn idempotent_batches_carry_the_producer_id_and_each_partitions_sequence() {
        let mut by_partition = BTreeMap::new();
        by_partition.insert(0, vec![ProducerRecord::value("a", 1)]);
        by_partition.insert(1, vec![ProducerRecord::value("b", 1)]);
        let sequences = BTreeMap::from([(1, 7)]);
        let identity = ProducerIdentity { id: 42, epoch: 3 };
        let batches = build_batches(by_partition, Compression::None, Some(identity), &sequences)
            .expect("builds");
        for (p, want) in [(0, 0), (1, 7)] {
            let bytes = &batches[&p].0;
            let view = floe_storage::batch::BatchView::parse(bytes, usize::MAX).expect("a batch");
            assert_eq!(view.producer_id(), 42);
            assert_eq!(view.producer_epoch(), 3);
            assert_eq!(view.base_sequence(), want, "partition {p}");
        }
    }

    #[test]
    fn acks_are_kafkas_values() {
        assert_eq!(Acks::All.kafka(), -1);
        assert_eq!(Acks::Leader.kafka(), 1);
        assert_eq!(Acks::None.kafka(), 0);
    }

    /// A broker with topic `t` of 2 partitions whose Produce answers
    /// `code_of(attempt)` for every partition, with base offset 5; returns
    /// its address and the count of Produce requests it saw.
    async fn producing_broker(
        code_of: impl Fn(usize) -> i16 + Send + Sync + 'static,
    ) -> (String, Arc<AtomicUsize>) {
        let produces = Arc::new(AtomicUsize::new(0));
        let seen = produces.clone();
        let addr = fake_broker(move |req| {
            modern(req, |req| match &req.body {
                RequestKind::Metadata(_) => Some(one_topic("t", 2)),
                RequestKind::Produce(produce) => {
                    let attempt = seen.fetch_add(1, Ordering::SeqCst) + 1;
                    let topics = produce
                        .topic_data
                        .iter()
                        .map(|t| {
                            TopicProduceResponse::default()
                                .with_name(t.name.clone())
                                .with_partition_responses(
                                    t.partition_data
                                        .iter()
                                        .map(|p| {
                                            PartitionProduceResponse::default()
                                                .with_index(p.index)
                                                .with_error_code(code_of(attempt))
                                                .with_base_offset(5)
                                        })
                                        .collect(),
                                )
                        })
                        .collect();
                    Some(ResponseKind::Produce(
                        ProduceResponse::default().with_responses(topics),
                    ))
                }
                _ => None,
            })
        })
        .await;
        (addr, produces)
    }

    async fn producer(addr: &str, config: ProducerConfig) -> Result<Producer, ClientError> {
        let client = KafkaClient::connect(addr, Duration::from_secs(5))
            .await
            .expect("connects");
        // The fake broker does not answer InitProducerId.
        let config = ProducerConfig {
            idempotent: false,
            ..config
        };
        Producer::new(client, "t", config).await
    }

    #[tokio::test]
    async fn a_partition_the_topic_lacks_is_refused() {
        let (addr, _) = producing_broker(|_| 0).await;
        let config = ProducerConfig {
            partition: Some(2),
            idempotent: false,
            ..ProducerConfig::default()
        };
        let err = producer(&addr, config).await.expect_err("no partition 2");
        assert_eq!(err.kind(), ErrorKind::InvalidInput);
        assert!(err.to_string().contains("there is no partition 2"), "{err}");
    }

    #[tokio::test]
    async fn retriable_errors_are_retried_and_offsets_recorded() {
        let not_leader = ResponseError::NotLeaderOrFollower.code();
        let (addr, produces) =
            producing_broker(move |attempt| if attempt == 1 { not_leader } else { 0 }).await;
        let config = ProducerConfig {
            partition: Some(1),
            idempotent: false,
            ..ProducerConfig::default()
        };
        let mut p = producer(&addr, config).await.expect("a producer");
        p.send(vec![
            record(None, "a"),
            record(Some("k"), "b"),
            record(None, "c"),
        ])
        .await
        .expect("sent on the second attempt");
        assert_eq!(produces.load(Ordering::SeqCst), 2);
        assert_eq!(p.requests(), 2);
        assert_eq!(
            p.stats().get(&1),
            Some(&PartitionStats {
                records: 3,
                first_offset: Some(5),
                last_offset: Some(7),
            })
        );
        assert!(
            p.stats().get(&0).is_none(),
            "everything went to partition 1"
        );
    }

    #[tokio::test]
    async fn a_partition_that_stays_unavailable_fails_after_the_last_attempt() {
        let not_leader = ResponseError::NotLeaderOrFollower.code();
        let (addr, produces) = producing_broker(move |_| not_leader).await;
        let config = ProducerConfig {
            max_attempts: 2,
            idempotent: false,
            ..ProducerConfig::default()
        };
        let mut p = producer(&addr, config).await.expect("a producer");
        let err = p
            .send(vec![record(None, "a")])
            .await
            .expect_err("never acknowledged");
        assert_eq!(produces.load(Ordering::SeqCst), 2);
        assert!(err.is_retriable());
        let text = err.to_string();
        assert!(text.contains("NOT_LEADER_OR_FOLLOWER"), "{text}");
        assert!(text.contains("still failing after 2 attempts"), "{text}");
    }

    #[tokio::test]
    async fn a_fatal_broker_error_is_not_retried() {
        let too_large = ResponseError::MessageTooLarge.code();
        let (addr, produces) = producing_broker(move |_| too_large).await;
        let mut p = producer(&addr, ProducerConfig::default())
            .await
            .expect("a producer");
        let err = p
            .send(vec![record(Some("k"), "v")])
            .await
            .expect_err("too large");
        assert_eq!(produces.load(Ordering::SeqCst), 1);
        assert_eq!(err.broker_error(), Some(ResponseError::MessageTooLarge));
    }

    #[tokio::test]
    async fn nothing_to_send_sends_nothing() {
        let (addr, produces) = producing_broker(|_| 0).await;
        let mut p = producer(&addr, ProducerConfig::default())
            .await
            .expect("a producer");
        p.send(Vec::new()).await.expect("nothing to do");
        assert_eq!(produces.load(Ordering::SeqCst), 0);
        assert_eq!(p.requests(), 0);
    }
}
