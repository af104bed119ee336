//! Deletes a table's metadata objects that nothing refers to: what a commit
//! cut short by a crash left (a manifest, a manifest list, a metadata file
//! the pointer never reached), the manifest lists of dropped snapshots and
//! the metadata files older than the table's metadata log; and an upsert
//! table's position delete files no kept snapshot names.
//!
//! Referred to, and kept: the current metadata file and those its metadata
//! log names, every kept snapshot's manifest list, and the manifests those
//! lists name (each list is read once and remembered: it never changes).
//! An object younger than the grace period is
//! kept whatever it is: it may be a commit in flight (of another indexer,
//! when two run by mistake).

use std::collections::HashSet;
use std::time::{Duration, SystemTime};

use floe_storage::ObjectRef;
use futures::StreamExt;

use crate::error::Result;
use crate::exporter::Indexer;

impl Indexer {
    /// The data files (URIs) some kept snapshot of `topic`'s table names:
    /// the union of the live entries of every manifest its snapshots list
    /// (each manifest read once: it never changes).
    pub(crate) async fn table_data_files(&self, topic: &str) -> Result<HashSet<String>> {
        let table = self.meta().table_state(topic).await?;
        let Some(location) = table.state.metadata_location else {
            return Ok(HashSet::new());
        };
        let m = self.table_metadata(&location).await?;
        let mut manifests: HashSet<String> = HashSet::new();
        for s in m.snapshots() {
            manifests.extend(
                self.manifests_of(s.manifest_list(), m.format_version())
                    .await?,
            );
        }
        self.forget_manifest_files(&self.table_prefix_uri(topic)?, &manifests);
        let mut files = HashSet::new();
        for uri in &manifests {
            files.extend(self.manifest_files(uri).await?.iter().cloned());
        }
        Ok(files)
    }

    /// Deletes the unreferenced metadata objects of `topic`'s table older
    /// than `grace`; returns how many.
    pub async fn sweep_table(&self, topic: &str, grace: Duration) -> Result<usize> {
        let table = self.meta().table_state(topic).await?;
        let Some(location) = table.state.metadata_location else {
            return Ok(0);
        };
        let m = self.table_metadata(&location).await?;
        let mut keep: HashSet<String> = HashSet::new();
        keep.insert(location.clone());
        keep.extend(m.metadata_log().iter().map(|l| l.metadata_file.clone()));
        let lists: HashSet<String> = m
            .snapshots()
            .map(|s| s.manifest_list().to_string())
            .collect();
        self.forget_manifest_lists(&self.table_prefix_uri(topic)?, &lists);
        for list in &lists {
            keep.extend(self.manifests_of(list, m.format_version()).await?);
        }
        keep.extend(lists);
        let mut doomed = self
            .past_grace(&format!("tables/{topic}/metadata/"), grace)
            .await?;
        doomed.retain(|(uri, _)| !keep.contains(uri));
        // An upsert table's position delete files: kept while a kept
        // snapshot's delete manifest names them (asked only when there are
        // any).
        let mut deletes = self
            .past_grace(&format!("tables/{topic}/deletes/"), grace)
            .await?;
        if !deletes.is_empty() {
            let named = self.table_data_files(topic).await?;
            deletes.retain(|(uri, _)| !named.contains(uri));
            doomed.extend(deletes);
        }
        let mut deleted = 0;
        for (_, o) in doomed {
            tracing::info!(topic, key = %o.key, "deleting a table metadata object nothing refers to");
            self.pool().delete(&o).await?;
            deleted += 1;
        }
        Ok(deleted)
    }

    /// The objects under `prefix` older than `grace`, with their URIs.
    async fn past_grace(&self, prefix: &str, grace: Duration) -> Result<Vec<(String, ObjectRef)>> {
        let now = SystemTime::now();
        let mut pages = self.pool().list_pages(self.endpoint(), prefix, 1000)?;
        let mut old = Vec::new();
        while let Some(page) = pages.next().await {
            for o in page? {
                if o.age(now) >= grace {
                    let uri = self
                        .pool()
                        .uri(&o.object.endpoint, &o.object.key)
                        .unwrap_or_default();
                    old.push((uri, o.object));
                }
            }
        }
        Ok(old)
    }
}
