//! Consuming: look a topic's partitions up (Metadata), find where to start
//! (ListOffsets), then fetch from each partition's position onwards.
//!
//! A fetch answers whole record batches; records before the position asked
//! for are dropped, a batch cut off at the end of an answer is fetched
//! again next time, and control batches (transaction markers) hold no
//! records to return.

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;
use floe_storage::batch::{BatchError, BatchIter};
use floe_storage::records::{DEFAULT_MAX_DECOMPRESSED, Record, decode_records};
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::{BrokerId, FetchRequest, ListOffsetsRequest};

use crate::connection::{KafkaClient, topic_name};
use crate::error::{ClientError, check_code};

/// Bytes asked per partition and per Fetch.
const PARTITION_MAX_BYTES: i32 = 4 * 1024 * 1024;
const FETCH_MAX_BYTES: i32 = 32 * 1024 * 1024;

/// ListOffsets timestamp meaning "the first offset".
pub const EARLIEST: i64 = -2;
/// ListOffsets timestamp meaning "the next offset to be written".
pub const LATEST: i64 = -1;

/// What a reader sees of transactions (Kafka's `isolation.level`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Isolation {
    /// Every data record up to the high watermark, also of transactions
    /// still open or aborted (Kafka's default).
    #[default]
    ReadUncommitted,
    /// Records up to the last stable offset, without those of aborted
    /// transactions; the end offset (`LATEST`) is the last stable offset.
    ReadCommitted,
}

impl Isolation {
    /// The wire value (Fetch and ListOffsets `isolation_level`).
    pub fn code(self) -> i8 {
        match self {
            Isolation::ReadUncommitted => 0,
            Isolation::ReadCommitted => 1,
        }
    }
}

/// Where a [`Consumer`] starts in each partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartAt {
    Beginning,
    End,
    /// This offset.
    Offset(i64),
    /// This many records before the end (not before the beginning).
    BeforeEnd(i64),
    /// The first record at or after this time (ms since the epoch); the
    /// end where there is none.
    Time(i64),
}

/// Records fetched from one partition, in offset order.
#[derive(Debug, Clone, PartialEq)]
pub struct PartitionRecords {
    pub partition: i32,
    pub records: Vec<Record>,
}

/// What one [`Consumer::poll`] brought.
#[derive(Debug)]
pub struct Polled {
    pub partitions: Vec<PartitionRecords>,
    /// Whether any partition's position moved (records, or batches with
    /// none to return such as transaction markers).
    pub progressed: bool,
    /// A retriable error the broker answered for some partition (a leader
    /// moving); the caller may wait a little before the next poll.
    pub retriable: Option<ClientError>,
}

impl KafkaClient {
    /// The offset at `timestamp` ([`EARLIEST`], [`LATEST`], or ms since the
    /// epoch) in each of `partitions`.
    pub async fn list_offsets(
        &mut self,
        topic: &str,
        partitions: &[i32],
        timestamp: i64,
    ) -> Result<BTreeMap<i32, i64>, ClientError> {
        self.list_offsets_isolated(topic, partitions, timestamp, Isolation::ReadUncommitted)
            .await
    }

    /// [`Self::list_offsets`] at an isolation level: with
    /// [`Isolation::ReadCommitted`], [`LATEST`] is the last stable offset.
    pub async fn list_offsets_isolated(
        &mut self,
        topic: &str,
        partitions: &[i32],
        timestamp: i64,
        isolation: Isolation,
    ) -> Result<BTreeMap<i32, i64>, ClientError> {
        let version = self.version::<ListOffsetsRequest>()?;
        if version < 2 && isolation == Isolation::ReadCommitted {
            return Err(ClientError::InvalidInput(format!(
                "the broker speaks ListOffsets v{version}, without an isolation level \
                 (read_committed needs v2)"
            )));
        }
        let req = ListOffsetsRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_isolation_level(isolation.code())
            .with_topics(vec![
                ListOffsetsTopic::default()
                    .with_name(topic_name(topic))
                    .with_partitions(
                        partitions
                            .iter()
                            .map(|p| {
                                ListOffsetsPartition::default()
                                    .with_partition_index(*p)
                                    .with_timestamp(timestamp)
                            })
                            .collect(),
                    ),
            ]);
        let resp = self.send(version, req).await?;
        let mut offsets = BTreeMap::new();
        for t in resp.topics.iter().filter(|t| t.name.0.as_str() == topic) {
            for p in &t.partitions {
                check_code(p.error_code, None, || {
                    format!("listing offsets of {topic} partition {}", p.partition_index)
                })?;
                offsets.insert(p.partition_index, p.offset);
            }
        }
        if let Some(p) = partitions.iter().find(|p| !offsets.contains_key(p)) {
            return Err(ClientError::MissingAnswer {
                what: format!("ListOffsets did not answer for {topic} partition {p}"),
            });
        }
        Ok(offsets)
    }

