//! Every transition of a transaction's state and every fence, applied as
//! commands to a model, as the Raft state machine applies them.

use super::*;
use crate::command::{Command, NodeKind, OwnedItem, OwnershipChange};
use crate::error::MetaError;
use crate::ids::{BrokerId, Revision, ShardId, TopicId};

const MAX: u32 = DEFAULT_TRANSACTION_MAX_TIMEOUT_MS;

/// A model with broker 1 owning shard 0 and a topic "t" of two partitions.
struct Txns {
    state: ClusterState,
    rev: u64,
    now_ms: u64,
}

impl Txns {
    fn new() -> Self {
        let mut t = Txns {
            state: ClusterState::default(),
            rev: 0,
            now_ms: 1_000,
        };
        t.cmd(Command::RegisterNode {
            id: BrokerId(1),
            kind: NodeKind::Broker,
            addr: "127.0.0.1:1".into(),
            now_ms: 1,
            lease_ms: 1_000_000,
        });
        t.cmd(Command::CreateTopic {
            name: "t".into(),
            id: TopicId(uuid::Uuid::from_bytes([7; 16])),
            partitions: 2,
            config: Default::default(),
        });
        t.cmd(Command::Reassign {
            changes: vec![OwnershipChange {
                item: OwnedItem::Shard(ShardId(0)),
                owner: Some(BrokerId(1)),
            }],
        });
        t
    }

    fn cmd(&mut self, c: Command) -> Response {
        self.rev += 1;
        self.state.apply(Revision(self.rev), &c)
    }

    fn fence(&self) -> ShardFence {
        ShardFence {
            broker: BrokerId(1),
            shard: ShardId(0),
            epoch: self.state.topics.shards[&ShardId(0)].epoch,
        }
    }

    fn partition(&self, p: u32) -> PartitionKey {
        PartitionKey::new(self.state.topics.by_name["t"].id, p)
    }

    /// Applies `op` on transactional id "tx".
    fn op(&mut self, op: TxnOp) -> TxnReply {
        let c = Command::Txn(TxnCommand {
            fence: self.fence(),
            id: TransactionalId::new("tx"),
            now_ms: self.now_ms,
            op,
        });
        match self.cmd(c) {
            Response::Txn(r) => r,
            other => panic!("not a transaction's answer: {other:?}"),
        }
    }

    /// Applies `op` and expects it accepted.
    fn ok(&mut self, op: TxnOp) -> TxnMeta {
        let r = self.op(op);
        assert_eq!(r.refused, None, "{r:?}");
        r.txn.expect("the transaction exists")
    }

    fn refused(&mut self, op: TxnOp) -> TxnError {
        let before = self.state.producers.txn.clone();
        let r = self.op(op);
        let e = r.refused.expect("refused");
        // Only InitProducerId over an open transaction changes anything
        // while refusing; tests of that check the state themselves.
        if e != TxnError::ConcurrentTransactions {
            assert_eq!(
                self.state.producers.txn, before,
                "a refusal changed the state"
            );
        }
        e
    }

    fn init(&mut self, expected: Option<ProducerIdEpoch>) -> TxnReply {
        self.op(TxnOp::InitProducer {
            timeout_ms: 60_000,
            max_timeout_ms: MAX,
            expected,
        })
    }

    /// EndTxn, then the markers' completion, both accepted.
    fn finish(&mut self, producer: ProducerIdEpoch, commit: bool) -> TxnMeta {
        self.ok(TxnOp::End { producer, commit });
        self.ok(TxnOp::Complete { producer, commit })
    }

    /// AddOffsetsToTxn for group "g", then TxnOffsetCommit of `o` for
    /// partition `partition` of "t", both accepted.
    fn pend_offset(&mut self, producer: ProducerIdEpoch, partition: u32, o: i64) {
        self.ok(TxnOp::AddGroup {
            producer,
            group: "g".into(),
        });
        self.ok(TxnOp::CommitOffsets {
            producer,
            group: "g".into(),
            offsets: vec![("t".into(), partition, offset(o))],
        });
    }

    fn txn(&self) -> &TxnMeta {
        &self.state.producers.txn.ids()[&TransactionalId::new("tx")]
    }

    fn add(&mut self, producer: ProducerIdEpoch, partitions: &[u32]) -> Result<TxnMeta, TxnError> {
        let partitions = partitions.iter().map(|p| self.partition(*p)).collect();
        let r = self.op(TxnOp::AddPartitions {
            producer,
            partitions,
        });
        match r.refused {
            None => Ok(r.txn.expect("exists")),
            Some(e) => Err(e),
        }
    }
}

