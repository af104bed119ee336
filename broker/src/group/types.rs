//! The coordinator's own request and answer types, its settings and its
//! errors. The proxy maps Kafka's JoinGroup / SyncGroup / Heartbeat /
//! LeaveGroup / OffsetCommit / DescribeGroups / ListGroups / DeleteGroups
//! messages to and from these; no Kafka wire type appears here.

use std::fmt;

use bytes::Bytes;

pub use crate::config::{DEFAULT_OFFSET_METADATA_MAX_BYTES, GroupConfig};

/// Why a group call failed, named as Kafka names the error.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
pub enum GroupError {
    #[error("this broker is not the coordinator of the group")]
    NotCoordinator,
    #[error("the coordinator is loading the group")]
    CoordinatorLoadInProgress,
    #[error("the coordinator does not know this member")]
    UnknownMemberId,
    #[error("the generation is not the group's current generation")]
    IllegalGeneration,
    #[error("the group is rebalancing; the member must rejoin")]
    RebalanceInProgress,
    #[error("the member's protocol type or protocols do not match the group's")]
    InconsistentGroupProtocol,
    #[error("the member must join again with the member id it was given")]
    MemberIdRequired,
    #[error("another member has joined with the same group instance id")]
    FencedInstanceId,
    #[error("the session timeout is outside the coordinator's allowed range")]
    InvalidSessionTimeout,
    #[error("the group still has members")]
    NonEmptyGroup,
    #[error("the group does not exist")]
    GroupIdNotFound,
    /// OffsetDelete of a topic the group's live members subscribe to.
    #[error("the group's members subscribe to the topic")]
    GroupSubscribedToTopic,
    #[error("the group id is empty")]
    InvalidGroupId,
    #[error("unexpected coordinator error")]
    UnknownServerError,
    #[error("the coordinator cannot store offsets now")]
    CoordinatorNotAvailable,
    #[error("the offset's metadata is above offset.metadata.max.bytes")]
    OffsetMetadataTooLarge,
    #[error("the topic or partition does not exist")]
    UnknownTopicOrPartition,
    /// A consumer group member's epoch is ahead of (or not) its current one.
    #[error("the member epoch is not the member's current epoch")]
    FencedMemberEpoch,
    /// An OffsetCommit with an older epoch of a consumer group member.
    #[error("the member epoch is older than the member's current epoch")]
    StaleMemberEpoch,
    #[error("another member of the group uses this instance id")]
    UnreleasedInstanceId,
    #[error("the coordinator has no such server-side assignor")]
    UnsupportedAssignor,
    #[error("invalid request: {0}")]
    InvalidRequest(&'static str),
}

impl GroupError {
    /// Kafka's numeric error code. `kafka-protocol` is not a dependency of
    /// this crate, so the numbers are written out; they are those of Kafka's
    /// `Errors` enum.
    pub fn kafka_code(&self) -> i16 {
        match self {
            GroupError::UnknownServerError => -1,
            GroupError::UnknownTopicOrPartition => 3,
            GroupError::OffsetMetadataTooLarge => 12,
            GroupError::CoordinatorNotAvailable => 15,
            GroupError::CoordinatorLoadInProgress => 14,
            GroupError::NotCoordinator => 16,
            GroupError::IllegalGeneration => 22,
            GroupError::InconsistentGroupProtocol => 23,
            GroupError::InvalidGroupId => 24,
            GroupError::UnknownMemberId => 25,
            GroupError::InvalidSessionTimeout => 26,
            GroupError::RebalanceInProgress => 27,
            GroupError::NonEmptyGroup => 68,
            GroupError::GroupIdNotFound => 69,
            GroupError::GroupSubscribedToTopic => 86,
            GroupError::MemberIdRequired => 79,
            GroupError::FencedInstanceId => 82,
            GroupError::InvalidRequest(_) => 42,
            GroupError::FencedMemberEpoch => 110,
            GroupError::UnreleasedInstanceId => 111,
            GroupError::UnsupportedAssignor => 112,
            GroupError::StaleMemberEpoch => 113,
        }
    }
}

/// One partition's offset in an OffsetCommit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffsetToCommit {
    pub topic: String,
    pub partition: u32,
    pub offset: i64,
    pub leader_epoch: i32,
    pub metadata: String,
}

/// An OffsetCommit: the member's identity and its offsets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommitParams {
    pub group_id: String,
    /// -1 (with an empty member id) for a commit from outside the group.
    pub generation_id: i32,
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub offsets: Vec<OffsetToCommit>,
}