    /// The first offset to read in each partition.
    pub async fn start_positions(
        &mut self,
        topic: &str,
        partitions: &[i32],
        start: StartAt,
        isolation: Isolation,
    ) -> Result<BTreeMap<i32, i64>, ClientError> {
        Ok(match start {
            StartAt::Beginning => self.list_offsets(topic, partitions, EARLIEST).await?,
            StartAt::End => {
                self.list_offsets_isolated(topic, partitions, LATEST, isolation)
                    .await?
            }
            StartAt::Offset(n) => partitions.iter().map(|p| (*p, n)).collect(),
            StartAt::Time(t) => {
                let at = self.list_offsets(topic, partitions, t.max(0)).await?;
                let end = self
                    .list_offsets_isolated(topic, partitions, LATEST, isolation)
                    .await?;
                at.into_iter()
                    .map(|(p, o)| {
                        let o = if o < 0 {
                            end.get(&p).copied().unwrap_or(0)
                        } else {
                            o
                        };
                        (p, o)
                    })
                    .collect()
            }
            StartAt::BeforeEnd(n) => {
                let first = self.list_offsets(topic, partitions, EARLIEST).await?;
                let end = self
                    .list_offsets_isolated(topic, partitions, LATEST, isolation)
                    .await?;
                end.into_iter()
                    .map(|(p, e)| {
                        let low = first.get(&p).copied().unwrap_or(0);
                        (p, e.saturating_sub(n).max(low))
                    })
                    .collect()
            }
        })
    }
}

/// Reads one topic (all partitions or one) over one connection.
#[derive(Debug)]
pub struct Consumer {
    client: KafkaClient,
    topic: String,
    version: i16,
    positions: BTreeMap<i32, i64>,
    round: usize,
    isolation: Isolation,
}

impl Consumer {
    /// Looks the topic up and finds the start of each partition read:
    /// every partition, or only `partition`.
    pub async fn new(
        client: KafkaClient,
        topic: &str,
        partition: Option<i32>,
        start: StartAt,
    ) -> Result<Self, ClientError> {
        Self::isolated(client, topic, partition, start, Isolation::ReadUncommitted).await
    }

    /// [`Self::new`] reading at an isolation level: with
    /// [`Isolation::ReadCommitted`] fetches stop at the last stable offset
    /// and records of aborted transactions are dropped.
    pub async fn isolated(
        mut client: KafkaClient,
        topic: &str,
        partition: Option<i32>,
        start: StartAt,
        isolation: Isolation,
    ) -> Result<Self, ClientError> {
        let mut partitions = client.topic(topic).await?.partition_ids();
        if let Some(p) = partition {
            if !partitions.contains(&p) {
                return Err(ClientError::InvalidInput(format!(
                    "topic {topic} has {} partition(s); there is no partition {p}",
                    partitions.len()
                )));
            }
            partitions = vec![p];
        }
        if partitions.is_empty() {
            return Err(ClientError::InvalidInput(format!(
                "topic {topic} has no partitions"
            )));
        }
        let positions = client
            .start_positions(topic, &partitions, start, isolation)
            .await?;
        let version = client.version::<FetchRequest>()?;
        Ok(Self {
            client,
            topic: topic.to_owned(),
            version,
            positions,
            round: 0,
            isolation,
        })
    }

