//! openraft's storage conformance suite on Floe's log store and state machine.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use floe_metadata::raft::log_store::LogStore;
use floe_metadata::raft::state_machine::StateMachine;
use floe_metadata::raft::{StorageError, TypeConfig};
use openraft::testing::{StoreBuilder, Suite};

struct Builder;

impl StoreBuilder<TypeConfig, LogStore, StateMachine, Arc<tempfile::TempDir>> for Builder {
    async fn build(
        &self,
    ) -> Result<(Arc<tempfile::TempDir>, LogStore, StateMachine), StorageError> {
        let dir = Arc::new(tempfile::tempdir().unwrap());
        let log = LogStore::open(&dir.path().join("raft-log.redb"))?;
        let (sm, _shared) = StateMachine::open(&dir.path().join("sm"))?;
        Ok((dir, log, sm))
    }
}

#[test]
fn openraft_storage_suite_passes() {
    Suite::test_all(Builder).unwrap();
}
