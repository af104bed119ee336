//! The scheduler of one delayed partition on its owner: reads the log from
//! the durable cursor into a [`Schedule`], follows the high watermark for
//! new entries, appends due records as plain batches (no producer id; the
//! original key, value, timestamp and headers, plus `floe-delayed-from`)
//! through the normal append path, and moves the cursor forward lazily.
//!
//! **Exactly once.** An append is answered once committed; then its entries
//! are done. An append that fails (its outcome may be unknown) makes the
//! scheduler wait until nothing of the partition is in flight and read the
//! log again from the cursor: the log says whether the re-append landed.
//! A new owner (after `kill -9` or a move) does the same from the cursor
//! written last. Only an owner at its epoch appends, and a stale one's
//! commits are refused by the epoch fence.

use std::collections::HashMap;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use floe_storage::PartitionKey;
use floe_storage::batch::{BatchView, Compression};
use floe_storage::delayed::{DelayedRecord, read_delayed};
use floe_storage::records::{BatchBuilder, DecodeLimits, RecordSpec};

use super::cursor::CursorStore;
use super::schedule::{EntryId, Schedule};
use crate::error::{BrokerError, ErrorKind, Result};
use crate::partitions::Partitions;
use crate::partitions::delay_headers::DELAYED_FROM_HEADER;
use crate::partitions::log::{PartitionLog, Status};

/// Bytes read from the log at a time while scanning.
const SCAN_BYTES: usize = 1024 * 1024;
/// Records appended in one batch at most.
const MAX_PER_APPEND: usize = 500;
/// How long an append waits for room in the broker's backlog.
const ROOM_WAIT: Duration = Duration::from_secs(5);
/// How often the cursor is written at most.
const CURSOR_EVERY: Duration = Duration::from_secs(5);
/// The pause after a failure before reading the log again.
const RETRY_AFTER: Duration = Duration::from_millis(500);

fn now_ms() -> u64 {
    floe_metadata::clock::now_ms()
}

/// The partition's log, while this broker owns it at `epoch` and its topic
/// is delayed.
fn owned(b: &Partitions, key: &PartitionKey, epoch: u64) -> Option<std::sync::Arc<PartitionLog>> {
    let log = b.log(key)?;
    let st = log.lock();
    let ok = st.epoch == epoch && st.status == Status::Active && st.config.delayed;
    drop(st);
    ok.then_some(log)
}

/// Runs the scheduler of `key` while this broker owns it at `epoch`.
pub(crate) async fn run(b: Partitions, key: PartitionKey, epoch: u64, limit: usize) {
    let topic = b.log(&key).map(|l| l.topic.clone()).unwrap_or_default();
    let mut cursor: Option<i64> = None;
    let mut durable: Option<i64> = None;
    let mut bound = limit;
    'read: loop {
        let Some(log) = owned(&b, &key, epoch) else {
            break;
        };
        let from = match cursor {
            Some(c) => c,
            None => match b.load_cursor(&key).await {
                Ok(c) => {
                    durable = c;
                    c.unwrap_or(0)
                }
                Err(e) => {
                    tracing::warn!(partition = %key, error = %e, "delayed cursor not read; will retry");
                    tokio::time::sleep(RETRY_AFTER).await;
                    continue;
                }
            },
        };
        // Watched before the high watermark is read: a commit after it
        // wakes the follow-up below.
        let mut hw_rx = log.subscribe_hw();
        let (log_start, hw, _) = log.offsets();
        let mut s = Schedule::new(bound, from.max(log_start));
        crate::metrics::delayed_scan();
        if let Err(e) = scan(&b, &key, &mut s, hw).await {
            tracing::warn!(partition = %key, error = %e, "delayed partition not read; will retry");
            tokio::time::sleep(RETRY_AFTER).await;
            continue;
        }
        let now = now_ms();
        if s.due(now, 1).is_empty() && s.needs_rescan(now) {
            // Entries already re-appended took the room while the reading
            // had not reached their re-appends: read again with more room.
            bound = bound.saturating_mul(2);
            cursor = Some(s.cursor());
            tracing::warn!(partition = %key, bound, "delayed entries over the memory bound; reading again with a larger one");
            continue;
        }
        bound = limit;
        s.follow();
        tracing::debug!(partition = %key, from, kept = s.kept(), left_out = s.left_out().is_some(), "delayed partition read");
        let mut saved_at: Option<tokio::time::Instant> = None;
        loop {
            crate::metrics::delayed_pending(&topic, key.partition, s.kept());
            if owned(&b, &key, epoch).is_none() {
                break 'read;
            }
            // The cursor, lazily (also while records keep coming due).
            let c = s.cursor();
            if durable.is_none_or(|d| c > d)
                && saved_at.is_none_or(|at| at.elapsed() >= CURSOR_EVERY)
            {
                saved_at = Some(tokio::time::Instant::now());
                match b.save_cursor(&key, epoch, c).await {
                    Ok(()) => durable = Some(c),
                    Err(e) => {
                        tracing::debug!(partition = %key, error = %e, "delayed cursor not written")
                    }
                }
            }
            let now = now_ms();
            let due = s.due(now, MAX_PER_APPEND);
            if !due.is_empty() {
                match append_due(&b, &key, &due).await {
                    Ok(done) => {
                        for id in done {
                            s.done(id);
                        }
                    }
                    Err(e) => {
                        tracing::warn!(partition = %key, error = %e, "delayed records not appended; reading the log again");
                        settle(&log).await;
                        tokio::time::sleep(RETRY_AFTER).await;
                        cursor = Some(s.cursor());
                        continue 'read;
                    }
                }
                continue;
            }
            if s.needs_rescan(now) {
                cursor = Some(s.cursor());
                continue 'read;
            }
            let wait = s
                .next_due()
                .map_or(CURSOR_EVERY, |d| {
                    Duration::from_millis(d.saturating_sub(now))
                })
                .min(CURSOR_EVERY);
            tokio::select! {
                r = hw_rx.changed() => {
                    if r.is_err() {
                        break 'read;
                    }
                    let hw = *hw_rx.borrow_and_update();
                    if let Err(e) = scan(&b, &key, &mut s, hw).await {
                        tracing::warn!(partition = %key, error = %e, "delayed partition not read; reading again");
                        tokio::time::sleep(RETRY_AFTER).await;
                        // The schedule may be lost with the reading: start
                        // again from the cursor written last.
                        cursor = None;
                        continue 'read;
                    }
                }
                _ = tokio::time::sleep(wait) => {}
                _ = b.inner.stopped.notified() => break 'read,
            }
        }
    }
    crate::metrics::delayed_pending(&topic, key.partition, 0);
    b.inner.delayed.finished(&key, epoch);
}

