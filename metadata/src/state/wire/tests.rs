//! The snapshot layout does not change with the split of the model: a
//! model with data in every concern encodes to the bytes (postcard) and
//! the JSON of the flat struct it was before, and those decode back.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::*;
use crate::command::{Command, ProducerBatch, ShardFence};
use crate::ids::TransactionalId;
use crate::raft::codec;
use crate::state::test_support::{Sm, obj, offset, owned, range, tid};

/// `ClusterState` as it was declared before the split, field for field.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct OldClusterState {
    pub revision: Revision,
    pub nodes: BTreeMap<BrokerId, NodeInfo>,
    pub topics: BTreeMap<String, Topic>,
    #[serde(with = "crate::serde_pairs")]
    pub partitions: BTreeMap<PartitionKey, PartitionState>,
    pub objects: BTreeMap<ObjectId, ObjectInfo>,
    pub next_object_id: u64,
    pub groups: BTreeMap<String, GroupOffsets>,
    pub next_producer_id: i64,
    pub shards: BTreeMap<ShardId, Ownership>,
    #[serde(default)]
    pub txn: crate::txn::TxnModel,
    #[serde(default)]
    pub quotas: crate::quota::QuotaModel,
    #[serde(default)]
    pub group_configs: BTreeMap<String, crate::group_config::GroupConfigs>,
    #[serde(default)]
    pub group_records: BTreeMap<String, Vec<u8>>,
    #[serde(default)]
    pub scram: crate::scram::ScramModel,
    #[serde(default)]
    pub acls: crate::acl::AclModel,
    #[serde(default)]
    pub broker_configs: BTreeMap<String, crate::broker_config::BrokerConfigs>,
    #[serde(default)]
    pub highest_node_id: BrokerId,
    #[serde(default)]
    pub node_deaths: BTreeMap<BrokerId, u64>,
    #[serde(default)]
    pub tables: BTreeMap<crate::ids::TopicId, crate::table::TableState>,
}

/// The old struct holding the same model.
fn old_of(s: &ClusterState) -> OldClusterState {
    OldClusterState {
        revision: s.revision,
        // A record's death time is kept in `node_deaths`, not in the record.
        nodes: s
            .nodes
            .by_id
            .iter()
            .map(|(id, n)| {
                let mut n = n.clone();
                n.dead_since_ms = None;
                (*id, n)
            })
            .collect(),
        // The model's persistent maps as the std maps they were.
        topics: s.topics.by_name.clone().into_iter().collect(),
        partitions: s.topics.partitions.clone().into_iter().collect(),
        objects: s.topics.objects.clone().into_iter().collect(),
        next_object_id: s.topics.next_object_id,
        groups: s.groups.offsets.clone(),
        next_producer_id: s.producers.next_id,
        shards: s.topics.shards.clone(),
        txn: s.producers.txn.clone(),
        quotas: s.quotas.clone(),
        group_configs: s.groups.configs.clone(),
        group_records: s.groups.records.clone(),
        scram: s.security.scram.clone(),
        acls: s.security.acls.clone(),
        broker_configs: s.broker_configs.by_resource.clone(),
        highest_node_id: s.nodes.highest_id,
        node_deaths: s
            .nodes
            .by_id
            .values()
            .filter_map(|n| n.dead_since_ms.map(|t| (n.id, t)))
            .collect(),
        tables: s.topics.tables.clone(),
    }
}

