//! Every route of the broker's internal RPC, defined once: its path, its
//! request and its reply. The server ([`super::router`]) registers handlers
//! by these types and [`super::RemoteBroker`] calls by them, so a path is
//! never written twice and a request can only be sent with the reply type
//! it gets. The same shape as the metadata API's `floe_metadata::api::routes`.

use super::proto;
use crate::group_rpc::proto as group;
use crate::share::admin::proto as share_admin;
use crate::share::rpc::proto as share;
use crate::txn::rpc::proto as txn;

/// One route of the broker RPC (`POST`, protobuf bodies).
pub trait Route: Send + Sync + 'static {
    /// The HTTP path.
    const PATH: &'static str;
    type Req: prost::Message + Default + Send + 'static;
    type Resp: prost::Message + Default + Send + 'static;
}

macro_rules! routes {
    ($($(#[$m:meta])* $name:ident = $path:literal : $req:path => $resp:path;)*) => {
        $(
            $(#[$m])*
            #[derive(Debug, Clone, Copy)]
            pub struct $name;

            impl Route for $name {
                const PATH: &'static str = $path;
                type Req = $req;
                type Resp = $resp;
            }
        )*

        /// Every route's path, for tests.
        pub const ALL_PATHS: &[&str] = &[$($path),*];
    };
}

routes! {
    /// Answers in two steps on one stream: the headers once the batches are
    /// sequenced, the body once the acknowledgement level is met.
    Produce = "/rpc/produce": proto::ProduceRequest => proto::ProduceResponse;
    Fetch = "/rpc/fetch": proto::FetchRequest => proto::FetchResponse;
    /// A long poll: returns when data past the offset may be there.
    Wait = "/rpc/wait": proto::WaitRequest => proto::Empty;
    ListOffset = "/rpc/list-offset": proto::ListOffsetRequest => proto::ListOffsetResponse;
    DeleteRecords = "/rpc/delete-records": proto::DeleteRecordsRequest => proto::DeleteRecordsResponse;
    /// May wait for a whole rebalance.
    GroupJoin = "/rpc/group/join": group::Join => group::JoinReply;
    GroupSync = "/rpc/group/sync": group::Sync => group::SyncReply;
    /// Heartbeat (`MemberCall::op`).
    GroupMember = "/rpc/group/member": group::MemberCall => group::ErrorReply;
    /// OffsetCommit: one code per offset in `per_member`.
    GroupCommit = "/rpc/group/commit": group::Commit => group::ErrorReply;
    GroupLeave = "/rpc/group/leave": group::Leave => group::ErrorReply;
    GroupDescribe = "/rpc/group/describe": group::GroupIds => group::Descriptions;
    GroupList = "/rpc/group/list": group::GroupIds => group::Descriptions;
    GroupDelete = "/rpc/group/delete": group::GroupIds => group::ErrorReply;
    /// A transaction step of a client (InitProducerId with a transactional
    /// id, AddPartitionsToTxn, AddOffsetsToTxn, TxnOffsetCommit, EndTxn).
    TxnStep = "/rpc/txn/step": txn::TxnRequest => txn::StepReply;
    TxnDescribe = "/rpc/txn/describe": txn::TxnId => txn::Infos;
    /// The transactions of every shard the broker coordinates.
    TxnList = "/rpc/txn/list": txn::ListRequest => txn::Infos;
    /// Answers once the marker is committed (as `acks=all`).
    TxnMarker = "/rpc/txn/marker": proto::MarkerRequest => proto::MarkerResponse;
    /// Before a commit is decided; answers once the producer's open
    /// transaction on the partition is durable there.
    TxnDurable = "/rpc/txn/durable": proto::DurableRequest => proto::DurableResponse;
    /// DescribeProducers of one partition.
    Producers = "/rpc/producers": proto::ProducersRequest => proto::ProducersResponse;
    /// ConsumerGroupHeartbeat (KIP-848).
    ConsumerBeat = "/rpc/group/consumer-heartbeat": group::ConsumerBeat => group::ConsumerBeatReply;
    /// ConsumerGroupDescribe of the first id.
    ConsumerDescribe = "/rpc/group/consumer-describe": group::GroupIds => group::ConsumerDescription;
    /// Share groups (KIP-932): acquire records of a share-partition at the
    /// partition's owner.
    ShareFetch = "/rpc/share/fetch": share::FetchRequest => share::FetchResponse;
    /// Acknowledgements, answered once the share state is written.
    ShareAck = "/rpc/share/ack": share::AckRequest => share::AckResponse;
    /// A member's records released (its share session closed).
    ShareRelease = "/rpc/share/release": share::ReleaseRequest => share::ReleaseResponse;
    /// ShareGroupHeartbeat at the group's coordinator.
    ShareHeartbeat = "/rpc/share/heartbeat": share::HeartbeatRequest => share::HeartbeatResponse;
    ShareDescribe = "/rpc/share/describe": share::DescribeRequest => share::DescribeResponse;
    /// A share-partition's start offset moved or its state deleted, at the
    /// partition's owner, fenced by its epoch (Alter/DeleteShareGroupOffsets).
    ShareReset = "/rpc/share/reset": share_admin::ResetRequest => share_admin::ResetResponse;
    /// The share groups in memory at a coordinator (ListGroups).
    ShareGroups = "/rpc/share/groups": share_admin::GroupsRequest => share_admin::GroupsResponse;
    /// A group's kind, once its members without a session are removed;
    /// NON_EMPTY_GROUP for a share group with members.
    ShareCheck = "/rpc/share/check": share_admin::GroupRequest => share_admin::CheckResponse;
    /// DeleteGroups of a share group, at its coordinator.
    ShareDeleteGroup = "/rpc/share/delete-group": share_admin::GroupRequest => share_admin::DeleteResponse;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_path_is_unique_and_under_rpc() {
        let mut seen = std::collections::HashSet::new();
        for p in ALL_PATHS {
            assert!(p.starts_with("/rpc/"), "{p}");
            assert!(seen.insert(*p), "{p} defined twice");
        }
        assert_eq!(ALL_PATHS.len(), 30);
    }
}