    pub fn topic(&self) -> &str {
        &self.topic
    }

    /// The next offset to fetch, by partition.
    pub fn positions(&self) -> &BTreeMap<i32, i64> {
        &self.positions
    }

    /// Moves a partition read to `offset` (a committed offset, say); a
    /// partition this consumer does not read is ignored.
    pub fn seek(&mut self, partition: i32, offset: i64) {
        if let Some(p) = self.positions.get_mut(&partition) {
            *p = offset;
        }
    }

    /// The connection, for other requests between polls (committing).
    pub fn client_mut(&mut self) -> &mut KafkaClient {
        &mut self.client
    }

    /// One Fetch: waits on the broker for at most `max_wait` when nothing
    /// is there, and returns the records after each partition's position.
    pub async fn poll(&mut self, max_wait: Duration) -> Result<Polled, ClientError> {
        let req = fetch_request(
            &self.topic,
            &self.positions,
            self.round,
            max_wait,
            self.isolation,
        );
        self.round = self.round.wrapping_add(1);
        let resp = self.client.send(self.version, req).await?;
        let topic = &self.topic;
        check_code(resp.error_code, None, || format!("fetching {topic}"))?;
        let mut fetched = Vec::new();
        let mut retriable = None;
        for t in resp.responses {
            for p in t.partitions {
                let Some(&position) = self.positions.get(&p.partition_index) else {
                    continue;
                };
                let checked = check_code(p.error_code, None, || {
                    format!(
                        "fetching {topic} partition {} at offset {position}",
                        p.partition_index
                    )
                });
                match (checked, p.records) {
                    (Err(e), _) if e.is_retriable() => retriable = Some(e),
                    (Err(e), _) => return Err(e),
                    (Ok(()), Some(records)) if !records.is_empty() => {
                        // Read uncommitted, the list is empty: nothing is dropped.
                        let aborted = match self.isolation {
                            Isolation::ReadUncommitted => Vec::new(),
                            Isolation::ReadCommitted => p
                                .aborted_transactions
                                .unwrap_or_default()
                                .iter()
                                .map(|a| (a.producer_id.0, a.first_offset))
                                .collect(),
                        };
                        fetched.push((p.partition_index, records, position, aborted));
                    }
                    (Ok(()), _) => {}
                }
            }
        }
        // Decompression and CRC checks are CPU work: off the async threads.
        let decoded = tokio::task::spawn_blocking(move || {
            fetched
                .into_iter()
                .map(|(p, records, position, aborted)| {
                    decode_committed(&records, position, &aborted)
                        .map(|(recs, next)| (p, recs, next))
                        .map_err(|source| ClientError::Records {
                            what: format!("decoding partition {p} from offset {position}"),
                            source,
                        })
                })
                .collect::<Result<Vec<_>, ClientError>>()
        })
        .await
        .map_err(|source| ClientError::Task {
            what: "the decoding task failed".into(),
            source,
        })??;
        let mut progressed = false;
        let mut partitions = Vec::with_capacity(decoded.len());
        for (partition, records, next) in decoded {
            if self
                .positions
                .insert(partition, next)
                .is_some_and(|old| next > old)
            {
                progressed = true;
            }
            if !records.is_empty() {
                partitions.push(PartitionRecords { partition, records });
            }
        }
        Ok(Polled {
            partitions,
            progressed,
            retriable,
        })
    }

    /// Gives the connection back.
    pub fn into_client(self) -> KafkaClient {
        self.client
    }
}

fn fetch_request(
    topic: &str,
    positions: &BTreeMap<i32, i64>,
    round: usize,
    wait: Duration,
    isolation: Isolation,
) -> FetchRequest {
    let mut partitions: Vec<FetchPartition> = positions
        .iter()
        .map(|(p, offset)| {
            FetchPartition::default()
                .with_partition(*p)
                .with_fetch_offset(*offset)
                .with_partition_max_bytes(PARTITION_MAX_BYTES)
        })
        .collect();
    // Brokers fill the response in request order: rotate so that no
    // partition always comes last.
    if !partitions.is_empty() {
        let n = round % partitions.len();
        partitions.rotate_left(n);
    }
    FetchRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_max_wait_ms(i32::try_from(wait.as_millis()).unwrap_or(i32::MAX))
        .with_min_bytes(1)
        .with_max_bytes(FETCH_MAX_BYTES)
        .with_isolation_level(isolation.code())
        .with_topics(vec![
            FetchTopic::default()
                .with_topic(topic_name(topic))
                .with_partitions(partitions),
        ])
}

