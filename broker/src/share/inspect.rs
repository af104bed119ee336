//! A share-partition as an operator looks at it (the console's share-group
//! page): how many of its records are available, acquired, backing off,
//! delayed or waiting for the dead-letter topic, how often they were
//! delivered, when the delayed ones come due, and which records are locked
//! by whom. Read at the partition's owner ([`super::SharePartitionAdmin`]),
//! from memory, or from the state last written when the owner holds none in
//! memory (then nothing is acquired: locks do not survive an owner).

use std::collections::BTreeMap;

/// One acquired record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AcquiredRecord {
    pub offset: i64,
    pub member: String,
    pub deliveries: u16,
    /// When its lock runs out (ms since the epoch).
    pub lock_until_ms: u64,
}

/// Delayed records in one timer bucket of the object store: how many are
/// left, and when the first of them is due (the others are later).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimerBucketSummary {
    pub next_due_ms: u64,
    pub pending: u64,
}

/// How long a "due" bucket is: records due in the same minute are counted
/// together.
pub const DUE_BUCKET_MS: u64 = 60_000;

/// A share-partition's state at one moment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ShareInspection {
    /// The start offset (SPSO): every record below it is done.
    pub start: i64,
    /// The end offset (SPEO): the first offset never acquired.
    pub end: i64,
    /// Read from the owner's memory (else from the state last written).
    pub in_memory: bool,
    /// In the window, available to a fetch now.
    pub available: u64,
    /// In the window, available again once a backoff runs out.
    pub backing_off: u64,
    pub acquired: u64,
    pub acknowledged: u64,
    pub archived: u64,
    /// Done for the consumers, waiting to be appended to the dead-letter
    /// topic (in the window or parked).
    pub dead_lettering: u64,
    /// Delayed records held out of the window until due.
    pub parked: u64,
    /// Delayed records in timer buckets in the object store.
    pub timer_pending: u64,
    /// Records not done (available, backing off, acquired, parked,
    /// dead-lettering) by how often they were delivered: (count, records),
    /// sorted by count.
    pub deliveries: Vec<(u16, u64)>,
    /// Records backing off or parked, by the minute they come due: (start
    /// of the minute in ms since the epoch, records), sorted. Those due
    /// already are counted at the minute of `now`.
    pub due: Vec<(u64, u64)>,
    pub timer_buckets: Vec<TimerBucketSummary>,
    /// The first acquired records by offset, at most the limit asked.
    pub acquired_records: Vec<AcquiredRecord>,
}

/// Counts by key, sorted (a small helper for the histograms above).
#[derive(Debug, Default)]
pub(crate) struct Tally<K: Ord>(BTreeMap<K, u64>);

impl<K: Ord + Copy> Tally<K> {
    pub(crate) fn add(&mut self, key: K) {
        *self.0.entry(key).or_default() += 1;
    }

    pub(crate) fn into_vec(self) -> Vec<(K, u64)> {
        self.0.into_iter().collect()
    }
}

/// The minute a record due at `due_ms` is counted in at `now_ms`.
pub(crate) fn due_minute(due_ms: u64, now_ms: u64) -> u64 {
    let at = due_ms.max(now_ms);
    at - at % DUE_BUCKET_MS
}

