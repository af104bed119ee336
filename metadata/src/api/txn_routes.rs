//! The transaction coordinators' steps over the API (`crate::txn`): one
//! route applies a step, one lists every transactional id's state. The
//! conversions between the domain types and their protobuf messages are
//! here, used by the server's handlers and by [`MetaApi`]'s methods alike.
//!
//! [`MetaApi`]: super::MetaApi

use std::collections::{BTreeMap, BTreeSet};

use super::server::AppState;
use super::{convert, proto};
use crate::command::{Command, Response, ShardFence};
use crate::error::MetaError;
use crate::ids::{BrokerId, Epoch, ProducerEpoch, ProducerId, ShardId, TransactionalId};
use crate::state::GroupOffsets;
use crate::txn::{
    AbortedTxn, OpenTxn, PartitionTxns, ProducerIdEpoch, RangeTxns, TxnCommand, TxnError, TxnEvent,
    TxnFilter, TxnMeta, TxnOp, TxnReply, TxnState,
};

fn bad(what: &str) -> MetaError {
    MetaError::InvalidRequest(format!("transaction step: {what}"))
}

fn producer_msg(p: ProducerIdEpoch) -> proto::TxnProducer {
    proto::TxnProducer {
        producer_id: p.producer_id.0,
        epoch: i32::from(p.epoch.0),
    }
}

fn producer(p: Option<&proto::TxnProducer>) -> Result<Option<ProducerIdEpoch>, MetaError> {
    p.map(|p| {
        Ok(ProducerIdEpoch {
            producer_id: ProducerId(p.producer_id),
            epoch: epoch(p.epoch)?,
        })
    })
    .transpose()
}

/// The request of a step.
pub fn command_msg(c: &TxnCommand) -> proto::TxnRequest {
    let mut m = proto::TxnRequest {
        broker: c.fence.broker.0,
        shard: c.fence.shard.0,
        shard_epoch: c.fence.epoch.0,
        transactional_id: c.id.0.clone(),
        now_ms: c.now_ms,
        ..Default::default()
    };
    let (op, p) = match &c.op {
        TxnOp::InitProducer {
            timeout_ms,
            max_timeout_ms,
            expected,
        } => {
            m.timeout_ms = *timeout_ms;
            m.max_timeout_ms = *max_timeout_ms;
            (1, *expected)
        }
        TxnOp::AddPartitions {
            producer,
            partitions,
        } => {
            m.partitions = partitions.iter().map(convert::partition_msg).collect();
            (2, Some(*producer))
        }
        TxnOp::AddGroup { producer, group } => {
            m.group = group.clone();
            (3, Some(*producer))
        }
        TxnOp::CommitOffsets {
            producer,
            group,
            offsets,
        } => {
            m.group = group.clone();
            m.offsets = offsets
                .iter()
                .map(|(t, p, o)| convert::group_offset_msg(t, *p, o))
                .collect();
            (4, Some(*producer))
        }
        TxnOp::End { producer, commit } => {
            m.commit = *commit;
            (5, Some(*producer))
        }
        TxnOp::Complete { producer, commit } => {
            m.commit = *commit;
            (6, Some(*producer))
        }
        TxnOp::AbortExpired { producer } => (7, Some(*producer)),
    };
    m.op = op;
    m.producer = p.map(producer_msg);
    m
}

