//! What the proxy's protocol tests share: a proxy over a real TCP port with
//! an in-process broker and metadata node, and a raw Kafka connection.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use bytes::Bytes;
use floe_broker::Broker;
use floe_metadata::api::MetaApi;
use floe_metadata::watch::ClusterWatch;
use floe_proxy::admin::{AdminConfig, ClusterIdentity};
use floe_proxy::codec::{self, decode_response, encode_request};
use floe_proxy::handlers::Context;
use floe_proxy::{Proxy, ProxyConfig};
use floe_storage::batch::Compression;
use floe_storage::records::{BatchBuilder, RecordSpec};
use floe_testkit::{Cluster, broker_config};
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

pub struct Env {
    pub cluster: Cluster,
    pub kafka: SocketAddr,
    pub broker: Broker,
    pub proxy: Proxy,
}

pub async fn env() -> Env {
    env_with(false, None).await
}

/// [`env`], with `--transactions` as given and share groups served
/// (`--share-groups`) or not.
pub async fn env_with(
    transactions: bool,
    share: Option<Arc<floe_proxy::share::ShareContext>>,
) -> Env {
    env_on(transactions, share, |m| m).await
}

/// [`env_with`], the broker and proxy reaching the metadata service
/// through `wrap` of it.
pub async fn env_on(
    transactions: bool,
    share: Option<Arc<floe_proxy::share::ShareContext>>,
    wrap: impl FnOnce(Arc<dyn MetaApi>) -> Arc<dyn MetaApi>,
) -> Env {
    env_configured(transactions, share, wrap, |_| {}).await
}

/// [`env_on`], with the broker's settings changed by `configure`.
pub async fn env_configured(
    transactions: bool,
    share: Option<Arc<floe_proxy::share::ShareContext>>,
    wrap: impl FnOnce(Arc<dyn MetaApi>) -> Arc<dyn MetaApi>,
    configure: impl FnOnce(&mut floe_broker::config::BrokerConfig),
) -> Env {
    let cluster = Cluster::start().await;
    let meta = wrap(cluster.meta.clone());
    let pool = cluster.pool().await;
    let view = ClusterWatch::start(meta.clone());
    let mut cfg = broker_config();
    // Every JoinGroup version joins a new group; the test is about encodings,
    // so the first rebalance need not wait for more members.
    cfg.group.initial_rebalance_delay = Duration::from_millis(50);
    configure(&mut cfg);
    let broker = Broker::start(cfg, meta.clone(), pool, view.clone())
        .await
        .unwrap();
    // Bound first: the proxy advertises the port it got.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let listen = listener.local_addr().unwrap();
    let ctx = Arc::new(Context {
        me: Arc::new(floe_proxy::nodes::SelfNode::alone(
            1,
            "127.0.0.1".into(),
            listen.port() as i32,
        )),
        local: Some(broker.clone()),
        view,
        remotes: Default::default(),
        meta,
        admin: AdminConfig {
            connections_max_reauth_ms: 0,
            default_partitions: 1,
            identity: ClusterIdentity {
                cluster_id: "test".into(),
                node_id: 1,
                host: "127.0.0.1".into(),
                port: listen.port() as i32,
            },
        },
        auto_create_topics: true,
        auto_create_max_topics: 16,
        transactions,
        share,
        max_fetch_wait: Duration::from_secs(5),
        fetch_limits: Default::default(),
        fetch_sessions: Default::default(),
        producer_ids: Default::default(),
        max_view_age: None,
        down_reports: Default::default(),
        quotas: Default::default(),
        authz: Default::default(),
    });
    let proxy = Proxy::start_on(
        listener,
        ProxyConfig {
            listen,
            max_frame: codec::DEFAULT_MAX_FRAME,
            limits: Default::default(),
        },
        ctx,
    )
    .unwrap();
    Env {
        cluster,
        kafka: proxy.local_addr,
        broker,
        proxy,
    }
}

