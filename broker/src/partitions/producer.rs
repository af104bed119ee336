//! Idempotent producers on one partition: Kafka's rules for a batch's
//! producer id, epoch and sequence numbers, over the last five batches of
//! each producer (kept in metadata with every commit, so a new owner knows
//! them too).
//!
//! A producer that has not written for `producer.id.expiration.ms` is
//! forgotten ([`Producers::expire`]); when it comes back, its batch is
//! taken as the first of a producer this partition does not know, at
//! whatever sequence, as Kafka does since KIP-360 (no UNKNOWN_PRODUCER_ID),
//! but not at once (below).
//!
//! One rule Kafka does not need: a batch that leaves a gap, from a producer
//! that has not written to this owner since it took the partition over, is
//! refused as not stored ([`ErrorKind::SequenceGap`], which clients see as
//! NOT_LEADER_OR_FOLLOWER) rather than OUT_OF_ORDER_SEQUENCE_NUMBER. The
//! proxy routes each request on its own, so a client's pipelined batches
//! can reach the new owner before the retries of the earlier ones the old
//! owner failed; a Kafka leader never sees that. librdkafka answers an
//! out-of-order error there by bumping its producer epoch and sending every
//! unacknowledged record again under the new epoch, which stores twice any
//! of them that was stored but not acknowledged. Refused as not stored, the
//! batch is retried after its predecessors, in order. Once the producer has
//! written here, a gap is out of order as in Kafka.
//!
//! The same race reaches a producer the partition does not know at all: its
//! first batch here failed (cut on its way, refused by an old owner, or
//! rolled back by a failed flush) while the next one, routed on its own,
//! arrives. Taken at its sequence, it would be lost for good: librdkafka
//! acknowledges the failed batch (without an offset) as soon as a later one
//! of the partition succeeds, since a Kafka broker would have refused the
//! later one had the earlier not been stored. So a batch of an unknown
//! producer that does not start at sequence 0 is refused as not stored too,
//! for a grace from the first refusal ([`DEFAULT_GAP_GRACE_MS`]); a producer whose
//! state expired is taken at its sequence after that (its client retries
//! meanwhile), which is the only case where a sequence other than 0 opens
//! a producer. A rollback does not forget a producer either: the sequence
//! of its first batch rolled back is the one expected next.

use std::collections::{HashMap, VecDeque};

use floe_metadata::state::PRODUCER_BATCHES_KEPT;

use crate::error::{BrokerError, ErrorKind, Result};

/// One idempotent batch as stored (the metadata keeps the last few of each
/// producer with every commit).
pub use floe_metadata::model::ProducerBatch;

/// What the partition knows of one producer.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Entry {
    epoch: i16,
    batches: VecDeque<ProducerBatch>,
    /// When it last appended here (ms since the epoch); 0: not known (taken
    /// over from metadata), its clock starts at the next expiry pass.
    last_write_ms: u64,
    /// Whether it appended to this owner since it took the partition over
    /// or since a rollback failed its batches (false: known from the
    /// previous owners' commits only).
    wrote_here: bool,
    /// The sequence expected next when no batch is kept: that of the first
    /// batch a failed flush rolled back.
    resume_at: Option<i32>,
}

/// The verdict on an incoming idempotent batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Check {
    /// Append it.
    Append,
    /// Already stored: answer with the stored batch's offsets.
    Duplicate(ProducerBatch),
}

/// How long a partition refuses by default, from the first refusal, the
/// batches of a producer it does not know that do not start at sequence 0
/// (see the module's documentation): long enough for the client to have
/// retried the earlier batches in order (librdkafka drains a partition's
/// requests in flight and resends from the first unacknowledged one),
/// short against the clients' delivery timeouts (120 s in Java, 300 s in
/// librdkafka).
pub const DEFAULT_GAP_GRACE_MS: u64 = 30_000;

/// The producers of one partition.
#[derive(Debug, Clone)]
pub struct Producers {
    by_id: HashMap<i64, Entry>,
    /// Producers this partition does not know whose batch came at a
    /// sequence other than 0: when that was first refused (ms on the
    /// caller's monotonic clock).
    unknown_gaps: HashMap<i64, u64>,
    /// How long such a producer's gaps are refused from the first refusal;
    /// a refusal four times as old is forgotten (its client gave up on
    /// those records), and a later gap waits again.
    gap_grace_ms: u64,
}

