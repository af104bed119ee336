//! Typed identifiers used across the storage layer.

use std::fmt;
use std::sync::Arc;

/// The stable name of one endpoint of a store pool (`"a"`, `"minio-1"`). It is
/// recorded next to every object key, so it must not change while data exists.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
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
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectKey(Arc<str>);

impl ObjectKey {
    pub fn new(key: impl AsRef<str>) -> Self {
        Self(Arc::from(key.as_ref()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub(crate) fn to_path(&self) -> object_store::path::Path {
        object_store::path::Path::from(self.as_str())
    }
}

impl fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Where an object really landed: the endpoint that holds it, its key there and
/// its size. Objects are immutable: a key is written once and never reused.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
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

/// A topic's identity: a UUID, so a re-created topic never meets the old one's data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
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

/// One partition of one topic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
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

/// A Kafka offset within one partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Offset(pub i64);

impl Offset {
    pub fn get(self) -> i64 {
        self.0
    }
}

impl fmt::Display for Offset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}
