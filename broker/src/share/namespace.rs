//! One id namespace for classic, consumer (KIP-848) and share groups, as
//! in Kafka: a group id in use as one kind is refused to a client of
//! another. The coordinator of the id's shard decides, from the groups it
//! holds in memory and, for an id it does not hold, from the group's stored
//! offsets (a share-partition's state makes a share group, any other
//! offset a classic one), so that a group without members keeps its kind.

use floe_metadata::api::calls::GroupOffset;

use super::node::ShareNode;
use crate::error::{BrokerError, CallError};
use crate::group::{GroupError, GroupState};

/// The kind of group an id is in use as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupKind {
    /// A classic group (JoinGroup / SyncGroup), with members or offsets.
    Classic,
    /// A consumer group of the KIP-848 protocol (ConsumerGroupHeartbeat).
    Consumer,
    /// A share group (ShareGroupHeartbeat), with members or share state.
    Share,
}

impl GroupKind {
    /// Kafka's name of the kind (ListGroups v5's group type).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Classic => "classic",
            Self::Consumer => "consumer",
            Self::Share => "share",
        }
    }
}

/// The kind a group's stored offsets make it: share when one of them is a
/// share-partition's state, classic when there is any other, none when
/// there are none.
pub fn stored_kind(offsets: &[GroupOffset]) -> Option<GroupKind> {
    if offsets
        .iter()
        .any(|o| super::durable::is_share_state(&o.committed.metadata))
    {
        Some(GroupKind::Share)
    } else if offsets.is_empty() {
        None
    } else {
        Some(GroupKind::Classic)
    }
}

/// Why a share member's heartbeat is refused: the id is another kind of
/// group (GROUP_ID_NOT_FOUND, "Group … is not a share group.").
pub fn refuses_share(kind: Option<GroupKind>) -> bool {
    matches!(kind, Some(GroupKind::Classic | GroupKind::Consumer))
}

/// Kafka's answer to a classic or consumer client on a share group:
/// JoinGroup gets INCONSISTENT_GROUP_PROTOCOL, ConsumerGroupHeartbeat
/// GROUP_ID_NOT_FOUND ("Group … is not a consumer group.").
pub fn refusal_of_share(kind: Option<GroupKind>, join_group: bool) -> Option<GroupError> {
    match kind {
        Some(GroupKind::Share) if join_group => Some(GroupError::InconsistentGroupProtocol),
        Some(GroupKind::Share) => Some(GroupError::GroupIdNotFound),
        _ => None,
    }
}

impl ShareNode {
    /// The kind `group` is in use as in this broker's memory (its
    /// coordinator shard's groups), if it holds it.
    pub fn live_kind(&self, group: &str) -> Option<GroupKind> {
        if self.service.has_group(group) {
            return Some(GroupKind::Share);
        }
        let d = &self.groups.describe_group(group);
        if d.error == Some(GroupError::GroupIdNotFound) {
            Some(GroupKind::Consumer)
        } else if d.error.is_none() && d.state != GroupState::Dead {
            Some(GroupKind::Classic)
        } else {
            None
        }
    }

    /// The kind of `group`: in memory, else from its stored offsets (one
    /// linearizable read of the metadata service).
    pub async fn group_kind(&self, group: &str) -> Result<Option<GroupKind>, CallError> {
        if let Some(kind) = self.live_kind(group) {
            return Ok(Some(kind));
        }
        let stored = self
            .partitions
            .meta()
            .fetch_offsets(group)
            .await
            .map_err(BrokerError::from)?;
        Ok(stored_kind(&stored))
    }

    /// [`Self::group_kind`], or the kind in memory when the stored offsets
    /// cannot be read now (a classic member is not held up by it).
    pub(crate) async fn kind_or_live(&self, group: &str) -> Option<GroupKind> {
        match self.group_kind(group).await {
            Ok(kind) => kind,
            Err(e) => {
                tracing::warn!(group, error = %e, "group kind not read; deciding from memory");
                self.live_kind(group)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn offset(metadata: &str) -> GroupOffset {
        GroupOffset {
            topic: "t".into(),
            partition: 0,
            committed: floe_metadata::command::CommittedOffset {
                offset: 5,
                leader_epoch: -1,
                metadata: metadata.into(),
            },
        }
    }

    #[test]
    fn stored_offsets_tell_a_share_group_from_a_classic_one() {
        assert_eq!(stored_kind(&[]), None);
        assert_eq!(stored_kind(&[offset("")]), Some(GroupKind::Classic));
        assert_eq!(
            stored_kind(&[offset("client metadata")]),
            Some(GroupKind::Classic)
        );
        assert_eq!(stored_kind(&[offset("1;5-6:a:1")]), Some(GroupKind::Share));
        assert_eq!(
            stored_kind(&[offset(""), offset("1;")]),
            Some(GroupKind::Share)
        );
    }

    #[test]
    fn each_kind_is_refused_to_the_other_protocols_as_kafka_answers() {
        assert!(refuses_share(Some(GroupKind::Classic)));
        assert!(refuses_share(Some(GroupKind::Consumer)));
        assert!(!refuses_share(Some(GroupKind::Share)));
        assert!(!refuses_share(None));
        let share = Some(GroupKind::Share);
        assert_eq!(
            refusal_of_share(share, true),
            Some(GroupError::InconsistentGroupProtocol)
        );
        assert_eq!(
            refusal_of_share(share, false),
            Some(GroupError::GroupIdNotFound)
        );
        for other in [None, Some(GroupKind::Classic), Some(GroupKind::Consumer)] {
            assert_eq!(refusal_of_share(other, true), None);
            assert_eq!(refusal_of_share(other, false), None);
        }
    }
}
