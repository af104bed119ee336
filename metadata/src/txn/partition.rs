//! The transactions as one partition sees them: which producers have a
//! transaction open here and from which offset (so the last stable offset),
//! and which transactions were aborted (the index a `read_committed` fetch
//! answers with). The partition's owner reports them with its flush's commit
//! ([`crate::command::Command::CommitWithTxns`]), so a new owner after a
//! crash loads them with the committed index.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::command::CommitRange;
use crate::error::MetaError;
use crate::ids::{PartitionKey, ProducerEpoch, ProducerId};

/// A transaction open on a partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct OpenTxn {
    pub epoch: ProducerEpoch,
    /// The offset of its first batch here.
    pub first_offset: i64,
}

/// An aborted transaction on a partition: its records lie in
/// `first_offset..=last_offset` (the last is its ABORT marker).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct AbortedTxn {
    pub producer_id: ProducerId,
    pub first_offset: i64,
    pub last_offset: i64,
}

/// What a committed range holds of transactions, in offset order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum TxnEvent {
    /// A transactional batch at `offset` from a producer with no
    /// transaction open here: one begins (later batches of the same
    /// transaction need no event).
    Begin {
        producer_id: ProducerId,
        epoch: ProducerEpoch,
        offset: i64,
    },
    /// A COMMIT or ABORT control batch at `offset`.
    Marker {
        producer_id: ProducerId,
        epoch: ProducerEpoch,
        commit: bool,
        offset: i64,
    },
}

impl TxnEvent {
    fn offset(&self) -> i64 {
        match self {
            TxnEvent::Begin { offset, .. } | TxnEvent::Marker { offset, .. } => *offset,
        }
    }
}

/// The transactional events of one partition's range in a commit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RangeTxns {
    pub partition: PartitionKey,
    pub events: Vec<TxnEvent>,
}

/// One partition's transactions.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct PartitionTxns {
    /// Producers with a transaction open here.
    pub open: BTreeMap<ProducerId, OpenTxn>,
    /// Aborted transactions, oldest first.
    pub aborted: Vec<AbortedTxn>,
}

impl PartitionTxns {
    /// The last stable offset: the first offset of the oldest open
    /// transaction, or the high watermark when none is open.
    pub fn last_stable_offset(&self, high_watermark: i64) -> i64 {
        self.open
            .values()
            .map(|t| t.first_offset)
            .min()
            .map_or(high_watermark, |first| first.min(high_watermark))
    }

    /// The aborted transactions whose records may lie in `from..=to`
    /// (Fetch's `aborted_transactions`).
    pub fn aborted_in(&self, from: i64, to: i64) -> impl Iterator<Item = &AbortedTxn> {
        self.aborted
            .iter()
            .filter(move |a| a.first_offset <= to && a.last_offset >= from)
    }

    /// Applies a committed range's events, in order.
    pub fn apply(&mut self, events: &[TxnEvent]) {
        for e in events {
            match *e {
                TxnEvent::Begin {
                    producer_id,
                    epoch,
                    offset,
                } => {
                    self.open.entry(producer_id).or_insert(OpenTxn {
                        epoch,
                        first_offset: offset,
                    });
                }
                TxnEvent::Marker {
                    producer_id,
                    commit,
                    offset,
                    ..
                } => {
                    if let Some(t) = self.open.remove(&producer_id)
                        && !commit
                    {
                        self.aborted.push(AbortedTxn {
                            producer_id,
                            first_offset: t.first_offset,
                            last_offset: offset,
                        });
                    }
                }
            }
        }
    }

    /// Forgets aborted transactions wholly below the new log start.
    pub fn truncate(&mut self, log_start_offset: i64) {
        self.aborted.retain(|a| a.last_offset >= log_start_offset);
    }

    fn is_empty(&self) -> bool {
        self.open.is_empty() && self.aborted.is_empty()
    }
}

/// Every partition's transactions.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct PartitionsTxns(
    #[serde(with = "crate::serde_pairs")] pub BTreeMap<PartitionKey, PartitionTxns>,
);