/// The records at or after `position` in a fetched partition's bytes, and the
/// next offset to fetch. A batch cut off at the end is left for the next fetch.
pub fn decode_partition(records: &Bytes, position: i64) -> Result<(Vec<Record>, i64), BatchError> {
    decode_committed(records, position, &[])
}

/// [`decode_partition`] for a `read_committed` fetch: `aborted` is its
/// `aborted_transactions` (producer id, first offset). A transactional batch
/// of a producer whose aborted transaction began at or before it, and whose
/// ABORT marker has not been passed yet, is dropped (as Kafka's consumers
/// do); the marker ends it.
pub fn decode_committed(
    records: &Bytes,
    mut position: i64,
    aborted: &[(i64, i64)],
) -> Result<(Vec<Record>, i64), BatchError> {
    let mut pending: Vec<(i64, i64)> = aborted.to_vec();
    // Oldest last, so that the next one to begin is popped first.
    pending.sort_unstable_by_key(|a| std::cmp::Reverse(a.1));
    let mut in_aborted: std::collections::HashSet<i64> = std::collections::HashSet::new();
    let mut out = Vec::new();
    for item in BatchIter::new(records, usize::MAX) {
        let (at, view) = match item {
            Ok(found) => found,
            Err(BatchError::Truncated { .. }) => break,
            Err(e) => return Err(e),
        };
        while pending.last().is_some_and(|a| a.1 <= view.last_offset()) {
            if let Some((pid, _)) = pending.pop() {
                in_aborted.insert(pid);
            }
        }
        let next = view.next_offset();
        let dropped = view.is_transactional() && in_aborted.contains(&view.producer_id());
        if view.is_control() {
            let batch = records.slice(at..at + view.size());
            if let Some(m) = floe_storage::control::read_marker(&batch)?
                && m.kind == floe_storage::control::ControlType::Abort
            {
                in_aborted.remove(&m.producer_id);
            }
        }
        if next <= position {
            continue;
        }
        // Control batches (transaction markers) hold no records to return.
        if !view.is_control() && !dropped {
            view.verify_crc()?;
            let batch = records.slice(at..at + view.size());
            out.extend(
                decode_records(&batch, DEFAULT_MAX_DECOMPRESSED)?
                    .into_iter()
                    .filter(|r| r.offset >= position),
            );
        }
        position = next;
    }
    Ok((out, position))
}

#[cfg(test)]
mod tests {
    use floe_storage::batch::Compression;
    use floe_storage::records::{BatchBuilder, RecordSpec};
    use kafka_protocol::ResponseError;
    use kafka_protocol::messages::fetch_response::{FetchableTopicResponse, PartitionData};
    use kafka_protocol::messages::list_offsets_response::{
        ListOffsetsPartitionResponse, ListOffsetsTopicResponse,
    };
    use kafka_protocol::messages::{FetchResponse, ListOffsetsResponse, RequestKind, ResponseKind};

    use super::*;
    use crate::error::ErrorKind;
    use crate::test_support::{fake_broker, modern, one_topic};

    fn batch(base: i64, n: usize, compression: Compression) -> Bytes {
        let mut b = BatchBuilder::new(base, 1_700_000_000_000);
        for i in 0..n {
            b.push(RecordSpec::new(
                Some(format!("k{i}").into_bytes()),
                Some(format!("v{}", base + i as i64).into_bytes()),
                0,
            ));
        }
        b.build(compression).expect("encoding a batch")
    }

