//! Kafka error codes for broker errors.

use floe_broker::{BrokerError, ErrorKind};
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
    };
    r.code()
}
