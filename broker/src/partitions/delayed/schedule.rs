//! A delayed partition's schedule in memory: the pending entries (delayed
//! records not re-appended yet) found by reading the log from a cursor,
//! bounded. Pure and synchronous: the scheduler (`super::run`) feeds it the
//! batches it reads and asks it what is due.
//!
//! **Recovery.** A re-append always comes after its entry in the log, and
//! names it (`floe-delayed-from: <offset>.<index>`). Reading from a cursor
//! that is at or below every pending entry to the end, the entries seen
//! less the re-appends seen are exactly the pending ones.
//!
//! **The bound.** At most `limit` entries are kept, the earliest due; of
//! those left out only the earliest due time and the lowest offset are
//! remembered, so that the scheduler reads the log again from the cursor
//! when that time comes or the kept entries run out, and so that the
//! cursor never passes an entry left out.

use std::collections::{BTreeSet, HashMap};

use bytes::Bytes;
use floe_storage::batch::{BatchError, BatchView, Compression};
use floe_storage::delayed::read_delayed;
use floe_storage::records::{DecodeLimits, RecordStream};

use crate::partitions::delay_headers::{DELAYED_FROM_HEADER, mentions};

/// A delayed entry: the base offset of its delayed batch and its index in
/// that batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EntryId {
    pub batch: i64,
    pub index: u32,
}

impl EntryId {
    /// The value of a re-append's `floe-delayed-from` header.
    pub fn header_value(&self) -> String {
        format!("{}.{}", self.batch, self.index)
    }

    /// Reads [`EntryId::header_value`] back.
    pub fn parse(text: &[u8]) -> Option<Self> {
        let text = std::str::from_utf8(text).ok()?;
        let (batch, index) = text.split_once('.')?;
        Some(Self {
            batch: batch.parse().ok()?,
            index: index.parse().ok()?,
        })
    }
}

/// Entries left out by the bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeftOut {
    pub earliest_due: u64,
    pub lowest_batch: i64,
}

/// What reading one batch found, for the metrics and the log.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Fed {
    pub entries: usize,
    pub reappends: usize,
}

/// The pending entries of one partition.
#[derive(Debug)]
pub struct Schedule {
    limit: usize,
    /// Kept entries, earliest due first.
    by_due: BTreeSet<(u64, EntryId)>,
    due_of: HashMap<EntryId, u64>,
    left_out: Option<LeftOut>,
    /// The next offset to read.
    read_to: i64,
    limits: DecodeLimits,
    /// Every re-append from here on is the reader's own, known done when
    /// committed: plain batches need no look.
    following: bool,
}

impl Schedule {
    /// An empty schedule that reads from `cursor`.
    pub fn new(limit: usize, cursor: i64) -> Self {
        Self {
            limit: limit.max(1),
            by_due: BTreeSet::new(),
            due_of: HashMap::new(),
            left_out: None,
            read_to: cursor,
            limits: DecodeLimits::DEFAULT,
            following: false,
        }
    }

    /// From now on the log is read past what the scheduler found at its
    /// reading: re-appends are its own, and it forgets their entries once
    /// they are committed, so plain batches are passed over undecoded.
    pub fn follow(&mut self) {
        self.following = true;
    }

    /// The next offset to read.
    pub fn read_to(&self) -> i64 {
        self.read_to
    }

    pub fn kept(&self) -> usize {
        self.by_due.len()
    }

    pub fn left_out(&self) -> Option<LeftOut> {
        self.left_out
    }

    /// The lowest offset that may still hold a pending entry: where a
    /// reader must start to find them all again.
    pub fn cursor(&self) -> i64 {
        let kept = self.due_of.keys().map(|id| id.batch).min();
        let left = self.left_out.map(|l| l.lowest_batch);
        [kept, left, Some(self.read_to)]
            .into_iter()
            .flatten()
            .min()
            .unwrap_or(self.read_to)
    }

    /// When the next entry is due (kept or left out).
    pub fn next_due(&self) -> Option<u64> {
        let kept = self.by_due.first().map(|(d, _)| *d);
        let left = self.left_out.map(|l| l.earliest_due);
        kept.into_iter().chain(left).min()
    }

    /// Whether the log must be read again from the cursor: an entry left
    /// out is due, or the kept ones ran out while some were left out.
    pub fn needs_rescan(&self, now_ms: u64) -> bool {
        self.left_out
            .is_some_and(|l| l.earliest_due <= now_ms || self.by_due.is_empty())
    }

    /// Up to `max` kept entries due at `now_ms`, earliest due first.
    pub fn due(&self, now_ms: u64, max: usize) -> Vec<EntryId> {
        self.by_due
            .iter()
            .take_while(|(d, _)| *d <= now_ms)
            .take(max)
            .map(|(_, id)| *id)
            .collect()
    }

    /// Forgets an entry: re-appended (or gone from the log).
    pub fn done(&mut self, id: EntryId) {
        if let Some(due) = self.due_of.remove(&id) {
            self.by_due.remove(&(due, id));
        }
    }

    fn add(&mut self, id: EntryId, due: u64) {
        self.by_due.insert((due, id));
        self.due_of.insert(id, due);
        if self.by_due.len() > self.limit
            && let Some((due, id)) = self.by_due.pop_last()
        {
            self.due_of.remove(&id);
            let l = self.left_out.get_or_insert(LeftOut {
                earliest_due: due,
                lowest_batch: id.batch,
            });
            l.earliest_due = l.earliest_due.min(due);
            l.lowest_batch = l.lowest_batch.min(id.batch);
        }
    }

    /// Reads one batch of the log (batches are fed in offset order; one
    /// that ends before [`Schedule::read_to`] is passed over). A delayed
    /// batch adds its entries; a plain batch without a producer id (the
    /// scheduler's own) forgets the entries its records name.
    pub fn feed(&mut self, batch: &Bytes) -> Result<Fed, BatchError> {
        let view = BatchView::parse(batch, usize::MAX)?;
        let next = view.next_offset();
        if next <= self.read_to {
            return Ok(Fed::default());
        }
        self.read_to = next;
        let mut fed = Fed::default();
        if view.is_control() {
            let base = view.base_offset();
            if let Some(records) = read_delayed(batch, self.limits)? {
                for (offset, r) in records {
                    let index = u32::try_from(offset - base)
                        .map_err(|_| BatchError::Records("offset before its batch".into()))?;
                    self.add(EntryId { batch: base, index }, r.due_ms);
                    fed.entries += 1;
                }
            }
            return Ok(fed);
        }
        let ours = !self.following
            && view.producer_id() < 0
            && (view.compression() != Compression::None
                || mentions(view.records_bytes(), DELAYED_FROM_HEADER.as_bytes()));
        if !ours {
            return Ok(fed);
        }
        for r in RecordStream::new(batch, self.limits)? {
            let r = r?;
            let named = r
                .headers
                .iter()
                .rev()
                .find(|h| h.key.as_ref() == DELAYED_FROM_HEADER.as_bytes())
                .and_then(|h| h.value.as_deref().and_then(EntryId::parse));
            if let Some(id) = named {
                self.done(id);
                fed.reappends += 1;
            }
        }
        Ok(fed)
    }
}

#[cfg(test)]
mod tests;
