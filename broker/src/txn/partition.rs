//! The transactions of one partition as its owner keeps them: what the
//! metadata has committed (`floe_metadata::txn::PartitionTxns`, loaded at
//! take-over, so the open transactions and the aborted index survive a
//! change of owner) and the events of batches sequenced but not committed
//! yet, which the flush sends with its commit (`CommitWithTxns`).
//!
//! The last stable offset depends on the committed part only: a
//! transaction begun by a batch not committed yet starts at or above the
//! high watermark, and one whose marker is not committed yet is still open,
//! so `read_committed` readers never see past a decision that could be lost.
//!
//! Each [`crate::log::PartitionLog`] holds one (`LogState::txns`).

use std::collections::VecDeque;

use floe_metadata::ids::{ProducerEpoch, ProducerId};
use floe_metadata::txn::{AbortedTxn, PartitionTxns, TxnEvent};

/// One partition's transactions at its owner.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PartitionTxnLog {
    committed: PartitionTxns,
    /// Events of sequenced batches not committed yet, in offset order.
    pending: VecDeque<TxnEvent>,
}

fn event_offset(e: &TxnEvent) -> i64 {
    match e {
        TxnEvent::Begin { offset, .. } | TxnEvent::Marker { offset, .. } => *offset,
    }
}

impl PartitionTxnLog {
    /// The state a new owner starts from: what the metadata committed.
    pub fn from_committed(committed: PartitionTxns) -> Self {
        Self {
            committed,
            pending: VecDeque::new(),
        }
    }

    /// Whether `producer` has a transaction open here, counting batches
    /// sequenced but not committed.
    pub fn is_open(&self, producer: ProducerId) -> bool {
        let mut open = self.committed.open.contains_key(&producer);
        for e in &self.pending {
            match *e {
                TxnEvent::Begin { producer_id, .. } if producer_id == producer => open = true,
                TxnEvent::Marker { producer_id, .. } if producer_id == producer => open = false,
                _ => {}
            }
        }
        open
    }

    /// Where `producer`'s open transaction here begins, counting batches
    /// sequenced but not committed (DescribeProducers).
    pub fn open_since(&self, producer: ProducerId) -> Option<i64> {
        let mut at = self.committed.open.get(&producer).map(|t| t.first_offset);
        for e in &self.pending {
            match *e {
                TxnEvent::Begin {
                    producer_id,
                    offset,
                    ..
                } if producer_id == producer => at = at.or(Some(offset)),
                TxnEvent::Marker { producer_id, .. } if producer_id == producer => at = None,
                _ => {}
            }
        }
        at
    }

    /// The producers with a transaction open here (committed or not).
    pub fn open_producers(&self) -> Vec<ProducerId> {
        let mut out: Vec<ProducerId> = self.committed.open.keys().copied().collect();
        for e in &self.pending {
            if let TxnEvent::Begin { producer_id, .. } = e
                && !out.contains(producer_id)
            {
                out.push(*producer_id);
            }
        }
        out.retain(|p| self.is_open(*p));
        out
    }

    /// A transactional batch of `producer` was sequenced at `offset`: the
    /// first of its transaction here begins one.
    pub fn sequenced_batch(&mut self, producer: ProducerId, epoch: ProducerEpoch, offset: i64) {
        if !self.is_open(producer) {
            self.pending.push_back(TxnEvent::Begin {
                producer_id: producer,
                epoch,
                offset,
            });
        }
    }

    /// Whether a marker for `producer` needs writing: only while it has a
    /// transaction open here (a marker retried after its first write
    /// landed, or for a partition the producer never wrote to, is not).
    pub fn needs_marker(&self, producer: ProducerId) -> bool {
        self.is_open(producer)
    }

    /// A marker of `producer` was sequenced at `offset`.
    pub fn sequenced_marker(
        &mut self,
        producer: ProducerId,
        epoch: ProducerEpoch,
        commit: bool,
        offset: i64,
    ) {
        self.pending.push_back(TxnEvent::Marker {
            producer_id: producer,
            epoch,
            commit,
            offset,
        });
    }

