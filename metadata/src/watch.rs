//! The cluster as the metadata service last described it: topics, their
//! partitions and owners. One long poll of the `Watch` route keeps it fresh;
//! the broker and the proxy both read it.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use crate::api::MetaApi;
use crate::ids::{BrokerId, PartitionKey, Revision, TopicId};
use crate::model::{ClusterView, NodeInfo, NodeKind, ShardInfo, TopicInfo};

/// A snapshot of the cluster.
#[derive(Debug, Clone, Default)]
pub struct ClusterSnapshot {
    pub revision: Revision,
    pub topics: HashMap<String, Arc<TopicInfo>>,
    pub by_id: HashMap<TopicId, Arc<TopicInfo>>,
    pub nodes: Vec<NodeInfo>,
    /// Coordinator shards and their owners.
    pub shards: Vec<ShardInfo>,
    /// Client quotas.
    pub quotas: Arc<crate::quota::QuotaModel>,
    /// Users' SCRAM credentials, which the proxies authenticate with.
    pub scram: Arc<crate::scram::ScramModel>,
    /// The ACLs; the same `Arc` from one view to the next while they do not
    /// change, so that what is built from them can be kept.
    pub acls: Arc<crate::acl::AclModel>,
}

impl ClusterSnapshot {
    /// The number of coordinator shards (the metadata's default before the
    /// first view arrives).
    pub fn shard_count(&self) -> u32 {
        match self.shards.len() as u32 {
            0 => crate::state::DEFAULT_SHARDS,
            n => n,
        }
    }

    /// The registered brokers (not proxies), in any state.
    pub fn brokers(&self) -> impl Iterator<Item = &NodeInfo> {
        self.nodes.iter().filter(|n| n.kind == NodeKind::Broker)
    }

    /// The RPC address of broker `id`, if it is registered.
    pub fn broker_addr(&self, id: BrokerId) -> Option<&str> {
        self.brokers().find(|n| n.id == id).map(|n| n.addr.as_str())
    }

    /// Topic name and partition number → the partition's key, if both exist.
    pub fn partition_key(&self, topic: &str, partition: i32) -> Option<PartitionKey> {
        let t = self.topics.get(topic)?;
        t.partition_key(u32::try_from(partition).ok()?)
    }

    /// The snapshot after a view: a whole one replaces `prev` (whose ACLs
    /// are kept when they did not change); a partial one changes `prev`'s
    /// topics that changed and drops those deleted.
    fn after(v: ClusterView, prev: &ClusterSnapshot) -> Self {
        let acls = match v.acls {
            Some(m) if *prev.acls != m => Arc::new(m),
            _ => prev.acls.clone(),
        };
        // A partial view changes `prev`'s topics; a whole one starts afresh.
        let (topics, by_id) = if v.partial {
            (prev.topics.clone(), prev.by_id.clone())
        } else {
            Default::default()
        };
        let mut s = ClusterSnapshot {
            acls,
            revision: v.revision,
            nodes: v.nodes,
            shards: v.shards,
            quotas: Arc::new(v.quotas),
            scram: Arc::new(v.scram),
            topics,
            by_id,
        };
        for id in &v.deleted_topics {
            if let Some(t) = s.by_id.remove(id)
                && s.topics.get(&t.name).is_some_and(|n| n.id == *id)
            {
                s.topics.remove(&t.name);
            }
        }
        for t in v.topics {
            let t = Arc::new(t);
            // A name given to a new topic: the old one is gone.
            if let Some(old) = s.topics.insert(t.name.clone(), t.clone())
                && old.id != t.id
            {
                s.by_id.remove(&old.id);
            }
            s.by_id.insert(t.id, t);
        }
        s
    }
}

/// Keeps a [`ClusterSnapshot`] up to date, and knows when the metadata
/// service last confirmed it.
#[derive(Debug, Clone)]
pub struct ClusterWatch {
    rx: watch::Receiver<Arc<ClusterSnapshot>>,
    /// When the last long poll that was answered was *sent*: the view is
    /// the metadata's as of that instant at least.
    confirmed: Arc<std::sync::Mutex<Option<Instant>>>,
}