impl Default for Producers {
    fn default() -> Self {
        Self {
            by_id: HashMap::new(),
            unknown_gaps: HashMap::new(),
            gap_grace_ms: DEFAULT_GAP_GRACE_MS,
        }
    }
}

/// The next sequence number after `s` (Kafka wraps at `i32::MAX`).
fn next_seq(s: i32) -> i32 {
    if s == i32::MAX { 0 } else { s + 1 }
}

/// The last sequence of a batch of `count` records starting at `first`.
pub fn last_seq(first: i32, count: i32) -> i32 {
    let last = i64::from(first) + i64::from(count) - 1;
    (last % (i64::from(i32::MAX) + 1)) as i32
}

impl Producers {
    /// Rebuilds the state from what metadata remembers.
    pub fn from_batches(batches: impl IntoIterator<Item = ProducerBatch>) -> Self {
        let mut p = Producers::default();
        for b in batches {
            p.insert(b);
        }
        p
    }

    /// With `grace` as the time an unknown producer's gaps are refused
    /// (the broker's `producer_gap_grace`).
    pub fn with_gap_grace(mut self, grace: std::time::Duration) -> Self {
        self.gap_grace_ms = u64::try_from(grace.as_millis()).unwrap_or(u64::MAX);
        self
    }

    fn gap_forget_ms(&self) -> u64 {
        self.gap_grace_ms.saturating_mul(4)
    }

    /// Forgets the batches at or after `offset` (sequenced but never
    /// committed: a failed flush rolled them back). A producer that lost
    /// batches expects the first of them again, and its gaps are refused as
    /// not stored until it writes again (its client retries them, maybe out
    /// of order); one left with no batch and none lost is forgotten.
    pub fn forget_from(&mut self, offset: i64) {
        self.by_id.retain(|_, e| {
            let first_lost = e
                .batches
                .iter()
                .find(|b| b.first_offset >= offset)
                .map(|b| b.first_sequence);
            e.batches.retain(|b| b.first_offset < offset);
            if let Some(seq) = first_lost {
                e.wrote_here = false;
                if e.batches.is_empty() {
                    e.resume_at = Some(seq);
                }
            }
            !e.batches.is_empty() || e.resume_at.is_some()
        });
    }

    /// Whether this partition knows `producer_id` (a batch of it that
    /// [`Producers::check`] accepts then follows what is stored; one it
    /// does not know is accepted at any sequence).
    pub fn knows(&self, producer_id: i64) -> bool {
        self.by_id.contains_key(&producer_id)
    }

    /// Checks a batch of `producer_id` at `epoch` with sequences
    /// `first..=last` against what is known, at `now_ms` (a monotonic
    /// clock's, the one [`Producers::note_gap`] is given).
    pub fn check(
        &self,
        producer_id: i64,
        epoch: i16,
        first: i32,
        last: i32,
        now_ms: u64,
    ) -> Result<Check> {
        let Some(e) = self.by_id.get(&producer_id) else {
            // A producer this partition does not know: new (its first batch
            // starts at 0), expired (accepted at any sequence, as Kafka
            // does), or one whose first batch here failed and is still to
            // be retried (refused while that may be so).
            let waited = self
                .unknown_gaps
                .get(&producer_id)
                .map(|since| now_ms.saturating_sub(*since));
            return match waited {
                _ if first == 0 => Ok(Check::Append),
                Some(w) if (self.gap_grace_ms..=self.gap_forget_ms()).contains(&w) => {
                    Ok(Check::Append)
                }
                _ => Err(BrokerError::new(
                    ErrorKind::SequenceGap,
                    format!(
                        "producer {producer_id} is not known here and its batch starts at \
                         sequence {first}: its earlier batches may still be retried (taken \
                         as a new producer's {} s after the first refusal)",
                        self.gap_grace_ms / 1000
                    ),
                )),
            };
        };
        if epoch < e.epoch {
            return Err(BrokerError::new(
                ErrorKind::InvalidProducerEpoch,
                format!(
                    "producer {producer_id} epoch {epoch} is older than the current {}",
                    e.epoch
                ),
            ));
        }
        if epoch > e.epoch {
            return if first == 0 {
                Ok(Check::Append)
            } else {
                Err(Self::gap(
                    e,
                    format!(
                        "producer {producer_id} epoch {epoch} must start at sequence 0, not {first}"
                    ),
                ))
            };
        }
        if let Some(d) = e
            .batches
            .iter()
            .find(|b| b.first_sequence == first && b.last_sequence == last)
        {
            return Ok(Check::Duplicate(*d));
        }
        let expected = e
            .batches
            .back()
            .map_or(e.resume_at.unwrap_or(0), |b| next_seq(b.last_sequence));
        if first == expected {
            Ok(Check::Append)
        } else {
            Err(Self::gap(
                e,
                format!("producer {producer_id}: sequence {first}, expected {expected}"),
            ))
        }
    }

