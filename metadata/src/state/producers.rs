//! Producers: the producer id counter that idempotent producers' blocks and
//! transactional ids draw from, what a partition remembers of each
//! idempotent producer ([`ProducerState`], kept in the partition's
//! [`super::PartitionState`]), and the transaction coordinators' state
//! ([`crate::txn::TxnModel`], whose rules are in [`crate::txn`]).

use serde::{Deserialize, Serialize};

use crate::error::MetaError;

/// Default of `producer.id.expiration.ms`: a day, as Kafka.
pub const DEFAULT_PRODUCER_EXPIRATION_MS: u64 = 86_400_000;
/// Most producer ids one allocation hands out.
pub const MAX_PRODUCER_ID_BLOCK: u32 = 100_000;
/// The first producer id of a new cluster.
const FIRST_PRODUCER_ID: i64 = 1000;

/// Batches an idempotent producer's partition log remembers (as Kafka: five,
/// a client's most requests in flight with idempotence). The partition's
/// owner keeps the same number (`floe_broker::producer`), so a new owner
/// rebuilt from this state recognises the same retries.
pub const PRODUCER_BATCHES_KEPT: usize = 5;

/// What a partition remembers of one idempotent producer.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ProducerState {
    pub epoch: i16,
    /// The last batches at `epoch`, oldest first, at most [`PRODUCER_BATCHES_KEPT`].
    pub batches: Vec<crate::command::ProducerBatch>,
    /// When it last wrote here (the commit's time); 0: not known yet.
    #[serde(default)]
    pub last_write_ms: u64,
}

impl ProducerState {
    /// Records a committed batch at `now_ms` (a newer epoch starts over).
    pub fn record(&mut self, b: crate::command::ProducerBatch, now_ms: u64) {
        self.last_write_ms = self.last_write_ms.max(now_ms);
        if b.epoch != self.epoch {
            self.epoch = b.epoch;
            self.batches.clear();
        }
        self.batches.push(b);
        if self.batches.len() > PRODUCER_BATCHES_KEPT {
            self.batches.remove(0);
        }
    }
}

/// The producer id counter and the transactions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProducersState {
    /// The next producer id to hand out.
    pub next_id: i64,
    /// The transaction coordinators' state.
    pub txn: crate::txn::TxnModel,
}

impl Default for ProducersState {
    fn default() -> Self {
        Self {
            next_id: FIRST_PRODUCER_ID,
            txn: crate::txn::TxnModel::default(),
        }
    }
}

impl ProducersState {
    /// Hands out a block of `count` producer ids and returns the first.
    pub(crate) fn allocate_ids(&mut self, count: u32) -> Result<i64, MetaError> {
        if count == 0 || count > MAX_PRODUCER_ID_BLOCK {
            return Err(MetaError::InvalidRequest(format!(
                "producer id block of {count} (1 to {MAX_PRODUCER_ID_BLOCK})"
            )));
        }
        let first = self.next_id;
        let Some(next) = first.checked_add(i64::from(count)) else {
            return Err(MetaError::InvalidRequest("producer ids exhausted".into()));
        };
        self.next_id = next;
        Ok(first)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn producer_id_blocks_are_bounded_and_never_wrap() {
        let mut p = ProducersState::default();
        assert_eq!(p.allocate_ids(1).unwrap(), FIRST_PRODUCER_ID);
        assert_eq!(p.allocate_ids(MAX_PRODUCER_ID_BLOCK).unwrap(), 1001);
        assert_eq!(p.next_id, 1001 + i64::from(MAX_PRODUCER_ID_BLOCK));
        for bad in [0, MAX_PRODUCER_ID_BLOCK + 1] {
            let e = p.allocate_ids(bad).unwrap_err();
            assert_eq!(e.kind(), crate::ErrorKind::InvalidRequest);
        }
        p.next_id = i64::MAX - 1;
        assert!(p.allocate_ids(2).is_err(), "exhausted, not wrapped");
        assert_eq!(p.next_id, i64::MAX - 1, "a refused block takes nothing");
    }
}
