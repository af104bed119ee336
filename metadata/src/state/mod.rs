//! The cluster model and the deterministic `apply` of commands to it. This is
//! the Raft state machine's content: every node applies the same log to it
//! and ends in the same state.
//!
//! [`ClusterState`] is made of one state per concern, each in its own module
//! with its rules and their tests:
//!
//! - [`nodes`]: brokers and proxies, their leases and their life (a dead
//!   node is removed after a retention once nothing names it);
//! - [`topics`]: topics, partitions with their owners, epochs and committed
//!   log index, the store objects, and the coordinator shards' owners;
//! - [`groups`]: groups' committed offsets and share state, their configs
//!   and their stored membership;
//! - [`producers`]: the producer id counter, what partitions remember of
//!   idempotent producers, and the transactions (rules in [`crate::txn`]);
//! - client quotas: [`crate::quota::QuotaModel`], rules in [`crate::quota`];
//! - [`security`]: SCRAM credentials and ACLs;
//! - [`broker_configs`]: dynamic broker configs.
//!
//! [`ClusterState::apply`] is the one entry point: a dispatcher that hands
//! each command to the concern that owns it. The few commands that change
//! two concerns call them in order there, each case written down. Snapshots
//! keep the flat field list of earlier versions (`wire.rs`).

use std::ops::Range;

use crate::command::{Command, OwnedItem, Response};
use crate::error::MetaError;
use crate::ids::{PartitionKey, Revision, TopicId};

pub mod broker_configs;
pub mod groups;
pub mod nodes;
pub mod producers;
pub mod security;
#[cfg(test)]
pub(crate) mod test_support;
pub mod topics;
pub mod view;
pub(crate) mod wire;

pub use broker_configs::BrokerConfigsState;
pub use groups::{GroupOffsets, GroupsState};
pub use nodes::{
    DEFAULT_DEAD_NODE_RETENTION_MS, FIRST_PROXY_ID, NodeInfo, NodeState, NodesState, UNASSIGNED_ID,
};
pub use producers::{
    DEFAULT_PRODUCER_EXPIRATION_MS, MAX_PRODUCER_ID_BLOCK, PRODUCER_BATCHES_KEPT, ProducerState,
    ProducersState,
};
pub use security::SecurityState;
pub use topics::{
    DEFAULT_SHARDS, Handover, IndexEntry, MAX_PARTITIONS, ObjectInfo, Ownership, PartitionState,
    Topic, TopicsState, validate_topic_name,
};

/// The whole model: one state per concern. Serialized as the flat struct
/// of earlier versions (`wire.rs`), so snapshots do not change.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ClusterState {
    /// The Raft log index of the last command applied.
    pub revision: Revision,
    pub nodes: NodesState,
    pub topics: TopicsState,
    pub groups: GroupsState,
    pub producers: ProducersState,
    /// Client quotas ([`crate::quota`]).
    pub quotas: crate::quota::QuotaModel,
    pub security: SecurityState,
    pub broker_configs: BrokerConfigsState,
    /// What the last topic creation placed its partitions by, counted on:
    /// derived from the rest, never stored.
    pub(crate) placement: PlacementLoad,
}

/// The live brokers' load as [`crate::controller::placement_load`] counts
/// it, kept from one topic creation (or partition addition) to the next:
/// any other command may change ownership or the live brokers, so it
/// forgets it. The placement is the same as with a scan each time (a test
/// holds it to that), so nodes with and without it apply alike. Derived
/// data: equal whatever it holds, and not in snapshots.
#[derive(Debug, Clone, Default)]
pub(crate) struct PlacementLoad(Option<std::collections::BTreeMap<crate::ids::BrokerId, usize>>);