fn pe(t: &TxnMeta) -> ProducerIdEpoch {
    ProducerIdEpoch {
        producer_id: t.producer_id,
        epoch: t.epoch,
    }
}

fn offset(o: i64) -> CommittedOffset {
    CommittedOffset {
        offset: o,
        leader_epoch: -1,
        metadata: String::new(),
    }
}

#[test]
fn init_gives_a_new_producer_id_at_epoch_0_then_bumps_the_epoch() {
    let mut t = Txns::new();
    let first_free = t.state.producers.next_id;
    let a = t.init(None).txn.unwrap();
    assert_eq!(a.producer_id, ProducerId(first_free));
    assert_eq!(a.epoch, ProducerEpoch(0));
    assert_eq!(a.state, TxnState::Empty);
    assert_eq!(a.timeout_ms, 60_000);
    // The id came from the counter the idempotent producers' blocks use.
    assert_eq!(t.state.producers.next_id, first_free + 1);
    let b = t.init(None).txn.unwrap();
    assert_eq!((b.producer_id, b.epoch), (a.producer_id, ProducerEpoch(1)));
    assert_eq!(t.state.producers.next_id, first_free + 1);
}

#[test]
fn a_timeout_of_zero_or_above_the_maximum_is_refused() {
    let mut t = Txns::new();
    for timeout_ms in [0, MAX + 1] {
        let e = t.refused(TxnOp::InitProducer {
            timeout_ms,
            max_timeout_ms: MAX,
            expected: None,
        });
        assert_eq!(e, TxnError::InvalidTransactionTimeout);
    }
    assert!(t.state.producers.txn.ids().is_empty());
}

#[test]
fn a_committed_transaction_stores_its_offsets_when_it_completes() {
    let mut t = Txns::new();
    let p = pe(&t.init(None).txn.unwrap());
    t.now_ms = 2_000;
    let m = t.add(p, &[0, 1]).unwrap();
    assert_eq!(m.state, TxnState::Ongoing);
    assert_eq!(m.started_ms, 2_000);
    assert_eq!(m.partitions.len(), 2);
    t.now_ms = 2_500;
    t.ok(TxnOp::AddGroup {
        producer: p,
        group: "g".into(),
    });
    assert_eq!(t.txn().started_ms, 2_000, "the start is the first add's");
    let r = t.op(TxnOp::CommitOffsets {
        producer: p,
        group: "g".into(),
        offsets: vec![("t".into(), 0, offset(5)), ("nope".into(), 0, offset(1))],
    });
    assert_eq!(r.refused, None);
    assert_eq!(r.unknown, vec![("nope".to_string(), 0)]);
    // Pending: not visible as the group's offsets, but known as pending.
    assert!(!t.state.groups.offsets.contains_key("g"));
    assert!(t.state.producers.txn.offset_pending("g", "t", 0));
    assert!(!t.state.producers.txn.offset_pending("g", "t", 1));

    let m = t.ok(TxnOp::End {
        producer: p,
        commit: true,
    });
    assert_eq!(m.state, TxnState::PrepareCommit);
    assert_eq!(m.partitions.len(), 2, "the partitions to mark");
    assert!(
        !t.state.groups.offsets.contains_key("g"),
        "not before the markers"
    );

    let m = t.ok(TxnOp::Complete {
        producer: p,
        commit: true,
    });
    assert_eq!(m.state, TxnState::CompleteCommit);
    assert!(m.partitions.is_empty() && m.groups.is_empty());
    assert_eq!(
        t.state.groups.offsets["g"][&("t".to_string(), 0)],
        offset(5)
    );
    assert!(!t.state.producers.txn.offset_pending("g", "t", 0));

    // Retries of both steps are answered ok and change nothing.
    let before = t.state.producers.txn.clone();
    t.finish(p, true);
    assert_eq!(t.state.producers.txn, before);

    // The next transaction starts from a completed one.
    t.now_ms = 9_000;
    let m = t.add(p, &[1]).unwrap();
    assert_eq!((m.state, m.started_ms), (TxnState::Ongoing, 9_000));
    assert_eq!(m.partitions.len(), 1, "the previous partitions are gone");
}

#[test]
fn an_aborted_transaction_drops_its_offsets() {
    let mut t = Txns::new();
    let p = pe(&t.init(None).txn.unwrap());
    t.pend_offset(p, 1, 3);
    let m = t.ok(TxnOp::End {
        producer: p,
        commit: false,
    });
    assert_eq!(m.state, TxnState::PrepareAbort);
    let m = t.ok(TxnOp::Complete {
        producer: p,
        commit: false,
    });
    assert_eq!(m.state, TxnState::CompleteAbort);
    assert!(!t.state.groups.offsets.contains_key("g"));
    assert!(!t.state.producers.txn.offset_pending("g", "t", 1));
}