/// A Metadata request for `name`, created if it does not exist.
pub fn auto_create(name: &str) -> MetadataRequest {
    let mut t = MetadataRequestTopic::default();
    t.name = Some(topic(name));
    let mut req = MetadataRequest::default();
    req.topics = Some(vec![t]);
    req.allow_auto_topic_creation = true;
    req
}

pub struct Conn {
    pub sock: TcpStream,
    pub corr: i32,
}

impl Conn {
    pub async fn open(addr: std::net::SocketAddr) -> Self {
        Conn {
            sock: TcpStream::connect(addr).await.unwrap(),
            corr: 0,
        }
    }

    pub async fn call(&mut self, key: ApiKey, version: i16, body: RequestKind) -> ResponseKind {
        self.corr += 1;
        let mut h = RequestHeader::default();
        h.request_api_key = key as i16;
        h.request_api_version = version;
        h.correlation_id = self.corr;
        h.client_id = Some(StrBytes::from_static_str("versions-test"));
        let frame = encode_request(&h, &body).unwrap();
        self.sock.write_all(&frame).await.unwrap();
        let resp = tokio::time::timeout(
            Duration::from_secs(15),
            codec::read_frame(&mut self.sock, 64 << 20),
        )
        .await
        .unwrap_or_else(|_| panic!("{key:?} v{version}: no answer"))
        .unwrap()
        .unwrap_or_else(|| panic!("{key:?} v{version}: the proxy closed the connection"));
        let d = decode_response(key, version, resp).unwrap();
        assert_eq!(d.header.correlation_id, self.corr);
        d.body
    }
}

impl Conn {
    /// Sends a request without waiting for its answer (pipelining);
    /// returns its correlation id. [`Conn::recv`] reads the answers in order.
    pub async fn send(&mut self, key: ApiKey, version: i16, body: RequestKind) -> i32 {
        self.corr += 1;
        let mut h = RequestHeader::default();
        h.request_api_key = key as i16;
        h.request_api_version = version;
        h.correlation_id = self.corr;
        h.client_id = Some(StrBytes::from_static_str("pipelining-test"));
        let frame = encode_request(&h, &body).unwrap();
        self.sock.write_all(&frame).await.unwrap();
        self.corr
    }

    /// The next answer, which must be to `corr`, a `key` request at `version`.
    pub async fn recv(&mut self, key: ApiKey, version: i16, corr: i32) -> ResponseKind {
        let resp = tokio::time::timeout(
            Duration::from_secs(30),
            codec::read_frame(&mut self.sock, 64 << 20),
        )
        .await
        .unwrap_or_else(|_| panic!("{key:?} v{version} #{corr}: no answer"))
        .unwrap()
        .unwrap_or_else(|| panic!("{key:?} v{version} #{corr}: the proxy closed the connection"));
        let d = decode_response(key, version, resp).unwrap();
        assert_eq!(d.header.correlation_id, corr, "answers out of order");
        d.body
    }
}

impl Conn {
    /// Produces one record to partition 0 of `name` with acks=all (v9);
    /// returns the partition's error code.
    pub async fn produce_acked(&mut self, name: &str, value: &str, ts: i64) -> i16 {
        let data = PartitionProduceData::default().with_records(Some(one_batch(value, ts)));
        let req = ProduceRequest::default()
            .with_acks(-1)
            .with_timeout_ms(5000)
            .with_topic_data(vec![
                TopicProduceData::default()
                    .with_name(topic(name))
                    .with_partition_data(vec![data]),
            ]);
        let ResponseKind::Produce(r) = self
            .call(ApiKey::Produce, 9, RequestKind::Produce(req))
            .await
        else {
            panic!()
        };
        r.responses[0].partition_responses[0].error_code
    }

