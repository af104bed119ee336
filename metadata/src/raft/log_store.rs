//! The Raft log on local disk, in a `redb` database. Every append, vote,
//! truncation and purge is committed with fsync before openraft is told it
//! is done. The committed log id is not written on its own: openraft reports
//! it after every commit, on the path between an entry's fsync and its
//! apply, where a database write of its own (even one without fsync) cost
//! a tenth of a command's time. It is kept in memory and written in the
//! next durable write (the next append, in practice), or at a clean
//! shutdown ([`LogStore::write_committed`]), so that a stopped node's data
//! dir holds all it knew committed. One lost in a crash only means the
//! node re-applies less of its log at start and learns the rest from the
//! leader (openraft does not need it stored at all).
//! Values are encoded by [`super::codec`] (binary; JSON written by older
//! versions is still read).

use std::fmt::Debug;
use std::ops::RangeBounds;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use openraft::storage::{LogFlushed, LogState, RaftLogStorage};
use openraft::{RaftLogReader, StorageIOError, Vote};
use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};

use super::codec;
use super::{Entry, LogId, NodeId, StorageError, TypeConfig};

const LOGS: TableDefinition<'_, u64, &[u8]> = TableDefinition::new("logs");
const META: TableDefinition<'_, &str, &[u8]> = TableDefinition::new("meta");
const VOTE: &str = "vote";
const COMMITTED: &str = "committed";
const LAST_PURGED: &str = "last_purged";

/// The log store; clones share one database.
#[derive(Clone)]
pub struct LogStore {
    db: Arc<Database>,
    /// Durable commits (each one fsync) since the store was opened.
    syncs: Arc<AtomicU64>,
    /// The committed log id reported since the last durable write, written
    /// with the next one.
    committed: Arc<Mutex<Option<LogId>>>,
    /// Tests: every write fails (a disk full, an fsync that failed).
    #[cfg(test)]
    fail_writes: Arc<std::sync::atomic::AtomicBool>,
}

impl Debug for LogStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LogStore")
    }
}

fn io_read(e: impl std::error::Error + 'static) -> StorageError {
    StorageIOError::read_logs(&e).into()
}

fn io_write(e: impl std::error::Error + 'static) -> StorageError {
    StorageIOError::write_logs(&e).into()
}

impl LogStore {
    /// Opens (or creates) the log database at `path`.
    pub fn open(path: &Path) -> Result<Self, StorageError> {
        let db = Database::create(path).map_err(io_write)?;
        let txn = db.begin_write().map_err(io_write)?;
        txn.open_table(LOGS).map_err(io_write)?;
        txn.open_table(META).map_err(io_write)?;
        txn.commit().map_err(io_write)?;
        Ok(Self {
            db: Arc::new(db),
            syncs: Arc::new(AtomicU64::new(0)),
            committed: Arc::new(Mutex::new(None)),
            #[cfg(test)]
            fail_writes: Default::default(),
        })
    }

    /// Tests: makes every later write fail as a full disk would.
    #[cfg(test)]
    pub(crate) fn fail_writes(&self) {
        self.fail_writes.store(true, Ordering::Relaxed);
    }

    /// Writes the committed log id reported since the last durable write,
    /// durably, if there is one (at shutdown: nothing else may follow).
    pub async fn write_committed(&self) -> Result<(), StorageError> {
        let pending = self
            .committed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some();
        if pending {
            self.write(|_| Ok(())).await?;
        }
        Ok(())
    }

    /// How many durable commits (fsyncs of the log) this store has made
    /// since it was opened.
    pub fn syncs(&self) -> u64 {
        self.syncs.load(Ordering::Relaxed)
    }

    fn get_meta<T: serde::de::DeserializeOwned>(
        &self,
        key: &str,
    ) -> Result<Option<T>, StorageError> {
        let txn = self.db.begin_read().map_err(io_read)?;
        let table = txn.open_table(META).map_err(io_read)?;
        match table.get(key).map_err(io_read)? {
            None => Ok(None),
            Some(v) => codec::decode(v.value()).map(Some).map_err(io_read),
        }
    }