/// A model with something in every field of every concern.
fn full() -> ClusterState {
    use crate::acl::{AclBinding, Operation, PatternType, Permission, ResourceType};
    use crate::scram::{ScramAlteration, ScramCredential, ScramMechanism};
    let mut sm = owned();
    let fence = |sm: &Sm, shard: ShardId| ShardFence {
        broker: BrokerId(1),
        shard,
        epoch: sm.state.topics.shards[&shard].epoch,
    };
    let mut r = range(tid(1), 0, 1, 0, 9);
    r.producers = vec![ProducerBatch {
        producer_id: 7,
        epoch: 0,
        first_sequence: 0,
        last_sequence: 9,
        first_offset: 0,
        last_offset: 9,
    }];
    let cmds = vec![
        Command::Commit {
            now_ms: 5,
            broker: BrokerId(1),
            object: obj(),
            ranges: vec![r],
        },
        Command::CommitOffsets {
            fence: None,
            group: "g".into(),
            offsets: vec![("t".into(), 1, offset(3))],
        },
        Command::StoreGroup {
            fence: fence(
                &sm,
                ShardId(crate::txn::shard_of("g", crate::state::DEFAULT_SHARDS)),
            ),
            group: "g".into(),
            record: Some(vec![1, 2, 3]),
        },
        Command::AlterGroupConfig {
            group: "g".into(),
            set: BTreeMap::from([("share.delivery.count.limit".into(), "4".into())]),
            delete: vec![],
        },
        Command::AllocateProducerIds { count: 10 },
        Command::TableColumns {
            topic: "t".into(),
            columns: vec![("amount".into(), "float64".into())],
        },
        Command::TableCommit {
            topic: "t".into(),
            expected: None,
            location: "file:///d/tables/t/metadata/00001-x.metadata.json".into(),
        },
        Command::Txn(crate::txn::TxnCommand {
            fence: fence(&sm, ShardId(0)),
            id: TransactionalId::new("tx"),
            now_ms: 5,
            op: crate::txn::TxnOp::InitProducer {
                timeout_ms: 60_000,
                max_timeout_ms: 900_000,
                expected: None,
            },
        }),
        Command::AlterClientQuotas {
            alterations: vec![crate::quota::QuotaAlteration {
                entity: crate::quota::QuotaEntity {
                    user: None,
                    client_id: Some(crate::quota::EntityName::Named("c".into())),
                },
                set: BTreeMap::from([(crate::quota::PRODUCER_BYTE_RATE.into(), 10)]),
                remove: vec![],
            }],
        },
        Command::AlterScramCredentials(ScramAlteration {
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
        Command::CreateAcls(vec![AclBinding {
            resource_type: ResourceType::Topic,
            resource_name: "orders".into(),
            pattern: PatternType::Literal,
            principal: "User:alice".into(),
            host: "*".into(),
            operation: Operation::Read,
            permission: Permission::Allow,
        }]),
        Command::AlterBrokerConfig {
            broker: String::new(),
            set: BTreeMap::from([("background.threads".into(), "4".into())]),
            delete: vec![],
        },
    ];
    // Two proxies asking for ids: 1002 dies and is removed, 1001 dies and
    // stays on record; broker 1 lives on.
    let proxy = || Command::RegisterNode {
        id: crate::state::UNASSIGNED_ID,
        kind: crate::command::NodeKind::Proxy,
        addr: "127.0.0.1:19092".into(),
        now_ms: 0,
        lease_ms: 1_000,
    };
    let heartbeat = |id: u32, now_ms: u64| Command::Heartbeat {
        id: BrokerId(id),
        now_ms,
    };
    let nodes = vec![
        proxy(),
        proxy(),
        heartbeat(1, 10_000),
        heartbeat(1001, 2_000),
        Command::ExpireLeases { now_ms: 2_000 },
        Command::SweepDeadNodes {
            now_ms: 2_500,
            retention_ms: Some(100),
        },
        Command::ExpireLeases { now_ms: 4_000 },
    ];
    for c in cmds.into_iter().chain(nodes) {
        sm.ok(c);
    }
    // A table compaction in flight.
    sm.state
        .topics
        .tables
        .get_mut(&tid(1))
        .expect("table of t")
        .compacting = Some(crate::table::Compaction {
        partition: 0,
        generation: 0,
        file: crate::export::ExportFile {
            endpoint: "default".into(),
            key:
                "exports/t/dt=2026-12-07/hr=09/0-00000000000000000000-00000000000000000009.parquet"
                    .into(),
            first_offset: 0,
            last_offset: 9,
            rows: 10,
            size: 1234,
            min_timestamp: 1,
            max_timestamp: 2,
        },
        replaced: vec!["exports/t/a.parquet".into(), "exports/t/b.parquet".into()],
    });
    // A hand-over in progress, as a snapshot may hold one.
    sm.state
        .topics
        .shards
        .get_mut(&ShardId(1))
        .expect("shard 1")
        .handover = Some(crate::state::Handover {
        to: BrokerId(1),
        since_ms: 3,
    });
    let rev = sm.rev;
    let s = sm.state;
    let o = old_of(&s);
    assert!(!o.nodes.is_empty() && !o.topics.is_empty() && !o.partitions.is_empty());
    assert!(!o.objects.is_empty() && o.next_object_id > 1 && !o.groups.is_empty());
    assert!(o.next_producer_id > 1000 && !o.shards.is_empty() && !o.txn.ids().is_empty());
    assert!(o.quotas != Default::default() && !o.group_configs.is_empty());
    assert!(!o.group_records.is_empty() && !o.scram.users.is_empty());
    assert!(!o.acls.bindings.is_empty() && !o.broker_configs.is_empty());
    assert!(o.partitions.values().any(|p| !p.producers.is_empty()));
    assert!(!o.node_deaths.is_empty() && !o.tables.is_empty());
    assert!(o.nodes.keys().all(|id| *id < o.highest_node_id));
    assert_eq!(o.revision, Revision(rev));
    s
}

#[test]
fn the_model_encodes_to_the_bytes_of_the_flat_struct_before_the_split() {
    let s = full();
    let old = old_of(&s);
    // Binary (postcard), as snapshots are written.
    let bytes = codec::encode(&s).unwrap();
    assert_eq!(bytes, codec::encode(&old).unwrap());
    assert_eq!(
        postcard::to_allocvec(&s).unwrap(),
        postcard::to_allocvec(&old).unwrap()
    );
    // JSON, as snapshots once were.
    let json = serde_json::to_vec(&s).unwrap();
    assert_eq!(json, serde_json::to_vec(&old).unwrap());
    assert_eq!(
        serde_json::to_value(&s).unwrap(),
        serde_json::to_value(&old).unwrap()
    );
}

#[test]
fn snapshots_of_the_flat_struct_decode_into_the_model() {
    let s = full();
    let old = old_of(&s);
    let bytes = codec::encode(&old).unwrap();
    assert_eq!(codec::decode::<ClusterState>(&bytes).unwrap(), s);
    let json = serde_json::to_vec(&old).unwrap();
    assert_eq!(serde_json::from_slice::<ClusterState>(&json).unwrap(), s);
    assert_eq!(codec::decode::<ClusterState>(&json).unwrap(), s);
    // And the other way: what the model writes, the old struct reads.
    let back: OldClusterState = codec::decode(&codec::encode(&s).unwrap()).unwrap();
    assert_eq!(back, old);
    // A JSON snapshot without the fields added later reads with them empty.
    let mut v = serde_json::to_value(&old).unwrap();
    let fields = v.as_object_mut().unwrap();
    for f in [
        "txn",
        "quotas",
        "group_configs",
        "group_records",
        "scram",
        "acls",
        "broker_configs",
        "highest_node_id",
        "node_deaths",
        "tables",
    ] {
        assert!(fields.remove(f).is_some(), "{f}");
    }
    let back: ClusterState = serde_json::from_value(v).unwrap();
    // The nodes' records, with no death times, and the highest id on record.
    assert_eq!(back.nodes.by_id, old.nodes);
    assert_eq!(back.nodes.highest_id, *old.nodes.keys().last().unwrap());
    assert_eq!(back.topics.by_name, s.topics.by_name);
    assert_eq!(back.topics.partitions, s.topics.partitions);
    assert_eq!(back.groups.offsets, s.groups.offsets);
    assert!(back.groups.records.is_empty() && back.groups.configs.is_empty());
    assert_eq!(back.producers.next_id, s.producers.next_id);
    assert!(back.producers.txn.ids().is_empty());
    assert!(back.security.acls.bindings.is_empty());
    assert!(back.broker_configs.by_resource.is_empty());
    assert!(back.topics.tables.is_empty());
}

#[test]
fn a_new_model_encodes_as_a_new_flat_struct_did() {
    let s = ClusterState::default();
    let old = old_of(&s);
    assert_eq!(old.next_object_id, 1);
    assert_eq!(old.next_producer_id, 1000);
    assert_eq!(old.shards.len(), crate::state::DEFAULT_SHARDS as usize);
    assert_eq!(codec::encode(&s).unwrap(), codec::encode(&old).unwrap());
    assert_eq!(
        serde_json::to_vec(&s).unwrap(),
        serde_json::to_vec(&old).unwrap()
    );
}
