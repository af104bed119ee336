//! The table from [`ApiKey`] to the request and response types of
//! kafka-protocol, so that any body can be decoded through the guard.
//!
//! The crate's own `RequestKind::decode` and `ResponseKind::decode` only
//! take a `&mut Bytes`, which would bypass [`GuardBuf`]. The enum variants are
//! named after the api keys, so one list of names gives the decoders and the
//! reverse mapping (body to api key) used to check what is encoded.

use kafka_protocol::messages::{ApiKey, RequestKind, ResponseKind};
use kafka_protocol::protocol::Decodable;

use super::guard::{BoxError, GuardBuf};

macro_rules! api_table {
    ($($api:ident),* $(,)?) => {
        /// Decodes the body of an `api_key` request at `version`.
        pub(crate) fn decode_request_body(
            api_key: ApiKey,
            buf: &mut GuardBuf,
            version: i16,
        ) -> Result<RequestKind, BoxError> {
            match api_key {
                $(ApiKey::$api => Decodable::decode(buf, version)
                    .map(RequestKind::$api)
                    .map_err(BoxError::from),)*
            }
        }

        /// Decodes the body of an `api_key` response at `version`.
        pub(crate) fn decode_response_body(
            api_key: ApiKey,
            buf: &mut GuardBuf,
            version: i16,
        ) -> Result<ResponseKind, BoxError> {
            match api_key {
                $(ApiKey::$api => Decodable::decode(buf, version)
                    .map(ResponseKind::$api)
                    .map_err(BoxError::from),)*
            }
        }

        /// The api key of a request body (`None` for kinds this table does
        /// not know, should the crate add some).
        pub(crate) fn request_api_key(body: &RequestKind) -> Option<ApiKey> {
            match body {
                $(RequestKind::$api(_) => Some(ApiKey::$api),)*
                _ => None,
            }
        }

        /// The api key of a response body.
        pub(crate) fn response_api_key(body: &ResponseKind) -> Option<ApiKey> {
            match body {
                $(ResponseKind::$api(_) => Some(ApiKey::$api),)*
                _ => None,
            }
        }
    };
}

api_table!(
    Produce,
    Fetch,
    ListOffsets,
    Metadata,
    OffsetCommit,
    OffsetFetch,
    FindCoordinator,
    JoinGroup,
    Heartbeat,
    LeaveGroup,
    SyncGroup,
    DescribeGroups,
    ListGroups,
    SaslHandshake,
    ApiVersions,
    CreateTopics,
    DeleteTopics,
    DeleteRecords,
    InitProducerId,
    OffsetForLeaderEpoch,
    AddPartitionsToTxn,
    AddOffsetsToTxn,
    EndTxn,
    WriteTxnMarkers,
    TxnOffsetCommit,
    DescribeAcls,
    CreateAcls,
    DeleteAcls,
    DescribeConfigs,
    AlterConfigs,
    AlterReplicaLogDirs,
    DescribeLogDirs,
    SaslAuthenticate,
    CreatePartitions,
    CreateDelegationToken,
    RenewDelegationToken,
    ExpireDelegationToken,
    DescribeDelegationToken,
    DeleteGroups,
    ElectLeaders,
    IncrementalAlterConfigs,
    AlterPartitionReassignments,
    ListPartitionReassignments,
    OffsetDelete,
    DescribeClientQuotas,
    AlterClientQuotas,
    DescribeUserScramCredentials,
    AlterUserScramCredentials,
    Vote,
    BeginQuorumEpoch,
    EndQuorumEpoch,
    DescribeQuorum,
    AlterPartition,
    UpdateFeatures,
    Envelope,
    FetchSnapshot,
    DescribeCluster,
    DescribeProducers,
    BrokerRegistration,
    BrokerHeartbeat,
    UnregisterBroker,
    DescribeTransactions,
    ListTransactions,
    AllocateProducerIds,
    ConsumerGroupHeartbeat,
    ConsumerGroupDescribe,
    ControllerRegistration,
    GetTelemetrySubscriptions,
    PushTelemetry,
    AssignReplicasToDirs,
    ListConfigResources,
    DescribeTopicPartitions,
    ShareGroupHeartbeat,
    ShareGroupDescribe,
    ShareFetch,
    ShareAcknowledge,
    AddRaftVoter,
    RemoveRaftVoter,
    UpdateRaftVoter,
    InitializeShareGroupState,
    ReadShareGroupState,
    WriteShareGroupState,
    DeleteShareGroupState,
    ReadShareGroupStateSummary,
    DescribeShareGroupOffsets,
    AlterShareGroupOffsets,
    DeleteShareGroupOffsets,
);