#[test]
fn a_new_instance_aborts_the_open_transaction_and_fences_the_old_one() {
    let mut t = Txns::new();
    let old = pe(&t.init(None).txn.unwrap());
    t.add(old, &[0]).unwrap();

    // The new instance (no id of its own yet) finds the transaction open.
    let r = t.init(None);
    assert_eq!(r.refused, Some(TxnError::ConcurrentTransactions));
    let m = r.txn.unwrap();
    assert_eq!(m.state, TxnState::PrepareAbort);
    assert_eq!(m.epoch, ProducerEpoch(old.epoch.0 + 1), "fenced");
    assert_eq!(m.partitions.len(), 1, "the partitions to abort");
    let aborting = pe(&m);

    // The old instance is fenced from now on.
    assert_eq!(t.add(old, &[1]), Err(TxnError::ProducerFenced));
    assert_eq!(
        t.refused(TxnOp::End {
            producer: old,
            commit: true
        }),
        TxnError::ProducerFenced
    );
    // While the markers are written, the new instance is asked to wait.
    assert_eq!(t.init(None).refused, Some(TxnError::ConcurrentTransactions));
    assert_eq!(t.txn().epoch, aborting.epoch, "no second bump meanwhile");

    // The coordinator completes the abort at the epoch it aborted with.
    assert_eq!(
        t.refused(TxnOp::Complete {
            producer: old,
            commit: false
        }),
        TxnError::ProducerFenced
    );
    t.ok(TxnOp::Complete {
        producer: aborting,
        commit: false,
    });
    let m = t.init(None).txn.unwrap();
    assert_eq!(m.state, TxnState::Empty);
    assert_eq!(m.producer_id, old.producer_id);
    assert_eq!(m.epoch, ProducerEpoch(old.epoch.0 + 2));
}

#[test]
fn requests_while_markers_are_written_wait() {
    let mut t = Txns::new();
    let p = pe(&t.init(None).txn.unwrap());
    t.add(p, &[0]).unwrap();
    t.ok(TxnOp::End {
        producer: p,
        commit: true,
    });
    assert_eq!(t.add(p, &[1]), Err(TxnError::ConcurrentTransactions));
    assert_eq!(
        t.refused(TxnOp::AddGroup {
            producer: p,
            group: "g".into()
        }),
        TxnError::ConcurrentTransactions
    );
    // A retry of the same EndTxn waits too; the other outcome is refused.
    assert_eq!(
        t.refused(TxnOp::End {
            producer: p,
            commit: true
        }),
        TxnError::ConcurrentTransactions
    );
    assert_eq!(
        t.refused(TxnOp::End {
            producer: p,
            commit: false
        }),
        TxnError::InvalidTxnState
    );
    // Completing the other outcome is refused.
    assert_eq!(
        t.refused(TxnOp::Complete {
            producer: p,
            commit: false
        }),
        TxnError::InvalidTxnState
    );
    assert_eq!(t.txn().state, TxnState::PrepareCommit);
}

#[test]
fn end_txn_must_follow_the_state() {
    let mut t = Txns::new();
    let p = pe(&t.init(None).txn.unwrap());
    // Nothing open.
    for commit in [true, false] {
        assert_eq!(
            t.refused(TxnOp::End {
                producer: p,
                commit
            }),
            TxnError::InvalidTxnState
        );
        assert_eq!(
            t.refused(TxnOp::Complete {
                producer: p,
                commit
            }),
            TxnError::InvalidTxnState
        );
    }
    // Offsets outside a transaction, or of a group not added to it.
    let offsets_of_g = TxnOp::CommitOffsets {
        producer: p,
        group: "g".into(),
        offsets: vec![("t".into(), 0, offset(1))],
    };
    assert_eq!(t.refused(offsets_of_g.clone()), TxnError::InvalidTxnState);
    t.add(p, &[0]).unwrap();
    assert_eq!(t.refused(offsets_of_g), TxnError::InvalidTxnState);
    t.finish(p, false);
    // A completed abort is not committed by a late EndTxn(commit).
    assert_eq!(
        t.refused(TxnOp::End {
            producer: p,
            commit: true
        }),
        TxnError::InvalidTxnState
    );
}