impl PartialEq for PlacementLoad {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for PlacementLoad {}

/// The reply to a command that answers only whether it applied.
fn done(r: Result<(), MetaError>) -> Response {
    reply(r, |()| Response::Ok)
}

/// The reply to a command: `ok` of what it returned, or its refusal.
fn reply<T>(r: Result<T, MetaError>, ok: impl FnOnce(T) -> Response) -> Response {
    match r {
        Ok(t) => ok(t),
        Err(e) => Response::Error(e),
    }
}

impl ClusterState {
    /// Applies one command at Raft log index `revision`.
    pub fn apply(&mut self, revision: Revision, cmd: &Command) -> Response {
        self.revision = revision;
        if !matches!(
            cmd,
            Command::Batch(_) | Command::CreateTopic { .. } | Command::CreatePartitions { .. }
        ) {
            self.placement.0 = None;
        }
        match cmd {
            Command::Batch(cmds) => {
                Response::Batch(cmds.iter().map(|c| self.apply(revision, c)).collect())
            }

            // Nodes. A registration or a death also moves what the node
            // owned (topics): see `register_node` and `node_dead`.
            Command::RegisterNode {
                id,
                kind,
                addr,
                now_ms,
                lease_ms,
            } => self.register_node(*id, *kind, addr, *now_ms, *lease_ms),
            Command::Heartbeat { id, now_ms } => done(self.nodes.heartbeat(*id, *now_ms)),
            Command::Drain { id } => done(self.nodes.drain(*id)),
            Command::ExpireLeases { now_ms } => {
                let expired = self.nodes.expire(*now_ms);
                for id in &expired {
                    self.node_dead(*id);
                }
                Response::Expired { nodes: expired }
            }
            Command::SweepDeadNodes {
                now_ms,
                retention_ms,
            } => {
                let topics = &self.topics;
                let nodes = self
                    .nodes
                    .sweep_dead(*now_ms, *retention_ms, |id| topics.refers_to(id));
                Response::NodesRemoved { nodes }
            }
            Command::NodeDown { id, addr } => {
                let down = self.nodes.down(*id, addr);
                if down {
                    self.node_dead(*id);
                }
                Response::Expired {
                    nodes: if down { vec![*id] } else { Vec::new() },
                }
            }

            // Ownership (topics), to live brokers only (nodes, read).
            Command::Reassign { changes } => done(self.topics.reassign(&self.nodes, changes)),
            Command::BeginHandover { changes, now_ms } => {
                done(self.topics.begin_handover(&self.nodes, changes, *now_ms))
            }
            Command::Release { broker, items } => done(self.topics.release(*broker, items)),

            // Topics and their committed index.
            Command::CreateTopic {
                name,
                id,
                partitions,
                config,
            } => match self.topics.create_topic(name, *id, *partitions, config) {
                Ok(()) => {
                    self.place_new(*id, 0..*partitions);
                    Response::TopicCreated { id: *id }
                }
                Err(e) => Response::Error(e),
            },
            Command::CreatePartitions { name, total } => {
                match self.topics.create_partitions(name, *total) {
                    Ok((id, new)) => {
                        self.place_new(id, new);
                        Response::Ok
                    }
                    Err(e) => Response::Error(e),
                }
            }
            Command::DeleteTopic { name } => done(self.delete_topic(name)),
            Command::AlterTopicConfig { name, set, delete } => {
                done(self.topics.alter_config(name, set, delete))
            }
            Command::Commit {
                broker,
                object,
                ranges,
                now_ms,
            } => reply(
                self.topics
                    .commit(*broker, object.as_ref(), ranges, *now_ms),
                |r| r,
            ),
            Command::TruncateLog {
                broker,
                partition,
                epoch,
                log_start_offset,
            } => match self
                .topics
                .truncate_log(*broker, *partition, *epoch, *log_start_offset)
            {
                Ok(start) => {
                    // The transactions' records of the partition before the
                    // new start go with it.
                    if start.moved {
                        self.producers
                            .txn
                            .partitions
                            .truncate(partition, start.log_start_offset);
                    }
                    Response::LogStart {
                        log_start_offset: start.log_start_offset,
                    }
                }
                Err(e) => Response::Error(e),
            },
            Command::ReplaceRanges {
                broker,
                partition,
                epoch,
                first_offset,
                last_offset,
                max_timestamp,
                object,
            } => reply(
                self.topics.replace_ranges(
                    *broker,
                    *partition,
                    *epoch,
                    (*first_offset, *last_offset, *max_timestamp),
                    object,
                ),
                |r| r,
            ),
            Command::ForgetObjects { ids } => {
                self.topics.forget_objects(ids);
                Response::Ok
            }
            Command::ExpireProducers {
                now_ms,
                expiration_ms,
            } => {
                self.topics.expire_producers(*now_ms, *expiration_ms);
                Response::Ok
            }
            Command::ExportBegin {
                partition,
                generation,
                file,
            } => done(self.topics.export_begin(*partition, *generation, file)),
            Command::ExportCommit {
                partition,
                generation,
                file,
            } => done(self.topics.export_commit(*partition, *generation, file)),
            Command::ExportForget {
                partition,
                generation,
                keys,
            } => done(self.topics.export_forget(*partition, *generation, keys)),
            Command::ExportReset { topic } => reply(self.topics.reset_exports(topic), |g| {
                Response::ExportGeneration { generation: g }
            }),
            Command::TableColumns { topic, columns } => {
                reply(self.topics.table_columns(topic, columns), |ids| {
                    Response::TableColumnIds { ids }
                })
            }
            Command::TableCommit {
                topic,
                expected,
                location,
            } => reply(
                self.topics
                    .table_commit(topic, expected.as_deref(), location),
                |version| Response::TableVersion { version },
            ),
            Command::TableCompactBegin { topic, compaction } => {
                done(self.topics.table_compact_begin(topic, compaction))
            }
            Command::TableCompactCommit {
                topic,
                partition,
                generation,
                file,
            } => done(
                self.topics
                    .table_compact_commit(topic, *partition, *generation, file),
            ),

            // Groups, fenced by the topics' shard and partition owners (read).
            Command::CommitOffsets {
                group,
                offsets,
                fence,
            } => reply(
                self.groups
                    .commit_offsets(&self.topics, group, offsets, fence.as_ref()),
                |unknown| Response::OffsetsCommitted { unknown },
            ),
            Command::StoreGroup {
                fence,
                group,
                record,
            } => done(
                self.groups
                    .store_group(&self.topics, fence, group, record.as_deref()),
            ),
            Command::ShareState {
                broker,
                partition,
                epoch,
                group,
                state,
            } => done(self.groups.share_state(
                &self.topics,
                (*broker, *partition, *epoch),
                group,
                state,
            )),
            Command::ForgetShareState {
                broker,
                partition,
                epoch,
                group,
            } => done(self.groups.forget_share_state(
                &self.topics,
                (*broker, *partition, *epoch),
                group,
            )),
            Command::DeleteGroups { groups } => {
                for g in groups {
                    self.groups.delete_group(g);
                }
                Response::Ok
            }
            Command::DeleteOffsets { group, partitions } => {
                self.groups
                    .delete_offsets(group, partitions.iter().cloned());
                Response::Ok
            }
            Command::DeleteOffsetsFenced {
                group,
                partitions,
                fence,
            } => done(
                self.groups
                    .delete_offsets_fenced(&self.topics, group, partitions, fence),
            ),
            Command::DeleteGroupFenced { group, fence } => {
                done(self.groups.delete_group_fenced(&self.topics, group, fence))
            }
            Command::AlterGroupConfig { group, set, delete } => {
                done(self.groups.alter_config(group, set, delete))
            }

            // Producers and transactions. The transactions' rules read and
            // change topics and groups too: see `crate::txn`.
            Command::AllocateProducerIds { count } => {
                reply(self.producers.allocate_ids(*count), |first| {
                    Response::ProducerIds {
                        first,
                        count: *count,
                    }
                })
            }
            Command::Txn(c) => self.apply_txn(c),
            Command::CommitWithTxns {
                broker,
                object,
                ranges,
                now_ms,
                txns,
            } => self.commit_with_txns(*broker, object.as_ref(), ranges, *now_ms, txns),
            Command::ExpireTransactionalIds {
                now_ms,
                expiration_ms,
            } => {
                self.producers.txn.expire_ids(*now_ms, *expiration_ms);
                Response::Ok
            }

            // Quotas, security and broker configs: each on its own.
            Command::AlterClientQuotas { alterations } => done(self.quotas.alter(alterations)),
            Command::AlterScramCredentials(a) => done(self.security.alter_scram(a)),
            Command::CreateAcls(bindings) => done(self.security.create_acls(bindings, revision)),
            Command::DeleteAcls(filters) => {
                Response::AclsDeleted(self.security.delete_acls(filters, revision))
            }
            Command::AlterBrokerConfig {
                broker,
                set,
                delete,
            } => done(self.broker_configs.alter(broker, set, delete)),
        }
    }

