//! floe-client: a small Kafka client, the one the `floe topic`, `floe
//! produce` and `floe consume` commands use.
//!
//! - [`KafkaClient`]: one connection to a broker, with ApiVersions
//!   negotiation and typed request/response round trips
//!   ([`KafkaClient::send`]); metadata lookup ([`KafkaClient::topic`],
//!   [`KafkaClient::list_topics`]) and topic administration
//!   ([`KafkaClient::create_topic`], [`KafkaClient::describe_topic_configs`],
//!   [`KafkaClient::alter_topic_configs`], [`KafkaClient::delete_topic`]).
//! - [`partitioner`]: Kafka's default key partitioner (murmur2).
//! - [`Producer`]: records to a topic, one request per call, with retries of
//!   retriable broker errors.
//! - [`Consumer`]: records of a topic from a start position, one Fetch per
//!   poll, read uncommitted or committed ([`Isolation`]).
//! - Transactions and producers: [`KafkaClient::list_transactions`],
//!   [`KafkaClient::describe_transactions`],
//!   [`KafkaClient::describe_producers`].
//!
//! Every error is a [`ClientError`] with an [`ErrorKind`] to branch on and
//! [`ClientError::is_retriable`]. Frames are read and bodies decoded through
//! the proxy's guarded codec: nothing a broker sends makes the client
//! allocate more than the bytes it sent.

pub mod acls;
mod admin;
mod connection;
mod consume;
mod error;
mod groups;
mod metadata;
pub mod partitioner;
mod produce;
pub mod redrive;
mod reset;
pub mod security;
mod share_groups;
#[cfg(test)]
mod test_support;
mod txns;
mod users;

pub use admin::{ConfigEntry, ConfigSource, RESOURCE_BROKER, RESOURCE_GROUP, RESOURCE_TOPIC};
pub use connection::{CLIENT_ID, KafkaClient, topic_name};
pub use consume::{
    Consumer, EARLIEST, Isolation, LATEST, PartitionRecords, Polled, StartAt, decode_committed,
    decode_partition,
};
pub use error::{ClientError, ErrorKind, check_code, kafka_error_name};
pub use floe_storage::batch::Compression;
pub use floe_storage::records::Record;
pub use groups::{GroupDescription, GroupListing, GroupMember, TopicPartition, decode_assignment};
pub use kafka_protocol::ResponseError;
pub use metadata::{PartitionMetadata, TopicListing, TopicMetadata};
pub use produce::{Acks, PartitionStats, Producer, ProducerConfig, ProducerRecord};
pub use reset::{ResetError, ResetTo, clamp, reset_target};
pub use share_groups::{ShareGroupDescription, ShareMember};
pub use txns::{ProducerDescription, TransactionDescription, TransactionListing};
pub use users::UserCredential;
