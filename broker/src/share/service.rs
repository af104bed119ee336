//! Share groups served in one process: the share groups' membership (as
//! their coordinator) and the share-partitions (as the partitions' owner),
//! in memory, over any [`PartitionOwner`] for the records.
//!
//! This first stretch runs where the partition owner and the coordinator
//! are the proxy's own broker (`floe standalone`); the next one moves the
//! share-partitions into [`crate::Broker`] behind the internal RPC and makes
//! their state durable (`docs/queues.md`).

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::{Bytes, BytesMut};
use floe_storage::PartitionKey;
use floe_types::Offset;

use super::group::{
    Heartbeat, HeartbeatAnswer, ShareGroup, ShareGroupConfig, ShareGroupDescription,
    ShareGroupError, TopicInfo,
};
use super::partition::{AckBatch, Acquired, MemberId, ShareConfig, ShareError, SharePartition};
use crate::broker::OffsetSpec;
use crate::error::{CallError, ErrorKind};
use crate::owner::PartitionOwner;

/// Where a new share-partition starts (the group's
/// `share.auto.offset.reset`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AutoOffsetReset {
    Earliest,
    /// Kafka's default: only records produced from now on.
    #[default]
    Latest,
}

/// What one ShareFetch got from one partition.
#[derive(Debug)]
pub struct ShareFetched {
    /// Whole batches holding the acquired records (and possibly others,
    /// which the client skips: it delivers only acquired offsets).
    pub records: Bytes,
    pub acquired: Vec<Acquired>,
    /// The partition's high watermark when it was read (-1: not read), for
    /// a fetch that acquired nothing to wait for it to move.
    pub high_watermark: i64,
}