/// Waits (up to 10 s) until nothing of the partition is sequenced and not
/// committed, so that a reading sees how an append that failed ended.
async fn settle(log: &PartitionLog) {
    for _ in 0..100 {
        let (_, hw, leo) = log.offsets();
        if hw >= leo || log.status() != Status::Active {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The whole batches of one fetch answer, its pieces joined.
fn batches_of(pieces: &[Bytes]) -> Vec<Bytes> {
    let mut joined = BytesMut::with_capacity(pieces.iter().map(Bytes::len).sum());
    for p in pieces {
        joined.extend_from_slice(p);
    }
    let all = joined.freeze();
    let mut out = Vec::new();
    let mut pos = 0usize;
    while let Some(rest) = all.get(pos..).filter(|r| !r.is_empty()) {
        let Ok(view) = BatchView::parse(rest, rest.len()) else {
            break;
        };
        out.push(all.slice(pos..pos + view.size()));
        pos += view.size();
    }
    out
}

/// Reads the committed log from where `s` is to `to`. Decoding (and
/// decompressing) batches is CPU work: done off the runtime's threads.
async fn scan(b: &Partitions, key: &PartitionKey, s: &mut Schedule, to: i64) -> Result<()> {
    while s.read_to() < to {
        let before = s.read_to();
        let data = b.fetch(key, before, SCAN_BYTES).await?;
        let batches = batches_of(&data.records);
        let mut taken = std::mem::replace(s, Schedule::new(1, before));
        let part = *key;
        let (fed, ended) = tokio::task::spawn_blocking(move || {
            let ended = feed_all(&part, &mut taken, &batches, to);
            (taken, ended)
        })
        .await
        .map_err(|e| BrokerError::new(ErrorKind::CorruptMessage, format!("scan failed: {e}")))?;
        *s = fed;
        if ended || s.read_to() == before {
            break;
        }
    }
    Ok(())
}

/// Feeds `batches` to `s` up to `to`; whether `to` was reached.
fn feed_all(key: &PartitionKey, s: &mut Schedule, batches: &[Bytes], to: i64) -> bool {
    for batch in batches {
        let Ok(view) = BatchView::parse(batch, usize::MAX) else {
            return false;
        };
        if view.base_offset() >= to {
            return true;
        }
        if let Err(e) = s.feed(batch) {
            tracing::warn!(partition = %key, offset = view.base_offset(), error = %e, "a batch of a delayed partition does not decode; passed over");
        }
    }
    false
}

/// Appends the due entries `ids` (as many as fit one batch, in order) and
/// returns those done: appended, or no longer in the log.
async fn append_due(b: &Partitions, key: &PartitionKey, ids: &[EntryId]) -> Result<Vec<EntryId>> {
    let log = b.active_log(key)?;
    let (log_start, ..) = log.offsets();
    let (max_batch, codec) = {
        let st = log.lock();
        (st.config.max_message_bytes, st.config.compression)
    };
    let mut batches: HashMap<i64, HashMap<u32, DelayedRecord>> = HashMap::new();
    let mut done = Vec::new();
    let mut gone = 0usize;
    let mut picked: Vec<(EntryId, DelayedRecord)> = Vec::new();
    let mut size = 0usize;
    for &id in ids {
        if id.batch < log_start {
            done.push(id);
            gone += 1;
            continue;
        }
        if let std::collections::hash_map::Entry::Vacant(v) = batches.entry(id.batch) {
            v.insert(read_entries(b, key, id.batch).await?);
        }
        let Some(r) = batches.get_mut(&id.batch).and_then(|m| m.remove(&id.index)) else {
            done.push(id);
            gone += 1;
            continue;
        };
        let len = r.key.as_ref().map_or(0, Bytes::len)
            + r.value.as_ref().map_or(0, Bytes::len)
            + r.headers
                .iter()
                .map(|h| h.key.len() + h.value.as_ref().map_or(0, Bytes::len) + 8)
                .sum::<usize>()
            + 64;
        if !picked.is_empty() && size + len > max_batch / 2 {
            break;
        }
        size += len;
        picked.push((id, r));
    }
    if gone > 0 {
        tracing::warn!(partition = %key, gone, "delayed records no longer in the log (DeleteRecords or retention) were dropped");
        crate::metrics::delayed_dropped(gone);
    }
    if picked.is_empty() {
        return Ok(done);
    }
    let first_ts = picked[0].1.timestamp;
    let mut builder = BatchBuilder::new(0, first_ts);
    for (id, r) in &picked {
        let mut spec = RecordSpec::new(
            r.key.as_ref().map(|k| k.to_vec()),
            r.value.as_ref().map(|v| v.to_vec()),
            r.timestamp.saturating_sub(first_ts),
        );
        spec.headers = r
            .headers
            .iter()
            .map(|h| (h.key.to_vec(), h.value.as_ref().map(|v| v.to_vec())))
            .collect();
        spec.headers.push((
            DELAYED_FROM_HEADER.as_bytes().to_vec(),
            Some(id.header_value().into_bytes()),
        ));
        builder.push(spec);
    }
    let batch = builder
        .build(codec.unwrap_or(Compression::None))
        .map_err(|e| BrokerError::new(ErrorKind::CorruptMessage, e.to_string()))?;
    b.append_due(key, batch, ROOM_WAIT).await?;
    let now = now_ms();
    let lateness: Vec<u64> = picked
        .iter()
        .map(|(_, r)| now.saturating_sub(r.due_ms))
        .collect();
    crate::metrics::delayed_reappended(&lateness);
    done.extend(picked.into_iter().map(|(id, _)| id));
    Ok(done)
}

/// The entries of the delayed batch at `base`, by index (empty if the
/// batch there is not one, or no longer decodes).
async fn read_entries(
    b: &Partitions,
    key: &PartitionKey,
    base: i64,
) -> Result<HashMap<u32, DelayedRecord>> {
    let data = match b.fetch(key, base, 1).await {
        Ok(d) => d,
        Err(e) if e.kind() == ErrorKind::OffsetOutOfRange => return Ok(HashMap::new()),
        Err(e) => return Err(e),
    };
    let Some(batch) = batches_of(&data.records).into_iter().next() else {
        return Ok(HashMap::new());
    };
    let base_here = BatchView::parse(&batch, usize::MAX)
        .map(|v| v.base_offset())
        .unwrap_or(-1);
    if base_here != base {
        return Ok(HashMap::new());
    }
    match read_delayed(&batch, DecodeLimits::DEFAULT) {
        Ok(Some(records)) => Ok(records
            .into_iter()
            .filter_map(|(offset, r)| Some((u32::try_from(offset - base).ok()?, r)))
            .collect()),
        Ok(None) => Ok(HashMap::new()),
        Err(e) => {
            tracing::warn!(partition = %key, offset = base, error = %e, "a delayed batch does not decode; its records are dropped");
            Ok(HashMap::new())
        }
    }
}
