//! Producing to an owned partition: validation, sequencing, and the wait
//! for the acknowledgement level.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use floe_storage::PartitionKey;

use super::Partitions;
use super::admission::Admission;
use super::log::PartitionLog;
use crate::error::{BrokerError, CallError, ErrorKind, Result};

/// `acks` of a produce request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Acks {
    None,
    Leader,
    All,
}

impl Acks {
    pub fn from_kafka(acks: i16) -> Option<Self> {
        match acks {
            0 => Some(Acks::None),
            1 => Some(Acks::Leader),
            -1 => Some(Acks::All),
            _ => None,
        }
    }
}

/// The answer to a produce of one partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProduceOk {
    pub base_offset: i64,
    pub log_start_offset: i64,
    /// `-1` unless the topic uses `LogAppendTime`.
    pub log_append_time: i64,
}

/// A sequenced produce waiting for its acknowledgement level.
pub struct PendingProduce(Pending);

type RemoteAck =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<ProduceOk, CallError>> + Send>>;

enum Pending {
    Here(Here),
    Remote(RemoteAck),
}

/// A produce sequenced by this process's broker.
enum Here {
    Local {
        log: Arc<PartitionLog>,
        rx: Option<tokio::sync::oneshot::Receiver<Result<()>>>,
        ok: ProduceOk,
    },
    Duplicate {
        log: Arc<PartitionLog>,
        first_offset: i64,
        last_offset: i64,
        rollbacks: u64,
    },
}

impl std::fmt::Debug for PendingProduce {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            Pending::Here(Here::Local { log, .. }) => write!(f, "PendingProduce({})", log.key),
            Pending::Remote(_) => write!(f, "PendingProduce(remote)"),
            Pending::Here(Here::Duplicate { log, .. }) => {
                write!(f, "PendingProduce({}, duplicate)", log.key)
            }
        }
    }
}

impl PendingProduce {
    /// A produce sequenced by a broker in another process.
    pub fn remote(
        fut: impl std::future::Future<Output = Result<ProduceOk, CallError>> + Send + 'static,
    ) -> Self {
        PendingProduce(Pending::Remote(Box::pin(fut)))
    }

    /// Waits for the acknowledgement. A remote owner that goes away before
    /// it answers is a routing failure ([`CallError::Routing`]).
    pub async fn wait(self) -> Result<ProduceOk, CallError> {
        match self.0 {
            Pending::Remote(f) => f.await,
            Pending::Here(here) => Ok(Self::wait_here(here).await?),
        }
    }

    async fn wait_here(here: Here) -> Result<ProduceOk> {
        let (log, rx, ok) = match here {
            Here::Local { log, rx, ok } => (log, rx, ok),
            Here::Duplicate {
                log,
                first_offset,
                last_offset,
                rollbacks,
            } => {
                log.wait_duplicate(last_offset, rollbacks).await?;
                let (log_start, _, _) = log.offsets();
                return Ok(ProduceOk {
                    base_offset: first_offset,
                    log_start_offset: log_start,
                    log_append_time: -1,
                });
            }
        };
        if let Some(rx) = rx {
            match rx.await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => return Err(e),
                Err(_) => {
                    return Err(BrokerError::outcome_unknown(
                        "its flush was dropped (broker stopping)",
                    ));
                }
            }
        }
        let (log_start, _, _) = log.offsets();
        Ok(ProduceOk {
            log_start_offset: log_start,
            ..ok
        })
    }
}

impl Partitions {
    /// Validates and sequences produced batches (synchronously, so that a
    /// connection's requests are applied in the order they came). The
    /// returned [`PendingProduce`] resolves once the `acks` level is met:
    /// `acks=all` when the batches are in the object store and committed in
    /// metadata; `acks=1`/`0` at once.
    ///
    /// The bytes count against the broker's unflushed cap; when it is full,
    /// this fails at once with [`ErrorKind::Backpressure`] (see
    /// [`Partitions::append_within`](crate::partitions::Partitions::append_within) to wait for room).
    pub fn append(&self, key: &PartitionKey, records: &[u8], acks: Acks) -> Result<PendingProduce> {
        let held = self.inner.backlog.try_hold(records.len());
        self.sequence(key, Bytes::copy_from_slice(records), acks, held, None)
            .map(|here| PendingProduce(Pending::Here(here)))
    }