    /// Notes that a batch of `producer_id` was refused at `now_ms` as a gap
    /// (for a producer this partition does not know, the grace starts at
    /// the first refusal; a refusal older than the grace's window starts
    /// it again).
    pub fn note_gap(&mut self, producer_id: i64, now_ms: u64) {
        if self.by_id.contains_key(&producer_id) {
            return;
        }
        let forget = self.gap_forget_ms();
        self.unknown_gaps
            .retain(|_, since| now_ms.saturating_sub(*since) <= forget);
        self.unknown_gaps.entry(producer_id).or_insert(now_ms);
    }

    /// A batch that does not follow: out of order, or (from a producer that
    /// has not written to this owner yet) a gap its retried predecessors
    /// may still fill (see the module's documentation).
    fn gap(e: &Entry, what: String) -> BrokerError {
        if e.wrote_here {
            BrokerError::new(ErrorKind::OutOfOrderSequence, what)
        } else {
            BrokerError::new(
                ErrorKind::SequenceGap,
                format!("{what}: the earlier batches have not reached this new owner yet"),
            )
        }
    }

    /// Records an appended batch at `now_ms`.
    pub fn record_at(&mut self, b: ProducerBatch, now_ms: u64) {
        self.record(b);
        if let Some(e) = self.by_id.get_mut(&b.producer_id) {
            e.last_write_ms = e.last_write_ms.max(now_ms);
        }
    }

    /// Forgets producers that have not appended for more than
    /// `expiration_ms` before `now_ms`; returns how many.
    pub fn expire(&mut self, now_ms: u64, expiration_ms: u64) -> usize {
        let before = self.by_id.len();
        self.by_id.retain(|_, e| {
            if e.last_write_ms == 0 {
                e.last_write_ms = now_ms;
            }
            now_ms.saturating_sub(e.last_write_ms) <= expiration_ms
        });
        before - self.by_id.len()
    }

    /// A transaction marker of `producer_id` at `epoch` was written: that
    /// epoch is the producer's from now on (its batches before are
    /// forgotten, as the metadata does when it commits the marker), so an
    /// older instance's later batches are refused. Unknown producers stay
    /// unknown.
    pub fn fence(&mut self, producer_id: i64, epoch: i16) {
        if let Some(e) = self.by_id.get_mut(&producer_id)
            && e.epoch < epoch
        {
            e.epoch = epoch;
            e.batches.clear();
            e.resume_at = None;
        }
    }

    /// Every producer known here: (id, epoch, last sequence or -1, last
    /// write in ms or -1 when not known), by id.
    pub fn describe(&self) -> Vec<(i64, i16, i32, i64)> {
        let mut out: Vec<_> = self
            .by_id
            .iter()
            .map(|(id, e)| {
                let last = e.batches.back().map_or(-1, |b| b.last_sequence);
                let at = if e.last_write_ms == 0 {
                    -1
                } else {
                    i64::try_from(e.last_write_ms).unwrap_or(i64::MAX)
                };
                (*id, e.epoch, last, at)
            })
            .collect();
        out.sort_unstable_by_key(|p| p.0);
        out
    }

    /// Records a batch appended here (its time unchanged).
    pub fn record(&mut self, b: ProducerBatch) {
        self.insert(b).wrote_here = true;
    }

