//! The admin side of share groups, as a proxy reaches it:
//! [`ShareGroupAdmin`] at a group's coordinator (list its shard's share
//! groups, check a group's kind and that it has no members, delete it) and
//! [`SharePartitionAdmin`] at a partition's owner (move or delete a
//! share-partition's start offset), each implemented by the [`ShareNode`] of
//! this process and by [`RemoteBroker`] over the internal RPC
//! (`/rpc/share/{groups,check,delete-group,reset}`).

use std::time::Duration;

use super::group::{ShareGroupError, ShareGroupState};
use super::inspect::{self, ShareInspection};
use super::namespace::GroupKind;
use super::node::ShareNode;
use super::rpc::{ShareCall, call_from, call_msg, group_error_code, group_error_from};
use crate::error::{BrokerError, CallError, ErrorKind};
use crate::rpc::{RemoteBroker, from_proto, to_proto};

/// A share group as ListGroups lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShareGroupListing {
    pub group_id: String,
    pub state: ShareGroupState,
}

/// A share group's coordinator, for the admin APIs.
#[async_trait::async_trait]
pub trait ShareGroupAdmin: Send + Sync + std::fmt::Debug {
    /// The share groups in memory at this coordinator (of the shards it
    /// owns), sorted by id. Groups known only from their stored state are
    /// not in it (the caller lists those).
    async fn share_groups(&self) -> Result<Vec<ShareGroupListing>, ShareGroupError>;

    /// The kind `group` is in use as (in memory, else from its stored
    /// offsets), once the members whose session ran out are removed;
    /// NON_EMPTY_GROUP if it is a share group with members. With `hold`, a
    /// group found empty (a share group, or none) is held: joins wait until
    /// [`ShareGroupAdmin::share_release`] (see [`super::holds`]).
    async fn share_check_empty(
        &self,
        group: &str,
        hold: bool,
    ) -> Result<Option<GroupKind>, ShareGroupError>;

    /// Forgets the share group's membership (NON_EMPTY_GROUP while it has
    /// members, GROUP_ID_NOT_FOUND for another kind of group), and holds
    /// it until [`ShareGroupAdmin::share_release`].
    async fn share_delete_group(&self, group: &str) -> Result<(), ShareGroupError>;

    /// Ends the hold of a check or delete: joins of `group` go on.
    async fn share_release(&self, group: &str);
}

/// A partition's owner, for its share-partitions' start offsets.
#[async_trait::async_trait]
pub trait SharePartitionAdmin: Send + Sync {
    /// Moves the group's start offset on the call's partition to `to`, or
    /// deletes its state (`None`); see [`super::ShareService::reset`].
    async fn share_reset(
        &self,
        call: &ShareCall,
        to: Option<i64>,
    ) -> Result<Option<i64>, CallError>;

    /// The group's state on the call's partition as an operator sees it,
    /// with at most `limit` acquired records listed; `None` when the group
    /// has none there (see [`super::ShareService::inspect`]).
    async fn share_inspect(
        &self,
        call: &ShareCall,
        limit: u32,
    ) -> Result<Option<ShareInspection>, CallError>;
}