pub mod proto {
    use crate::rpc::proto::Error;

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct InspectRequest {
        #[prost(message, optional, tag = "1")]
        pub call: Option<super::super::rpc::proto::Call>,
        /// Acquired records to list, at most.
        #[prost(uint32, tag = "2")]
        pub limit: u32,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Count {
        #[prost(uint64, tag = "1")]
        pub key: u64,
        #[prost(uint64, tag = "2")]
        pub records: u64,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Acquired {
        #[prost(int64, tag = "1")]
        pub offset: i64,
        #[prost(string, tag = "2")]
        pub member: String,
        #[prost(uint32, tag = "3")]
        pub deliveries: u32,
        #[prost(uint64, tag = "4")]
        pub lock_until_ms: u64,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct InspectResponse {
        #[prost(message, optional, tag = "1")]
        pub error: Option<Error>,
        /// False: the group has no state on the partition.
        #[prost(bool, tag = "2")]
        pub has_state: bool,
        #[prost(int64, tag = "3")]
        pub start: i64,
        #[prost(int64, tag = "4")]
        pub end: i64,
        #[prost(bool, tag = "5")]
        pub in_memory: bool,
        #[prost(uint64, tag = "6")]
        pub available: u64,
        #[prost(uint64, tag = "7")]
        pub backing_off: u64,
        #[prost(uint64, tag = "8")]
        pub acquired: u64,
        #[prost(uint64, tag = "9")]
        pub acknowledged: u64,
        #[prost(uint64, tag = "10")]
        pub archived: u64,
        #[prost(uint64, tag = "11")]
        pub dead_lettering: u64,
        #[prost(uint64, tag = "12")]
        pub parked: u64,
        #[prost(uint64, tag = "13")]
        pub timer_pending: u64,
        #[prost(message, repeated, tag = "14")]
        pub deliveries: Vec<Count>,
        #[prost(message, repeated, tag = "15")]
        pub due: Vec<Count>,
        /// key: the bucket's next due time; records: its pending entries.
        #[prost(message, repeated, tag = "16")]
        pub timer_buckets: Vec<Count>,
        #[prost(message, repeated, tag = "17")]
        pub acquired_records: Vec<Acquired>,
    }
}

fn counts(v: &[(u64, u64)]) -> Vec<proto::Count> {
    v.iter()
        .map(|&(key, records)| proto::Count { key, records })
        .collect()
}

impl ShareInspection {
    /// The RPC's answer for an inspection (`None`: no state).
    pub fn to_proto(found: Option<&Self>) -> proto::InspectResponse {
        let Some(i) = found else {
            return proto::InspectResponse::default();
        };
        let deliveries: Vec<(u64, u64)> = i
            .deliveries
            .iter()
            .map(|&(d, n)| (u64::from(d), n))
            .collect();
        let buckets: Vec<(u64, u64)> = i
            .timer_buckets
            .iter()
            .map(|b| (b.next_due_ms, b.pending))
            .collect();
        proto::InspectResponse {
            error: None,
            has_state: true,
            start: i.start,
            end: i.end,
            in_memory: i.in_memory,
            available: i.available,
            backing_off: i.backing_off,
            acquired: i.acquired,
            acknowledged: i.acknowledged,
            archived: i.archived,
            dead_lettering: i.dead_lettering,
            parked: i.parked,
            timer_pending: i.timer_pending,
            deliveries: counts(&deliveries),
            due: counts(&i.due),
            timer_buckets: counts(&buckets),
            acquired_records: i
                .acquired_records
                .iter()
                .map(|a| proto::Acquired {
                    offset: a.offset,
                    member: a.member.clone(),
                    deliveries: u32::from(a.deliveries),
                    lock_until_ms: a.lock_until_ms,
                })
                .collect(),
        }
    }

    /// An inspection from the RPC's answer (`None`: no state).
    pub fn from_proto(r: proto::InspectResponse) -> Option<Self> {
        if !r.has_state {
            return None;
        }
        let clamp16 = |v: u64| u16::try_from(v).unwrap_or(u16::MAX);
        Some(Self {
            start: r.start,
            end: r.end,
            in_memory: r.in_memory,
            available: r.available,
            backing_off: r.backing_off,
            acquired: r.acquired,
            acknowledged: r.acknowledged,
            archived: r.archived,
            dead_lettering: r.dead_lettering,
            parked: r.parked,
            timer_pending: r.timer_pending,
            deliveries: r
                .deliveries
                .iter()
                .map(|c| (clamp16(c.key), c.records))
                .collect(),
            due: r.due.iter().map(|c| (c.key, c.records)).collect(),
            timer_buckets: r
                .timer_buckets
                .iter()
                .map(|c| TimerBucketSummary {
                    next_due_ms: c.key,
                    pending: c.records,
                })
                .collect(),
            acquired_records: r
                .acquired_records
                .into_iter()
                .map(|a| AcquiredRecord {
                    offset: a.offset,
                    member: a.member,
                    deliveries: clamp16(u64::from(a.deliveries)),
                    lock_until_ms: a.lock_until_ms,
                })
                .collect(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_due_already_is_counted_in_the_current_minute() {
        let now = 10 * DUE_BUCKET_MS + 5_000;
        assert_eq!(due_minute(1, now), 10 * DUE_BUCKET_MS);
        assert_eq!(
            due_minute(now + DUE_BUCKET_MS, now),
            11 * DUE_BUCKET_MS,
            "due in a minute"
        );
    }

    #[test]
    fn an_inspection_crosses_the_rpc_unchanged() {
        let i = ShareInspection {
            start: 5,
            end: 12,
            in_memory: true,
            available: 2,
            backing_off: 1,
            acquired: 3,
            acknowledged: 1,
            archived: 0,
            dead_lettering: 1,
            parked: 4,
            timer_pending: 7,
            deliveries: vec![(1, 3), (2, 4)],
            due: vec![(60_000, 5)],
            timer_buckets: vec![TimerBucketSummary {
                next_due_ms: 120_000,
                pending: 7,
            }],
            acquired_records: vec![AcquiredRecord {
                offset: 6,
                member: "m-1".into(),
                deliveries: 2,
                lock_until_ms: 99,
            }],
        };
        let back = ShareInspection::from_proto(ShareInspection::to_proto(Some(&i)));
        assert_eq!(back, Some(i));
        assert_eq!(
            ShareInspection::from_proto(ShareInspection::to_proto(None)),
            None
        );
    }
}
