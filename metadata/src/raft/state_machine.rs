//! The Raft state machine: the [`ClusterState`] in memory, persisted as
//! snapshots on local disk (written to a temporary file, fsynced, renamed,
//! directory fsynced). After a restart the last snapshot is loaded and openraft
//! re-applies the committed log entries that follow it. Snapshots are
//! encoded by [`super::codec`] (binary; a JSON snapshot of an older version,
//! `snapshot.json`, is still read).

use std::collections::BTreeMap;
use std::io::{Cursor, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use imbl::OrdMap;
use openraft::storage::{RaftStateMachine, Snapshot};
use openraft::{EntryPayload, RaftSnapshotBuilder, StorageIOError};
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use super::codec;
use super::{Entry, LogId, SnapshotMeta, StorageError, StoredMembership, TypeConfig};
use crate::command::Response;
use crate::ids::Revision;
use crate::ids::{BrokerId, ObjectId, PartitionKey, ShardId};
use crate::state::view::{self, ViewLog};
use crate::state::wire::Flat;
use crate::state::{
    ClusterState, GroupOffsets, NodeInfo, ObjectInfo, Ownership, PartitionState, Topic,
};

const SNAPSHOT_FILE: &str = "snapshot.bin";
/// Where versions before the binary encoding kept the snapshot.
const OLD_SNAPSHOT_FILE: &str = "snapshot.json";

#[derive(Debug, Default, Clone, Serialize, Deserialize)]
struct Applied {
    last_applied: Option<LogId>,
    membership: StoredMembership,
    state: ClusterState,
}

/// [`Applied`] as versions before transactions encoded it in binary:
/// postcard writes a struct as the tuple of its fields, and the model's
/// fields were those of [`ClusterState`] but its last, `txn`. (A JSON
/// snapshot needs no such thing: `txn` has a default there.)
type AppliedBeforeTxn = (Option<LogId>, StoredMembership, StateBeforeTxn);

/// [`ClusterState`]'s fields before `txn`, in order.
type StateBeforeTxn = (
    Revision,
    BTreeMap<BrokerId, NodeInfo>,
    OrdMap<String, Topic>,
    OrdMap<PartitionKey, PartitionState>,
    OrdMap<ObjectId, ObjectInfo>,
    u64,
    BTreeMap<String, GroupOffsets>,
    i64,
    BTreeMap<ShardId, Ownership>,
);

/// [`Applied`] as versions before client quotas encoded it in binary: the
/// model without its last fields, from `quotas` on.
type AppliedBeforeQuotas = (Option<LogId>, StoredMembership, StateBeforeQuotas);

/// [`ClusterState`]'s fields before `quotas`. Postcard writes a tuple as its
/// elements one after the other, so a nested tuple reads the same bytes as
/// the flat list of fields.
type StateBeforeQuotas = (StateBeforeTxn, crate::txn::TxnModel);

/// [`Applied`] as versions before stored group membership encoded it in
/// binary: the model without its last field, `group_records`.
type AppliedBeforeGroupRecords = (Option<LogId>, StoredMembership, StateBeforeGroupRecords);

/// [`Applied`] as versions before SCRAM credentials encoded it in binary:
/// the model without its last field, `scram`.
type AppliedBeforeScram = (Option<LogId>, StoredMembership, StateBeforeScram);

/// [`Applied`] as versions before ACLs encoded it in binary: the model
/// without its last field, `acls`.
type AppliedBeforeAcls = (Option<LogId>, StoredMembership, StateBeforeAcls);

/// [`Applied`] as versions before dynamic broker configs encoded it in
/// binary: the model without its last field, `broker_configs`.
type AppliedBeforeBrokerConfigs = (Option<LogId>, StoredMembership, StateBeforeBrokerConfigs);

/// [`Applied`] as versions before dead nodes were removed encoded it in
/// binary: the model without its last fields, `highest_node_id` and
/// `node_deaths`.
type AppliedBeforeNodeRemoval = (Option<LogId>, StoredMembership, StateBeforeNodeRemoval);

/// [`Applied`] as versions before Iceberg tables encoded it in binary: the
/// model without its last field, `tables`.
type AppliedBeforeTables = (Option<LogId>, StoredMembership, StateBeforeTables);

/// [`ClusterState`]'s fields before `tables`.
type StateBeforeTables = (StateBeforeNodeRemoval, BrokerId, BTreeMap<BrokerId, u64>);

/// [`ClusterState`]'s fields before `highest_node_id`.
type StateBeforeNodeRemoval = (
    StateBeforeBrokerConfigs,
    BTreeMap<String, crate::broker_config::BrokerConfigs>,
);

/// [`ClusterState`]'s fields before `broker_configs`.
type StateBeforeBrokerConfigs = (StateBeforeAcls, crate::acl::AclModel);

/// [`ClusterState`]'s fields before `acls`.
type StateBeforeAcls = (StateBeforeScram, crate::scram::ScramModel);

/// [`ClusterState`]'s fields before `scram`.
type StateBeforeScram = (StateBeforeGroupRecords, BTreeMap<String, Vec<u8>>);

/// [`ClusterState`]'s fields before `group_records`.
type StateBeforeGroupRecords = (
    StateBeforeQuotas,
    crate::quota::QuotaModel,
    BTreeMap<String, crate::group_config::GroupConfigs>,
);

/// The model's flat fields ([`Flat`]) from those of the oldest binary
/// layout, the later ones empty.
fn state_before_txn(old: StateBeforeTxn) -> Flat {
    let (
        revision,
        nodes,
        topics,
        partitions,
        objects,
        next_object_id,
        groups,
        next_producer_id,
        shards,
    ) = old;
    Flat {
        revision,
        nodes,
        topics,
        partitions,
        objects,
        next_object_id,
        groups,
        next_producer_id,
        shards,
        txn: Default::default(),
        quotas: Default::default(),
        group_configs: BTreeMap::new(),
        group_records: BTreeMap::new(),
        scram: Default::default(),
        acls: Default::default(),
        broker_configs: BTreeMap::new(),
        highest_node_id: BrokerId::default(),
        node_deaths: BTreeMap::new(),
        tables: BTreeMap::new(),
    }
}

fn state_before_quotas((old, txn): StateBeforeQuotas) -> Flat {
    Flat {
        txn,
        ..state_before_txn(old)
    }
}

fn state_before_group_records((old, quotas, group_configs): StateBeforeGroupRecords) -> Flat {
    Flat {
        quotas,
        group_configs,
        ..state_before_quotas(old)
    }
}

fn state_before_scram((old, group_records): StateBeforeScram) -> Flat {
    Flat {
        group_records,
        ..state_before_group_records(old)
    }
}

fn state_before_acls((old, scram): StateBeforeAcls) -> Flat {
    Flat {
        scram,
        ..state_before_scram(old)
    }
}

fn state_before_broker_configs((old, acls): StateBeforeBrokerConfigs) -> Flat {
    Flat {
        acls,
        ..state_before_acls(old)
    }
}

fn state_before_node_removal((old, broker_configs): StateBeforeNodeRemoval) -> Flat {
    Flat {
        broker_configs,
        ..state_before_broker_configs(old)
    }
}

fn state_before_tables((old, highest_node_id, node_deaths): StateBeforeTables) -> Flat {
    Flat {
        highest_node_id,
        node_deaths,
        ..state_before_node_removal(old)
    }
}

/// Decodes a snapshot's [`Applied`]: in the current layout, else (a binary
/// snapshot written before dead nodes were removed, before stored group
/// membership, before client quotas, or before transactions, which lack
/// the model's last fields) in the layouts before it, newest first, with
/// those fields empty.
fn decode_applied(bytes: &[u8]) -> Result<Applied, codec::CodecError> {
    let e = match codec::decode::<Applied>(bytes) {
        Ok(a) => return Ok(a),
        Err(e) => e,
    };
    let older = codec::decode::<AppliedBeforeTables>(bytes)
        .map(|(l, m, old)| (l, m, state_before_tables(old)))
        .or_else(|_| {
            codec::decode::<AppliedBeforeNodeRemoval>(bytes)
                .map(|(l, m, old)| (l, m, state_before_node_removal(old)))
        })
        .or_else(|_| {
            codec::decode::<AppliedBeforeBrokerConfigs>(bytes)
                .map(|(l, m, old)| (l, m, state_before_broker_configs(old)))
        })
        .or_else(|_| {
            codec::decode::<AppliedBeforeAcls>(bytes)
                .map(|(l, m, old)| (l, m, state_before_acls(old)))
        })
        .or_else(|_| {
            codec::decode::<AppliedBeforeScram>(bytes)
                .map(|(l, m, old)| (l, m, state_before_scram(old)))
        })
        .or_else(|_| {
            codec::decode::<AppliedBeforeGroupRecords>(bytes)
                .map(|(l, m, old)| (l, m, state_before_group_records(old)))
        })
        .or_else(|_| {
            codec::decode::<AppliedBeforeQuotas>(bytes)
                .map(|(l, m, old)| (l, m, state_before_quotas(old)))
        })
        .or_else(|_| {
            codec::decode::<AppliedBeforeTxn>(bytes)
                .map(|(l, m, old)| (l, m, state_before_txn(old)))
        });
    match older {
        Ok((last_applied, membership, state)) => Ok(Applied {
            last_applied,
            membership,
            state: state.into(),
        }),
        Err(_) => Err(e),
    }
}

#[derive(Debug, Serialize, Deserialize)]
struct SnapshotFile {
    meta: SnapshotMeta,
    /// The serialized [`Applied`], as sent to nodes that are behind.
    data: Vec<u8>,
}

/// Read access to the applied model, shared with the API and the controller.
#[derive(Debug, Clone)]
pub struct SharedState {
    inner: Arc<RwLock<Applied>>,
    revision_rx: watch::Receiver<Revision>,
    /// The revision of the last command that changed the cluster view
    /// ([`crate::state::view`]); the revision of the snapshot after a load.
    view_rx: watch::Receiver<Revision>,
    /// The view's recent changes; written under `inner`'s write lock, read
    /// under its read lock (so one read sees both at one revision).
    views: Arc<std::sync::Mutex<ViewLog>>,
}

impl SharedState {
    /// Runs `f` on the current model.
    pub fn read<T>(&self, f: impl FnOnce(&ClusterState) -> T) -> T {
        let guard = self.inner.read().unwrap_or_else(|p| p.into_inner());
        f(&guard.state)
    }

    /// The last applied revision.
    pub fn revision(&self) -> Revision {
        *self.revision_rx.borrow()
    }

    /// Waits until the applied revision is above `since` (or `timeout` passes)
    /// and returns the revision then.
    pub async fn wait_beyond(&self, since: Revision, timeout: std::time::Duration) -> Revision {
        let mut rx = self.revision_rx.clone();
        let _ = tokio::time::timeout(timeout, rx.wait_for(|r| *r > since)).await;
        *rx.borrow()
    }

    /// Runs `f` on the current model and the view's recent changes, both as
    /// of the same revision.
    pub fn read_with_views<T>(&self, f: impl FnOnce(&ClusterState, &ViewLog) -> T) -> T {
        let guard = self.inner.read().unwrap_or_else(|p| p.into_inner());
        let views = self.views.lock().unwrap_or_else(|p| p.into_inner());
        f(&guard.state, &views)
    }

    /// Waits until a command after `since` changed the cluster view (or
    /// `timeout` passes) and returns the revision of the last one that did.
    pub async fn wait_view_beyond(
        &self,
        since: Revision,
        timeout: std::time::Duration,
    ) -> Revision {
        let mut rx = self.view_rx.clone();
        let _ = tokio::time::timeout(timeout, rx.wait_for(|r| *r > since)).await;
        *rx.borrow()
    }
}

/// The state machine store.
#[derive(Debug)]
pub struct StateMachine {
    dir: PathBuf,
    inner: Arc<RwLock<Applied>>,
    revision_tx: watch::Sender<Revision>,
    view_tx: watch::Sender<Revision>,
    views: Arc<std::sync::Mutex<ViewLog>>,
    snapshot_seq: u64,
}

fn sm_err(e: impl std::error::Error + 'static) -> StorageError {
    StorageIOError::write_state_machine(&e).into()
}

fn snap_err(e: impl std::error::Error + 'static) -> StorageError {
    StorageIOError::write_snapshot(None, &e).into()
}

/// Writes `bytes` to `dir/name` durably: temp file, fsync, rename, fsync dir.
fn write_durably(dir: &Path, name: &str, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = dir.join(format!("{name}.tmp"));
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    drop(f);
    std::fs::rename(&tmp, dir.join(name))?;
    std::fs::File::open(dir)?.sync_all()
}

/// The snapshot file in `dir`, if there is one.
fn read_snapshot_file(dir: &Path) -> Result<Option<SnapshotFile>, StorageError> {
    for name in [SNAPSHOT_FILE, OLD_SNAPSHOT_FILE] {
        match std::fs::read(dir.join(name)) {
            Ok(bytes) => return Ok(Some(codec::decode(&bytes).map_err(snap_err)?)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(snap_err(e)),
        }
    }
    Ok(None)
}

/// Replaces the snapshot file in `dir` durably, off the async runtime.
async fn save_snapshot_file(dir: &Path, file: &SnapshotFile) -> Result<(), StorageError> {
    let bytes = codec::encode(file).map_err(snap_err)?;
    let dir = dir.to_path_buf();
    tokio::task::spawn_blocking(move || {
        write_durably(&dir, SNAPSHOT_FILE, &bytes)?;
        // The new file is durable: an old JSON one would only shadow nothing.
        match std::fs::remove_file(dir.join(OLD_SNAPSHOT_FILE)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    })
    .await
    .map_err(snap_err)?
    .map_err(snap_err)
}

impl StateMachine {
    /// Opens the state machine in `dir`, loading the last snapshot if there is one.
    pub fn open(dir: &Path) -> Result<(Self, SharedState), StorageError> {
        std::fs::create_dir_all(dir).map_err(sm_err)?;
        let applied = match read_snapshot_file(dir)? {
            Some(file) => decode_applied(&file.data).map_err(sm_err)?,
            None => Applied::default(),
        };
        let (revision_tx, revision_rx) = watch::channel(applied.state.revision);
        let (view_tx, view_rx) = watch::channel(applied.state.revision);
        let views = Arc::new(std::sync::Mutex::new(ViewLog::new(applied.state.revision)));
        let inner = Arc::new(RwLock::new(applied));
        Ok((
            Self {
                dir: dir.to_path_buf(),
                inner: inner.clone(),
                revision_tx,
                view_tx,
                views: views.clone(),
                snapshot_seq: 0,
            },
            SharedState {
                inner,
                revision_rx,
                view_rx,
                views,
            },
        ))
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Applied> {
        self.inner.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Applied> {
        self.inner.write().unwrap_or_else(|p| p.into_inner())
    }
}

/// Builds snapshots from a copy of the applied state.
#[derive(Debug)]
pub struct SnapshotBuilder {
    dir: PathBuf,
    applied: Applied,
    id: String,
    /// How long copying the state took (applying waited that long).
    copied: std::time::Duration,
}

impl RaftSnapshotBuilder<TypeConfig> for SnapshotBuilder {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, StorageError> {
        let meta = SnapshotMeta {
            last_log_id: self.applied.last_applied,
            last_membership: self.applied.membership.clone(),
            snapshot_id: self.id.clone(),
        };
        // Encoding a large state takes a while (about 0.14 s at 100,000
        // partitions of 24 index entries): off the async runtime, so
        // heartbeats and commits are not held behind it.
        let started = std::time::Instant::now();
        let applied = std::mem::take(&mut self.applied);
        let data = tokio::task::spawn_blocking(move || codec::encode(&applied))
            .await
            .map_err(snap_err)?
            .map_err(snap_err)?;
        tracing::info!(
            id = %self.id,
            bytes = data.len(),
            copy_us = self.copied.as_micros() as u64,
            encode_ms = started.elapsed().as_millis() as u64,
            "snapshot built"
        );
        let file = SnapshotFile {
            meta: meta.clone(),
            data,
        };
        save_snapshot_file(&self.dir, &file).await?;
        Ok(Snapshot {
            meta,
            snapshot: Box::new(Cursor::new(file.data)),
        })
    }
}

impl RaftStateMachine<TypeConfig> for StateMachine {
    type SnapshotBuilder = SnapshotBuilder;

    async fn applied_state(&mut self) -> Result<(Option<LogId>, StoredMembership), StorageError> {
        let a = self.read();
        Ok((a.last_applied, a.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<Response>, StorageError>
    where
        I: IntoIterator<Item = Entry> + Send,
        I::IntoIter: Send,
    {
        let mut out = Vec::new();
        let mut view = None;
        let revision = {
            let mut a = self.write();
            let mut views = self.views.lock().unwrap_or_else(|p| p.into_inner());
            for e in entries {
                a.last_applied = Some(e.log_id);
                let rev = Revision(e.log_id.index);
                match e.payload {
                    EntryPayload::Blank => {
                        a.state.revision = rev;
                        out.push(Response::Ok);
                    }
                    EntryPayload::Normal(cmd) => {
                        let deleted = view::deleted_by(&a.state, &cmd);
                        let resp = a.state.apply(rev, &cmd);
                        let change = view::change_of(&a.state, &cmd, &resp, &deleted);
                        if !change.is_empty() {
                            views.push(rev, change);
                            view = Some(rev);
                        }
                        out.push(resp);
                    }
                    EntryPayload::Membership(m) => {
                        a.state.revision = rev;
                        a.membership = StoredMembership::new(Some(e.log_id), m);
                        out.push(Response::Ok);
                    }
                }
            }
            a.state.revision
        };
        if let Some(view) = view {
            self.view_tx.send_replace(view);
        }
        self.revision_tx.send_replace(revision);
        Ok(out)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.snapshot_seq += 1;
        // Applying waits while the state is copied: under a microsecond,
        // since the large tables are persistent maps the copy shares (it
        // was 80 ms at 100,000 partitions of 24 index entries: `cargo bench
        // --bench snapshot`). While the copy is kept, a write copies the
        // map nodes it changes.
        let started = std::time::Instant::now();
        let applied = self.read().clone();
        let copied = started.elapsed();
        let id = match applied.last_applied {
            Some(l) => format!("{}-{}-{}", l.leader_id.term, l.index, self.snapshot_seq),
            None => format!("0-0-{}", self.snapshot_seq),
        };
        SnapshotBuilder {
            dir: self.dir.clone(),
            applied,
            id,
            copied,
        }
    }

    async fn begin_receiving_snapshot(&mut self) -> Result<Box<Cursor<Vec<u8>>>, StorageError> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> Result<(), StorageError> {
        let data = snapshot.into_inner();
        let mut applied = decode_applied(&data).map_err(snap_err)?;
        applied.last_applied = meta.last_log_id;
        applied.membership = meta.last_membership.clone();
        save_snapshot_file(
            &self.dir,
            &SnapshotFile {
                meta: meta.clone(),
                data,
            },
        )
        .await?;
        let revision = applied.state.revision;
        {
            let mut a = self.write();
            *a = applied;
            // Whatever changed, pollers take the whole view again.
            *self.views.lock().unwrap_or_else(|p| p.into_inner()) = ViewLog::new(revision);
        }
        self.view_tx.send_replace(revision);
        self.revision_tx.send_replace(revision);
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot<TypeConfig>>, StorageError> {
        Ok(read_snapshot_file(&self.dir)?.map(|f| Snapshot {
            meta: f.meta,
            snapshot: Box::new(Cursor::new(f.data)),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::command::{Command, ShardFence};
    use crate::ids::{BrokerId, ShardId, TransactionalId};
    use crate::txn::{TxnCommand, TxnOp};

    /// A model with a broker owning shard 0, a topic and producer ids.
    fn model() -> ClusterState {
        let mut s = ClusterState::default();
        let cmds = [
            Command::RegisterNode {
                id: BrokerId(1),
                kind: crate::command::NodeKind::Broker,
                addr: "127.0.0.1:1".into(),
                now_ms: 1,
                lease_ms: 1000,
            },
            Command::CreateTopic {
                name: "t".into(),
                id: crate::ids::TopicId(uuid::Uuid::from_bytes([3; 16])),
                partitions: 2,
                config: Default::default(),
            },
            Command::AllocateProducerIds { count: 10 },
            Command::Reassign {
                changes: vec![crate::command::OwnershipChange {
                    item: crate::command::OwnedItem::Shard(ShardId(0)),
                    owner: Some(BrokerId(1)),
                }],
            },
        ];
        for (i, c) in cmds.iter().enumerate() {
            s.apply(Revision(i as u64 + 1), c);
        }
        s
    }

    fn applied(state: &ClusterState) -> Applied {
        Applied {
            last_applied: None,
            membership: StoredMembership::default(),
            state: state.clone(),
        }
    }

    /// The metadata snapshot as each release wrote it
    /// (`floe_types::format_samples`): every release's loads, and this
    /// version writes exactly its own sample.
    #[test]
    fn snapshots_of_every_release_load() {
        let s = model();
        let written = codec::encode(&applied(&s)).unwrap();
        let root = floe_types::format_samples::root(env!("CARGO_MANIFEST_DIR"));
        floe_types::format_samples::check(
            &root,
            env!("CARGO_PKG_VERSION"),
            "meta-snapshot.bin",
            &written,
            |release, bytes| {
                let back = decode_applied(&bytes).unwrap_or_else(|e| panic!("{release}: {e}"));
                assert_eq!(back.state, s, "{release}");
            },
        );
    }

    /// A snapshot of a newer version (fields added after the ones this
    /// version knows) is refused as newer, not loaded without them, and
    /// none of the older layouts takes it either.
    #[test]
    fn a_snapshot_from_a_newer_version_is_refused() {
        let s = model();
        let mut bytes = codec::encode(&applied(&s)).unwrap();
        assert_eq!(decode_applied(&bytes).unwrap().state, s);
        bytes.extend_from_slice(&[3, 1, 2, 3]);
        let e = decode_applied(&bytes).unwrap_err();
        assert!(matches!(e, codec::CodecError::Trailing(4)), "{e:?}");

        // A node whose data directory holds it (a downgrade) does not open,
        // and says why.
        let dir = tempfile::tempdir().unwrap();
        let file = SnapshotFile {
            meta: SnapshotMeta {
                last_log_id: None,
                last_membership: StoredMembership::default(),
                snapshot_id: "newer".into(),
            },
            data: bytes,
        };
        std::fs::write(
            dir.path().join(SNAPSHOT_FILE),
            codec::encode(&file).unwrap(),
        )
        .unwrap();
        let e = StateMachine::open(dir.path()).map(|_| ()).unwrap_err();
        assert!(e.to_string().contains("newer version of Floe"), "{e}");
    }

    #[test]
    fn a_binary_snapshot_from_before_transactions_still_loads() {
        let s = model();
        assert!(s.producers.txn.ids().is_empty());
        // An older version's bytes: the model's fields before `txn`.
        let old: AppliedBeforeTxn = (
            None,
            StoredMembership::default(),
            (
                s.revision,
                s.nodes.by_id.clone(),
                s.topics.by_name.clone(),
                s.topics.partitions.clone(),
                s.topics.objects.clone(),
                s.topics.next_object_id,
                s.groups.offsets.clone(),
                s.producers.next_id,
                s.topics.shards.clone(),
            ),
        );
        let bytes = codec::encode(&old).unwrap();
        assert!(codec::decode::<Applied>(&bytes).is_err());
        assert_eq!(decode_applied(&bytes).unwrap().state, s);
        // JSON snapshots of older versions have no `txn` either.
        let mut json = serde_json::to_value(applied(&s)).unwrap();
        json["state"].as_object_mut().unwrap().remove("txn");
        let json = serde_json::to_vec(&json).unwrap();
        assert_eq!(decode_applied(&json).unwrap().state, s);
        // Garbage is still an error.
        assert!(decode_applied(&[codec::BINARY_V1, 0xff]).is_err());
    }

    #[test]
    fn a_binary_snapshot_from_before_client_quotas_and_group_configs_still_loads() {
        let mut s = model();
        s.apply(Revision(10), &Command::AllocateProducerIds { count: 3 });
        // The layout of the last release: every field up to `txn`.
        // Written flat, as that release did (the layout types nest).
        let old = (
            None::<LogId>,
            StoredMembership::default(),
            (
                s.revision,
                s.nodes.by_id.clone(),
                s.topics.by_name.clone(),
                s.topics.partitions.clone(),
                s.topics.objects.clone(),
                s.topics.next_object_id,
                s.groups.offsets.clone(),
                s.producers.next_id,
                s.topics.shards.clone(),
                s.producers.txn.clone(),
            ),
        );
        let bytes = codec::encode(&old).unwrap();
        assert!(codec::decode::<Applied>(&bytes).is_err());
        assert_eq!(decode_applied(&bytes).unwrap().state, s);
    }

    #[test]
    fn a_binary_snapshot_from_before_stored_groups_still_loads() {
        let mut s = model();
        s.apply(Revision(10), &Command::AllocateProducerIds { count: 3 });
        // The layout of the last release: every field up to `group_configs`.
        // Written flat, as that release did (the layout types nest).
        let old = (
            None::<LogId>,
            StoredMembership::default(),
            (
                s.revision,
                s.nodes.by_id.clone(),
                s.topics.by_name.clone(),
                s.topics.partitions.clone(),
                s.topics.objects.clone(),
                s.topics.next_object_id,
                s.groups.offsets.clone(),
                s.producers.next_id,
                s.topics.shards.clone(),
                s.producers.txn.clone(),
                s.quotas.clone(),
                s.groups.configs.clone(),
            ),
        );
        let bytes = codec::encode(&old).unwrap();
        assert!(codec::decode::<Applied>(&bytes).is_err());
        assert_eq!(decode_applied(&bytes).unwrap().state, s);
    }

    #[test]
    fn a_binary_snapshot_from_before_scram_credentials_still_loads() {
        let mut s = model();
        s.apply(Revision(10), &Command::AllocateProducerIds { count: 3 });
        s.groups.records.insert("g".into(), vec![7]);
        // The layout of the release before SCRAM: up to `group_records`.
        let old = (
            None::<LogId>,
            StoredMembership::default(),
            (
                s.revision,
                s.nodes.by_id.clone(),
                s.topics.by_name.clone(),
                s.topics.partitions.clone(),
                s.topics.objects.clone(),
                s.topics.next_object_id,
                s.groups.offsets.clone(),
                s.producers.next_id,
                s.topics.shards.clone(),
                s.producers.txn.clone(),
                s.quotas.clone(),
                s.groups.configs.clone(),
                s.groups.records.clone(),
            ),
        );
        let bytes = codec::encode(&old).unwrap();
        assert!(codec::decode::<Applied>(&bytes).is_err());
        assert_eq!(decode_applied(&bytes).unwrap().state, s);
    }

    #[test]
    fn a_binary_snapshot_from_before_node_removal_still_loads() {
        let mut s = model();
        s.apply(
            Revision(10),
            &Command::AlterBrokerConfig {
                broker: String::new(),
                set: [("background.threads".into(), "4".into())].into(),
                delete: vec![],
            },
        );
        s.apply(Revision(11), &Command::ExpireLeases { now_ms: 5_000 });
        assert_eq!(s.nodes.by_id[&BrokerId(1)].dead_since_ms, Some(5_000));
        // The layout of the release before dead nodes were removed: up to
        // `broker_configs`, the death times and the highest id not kept.
        let old = (
            None::<LogId>,
            StoredMembership::default(),
            (
                s.revision,
                s.nodes.by_id.clone(),
                s.topics.by_name.clone(),
                s.topics.partitions.clone(),
                s.topics.objects.clone(),
                s.topics.next_object_id,
                s.groups.offsets.clone(),
                s.producers.next_id,
                s.topics.shards.clone(),
                s.producers.txn.clone(),
                s.quotas.clone(),
                s.groups.configs.clone(),
                s.groups.records.clone(),
                s.security.scram.clone(),
                s.security.acls.clone(),
                s.broker_configs.by_resource.clone(),
            ),
        );
        let bytes = codec::encode(&old).unwrap();
        assert!(codec::decode::<Applied>(&bytes).is_err());
        let back = decode_applied(&bytes).unwrap().state;
        assert_eq!(back.broker_configs, s.broker_configs);
        // The dead node's death time is unknown (the next sweep stamps
        // it), and the highest id given is the highest on record.
        assert_eq!(back.nodes.by_id[&BrokerId(1)].dead_since_ms, None);
        assert_eq!(back.nodes.highest_id, BrokerId(1));
        s.nodes.by_id.get_mut(&BrokerId(1)).unwrap().dead_since_ms = None;
        assert_eq!(back, s);
    }

    #[test]
    fn a_binary_snapshot_from_before_broker_configs_still_loads() {
        use crate::acl::{AclBinding, Operation, PatternType, Permission, ResourceType};
        let mut s = model();
        s.apply(
            Revision(10),
            &Command::CreateAcls(vec![AclBinding {
                resource_type: ResourceType::Topic,
                resource_name: "orders".into(),
                pattern: PatternType::Literal,
                principal: "User:alice".into(),
                host: "*".into(),
                operation: Operation::Read,
                permission: Permission::Allow,
            }]),
        );
        // The layout of the release before dynamic broker configs: up to `acls`.
        let old = (
            None::<LogId>,
            StoredMembership::default(),
            (
                s.revision,
                s.nodes.by_id.clone(),
                s.topics.by_name.clone(),
                s.topics.partitions.clone(),
                s.topics.objects.clone(),
                s.topics.next_object_id,
                s.groups.offsets.clone(),
                s.producers.next_id,
                s.topics.shards.clone(),
                s.producers.txn.clone(),
                s.quotas.clone(),
                s.groups.configs.clone(),
                s.groups.records.clone(),
                s.security.scram.clone(),
                s.security.acls.clone(),
            ),
        );
        let bytes = codec::encode(&old).unwrap();
        assert!(codec::decode::<Applied>(&bytes).is_err());
        let back = decode_applied(&bytes).unwrap().state;
        assert_eq!(back.security.acls.bindings.len(), 1);
        assert_eq!(back, s);
    }

    #[test]
    fn a_binary_snapshot_from_before_acls_still_loads() {
        use crate::scram::{ScramAlteration, ScramCredential, ScramMechanism};
        let mut s = model();
        s.apply(
            Revision(10),
            &Command::AlterScramCredentials(ScramAlteration {
                user: "alice".into(),
                upsert: vec![(
                    ScramMechanism::Sha256,
                    ScramCredential {
                        salt: vec![9; 16],
                        stored_key: vec![1; 32],
                        server_key: vec![2; 32],
                        iterations: 4096,
                    },
                )],
                delete: vec![],
            }),
        );
        // The layout of the release before ACLs: up to `scram`.
        let old = (
            None::<LogId>,
            StoredMembership::default(),
            (
                s.revision,
                s.nodes.by_id.clone(),
                s.topics.by_name.clone(),
                s.topics.partitions.clone(),
                s.topics.objects.clone(),
                s.topics.next_object_id,
                s.groups.offsets.clone(),
                s.producers.next_id,
                s.topics.shards.clone(),
                s.producers.txn.clone(),
                s.quotas.clone(),
                s.groups.configs.clone(),
                s.groups.records.clone(),
                s.security.scram.clone(),
            ),
        );
        let bytes = codec::encode(&old).unwrap();
        assert!(codec::decode::<Applied>(&bytes).is_err());
        let back = decode_applied(&bytes).unwrap().state;
        assert!(!back.security.scram.users.is_empty());
        assert_eq!(back, s);
    }

    #[test]
    fn a_snapshot_with_acls_round_trips() {
        use crate::acl::{AclBinding, AclFilter, Operation, PatternType, Permission, ResourceType};
        let mut s = model();
        let b = AclBinding {
            resource_type: ResourceType::Topic,
            resource_name: "orders".into(),
            pattern: PatternType::Prefixed,
            principal: "User:alice".into(),
            host: "*".into(),
            operation: Operation::Write,
            permission: Permission::Allow,
        };
        assert_eq!(
            s.apply(Revision(10), &Command::CreateAcls(vec![b.clone()])),
            Response::Ok
        );
        let bytes = codec::encode(&applied(&s)).unwrap();
        let back = decode_applied(&bytes).unwrap().state;
        assert!(back.security.acls.bindings.contains(&b));
        assert_eq!(back, s);
        assert_eq!(
            s.apply(Revision(11), &Command::DeleteAcls(vec![AclFilter::any()])),
            Response::AclsDeleted(vec![vec![b]])
        );
        assert!(s.security.acls.bindings.is_empty());
    }

    #[test]
    fn a_snapshot_with_scram_credentials_round_trips() {
        use crate::scram::{ScramAlteration, ScramCredential, ScramMechanism};
        let mut s = model();
        let cred = ScramCredential {
            salt: vec![9; 16],
            stored_key: vec![1; 64],
            server_key: vec![2; 64],
            iterations: 8192,
        };
        let r = s.apply(
            Revision(10),
            &Command::AlterScramCredentials(ScramAlteration {
                user: "alice".into(),
                upsert: vec![(ScramMechanism::Sha512, cred.clone())],
                delete: vec![],
            }),
        );
        assert_eq!(r, Response::Ok);
        let bytes = codec::encode(&applied(&s)).unwrap();
        let back = decode_applied(&bytes).unwrap().state;
        assert_eq!(
            back.security.scram.users["alice"][&ScramMechanism::Sha512],
            cred
        );
        assert_eq!(back, s);
        // And in JSON, as snapshots were once written.
        let json = serde_json::to_vec(&applied(&s)).unwrap();
        assert_eq!(codec::decode::<Applied>(&json).unwrap().state, s);
    }

    #[test]
    fn a_snapshot_with_stored_groups_round_trips() {
        let mut s = model();
        let shard = ShardId(crate::txn::shard_of("g", crate::state::DEFAULT_SHARDS));
        s.topics.shards.get_mut(&shard).unwrap().owner = Some(BrokerId(1));
        let fence = ShardFence {
            broker: BrokerId(1),
            shard,
            epoch: s.topics.shards[&shard].epoch,
        };
        let r = s.apply(
            Revision(10),
            &Command::StoreGroup {
                fence,
                group: "g".into(),
                record: Some(vec![1, 2, 3]),
            },
        );
        assert_eq!(r, Response::Ok);
        let bytes = codec::encode(&applied(&s)).unwrap();
        let back = decode_applied(&bytes).unwrap().state;
        assert_eq!(back.groups.records["g"], vec![1, 2, 3]);
        assert_eq!(back, s);
    }

    #[test]
    fn a_snapshot_with_client_quotas_and_group_configs_round_trips() {
        let mut s = model();
        let r = s.apply(
            Revision(10),
            &Command::AlterClientQuotas {
                alterations: vec![crate::quota::QuotaAlteration {
                    entity: crate::quota::QuotaEntity {
                        user: None,
                        client_id: Some(crate::quota::EntityName::Named("c".into())),
                    },
                    set: BTreeMap::from([(crate::quota::PRODUCER_BYTE_RATE.into(), 10)]),
                    remove: vec![],
                }],
            },
        );
        assert_eq!(r, Response::Ok);
        let r = s.apply(
            Revision(11),
            &Command::AlterGroupConfig {
                group: "g".into(),
                set: BTreeMap::from([(
                    "consumer.session.timeout.ms".to_string(),
                    "50000".to_string(),
                )]),
                delete: Vec::new(),
            },
        );
        assert_eq!(r, Response::Ok);
        let bytes = codec::encode(&applied(&s)).unwrap();
        let back = decode_applied(&bytes).unwrap().state;
        assert_eq!(back, s);
        assert_eq!(
            back.groups.configs["g"].consumer_session_timeout_ms(),
            Some(50_000)
        );
        let json = serde_json::to_vec(&applied(&s)).unwrap();
        assert_eq!(decode_applied(&json).unwrap().state, s);
    }

    #[test]
    fn a_snapshot_with_transactions_round_trips() {
        let mut s = model();
        let epoch = s.topics.shards[&ShardId(0)].epoch;
        let r = s.apply(
            Revision(10),
            &Command::Txn(TxnCommand {
                fence: ShardFence {
                    broker: BrokerId(1),
                    shard: ShardId(0),
                    epoch,
                },
                id: TransactionalId::new("tx"),
                now_ms: 5,
                op: TxnOp::InitProducer {
                    timeout_ms: 60_000,
                    max_timeout_ms: 900_000,
                    expected: None,
                },
            }),
        );
        assert!(
            matches!(r, Response::Txn(ref t) if t.refused.is_none()),
            "{r:?}"
        );
        assert_eq!(s.producers.txn.ids().len(), 1);
        let bytes = codec::encode(&applied(&s)).unwrap();
        assert_eq!(decode_applied(&bytes).unwrap().state, s);
    }
}