#[test]
fn another_producer_id_is_an_invalid_mapping_and_an_unknown_id_is_unknown() {
    let mut t = Txns::new();
    let p = pe(&t.init(None).txn.unwrap());
    let other = ProducerIdEpoch {
        producer_id: ProducerId(p.producer_id.0 + 100),
        epoch: p.epoch,
    };
    assert_eq!(t.add(other, &[0]), Err(TxnError::InvalidProducerIdMapping));
    let newer = ProducerIdEpoch {
        producer_id: p.producer_id,
        epoch: ProducerEpoch(p.epoch.0 + 1),
    };
    assert_eq!(t.add(newer, &[0]), Err(TxnError::ProducerFenced));
    let c = Command::Txn(TxnCommand {
        fence: t.fence(),
        id: TransactionalId::new("never-initialised"),
        now_ms: 1,
        op: TxnOp::AddPartitions {
            producer: p,
            partitions: vec![],
        },
    });
    assert!(matches!(
        t.cmd(c),
        Response::Txn(TxnReply {
            refused: Some(TxnError::UnknownTransactionalId),
            txn: None,
            ..
        })
    ));
}

#[test]
fn partitions_that_do_not_exist_are_refused_whole() {
    let mut t = Txns::new();
    let p = pe(&t.init(None).txn.unwrap());
    assert_eq!(t.add(p, &[0, 2]), Err(TxnError::UnknownPartition));
    assert_eq!(t.txn().state, TxnState::Empty);
}

#[test]
fn a_timed_out_transaction_is_aborted_at_the_next_epoch() {
    let mut t = Txns::new();
    let p = pe(&t.init(None).txn.unwrap());
    t.now_ms = 10_000;
    t.add(p, &[0, 1]).unwrap();
    // Not yet: 60 s after the start.
    t.now_ms = 69_999;
    assert!(t.state.producers.txn.expired(t.now_ms).is_empty());
    assert_eq!(
        t.refused(TxnOp::AbortExpired { producer: p }),
        TxnError::InvalidTxnState
    );
    t.now_ms = 70_000;
    assert_eq!(
        t.state.producers.txn.expired(t.now_ms),
        vec![(TransactionalId::new("tx"), p)]
    );
    let m = t.ok(TxnOp::AbortExpired { producer: p });
    assert_eq!(m.state, TxnState::PrepareAbort);
    assert_eq!(m.epoch, ProducerEpoch(p.epoch.0 + 1));
    assert!(t.state.producers.txn.expired(t.now_ms).is_empty());
    // The producer is fenced: its commit is refused, and a second timer
    // firing on the old view changes nothing.
    assert_eq!(
        t.refused(TxnOp::End {
            producer: p,
            commit: true
        }),
        TxnError::ProducerFenced
    );
    assert_eq!(
        t.refused(TxnOp::AbortExpired { producer: p }),
        TxnError::ProducerFenced
    );
    t.ok(TxnOp::Complete {
        producer: pe(&m),
        commit: false,
    });
    assert_eq!(t.txn().state, TxnState::CompleteAbort);
}

#[test]
fn a_coordinator_that_lost_its_shard_changes_nothing() {
    let mut t = Txns::new();
    let p = pe(&t.init(None).txn.unwrap());
    let stale = t.fence();
    // The shard moves (its owner died and came back: a new epoch).
    t.cmd(Command::Reassign {
        changes: vec![OwnershipChange {
            item: OwnedItem::Shard(ShardId(0)),
            owner: Some(BrokerId(1)),
        }],
    });
    assert_ne!(t.fence().epoch, stale.epoch);
    let before = t.state.producers.txn.clone();
    let r = t.cmd(Command::Txn(TxnCommand {
        fence: stale,
        id: TransactionalId::new("tx"),
        now_ms: 5,
        op: TxnOp::AddPartitions {
            producer: p,
            partitions: vec![t.partition(0)],
        },
    }));
    assert!(
        matches!(r, Response::Error(MetaError::StaleCoordinator { .. })),
        "{r:?}"
    );
    let r = t.cmd(Command::Txn(TxnCommand {
        fence: ShardFence {
            broker: BrokerId(2),
            ..t.fence()
        },
        id: TransactionalId::new("tx"),
        now_ms: 5,
        op: TxnOp::InitProducer {
            timeout_ms: 1,
            max_timeout_ms: 1,
            expected: None,
        },
    }));
    assert!(matches!(
        r,
        Response::Error(MetaError::StaleCoordinator { .. })
    ));
    assert_eq!(t.state.producers.txn, before);
    // The new epoch's coordinator carries on.
    t.add(p, &[0]).unwrap();
}