    /// Registers a node (nodes). A broker registering while still on
    /// record as alive is a new process of it (restarted within its
    /// lease): it keeps what the previous one owned, at the next epoch
    /// (topics). As a restarted Kafka broker leads its partitions at a new
    /// leader epoch, clients see the change (KIP-320: a consumer validates
    /// its position) and a commit the previous process still sends is
    /// refused. Hand-overs to or from it are called off (the new process
    /// knows of none; the controller plans them again).
    fn register_node(
        &mut self,
        id: crate::ids::BrokerId,
        kind: crate::command::NodeKind,
        addr: &str,
        now_ms: u64,
        lease_ms: u64,
    ) -> Response {
        match self.nodes.register(id, kind, addr, now_ms, lease_ms) {
            Ok(r) => {
                if r.restarted {
                    self.topics.move_everything_of(r.id, Some(r.id));
                }
                Response::Registered { id: r.id }
            }
            Err(e) => Response::Error(e),
        }
    }

    /// A node the nodes concern just marked dead: what it owned loses its
    /// owner at the next epoch (fencing any commit it still sends), and
    /// hand-overs to it are called off (topics).
    fn node_dead(&mut self, id: crate::ids::BrokerId) {
        self.topics.move_everything_of(id, None);
    }

    /// Deletes a topic (topics), then what the transactions (producers)
    /// and the groups kept of its partitions.
    fn delete_topic(&mut self, name: &str) -> Result<(), MetaError> {
        let topic = self.topics.delete_topic(name)?;
        for key in topic.partition_keys() {
            self.producers.txn.partitions.remove(&key);
        }
        self.groups.forget_topic(name);
        Ok(())
    }