/// Share groups and share-partitions of this process.
#[derive(Debug)]
pub struct ShareService {
    partition_config: ShareConfig,
    group_config: ShareGroupConfig,
    reset: AutoOffsetReset,
    groups: Mutex<HashMap<String, ShareGroup>>,
    partitions: Mutex<HashMap<(String, PartitionKey), SharePartition>>,
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The offset just past the last batch of `records` (whole batches in
/// offset order, as a fetch returns them); `None` if none is whole.
fn end_of_batches(records: &[u8]) -> Option<i64> {
    let mut pos = 0usize;
    let mut end = None;
    while let Some(header) = records.get(pos..pos + 27) {
        let base = i64::from_be_bytes(header[0..8].try_into().ok()?);
        let len = i32::from_be_bytes(header[8..12].try_into().ok()?);
        let delta = i32::from_be_bytes(header[23..27].try_into().ok()?);
        let size = usize::try_from(len).ok()?.checked_add(12)?;
        if records.len() < pos + size {
            break;
        }
        end = Some(base + i64::from(delta) + 1);
        pos += size;
    }
    end
}

impl ShareFetched {
    /// Nothing acquired; the log was read up to `high_watermark`.
    fn nothing(high_watermark: i64) -> Self {
        Self {
            records: Bytes::new(),
            acquired: Vec::new(),
            high_watermark,
        }
    }
}

impl ShareService {
    pub fn new(
        partition_config: ShareConfig,
        group_config: ShareGroupConfig,
        reset: AutoOffsetReset,
    ) -> Self {
        Self {
            partition_config,
            group_config,
            reset,
            groups: Mutex::new(HashMap::new()),
            partitions: Mutex::new(HashMap::new()),
        }
    }

    pub fn lock_duration_ms(&self) -> u64 {
        self.partition_config.lock_duration_ms
    }

    /// A ShareGroupHeartbeat; members that timed out release their records.
    pub fn heartbeat(
        &self,
        group_id: &str,
        hb: &Heartbeat,
        topics: &dyn Fn(&str) -> Option<TopicInfo>,
    ) -> Result<HeartbeatAnswer, ShareGroupError> {
        let now = now_ms();
        let (answer, mut gone) = {
            let mut groups = lock(&self.groups);
            // A refused first heartbeat leaves no group behind.
            let existed = groups.contains_key(group_id);
            let mut group = groups
                .remove(group_id)
                .unwrap_or_else(|| ShareGroup::new(group_id, self.group_config));
            let gone = group.expire(now, topics);
            let answer = group.heartbeat(hb, now, topics);
            if existed || answer.is_ok() {
                groups.insert(group_id.to_owned(), group);
            }
            (answer, gone)
        };
        if hb.member_epoch == -1 && answer.is_ok() {
            gone.push(hb.member_id.clone());
        }
        for member in &gone {
            self.release_member(group_id, member);
        }
        answer
    }

    pub fn describe(&self, group_id: &str) -> Option<ShareGroupDescription> {
        lock(&self.groups).get(group_id).map(ShareGroup::describe)
    }

    /// Whether `member` is in `group_id` now.
    pub fn has_member(&self, group_id: &str, member: &MemberId) -> bool {
        lock(&self.groups)
            .get(group_id)
            .is_some_and(|g| g.has_member(member))
    }

    /// Releases every record `member` holds in `group_id` (its share session
    /// closed, or it left).
    pub fn release_member(&self, group_id: &str, member: &MemberId) {
        let now = now_ms();
        for ((g, _), sp) in lock(&self.partitions).iter_mut() {
            if g == group_id {
                sp.release_member(member, now);
            }
        }
    }

    /// Applies a member's acknowledgements on one partition, batch by batch;
    /// the first refusal is answered (the batches before it stand, as in
    /// Kafka).
    pub fn acknowledge(
        &self,
        group_id: &str,
        key: &PartitionKey,
        member: &MemberId,
        batches: &[AckBatch],
    ) -> Result<(), ShareError> {
        let now = now_ms();
        let mut partitions = lock(&self.partitions);
        let Some(sp) = partitions.get_mut(&(group_id.to_owned(), *key)) else {
            return match batches.first() {
                Some(b) => Err(ShareError::InvalidRecordState { offset: b.first }),
                None => Ok(()),
            };
        };
        let mut result = Ok(());
        for batch in batches {
            if let Err(e) = sp.acknowledge(member, batch, now)
                && result.is_ok()
            {
                result = Err(e);
            }
        }
        result
    }

    /// Acquires up to `max_records` records of one partition for `member`
    /// and reads the batches holding them (up to `max_bytes`, at least one
    /// batch). A share-partition seen for the first time starts at the
    /// log's start or end (`share.auto.offset.reset`).
    pub async fn fetch(
        &self,
        owner: &dyn PartitionOwner,
        group_id: &str,
        key: &PartitionKey,
        member: &MemberId,
        max_records: u32,
        max_bytes: usize,
    ) -> Result<ShareFetched, CallError> {
        let id = (group_id.to_owned(), *key);
        let exists = lock(&self.partitions).contains_key(&id);
        if !exists {
            let spec = match self.reset {
                AutoOffsetReset::Earliest => OffsetSpec::Earliest,
                AutoOffsetReset::Latest => OffsetSpec::Latest,
            };
            let (start, _) = owner.list_offset(key, spec, None).await?;
            lock(&self.partitions).entry(id.clone()).or_insert_with(|| {
                SharePartition::new(self.partition_config, Offset(start.offset))
            });
        }
        let from = match lock(&self.partitions).get_mut(&id) {
            Some(sp) => sp.first_acquirable(now_ms()),
            None => return Ok(ShareFetched::nothing(-1)),
        };
        let data = match owner.fetch(key, from.0, max_bytes.max(1), None).await {
            // Retention or DeleteRecords moved the log start past the
            // share-partition's start: what is gone is gone for it too.
            Err(CallError::Broker(e)) if e.kind() == ErrorKind::OffsetOutOfRange => {
                let (start, _) = owner.list_offset(key, OffsetSpec::Earliest, None).await?;
                if let Some(sp) = lock(&self.partitions).get_mut(&id) {
                    sp.advance_log_start(Offset(start.offset));
                }
                return Ok(ShareFetched::nothing(-1));
            }
            other => other?,
        };
        let hw = data.high_watermark;
        if hw <= from.0 || data.records.is_empty() {
            return Ok(ShareFetched::nothing(hw));
        }
        let mut buf = BytesMut::with_capacity(data.bytes());
        for piece in &data.records {
            buf.extend_from_slice(piece);
        }
        let records = buf.freeze();
        let limit = end_of_batches(&records)
            .map_or(data.high_watermark, |end| end.min(data.high_watermark));
        let acquired = match lock(&self.partitions).get_mut(&id) {
            Some(sp) => {
                sp.advance_log_start(Offset(data.log_start_offset));
                sp.acquire(member, max_records, Offset(limit), now_ms())
            }
            None => Vec::new(),
        };
        if acquired.is_empty() {
            return Ok(ShareFetched::nothing(hw));
        }
        Ok(ShareFetched {
            records,
            acquired,
            high_watermark: hw,
        })
    }

    /// The earliest moment a share-partition of `group_id` on `key` has a
    /// lock to expire or a backoff to end, for a fetch waiting for records.
    pub fn next_deadline_ms(&self, group_id: &str, key: &PartitionKey) -> Option<u64> {
        lock(&self.partitions)
            .get(&(group_id.to_owned(), *key))
            .and_then(|sp| sp.next_deadline(now_ms()))
    }

    /// Now, on the clock locks run on.
    pub fn now_ms(&self) -> u64 {
        now_ms()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::sync::Mutex;

    use floe_storage::batch::Compression;
    use floe_storage::records::{BatchBuilder, RecordSpec};
    use floe_types::TopicId;

    use super::*;
    use crate::broker::{Acks, FetchData, OffsetAnswer, PendingProduce};
    use crate::error::BrokerError;
    use crate::share::partition::{AckType, DurableState};

    /// A log of batches of 3 records each, from `start` (the log start) up.
    #[derive(Debug)]
    struct FakeLog {
        start: Mutex<i64>,
        batches: Vec<(i64, Bytes)>,
    }

    impl FakeLog {
        fn new(batches: i64) -> Self {
            let batches = (0..batches)
                .map(|b| {
                    let mut builder = BatchBuilder::new(b * 3, 1_700_000_000_000);
                    for i in 0..3 {
                        builder.push(RecordSpec::new(None, Some(vec![i as u8]), 0));
                    }
                    (b * 3, builder.build(Compression::None).unwrap())
                })
                .collect();
            Self {
                start: Mutex::new(0),
                batches,
            }
        }

        fn hw(&self) -> i64 {
            self.batches.len() as i64 * 3
        }
    }

    #[async_trait::async_trait]
    impl PartitionOwner for FakeLog {
        async fn append(
            &self,
            _: &PartitionKey,
            _: Bytes,
            _: Acks,
            _: std::time::Duration,
        ) -> Result<PendingProduce, CallError> {
            Err(BrokerError::new(ErrorKind::InvalidRequest, "read only").into())
        }

        async fn fetch_isolated(
            &self,
            _: &PartitionKey,
            offset: i64,
            max_bytes: usize,
            _: Option<u64>,
            _: bool,
        ) -> Result<FetchData, CallError> {
            let start = *self.start.lock().unwrap();
            if offset < start || offset > self.hw() {
                return Err(BrokerError::new(ErrorKind::OffsetOutOfRange, "out").into());
            }
            let mut records: Vec<Bytes> = Vec::new();
            let mut size = 0;
            for (base, b) in &self.batches {
                if base + 3 <= offset || (!records.is_empty() && size + b.len() > max_bytes) {
                    continue;
                }
                size += b.len();
                records.push(b.clone());
            }
            Ok(FetchData {
                high_watermark: self.hw(),
                log_start_offset: start,
                records,
                last_stable_offset: self.hw(),
                aborted: Vec::new(),
            })
        }

        async fn producers(
            &self,
            _: &PartitionKey,
        ) -> Result<Vec<crate::txn::markers::ProducerInfo>, CallError> {
            Ok(Vec::new())
        }

        async fn wait_for_data(&self, _: &PartitionKey, _: i64, _: tokio::time::Instant) {}

        async fn list_offset(
            &self,
            _: &PartitionKey,
            spec: OffsetSpec,
            _: Option<u64>,
        ) -> Result<(OffsetAnswer, i64), CallError> {
            let offset = match spec {
                OffsetSpec::Earliest => *self.start.lock().unwrap(),
                _ => self.hw(),
            };
            Ok((
                OffsetAnswer {
                    offset,
                    timestamp: -1,
                },
                0,
            ))
        }

        async fn delete_records(&self, _: &PartitionKey, offset: i64) -> Result<i64, CallError> {
            *self.start.lock().unwrap() = offset;
            Ok(offset)
        }
    }

    fn service(reset: AutoOffsetReset) -> ShareService {
        ShareService::new(ShareConfig::default(), ShareGroupConfig::default(), reset)
    }

    fn key() -> PartitionKey {
        PartitionKey::new(TopicId(uuid::Uuid::nil()), 0)
    }

    fn member() -> MemberId {
        MemberId::new("m")
    }

    #[tokio::test]
    async fn a_fetch_acquires_only_what_the_batches_it_read_hold() {
        let log = FakeLog::new(4);
        let svc = service(AutoOffsetReset::Earliest);
        // One byte allowed: one whole batch is read, so three records.
        let f = svc
            .fetch(&log, "g", &key(), &member(), 100, 1)
            .await
            .unwrap();
        assert_eq!(f.acquired.len(), 1);
        assert_eq!((f.acquired[0].first.0, f.acquired[0].last.0), (0, 2));
        assert_eq!(end_of_batches(&f.records), Some(3));
        // The rest, up to max_records.
        let f = svc
            .fetch(&log, "g", &key(), &member(), 4, 1 << 20)
            .await
            .unwrap();
        assert_eq!((f.acquired[0].first.0, f.acquired[0].last.0), (3, 6));
        // A release comes back first, with its delivery count.
        svc.acknowledge(
            "g",
            &key(),
            &member(),
            &[AckBatch::all(1, 1, AckType::Release)],
        )
        .unwrap();
        let f = svc
            .fetch(&log, "g", &key(), &member(), 1, 1 << 20)
            .await
            .unwrap();
        assert_eq!(
            (f.acquired[0].first.0, f.acquired[0].delivery_count),
            (1, 2)
        );
    }

    #[tokio::test]
    async fn a_new_share_partition_starts_at_the_reset_offset() {
        let log = FakeLog::new(2);
        let svc = service(AutoOffsetReset::Latest);
        let f = svc
            .fetch(&log, "g", &key(), &member(), 100, 1 << 20)
            .await
            .unwrap();
        assert!(f.acquired.is_empty());
        assert!(f.records.is_empty());
        let partitions = lock(&svc.partitions);
        let sp = partitions.get(&("g".to_owned(), key())).unwrap();
        assert_eq!(sp.start_offset(), Offset(6));
    }

    #[tokio::test]
    async fn a_share_partition_behind_the_log_start_moves_to_it() {
        let log = FakeLog::new(4);
        let svc = service(AutoOffsetReset::Earliest);
        svc.fetch(&log, "g", &key(), &member(), 2, 1 << 20)
            .await
            .unwrap();
        svc.release_member("g", &member());
        log.delete_records(&key(), 6).await.unwrap();
        // The first read fails on the log start and moves the share-partition.
        let f = svc
            .fetch(&log, "g", &key(), &member(), 100, 1 << 20)
            .await
            .unwrap();
        assert!(f.acquired.is_empty());
        let f = svc
            .fetch(&log, "g", &key(), &member(), 100, 1 << 20)
            .await
            .unwrap();
        assert_eq!((f.acquired[0].first.0, f.acquired[0].last.0), (6, 11));
        let snap = lock(&svc.partitions)
            .get(&("g".to_owned(), key()))
            .unwrap()
            .snapshot();
        assert_eq!(snap.start, Offset(6));
        assert!(
            snap.ranges
                .iter()
                .all(|r| r.state == DurableState::Available { not_before_ms: 0 })
        );
    }

    #[test]
    fn acknowledging_where_nothing_was_acquired_is_refused() {
        let svc = service(AutoOffsetReset::Earliest);
        assert_eq!(
            svc.acknowledge(
                "g",
                &key(),
                &member(),
                &[AckBatch::all(0, 0, AckType::Accept)]
            ),
            Err(ShareError::InvalidRecordState { offset: Offset(0) })
        );
        assert_eq!(svc.acknowledge("g", &key(), &member(), &[]), Ok(()));
    }

    #[test]
    fn a_refused_first_heartbeat_leaves_no_group() {
        let svc = service(AutoOffsetReset::Earliest);
        let hb = Heartbeat {
            member_id: member(),
            member_epoch: 0,
            subscribed_topics: None,
            rack_id: None,
        };
        assert!(svc.heartbeat("g", &hb, &|_| None).is_err());
        assert!(svc.describe("g").is_none());
        let hb = Heartbeat {
            subscribed_topics: Some(vec!["t".into()]),
            ..hb
        };
        assert!(svc.heartbeat("g", &hb, &|_| None).is_ok());
        assert!(svc.has_member("g", &member()));
        assert!(svc.describe("g").is_some());
    }

    fn header(base: i64, records: i32, body: usize) -> Vec<u8> {
        let mut b = vec![0u8; 61 + body];
        b[0..8].copy_from_slice(&base.to_be_bytes());
        let len = i32::try_from(b.len() - 12).unwrap();
        b[8..12].copy_from_slice(&len.to_be_bytes());
        b[23..27].copy_from_slice(&(records - 1).to_be_bytes());
        b
    }

    #[test]
    fn the_end_of_batches_is_past_the_last_whole_batch() {
        let mut two = header(10, 3, 5);
        two.extend(header(13, 2, 0));
        assert_eq!(end_of_batches(&two), Some(15));
        let cut = &two[..two.len() - 1];
        assert_eq!(end_of_batches(cut), Some(13));
        assert_eq!(end_of_batches(&two[..20]), None);
        assert_eq!(end_of_batches(&[]), None);
    }
}