/// The step a request asks for.
pub fn command(m: proto::TxnRequest) -> Result<TxnCommand, MetaError> {
    let broker = BrokerId::from_wire(m.broker).ok_or_else(|| bad("no coordinator broker"))?;
    let given = producer(m.producer.as_ref())?;
    let required = || given.ok_or_else(|| bad("no producer id and epoch"));
    let op = match m.op {
        1 => TxnOp::InitProducer {
            timeout_ms: m.timeout_ms,
            max_timeout_ms: m.max_timeout_ms,
            expected: given,
        },
        2 => TxnOp::AddPartitions {
            producer: required()?,
            partitions: m
                .partitions
                .iter()
                .map(|p| convert::partition(Some(p)))
                .collect::<Result<_, _>>()?,
        },
        3 => TxnOp::AddGroup {
            producer: required()?,
            group: m.group,
        },
        4 => TxnOp::CommitOffsets {
            producer: required()?,
            group: m.group,
            offsets: m.offsets.into_iter().map(convert::group_offset).collect(),
        },
        5 | 6 => {
            let (producer, commit) = (required()?, m.commit);
            if m.op == 5 {
                TxnOp::End { producer, commit }
            } else {
                TxnOp::Complete { producer, commit }
            }
        }
        7 => TxnOp::AbortExpired {
            producer: required()?,
        },
        other => return Err(bad(&format!("unknown step {other}"))),
    };
    Ok(TxnCommand {
        fence: ShardFence {
            broker,
            shard: ShardId(m.shard),
            epoch: Epoch(m.shard_epoch),
        },
        id: TransactionalId(m.transactional_id),
        now_ms: m.now_ms,
        op,
    })
}

/// A transactional id's state as the API carries it.
pub fn info_msg(id: &TransactionalId, t: &TxnMeta) -> proto::TxnInfo {
    proto::TxnInfo {
        transactional_id: id.0.clone(),
        producer: Some(producer_msg(ProducerIdEpoch {
            producer_id: t.producer_id,
            epoch: t.epoch,
        })),
        previous: t.previous.map(producer_msg),
        state: t.state.code(),
        timeout_ms: t.timeout_ms,
        started_ms: t.started_ms,
        updated_ms: t.updated_ms,
        partitions: t.partitions.iter().map(convert::partition_msg).collect(),
        groups: t
            .groups
            .iter()
            .map(|(g, offsets)| proto::TxnGroup {
                group: g.clone(),
                offsets: offsets
                    .iter()
                    .map(|((topic, p), o)| convert::group_offset_msg(topic, *p, o))
                    .collect(),
            })
            .collect(),
    }
}

/// A transactional id's state read from the API.
pub fn info(m: proto::TxnInfo) -> Result<(TransactionalId, TxnMeta), MetaError> {
    let current = producer(m.producer.as_ref())?.ok_or_else(|| bad("no producer"))?;
    let mut groups = BTreeMap::new();
    for g in m.groups {
        let offsets: GroupOffsets = GroupOffsets(
            g.offsets
                .into_iter()
                .map(convert::group_offset)
                .map(|(t, p, o)| ((t, p), o))
                .collect(),
        );
        groups.insert(g.group, offsets);
    }
    let meta = TxnMeta {
        producer_id: current.producer_id,
        epoch: current.epoch,
        previous: producer(m.previous.as_ref())?,
        state: TxnState::from_code(m.state).ok_or_else(|| bad("unknown state"))?,
        timeout_ms: m.timeout_ms,
        started_ms: m.started_ms,
        updated_ms: m.updated_ms,
        partitions: m
            .partitions
            .iter()
            .map(|p| convert::partition(Some(p)))
            .collect::<Result<BTreeSet<_>, _>>()?,
        groups,
    };
    Ok((TransactionalId(m.transactional_id), meta))
}

/// The answer to a step as the API carries it.
pub fn reply_msg(id: &TransactionalId, r: &TxnReply) -> proto::TxnResponse {
    proto::TxnResponse {
        refused: r.refused.map_or(0, TxnError::code),
        txn: r.txn.as_ref().map(|t| info_msg(id, t)),
        unknown: convert::unknown_offsets_msg(&r.unknown),
    }
}

/// The answer to a step read from the API.
pub fn reply(m: proto::TxnResponse) -> Result<TxnReply, MetaError> {
    let refused = match m.refused {
        0 => None,
        code => Some(TxnError::from_code(code).ok_or_else(|| bad("unknown refusal"))?),
    };
    Ok(TxnReply {
        refused,
        txn: m.txn.map(info).transpose()?.map(|(_, t)| t),
        unknown: m
            .unknown
            .into_iter()
            .map(|o| (o.topic, o.partition))
            .collect(),
    })
}

