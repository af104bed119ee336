//! Every route of the metadata API, defined once: its path, its request and
//! its reply. The server registers handlers by these types and the clients
//! (HTTP or in-process) call by them, so a path is never written twice and a
//! request can only be sent with the reply type it gets.

use super::proto;

/// One route of the metadata API.
pub trait Route: Send + Sync + 'static {
    /// The HTTP path (`POST`, protobuf bodies).
    const PATH: &'static str;
    type Req: prost::Message + Default + Send + Sync + 'static;
    type Resp: prost::Message + Default + Send + Sync + 'static;
}

macro_rules! routes {
    ($($(#[$m:meta])* $name:ident = $path:literal : $req:ident => $resp:ident;)*) => {
        $(
            $(#[$m])*
            #[derive(Debug, Clone, Copy)]
            pub struct $name;

            impl Route for $name {
                const PATH: &'static str = $path;
                type Req = proto::$req;
                type Resp = proto::$resp;
            }
        )*

        /// Every route's path, for tests and the fuzz target.
        pub const ALL_PATHS: &[&str] = &[$($path),*];
    };
}

routes! {
    /// The node's Raft status (asked of one node, not the leader).
    Status = "/v1/status": Empty => StatusResponse;
    AddMember = "/v1/members/add": AddMemberRequest => Empty;
    RemoveMember = "/v1/members/remove": RemoveMemberRequest => Empty;
    CreateTopic = "/v1/topics/create": CreateTopicRequest => CreateTopicResponse;
    DeleteTopic = "/v1/topics/delete": TopicName => Empty;
    AlterTopic = "/v1/topics/alter": AlterTopicConfigRequest => Empty;
    CreatePartitions = "/v1/topics/partitions": CreatePartitionsRequest => Empty;
    ListTopics = "/v1/topics/list": Empty => ListTopicsResponse;
    DescribeTopic = "/v1/topics/describe": TopicName => TopicInfo;
    Register = "/v1/nodes/register": RegisterRequest => RegisterResponse;
    Heartbeat = "/v1/nodes/heartbeat": HeartbeatRequest => Empty;
    Drain = "/v1/nodes/drain": HeartbeatRequest => Empty;
    /// A broker's address refused a connection: the leader checks it
    /// itself and, if it refuses, marks the broker dead at once.
    NodeDown = "/v1/nodes/down": NodeDownRequest => NodeDownResponse;
    Release = "/v1/release": ReleaseRequest => Empty;
    Commit = "/v1/commit": CommitRequest => CommitResponse;
    PartitionIndex = "/v1/partitions/index": IndexRequest => IndexResponse;
    /// Up to [`MAX_INDEXES`](super::server::MAX_INDEXES) partitions' indexes
    /// under one linearizable read.
    PartitionIndexes = "/v1/partitions/indexes": IndexesRequest => IndexesResponse;
    CommitOffsets = "/v1/groups/commit": CommitOffsetsRequest => CommitOffsetsResponse;
    FetchOffsets = "/v1/groups/fetch": FetchOffsetsRequest => FetchOffsetsResponse;
    DeleteGroups = "/v1/groups/delete": DeleteGroupsRequest => Empty;
    DeleteOffsets = "/v1/groups/delete-offsets": CommitOffsetsRequest => Empty;
    ProducerIds = "/v1/producer-ids": ProducerIdsRequest => ProducerIdsResponse;
    /// A long poll: the cluster view once its revision passes `since_revision`.
    Watch = "/v1/watch": WatchRequest => ClusterView;
    TruncateLog = "/v1/partitions/truncate": TruncateRequest => TruncateResponse;
    ReplaceRanges = "/v1/partitions/replace": ReplaceRangesRequest => CommitResponse;
    UnreferencedObjects = "/v1/objects/unreferenced": Empty => ObjectList;
    ForgetObjects = "/v1/objects/forget": ForgetObjectsRequest => Empty;
    /// Which of a page of store objects (endpoint and key) the object table
    /// does not hold, read linearizably: an orphan scan's question.
    UnknownObjects = "/v1/objects/unknown": UnknownObjectsRequest => UnknownObjectsResponse;
    ExportState = "/v1/exports/state": ExportStateRequest => ExportStateResponse;
    ExportBegin = "/v1/exports/begin": ExportBeginRequest => Empty;
    ExportCommit = "/v1/exports/commit": ExportCommitRequest => Empty;
    ExportForget = "/v1/exports/forget": ExportForgetRequest => Empty;
    ExportReset = "/v1/exports/reset": ExportResetRequest => ExportResetResponse;
    /// A topic's Iceberg table: its pointer and column ids (`crate::table`).
    TableState = "/v1/tables/state": TopicName => TableStateResponse;
    /// The field ids of a table's typed columns, new ones given ids.
    TableColumns = "/v1/tables/columns": TableColumnsRequest => TableColumnsResponse;
    /// Moves a table's pointer by compare-and-set.
    TableCommit = "/v1/tables/commit": TableCommitRequest => TableCommitResponse;
    /// Records a compaction of a table's export files before its file is written.
    TableCompactBegin = "/v1/tables/compact/begin": TableCompactBeginRequest => Empty;
    /// Puts a written compacted file in place of the files it replaces.
    TableCompactCommit = "/v1/tables/compact/commit": TableCompactCommitRequest => Empty;
    /// A transaction coordinator's step (`crate::txn`), fenced by its shard.
    TxnStep = "/v1/txns/step": TxnRequest => TxnResponse;
    /// The state of the transactional ids a filter selects (by id, producer
    /// id, shard or pending group; an empty request: every id).
    TxnList = "/v1/txns/list": TxnListRequest => TxnListResponse;
    /// Sets and removes client quotas (`crate::quota`), all or nothing.
    AlterQuotas = "/v1/quotas/alter": AlterQuotasRequest => AlterQuotasResponse;
    /// Sets and deletes users' SCRAM credentials (`crate::scram`), each
    /// user's change whole or not at all.
    AlterScram = "/v1/scram/alter": AlterScramRequest => AlterScramResponse;
    /// Adds ACLs (`crate::acl`), all or none.
    CreateAcls = "/v1/acls/create": CreateAclsRequest => CreateAclsResponse;
    /// Removes the ACLs that filters match, and names them.
    DeleteAcls = "/v1/acls/delete": DeleteAclsRequest => DeleteAclsResponse;
    /// The configs set on a group (Kafka's GROUP config resource).
    GroupConfigs = "/v1/groups/configs": GroupConfigsRequest => GroupConfigsResponse;
    AlterGroupConfig = "/v1/groups/configs/alter": AlterGroupConfigRequest => Empty;
    /// The dynamic configs of a broker resource (Kafka's BROKER config
    /// resource), and those set for every broker.
    BrokerConfigs = "/v1/brokers/configs": BrokerConfigsRequest => BrokerConfigsResponse;
    AlterBrokerConfig = "/v1/brokers/configs/alter": AlterBrokerConfigRequest => Empty;
    /// A share group's state of a partition, from the partition's owner at
    /// its epoch (read back with `FetchOffsets`).
    ShareState = "/v1/share/state": ShareStateRequest => Empty;
    /// Deletes a share group's state of a partition, from the partition's
    /// owner at its epoch.
    ShareForget = "/v1/share/forget": ShareForgetRequest => Empty;
    /// A classic group's membership, from the coordinator of its shard.
    StoreGroup = "/v1/groups/store": StoreGroupRequest => Empty;
    /// The stored membership of one shard's groups (read by a coordinator
    /// taking the shard over, linearizably).
    GroupRecords = "/v1/groups/records": GroupRecordsRequest => GroupRecordsResponse;
    /// Every group with stored offsets, and whether any of them is a share
    /// group's state (read linearizably).
    StoredGroups = "/v1/groups/stored": Empty => StoredGroupsResponse;
    /// Every node on record (live, draining, dead), with its lease, when a
    /// dead one died and when it is removed (read linearizably).
    ListNodes = "/v1/nodes/list": Empty => ListNodesResponse;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_path_is_unique_and_versioned() {
        let mut seen = std::collections::HashSet::new();
        for p in ALL_PATHS {
            assert!(p.starts_with("/v1/"), "{p}");
            assert!(seen.insert(*p), "{p} defined twice");
        }
        assert_eq!(ALL_PATHS.len(), 54);
    }
}