impl PartitionsTxns {
    pub fn get(&self, p: &PartitionKey) -> Option<&PartitionTxns> {
        self.0.get(p)
    }

    /// Refuses events that are not in their partition's range of the
    /// commit, or not in offset order (before anything is applied).
    pub fn check(ranges: &[CommitRange], txns: &[RangeTxns]) -> Result<(), MetaError> {
        for t in txns {
            let Some(r) = ranges.iter().find(|r| r.partition == t.partition) else {
                return Err(MetaError::InvalidRequest(format!(
                    "transactional events of {} without a range",
                    t.partition
                )));
            };
            let mut last = r.first_offset - 1;
            for e in &t.events {
                let o = e.offset();
                if o <= last || o > r.last_offset {
                    return Err(MetaError::InvalidRequest(format!(
                        "transactional event at {o} outside {}..={} of {} or out of order",
                        r.first_offset, r.last_offset, t.partition
                    )));
                }
                last = o;
            }
        }
        Ok(())
    }

    /// Applies a committed range's events to its partition.
    pub fn apply(&mut self, t: &RangeTxns) {
        let p = self.0.entry(t.partition).or_default();
        p.apply(&t.events);
        if p.is_empty() {
            self.0.remove(&t.partition);
        }
    }

    /// The partition's log start moved.
    pub fn truncate(&mut self, partition: &PartitionKey, log_start_offset: i64) {
        if let Some(p) = self.0.get_mut(partition) {
            p.truncate(log_start_offset);
            if p.is_empty() {
                self.0.remove(partition);
            }
        }
    }

    /// The partition is gone (its topic was deleted).
    pub fn remove(&mut self, partition: &PartitionKey) {
        self.0.remove(partition);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn begin(pid: i64, offset: i64) -> TxnEvent {
        TxnEvent::Begin {
            producer_id: ProducerId(pid),
            epoch: ProducerEpoch(0),
            offset,
        }
    }

    fn marker(pid: i64, commit: bool, offset: i64) -> TxnEvent {
        TxnEvent::Marker {
            producer_id: ProducerId(pid),
            epoch: ProducerEpoch(0),
            commit,
            offset,
        }
    }

    #[test]
    fn the_lso_is_the_first_offset_of_the_oldest_open_transaction() {
        let mut p = PartitionTxns::default();
        assert_eq!(p.last_stable_offset(10), 10);
        p.apply(&[begin(1, 10), begin(2, 12)]);
        assert_eq!(p.last_stable_offset(20), 10);
        // A second batch of an open transaction does not move its start.
        p.apply(&[begin(1, 15)]);
        p.apply(&[marker(1, true, 21)]);
        assert_eq!(p.last_stable_offset(22), 12);
        p.apply(&[marker(2, false, 22)]);
        assert_eq!(p.last_stable_offset(23), 23);
        assert_eq!(
            p.aborted,
            vec![AbortedTxn {
                producer_id: ProducerId(2),
                first_offset: 12,
                last_offset: 22
            }]
        );
        assert!(p.open.is_empty());
    }

    #[test]
    fn a_marker_without_an_open_transaction_changes_nothing() {
        let mut p = PartitionTxns::default();
        p.apply(&[marker(1, false, 3), marker(1, true, 4)]);
        assert_eq!(p, PartitionTxns::default());
    }

    #[test]
    fn aborted_transactions_are_found_by_overlap_and_dropped_below_the_log_start() {
        let mut p = PartitionTxns::default();
        p.apply(&[begin(1, 0), marker(1, false, 4)]);
        p.apply(&[begin(2, 10), marker(2, false, 14)]);
        let found = |p: &PartitionTxns, a, b| {
            p.aborted_in(a, b)
                .map(|t| t.producer_id.0)
                .collect::<Vec<_>>()
        };
        assert_eq!(found(&p, 0, 100), vec![1, 2]);
        assert_eq!(found(&p, 4, 9), vec![1]);
        assert_eq!(found(&p, 5, 9), Vec::<i64>::new());
        assert_eq!(found(&p, 12, 12), vec![2]);
        p.truncate(5);
        assert_eq!(found(&p, 0, 100), vec![2]);
    }
}
