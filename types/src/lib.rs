//! floe-types: the names every Floe crate uses for the things of the
//! cluster model. It sits below `floe-storage` and `floe-metadata` and depends
//! on nothing of ours, so a topic, a partition, a broker or an object has one
//! type from the Kafka proxy down to the bytes at rest. Wire formats
//! (protobuf, the Kafka protocol) convert to and from these at their edge.

use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

pub mod format_samples;
mod topic_name;
pub mod version;
pub use topic_name::{InvalidTopicName, MAX_TOPIC_NAME_LEN, validate_topic_name};

macro_rules! int_id {
    ($(#[$m:meta])* $name:ident($t:ty)) => {
        $(#[$m])*
        #[derive(
            Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default, Serialize, Deserialize,
        )]
        #[serde(transparent)]
        pub struct $name(pub $t);

        impl $name {
            pub fn get(self) -> $t {
                self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}", self.0)
            }
        }
    };
}

int_id!(
    /// A broker or proxy process registered with the metadata service. Ids
    /// start at 1; "no broker" is `Option<BrokerId>::None`, never 0.
    BrokerId(u32)
);
int_id!(
    /// An ownership epoch of a partition or coordinator shard; bumped on every
    /// change of owner, so a broker that lost ownership is fenced.
    Epoch(u64)
);
int_id!(
    /// A revision of the whole model: the Raft log index of the last change.
    Revision(u64)
);
int_id!(
    /// An object of the store (WAL object or segment file) the committed index
    /// points into, as the metadata numbers it.
    ObjectId(u64)
);
int_id!(
    /// A shard of the group and transaction coordinators.
    ShardId(u32)
);
int_id!(
    /// A Kafka offset within one partition.
    Offset(i64)
);
int_id!(
    /// A Kafka producer id (idempotent and transactional producers); the
    /// metadata service hands them out.
    ProducerId(i64)
);
int_id!(
    /// A producer id's epoch: bumped when a transactional producer is
    /// initialised again, which fences the previous instance.
    ProducerEpoch(i16)
);

/// A producer's `transactional.id`: the key of a transaction's
/// coordinator state (sharded like group ids).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct TransactionalId(pub String);

impl TransactionalId {
    pub fn new(id: impl Into<String>) -> Self {
        Self(id.into())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for TransactionalId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl BrokerId {
    /// The id a wire format that has no optional integers sends, where 0
    /// means "none" (broker ids start at 1).
    pub fn from_wire(id: u32) -> Option<BrokerId> {
        (id != 0).then_some(BrokerId(id))
    }

    /// The wire form of an optional broker: 0 for none.
    pub fn to_wire(id: Option<BrokerId>) -> u32 {
        id.map_or(0, |b| b.0)
    }
}

/// A topic's identity: a UUID, so a re-created topic never meets the old one's data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct TopicId(pub uuid::Uuid);

impl TopicId {
    pub fn random() -> Self {
        Self(uuid::Uuid::new_v4())
    }

    pub fn as_bytes(&self) -> &[u8; 16] {
        self.0.as_bytes()
    }

    pub fn from_bytes(b: [u8; 16]) -> Self {
        Self(uuid::Uuid::from_bytes(b))
    }
}

impl fmt::Display for TopicId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// A topic id that is not a UUID.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadTopicId(pub String);

impl fmt::Display for BadTopicId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "bad topic id {:?}", self.0)
    }
}

impl std::error::Error for BadTopicId {}

impl std::str::FromStr for TopicId {
    type Err = BadTopicId;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        uuid::Uuid::parse_str(s)
            .map(TopicId)
            .map_err(|_| BadTopicId(s.to_string()))
    }
}

/// One partition of one topic: the key every layer finds a partition by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct PartitionKey {
    pub topic: TopicId,
    pub partition: u32,
}

impl PartitionKey {
    pub fn new(topic: TopicId, partition: u32) -> Self {
        Self { topic, partition }
    }
}

impl fmt::Display for PartitionKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.topic, self.partition)
    }
}

/// The stable name of one endpoint of a store pool (`"a"`, `"minio-1"`). It is
/// recorded next to every object key, so it must not change while data exists.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct EndpointId(Arc<str>);

impl EndpointId {
    pub fn new(id: impl AsRef<str>) -> Self {
        Self(Arc::from(id.as_ref()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for EndpointId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The key of an object inside one endpoint (`wal/0007/4f3a….wal`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ObjectKey(Arc<str>);

impl ObjectKey {
    pub fn new(key: impl AsRef<str>) -> Self {
        Self(Arc::from(key.as_ref()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Where an object really landed: the endpoint that holds it, its key there and
/// its size. Log objects are immutable: a key is written once and never reused.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ObjectRef {
    pub endpoint: EndpointId,
    pub key: ObjectKey,
    pub size: u64,
}

impl fmt::Display for ObjectRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{} ({} bytes)", self.endpoint, self.key, self.size)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broker_zero_on_the_wire_is_no_broker() {
        assert_eq!(BrokerId::from_wire(0), None);
        assert_eq!(BrokerId::from_wire(3), Some(BrokerId(3)));
        assert_eq!(BrokerId::to_wire(None), 0);
        assert_eq!(BrokerId::to_wire(Some(BrokerId(7))), 7);
    }

    #[test]
    fn topic_id_parses_only_uuids() {
        let id = TopicId::random();
        assert_eq!(id.to_string().parse::<TopicId>(), Ok(id));
        assert_eq!(
            "not-a-uuid".parse::<TopicId>(),
            Err(BadTopicId("not-a-uuid".into()))
        );
    }

    #[test]
    fn ids_serialize_as_their_plain_values() -> Result<(), serde_json::Error> {
        let obj = ObjectRef {
            endpoint: EndpointId::new("a"),
            key: ObjectKey::new("wal/1/x.wal"),
            size: 9,
        };
        let json = serde_json::to_string(&obj)?;
        assert_eq!(json, r#"{"endpoint":"a","key":"wal/1/x.wal","size":9}"#);
        assert_eq!(serde_json::from_str::<ObjectRef>(&json)?, obj);
        assert_eq!(serde_json::to_string(&Epoch(4))?, "4");
        let p = PartitionKey::new(TopicId::random(), 2);
        assert_eq!(
            serde_json::from_str::<PartitionKey>(&serde_json::to_string(&p)?)?,
            p
        );
        Ok(())
    }
}
