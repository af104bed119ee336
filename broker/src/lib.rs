//! floe-broker: partition logs on the object store.
