//! The cluster as the metadata service last described it: topics, their
//! partitions and owners. One long-poll on `/v1/watch` keeps it fresh; the
//! broker and the proxy both read it.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use floe_metadata::api::client::MetaClient;
use floe_metadata::api::proto;
use tokio::sync::watch;

/// A topic as the view knows it.
#[derive(Debug, Clone, PartialEq)]
pub struct TopicView {
    pub name: String,
    pub id: uuid::Uuid,
    pub info: proto::TopicInfo,
}

/// A snapshot of the cluster.
#[derive(Debug, Clone, Default)]
pub struct ClusterSnapshot {
    pub revision: u64,
    pub topics: HashMap<String, Arc<TopicView>>,
    pub by_id: HashMap<uuid::Uuid, Arc<TopicView>>,
    pub nodes: Vec<proto::NodeInfo>,
    /// Coordinator shards and their owners.
    pub shards: Vec<proto::ShardInfo>,
}

impl ClusterSnapshot {
    /// The number of coordinator shards (the metadata's default before the
    /// first view arrives).
    pub fn shard_count(&self) -> u32 {
        match self.shards.len() as u32 {
            0 => floe_metadata::state::DEFAULT_SHARDS,
            n => n,
        }
    }

    /// The RPC address of broker `id`, if it is registered.
    pub fn broker_addr(&self, id: u32) -> Option<&str> {
        self.nodes
            .iter()
            .find(|n| n.id == id && n.kind == "broker")
            .map(|n| n.addr.as_str())
    }

    fn from_view(v: proto::ClusterView) -> Self {
        let mut s = ClusterSnapshot {
            revision: v.revision,
            nodes: v.nodes,
            shards: v.shards,
            ..Default::default()
        };
        for t in v.topics {
            let Ok(id) = uuid::Uuid::parse_str(&t.topic_id) else {
                tracing::warn!(topic = %t.name, id = %t.topic_id, "topic with a bad id in the view");
                continue;
            };
            let tv = Arc::new(TopicView {
                name: t.name.clone(),
                id,
                info: t,
            });
            s.by_id.insert(id, tv.clone());
            s.topics.insert(tv.name.clone(), tv);
        }
        s
    }
}

/// Keeps a [`ClusterSnapshot`] up to date.
#[derive(Debug, Clone)]
pub struct ClusterWatch {
    rx: watch::Receiver<Arc<ClusterSnapshot>>,
}

impl ClusterWatch {
    /// Starts the long poll; it stops when every receiver is gone.
    pub fn start(meta: Arc<MetaClient>) -> Self {
        let (tx, rx) = watch::channel(Arc::new(ClusterSnapshot::default()));
        tokio::spawn(async move {
            let mut since = 0u64;
            let mut pause = Duration::from_millis(50);
            loop {
                let req = proto::WatchRequest {
                    since_revision: since,
                    timeout_ms: 3_000,
                };
                match meta.call::<_, proto::ClusterView>("/v1/watch", &req).await {
                    Ok(v) => {
                        pause = Duration::from_millis(50);
                        if v.revision >= since {
                            since = v.revision;
                            let snap = Arc::new(ClusterSnapshot::from_view(v));
                            if tx.send(snap).is_err() {
                                return;
                            }
                        }
                    }
                    Err(e) => {
                        if tx.is_closed() {
                            return;
                        }
                        tracing::debug!(error = %e, "cluster watch failed; retrying");
                        tokio::time::sleep(pause).await;
                        pause = (pause * 2).min(Duration::from_secs(2));
                    }
                }
            }
        });
        Self { rx }
    }

    pub fn current(&self) -> Arc<ClusterSnapshot> {
        self.rx.borrow().clone()
    }

    pub fn subscribe(&self) -> watch::Receiver<Arc<ClusterSnapshot>> {
        self.rx.clone()
    }

    /// Waits until the view reaches `revision` or a predicate holds, at most `timeout`.
    pub async fn wait_for(
        &self,
        timeout: Duration,
        mut pred: impl FnMut(&ClusterSnapshot) -> bool,
    ) -> Arc<ClusterSnapshot> {
        let mut rx = self.rx.clone();
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let cur = rx.borrow_and_update().clone();
            if pred(&cur) {
                return cur;
            }
            if tokio::time::timeout_at(deadline, rx.changed())
                .await
                .is_err()
            {
                return rx.borrow().clone();
            }
        }
    }
}
