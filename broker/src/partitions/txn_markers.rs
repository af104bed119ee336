//! The partition owner's side of transactions: writing a COMMIT/ABORT
//! marker ([`Partitions::write_marker`]), telling a coordinator whether an
//! open transaction is durable here ([`Partitions::txn_durable`]), KIP-890's
//! check before a transactional batch is sequenced, and the producers of a
//! partition (DescribeProducers).

use floe_metadata::ids::{PartitionKey, ProducerId};

use super::Partitions;
use super::log::MarkerAppended;
use super::txn_log::{Holding, Marker};
use crate::error::{BrokerError, ErrorKind, Result};

/// One producer of a partition as DescribeProducers answers it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProducerInfo {
    pub producer_id: i64,
    pub epoch: i16,
    /// The last sequence stored (-1: none known).
    pub last_sequence: i32,
    /// When it last wrote here (ms; -1: not known, e.g. since a take-over).
    pub last_timestamp: i64,
    /// Where its open transaction here begins (-1: none open).
    pub txn_start_offset: i64,
}

impl Partitions {
    /// Writes `marker` at `key`, owned here: sequenced as a control batch
    /// and answered once it is committed. A producer with no transaction
    /// open on the partition needs no marker: answered at once.
    pub async fn write_marker(&self, key: &PartitionKey, marker: &Marker) -> Result<()> {
        if self.is_stopping() {
            return Err(BrokerError::new(
                ErrorKind::ShuttingDown,
                "the broker is stopping",
            ));
        }
        let log = self.active_log(key)?;
        let now = floe_metadata::clock::now_ms() as i64;
        // A marker is a few dozen bytes and frees the partition's LSO: it
        // is never refused for the backlog.
        let held = crate::partitions::backlog::Held::untracked();
        let (rx, queued) = match log.append_marker(marker, now, held)? {
            MarkerAppended::NotNeeded => return Ok(()),
            MarkerAppended::New(rx, queued) => (rx, queued),
        };
        // The producer's next transaction and read_committed readers wait
        // for this marker: it goes at once unless flushes are paced (a
        // store that charges per PUT), where it takes the next paced flush
        // as a produce does, so markers never raise the PUT rate.
        if !self.inner.cfg.flush.paced || queued >= self.inner.cfg.flush.bytes {
            self.inner.flush_now.notify_one();
        }
        match rx.await {
            Ok(r) => r,
            Err(_) => Err(BrokerError::not_owner(key)),
        }
    }

    /// Before a commit is decided (the coordinator's
    /// [`MarkerWriter::durable`](crate::txn::MarkerWriter::durable)): what this owner of `key` holds of
    /// `producer`'s open transaction there
    /// ([`crate::partitions::txn_log::PartitionTxnLog::holding`]). When it holds
    /// all of it, answered once that is durable (the high watermark at the
    /// log end as it was when asked; a flush is asked for at once unless
    /// flushes are paced); [`Holding::NotAll`] at once if not, or if a
    /// failed flush rolls some of it back meanwhile.
    pub async fn txn_durable(&self, key: &PartitionKey, producer: ProducerId) -> Result<Holding> {
        if self.is_stopping() {
            return Err(BrokerError::new(
                ErrorKind::ShuttingDown,
                "the broker is stopping",
            ));
        }
        let log = self.active_log(key)?;
        let mut hw = log.subscribe_hw();
        let (target, follows, owner_epoch) = {
            let st = log.lock();
            let Some(follows) = st.txns.holding(producer) else {
                return Ok(Holding::NotAll);
            };
            (st.leo, follows, st.epoch)
        };
        self.request_sequenced();
        loop {
            {
                let st = log.lock();
                if st.status != crate::partitions::log::Status::Active {
                    return Err(BrokerError::not_owner(*key));
                }
                if st.txns.holding(producer).is_none() {
                    return Ok(Holding::NotAll);
                }
                if st.hw >= target {
                    return Ok(Holding::All {
                        follows,
                        owner_epoch,
                    });
                }
            }
            if hw.changed().await.is_err() {
                return Err(BrokerError::not_owner(*key));
            }
        }
    }

