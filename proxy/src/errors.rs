//! Kafka error codes for broker errors and routing failures: the one place
//! the proxy turns them into codes.

use floe_broker::{BrokerError, CallError, ErrorKind, RoutingError, RoutingErrorKind};
use kafka_protocol::ResponseError;

pub fn code_for(e: &BrokerError) -> i16 {
    let r = match e.kind() {
        ErrorKind::NotOwner => ResponseError::NotLeaderOrFollower,
        ErrorKind::UnknownTopicOrPartition => ResponseError::UnknownTopicOrPartition,
        ErrorKind::OffsetOutOfRange => ResponseError::OffsetOutOfRange,
        ErrorKind::MessageTooLarge => ResponseError::MessageTooLarge,
        ErrorKind::CorruptMessage => ResponseError::CorruptMessage,
        ErrorKind::InvalidRecord => ResponseError::InvalidRecord,
        ErrorKind::Unsupported => ResponseError::UnsupportedForMessageFormat,
        ErrorKind::Storage => ResponseError::KafkaStorageError,
        // Retryable: the client tries again (a new owner, a restart).
        ErrorKind::Metadata | ErrorKind::ShuttingDown => ResponseError::NotLeaderOrFollower,
        ErrorKind::InvalidRequest => ResponseError::InvalidRequest,
        ErrorKind::OutOfOrderSequence => ResponseError::OutOfOrderSequenceNumber,
        ErrorKind::InvalidProducerEpoch => ResponseError::InvalidProducerEpoch,
        // The owner's lease ran out: another broker takes over, or it
        // renews; clients refresh their metadata and retry.
        ErrorKind::LeaseExpired => ResponseError::NotLeaderOrFollower,
        // Nothing was sequenced; every client retries a timed-out produce.
        ErrorKind::Backpressure => ResponseError::RequestTimedOut,
        ErrorKind::FencedLeaderEpoch => ResponseError::FencedLeaderEpoch,
        ErrorKind::UnknownLeaderEpoch => ResponseError::UnknownLeaderEpoch,
        // Possibly persisted: clients retry it with the same sequence
        // numbers (NOT_LEADER_OR_FOLLOWER would say it was not stored).
        ErrorKind::OutcomeUnknown => ResponseError::RequestTimedOut,
        // Not stored; retried after the batches before it (not out of
        // order, which makes librdkafka re-send under a new epoch).
        ErrorKind::SequenceGap => ResponseError::NotLeaderOrFollower,
        ErrorKind::InvalidTxnState => ResponseError::InvalidTxnState,
    };
    r.code()
}

/// The Kafka code for a call that did not reach the broker answering it,
/// for every request (produce, fetch, list offsets, delete records, the
/// group requests). A partition without a reachable owner is
/// NOT_LEADER_OR_FOLLOWER, which every client retries after refreshing its
/// metadata (LEADER_NOT_AVAILABLE is not: a Java consumer's fetch fails on
/// it).
pub fn routing_code(e: &RoutingError) -> i16 {
    let r = match e.kind() {
        RoutingErrorKind::UnknownPartition => ResponseError::UnknownTopicOrPartition,
        RoutingErrorKind::NoOwner
        | RoutingErrorKind::OwnerUnknown
        | RoutingErrorKind::Unreachable
        | RoutingErrorKind::StaleView => ResponseError::NotLeaderOrFollower,
        RoutingErrorKind::NotCoordinator => ResponseError::NotCoordinator,
    };
    r.code()
}

/// The Kafka code for a failed call to a partition's owner.
pub fn call_code(e: &CallError) -> i16 {
    match e {
        CallError::Routing(r) => routing_code(r),
        CallError::Broker(b) => code_for(b),
    }
}

/// The Kafka code of a transaction coordinator's refusal or failure.
/// `fenced` is the code a fenced producer gets at this request and version
/// (PRODUCER_FENCED, or INVALID_PRODUCER_EPOCH to older versions).
pub fn txn_code(e: &floe_broker::txn::CoordError, fenced: ResponseError) -> i16 {
    use floe_broker::txn::CoordError;
    use floe_metadata::txn::TxnError;
    let r = match e {
        CoordError::NotCoordinator => ResponseError::NotCoordinator,
        CoordError::Unavailable(_) => ResponseError::CoordinatorNotAvailable,
        // EndTxn up to v3 (what the proxy offers) has no
        // TRANSACTION_ABORTABLE; this is the code its clients abort on
        // (librdkafka, Java with KIP-360).
        CoordError::Abortable(_) => ResponseError::UnknownProducerId,
        CoordError::Txn(t) => match t {
            TxnError::ProducerFenced => fenced,
            TxnError::InvalidProducerIdMapping | TxnError::UnknownTransactionalId => {
                ResponseError::InvalidProducerIdMapping
            }
            TxnError::ConcurrentTransactions => ResponseError::ConcurrentTransactions,
            TxnError::InvalidTxnState => ResponseError::InvalidTxnState,
            TxnError::InvalidTransactionTimeout => ResponseError::InvalidTransactionTimeout,
            TxnError::UnknownPartition => ResponseError::UnknownTopicOrPartition,
            TxnError::InvalidRequest => ResponseError::InvalidRequest,
            TxnError::ProducerIdsExhausted => ResponseError::CoordinatorNotAvailable,
        },
    };
    r.code()
}