    /// Runs a write transaction off the async runtime and commits it with
    /// fsync. The committed log id reported since the last one goes in the
    /// same transaction.
    async fn write<F>(&self, f: F) -> Result<(), StorageError>
    where
        F: FnOnce(&redb::WriteTransaction) -> Result<(), StorageError> + Send + 'static,
    {
        let db = self.db.clone();
        let syncs = self.syncs.clone();
        let committed = self.committed.clone();
        #[cfg(test)]
        if self.fail_writes.load(Ordering::Relaxed) {
            return Err(io_write(std::io::Error::from_raw_os_error(28)));
        }
        tokio::task::spawn_blocking(move || {
            let started = std::time::Instant::now();
            let txn = db.begin_write().map_err(io_write)?;
            let pending = *committed.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(id) = pending {
                let bytes = codec::encode(&Some(id)).map_err(io_write)?;
                let mut t = txn.open_table(META).map_err(io_write)?;
                t.insert(COMMITTED, bytes.as_slice()).map_err(io_write)?;
            }
            f(&txn)?;
            txn.commit().map_err(io_write)?;
            syncs.fetch_add(1, Ordering::Relaxed);
            crate::metrics::log_write_seconds(started.elapsed());
            // Written: forget it unless a newer one came meanwhile.
            let mut now = committed.lock().unwrap_or_else(|e| e.into_inner());
            if *now == pending {
                *now = None;
            }
            Ok(())
        })
        .await
        .map_err(io_write)?
    }

