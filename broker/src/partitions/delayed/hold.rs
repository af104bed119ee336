//! Holding produced records that are not due yet: at the partition owner,
//! before sequencing, each produced batch of a delayed topic that holds a
//! record due later than [`HOLD_MARGIN_MS`] from now is replaced by a
//! delayed batch (`floe_storage::delayed`) with the same producer id, epoch,
//! base sequence and record count, so idempotence and offsets work as for
//! the batch it replaces.
//!
//! Refused here, with [`ErrorKind::InvalidRecord`]: a transactional batch
//! with a record not due (the schedule could not follow the transaction's
//! abort), a due time past the topic's `retention.ms` (retention would
//! delete the entry first), a record carrying `floe-delayed-from` in a
//! batch without a producer id (the broker's own header on the kind of
//! batch the scheduler's recovery trusts), and control batches, as the
//! sequencing does.

use bytes::{Bytes, BytesMut};
use floe_storage::batch::{BatchView, Compression};
use floe_storage::delayed::{DelayedRecord, Producer, delayed_batch};
use floe_storage::records::{DecodeLimits, RecordStream};

use crate::error::{BrokerError, ErrorKind, Result};
use crate::partitions::admission::decoding;
use crate::partitions::delay_headers::{DELAY_PREFIX, DELAYED_FROM_HEADER, due_time, mentions};

/// A record due less than this far ahead is not held: appended as
/// produced (a consumer sees it at once, at most this early).
pub const HOLD_MARGIN_MS: u64 = 5;

/// What a delayed topic's settings ask of held records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct HoldRules {
    /// `retention.ms`; `None`: kept forever.
    pub retention_ms: Option<i64>,
    /// `max.message.bytes`: a delayed batch larger is refused.
    pub max_batch: usize,
}

/// Whether any batch of `records` may hold a delayed record (or is a
/// control batch to refuse): read from batch headers and, for
/// uncompressed batches, a scan for the headers' common prefix.
pub(crate) fn may_hold(records: &[u8]) -> bool {
    let mut pos = 0usize;
    while let Some(rest) = records.get(pos..).filter(|r| !r.is_empty()) {
        let Ok(view) = BatchView::parse(rest, usize::MAX) else {
            return false;
        };
        if view.is_control()
            || view.compression() != Compression::None
            || mentions(view.records_bytes(), DELAY_PREFIX)
        {
            return true;
        }
        pos += view.size();
    }
    false
}

fn invalid(msg: impl Into<String>) -> BrokerError {
    BrokerError::new(ErrorKind::InvalidRecord, msg)
}

/// `records` with every batch holding a record not due at `now_ms`
/// replaced by its delayed batch; `Ok(None)` when no batch is held (the
/// records go on as they are). A batch that does not parse or whose CRC is
/// wrong is left to the sequencing checks, which refuse the request.
pub(crate) fn hold(records: &[u8], now_ms: u64, rules: HoldRules) -> Result<Option<Bytes>> {
    let mut out: Vec<Bytes> = Vec::new();
    let mut any = false;
    let mut budget = floe_storage::records::DEFAULT_MAX_DECOMPRESSED;
    let mut pos = 0usize;
    while let Some(rest) = records.get(pos..).filter(|r| !r.is_empty()) {
        let Ok(view) = BatchView::parse(rest, usize::MAX) else {
            return Ok(None);
        };
        if view.verify_crc().is_err() {
            return Ok(None);
        }
        let whole = Bytes::copy_from_slice(view.bytes());
        pos += view.size();
        if view.is_control() {
            return Err(invalid("clients may not produce control batches"));
        }
        if view.compression() == Compression::None && !mentions(view.records_bytes(), DELAY_PREFIX)
        {
            out.push(whole);
            continue;
        }
        let limits = DecodeLimits {
            max_bytes: budget,
            ..DecodeLimits::DEFAULT
        };
        let mut stream = RecordStream::new(&whole, limits).map_err(decoding)?;
        let mut held = Vec::new();
        let mut later = false;
        for r in stream.by_ref() {
            let r = r.map_err(decoding)?;
            // Only batches without a producer id count at recovery: an
            // idempotent producer (a dead-letter append, a copy of a
            // delayed topic) may carry the header on.
            if view.producer_id() < 0
                && r.headers
                    .iter()
                    .any(|h| h.key.as_ref() == DELAYED_FROM_HEADER.as_bytes())
            {
                return Err(invalid(format!(
                    "the {DELAYED_FROM_HEADER} header is written by the broker only"
                )));
            }
            // A malformed delay header delivers at once, as for share groups.
            let due = due_time(&r).ok().flatten().unwrap_or(0);
            if due > now_ms.saturating_add(HOLD_MARGIN_MS) {
                later = true;
                check_due(due, now_ms, rules.retention_ms)?;
            }
            held.push(DelayedRecord {
                due_ms: due,
                timestamp: r.timestamp,
                key: r.key,
                value: r.value,
                headers: r.headers,
            });
        }
        budget = budget.saturating_sub(stream.decoded_bytes());
        drop(stream);
        if !later {
            out.push(whole);
            continue;
        }
        if view.is_transactional() {
            return Err(invalid(
                "delayed records are not taken inside a transaction: \
                 the schedule could not follow the transaction's abort",
            ));
        }
        let count = i64::from(view.last_offset_delta()) + 1;
        if i64::try_from(held.len()).ok() != Some(count) {
            return Err(BrokerError::new(
                ErrorKind::CorruptMessage,
                format!("a batch of {} records claims {count} offsets", held.len()),
            ));
        }
        let producer = Producer {
            id: view.producer_id(),
            epoch: view.producer_epoch(),
            base_sequence: view.base_sequence(),
        };
        let batch = delayed_batch(
            producer,
            i64::try_from(now_ms).unwrap_or(i64::MAX),
            &held,
            view.compression(),
        )
        .map_err(decoding)?;
        if batch.len() > rules.max_batch {
            return Err(BrokerError::new(
                ErrorKind::MessageTooLarge,
                format!(
                    "the delayed form of a batch is {} bytes, over the topic's \
                     max.message.bytes ({})",
                    batch.len(),
                    rules.max_batch
                ),
            ));
        }
        any = true;
        out.push(batch);
    }
    if !any {
        return Ok(None);
    }
    let mut joined = BytesMut::with_capacity(out.iter().map(Bytes::len).sum());
    for b in out {
        joined.extend_from_slice(&b);
    }
    Ok(Some(joined.freeze()))
}

/// Refuses a due time retention would reach first: the delayed batch is
/// timestamped `now_ms`, so `retention.ms` from now deletes it.
fn check_due(due: u64, now_ms: u64, retention_ms: Option<i64>) -> Result<()> {
    let Some(retention) = retention_ms.and_then(|r| u64::try_from(r).ok()) else {
        return Ok(());
    };
    if due > now_ms.saturating_add(retention) {
        return Err(invalid(format!(
            "a record due in {} ms is past the topic's retention.ms ({retention}): \
             retention would delete it before it is due",
            due - now_ms
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests;
