//! Several flushes in flight: the next WAL object is built and its write
//! started while earlier ones are still being written, so that throughput
//! on a store with slow PUTs is not bounded by one PUT's latency.
//!
//! Writes overlap and may finish in any order; commits do not. A flush
//! commits only once the flush prepared before it has finished committing
//! (or failing), so a partition's ranges are committed, its high watermark
//! moves and its produces are acknowledged in offset order, whichever PUT
//! lands first. A write that fails goes to a new object inside its own
//! flush ([`Flush::write`]): the flushes behind it wait, nothing is
//! reordered and no offset is skipped. A partition an earlier commit found
//! moved or deleted fails in the later flushes too ([`Flush::commit`]).

use std::future::Future;
use std::sync::Arc;
use std::task::Poll;
use std::time::{Duration, Instant};

use futures::StreamExt;
use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use tokio::sync::oneshot;
use tracing::Instrument as _;

use super::{Flush, Flushed};
use crate::partitions::log::PartitionLog;

/// What one flush of the pipeline did, and how long it took from its start
/// to its commit.
#[derive(Debug)]
pub(crate) struct Done {
    pub flushed: Flushed,
    pub elapsed: Duration,
    /// Its WAL object's size, as [`Pipeline::bytes`] counted it.
    pub size: usize,
}

/// The flushes in flight of one broker, at most `max` at once.
pub(crate) struct Pipeline<'a> {
    flush: &'a Flush<'a>,
    max: usize,
    running: FuturesUnordered<BoxFuture<'a, Done>>,
    /// Resolves once the last flush started has committed: the next one
    /// commits after it.
    last: Option<oneshot::Receiver<()>>,
    /// Bytes of the WAL objects in flight.
    bytes: usize,
}

impl<'a> Pipeline<'a> {
    pub(crate) fn new(flush: &'a Flush<'a>, max: usize) -> Self {
        Self {
            flush,
            max: max.max(1),
            running: FuturesUnordered::new(),
            last: None,
            bytes: 0,
        }
    }

    /// Flushes started and not yet committed.
    pub(crate) fn len(&self) -> usize {
        self.running.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.running.is_empty()
    }

    /// Bytes of the WAL objects in flight.
    #[cfg(test)]
    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }

    /// Whether the flusher starts a flush now. With none in flight: when
    /// one is asked for or due (`wanted`). With some in flight: when there
    /// is room and a whole object of `object_bytes` waits, out of the
    /// `sequenced` bytes not yet committed; a light load so keeps to one
    /// flush at a time (and its latency), a heavy one overlaps its PUTs.
    pub(crate) fn may_start(&self, wanted: bool, sequenced: usize, object_bytes: usize) -> bool {
        if self.is_empty() {
            return wanted;
        }
        self.has_room() && sequenced.saturating_sub(self.bytes) >= object_bytes
    }

    /// Whether another flush may start.
    pub(crate) fn has_room(&self) -> bool {
        self.running.len() < self.max
    }

    /// Takes what `logs` have queued into a new WAL object and starts
    /// writing it (it runs while [`Pipeline::next`] is polled). Returns
    /// whether a flush started: not when the pipeline is full or nothing
    /// was queued.
    pub(crate) fn start(&mut self, logs: Vec<Arc<PartitionLog>>) -> bool {
        if !self.has_room() {
            return false;
        }
        let Some(prepared) = self.flush.prepare(logs) else {
            return false;
        };
        let started = Instant::now();
        let size = prepared.size();
        self.bytes += size;
        let before = self.last.take();
        let (turn_tx, turn_rx) = oneshot::channel();
        self.last = Some(turn_rx);
        let flush = self.flush;
        let span = prepared.span();
        self.running.push(Box::pin(
            async move {
                let stored = flush.write(&prepared).await;
                let written = Instant::now();
                crate::metrics::flush_phase("write", written - started);
                if let Some(before) = before {
                    // Sent once the flush before has committed; an error means
                    // it was dropped (the broker stopping): the metadata refuses
                    // a range that does not follow the committed end anyway.
                    let _ = before.await;
                    crate::metrics::flush_phase("wait", written.elapsed());
                }
                let committing = Instant::now();
                let flushed = flush.commit(prepared, stored).await;
                crate::metrics::flush_phase("commit", committing.elapsed());
                let _ = turn_tx.send(());
                Done {
                    flushed,
                    elapsed: started.elapsed(),
                    size,
                }
            }
            .instrument(span),
        ));
        true
    }

    /// Runs the flushes in flight until one has committed; `None` when none
    /// is in flight. Flushes finish in the order they started.
    pub(crate) fn next(&mut self) -> impl Future<Output = Option<Done>> + Unpin + '_ {
        futures::future::poll_fn(move |cx| {
            let polled = self.running.poll_next_unpin(cx);
            if let Poll::Ready(Some(d)) = &polled {
                self.bytes = self.bytes.saturating_sub(d.size);
            }
            polled
        })
    }
}