#[test]
fn an_exhausted_epoch_gets_a_new_producer_id() {
    let mut t = Txns::new();
    let first = pe(&t.init(None).txn.unwrap());
    t.state
        .producers
        .txn
        .ids
        .get_mut(&TransactionalId::new("tx"))
        .unwrap()
        .epoch = ProducerEpoch(LAST_PRODUCER_EPOCH);
    let m = t.init(None).txn.unwrap();
    assert_ne!(m.producer_id, first.producer_id);
    assert_eq!(m.epoch, ProducerEpoch(0));

    // At the last epoch with a transaction open, the fence still bumps
    // (to i16::MAX, never handed out), and the next init rotates the id.
    let at_last = ProducerIdEpoch {
        producer_id: m.producer_id,
        epoch: ProducerEpoch(LAST_PRODUCER_EPOCH),
    };
    t.state
        .producers
        .txn
        .ids
        .get_mut(&TransactionalId::new("tx"))
        .unwrap()
        .epoch = at_last.epoch;
    t.add(at_last, &[0]).unwrap();
    let r = t.init(None);
    assert_eq!(r.refused, Some(TxnError::ConcurrentTransactions));
    let aborting = pe(&r.txn.unwrap());
    assert_eq!(aborting.epoch, ProducerEpoch(i16::MAX));
    assert_eq!(t.add(at_last, &[1]), Err(TxnError::ProducerFenced));
    t.ok(TxnOp::Complete {
        producer: aborting,
        commit: false,
    });
    let n = t.init(None).txn.unwrap();
    assert_ne!(n.producer_id, m.producer_id);
    assert_eq!(n.epoch, ProducerEpoch(0));
}

#[test]
fn a_client_that_lost_the_answer_to_its_init_gets_the_same_epoch_again() {
    let mut t = Txns::new();
    let e0 = pe(&t.init(None).txn.unwrap());
    // KIP-360: the client bumps its own epoch, sending what it has.
    let e1 = pe(&t.init(Some(e0)).txn.unwrap());
    assert_eq!(e1.epoch, ProducerEpoch(1));
    // The answer was lost; it asks again with the same: no second bump.
    let again = pe(&t.init(Some(e0)).txn.unwrap());
    assert_eq!(again, e1);
    // Once it went on, the old pair is an older instance's.
    t.add(e1, &[0]).unwrap();
    t.finish(e1, true);
    assert_eq!(t.init(Some(e0)).refused, Some(TxnError::ProducerFenced));
    // A pair it never had is fenced too.
    let made_up = ProducerIdEpoch {
        producer_id: ProducerId(1),
        epoch: ProducerEpoch(0),
    };
    assert_eq!(
        t.init(Some(made_up)).refused,
        Some(TxnError::ProducerFenced)
    );
    // Its current pair bumps.
    assert_eq!(t.init(Some(e1)).txn.unwrap().epoch, ProducerEpoch(2));
}

#[test]
fn a_fenced_instance_cannot_pass_for_a_retry() {
    let mut t = Txns::new();
    let old = pe(&t.init(None).txn.unwrap());
    // A new instance starts (it names no pair): the old one is fenced.
    let new = pe(&t.init(None).txn.unwrap());
    assert_eq!(new.epoch.0, old.epoch.0 + 1);
    assert_eq!(t.txn().previous, None);
    // The old one asks with its own pair: fenced, no bump.
    assert_eq!(t.init(Some(old)).refused, Some(TxnError::ProducerFenced));
    assert_eq!(t.txn().epoch, new.epoch);
}

#[test]
fn idle_transactional_ids_expire_and_open_transactions_never_do() {
    const DAY: u64 = 86_400_000;
    let mut t = Txns::new();
    t.now_ms = 1_000;
    let p = pe(&t.init(None).txn.unwrap());
    let expire = |t: &mut Txns, now_ms| {
        let c = crate::controller::expire_transactional_ids(&t.state, now_ms, DAY);
        if let Some(c) = c.clone() {
            t.cmd(c);
        }
        c.is_some()
    };
    // An open transaction is kept however old.
    t.add(p, &[0]).unwrap();
    assert!(!expire(&mut t, 1_000 + 10 * DAY));
    assert!(
        t.state
            .producers
            .txn
            .ids()
            .contains_key(&TransactionalId::new("tx"))
    );
    t.now_ms = 2_000;
    t.finish(p, true);
    // Idle for a day: kept; past it: forgotten.
    assert!(!expire(&mut t, 2_000 + DAY));
    assert!(expire(&mut t, 2_001 + DAY));
    assert!(t.state.producers.txn.ids().is_empty());
    // The id starts again with a new producer id.
    let again = pe(&t.init(None).txn.unwrap());
    assert_ne!(again.producer_id, p.producer_id);
}