impl ClusterWatch {
    /// How long one long poll waits for a change by default.
    pub const DEFAULT_POLL: Duration = Duration::from_secs(3);

    /// Starts the long poll; it stops when every receiver is gone.
    pub fn start(meta: Arc<dyn MetaApi>) -> Self {
        Self::start_polling(meta, Self::DEFAULT_POLL)
    }

    /// Starts the long poll, each asking the metadata service to answer
    /// after at most `poll` without a change (so that the view is
    /// confirmed at least that often while the service is reachable).
    pub fn start_polling(meta: Arc<dyn MetaApi>, poll: Duration) -> Self {
        let (tx, rx) = watch::channel(Arc::new(ClusterSnapshot::default()));
        let confirmed = Arc::new(std::sync::Mutex::new(None));
        let confirmed_tx = confirmed.clone();
        tokio::spawn(async move {
            let mut since = Revision(0);
            let mut pause = Duration::from_millis(50);
            loop {
                let sent = Instant::now();
                match meta.watch(since, poll).await {
                    Ok(v) => {
                        pause = Duration::from_millis(50);
                        {
                            let mut c = confirmed_tx.lock().unwrap_or_else(|p| p.into_inner());
                            *c = Some(c.map_or(sent, |c: Instant| c.max(sent)));
                        }
                        if v.unchanged {
                            // Confirmed as it is.
                        } else if v.revision >= since {
                            since = v.revision;
                            let prev = tx.borrow().clone();
                            let snap = Arc::new(ClusterSnapshot::after(v, &prev));
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
        Self { rx, confirmed }
    }

    /// Whether the metadata service confirmed the view within `max` of now
    /// (counted from when the confirming request was sent).
    pub fn confirmed_within(&self, max: Duration) -> bool {
        let c = *self.confirmed.lock().unwrap_or_else(|p| p.into_inner());
        c.is_some_and(|c| c.elapsed() <= max)
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

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};

    use super::*;
    use crate::MetaError;
    use crate::api::meta_api::{Reply, reply};
    use crate::api::{RouteCall, proto, routes};

    /// Answers every watch at once with an empty view, or fails when cut.
    #[derive(Debug, Default)]
    struct Fake {
        cut: AtomicBool,
    }

    #[async_trait::async_trait]
    impl MetaApi for Fake {
        async fn call_route(&self, call: RouteCall) -> Result<Reply, MetaError> {
            if self.cut.load(Ordering::SeqCst) {
                return Err(MetaError::Unavailable("cut off (test)".into()));
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
            match call.request::<routes::Watch>() {
                Some(_) => Ok(reply::<routes::Watch>(proto::ClusterView {
                    revision: 1,
                    ..Default::default()
                })),
                None => Err(MetaError::InvalidRequest(call.path().into())),
            }
        }
    }

    async fn until(what: &str, mut f: impl FnMut() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !f() {
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    #[tokio::test]
    async fn a_view_not_confirmed_within_the_bound_is_known_to_be_stale() {
        let meta = Arc::new(Fake::default());
        let w = ClusterWatch::start_polling(meta.clone(), Duration::from_millis(20));
        let bound = Duration::from_millis(300);
        assert!(
            !w.confirmed_within(bound),
            "nothing confirmed before the first answer"
        );
        until("a first confirmation", || w.confirmed_within(bound)).await;
        meta.cut.store(true, Ordering::SeqCst);
        until("the view to go stale", || !w.confirmed_within(bound)).await;
        // The last view is still there to answer Metadata from.
        assert_eq!(w.current().revision, Revision(1));
        meta.cut.store(false, Ordering::SeqCst);
        until("a fresh confirmation", || w.confirmed_within(bound)).await;
    }
}
