//! A store pool over in-process stores, each behind a [`FaultyStore`], for
//! the pool tests.

use std::sync::Arc;

use floe_storage::fault::{FaultHandle, FaultyStore};
use floe_storage::{EndpointId, PoolOptions, StorePool};
use futures::TryStreamExt;
use object_store::ObjectStore;
use object_store::memory::InMemory;

pub struct Fixture {
    pub pool: StorePool,
    /// Each endpoint's store, past its fault wrapper.
    pub raw: Vec<Arc<InMemory>>,
    pub faults: Vec<FaultHandle>,
}

/// `n` endpoints `e0`, `e1`, … in one pool.
pub fn fixture(n: usize, opts: PoolOptions) -> Fixture {
    let mut stores = Vec::new();
    let mut raw = Vec::new();
    let mut faults = Vec::new();
    for i in 0..n {
        let mem = Arc::new(InMemory::new());
        let (faulty, handle) = FaultyStore::wrap(mem.clone());
        stores.push((
            EndpointId::new(format!("e{i}")),
            faulty as Arc<dyn ObjectStore>,
        ));
        raw.push(mem);
        faults.push(handle);
    }
    Fixture {
        pool: StorePool::new(stores, opts).unwrap(),
        raw,
        faults,
    }
}

/// Every key in `store`, sorted.
pub async fn keys_in(store: &InMemory) -> Vec<String> {
    let mut keys: Vec<String> = store
        .list(None)
        .map_ok(|m| m.location.to_string())
        .try_collect()
        .await
        .unwrap();
    keys.sort();
    keys
}