    /// Gives new partitions their owners in the command that creates them
    /// (see [`crate::controller::place`], which reads the live brokers and
    /// the owners' load from the whole model).
    fn place_new(&mut self, topic: TopicId, partitions: Range<u32>) {
        let new: Vec<OwnedItem> = partitions
            .map(|partition| OwnedItem::Partition(PartitionKey { topic, partition }))
            .collect();
        let mut load = match self.placement.0.take() {
            Some(load) => load,
            None => crate::controller::placement_load(self),
        };
        let changes = crate::controller::place_by_load(&mut load, &new);
        self.topics.apply_changes(&changes);
        self.placement.0 = Some(load);
    }
}

#[cfg(test)]
mod tests {
    use super::test_support::{Sm, obj, owned, range, tid};
    use super::*;
    use crate::command::CommittedOffset;
    use crate::ids::BrokerId;

    /// Topic creations and partition additions place their partitions
    /// exactly as a scan of the whole model before each would (what
    /// versions without `PlacementLoad` do, so nodes of both apply alike),
    /// with registrations, hand-overs, a drain, a death and a batch of
    /// creations between them.
    #[test]
    fn creations_place_as_a_scan_before_each_would() {
        use super::test_support::{pt, register};
        use crate::command::OwnershipChange;
        let create = |name: &str, n: u8, partitions: u32| Command::CreateTopic {
            name: name.into(),
            id: tid(n),
            partitions,
            config: Default::default(),
        };
        let mut cached = Sm::new();
        let mut scanned = Sm::new();
        for sm in [&mut cached, &mut scanned] {
            register(sm, 1, 0);
            register(sm, 2, 0);
        }
        let steps = vec![
            create("a", 1, 3),
            create("b", 2, 5),
            create("c", 3, 1),
            Command::BeginHandover {
                changes: vec![
                    OwnershipChange {
                        item: pt(tid(1), 0),
                        owner: Some(BrokerId(2)),
                    },
                    OwnershipChange {
                        item: pt(tid(2), 1),
                        owner: Some(BrokerId(2)),
                    },
                ],
                now_ms: 1,
            },
            create("d", 4, 4),
            Command::Batch(vec![create("e", 5, 7), create("f", 6, 2)]),
            Command::RegisterNode {
                id: BrokerId(3),
                kind: crate::command::NodeKind::Broker,
                addr: "127.0.0.1:9003".into(),
                now_ms: 2,
                lease_ms: 1000,
            },
            create("g", 7, 9),
            Command::CreatePartitions {
                name: "g".into(),
                total: 12,
            },
            create("h", 8, 6),
            Command::Drain { id: BrokerId(3) },
            create("i", 9, 5),
            Command::NodeDown {
                id: BrokerId(1),
                addr: "127.0.0.1:9001".into(),
            },
            create("j", 10, 4),
            // Refused (exists): places nothing.
            create("j", 10, 4),
            create("k", 11, 3),
        ];
        for c in steps {
            cached.apply(c.clone());
            scanned.state.placement = PlacementLoad::default();
            scanned.apply(c.clone());
            assert_eq!(cached.state, scanned.state, "after {c:?}");
        }
        assert!(
            cached.state.placement.0.is_some(),
            "the last creations placed by the kept load"
        );
        let owners: std::collections::BTreeSet<_> = cached
            .state
            .topics
            .partitions
            .values()
            .filter_map(|p| p.ownership.owner)
            .collect();
        assert!(owners.len() >= 2, "placed on several brokers: {owners:?}");
    }

