//! The ids of the cluster model: Floe's domain types (`floe-types`),
//! re-exported here so that the model reads as one vocabulary.

pub use floe_types::{
    BrokerId, EndpointId, Epoch, ObjectId, ObjectKey, ObjectRef, Offset, PartitionKey,
    ProducerEpoch, ProducerId, Revision, ShardId, TopicId, TransactionalId,
};