#[test]
fn empty_ids_are_invalid_requests() {
    let mut t = Txns::new();
    let r = t.cmd(Command::Txn(TxnCommand {
        fence: t.fence(),
        id: TransactionalId::new(""),
        now_ms: 1,
        op: TxnOp::InitProducer {
            timeout_ms: 1,
            max_timeout_ms: 1,
            expected: None,
        },
    }));
    assert!(matches!(
        r,
        Response::Txn(TxnReply {
            refused: Some(TxnError::InvalidRequest),
            ..
        })
    ));
    let p = pe(&t.init(None).txn.unwrap());
    assert_eq!(
        t.refused(TxnOp::AddGroup {
            producer: p,
            group: String::new()
        }),
        TxnError::InvalidRequest
    );
}

mod partitions {
    use super::*;
    use crate::command::{CommitRange, NewObject, ProducerBatch};
    use crate::ids::Epoch;

    /// A range of partition `p` at its epoch, with one batch of producer 77.
    fn range(t: &Txns, p: u32, first: i64, last: i64) -> CommitRange {
        let key = t.partition(p);
        let epoch = t.state.topics.partitions[&key].ownership.epoch;
        let mut r = crate::state::test_support::range(key.topic, p, epoch.0, first, last);
        r.producers = vec![ProducerBatch {
            producer_id: 77,
            epoch: 0,
            first_sequence: 0,
            last_sequence: 0,
            first_offset: first,
            last_offset: first,
        }];
        r
    }

    /// Commits `first..=last` of partition 0 with `txns`.
    fn commit(t: &mut Txns, (first, last): (i64, i64), txns: Vec<RangeTxns>) -> Response {
        let r = range(t, 0, first, last);
        commit_ranges(t, vec![r], txns)
    }

    fn commit_ranges(t: &mut Txns, ranges: Vec<CommitRange>, txns: Vec<RangeTxns>) -> Response {
        t.cmd(Command::CommitWithTxns {
            broker: BrokerId(1),
            object: Some(NewObject {
                endpoint: "default".into(),
                key: format!("wal/{}", t.rev),
                size: 10,
            }),
            ranges,
            now_ms: 1,
            txns,
        })
    }

    fn begin(offset: i64) -> TxnEvent {
        TxnEvent::Begin {
            producer_id: ProducerId(77),
            epoch: ProducerEpoch(0),
            offset,
        }
    }

    fn abort(epoch: i16, offset: i64) -> TxnEvent {
        TxnEvent::Marker {
            producer_id: ProducerId(77),
            epoch: ProducerEpoch(epoch),
            commit: false,
            offset,
        }
    }

    fn lso(t: &Txns, p: u32) -> i64 {
        let key = t.partition(p);
        let hw = t.state.topics.partitions[&key].high_watermark;
        t.state
            .producers
            .txn
            .partitions
            .get(&key)
            .map_or(hw, |x| x.last_stable_offset(hw))
    }

    #[test]
    fn a_commit_with_transactions_moves_the_lso_and_records_aborts() {
        let mut t = Txns::new();
        let key = t.partition(0);
        let r = commit(
            &mut t,
            (0, 4),
            vec![RangeTxns {
                partition: key,
                events: vec![begin(2)],
            }],
        );
        assert!(matches!(r, Response::Committed { .. }), "{r:?}");
        assert_eq!(t.state.topics.partitions[&key].high_watermark, 5);
        assert_eq!(lso(&t, 0), 2);
        // The abort marker comes at a bumped epoch (a timeout fenced the producer).
        commit(
            &mut t,
            (5, 5),
            vec![RangeTxns {
                partition: key,
                events: vec![abort(1, 5)],
            }],
        );
        assert_eq!(lso(&t, 0), 6);
        let p = t.state.producers.txn.partitions.get(&key).unwrap();
        assert_eq!(
            p.aborted,
            vec![AbortedTxn {
                producer_id: ProducerId(77),
                first_offset: 2,
                last_offset: 5
            }]
        );
        // The producer's epoch on the partition is the marker's.
        let st = &t.state.topics.partitions[&key].producers[&77];
        assert_eq!(st.epoch, 1);
        assert!(st.batches.is_empty());
        // Retention past the abort forgets it; deleting the topic forgets all.
        t.cmd(Command::TruncateLog {
            broker: BrokerId(1),
            partition: key,
            epoch: t.state.topics.partitions[&key].ownership.epoch,
            log_start_offset: 6,
        });
        assert!(t.state.producers.txn.partitions.get(&key).is_none());
        commit(
            &mut t,
            (6, 6),
            vec![RangeTxns {
                partition: key,
                events: vec![begin(6)],
            }],
        );
        assert!(t.state.producers.txn.partitions.get(&key).is_some());
        t.cmd(Command::DeleteTopic { name: "t".into() });
        assert!(t.state.producers.txn.partitions.0.is_empty());
    }