fn epoch(e: i32) -> Result<ProducerEpoch, MetaError> {
    Ok(ProducerEpoch(
        i16::try_from(e).map_err(|_| bad("epoch out of range"))?,
    ))
}

/// A range's transactional events as a commit carries them.
pub fn range_txns_msg(t: &RangeTxns) -> proto::RangeTxns {
    proto::RangeTxns {
        partition: Some(convert::partition_msg(&t.partition)),
        events: t
            .events
            .iter()
            .map(|e| match *e {
                TxnEvent::Begin {
                    producer_id,
                    epoch,
                    offset,
                } => proto::TxnEvent {
                    kind: 1,
                    producer_id: producer_id.0,
                    epoch: i32::from(epoch.0),
                    offset,
                },
                TxnEvent::Marker {
                    producer_id,
                    epoch,
                    commit,
                    offset,
                } => proto::TxnEvent {
                    kind: if commit { 2 } else { 3 },
                    producer_id: producer_id.0,
                    epoch: i32::from(epoch.0),
                    offset,
                },
            })
            .collect(),
    }
}

/// A range's transactional events read from a commit.
pub fn range_txns(m: &proto::RangeTxns) -> Result<RangeTxns, MetaError> {
    let events = m
        .events
        .iter()
        .map(|e| {
            let (producer_id, epoch, offset) =
                (ProducerId(e.producer_id), epoch(e.epoch)?, e.offset);
            Ok(match e.kind {
                1 => TxnEvent::Begin {
                    producer_id,
                    epoch,
                    offset,
                },
                2 | 3 => TxnEvent::Marker {
                    producer_id,
                    epoch,
                    commit: e.kind == 2,
                    offset,
                },
                other => return Err(bad(&format!("unknown event kind {other}"))),
            })
        })
        .collect::<Result<_, MetaError>>()?;
    Ok(RangeTxns {
        partition: convert::partition(m.partition.as_ref())?,
        events,
    })
}

/// A partition's transactions in its index answer (the aborted ones that
/// end at or after `from_offset`); only these two fields are set.
pub fn partition_txns_msg(t: Option<&PartitionTxns>, from_offset: i64) -> proto::IndexResponse {
    let Some(t) = t else {
        return proto::IndexResponse::default();
    };
    proto::IndexResponse {
        open_txns: t
            .open
            .iter()
            .map(|(pid, o)| proto::OpenTxn {
                producer_id: pid.0,
                epoch: i32::from(o.epoch.0),
                first_offset: o.first_offset,
            })
            .collect(),
        aborted_txns: t
            .aborted
            .iter()
            .filter(|a| a.last_offset >= from_offset)
            .map(|a| proto::AbortedTxn {
                producer_id: a.producer_id.0,
                first_offset: a.first_offset,
                last_offset: a.last_offset,
            })
            .collect(),
        ..Default::default()
    }
}

/// A partition's transactions read from its index answer.
pub fn partition_txns(m: &proto::IndexResponse) -> Result<PartitionTxns, MetaError> {
    let mut t = PartitionTxns::default();
    for o in &m.open_txns {
        t.open.insert(
            ProducerId(o.producer_id),
            OpenTxn {
                epoch: epoch(o.epoch)?,
                first_offset: o.first_offset,
            },
        );
    }
    t.aborted = m
        .aborted_txns
        .iter()
        .map(|a| AbortedTxn {
            producer_id: ProducerId(a.producer_id),
            first_offset: a.first_offset,
            last_offset: a.last_offset,
        })
        .collect();
    Ok(t)
}

pub(super) async fn step(
    s: AppState,
    req: proto::TxnRequest,
) -> Result<proto::TxnResponse, MetaError> {
    let cmd = command(req)?;
    let id = cmd.id.clone();
    match s.write(Command::Txn(cmd)).await? {
        (Response::Txn(r), _) => Ok(reply_msg(&id, &r)),
        (other, _) => Err(MetaError::Storage(format!("unexpected response {other:?}"))),
    }
}

