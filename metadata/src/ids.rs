//! Typed identifiers of the cluster model.

use std::fmt;

use serde::{Deserialize, Serialize};

macro_rules! int_id {
    ($(#[$m:meta])* $name:ident($t:ty)) => {
        $(#[$m])*
        #[derive(
            Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default, Serialize, Deserialize,
        )]
        #[serde(transparent)]
        pub struct $name(pub $t);

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}", self.0)
            }
        }
    };
}

int_id!(
    /// A broker or proxy process registered with the metadata service.
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
    /// An object of the store (WAL object or segment file) the index points into.
    ObjectId(u64)
);
int_id!(
    /// A shard of the group and transaction coordinators.
    ShardId(u32)
);

/// A topic's identity: a UUID, so a re-created topic never meets the old one's data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct TopicId(pub uuid::Uuid);

impl fmt::Display for TopicId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// One partition of one topic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct PartitionRef {
    pub topic: TopicId,
    pub partition: u32,
}

impl fmt::Display for PartitionRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.topic, self.partition)
    }
}
