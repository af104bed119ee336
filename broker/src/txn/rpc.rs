//! Transaction coordinator calls over the internal RPC, so a proxy reaches
//! the coordinator of a transactional id whose shard another broker owns:
//! the server's handlers and [`RemoteBroker`]'s implementation of
//! [`TxnCoordination`]. A step travels as the metadata API's own message
//! (`TxnRequest` / `TxnResponse`, one definition of a step's fields); its
//! fence and clock fields are not the caller's to set: the coordinator
//! fills them with its own.

use std::time::Duration;

use floe_metadata::api::txn_routes;
use floe_metadata::command::ShardFence;
use floe_metadata::ids::{BrokerId, Epoch, ShardId, TransactionalId};
use floe_metadata::txn::{TxnCommand, TxnError, TxnMeta, TxnOp, TxnReply};

use super::CoordError;
use super::TxnCoordination;
use crate::rpc::RemoteBroker;

pub mod proto {
    pub use floe_metadata::api::proto::{TxnInfo, TxnRequest, TxnResponse};

    /// Why a coordinator did not answer (`CoordError`): `kind` 0 none, 1 not
    /// the coordinator, 2 not available (`message` says why), 3 refused by
    /// the transaction's rules (`refused`, `TxnError::code`), 4 a commit
    /// the client must abort (`message` says why).
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct CoordFailure {
        #[prost(uint32, tag = "1")]
        pub kind: u32,
        #[prost(string, tag = "2")]
        pub message: String,
        #[prost(uint32, tag = "3")]
        pub refused: u32,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct StepReply {
        #[prost(message, optional, tag = "1")]
        pub failure: Option<CoordFailure>,
        #[prost(message, optional, tag = "2")]
        pub reply: Option<TxnResponse>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct TxnId {
        #[prost(string, tag = "1")]
        pub transactional_id: String,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Infos {
        #[prost(message, optional, tag = "1")]
        pub failure: Option<CoordFailure>,
        #[prost(message, repeated, tag = "2")]
        pub txns: Vec<TxnInfo>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ListRequest {}
}

/// How long a proxy waits for a coordinator's answer (a step is one
/// metadata write).
const CALL_TIMEOUT: Duration = Duration::from_secs(10);

fn failure_msg(e: &CoordError) -> proto::CoordFailure {
    match e {
        CoordError::NotCoordinator => proto::CoordFailure {
            kind: 1,
            ..Default::default()
        },
        CoordError::Unavailable(why) => proto::CoordFailure {
            kind: 2,
            message: why.clone(),
            refused: 0,
        },
        CoordError::Txn(t) => proto::CoordFailure {
            kind: 3,
            message: String::new(),
            refused: t.code(),
        },
        CoordError::Abortable(why) => proto::CoordFailure {
            kind: 4,
            message: why.clone(),
            refused: 0,
        },
    }
}

fn failure(f: Option<proto::CoordFailure>) -> Result<(), CoordError> {
    match f {
        None => Ok(()),
        Some(f) => Err(match f.kind {
            1 => CoordError::NotCoordinator,
            3 => TxnError::from_code(f.refused).map_or_else(
                || CoordError::Unavailable("an unknown refusal".into()),
                CoordError::Txn,
            ),
            4 => CoordError::Abortable(f.message),
            _ => CoordError::Unavailable(f.message),
        }),
    }
}

/// A coordinator that cannot be reached is not the coordinator as far as
/// the client knows (it looks it up again).
fn unreachable(e: &crate::error::CallError) -> CoordError {
    tracing::debug!(error = %e, "transaction coordinator not reached");
    CoordError::NotCoordinator
}

pub(crate) async fn rpc_step(b: impl TxnCoordination, r: proto::TxnRequest) -> proto::StepReply {
    let cmd = match txn_routes::command(r) {
        Ok(c) => c,
        Err(_) => {
            return proto::StepReply {
                failure: Some(failure_msg(&TxnError::InvalidRequest.into())),
                reply: None,
            };
        }
    };
    match b.txn_step(&cmd.id, cmd.op).await {
        Ok(reply) => proto::StepReply {
            failure: None,
            reply: Some(txn_routes::reply_msg(&cmd.id, &reply)),
        },
        Err(e) => proto::StepReply {
            failure: Some(failure_msg(&e)),
            reply: None,
        },
    }
}

pub(crate) async fn rpc_describe(b: impl TxnCoordination, r: proto::TxnId) -> proto::Infos {
    let id = TransactionalId(r.transactional_id);
    match b.describe_txn(&id).await {
        Ok(t) => proto::Infos {
            failure: None,
            txns: t.iter().map(|t| txn_routes::info_msg(&id, t)).collect(),
        },
        Err(e) => proto::Infos {
            failure: Some(failure_msg(&e)),
            txns: vec![],
        },
    }
}

pub(crate) async fn rpc_list(b: impl TxnCoordination, _: proto::ListRequest) -> proto::Infos {
    match b.list_txns().await {
        Ok(all) => proto::Infos {
            failure: None,
            txns: all
                .iter()
                .map(|(id, t)| txn_routes::info_msg(id, t))
                .collect(),
        },
        Err(e) => proto::Infos {
            failure: Some(failure_msg(&e)),
            txns: vec![],
        },
    }
}

fn infos(m: proto::Infos) -> Result<Vec<(TransactionalId, TxnMeta)>, CoordError> {
    failure(m.failure)?;
    m.txns
        .into_iter()
        .map(|t| txn_routes::info(t).map_err(|e| CoordError::Unavailable(e.to_string())))
        .collect()
}

#[async_trait::async_trait]
impl TxnCoordination for RemoteBroker {
    async fn txn_step(&self, id: &TransactionalId, op: TxnOp) -> Result<TxnReply, CoordError> {
        // The coordinator replaces the fence and the clock with its own.
        let cmd = TxnCommand {
            fence: ShardFence {
                broker: BrokerId(u32::MAX),
                shard: ShardId(0),
                epoch: Epoch(0),
            },
            id: id.clone(),
            now_ms: 0,
            op,
        };
        let r = self
            .call_timeout::<routes::TxnStep>(txn_routes::command_msg(&cmd), CALL_TIMEOUT)
            .await
            .map_err(|e| unreachable(&e))?;
        failure(r.failure)?;
        let reply = r
            .reply
            .ok_or_else(|| CoordError::Unavailable("a step answered nothing".into()))?;
        txn_routes::reply(reply).map_err(|e| CoordError::Unavailable(e.to_string()))
    }

    async fn describe_txn(&self, id: &TransactionalId) -> Result<Option<TxnMeta>, CoordError> {
        let msg = proto::TxnId {
            transactional_id: id.0.clone(),
        };
        let r = self
            .call_timeout::<routes::TxnDescribe>(msg, CALL_TIMEOUT)
            .await
            .map_err(|e| unreachable(&e))?;
        Ok(infos(r)?.into_iter().next().map(|(_, t)| t))
    }

    async fn list_txns(&self) -> Result<Vec<(TransactionalId, TxnMeta)>, CoordError> {
        let r = self
            .call_timeout::<routes::TxnList>(proto::ListRequest {}, CALL_TIMEOUT)
            .await
            .map_err(|e| unreachable(&e))?;
        infos(r)
    }
}

/// The RPC routes of the transaction coordinator.
pub mod routes {
    use super::proto as txn;
    use crate::rpc::routes::{Route, routes};

    routes! {
        /// A transaction step of a client (InitProducerId with a transactional
        /// id, AddPartitionsToTxn, AddOffsetsToTxn, TxnOffsetCommit, EndTxn).
        TxnStep = "/rpc/txn/step": txn::TxnRequest => txn::StepReply;
        TxnDescribe = "/rpc/txn/describe": txn::TxnId => txn::Infos;
        /// The transactions of every shard the broker coordinates.
        TxnList = "/rpc/txn/list": txn::ListRequest => txn::Infos;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_coordinator_failure_crosses_the_wire_unchanged() {
        let all = [
            CoordError::NotCoordinator,
            CoordError::Unavailable("down".into()),
            CoordError::Txn(TxnError::ProducerFenced),
            CoordError::Txn(TxnError::ConcurrentTransactions),
        ];
        for e in all {
            assert_eq!(failure(Some(failure_msg(&e))), Err(e));
        }
        assert_eq!(failure(None), Ok(()));
    }
}