    /// A marker of transaction "tx" at partition `p`, alone in a range.
    fn marker_range(
        t: &Txns,
        p: u32,
        at: i64,
        producer: ProducerIdEpoch,
        commit: bool,
    ) -> (CommitRange, RangeTxns) {
        let key = t.partition(p);
        let epoch = t.state.topics.partitions[&key].ownership.epoch;
        let r = crate::state::test_support::range(key.topic, p, epoch.0, at, at);
        let events = vec![TxnEvent::Marker {
            producer_id: producer.producer_id,
            epoch: producer.epoch,
            commit,
            offset: at,
        }];
        (
            r,
            RangeTxns {
                partition: key,
                events,
            },
        )
    }

    #[test]
    fn the_commit_of_a_decided_transactions_last_marker_completes_it() {
        for commit in [true, false] {
            let mut t = Txns::new();
            let p = pe(&t.init(None).txn.unwrap());
            t.add(p, &[0, 1]).unwrap();
            t.pend_offset(p, 0, 42);
            // A marker before the decision, of another epoch, or of the other
            // outcome, changes nothing.
            let (r, e) = marker_range(&t, 0, 0, p, commit);
            commit_ranges(&mut t, vec![r], vec![e]);
            assert_eq!(t.txn().state, TxnState::Ongoing);
            assert_eq!(t.txn().partitions.len(), 2);
            t.ok(TxnOp::End {
                producer: p,
                commit,
            });
            let older = ProducerIdEpoch {
                epoch: ProducerEpoch(p.epoch.0.wrapping_sub(1)),
                ..p
            };
            for (producer, outcome) in [(older, commit), (p, !commit)] {
                let (r, e) = marker_range(&t, 0, 1, producer, outcome);
                commit_ranges(&mut t, vec![r], vec![e]);
                assert_eq!(t.txn().partitions.len(), 2, "{producer:?} {outcome}");
            }
            // Partition 0's marker: it waits for partition 1's only.
            let (r, e) = marker_range(&t, 0, 2, p, commit);
            commit_ranges(&mut t, vec![r], vec![e]);
            let decided = if commit {
                TxnState::PrepareCommit
            } else {
                TxnState::PrepareAbort
            };
            assert_eq!(t.txn().state, decided);
            assert_eq!(
                t.txn().partitions.iter().copied().collect::<Vec<_>>(),
                vec![t.partition(1)]
            );
            // The last one completes it in the same command.
            let (r, e) = marker_range(&t, 1, 0, p, commit);
            let answer = commit_ranges(&mut t, vec![r], vec![e]);
            assert!(matches!(answer, Response::Committed { .. }), "{answer:?}");
            let done = if commit {
                TxnState::CompleteCommit
            } else {
                TxnState::CompleteAbort
            };
            assert_eq!(t.txn().state, done);
            assert!(t.txn().partitions.is_empty() && t.txn().groups.is_empty());
            let stored = t
                .state
                .groups
                .offsets
                .get("g")
                .and_then(|g| g.0.get(&("t".to_string(), 0)))
                .map(|o| o.offset);
            assert_eq!(
                stored,
                commit.then_some(42),
                "offsets stored on commit only"
            );
            // The coordinator's own Complete then finds it done.
            t.ok(TxnOp::Complete {
                producer: p,
                commit,
            });
            // And the next transaction may begin.
            t.add(p, &[1]).unwrap();
        }
    }

    #[test]
    fn events_outside_their_range_refuse_the_whole_commit() {
        let mut t = Txns::new();
        let (k0, k1) = (t.partition(0), t.partition(1));
        for events in [vec![begin(5)], vec![begin(3), begin(2)], vec![begin(-1)]] {
            let before = t.state.clone();
            let r = commit(
                &mut t,
                (0, 4),
                vec![RangeTxns {
                    partition: k0,
                    events,
                }],
            );
            assert!(
                matches!(r, Response::Error(MetaError::InvalidRequest(_))),
                "{r:?}"
            );
            assert_eq!(t.state.topics.partitions, before.topics.partitions);
            assert_eq!(t.state.producers.txn, before.producers.txn);
        }
        // Events of a partition the commit has no range of.
        let r = commit(
            &mut t,
            (0, 4),
            vec![RangeTxns {
                partition: k1,
                events: vec![begin(0)],
            }],
        );
        assert!(
            matches!(r, Response::Error(MetaError::InvalidRequest(_))),
            "{r:?}"
        );
        // A refused commit (a stale epoch) applies no event either.
        let mut stale = range(&t, 0, 0, 4);
        stale.epoch = Epoch(stale.epoch.0 + 5);
        let r = commit_ranges(
            &mut t,
            vec![stale],
            vec![RangeTxns {
                partition: k0,
                events: vec![begin(0)],
            }],
        );
        assert!(
            matches!(r, Response::Error(MetaError::StaleEpoch { .. })),
            "{r:?}"
        );
        assert!(t.state.producers.txn.partitions.0.is_empty());
        assert_eq!(t.state.topics.partitions[&k0].high_watermark, 0);
    }
}