    async fn put_meta<T: serde::Serialize>(
        &self,
        key: &'static str,
        value: &T,
    ) -> Result<(), StorageError> {
        let bytes = codec::encode(value).map_err(io_write)?;
        self.write(move |txn| {
            let mut t = txn.open_table(META).map_err(io_write)?;
            t.insert(key, bytes.as_slice()).map_err(io_write)?;
            Ok(())
        })
        .await
    }
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + Send>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, StorageError> {
        let txn = self.db.begin_read().map_err(io_read)?;
        let table = txn.open_table(LOGS).map_err(io_read)?;
        let mut out = Vec::new();
        for item in table.range(range).map_err(io_read)? {
            let (_, v) = item.map_err(io_read)?;
            out.push(codec::decode(v.value()).map_err(io_read)?);
        }
        Ok(out)
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = Self;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, StorageError> {
        let last_purged: Option<LogId> = self.get_meta(LAST_PURGED)?;
        let txn = self.db.begin_read().map_err(io_read)?;
        let table = txn.open_table(LOGS).map_err(io_read)?;
        let last = match table.last().map_err(io_read)? {
            Some((_, v)) => {
                let e: Entry = codec::decode(v.value()).map_err(io_read)?;
                Some(e.log_id)
            }
            None => last_purged,
        };
        Ok(LogState {
            last_purged_log_id: last_purged,
            last_log_id: last,
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<NodeId>) -> Result<(), StorageError> {
        self.put_meta(VOTE, vote).await
    }

    async fn read_vote(&mut self) -> Result<Option<Vote<NodeId>>, StorageError> {
        self.get_meta(VOTE)
    }

    /// Kept in memory and written with the next durable write (see the
    /// module's note): openraft calls this between every commit and its
    /// apply.
    async fn save_committed(&mut self, committed: Option<LogId>) -> Result<(), StorageError> {
        if committed.is_some() {
            *self.committed.lock().unwrap_or_else(|e| e.into_inner()) = committed;
        }
        Ok(())
    }

    async fn read_committed(&mut self) -> Result<Option<LogId>, StorageError> {
        let pending = *self.committed.lock().unwrap_or_else(|e| e.into_inner());
        let stored = self.get_meta::<Option<LogId>>(COMMITTED)?.flatten();
        Ok(pending.max(stored))
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: LogFlushed<TypeConfig>,
    ) -> Result<(), StorageError>
    where
        I: IntoIterator<Item = Entry> + Send,
        I::IntoIter: Send,
    {
        let encoded: Vec<(u64, Vec<u8>)> = entries
            .into_iter()
            .map(|e| codec::encode(&e).map(|b| (e.log_id.index, b)))
            .collect::<Result<_, _>>()
            .map_err(io_write)?;
        let res = self
            .write(move |txn| {
                let mut t = txn.open_table(LOGS).map_err(io_write)?;
                for (index, bytes) in &encoded {
                    t.insert(*index, bytes.as_slice()).map_err(io_write)?;
                }
                Ok(())
            })
            .await;
        match &res {
            Ok(()) => callback.log_io_completed(Ok(())),
            Err(e) => callback.log_io_completed(Err(std::io::Error::other(e.to_string()))),
        }
        res
    }

    async fn truncate(&mut self, log_id: LogId) -> Result<(), StorageError> {
        self.write(move |txn| {
            let mut t = txn.open_table(LOGS).map_err(io_write)?;
            t.retain_in(log_id.index.., |_, _| false)
                .map_err(io_write)?;
            Ok(())
        })
        .await
    }

    async fn purge(&mut self, log_id: LogId) -> Result<(), StorageError> {
        let bytes = codec::encode(&log_id).map_err(io_write)?;
        self.write(move |txn| {
            let mut m = txn.open_table(META).map_err(io_write)?;
            m.insert(LAST_PURGED, bytes.as_slice()).map_err(io_write)?;
            let mut t = txn.open_table(LOGS).map_err(io_write)?;
            t.retain_in(..=log_id.index, |_, _| false)
                .map_err(io_write)?;
            Ok(())
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use openraft::{CommittedLeaderId, EntryPayload, RaftLogReader};

    use super::*;
    use crate::command::Command;

    /// A log written by a version that stored JSON is still read after an
    /// upgrade in place; new entries are binary beside the old ones.
    #[tokio::test]
    async fn a_json_log_of_an_older_version_is_still_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("raft-log.redb");
        let old = |index: u64| Entry {
            log_id: LogId::new(CommittedLeaderId::new(1, 1), index),
            payload: EntryPayload::Normal(Command::Drain {
                id: crate::ids::BrokerId(index as u32),
            }),
        };
        let vote = Vote::new(1, 1);
        {
            let db = Database::create(&path).unwrap();
            let txn = db.begin_write().unwrap();
            {
                let mut logs = txn.open_table(LOGS).unwrap();
                for i in 1..=2 {
                    logs.insert(i, serde_json::to_vec(&old(i)).unwrap().as_slice())
                        .unwrap();
                }
                let mut meta = txn.open_table(META).unwrap();
                meta.insert(VOTE, serde_json::to_vec(&vote).unwrap().as_slice())
                    .unwrap();
            }
            txn.commit().unwrap();
        }
        let mut store = LogStore::open(&path).unwrap();
        assert_eq!(store.read_vote().await.unwrap(), Some(vote));
        let state = store.get_log_state().await.unwrap();
        assert_eq!(state.last_log_id.map(|l| l.index), Some(2));
        let entries = store.try_get_log_entries(1..3).await.unwrap();
        assert_eq!(format!("{:?}", entries[1]), format!("{:?}", old(2)));
        // A new vote is written binary and read back.
        let newer = Vote::new(2, 1);
        store.save_vote(&newer).await.unwrap();
        assert_eq!(store.read_vote().await.unwrap(), Some(newer));
    }

    /// The committed log id costs no database write of its own: it is kept
    /// in memory and goes into the next durable write, so it survives a
    /// restart once anything else has been written after it.
    #[tokio::test]
    async fn the_committed_id_is_written_with_the_next_durable_write() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("raft-log.redb");
        let id = |index: u64| LogId::new(CommittedLeaderId::new(1, 1), index);
        {
            let mut store = LogStore::open(&path).unwrap();
            store.save_committed(Some(id(3))).await.unwrap();
            assert_eq!(store.read_committed().await.unwrap(), Some(id(3)));
            let stored: Option<Option<LogId>> = store.get_meta(COMMITTED).unwrap();
            assert_eq!(stored, None, "not written on its own");
            assert_eq!(store.syncs(), 0);
            store.save_vote(&Vote::new(1, 1)).await.unwrap();
            assert_eq!(store.syncs(), 1);
            // Reported later, not yet written: the newer one is read.
            store.save_committed(Some(id(5))).await.unwrap();
            assert_eq!(store.read_committed().await.unwrap(), Some(id(5)));
        }
        let mut store = LogStore::open(&path).unwrap();
        assert_eq!(store.read_committed().await.unwrap(), Some(id(3)));
        // At shutdown the last one reported is written on its own.
        store.save_committed(Some(id(6))).await.unwrap();
        store.write_committed().await.unwrap();
        assert_eq!(store.syncs(), 1);
        store.write_committed().await.unwrap();
        assert_eq!(store.syncs(), 1, "nothing pending: no write");
        drop(store);
        let mut store = LogStore::open(&path).unwrap();
        assert_eq!(store.read_committed().await.unwrap(), Some(id(6)));
    }
}