pub mod proto {
    use crate::rpc::proto::Error;

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ResetRequest {
        #[prost(message, optional, tag = "1")]
        pub call: Option<super::super::rpc::proto::Call>,
        /// False: delete the state.
        #[prost(bool, tag = "2")]
        pub has_offset: bool,
        #[prost(int64, tag = "3")]
        pub offset: i64,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ResetResponse {
        #[prost(message, optional, tag = "1")]
        pub error: Option<Error>,
        #[prost(bool, tag = "2")]
        pub has_offset: bool,
        #[prost(int64, tag = "3")]
        pub offset: i64,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct GroupsRequest {}

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Listed {
        #[prost(string, tag = "1")]
        pub group: String,
        #[prost(bool, tag = "2")]
        pub stable: bool,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct GroupsResponse {
        /// 0, or Kafka's code.
        #[prost(int32, tag = "1")]
        pub error: i32,
        #[prost(message, repeated, tag = "2")]
        pub groups: Vec<Listed>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct GroupRequest {
        #[prost(string, tag = "1")]
        pub group: String,
        /// A check that holds the group found empty (see `super::holds`).
        #[prost(bool, tag = "2")]
        pub hold: bool,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct CheckResponse {
        #[prost(int32, tag = "1")]
        pub error: i32,
        /// 0 none, 1 classic, 2 consumer, 3 share.
        #[prost(uint32, tag = "2")]
        pub kind: u32,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct DeleteResponse {
        #[prost(int32, tag = "1")]
        pub error: i32,
    }
}

fn kind_code(kind: Option<GroupKind>) -> u32 {
    match kind {
        None => 0,
        Some(GroupKind::Classic) => 1,
        Some(GroupKind::Consumer) => 2,
        Some(GroupKind::Share) => 3,
    }
}

fn kind_from(code: u32) -> Option<GroupKind> {
    match code {
        1 => Some(GroupKind::Classic),
        2 => Some(GroupKind::Consumer),
        3 => Some(GroupKind::Share),
        _ => None,
    }
}

// The broker's side.

#[async_trait::async_trait]
impl ShareGroupAdmin for ShareNode {
    async fn share_groups(&self) -> Result<Vec<ShareGroupListing>, ShareGroupError> {
        let shards = self.partitions.view().current().shard_count();
        Ok(self
            .service
            .groups()
            .into_iter()
            .filter(|(id, _)| self.shards.serves_id(id, shards))
            .map(|(group_id, state)| ShareGroupListing { group_id, state })
            .collect())
    }

    async fn share_check_empty(
        &self,
        group: &str,
        hold: bool,
    ) -> Result<Option<GroupKind>, ShareGroupError> {
        self.share_coordinator_check(group)?;
        let members = || self.check_no_members(group);
        if hold {
            // Held with the look at its members: a join from now on waits,
            // so the group stays as found.
            self.holds.hold_while(group, members)?;
        } else {
            members()?;
        }
        let kind = self
            .group_kind(group)
            .await
            .map_err(|_| ShareGroupError::NotCoordinator);
        if hold && !matches!(kind, Ok(None | Some(GroupKind::Share))) {
            self.holds.release(group);
        }
        kind
    }

    async fn share_delete_group(&self, group: &str) -> Result<(), ShareGroupError> {
        self.share_coordinator_check(group)?;
        if super::namespace::refuses_share(self.live_kind(group)) {
            return Err(ShareGroupError::NotShareGroup);
        }
        let topics = self.share_topics();
        self.holds.hold_while(group, || {
            for member in self.service.expire_group(group, &topics) {
                self.release_elsewhere(group, member);
            }
            self.service.delete_group(group)
        })
    }

    async fn share_release(&self, group: &str) {
        self.holds.release(group);
    }
}

impl ShareNode {
    /// NON_EMPTY_GROUP if the share group has members once those whose
    /// session ran out are removed.
    fn check_no_members(&self, group: &str) -> Result<(), ShareGroupError> {
        for member in self.service.expire_group(group, &self.share_topics()) {
            self.release_elsewhere(group, member);
        }
        if self
            .service
            .groups()
            .iter()
            .any(|(id, state)| id == group && *state != ShareGroupState::Empty)
        {
            return Err(ShareGroupError::NonEmptyGroup);
        }
        Ok(())
    }
}

#[async_trait::async_trait]
impl SharePartitionAdmin for ShareNode {
    async fn share_reset(
        &self,
        call: &ShareCall,
        to: Option<i64>,
    ) -> Result<Option<i64>, CallError> {
        self.service
            .reset(
                &self.partitions,
                self,
                &call.settings,
                &call.group,
                &call.key,
                to,
            )
            .await
    }

    async fn share_inspect(
        &self,
        call: &ShareCall,
        limit: u32,
    ) -> Result<Option<ShareInspection>, CallError> {
        self.service
            .inspect(self, &call.settings, &call.group, &call.key, limit as usize)
            .await
    }
}

// The server's handlers.

pub(crate) async fn rpc_reset(b: ShareNode, r: proto::ResetRequest) -> proto::ResetResponse {
    let failed = |e: &BrokerError| proto::ResetResponse {
        error: Some(to_proto(e)),
        ..Default::default()
    };
    let call = match call_from(r.call) {
        Ok(c) => c,
        Err(e) => return failed(&e),
    };
    match b.share_reset(&call, r.has_offset.then_some(r.offset)).await {
        Ok(at) => proto::ResetResponse {
            error: None,
            has_offset: at.is_some(),
            offset: at.unwrap_or(-1),
        },
        Err(CallError::Broker(e)) => failed(&e),
        Err(e) => failed(&BrokerError::new(ErrorKind::OutcomeUnknown, e.to_string())),
    }
}

pub(crate) async fn rpc_inspect(
    b: ShareNode,
    r: inspect::proto::InspectRequest,
) -> inspect::proto::InspectResponse {
    let failed = |e: &BrokerError| inspect::proto::InspectResponse {
        error: Some(to_proto(e)),
        ..Default::default()
    };
    let call = match call_from(r.call) {
        Ok(c) => c,
        Err(e) => return failed(&e),
    };
    match b.share_inspect(&call, r.limit).await {
        Ok(found) => ShareInspection::to_proto(found.as_ref()),
        Err(CallError::Broker(e)) => failed(&e),
        Err(e) => failed(&BrokerError::new(ErrorKind::OutcomeUnknown, e.to_string())),
    }
}

pub(crate) async fn rpc_groups(b: ShareNode, _: proto::GroupsRequest) -> proto::GroupsResponse {
    match b.share_groups().await {
        Ok(groups) => proto::GroupsResponse {
            error: 0,
            groups: groups
                .into_iter()
                .map(|g| proto::Listed {
                    group: g.group_id,
                    stable: g.state == ShareGroupState::Stable,
                })
                .collect(),
        },
        Err(e) => proto::GroupsResponse {
            error: group_error_code(e),
            groups: Vec::new(),
        },
    }
}

pub(crate) async fn rpc_check(b: ShareNode, r: proto::GroupRequest) -> proto::CheckResponse {
    match b.share_check_empty(&r.group, r.hold).await {
        Ok(kind) => proto::CheckResponse {
            error: 0,
            kind: kind_code(kind),
        },
        Err(e) => proto::CheckResponse {
            error: group_error_code(e),
            kind: 0,
        },
    }
}

pub(crate) async fn rpc_hold_end(b: ShareNode, r: proto::GroupRequest) -> proto::DeleteResponse {
    b.share_release(&r.group).await;
    proto::DeleteResponse { error: 0 }
}

pub(crate) async fn rpc_delete_group(
    b: ShareNode,
    r: proto::GroupRequest,
) -> proto::DeleteResponse {
    proto::DeleteResponse {
        error: match b.share_delete_group(&r.group).await {
            Ok(()) => 0,
            Err(e) => group_error_code(e),
        },
    }
}

// The client's side: a broker in another process.

const ADMIN_CALL_TIMEOUT: Duration = Duration::from_secs(10);

#[async_trait::async_trait]
impl ShareGroupAdmin for RemoteBroker {
    async fn share_groups(&self) -> Result<Vec<ShareGroupListing>, ShareGroupError> {
        let r = self
            .call_timeout::<routes::ShareGroups>(proto::GroupsRequest {}, ADMIN_CALL_TIMEOUT)
            .await
            .map_err(|_| ShareGroupError::NotCoordinator)?;
        if r.error != 0 {
            return Err(group_error_from(r.error));
        }
        Ok(r.groups
            .into_iter()
            .map(|g| ShareGroupListing {
                group_id: g.group,
                state: if g.stable {
                    ShareGroupState::Stable
                } else {
                    ShareGroupState::Empty
                },
            })
            .collect())
    }

    async fn share_check_empty(
        &self,
        group: &str,
        hold: bool,
    ) -> Result<Option<GroupKind>, ShareGroupError> {
        let r = self
            .call_timeout::<routes::ShareCheck>(
                proto::GroupRequest {
                    group: group.to_owned(),
                    hold,
                },
                ADMIN_CALL_TIMEOUT,
            )
            .await
            .map_err(|_| ShareGroupError::NotCoordinator)?;
        if r.error != 0 {
            return Err(group_error_from(r.error));
        }
        Ok(kind_from(r.kind))
    }

    async fn share_delete_group(&self, group: &str) -> Result<(), ShareGroupError> {
        let r = self
            .call_timeout::<routes::ShareDeleteGroup>(
                proto::GroupRequest {
                    group: group.to_owned(),
                    hold: true,
                },
                ADMIN_CALL_TIMEOUT,
            )
            .await
            .map_err(|_| ShareGroupError::NotCoordinator)?;
        match r.error {
            0 => Ok(()),
            e => Err(group_error_from(e)),
        }
    }

    async fn share_release(&self, group: &str) {
        let released = self
            .call_timeout::<routes::ShareHoldEnd>(
                proto::GroupRequest {
                    group: group.to_owned(),
                    hold: false,
                },
                ADMIN_CALL_TIMEOUT,
            )
            .await;
        if let Err(e) = released {
            // The hold ends on its own (`holds::ADMIN_HOLD`).
            tracing::debug!(%group, error = %e, "releasing a share group's admin hold failed");
        }
    }
}

#[async_trait::async_trait]
impl SharePartitionAdmin for RemoteBroker {
    async fn share_reset(
        &self,
        call: &ShareCall,
        to: Option<i64>,
    ) -> Result<Option<i64>, CallError> {
        let r = self
            .call_timeout::<routes::ShareReset>(
                proto::ResetRequest {
                    call: Some(call_msg(call)),
                    has_offset: to.is_some(),
                    offset: to.unwrap_or(-1),
                },
                ADMIN_CALL_TIMEOUT,
            )
            .await?;
        match r.error {
            Some(e) => Err(from_proto(e).into()),
            None => Ok(r.has_offset.then_some(r.offset)),
        }
    }

    async fn share_inspect(
        &self,
        call: &ShareCall,
        limit: u32,
    ) -> Result<Option<ShareInspection>, CallError> {
        let mut r = self
            .call_timeout::<routes::ShareInspect>(
                inspect::proto::InspectRequest {
                    call: Some(call_msg(call)),
                    limit,
                },
                ADMIN_CALL_TIMEOUT,
            )
            .await?;
        match r.error.take() {
            Some(e) => Err(from_proto(e).into()),
            None => Ok(ShareInspection::from_proto(r)),
        }
    }
}

/// The RPC routes of the share groups' admin calls.
pub mod routes {
    use super::inspect::proto as share_inspect;
    use super::proto as share_admin;
    use crate::rpc::routes::{Route, routes};

    routes! {
        /// A share-partition's start offset moved or its state deleted, at the
        /// partition's owner, fenced by its epoch (Alter/DeleteShareGroupOffsets).
        ShareReset = "/rpc/share/reset": share_admin::ResetRequest => share_admin::ResetResponse;
        /// A share-partition's state as an operator sees it, at the
        /// partition's owner (the console's share-group page).
        ShareInspect = "/rpc/share/inspect": share_inspect::InspectRequest => share_inspect::InspectResponse;
        /// The share groups in memory at a coordinator (ListGroups).
        ShareGroups = "/rpc/share/groups": share_admin::GroupsRequest => share_admin::GroupsResponse;
        /// A group's kind, once its members without a session are removed;
        /// NON_EMPTY_GROUP for a share group with members.
        ShareCheck = "/rpc/share/check": share_admin::GroupRequest => share_admin::CheckResponse;
        /// DeleteGroups of a share group, at its coordinator.
        ShareDeleteGroup = "/rpc/share/delete-group": share_admin::GroupRequest => share_admin::DeleteResponse;
        /// The end of an admin request's hold on a share group, at its coordinator.
        ShareHoldEnd = "/rpc/share/hold-end": share_admin::GroupRequest => share_admin::DeleteResponse;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_group_kind_crosses_the_rpc() {
        for kind in [
            None,
            Some(GroupKind::Classic),
            Some(GroupKind::Consumer),
            Some(GroupKind::Share),
        ] {
            assert_eq!(kind_from(kind_code(kind)), kind);
        }
    }
}