    #[test]
    fn each_command_of_a_batch_is_applied_as_if_alone() {
        let mut sm = Sm::new();
        let before = sm.state.clone();
        let r = sm.apply(Command::Batch(vec![
            Command::AllocateProducerIds { count: 10 },
            // Refused: changes nothing, and the next command still applies.
            Command::AllocateProducerIds { count: 0 },
            Command::AllocateProducerIds { count: 5 },
        ]));
        let Response::Batch(rs) = r else {
            panic!("expected a batch response, got {r:?}");
        };
        assert_eq!(
            rs[0],
            Response::ProducerIds {
                first: 1000,
                count: 10
            }
        );
        assert!(matches!(
            rs[1],
            Response::Error(MetaError::InvalidRequest(_))
        ));
        assert_eq!(
            rs[2],
            Response::ProducerIds {
                first: 1010,
                count: 5
            }
        );
        assert_eq!(rs.len(), 3);
        // The same commands one by one end in the same model.
        let mut alone = Sm::new();
        alone.state = before;
        alone.apply(Command::AllocateProducerIds { count: 10 });
        alone.apply(Command::AllocateProducerIds { count: 0 });
        alone.apply(Command::AllocateProducerIds { count: 5 });
        alone.state.revision = sm.state.revision;
        assert_eq!(alone.state, sm.state);
    }

    #[test]
    fn state_round_trips_through_json() {
        let mut sm = owned();
        sm.ok(Command::Commit {
            now_ms: 0,
            broker: BrokerId(1),
            object: obj(),
            ranges: vec![range(tid(1), 0, 1, 0, 9)],
        });
        sm.ok(Command::CommitOffsets {
            fence: None,
            group: "g".into(),
            offsets: vec![(
                "t".into(),
                1,
                CommittedOffset {
                    offset: 5,
                    leader_epoch: 0,
                    metadata: String::new(),
                },
            )],
        });
        let json = serde_json::to_vec(&sm.state).unwrap();
        let back: ClusterState = serde_json::from_slice(&json).unwrap();
        assert_eq!(back, sm.state);
    }
}