    /// Adds a stored batch to what is known of its producer.
    fn insert(&mut self, b: ProducerBatch) -> &mut Entry {
        self.unknown_gaps.remove(&b.producer_id);
        let e = self.by_id.entry(b.producer_id).or_default();
        e.resume_at = None;
        if b.epoch != e.epoch {
            e.epoch = b.epoch;
            e.batches.clear();
        }
        e.batches.push_back(b);
        while e.batches.len() > PRODUCER_BATCHES_KEPT {
            e.batches.pop_front();
        }
        e
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(pid: i64, epoch: i16, first: i32, last: i32, off: i64) -> ProducerBatch {
        ProducerBatch {
            producer_id: pid,
            epoch,
            first_sequence: first,
            last_sequence: last,
            first_offset: off,
            last_offset: off + i64::from(last - first),
        }
    }

    #[test]
    fn sequences_follow_kafkas_rules() {
        let mut p = Producers::default();
        assert_eq!(p.check(1, 0, 0, 4, 0).unwrap(), Check::Append);
        p.record(b(1, 0, 0, 4, 100));
        // The same batch again: a duplicate, answered with its offsets.
        assert_eq!(
            p.check(1, 0, 0, 4, 0).unwrap(),
            Check::Duplicate(b(1, 0, 0, 4, 100))
        );
        assert_eq!(p.check(1, 0, 5, 9, 0).unwrap(), Check::Append);
        assert_eq!(
            p.check(1, 0, 6, 9, 0).unwrap_err().kind(),
            ErrorKind::OutOfOrderSequence
        );
        // An older epoch is fenced; a newer one starts at 0.
        assert_eq!(
            p.check(1, -1, 5, 9, 0).unwrap_err().kind(),
            ErrorKind::InvalidProducerEpoch
        );
        assert_eq!(
            p.check(1, 1, 5, 9, 0).unwrap_err().kind(),
            ErrorKind::OutOfOrderSequence
        );
        assert_eq!(p.check(1, 1, 0, 0, 0).unwrap(), Check::Append);
        // Five batches are remembered: the sixth-oldest is forgotten.
        for i in 1..=5 {
            p.record(b(1, 0, i * 5, i * 5 + 4, 100 + i64::from(i) * 5));
        }
        assert_eq!(
            p.check(1, 0, 0, 4, 0).unwrap_err().kind(),
            ErrorKind::OutOfOrderSequence
        );
        assert!(matches!(
            p.check(1, 0, 5, 9, 0).unwrap(),
            Check::Duplicate(_)
        ));
        // Sequences wrap at i32::MAX.
        assert_eq!(last_seq(i32::MAX, 2), 0);
        let mut q = Producers::from_batches([b(2, 0, i32::MAX - 1, i32::MAX, 0)]);
        assert_eq!(q.check(2, 0, 0, 3, 0).unwrap(), Check::Append);
        q.record(b(2, 3, 0, 0, 9));
        assert_eq!(
            q.check(2, 0, 1, 1, 0).unwrap_err().kind(),
            ErrorKind::InvalidProducerEpoch
        );
    }

    /// After a change of owner, a batch whose predecessors (failed by the
    /// old owner) have not been retried yet is refused as not stored, and
    /// taken once they are in; then gaps are out of order as in Kafka.
    #[test]
    fn a_gap_at_a_new_owner_waits_for_the_retried_batches() {
        // Taken over: the producer's last committed batch is 0..=4.
        let mut p = Producers::from_batches([b(1, 0, 0, 4, 100)]);
        // 10..=14 came before the retry of 5..=9.
        assert_eq!(
            p.check(1, 0, 10, 14, 0).unwrap_err().kind(),
            ErrorKind::SequenceGap
        );
        // So did a new epoch's second batch.
        assert_eq!(
            p.check(1, 1, 5, 9, 0).unwrap_err().kind(),
            ErrorKind::SequenceGap
        );
        // Retries of what is stored are still answered as duplicates.
        assert!(matches!(
            p.check(1, 0, 0, 4, 0).unwrap(),
            Check::Duplicate(_)
        ));
        // The retried 5..=9, then 10..=14, in order.
        assert_eq!(p.check(1, 0, 5, 9, 0).unwrap(), Check::Append);
        p.record_at(b(1, 0, 5, 9, 105), 1_000);
        assert_eq!(p.check(1, 0, 10, 14, 0).unwrap(), Check::Append);
        p.record_at(b(1, 0, 10, 14, 110), 1_001);
        // Written here: a gap now is out of order.
        assert_eq!(
            p.check(1, 0, 20, 24, 0).unwrap_err().kind(),
            ErrorKind::OutOfOrderSequence
        );
        assert_eq!(
            p.check(1, 1, 5, 9, 0).unwrap_err().kind(),
            ErrorKind::OutOfOrderSequence
        );
    }

    /// A producer the partition does not know whose batch does not start
    /// at 0: its first batch here failed and may still come (retried, maybe
    /// behind this one), so it is refused as not stored until it does, or
    /// until the grace has passed (an expired producer's).
    #[test]
    fn an_unknown_producers_gap_waits_for_its_first_batch() {
        let mut p = Producers::default();
        let t0 = 1_000_000;
        assert_eq!(
            p.check(1, 0, 5, 9, t0).unwrap_err().kind(),
            ErrorKind::SequenceGap
        );
        p.note_gap(1, t0);
        // Refused again before the grace, whatever the retries.
        p.note_gap(1, t0 + 1_000);
        assert_eq!(
            p.check(1, 0, 5, 9, t0 + DEFAULT_GAP_GRACE_MS - 1)
                .unwrap_err()
                .kind(),
            ErrorKind::SequenceGap
        );
        // The first batch came: in order from there.
        assert_eq!(p.check(1, 0, 0, 4, t0 + 2_000).unwrap(), Check::Append);
        p.record_at(b(1, 0, 0, 4, 100), t0 + 2_000);
        assert_eq!(p.check(1, 0, 5, 9, t0 + 2_001).unwrap(), Check::Append);

        // Another producer's first batch never comes (its state expired):
        // taken at its sequence once the grace has passed.
        p.note_gap(2, t0);
        assert_eq!(
            p.check(2, 0, 7, 7, t0 + DEFAULT_GAP_GRACE_MS).unwrap(),
            Check::Append
        );
        // A refusal long forgotten does not open a later gap at once.
        assert_eq!(
            p.check(2, 0, 7, 7, t0 + 4 * DEFAULT_GAP_GRACE_MS + 1)
                .unwrap_err()
                .kind(),
            ErrorKind::SequenceGap
        );
        p.note_gap(2, t0 + 4 * DEFAULT_GAP_GRACE_MS + 1);
        assert_eq!(
            p.unknown_gaps[&2],
            t0 + 4 * DEFAULT_GAP_GRACE_MS + 1,
            "waits again"
        );
        assert_eq!(
            p.check(2, 0, 7, 7, t0 + 4 * DEFAULT_GAP_GRACE_MS + 2)
                .unwrap_err()
                .kind(),
            ErrorKind::SequenceGap
        );
        // A known producer's gap is not an unknown one's.
        p.note_gap(1, t0);
        assert!(!p.unknown_gaps.contains_key(&1));
    }

    /// A failed flush rolls back a producer's batches: its retries are
    /// expected from the first of them, and a later batch that overtakes
    /// them is refused as not stored (not taken as a new producer's, nor
    /// answered out of order).
    #[test]
    fn a_rollback_keeps_the_sequence_expected_next() {
        // Everything of producer 1 here was rolled back.
        let mut p = Producers::default();
        p.record_at(b(1, 0, 0, 4, 100), 1_000);
        p.record_at(b(1, 0, 5, 9, 105), 1_000);
        p.forget_from(100);
        assert!(p.knows(1));
        assert_eq!(
            p.check(1, 0, 5, 9, 2_000).unwrap_err().kind(),
            ErrorKind::SequenceGap
        );
        assert_eq!(p.check(1, 0, 0, 4, 2_000).unwrap(), Check::Append);
        p.record_at(b(1, 0, 0, 4, 100), 2_000);
        assert_eq!(p.check(1, 0, 5, 9, 2_000).unwrap(), Check::Append);

        // Part of producer 2's batches committed, the rest rolled back.
        let mut q = Producers::default();
        q.record_at(b(2, 0, 0, 4, 100), 1_000);
        q.record_at(b(2, 0, 5, 9, 105), 1_000);
        q.forget_from(105);
        assert_eq!(
            q.check(2, 0, 10, 14, 2_000).unwrap_err().kind(),
            ErrorKind::SequenceGap
        );
        assert!(matches!(
            q.check(2, 0, 0, 4, 2_000).unwrap(),
            Check::Duplicate(_)
        ));
        assert_eq!(q.check(2, 0, 5, 9, 2_000).unwrap(), Check::Append);

        // A producer with nothing rolled back is untouched; one with no
        // batch and nothing lost (fenced) is forgotten.
        q.record_at(b(3, 0, 0, 0, 90), 1_000);
        q.fence(4, 1);
        q.forget_from(105);
        assert!(matches!(
            q.check(3, 0, 0, 0, 2_000).unwrap(),
            Check::Duplicate(_)
        ));
    }

    #[test]
    fn idle_producers_expire_and_come_back_as_new() {
        let mut p = Producers::default();
        p.record_at(b(1, 0, 0, 4, 100), 1_000);
        p.record_at(b(2, 0, 0, 4, 105), 5_000);
        p.record(b(3, 0, 0, 0, 110)); // taken over: no time known
        assert_eq!(p.expire(5_000, 10_000), 0);
        assert_eq!(p.expire(11_001, 10_000), 1, "producer 1 idle 10.001 s");
        assert!(matches!(
            p.check(2, 0, 0, 4, 0).unwrap(),
            Check::Duplicate(_)
        ));
        assert!(matches!(
            p.check(3, 0, 0, 0, 0).unwrap(),
            Check::Duplicate(_)
        ));
        // Producer 1 is unknown now: its next batch (sequence 5) is taken
        // as a new producer's once the grace for a gap has passed.
        assert_eq!(
            p.check(1, 0, 5, 9, 11_001).unwrap_err().kind(),
            ErrorKind::SequenceGap
        );
        p.note_gap(1, 11_001);
        assert_eq!(
            p.check(1, 0, 5, 9, 11_001 + DEFAULT_GAP_GRACE_MS).unwrap(),
            Check::Append
        );
        // Producer 3's clock started at the first pass (5 s).
        assert_eq!(p.expire(15_000, 10_000), 0);
        assert_eq!(
            p.expire(15_001, 10_000),
            2,
            "producers 2 and 3 idle 10.001 s"
        );
    }

    /// The owner and the metadata keep the same last batches of a producer,
    /// so a new owner (rebuilt from metadata) answers retries as the old one did.
    #[test]
    fn owner_keeps_the_batches_metadata_keeps() {
        use floe_metadata::state::ProducerState;
        let batches: Vec<ProducerBatch> = (0..PRODUCER_BATCHES_KEPT as i32 + 3)
            .map(|i| b(7, 0, i * 2, i * 2 + 1, 100 + i64::from(i) * 2))
            .collect();
        let mut owner = Producers::default();
        let mut meta = ProducerState::default();
        for x in &batches {
            owner.record(*x);
            meta.record(
                floe_metadata::command::ProducerBatch {
                    producer_id: x.producer_id,
                    epoch: x.epoch,
                    first_sequence: x.first_sequence,
                    last_sequence: x.last_sequence,
                    first_offset: x.first_offset,
                    last_offset: x.last_offset,
                },
                0,
            );
        }
        assert_eq!(meta.batches.len(), PRODUCER_BATCHES_KEPT);
        let kept: Vec<i32> = meta.batches.iter().map(|m| m.first_sequence).collect();
        let rebuilt = Producers::from_batches(meta.batches.iter().map(|m| ProducerBatch {
            producer_id: m.producer_id,
            epoch: m.epoch,
            first_sequence: m.first_sequence,
            last_sequence: m.last_sequence,
            first_offset: m.first_offset,
            last_offset: m.last_offset,
        }));
        for x in &batches {
            let remembered = kept.contains(&x.first_sequence);
            let by_owner = owner.check(7, 0, x.first_sequence, x.last_sequence, 0);
            let by_new_owner = rebuilt.check(7, 0, x.first_sequence, x.last_sequence, 0);
            assert_eq!(
                matches!(by_owner, Ok(Check::Duplicate(_))),
                remembered,
                "{x:?}"
            );
            assert_eq!(
                matches!(by_new_owner, Ok(Check::Duplicate(_))),
                remembered,
                "{x:?}"
            );
        }
    }
}
