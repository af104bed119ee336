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
//! A transactional produce is answered once sequenced (not once durable):
//! the coordinator asks each partition, before it decides a commit, whether
//! the producer's transaction there is wholly in this owner's hands
//! ([`PartitionTxnLog::holding`]) and waits for it to be durable. So the
//! log also remembers which open transactions began under this owner (and
//! whether their first batch here proved that none of the producer's was
//! missing before it), and which ones a failed flush rolled back batches
//! of: an open transaction inherited at a take-over, or one that lost
//! batches in a roll-back, may have lost batches that were answered, and is
//! never committed.
//!
//! Each [`crate::partitions::log::PartitionLog`] holds one (`LogState::txns`).

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use floe_metadata::ids::{Epoch, ProducerEpoch, ProducerId};
use floe_metadata::txn::{AbortedTxn, PartitionTxns, ProducerIdEpoch, TxnEvent};

/// A COMMIT or ABORT marker for one producer on one partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Marker {
    pub producer: ProducerIdEpoch,
    pub commit: bool,
    /// The coordinator shard's epoch (the marker record's coordinator epoch).
    pub coordinator_epoch: Epoch,
}

/// What a partition's owner holds of a producer's open transaction, before
/// its commit is decided (`PartitionTxnLog::holding`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Holding {
    /// All of it, durable. `follows`: its first batch there proved that
    /// none of the producer's was missing before it; when not, the commit
    /// also needs the partition to be at the ownership epoch it had when
    /// the transaction added it (`owner_epoch`).
    All { follows: bool, owner_epoch: u64 },
    /// Batches the owner (or a previous one) answered may be lost: a
    /// take-over or a failed flush since it began there, or nothing of it
    /// there. It must not commit.
    NotAll,
}

/// One partition's transactions at its owner.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PartitionTxnLog {
    committed: PartitionTxns,
    /// Events of sequenced batches not committed yet, in offset order.
    pending: VecDeque<TxnEvent>,
    /// The producers whose open transaction here began under this owner,
    /// each with whether its first batch here followed what the partition
    /// knew of the producer (see [`PartitionTxnLog::sequenced_batch`]).
    began_here: BTreeMap<ProducerId, bool>,
    /// Producers whose open transaction here had batches rolled back by a
    /// failed flush (until its marker).
    lost: BTreeSet<ProducerId>,
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
            ..Self::default()
        }
    }

    /// Whether every batch of `producer`'s open transaction here was
    /// sequenced by this owner and none was rolled back: then it is all in
    /// this owner's log, and durable once the high watermark passes the log
    /// end. `Some(follows)`: `follows` when its first batch here followed
    /// what the partition knew of the producer (or had sequence 0), so that
    /// no earlier batch of it can be missing; otherwise (a producer the
    /// partition did not know, at another sequence: its earlier batches
    /// were refused, or expired, or went to a previous owner that lost
    /// them) the coordinator also checks that the partition has not changed
    /// owner since it was added to the transaction. `None` for a
    /// transaction open since before a take-over, one a roll-back cut, and
    /// a producer with none open here.
    pub fn holding(&self, producer: ProducerId) -> Option<bool> {
        if !self.is_open(producer) || self.lost.contains(&producer) {
            return None;
        }
        self.began_here.get(&producer).copied()
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
    /// first of its transaction here begins one. `follows`: its sequence
    /// shows that no earlier batch of the producer is missing here (see
    /// [`PartitionTxnLog::holding`]).
    pub fn sequenced_batch(
        &mut self,
        producer: ProducerId,
        epoch: ProducerEpoch,
        offset: i64,
        follows: bool,
    ) {
        if !self.is_open(producer) {
            self.pending.push_back(TxnEvent::Begin {
                producer_id: producer,
                epoch,
                offset,
            });
            self.began_here.insert(producer, follows);
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
        self.began_here.remove(&producer);
        self.lost.remove(&producer);
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

    /// Batches at or after `offset` were rolled back (a failed flush);
    /// `rolled` are the producers of those batches: the ones with a
    /// transaction open here lost some of it.
    pub fn forget_from(&mut self, offset: i64, rolled: &[ProducerId]) {
        let mut open: BTreeSet<ProducerId> = self.open_producers().into_iter().collect();
        while self
            .pending
            .back()
            .is_some_and(|e| event_offset(e) >= offset)
        {
            if let Some(TxnEvent::Begin { producer_id, .. }) = self.pending.pop_back() {
                open.insert(producer_id);
            }
        }
        self.lost
            .extend(rolled.iter().copied().filter(|p| open.contains(p)));
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
        l.sequenced_batch(P, E, 5, true);
        l.sequenced_batch(P, E, 6, true);
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
        l.sequenced_batch(P, E, 3, true);
        l.committed_through(3);
        l.sequenced_marker(P, E, true, 4);
        l.sequenced_batch(ProducerId(10), E, 5, true);
        l.forget_from(4, &[P, ProducerId(10)]);
        assert!(
            l.is_open(P),
            "the marker was rolled back: to be written again"
        );
        assert!(!l.is_open(ProducerId(10)));
        assert_eq!(l.events_in(0, 100), vec![]);
    }

    #[test]
    fn only_a_transaction_wholly_sequenced_here_and_not_rolled_back_is_held() {
        let mut l = PartitionTxnLog::default();
        assert_eq!(l.holding(P), None, "nothing open here");
        l.sequenced_batch(P, E, 3, true);
        l.sequenced_batch(P, E, 4, false);
        assert_eq!(
            l.holding(P),
            Some(true),
            "begun here by a batch that follows"
        );
        l.committed_through(4);
        assert_eq!(
            l.holding(P),
            Some(true),
            "committed batches stay this owner's"
        );
        // A failed flush rolls back a later batch of another producer.
        let q = ProducerId(10);
        l.sequenced_batch(q, E, 5, true);
        l.forget_from(5, &[q]);
        assert_eq!(l.holding(P), Some(true), "not one of its batches");
        assert_eq!(l.holding(q), None);
        // Its next batch begins the transaction here again: still lost.
        l.sequenced_batch(q, E, 5, false);
        assert!(l.is_open(q));
        assert_eq!(l.holding(q), None, "its answered batch may be lost");
        // And one of P's: its answer may be lost.
        l.sequenced_batch(P, E, 6, true);
        l.forget_from(6, &[P]);
        assert!(l.is_open(P));
        assert_eq!(l.holding(P), None);
        // The markers end both; the next transactions are whole again.
        l.sequenced_marker(P, E, false, 6);
        l.sequenced_marker(q, E, false, 7);
        l.sequenced_batch(P, E, 8, true);
        assert_eq!(l.holding(P), Some(true));
        // A first batch whose earlier ones may be missing is held, unproved.
        l.sequenced_batch(q, E, 9, false);
        assert_eq!(l.holding(q), Some(false));
        // A producer rolled back with nothing open here is not marked.
        let r = ProducerId(11);
        l.forget_from(10, &[r]);
        l.sequenced_batch(r, E, 10, true);
        assert_eq!(l.holding(r), Some(true));
    }

    #[test]
    fn a_transaction_open_at_a_take_over_is_not_held() {
        let mut committed = PartitionTxns::default();
        committed.apply(&[TxnEvent::Begin {
            producer_id: P,
            epoch: E,
            offset: 2,
        }]);
        let mut l = PartitionTxnLog::from_committed(committed);
        assert!(l.is_open(P));
        assert_eq!(
            l.holding(P),
            None,
            "its earlier batches went to another owner"
        );
        l.sequenced_batch(P, E, 9, true);
        assert_eq!(l.holding(P), None, "a later batch does not make it whole");
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
