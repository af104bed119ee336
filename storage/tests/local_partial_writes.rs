//! A local store's staging files left by a write cut short (a crash) are
//! found and removed; complete objects and fresh staging files are not.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use floe_storage::backend::EndpointConfig;
use floe_storage::{EndpointId, ObjectKey, PoolOptions, StorePool};

#[tokio::test]
async fn staging_files_of_cut_writes_are_removed_under_the_prefix_only() {
    let dir = tempfile::tempdir().unwrap();
    let endpoints =
        EndpointConfig::parse_list(&[format!("local=file://{}", dir.path().display())]).unwrap();
    let pool = StorePool::open(&endpoints, PoolOptions::default())
        .await
        .unwrap();
    let local = EndpointId::new("local");
    let key = ObjectKey::new("exports/t/dt=2026-11-29/hr=14/0-1-2.parquet");
    pool.put_at(
        &local,
        key.clone(),
        bytes::Bytes::from_static(b"whole").into(),
    )
    .await
    .unwrap();
    let leaf = dir.path().join("exports/t/dt=2026-11-29/hr=14");
    std::fs::write(leaf.join("0-3-4.parquet#1"), b"half").unwrap();
    std::fs::write(dir.path().join("wal#3"), b"elsewhere").unwrap();

    // Listings do not show it; the sweep of the prefix removes it.
    assert_eq!(pool.list(&local, "exports/t/").await.unwrap().len(), 1);
    let fresh = pool
        .remove_partial_writes(&local, "exports/t/", Duration::from_secs(3600))
        .await
        .unwrap();
    assert_eq!(
        fresh, 0,
        "a staging file younger than the grace is left alone"
    );
    let n = pool
        .remove_partial_writes(&local, "exports/t/", Duration::ZERO)
        .await
        .unwrap();
    assert_eq!(n, 1);
    assert!(!leaf.join("0-3-4.parquet#1").exists());
    assert!(leaf.join("0-1-2.parquet").exists());
    assert!(dir.path().join("wal#3").exists(), "outside the prefix");
    assert_eq!(
        pool.remove_partial_writes(&local, "nothing/here/", Duration::ZERO)
            .await
            .unwrap(),
        0
    );
}