#[test]
fn a_lookup_selects_by_id_producer_shard_and_pending_group() {
    let mut t = Txns::new();
    let base = t.init(None).txn.unwrap();
    let mut model = TxnModel::default();
    for i in 0..20i64 {
        let mut m = base.clone();
        m.producer_id = ProducerId(100 + i);
        if i == 7 {
            m.state = TxnState::Ongoing;
            m.groups.insert("g".into(), Default::default());
        }
        model.insert(TransactionalId::new(format!("id-{i}")), m);
    }
    let names = |f: &TxnFilter| -> Vec<String> {
        model
            .select(f)
            .into_iter()
            .map(|(id, _)| id.as_str().to_string())
            .collect()
    };
    assert_eq!(names(&TxnFilter::default()).len(), 20);
    assert_eq!(
        names(&TxnFilter::id(TransactionalId::new("id-3"))),
        ["id-3"]
    );
    assert!(names(&TxnFilter::id(TransactionalId::new("nope"))).is_empty());
    let by_producer = TxnFilter {
        producer_id: Some(ProducerId(112)),
        ..Default::default()
    };
    assert_eq!(names(&by_producer), ["id-12"]);
    let pending = TxnFilter {
        pending_group: Some("g".into()),
        ..Default::default()
    };
    assert_eq!(names(&pending), ["id-7"]);
    let shard = shard_of("id-5", 16);
    let of_shard = names(&TxnFilter::shards(16, vec![shard]));
    assert!(of_shard.contains(&"id-5".to_string()));
    assert!(of_shard.iter().all(|id| shard_of(id, 16) == shard));
}

#[test]
fn shard_of_is_fnv1a_modulo_the_shard_count() {
    // FNV-1a of "" is its offset basis.
    assert_eq!(shard_of("", 1 << 31), 0x811c_9dc5 % (1 << 31));
    assert_eq!(shard_of("a", 0), 0);
    assert_eq!(shard_of("a", 1000), 0xe40c_292c % 1000);
}

#[test]
fn the_producer_id_index_follows_new_ids_rotations_expiry_and_decoding() {
    let by = |t: &Txns, p: ProducerId| -> Vec<String> {
        t.state
            .producers
            .txn
            .select(&TxnFilter {
                producer_id: Some(p),
                ..Default::default()
            })
            .into_iter()
            .map(|(id, _)| id.as_str().to_string())
            .collect()
    };
    let mut t = Txns::new();
    let first = pe(&t.init(None).txn.unwrap());
    assert_eq!(by(&t, first.producer_id), ["tx"]);
    assert!(by(&t, ProducerId(first.producer_id.0 + 1)).is_empty());

    // Epochs run out: the id gets a new producer id, the old one is free.
    t.state
        .producers
        .txn
        .ids
        .get_mut(&TransactionalId::new("tx"))
        .unwrap()
        .epoch = ProducerEpoch(LAST_PRODUCER_EPOCH);
    let rotated = pe(&t.init(None).txn.unwrap());
    assert_ne!(rotated.producer_id, first.producer_id);
    assert!(by(&t, first.producer_id).is_empty());
    assert_eq!(by(&t, rotated.producer_id), ["tx"]);

    // Decoded from a snapshot (binary and JSON), the index is rebuilt.
    for format in [
        crate::raft::codec::Format::Binary,
        crate::raft::codec::Format::Json,
    ] {
        let bytes = crate::raft::codec::encode_as(format, &t.state.producers.txn).unwrap();
        let back: TxnModel = crate::raft::codec::decode(&bytes).unwrap();
        assert_eq!(back, t.state.producers.txn, "{format:?}");
        assert_eq!(
            back.select(&TxnFilter {
                producer_id: Some(rotated.producer_id),
                ..Default::default()
            })
            .len(),
            1
        );
    }

    // Expired, it is gone from the index too.
    t.state.producers.txn.expire_ids(u64::MAX, 0);
    assert!(t.state.producers.txn.ids().is_empty());
    assert!(by(&t, rotated.producer_id).is_empty());
}
