//! What Floe's integration tests start before they test anything: a
//! metadata node on 127.0.0.1, a local object store in a temporary folder,
//! and brokers on both. Only tests depend on this crate; it panics on any
//! setup failure, which is what a test wants.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use floe_metadata::watch::ClusterWatch;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use floe_broker::{Broker, BrokerConfig};
use floe_metadata::api::MetaApi;
use floe_metadata::api::client::MetaClient;
use floe_metadata::node::{MetaConfig, MetaNode};
use floe_storage::backend::EndpointConfig;
use floe_storage::{PartitionKey, PoolOptions, StorePool, TopicId};

/// How long a test waits for a broker to take a partition over.
const OWNER_WAIT: Duration = Duration::from_secs(20);

/// A free port on 127.0.0.1 (free when asked; the caller binds it soon,
/// and another process may take it first). Only for an address that must
/// be known before its server can bind it (the peers of a metadata
/// cluster, which each node's Raft configuration names) or one nothing is
/// to listen on; a server a test starts itself binds port 0 and reports
/// the address it got, as [`Cluster::start`]'s metadata node does.
pub fn free_addr() -> SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

/// A one-node metadata service (HTTP on 127.0.0.1) and a local store
/// folder, both under one temporary folder that goes with the value.
pub struct Cluster {
    /// The metadata node; `take()` it to stop the service mid-test.
    pub meta_node: Option<MetaNode>,
    pub meta: Arc<dyn MetaApi>,
    /// The folder behind the `local` store endpoint.
    pub store: PathBuf,
    dir: tempfile::TempDir,
}

impl Cluster {
    /// Starts the metadata node on a port the system gives (its Raft
    /// configuration names the address it got), its controller checking
    /// every 100 ms.
    pub async fn start() -> Cluster {
        let dir = tempfile::tempdir().unwrap();
        let any_port = SocketAddr::from(([127, 0, 0, 1], 0));
        let mut c = MetaConfig::new(1, any_port, dir.path().join("meta"));
        c.init = true;
        c.controller_interval = Duration::from_millis(100);
        let node = MetaNode::start(c).await.unwrap();
        let meta = Arc::new(MetaClient::new(vec![node.addr.to_string()]).unwrap());
        let store = dir.path().join("store");
        std::fs::create_dir_all(&store).unwrap();
        Cluster {
            meta_node: Some(node),
            meta,
            store,
            dir,
        }
    }

    /// The temporary folder everything lives in.
    pub fn dir(&self) -> &std::path::Path {
        self.dir.path()
    }

    /// A new store pool over the one `local` endpoint.
    pub async fn pool(&self) -> Arc<StorePool> {
        let url = format!("local=file://{}", self.store.display());
        let endpoints = EndpointConfig::parse_list(&[url]).unwrap();
        Arc::new(
            StorePool::open(&endpoints, PoolOptions::default())
                .await
                .unwrap(),
        )
    }

    /// Broker 1 on its own pool, with `broker_config()` changed by `tune`.
    pub async fn broker(&self, tune: impl FnOnce(&mut BrokerConfig)) -> Broker {
        let pool = self.pool().await;
        self.broker_on(pool, tune).await
    }

    /// Broker 1 on `pool`, with `broker_config()` changed by `tune`.
    pub async fn broker_on(
        &self,
        pool: Arc<StorePool>,
        tune: impl FnOnce(&mut BrokerConfig),
    ) -> Broker {
        let mut cfg = broker_config();
        tune(&mut cfg);
        let view = ClusterWatch::start(self.meta.clone());
        Broker::start(cfg, self.meta.clone(), pool, view)
            .await
            .unwrap()
    }

    /// Creates a topic with string configs.
    pub async fn create_topic(
        &self,
        name: &str,
        partitions: u32,
        configs: &[(&str, &str)],
    ) -> TopicId {
        let cfg: HashMap<String, String> = configs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        self.meta.create_topic(name, partitions, cfg).await.unwrap()
    }
}

/// Broker 1 for tests: a 3 s lease, and compaction and retention left to
/// the test (an hour apart), advertising an address nobody dials.
pub fn broker_config() -> BrokerConfig {
    let mut cfg = BrokerConfig::new(1, "127.0.0.1:1");
    cfg.lease = Duration::from_secs(3);
    cfg.compaction_interval = Duration::from_secs(3600);
    cfg.retention_check_interval = Duration::from_secs(3600);
    cfg
}

/// Waits until `broker` owns the partition; panics after 20 s.
pub async fn wait_owned(broker: &Broker, key: PartitionKey) {
    let started = Instant::now();
    while !broker.owned().contains(&key) {
        assert!(started.elapsed() < OWNER_WAIT, "{key} never owned");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
