//! The ids the storage layer names things by: Floe's domain types
//! (`floe-types`), re-exported so that storage callers need one import.

pub use floe_types::{EndpointId, ObjectKey, ObjectRef, Offset, PartitionKey, TopicId};

/// The `object_store` path of a key.
pub(crate) fn path_of(key: &ObjectKey) -> object_store::path::Path {
    object_store::path::Path::from(key.as_str())
}