/// A lookup's filter on the wire.
pub fn filter_msg(f: &TxnFilter) -> proto::TxnListRequest {
    proto::TxnListRequest {
        ids: f.ids.iter().map(|i| i.as_str().to_string()).collect(),
        producer_id: f.producer_id.map(|p| p.0),
        shard_count: f.shards.as_ref().map(|(n, _)| *n),
        shards: f
            .shards
            .as_ref()
            .map(|(_, s)| s.clone())
            .unwrap_or_default(),
        pending_group: f.pending_group.clone(),
    }
}

/// A lookup's filter from the wire.
pub fn filter(m: proto::TxnListRequest) -> TxnFilter {
    TxnFilter {
        ids: m.ids.into_iter().map(TransactionalId::new).collect(),
        producer_id: m.producer_id.map(ProducerId),
        shards: m.shard_count.map(|n| (n, m.shards)),
        pending_group: m.pending_group,
    }
}

pub(super) async fn list(
    s: AppState,
    req: proto::TxnListRequest,
) -> Result<proto::TxnListResponse, MetaError> {
    let f = filter(req);
    s.linearizable().await?;
    Ok(s.shared.read(|st| proto::TxnListResponse {
        txns: st
            .producers
            .txn
            .select(&f)
            .into_iter()
            .map(|(id, t)| info_msg(id, t))
            .collect(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::command::CommittedOffset;
    use crate::ids::{PartitionKey, TopicId};

    fn p() -> ProducerIdEpoch {
        ProducerIdEpoch {
            producer_id: ProducerId(1234),
            epoch: ProducerEpoch(7),
        }
    }

    fn key() -> PartitionKey {
        PartitionKey::new(TopicId(uuid::Uuid::from_bytes([9; 16])), 4)
    }

    #[test]
    fn a_filter_crosses_the_wire_and_an_empty_request_lists_everything() {
        use prost::Message;
        let f = TxnFilter {
            ids: vec![TransactionalId::new("a")],
            producer_id: Some(ProducerId(9)),
            shards: Some((16, vec![1, 4])),
            pending_group: Some("g".into()),
        };
        let bytes = filter_msg(&f).encode_to_vec();
        assert_eq!(
            filter(proto::TxnListRequest::decode(&bytes[..]).unwrap()),
            f
        );
        // What an older client sends (`Empty`): no filter.
        let old = proto::Empty {}.encode_to_vec();
        assert_eq!(
            filter(proto::TxnListRequest::decode(&old[..]).unwrap()),
            TxnFilter::default()
        );
    }

    fn off() -> (String, u32, CommittedOffset) {
        (
            "t".into(),
            2,
            CommittedOffset {
                offset: 9,
                leader_epoch: 3,
                metadata: "m".into(),
            },
        )
    }

    #[test]
    fn every_step_crosses_the_wire_unchanged() {
        let ops = [
            TxnOp::InitProducer {
                timeout_ms: 1,
                max_timeout_ms: 2,
                expected: None,
            },
            TxnOp::InitProducer {
                timeout_ms: 1,
                max_timeout_ms: 2,
                expected: Some(p()),
            },
            TxnOp::AddPartitions {
                producer: p(),
                partitions: vec![key()],
            },
            TxnOp::AddGroup {
                producer: p(),
                group: "g".into(),
            },
            TxnOp::CommitOffsets {
                producer: p(),
                group: "g".into(),
                offsets: vec![off()],
            },
            TxnOp::End {
                producer: p(),
                commit: true,
            },
            TxnOp::Complete {
                producer: p(),
                commit: false,
            },
            TxnOp::AbortExpired { producer: p() },
        ];
        let step = |op| TxnCommand {
            fence: ShardFence {
                broker: BrokerId(3),
                shard: ShardId(5),
                epoch: Epoch(8),
            },
            id: TransactionalId::new("tx"),
            now_ms: 99,
            op,
        };
        for op in ops {
            let c = step(op);
            assert_eq!(command(command_msg(&c)).unwrap(), c);
        }
        // A step without a coordinator, a producer, or of an unknown kind is refused.
        let mut m = command_msg(&step(TxnOp::AbortExpired { producer: p() }));
        m.producer = None;
        assert!(command(m.clone()).is_err());
        m.producer = Some(proto::TxnProducer {
            producer_id: 1,
            epoch: 40_000,
        });
        assert!(command(m.clone()).is_err());
        m.producer = None;
        m.op = 99;
        assert!(command(m.clone()).is_err());
        m.op = 1;
        m.broker = 0;
        assert!(command(m).is_err());
    }

    #[test]
    fn transactional_events_and_a_partitions_transactions_cross_the_wire_unchanged() {
        let t = RangeTxns {
            partition: key(),
            events: vec![
                TxnEvent::Begin {
                    producer_id: ProducerId(5),
                    epoch: ProducerEpoch(1),
                    offset: 3,
                },
                TxnEvent::Marker {
                    producer_id: ProducerId(5),
                    epoch: ProducerEpoch(2),
                    commit: false,
                    offset: 4,
                },
                TxnEvent::Marker {
                    producer_id: ProducerId(6),
                    epoch: ProducerEpoch(0),
                    commit: true,
                    offset: 5,
                },
            ],
        };
        assert_eq!(range_txns(&range_txns_msg(&t)).unwrap(), t);
        let mut bad_kind = range_txns_msg(&t);
        bad_kind.events[0].kind = 9;
        assert!(range_txns(&bad_kind).is_err());

        let mut p = PartitionTxns::default();
        p.apply(&t.events);
        p.apply(&[TxnEvent::Begin {
            producer_id: ProducerId(7),
            epoch: ProducerEpoch(0),
            offset: 10,
        }]);
        assert_eq!(partition_txns(&partition_txns_msg(Some(&p), 0)).unwrap(), p);
        // Aborted transactions ending before the offset asked for are left out.
        let later = partition_txns(&partition_txns_msg(Some(&p), 5)).unwrap();
        assert!(later.aborted.is_empty());
        assert_eq!(later.open, p.open);
        assert_eq!(
            partition_txns(&partition_txns_msg(None, 0)).unwrap(),
            PartitionTxns::default()
        );
    }

    #[test]
    fn a_reply_crosses_the_wire_unchanged() {
        let (t, p, o) = off();
        let meta = TxnMeta {
            producer_id: ProducerId(1234),
            epoch: ProducerEpoch(7),
            previous: Some(ProducerIdEpoch {
                producer_id: ProducerId(1234),
                epoch: ProducerEpoch(6),
            }),
            state: TxnState::PrepareCommit,
            timeout_ms: 60_000,
            started_ms: 5,
            updated_ms: 6,
            partitions: BTreeSet::from([key()]),
            groups: BTreeMap::from([(
                "g".to_string(),
                GroupOffsets(BTreeMap::from([((t, p), o)])),
            )]),
        };
        let id = TransactionalId::new("tx");
        for r in [
            TxnReply {
                refused: None,
                txn: Some(meta.clone()),
                unknown: vec![("x".into(), 1)],
            },
            TxnReply {
                refused: Some(TxnError::ConcurrentTransactions),
                txn: None,
                unknown: vec![],
            },
        ] {
            assert_eq!(reply(reply_msg(&id, &r)).unwrap(), r);
        }
        assert_eq!(info(info_msg(&id, &meta)).unwrap(), (id, meta));
        for e in TxnError::ALL {
            assert_eq!(TxnError::from_code(e.code()), Some(e));
        }
        for s in TxnState::ALL {
            assert_eq!(TxnState::from_code(s.code()), Some(s));
        }
        assert_eq!(TxnError::from_code(0), None);
        assert_eq!(TxnState::from_code(0), None);
    }
}