    /// KIP-890's check, before a produce is sequenced: a transactional
    /// batch that would begin a transaction on `key` (its producer has none
    /// open here) is taken only if the metadata shows that producer id, at
    /// that epoch, in an ongoing transaction that holds the partition
    /// (AddPartitionsToTxn is answered before the client sends). A batch
    /// of a transaction already open here needs no check: its marker ends
    /// it. So a forged or late transactional batch can never hold the last
    /// stable offset without a coordinator that will end it.
    pub(crate) async fn verify_transactional(
        &self,
        key: &PartitionKey,
        records: &[u8],
    ) -> Result<()> {
        // Headers only, without the log's lock: most produces hold no
        // transactional batch.
        let mut unchecked: Vec<(i64, i16)> = Vec::new();
        for item in floe_storage::batch::BatchIter::new(records, usize::MAX) {
            let Ok((_, v)) = item else { break }; // sequencing refuses it
            let who = (v.producer_id(), v.producer_epoch());
            if v.is_transactional() && !v.is_control() && !unchecked.contains(&who) {
                unchecked.push(who);
            }
        }
        if unchecked.is_empty() {
            return Ok(());
        }
        let Some(log) = self.log(key) else {
            return Ok(()); // sequencing refuses it
        };
        {
            let st = log.lock();
            unchecked.retain(|(pid, _)| !st.txns.is_open(ProducerId(*pid)));
        }
        if unchecked.is_empty() {
            return Ok(());
        }
        for (pid, epoch) in unchecked {
            // One keyed lookup: the transactional id holding this producer id.
            let txns = self
                .meta()
                .transactions_where(&floe_metadata::txn::TxnFilter {
                    producer_id: Some(floe_metadata::ids::ProducerId(pid)),
                    ..Default::default()
                })
                .await
                .map_err(BrokerError::from)?;
            let Some((id, t)) = txns.iter().find(|(_, t)| t.producer_id.0 == pid) else {
                return Err(BrokerError::new(
                    ErrorKind::InvalidTxnState,
                    format!("producer {pid} has no transaction"),
                ));
            };
            if t.epoch.0 > epoch {
                return Err(BrokerError::new(
                    ErrorKind::InvalidProducerEpoch,
                    format!(
                        "producer {pid} epoch {epoch} is fenced by epoch {}",
                        t.epoch.0
                    ),
                ));
            }
            if t.epoch.0 != epoch
                || t.state != floe_metadata::txn::TxnState::Ongoing
                || !t.partitions.contains(key)
            {
                return Err(BrokerError::new(
                    ErrorKind::InvalidTxnState,
                    format!(
                        "{key} is not in an ongoing transaction of {} at producer {pid} epoch {epoch}",
                        id.as_str()
                    ),
                ));
            }
        }
        Ok(())
    }

    /// The producers the owner of `key` knows, with their open
    /// transactions' start offsets.
    pub fn producers(&self, key: &PartitionKey) -> Result<Vec<ProducerInfo>> {
        let log = self.active_log(key)?;
        let st = log.lock();
        let mut out: Vec<ProducerInfo> = st
            .producers
            .describe()
            .into_iter()
            .map(|(id, epoch, last, at)| ProducerInfo {
                producer_id: id,
                epoch,
                last_sequence: last,
                last_timestamp: at,
                txn_start_offset: st.txns.open_since(ProducerId(id)).unwrap_or(-1),
            })
            .collect();
        // A producer with a transaction open but forgotten as idempotent
        // (expired) is still listed.
        for p in st.txns.open_producers() {
            if !out.iter().any(|i| i.producer_id == p.0) {
                out.push(ProducerInfo {
                    producer_id: p.0,
                    epoch: -1,
                    last_sequence: -1,
                    last_timestamp: -1,
                    txn_start_offset: st.txns.open_since(p).unwrap_or(-1),
                });
            }
        }
        Ok(out)
    }
}