    /// ShareGroupDescribe v1 of `groups`, asked again (as a client does)
    /// while a group's coordinator shard has no owner yet: each group id
    /// falls on its own shard, which the broker takes over in the
    /// background after it starts.
    pub async fn describe_share_groups(
        &mut self,
        groups: Vec<GroupId>,
    ) -> ShareGroupDescribeResponse {
        let started = std::time::Instant::now();
        loop {
            let mut d = ShareGroupDescribeRequest::default();
            d.group_ids = groups.clone();
            let ResponseKind::ShareGroupDescribe(r) = self
                .call(
                    ApiKey::ShareGroupDescribe,
                    1,
                    RequestKind::ShareGroupDescribe(d),
                )
                .await
            else {
                panic!()
            };
            let waiting = r.groups.iter().any(|g| coordinator_not_yet(g.error_code));
            if !waiting || started.elapsed() > Duration::from_secs(20) {
                return r;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Joins share group `group` as `member` (epoch 0), subscribed to `name`.
    /// A share member's first heartbeat, asked again (as a client does)
    /// while the group's coordinator shard has no owner yet: the broker
    /// takes its shards over in the background after it starts.
    pub async fn join_share(
        &mut self,
        group: &GroupId,
        member: &StrBytes,
        name: &str,
    ) -> ShareGroupHeartbeatResponse {
        let started = std::time::Instant::now();
        loop {
            let mut hb = ShareGroupHeartbeatRequest::default();
            hb.group_id = group.clone();
            hb.member_id = member.clone();
            hb.subscribed_topic_names = Some(vec![topic(name)]);
            let ResponseKind::ShareGroupHeartbeat(r) = self
                .call(
                    ApiKey::ShareGroupHeartbeat,
                    1,
                    RequestKind::ShareGroupHeartbeat(hb),
                )
                .await
            else {
                panic!()
            };
            if !coordinator_not_yet(r.error_code) || started.elapsed() > Duration::from_secs(20) {
                return r;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// Whether `code` says a group's coordinator is not ready yet (the client
/// asks again).
pub fn coordinator_not_yet(code: i16) -> bool {
    use kafka_protocol::error::ResponseError;
    [
        ResponseError::CoordinatorLoadInProgress.code(),
        ResponseError::CoordinatorNotAvailable.code(),
        ResponseError::NotCoordinator.code(),
    ]
    .contains(&code)
}

pub fn topic(name: &str) -> TopicName {
    TopicName(StrBytes::from_string(name.to_string()))
}

/// A Fetch of partition 0 of `name` from `offset`, 1 MiB at most, waiting
/// up to `max_wait_ms` for one byte.
pub fn fetch_one(name: &str, offset: i64, max_wait_ms: i32) -> FetchRequest {
    let mut fp = FetchPartition::default();
    fp.partition = 0;
    fp.fetch_offset = offset;
    fp.partition_max_bytes = 1 << 20;
    let mut ft = FetchTopic::default();
    ft.topic = topic(name);
    ft.partitions = vec![fp];
    let mut req = FetchRequest::default();
    req.max_wait_ms = max_wait_ms;
    req.min_bytes = 1;
    req.max_bytes = 1 << 20;
    req.topics = vec![ft];
    req
}

pub fn one_batch(value: &str, ts: i64) -> Bytes {
    BatchBuilder::new(0, ts)
        .push(RecordSpec::new(
            Some(b"k".to_vec()),
            Some(value.as_bytes().to_vec()),
            0,
        ))
        .build(Compression::None)
        .unwrap()
}

pub fn txn_id(id: &str) -> TransactionalId {
    TransactionalId(StrBytes::from_string(id.to_string()))
}

pub async fn init_txn(c: &mut Conn, id: &str) -> (ProducerId, i16) {
    let started = std::time::Instant::now();
    loop {
        let mut req = InitProducerIdRequest::default();
        req.transactional_id = Some(txn_id(id));
        req.transaction_timeout_ms = 60_000;
        req.producer_id = ProducerId(-1);
        req.producer_epoch = -1;
        let ResponseKind::InitProducerId(r) = c
            .call(ApiKey::InitProducerId, 4, RequestKind::InitProducerId(req))
            .await
        else {
            panic!()
        };
        if r.error_code == 0 {
            return (r.producer_id, r.producer_epoch);
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "InitProducerId {id}: {}",
            r.error_code
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