    /// [`Partitions::append`](crate::partitions::Partitions::append), waiting up to `room_wait` for the unflushed
    /// bytes to fall under their cap. Nothing is sequenced while it waits
    /// (a connection's requests keep their order: the caller awaits this
    /// before sequencing the next).
    pub async fn append_within(
        &self,
        key: &PartitionKey,
        records: Bytes,
        acks: Acks,
        room_wait: Duration,
    ) -> Result<PendingProduce> {
        self.verify_transactional(key, &records[..]).await?;
        let until = tokio::time::Instant::now() + room_wait;
        let held = self.inner.backlog.hold(records.len(), until).await;
        // What the topic's settings ask of the records (keys on a
        // compacted topic, its codec) is CPU work: off the runtime's
        // threads, before sequencing.
        let admission = self.log(key).map(|l| Admission::of(&l.lock().config));
        // Decided here whether or not there is work: `sequence` does not
        // look at the topic's settings again.
        let now = floe_metadata::clock::now_ms();
        let (records, admitted) = match admission {
            Some(a) if a.has_work(&records) => {
                let owned = records.clone();
                let done = tokio::task::spawn_blocking(move || a.admit(&owned, now))
                    .await
                    .map_err(|e| {
                        BrokerError::new(
                            ErrorKind::CorruptMessage,
                            format!("admission failed: {e}"),
                        )
                    })??;
                (done.records.unwrap_or(records), Some(done.delayed))
            }
            Some(_) => (records, Some(false)),
            None => (records, None),
        };
        self.sequence(key, records, acks, held, admitted)
            .map(|here| PendingProduce(Pending::Here(here)))
    }

    /// Sequences `records`; `admitted` when the topic's admission
    /// ([`Admission`]) was already decided for them (applied, or found to
    /// have nothing to do), with whether they hold delayed batches.
    fn sequence(
        &self,
        key: &PartitionKey,
        records: Bytes,
        acks: Acks,
        held: Option<crate::partitions::backlog::Held>,
        admitted: Option<bool>,
    ) -> Result<Here> {
        if self.inner.stop.is_cancelled() {
            return Err(BrokerError::new(
                ErrorKind::ShuttingDown,
                "the broker is stopping",
            ));
        }
        let log = self.active_log(key)?;
        let Some(held) = held else {
            let backlog = &self.inner.backlog;
            crate::metrics::backpressure();
            return Err(BrokerError::new(
                ErrorKind::Backpressure,
                format!(
                    "{} bytes wait for the object store (cap {}); try again",
                    backlog.bytes(),
                    backlog.cap()
                ),
            ));
        };
        let (records, delayed) = match admitted {
            Some(delayed) => (records, delayed),
            None => {
                let admission = Admission::of(&log.lock().config);
                let done = admission.admit(&records, floe_metadata::clock::now_ms())?;
                (done.records.unwrap_or(records), done.delayed)
            }
        };
        let now = floe_metadata::clock::now_ms() as i64;
        let appended = log.append(&records, acks == Acks::All, now, held, delayed)?;
        let (batches, rx, queued) = match appended {
            crate::partitions::log::Appended::New(b, rx, queued) => (b, rx, queued),
            crate::partitions::log::Appended::Duplicate {
                first_offset,
                last_offset,
                rollbacks,
            } => {
                // Answer once the original is committed, with its offsets.
                return Ok(Here::Duplicate {
                    log,
                    first_offset,
                    last_offset,
                    rollbacks,
                });
            }
        };
        let flush = &self.inner.cfg.flush;
        if log.just_taken(flush.after_take_over) {
            // Its producers waited for the take-over: no pacing on top.
            self.flush_at_once();
        } else if queued >= flush.bytes || self.inner.backlog.bytes() >= flush.bytes {
            self.inner.flush_now.notify_one();
        }
        let log_append_time = match log.lock().config.timestamp_type {
            crate::config::TimestampType::LogAppendTime => now,
            crate::config::TimestampType::CreateTime => -1,
        };
        Ok(Here::Local {
            log,
            rx,
            ok: ProduceOk {
                base_offset: batches.first_offset,
                log_start_offset: 0,
                log_append_time,
            },
        })
    }

    /// [`Partitions::append`](crate::partitions::Partitions::append) and wait.
    pub async fn produce(
        &self,
        key: &PartitionKey,
        records: &[u8],
        acks: Acks,
    ) -> Result<ProduceOk> {
        self.verify_transactional(key, records).await?;
        let held = self.inner.backlog.try_hold(records.len());
        let records = Bytes::copy_from_slice(records);
        PendingProduce::wait_here(self.sequence(key, records, acks, held, None)?).await
    }

    /// Appends a delayed topic's due records (`crate::partitions::delayed`): no
    /// admission (they are due, and carry the broker's own
    /// `floe-delayed-from` header), within the backlog's limits (waiting up
    /// to `room_wait` for room), answered once committed.
    pub(crate) async fn append_due(
        &self,
        key: &PartitionKey,
        records: Bytes,
        room_wait: Duration,
    ) -> Result<ProduceOk> {
        let until = tokio::time::Instant::now() + room_wait;
        let held = self.inner.backlog.hold(records.len(), until).await;
        PendingProduce::wait_here(self.sequence(key, records, Acks::All, held, Some(false))?).await
    }
}