/// PRODUCER_FENCED from `since` on, INVALID_PRODUCER_EPOCH before (the
/// versions that do not know it).
pub fn fenced_code(version: i16, since: i16) -> ResponseError {
    if version >= since {
        ResponseError::ProducerFenced
    } else {
        ResponseError::InvalidProducerEpoch
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn routing(kind: RoutingErrorKind) -> RoutingError {
        RoutingError::new(kind, "test")
    }

    #[test]
    fn every_routing_failure_maps_to_the_code_clients_retry_on() {
        let want = [
            (
                RoutingErrorKind::UnknownPartition,
                ResponseError::UnknownTopicOrPartition,
            ),
            (
                RoutingErrorKind::NoOwner,
                ResponseError::NotLeaderOrFollower,
            ),
            (
                RoutingErrorKind::OwnerUnknown,
                ResponseError::NotLeaderOrFollower,
            ),
            (
                RoutingErrorKind::Unreachable,
                ResponseError::NotLeaderOrFollower,
            ),
            (
                RoutingErrorKind::NotCoordinator,
                ResponseError::NotCoordinator,
            ),
            (
                RoutingErrorKind::StaleView,
                ResponseError::NotLeaderOrFollower,
            ),
        ];
        for (kind, code) in want {
            assert_eq!(routing_code(&routing(kind)), code.code(), "{kind:?}");
            let call = CallError::Routing(routing(kind));
            assert_eq!(call_code(&call), code.code(), "{kind:?} in a call");
        }
    }

    #[test]
    fn only_an_unknown_partition_is_not_worth_asking_again() {
        for kind in [
            RoutingErrorKind::NoOwner,
            RoutingErrorKind::OwnerUnknown,
            RoutingErrorKind::Unreachable,
            RoutingErrorKind::NotCoordinator,
            RoutingErrorKind::StaleView,
        ] {
            assert!(routing(kind).is_retryable(), "{kind:?}");
        }
        assert!(!routing(RoutingErrorKind::UnknownPartition).is_retryable());
    }

    #[test]
    fn an_expired_lease_and_backpressure_map_to_codes_clients_retry() {
        let lease = BrokerError::new(ErrorKind::LeaseExpired, "test");
        assert_eq!(code_for(&lease), ResponseError::NotLeaderOrFollower.code());
        assert!(CallError::Broker(lease).owner_not_ready());
        let full = BrokerError::new(ErrorKind::Backpressure, "test");
        assert_eq!(code_for(&full), ResponseError::RequestTimedOut.code());
        assert!(!CallError::Broker(full).owner_not_ready());
    }

    /// A write that may be stored is answered as Kafka answers a produce
    /// that timed out: clients retry it as possibly persisted (same
    /// sequence numbers), and the proxy does not send it again by itself.
    #[test]
    fn a_write_of_unknown_outcome_is_a_timeout_not_a_refusal() {
        let e = BrokerError::outcome_unknown("test");
        assert_eq!(code_for(&e), ResponseError::RequestTimedOut.code());
        assert!(!CallError::Broker(e).owner_not_ready());
    }

    /// A gap at a new owner is "not stored, try again", answered at once
    /// (the proxy does not hold the connection retrying it: the batches
    /// that fill the gap come on the same connection, after the answer).
    #[test]
    fn a_sequence_gap_at_a_new_owner_is_retried_not_out_of_order() {
        let e = BrokerError::new(ErrorKind::SequenceGap, "test");
        assert_eq!(code_for(&e), ResponseError::NotLeaderOrFollower.code());
        assert!(!CallError::Broker(e).owner_not_ready());
    }

    #[test]
    fn a_broker_answer_in_a_call_keeps_its_own_code() {
        let e = BrokerError::new(ErrorKind::OffsetOutOfRange, "test");
        assert_eq!(
            call_code(&CallError::Broker(e)),
            ResponseError::OffsetOutOfRange.code()
        );
    }

    #[test]
    fn a_fenced_producer_gets_the_code_its_version_knows() {
        use floe_broker::txn::CoordError;
        use floe_metadata::txn::TxnError;
        let fenced = CoordError::Txn(TxnError::ProducerFenced);
        assert_eq!(txn_code(&fenced, fenced_code(4, 4)), 90);
        assert_eq!(txn_code(&fenced, fenced_code(3, 4)), 47);
        let busy = CoordError::Txn(TxnError::ConcurrentTransactions);
        assert_eq!(txn_code(&busy, fenced_code(0, 2)), 51);
        assert_eq!(txn_code(&CoordError::NotCoordinator, fenced_code(0, 2)), 16);
        let lost = CoordError::Abortable("batches lost".into());
        assert_eq!(
            txn_code(&lost, fenced_code(3, 2)),
            59,
            "UNKNOWN_PRODUCER_ID"
        );
    }
}