    /// The events of `first..=last` (a range a flush commits).
    pub fn events_in(&self, first: i64, last: i64) -> Vec<TxnEvent> {
        self.pending
            .iter()
            .filter(|e| (first..=last).contains(&event_offset(e)))
            .copied()
            .collect()
    }

    /// The range ending at `last` is committed: its events join the
    /// committed state.
    pub fn committed_through(&mut self, last: i64) {
        while let Some(e) = self.pending.front() {
            if event_offset(e) > last {
                break;
            }
            self.committed.apply(std::slice::from_ref(e));
            self.pending.pop_front();
        }
    }

    /// Batches at or after `offset` were rolled back (a failed flush).
    pub fn forget_from(&mut self, offset: i64) {
        while self
            .pending
            .back()
            .is_some_and(|e| event_offset(e) >= offset)
        {
            self.pending.pop_back();
        }
    }

    /// The log start moved (retention, DeleteRecords).
    pub fn truncate(&mut self, log_start_offset: i64) {
        self.committed.truncate(log_start_offset);
    }

    /// The last stable offset under the high watermark `hw`.
    pub fn last_stable_offset(&self, hw: i64) -> i64 {
        self.committed.last_stable_offset(hw)
    }

    /// The aborted transactions a `read_committed` fetch of `from..=to`
    /// answers with.
    pub fn aborted_in(&self, from: i64, to: i64) -> Vec<AbortedTxn> {
        self.committed.aborted_in(from, to).copied().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: ProducerId = ProducerId(9);
    const E: ProducerEpoch = ProducerEpoch(0);

    #[test]
    fn the_lso_moves_only_with_what_is_committed() {
        let mut l = PartitionTxnLog::default();
        l.sequenced_batch(P, E, 5);
        l.sequenced_batch(P, E, 6);
        assert!(l.is_open(P));
        assert_eq!(l.events_in(0, 10).len(), 1, "one begin, at the first batch");
        // Not committed yet: the high watermark is at most 5.
        assert_eq!(l.last_stable_offset(5), 5);
        l.committed_through(6);
        assert_eq!(l.last_stable_offset(7), 5);
        l.sequenced_marker(P, E, false, 7);
        assert!(!l.is_open(P));
        assert!(!l.needs_marker(P), "a retried marker is not written twice");
        assert_eq!(l.last_stable_offset(7), 5, "the marker is not committed");
        l.committed_through(7);
        assert_eq!(l.last_stable_offset(8), 8);
        assert_eq!(
            l.aborted_in(0, 100),
            vec![AbortedTxn {
                producer_id: P,
                first_offset: 5,
                last_offset: 7
            }]
        );
        l.truncate(8);
        assert!(l.aborted_in(0, 100).is_empty());
    }

    #[test]
    fn a_rolled_back_flush_forgets_its_events() {
        let mut l = PartitionTxnLog::default();
        l.sequenced_batch(P, E, 3);
        l.committed_through(3);
        l.sequenced_marker(P, E, true, 4);
        l.sequenced_batch(ProducerId(10), E, 5);
        l.forget_from(4);
        assert!(
            l.is_open(P),
            "the marker was rolled back: to be written again"
        );
        assert!(!l.is_open(ProducerId(10)));
        assert_eq!(l.events_in(0, 100), vec![]);
    }

    #[test]
    fn a_new_owner_starts_from_the_committed_state() {
        // The owner committed the transaction's first batch and died before
        // its marker's commit: the next owner loads what the metadata has.
        let mut committed = PartitionTxns::default();
        committed.apply(&[TxnEvent::Begin {
            producer_id: P,
            epoch: E,
            offset: 0,
        }]);
        let after = PartitionTxnLog::from_committed(committed);
        assert!(after.needs_marker(P), "the coordinator's retry is written");
        assert_eq!(after.last_stable_offset(1), 0);
    }
}