/// The state of a classic group.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GroupState {
    /// No members (the group may still have committed offsets).
    Empty,
    /// Waiting for the members to (re)join.
    PreparingRebalance,
    /// Joined; waiting for the leader's assignment.
    CompletingRebalance,
    /// Every member has its assignment.
    Stable,
    /// Gone: deleted, or its shard left this broker.
    Dead,
}

impl GroupState {
    /// The name Kafka gives the state in DescribeGroups and ListGroups.
    pub fn as_str(&self) -> &'static str {
        match self {
            GroupState::Empty => "Empty",
            GroupState::PreparingRebalance => "PreparingRebalance",
            GroupState::CompletingRebalance => "CompletingRebalance",
            GroupState::Stable => "Stable",
            GroupState::Dead => "Dead",
        }
    }
}

impl fmt::Display for GroupState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A JoinGroup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JoinParams {
    pub group_id: String,
    /// Empty for a member joining for the first time.
    pub member_id: String,
    /// `group.instance.id` of a static member (KIP-345).
    pub group_instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub session_timeout_ms: i32,
    /// JoinGroup v0 has none; the proxy passes the session timeout then.
    pub rebalance_timeout_ms: i32,
    pub protocol_type: String,
    /// `(protocol name, metadata)` in the member's order of preference.
    pub protocols: Vec<(String, Bytes)>,
    /// JoinGroup v4+ (KIP-394): a new dynamic member first gets
    /// MEMBER_ID_REQUIRED with its id and joins again with it.
    pub require_known_member_id: bool,
}

/// A member as the leader sees it in its JoinGroup answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JoinMember {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    /// The member's metadata for the chosen protocol.
    pub metadata: Bytes,
}

/// The answer to a JoinGroup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JoinResult {
    pub error: Option<GroupError>,
    /// `-1` with an error.
    pub generation_id: i32,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    /// Empty with an error.
    pub leader_id: String,
    /// The member's id (with MEMBER_ID_REQUIRED: the id to join with).
    pub member_id: String,
    /// All members with their metadata; only in the leader's answer.
    pub members: Vec<JoinMember>,
    /// KIP-814 (JoinGroup v9) is not implemented: always false.
    pub skip_assignment: bool,
}

impl JoinResult {
    pub(crate) fn failed(member_id: impl Into<String>, error: GroupError) -> Self {
        Self {
            error: Some(error),
            generation_id: -1,
            protocol_type: None,
            protocol_name: None,
            leader_id: String::new(),
            member_id: member_id.into(),
            members: Vec::new(),
            skip_assignment: false,
        }
    }
}

/// A SyncGroup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyncParams {
    pub group_id: String,
    pub generation_id: i32,
    pub member_id: String,
    pub group_instance_id: Option<String>,
    /// SyncGroup v5+; checked against the group's when given.
    pub protocol_type: Option<String>,
    /// SyncGroup v5+; checked against the group's when given.
    pub protocol_name: Option<String>,
    /// `(member id, assignment)`; only the leader's are used.
    pub assignments: Vec<(String, Bytes)>,
}

/// The answer to a SyncGroup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyncResult {
    pub error: Option<GroupError>,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    pub assignment: Bytes,
}

impl SyncResult {
    pub(crate) fn failed(error: GroupError) -> Self {
        Self {
            error: Some(error),
            protocol_type: None,
            protocol_name: None,
            assignment: Bytes::new(),
        }
    }
}

/// One member in DescribeGroups.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DescribedMember {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    /// Metadata for the chosen protocol; empty unless the group is Stable.
    pub metadata: Bytes,
    /// Empty unless the group is Stable.
    pub assignment: Bytes,
}

/// The answer to DescribeGroups for one group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupDescription {
    pub error: Option<GroupError>,
    pub group_id: String,
    pub state: GroupState,
    /// Empty when the group never had a member.
    pub protocol_type: String,
    /// The chosen protocol; empty unless the group is Stable.
    pub protocol_data: String,
    pub members: Vec<DescribedMember>,
}

/// One group in ListGroups.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupListing {
    pub group_id: String,
    pub protocol_type: String,
    /// Kafka's state name (a classic [`GroupState`], or a consumer group's
    /// Empty / Assigning / Reconciling / Stable).
    pub state: String,
    /// ListGroups v5's group type: `classic` or `consumer`.
    pub group_type: GroupType,
}

/// The protocol a group speaks (ListGroups v5's `GroupType`; share groups
/// are kept by the share service, `crate::share`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GroupType {
    Classic,
    Consumer,
}

impl GroupType {
    pub fn as_str(self) -> &'static str {
        match self {
            GroupType::Classic => "classic",
            GroupType::Consumer => "consumer",
        }
    }
}