    #[test]
    fn decoding_skips_records_before_the_position_and_a_cut_off_last_batch() {
        let mut all = Vec::new();
        all.extend_from_slice(&batch(0, 5, Compression::None));
        all.extend_from_slice(&batch(5, 5, Compression::Lz4));
        let third = batch(10, 5, Compression::None);
        all.extend_from_slice(&third[..third.len() / 2]);
        let (records, next) = decode_partition(&Bytes::from(all), 3).expect("decodes");
        let offsets: Vec<i64> = records.iter().map(|r| r.offset).collect();
        assert_eq!(offsets, vec![3, 4, 5, 6, 7, 8, 9]);
        assert_eq!(next, 10);
    }

    fn txn_batch(base: i64, n: usize, producer: i64) -> Vec<u8> {
        let mut b = BatchBuilder::new(base, 1_700_000_000_000).producer(producer, 0, 0, true);
        for i in 0..n {
            b.push(RecordSpec::new(
                None,
                Some(format!("p{producer}-{i}").into_bytes()),
                0,
            ));
        }
        b.build(Compression::None)
            .expect("encoding a batch")
            .to_vec()
    }

    fn marker(at: i64, producer: i64, kind: floe_storage::control::ControlType) -> Vec<u8> {
        let m = floe_storage::control::Marker {
            kind,
            producer_id: producer,
            producer_epoch: 0,
            coordinator_epoch: 0,
        };
        let mut b = floe_storage::control::marker_batch(&m, 1_700_000_000_000)
            .expect("a marker")
            .to_vec();
        floe_storage::batch::set_base_offset(&mut b, at).expect("rebased");
        b
    }

    #[test]
    fn read_committed_drops_the_aborted_transactions_until_their_marker() {
        use floe_storage::control::ControlType::{Abort, Commit};
        let mut all = Vec::new();
        all.extend(txn_batch(0, 3, 7)); // 0..=2: producer 7, aborted
        all.extend(txn_batch(3, 2, 8)); // 3..=4: producer 8, committed
        all.extend(marker(5, 7, Abort));
        all.extend(marker(6, 8, Commit));
        all.extend(txn_batch(7, 2, 7)); // 7..=8: producer 7's next one
        all.extend(batch(9, 1, Compression::None)); // not transactional
        let all = Bytes::from(all);
        let offsets = |aborted: &[(i64, i64)], from| {
            let (records, next) = decode_committed(&all, from, aborted).expect("decodes");
            assert_eq!(next, 10);
            records.iter().map(|r| r.offset).collect::<Vec<_>>()
        };
        assert_eq!(offsets(&[(7, 0)], 0), vec![3, 4, 7, 8, 9]);
        assert_eq!(offsets(&[(7, 0)], 2), vec![3, 4, 7, 8, 9]);
        assert_eq!(
            offsets(&[], 0),
            (0..10).filter(|o| ![5, 6].contains(o)).collect::<Vec<_>>()
        );
        assert_eq!(
            offsets(&[(8, 3)], 0),
            vec![0, 1, 2, 7, 8, 9],
            "a producer's own list"
        );
    }

    #[test]
    fn a_batch_with_a_bad_checksum_is_an_error() {
        let mut bytes = batch(0, 3, Compression::None).to_vec();
        let last = bytes.len() - 1;
        bytes[last] ^= 0xff;
        assert!(decode_partition(&Bytes::from(bytes), 0).is_err());
    }

    #[test]
    fn fetches_rotate_the_partition_order() {
        let positions: BTreeMap<i32, i64> = [(0, 10), (1, 20), (2, 30)].into();
        let order = |round| {
            fetch_request(
                "t",
                &positions,
                round,
                Duration::from_millis(100),
                Isolation::ReadUncommitted,
            )
            .topics[0]
                .partitions
                .iter()
                .map(|p| (p.partition, p.fetch_offset))
                .collect::<Vec<_>>()
        };
        assert_eq!(order(0), vec![(0, 10), (1, 20), (2, 30)]);
        assert_eq!(order(1), vec![(1, 20), (2, 30), (0, 10)]);
        assert_eq!(order(5), vec![(2, 30), (0, 10), (1, 20)]);
    }

    /// A broker with topic `t` of 2 partitions: earliest offsets 2 and 0,
    /// latest 10 and 1; Fetch answers partition 0 with a batch of offsets
    /// 0..5 and partition 1 with NOT_LEADER_OR_FOLLOWER.
    async fn consuming_broker() -> KafkaClient {
        let addr = fake_broker(move |req| {
            modern(req, |req| match &req.body {
                RequestKind::Metadata(_) => Some(one_topic("t", 2)),
                RequestKind::ListOffsets(list) => {
                    let topics = list
                        .topics
                        .iter()
                        .map(|t| {
                            let partitions = t
                                .partitions
                                .iter()
                                .map(|p| {
                                    let offset = match (p.partition_index, p.timestamp) {
                                        (0, EARLIEST) => 2,
                                        (0, _) => 10,
                                        (_, EARLIEST) => 0,
                                        (_, _) => 1,
                                    };
                                    ListOffsetsPartitionResponse::default()
                                        .with_partition_index(p.partition_index)
                                        .with_offset(offset)
                                })
                                .collect();
                            ListOffsetsTopicResponse::default()
                                .with_name(t.name.clone())
                                .with_partitions(partitions)
                        })
                        .collect();
                    Some(ResponseKind::ListOffsets(
                        ListOffsetsResponse::default().with_topics(topics),
                    ))
                }
                RequestKind::Fetch(_) => {
                    let partitions = vec![
                        PartitionData::default()
                            .with_partition_index(0)
                            .with_records(Some(batch(0, 5, Compression::None))),
                        PartitionData::default()
                            .with_partition_index(1)
                            .with_error_code(ResponseError::NotLeaderOrFollower.code()),
                    ];
                    Some(ResponseKind::Fetch(
                        FetchResponse::default().with_responses(vec![
                            FetchableTopicResponse::default()
                                .with_topic(topic_name("t"))
                                .with_partitions(partitions),
                        ]),
                    ))
                }
                _ => None,
            })
        })
        .await;
        KafkaClient::connect(&addr, Duration::from_secs(5))
            .await
            .expect("connects")
    }

    #[tokio::test]
    async fn start_positions_follow_the_listed_offsets() {
        let mut client = consuming_broker().await;
        let at = |pairs: &[(i32, i64)]| pairs.iter().copied().collect::<BTreeMap<_, _>>();
        let cases = [
            (StartAt::Beginning, at(&[(0, 2), (1, 0)])),
            (StartAt::End, at(&[(0, 10), (1, 1)])),
            (StartAt::Offset(4), at(&[(0, 4), (1, 4)])),
            // Three before the end, but never before the beginning.
            (StartAt::BeforeEnd(3), at(&[(0, 7), (1, 0)])),
        ];
        for (start, expected) in cases {
            let got = client
                .start_positions("t", &[0, 1], start, Isolation::ReadUncommitted)
                .await
                .expect("lists");
            assert_eq!(got, expected, "{start:?}");
        }
    }

    #[tokio::test]
    async fn a_poll_returns_records_after_the_position_and_a_retriable_error() {
        let client = consuming_broker().await;
        let mut consumer = Consumer::new(client, "t", None, StartAt::Beginning)
            .await
            .expect("a consumer");
        let polled = consumer
            .poll(Duration::from_millis(10))
            .await
            .expect("polls");
        assert!(polled.progressed);
        assert_eq!(polled.partitions.len(), 1);
        let offsets: Vec<i64> = polled.partitions[0]
            .records
            .iter()
            .map(|r| r.offset)
            .collect();
        assert_eq!(offsets, vec![2, 3, 4]);
        assert_eq!(consumer.positions().get(&0), Some(&5));
        assert_eq!(consumer.positions().get(&1), Some(&0));
        let retriable = polled.retriable.expect("partition 1 had no leader");
        assert!(retriable.is_retriable());
    }

    #[tokio::test]
    async fn a_partition_the_topic_lacks_is_refused() {
        let client = consuming_broker().await;
        let err = Consumer::new(client, "t", Some(5), StartAt::Beginning)
            .await
            .expect_err("no partition 5");
        assert_eq!(err.kind(), ErrorKind::InvalidInput);
        assert_eq!(
            err.to_string(),
            "topic t has 2 partition(s); there is no partition 5"
        );
    }
}
