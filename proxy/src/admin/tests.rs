//! The admin requests against a real in-process metadata node, each request
//! and answer passed through the wire encoding of its version.

use floe_metadata::api::MetaApi;
use floe_metadata::api::client::MetaClient;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use floe_metadata::node::{MetaConfig, MetaNode};
use floe_metadata::topic_config::TopicConfig;
use kafka_protocol::messages::create_partitions_request::{
    CreatePartitionsAssignment, CreatePartitionsTopic,
};
use kafka_protocol::messages::create_topics_request::{
    CreatableReplicaAssignment, CreatableTopic, CreatableTopicConfig,
};
use kafka_protocol::messages::delete_topics_request::DeleteTopicState;
use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use kafka_protocol::messages::describe_configs_response::DescribeConfigsResourceResult;
use kafka_protocol::messages::{
    AlterConfigsRequest, AlterConfigsResponse, BrokerId, CreatePartitionsRequest,
    CreatePartitionsResponse, CreateTopicsRequest, CreateTopicsResponse, DeleteTopicsRequest,
    DeleteTopicsResponse, DescribeClusterRequest, DescribeClusterResponse, DescribeConfigsRequest,
    DescribeConfigsResponse, IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse,
    MetadataRequest, TopicName, alter_configs_request, incremental_alter_configs_request,
};
use uuid::Uuid;

use super::*;

const NODE_ID: i32 = 7;

fn admin_config() -> AdminConfig {
    AdminConfig {
        default_partitions: 3,
        connections_max_reauth_ms: 0,
        identity: ClusterIdentity {
            cluster_id: "floe-test".into(),
            node_id: NODE_ID,
            host: "proxy.example".into(),
            port: 9092,
        },
    }
}

fn free_addr() -> SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

/// One metadata node and a client of it.
struct Fixture {
    meta: std::sync::Arc<dyn MetaApi>,
    cfg: AdminConfig,
    node: MetaNode,
    _dir: tempfile::TempDir,
}

macro_rules! typed_call {
    ($fn:ident, $kind:ident, $req:ty, $resp:ty) => {
        async fn $fn(&self, version: i16, req: $req) -> $resp {
            match self
                .call(version, ApiKey::$kind, RequestKind::$kind(req))
                .await
            {
                ResponseKind::$kind(r) => r,
                other => panic!("unexpected response {other:?}"),
            }
        }
    };
}

impl Fixture {
    async fn start() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let addr = free_addr();
        let node = MetaNode::start(MetaConfig::new(1, addr, dir.path().join("meta")))
            .await
            .unwrap();
        let client = MetaClient::new(vec![addr.to_string()]).unwrap();
        let started = Instant::now();
        loop {
            if let Ok(s) = client.status_of(&addr.to_string()).await
                && s.leader_id != 0
            {
                break;
            }
            assert!(started.elapsed() < Duration::from_secs(20), "no leader");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Fixture {
            meta: std::sync::Arc::new(client),
            cfg: admin_config(),
            node,
            _dir: dir,
        }
    }

    async fn stop(self) {
        self.node.shutdown().await;
    }

    /// Sends `req` as a client would at `version` (encoded, then decoded as
    /// the connection loop would see it), and checks that the answer encodes
    /// at that version and reads back the same.
    async fn call(&self, version: i16, key: ApiKey, req: RequestKind) -> ResponseKind {
        call_with(self.meta.as_ref(), &self.cfg, version, key, req).await
    }

    typed_call!(
        create_topics,
        CreateTopics,
        CreateTopicsRequest,
        CreateTopicsResponse
    );
    typed_call!(
        delete_topics,
        DeleteTopics,
        DeleteTopicsRequest,
        DeleteTopicsResponse
    );
    typed_call!(
        create_partitions,
        CreatePartitions,
        CreatePartitionsRequest,
        CreatePartitionsResponse
    );
    typed_call!(
        describe_configs,
        DescribeConfigs,
        DescribeConfigsRequest,
        DescribeConfigsResponse
    );
    typed_call!(
        alter_configs,
        AlterConfigs,
        AlterConfigsRequest,
        AlterConfigsResponse
    );
    typed_call!(
        incremental_alter_configs,
        IncrementalAlterConfigs,
        IncrementalAlterConfigsRequest,
        IncrementalAlterConfigsResponse
    );

    /// Creates topics through the metadata client directly.
    async fn given_topic(&self, name: &str, partitions: u32, configs: &[(&str, &str)]) -> Uuid {
        let configs = configs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let id = self
            .meta
            .create_topic(name, partitions, configs)
            .await
            .unwrap();
        id.0
    }

    /// A topic's configs: name → (value, is_default).
    async fn configs_of(&self, name: &str) -> BTreeMap<String, (String, bool)> {
        self.meta
            .describe_topic(name)
            .await
            .unwrap()
            .configs
            .into_iter()
            .map(|c| (c.name, (c.value, c.is_default)))
            .collect()
    }

    async fn exists(&self, name: &str) -> bool {
        match self.meta.describe_topic(name).await {
            Ok(_) => true,
            Err(MetaError::UnknownTopic(_)) => false,
            Err(e) => panic!("describe {name}: {e}"),
        }
    }
}

async fn call_with(
    meta: &dyn MetaApi,
    cfg: &AdminConfig,
    version: i16,
    key: ApiKey,
    req: RequestKind,
) -> ResponseKind {
    let mut wire = BytesMut::new();
    req.encode(&mut wire, version)
        .unwrap_or_else(|e| panic!("{key:?} v{version} request does not encode: {e}"));
    let req = RequestKind::decode(key, &mut wire.freeze(), version).unwrap();
    let me = crate::nodes::KafkaNode {
        id: cfg.identity.node_id,
        host: cfg.identity.host.clone(),
        port: cfg.identity.port,
    };
    let nodes = KafkaNodes::new(Vec::new(), me);
    let resp = handle_admin(meta, cfg, &nodes, version, &req)
        .await
        .unwrap_or_else(|| panic!("{key:?} is not answered"));
    let mut wire = BytesMut::new();
    resp.encode(&mut wire, version)
        .unwrap_or_else(|e| panic!("{key:?} v{version} response does not encode: {e}"));
    let back = ResponseKind::decode(key, &mut wire.freeze(), version).unwrap();
    assert_eq!(
        back, resp,
        "{key:?} v{version} response changes on the wire"
    );
    resp
}

fn name(n: &str) -> TopicName {
    TopicName(str_bytes(n))
}

fn new_topic(n: &str, partitions: i32, configs: &[(&str, &str)]) -> CreatableTopic {
    CreatableTopic::default()
        .with_name(name(n))
        .with_num_partitions(partitions)
        .with_replication_factor(-1)
        .with_configs(
            configs
                .iter()
                .map(|(k, v)| {
                    CreatableTopicConfig::default()
                        .with_name(str_bytes(*k))
                        .with_value(Some(str_bytes(*v)))
                })
                .collect(),
        )
}

fn create_req(topics: Vec<CreatableTopic>) -> CreateTopicsRequest {
    CreateTopicsRequest::default()
        .with_topics(topics)
        .with_timeout_ms(30_000)
}

fn code(e: ResponseError) -> i16 {
    e.code()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_topics_creates_with_default_partitions_and_reports_configs() {
    let f = Fixture::start().await;
    let known = TopicConfig::default().describe().len();

    let resp = f
        .create_topics(
            7,
            create_req(vec![
                new_topic("orders", -1, &[("retention.ms", "1000")]),
                new_topic("payments", 2, &[]).with_replication_factor(3),
            ]),
        )
        .await;
    assert_eq!(resp.throttle_time_ms, 0);
    let [orders, payments] = &resp.topics[..] else {
        panic!("{resp:?}")
    };
    assert_eq!((orders.error_code, &orders.error_message), (0, &None));
    assert_eq!(orders.num_partitions, 3, "default partitions");
    assert_eq!(orders.replication_factor, 1);
    let info = f.meta.describe_topic("orders").await.unwrap();
    assert_eq!(info.partition_count, 3);
    assert_eq!(orders.topic_id, info.id.0);
    let configs = orders.configs.as_ref().unwrap();
    assert_eq!(configs.len(), known, "every known config");
    let retention = configs.iter().find(|c| &*c.name == "retention.ms").unwrap();
    assert_eq!(retention.value.as_deref(), Some("1000"));
    assert_eq!(retention.config_source, 1, "DYNAMIC_TOPIC_CONFIG");
    let policy = configs
        .iter()
        .find(|c| &*c.name == "cleanup.policy")
        .unwrap();
    assert_eq!(
        (policy.value.as_deref(), policy.config_source),
        (Some("delete"), 5)
    );
    assert_eq!(payments.error_code, 0, "{:?}", payments.error_message);
    assert_eq!(
        (payments.num_partitions, payments.replication_factor),
        (2, 1)
    );
    assert_eq!(
        f.meta
            .describe_topic("payments")
            .await
            .unwrap()
            .partition_count,
        2
    );

    // v4 has no partition count, configs or topic id in the answer.
    let resp = f
        .create_topics(4, create_req(vec![new_topic("audit", 5, &[])]))
        .await;
    assert_eq!(resp.topics[0].error_code, 0);
    assert_eq!(resp.topics[0].num_partitions, -1);
    assert_eq!(resp.topics[0].topic_id, Uuid::nil());
    assert_eq!(
        f.meta
            .describe_topic("audit")
            .await
            .unwrap()
            .partition_count,
        5
    );
    f.stop().await;
}

fn assignment(partition: i32, brokers: &[i32]) -> CreatableReplicaAssignment {
    CreatableReplicaAssignment::default()
        .with_partition_index(partition)
        .with_broker_ids(brokers.iter().map(|b| BrokerId(*b)).collect())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_topics_accepts_consistent_replica_assignments_and_ignores_them() {
    let f = Fixture::start().await;
    let assigned =
        |n: &str, a: Vec<CreatableReplicaAssignment>| new_topic(n, -1, &[]).with_assignments(a);
    let resp = f
        .create_topics(
            7,
            create_req(vec![
                // Broker ids Floe does not have: placement is Floe's anyway.
                assigned(
                    "placed",
                    vec![
                        assignment(0, &[1, 2, 3]),
                        assignment(1, &[2, 3, 1]),
                        assignment(2, &[77, 1, 2]),
                    ],
                ),
                assigned("gap", vec![assignment(0, &[1]), assignment(2, &[1])]),
                assigned("from-one", vec![assignment(1, &[1])]),
                assigned("uneven", vec![assignment(0, &[1, 2]), assignment(1, &[1])]),
                assigned("twice", vec![assignment(0, &[1, 1])]),
                assigned("empty", vec![assignment(0, &[])]),
                assigned("with-factor", vec![assignment(0, &[1])]).with_replication_factor(1),
            ]),
        )
        .await;
    let got: Vec<(&str, i16, i32)> = resp
        .topics
        .iter()
        .map(|t| (t.name.as_str(), t.error_code, t.num_partitions))
        .collect();
    let bad = code(ResponseError::InvalidReplicaAssignment);
    assert_eq!(
        got,
        vec![
            ("placed", 0, 3),
            ("gap", bad, -1),
            ("from-one", bad, -1),
            ("uneven", bad, -1),
            ("twice", bad, -1),
            ("empty", bad, -1),
            ("with-factor", code(ResponseError::InvalidRequest), -1),
        ]
    );
    for t in &resp.topics[1..] {
        assert!(t.error_message.is_some(), "{t:?}");
    }
    assert_eq!(resp.topics[0].replication_factor, 1);
    assert_eq!(
        f.meta
            .describe_topic("placed")
            .await
            .unwrap()
            .partition_count,
        3
    );
    f.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_topics_refuses_existing_and_invalid_topics_one_by_one() {
    let f = Fixture::start().await;
    f.given_topic("orders", 1, &[]).await;

    let long = "x".repeat(250);
    // Assignments beside a partition count: refused, as Kafka does.
    let assigned = new_topic("assigned", 1, &[]).with_assignments(vec![
        CreatableReplicaAssignment::default()
            .with_partition_index(0)
            .with_broker_ids(vec![BrokerId(1)]),
    ]);
    let null_config = CreatableTopic::default()
        .with_name(name("null-config"))
        .with_num_partitions(1)
        .with_replication_factor(1)
        .with_configs(vec![
            CreatableTopicConfig::default()
                .with_name(str_bytes("retention.ms"))
                .with_value(None),
        ]);
    let resp = f
        .create_topics(
            5,
            create_req(vec![
                new_topic("orders", 1, &[]),
                new_topic("bad/name", 1, &[]),
                new_topic("..", 1, &[]),
                new_topic(&long, 1, &[]),
                new_topic("bad-config", 1, &[("retention.ms", "-5")]),
                new_topic("unknown-config", 1, &[("no.such.key", "1")]),
                assigned,
                new_topic("no-partitions", 0, &[]),
                new_topic("no-replicas", 1, &[]).with_replication_factor(0),
                new_topic("twice", 1, &[]),
                new_topic("twice", 2, &[]),
                null_config,
                new_topic("fine", 1, &[]),
            ]),
        )
        .await;
    let got: Vec<(&str, i16)> = resp
        .topics
        .iter()
        .map(|t| (t.name.as_str(), t.error_code))
        .collect();
    let expected = vec![
        ("orders", code(ResponseError::TopicAlreadyExists)),
        ("bad/name", code(ResponseError::InvalidTopicException)),
        ("..", code(ResponseError::InvalidTopicException)),
        (long.as_str(), code(ResponseError::InvalidTopicException)),
        ("bad-config", code(ResponseError::InvalidConfig)),
        ("unknown-config", code(ResponseError::InvalidConfig)),
        ("assigned", code(ResponseError::InvalidRequest)),
        ("no-partitions", code(ResponseError::InvalidPartitions)),
        ("no-replicas", code(ResponseError::InvalidReplicationFactor)),
        ("twice", code(ResponseError::InvalidRequest)),
        ("twice", code(ResponseError::InvalidRequest)),
        ("null-config", code(ResponseError::InvalidConfig)),
        ("fine", 0),
    ];
    assert_eq!(got, expected);
    for t in &resp.topics[..12] {
        let message = t.error_message.as_deref().unwrap_or_default();
        assert!(
            !message.is_empty(),
            "{} has no error message",
            t.name.as_str()
        );
        assert_eq!(t.num_partitions, -1, "no partition count for a refusal");
    }
    let bad_config = &resp.topics[4];
    assert!(
        bad_config
            .error_message
            .as_deref()
            .is_some_and(|m| m.contains("retention.ms")),
        "{bad_config:?}"
    );
    for refused in [
        "bad-config",
        "unknown-config",
        "assigned",
        "twice",
        "no-replicas",
    ] {
        assert!(!f.exists(refused).await, "{refused} was created");
    }
    assert!(f.exists("fine").await);

    // v2, the oldest version, carries the message too.
    let resp = f
        .create_topics(2, create_req(vec![new_topic("orders", 1, &[])]))
        .await;
    assert_eq!(
        resp.topics[0].error_code,
        code(ResponseError::TopicAlreadyExists)
    );
    assert_eq!(
        resp.topics[0].error_message.as_deref(),
        Some("topic 'orders' already exists")
    );
    f.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_topics_validate_only_creates_nothing() {
    let f = Fixture::start().await;

    let resp = f
        .create_topics(
            7,
            create_req(vec![new_topic(
                "orders",
                4,
                &[("cleanup.policy", "compact")],
            )])
            .with_validate_only(true),
        )
        .await;
    let t = &resp.topics[0];
    assert_eq!(t.error_code, 0, "{:?}", t.error_message);
    assert_eq!(t.num_partitions, 4);
    assert_eq!(t.topic_id, Uuid::nil(), "no id: nothing was created");
    let policy = t
        .configs
        .as_ref()
        .unwrap()
        .iter()
        .find(|c| &*c.name == "cleanup.policy")
        .unwrap();
    assert_eq!(
        (policy.value.as_deref(), policy.config_source),
        (Some("compact"), 1)
    );
    assert!(!f.exists("orders").await, "validate_only created the topic");

    let resp = f
        .create_topics(
            5,
            create_req(vec![new_topic("orders", 1, &[("segment.bytes", "1")])])
                .with_validate_only(true),
        )
        .await;
    assert_eq!(
        resp.topics[0].error_code,
        code(ResponseError::InvalidConfig)
    );

    f.given_topic("orders", 1, &[]).await;
    let resp = f
        .create_topics(
            5,
            create_req(vec![new_topic("orders", 1, &[])]).with_validate_only(true),
        )
        .await;
    assert_eq!(
        resp.topics[0].error_code,
        code(ResponseError::TopicAlreadyExists)
    );
    f.stop().await;
}

fn describe_req(resources: Vec<DescribeConfigsResource>) -> DescribeConfigsRequest {
    DescribeConfigsRequest::default().with_resources(resources)
}

fn topic_resource(n: &str, keys: Option<&[&str]>) -> DescribeConfigsResource {
    DescribeConfigsResource::default()
        .with_resource_type(2)
        .with_resource_name(str_bytes(n))
        .with_configuration_keys(keys.map(|k| k.iter().map(|k| str_bytes(*k)).collect()))
}

fn entry<'a>(
    configs: &'a [DescribeConfigsResourceResult],
    key: &str,
) -> &'a DescribeConfigsResourceResult {
    configs
        .iter()
        .find(|c| &*c.name == key)
        .unwrap_or_else(|| panic!("no {key} in {configs:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn describe_configs_tells_set_values_from_defaults() {
    let f = Fixture::start().await;
    f.given_topic("orders", 1, &[("retention.ms", "1000")])
        .await;
    let known = TopicConfig::default().describe().len();

    // v1, every key, no synonyms.
    let resp = f
        .describe_configs(1, describe_req(vec![topic_resource("orders", None)]))
        .await;
    let r = &resp.results[0];
    assert_eq!((r.error_code, &r.error_message), (0, &None));
    assert_eq!((r.resource_type, r.resource_name.as_str()), (2, "orders"));
    assert_eq!(r.configs.len(), known);
    let retention = entry(&r.configs, "retention.ms");
    assert_eq!(retention.value.as_deref(), Some("1000"));
    assert_eq!(retention.config_source, 1, "DYNAMIC_TOPIC_CONFIG");
    assert!(!retention.read_only && !retention.is_sensitive);
    assert!(retention.synonyms.is_empty());
    let policy = entry(&r.configs, "cleanup.policy");
    assert_eq!(
        (policy.value.as_deref(), policy.config_source),
        (Some("delete"), 5)
    );

    // Named keys (an unknown one is left out), with synonyms.
    let resp = f
        .describe_configs(
            2,
            describe_req(vec![topic_resource(
                "orders",
                Some(&["retention.ms", "cleanup.policy", "no.such.key"]),
            )])
            .with_include_synonyms(true),
        )
        .await;
    let configs = &resp.results[0].configs;
    assert_eq!(configs.len(), 2);
    let synonyms = |key: &str| -> Vec<(String, Option<String>, i8)> {
        entry(configs, key)
            .synonyms
            .iter()
            .map(|s| {
                (
                    s.name.to_string(),
                    s.value.as_deref().map(str::to_string),
                    s.source,
                )
            })
            .collect()
    };
    assert_eq!(
        synonyms("retention.ms"),
        vec![
            ("retention.ms".to_string(), Some("1000".to_string()), 1),
            ("retention.ms".to_string(), Some("604800000".to_string()), 5),
        ]
    );
    assert_eq!(
        synonyms("cleanup.policy"),
        vec![("cleanup.policy".to_string(), Some("delete".to_string()), 5)]
    );

    // v3+: types, and documentation only when asked.
    let resp = f
        .describe_configs(
            3,
            describe_req(vec![topic_resource("orders", None)]).with_include_documentation(true),
        )
        .await;
    let configs = &resp.results[0].configs;
    assert_eq!(entry(configs, "retention.ms").config_type, 5, "LONG");
    assert_eq!(entry(configs, "cleanup.policy").config_type, 7, "LIST");
    assert_eq!(entry(configs, "max.message.bytes").config_type, 3, "INT");
    assert!(
        entry(configs, "retention.ms")
            .documentation
            .as_deref()
            .is_some_and(|d| !d.is_empty())
    );
    let resp = f
        .describe_configs(4, describe_req(vec![topic_resource("orders", None)]))
        .await;
    assert_eq!(
        entry(&resp.results[0].configs, "message.timestamp.type").config_type,
        2,
        "STRING"
    );
    assert!(
        resp.results[0]
            .configs
            .iter()
            .all(|c| c.documentation.is_none())
    );

    // Topics that are not there, brokers, other resources.
    let broker = |n: &str| {
        DescribeConfigsResource::default()
            .with_resource_type(4)
            .with_resource_name(str_bytes(n))
            .with_configuration_keys(None)
    };
    let resp = f
        .describe_configs(
            4,
            describe_req(vec![
                topic_resource("missing", None),
                topic_resource("bad/name", None),
                broker(&NODE_ID.to_string()),
                broker("8"),
                broker(""),
                DescribeConfigsResource::default()
                    .with_resource_type(99)
                    .with_resource_name(str_bytes("x")),
            ]),
        )
        .await;
    let codes: Vec<i16> = resp.results.iter().map(|r| r.error_code).collect();
    assert_eq!(
        codes,
        vec![
            code(ResponseError::UnknownTopicOrPartition),
            code(ResponseError::InvalidTopicException),
            0,
            code(ResponseError::InvalidRequest),
            0,
            code(ResponseError::InvalidRequest),
        ]
    );
    let ours = &resp.results[2].configs;
    let partitions = entry(ours, "num.partitions");
    assert_eq!(partitions.value.as_deref(), Some("3"));
    assert!(partitions.read_only);
    assert_eq!(partitions.config_source, 4, "STATIC_BROKER_CONFIG");
    assert_eq!(
        entry(ours, "broker.id").value.as_deref(),
        Some(NODE_ID.to_string().as_str())
    );
    assert!(
        resp.results[4].configs.is_empty(),
        "no dynamic defaults set"
    );
    f.stop().await;
}

fn alter_req(
    topic: &str,
    configs: &[(&str, Option<&str>)],
    validate_only: bool,
) -> AlterConfigsRequest {
    AlterConfigsRequest::default()
        .with_validate_only(validate_only)
        .with_resources(vec![
            alter_configs_request::AlterConfigsResource::default()
                .with_resource_type(2)
                .with_resource_name(str_bytes(topic))
                .with_configs(
                    configs
                        .iter()
                        .map(|(k, v)| {
                            alter_configs_request::AlterableConfig::default()
                                .with_name(str_bytes(*k))
                                .with_value(v.map(str_bytes))
                        })
                        .collect(),
                ),
        ])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alter_configs_replaces_the_whole_set() {
    let f = Fixture::start().await;
    f.given_topic(
        "orders",
        1,
        &[("retention.ms", "1000"), ("cleanup.policy", "compact")],
    )
    .await;
    let before = f.configs_of("orders").await;

    let resp = f
        .alter_configs(
            0,
            alter_req("orders", &[("max.message.bytes", Some("2000"))], true),
        )
        .await;
    assert_eq!(resp.responses[0].error_code, 0);
    assert_eq!(
        f.configs_of("orders").await,
        before,
        "validate_only changed"
    );

    let resp = f
        .alter_configs(
            1,
            alter_req(
                "orders",
                &[("max.message.bytes", Some("2000")), ("segment.ms", None)],
                false,
            ),
        )
        .await;
    let r = &resp.responses[0];
    assert_eq!((r.error_code, &r.error_message), (0, &None));
    assert_eq!((r.resource_type, r.resource_name.as_str()), (2, "orders"));
    let after = f.configs_of("orders").await;
    assert_eq!(after["max.message.bytes"], ("2000".to_string(), false));
    assert_eq!(
        after["retention.ms"],
        ("604800000".to_string(), true),
        "a key not given goes back to its default"
    );
    assert_eq!(after["cleanup.policy"], ("delete".to_string(), true));
    assert!(after["segment.ms"].1, "a null value is no value");

    let resp = f
        .alter_configs(
            2,
            alter_req("orders", &[("retention.ms", Some("-5"))], false),
        )
        .await;
    assert_eq!(
        resp.responses[0].error_code,
        code(ResponseError::InvalidConfig)
    );
    assert_eq!(f.configs_of("orders").await, after, "a refused change");

    let resp = f
        .alter_configs(
            2,
            alter_req("missing", &[("retention.ms", Some("5"))], false),
        )
        .await;
    assert_eq!(
        resp.responses[0].error_code,
        code(ResponseError::UnknownTopicOrPartition)
    );
    let mut broker = alter_req(
        &NODE_ID.to_string(),
        &[("num.partitions", Some("5"))],
        false,
    );
    broker.resources[0].resource_type = 4;
    let resp = f.alter_configs(1, broker).await;
    assert_eq!(
        resp.responses[0].error_code,
        code(ResponseError::InvalidConfig),
        "num.partitions is not a dynamic broker config"
    );
    f.stop().await;
}

/// `req` aimed at broker resource `name` (type 4) instead of a topic.
fn at_broker<T>(resources: &mut [T], set_type: impl Fn(&mut T)) {
    for r in resources {
        set_type(r);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dynamic_broker_configs_are_kept_and_described_per_broker_and_for_all() {
    let f = Fixture::start().await;
    let id = NODE_ID.to_string();
    // AlterConfigs on this broker: the whole set of its dynamic configs.
    let mut req = alter_req(
        &id,
        &[
            ("sasl.kerberos.min.time.before.relogin", Some("58000")),
            ("ssl.key.password", Some("hunter2")),
        ],
        false,
    );
    at_broker(&mut req.resources, |r| r.resource_type = 4);
    let resp = f.alter_configs(1, req).await;
    assert_eq!(resp.responses[0].error_code, 0, "{:?}", resp.responses[0]);
    // IncrementalAlterConfigs for every broker (the empty name): APPEND to
    // a list starts from the value in force.
    let mut req = incremental_req(
        "",
        &[
            ("log.cleanup.policy", 2, Some("compact")),
            ("background.threads", 0, Some("9")),
        ],
        false,
    );
    at_broker(&mut req.resources, |r| r.resource_type = 4);
    let resp = f.incremental_alter_configs(1, req).await;
    assert_eq!(resp.responses[0].error_code, 0, "{:?}", resp.responses[0]);
    // Not dynamic in Kafka, not a list, not a broker: refused, nothing kept.
    for (name, op, key, value, error) in [
        (
            id.as_str(),
            0,
            "broker.id",
            "7",
            ResponseError::InvalidConfig,
        ),
        (
            id.as_str(),
            2,
            "background.threads",
            "1",
            ResponseError::InvalidConfig,
        ),
        (
            "broker-1",
            0,
            "background.threads",
            "1",
            ResponseError::InvalidRequest,
        ),
    ] {
        let mut req = incremental_req(name, &[(key, op, Some(value))], false);
        at_broker(&mut req.resources, |r| r.resource_type = 4);
        let resp = f.incremental_alter_configs(1, req).await;
        assert_eq!(
            resp.responses[0].error_code,
            code(error),
            "{key} on {name:?}"
        );
    }

    let broker = |n: &str| {
        DescribeConfigsResource::default()
            .with_resource_type(4)
            .with_resource_name(str_bytes(n))
            .with_configuration_keys(None)
    };
    let resp = f
        .describe_configs(
            4,
            describe_req(vec![broker(&id), broker("")]).with_include_documentation(true),
        )
        .await;
    let ours = &resp.results[0].configs;
    let relogin = entry(ours, "sasl.kerberos.min.time.before.relogin");
    assert_eq!(
        (
            relogin.value.as_deref(),
            relogin.config_source,
            relogin.read_only,
            relogin.config_type
        ),
        (Some("58000"), 2, false, 5),
        "DYNAMIC_BROKER_CONFIG, LONG"
    );
    assert!(
        relogin
            .documentation
            .as_deref()
            .is_some_and(|d| d.starts_with("no effect in Floe"))
    );
    let password = entry(ours, "ssl.key.password");
    assert!(
        password.is_sensitive && password.value.is_none(),
        "{password:?}"
    );
    let policy = entry(ours, "log.cleanup.policy");
    assert_eq!(
        (policy.value.as_deref(), policy.config_source),
        (Some("compact"), 3),
        "DYNAMIC_DEFAULT_BROKER_CONFIG"
    );
    assert_eq!(
        entry(ours, "broker.id").config_source,
        4,
        "static settings stay"
    );
    let all: Vec<&str> = resp.results[1]
        .configs
        .iter()
        .map(|c| c.name.as_str())
        .collect();
    assert_eq!(all, ["background.threads", "log.cleanup.policy"]);
    f.stop().await;
}

fn incremental_req(
    topic: &str,
    ops: &[(&str, i8, Option<&str>)],
    validate_only: bool,
) -> IncrementalAlterConfigsRequest {
    IncrementalAlterConfigsRequest::default()
        .with_validate_only(validate_only)
        .with_resources(vec![
            incremental_alter_configs_request::AlterConfigsResource::default()
                .with_resource_type(2)
                .with_resource_name(str_bytes(topic))
                .with_configs(
                    ops.iter()
                        .map(|(k, op, v)| {
                            incremental_alter_configs_request::AlterableConfig::default()
                                .with_name(str_bytes(*k))
                                .with_config_operation(*op)
                                .with_value(v.map(str_bytes))
                        })
                        .collect(),
                ),
        ])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn incremental_alter_configs_changes_only_the_named_keys() {
    let f = Fixture::start().await;
    f.given_topic(
        "orders",
        1,
        &[("retention.ms", "1000"), ("max.message.bytes", "2000")],
    )
    .await;

    let resp = f
        .incremental_alter_configs(
            0,
            incremental_req(
                "orders",
                &[
                    ("segment.ms", 0, Some("5000")),
                    ("max.message.bytes", 1, None),
                ],
                false,
            ),
        )
        .await;
    let r = &resp.responses[0];
    assert_eq!((r.error_code, &r.error_message), (0, &None));
    let c = f.configs_of("orders").await;
    assert_eq!(c["segment.ms"], ("5000".to_string(), false));
    assert_eq!(c["max.message.bytes"], ("1048588".to_string(), true));
    assert_eq!(
        c["retention.ms"],
        ("1000".to_string(), false),
        "a key not named keeps its value"
    );

    // APPEND starts from the default value.
    let resp = f
        .incremental_alter_configs(
            1,
            incremental_req("orders", &[("cleanup.policy", 2, Some("compact"))], false),
        )
        .await;
    assert_eq!(resp.responses[0].error_code, 0);
    assert_eq!(
        f.configs_of("orders").await["cleanup.policy"].0,
        "delete,compact"
    );
    let resp = f
        .incremental_alter_configs(
            1,
            incremental_req("orders", &[("cleanup.policy", 3, Some("delete"))], false),
        )
        .await;
    assert_eq!(resp.responses[0].error_code, 0);
    assert_eq!(f.configs_of("orders").await["cleanup.policy"].0, "compact");

    let before = f.configs_of("orders").await;
    let refused = [
        (
            incremental_req("orders", &[("retention.ms", 2, Some("5"))], false),
            ResponseError::InvalidConfig,
        ),
        (
            incremental_req("orders", &[("retention.ms", 0, Some("-7"))], false),
            ResponseError::InvalidConfig,
        ),
        (
            incremental_req("orders", &[("retention.ms", 0, None)], false),
            ResponseError::InvalidRequest,
        ),
        (
            incremental_req("orders", &[("retention.ms", 9, Some("5"))], false),
            ResponseError::InvalidRequest,
        ),
        (
            incremental_req(
                "orders",
                &[("retention.ms", 0, Some("5")), ("retention.ms", 1, None)],
                false,
            ),
            ResponseError::InvalidRequest,
        ),
        (
            incremental_req("missing", &[("retention.ms", 0, Some("5"))], false),
            ResponseError::UnknownTopicOrPartition,
        ),
    ];
    for (req, expected) in refused {
        let resp = f.incremental_alter_configs(1, req.clone()).await;
        assert_eq!(
            resp.responses[0].error_code,
            expected.code(),
            "{req:?} -> {resp:?}"
        );
    }
    let resp = f
        .incremental_alter_configs(
            1,
            incremental_req("orders", &[("retention.ms", 0, Some("7"))], true),
        )
        .await;
    assert_eq!(resp.responses[0].error_code, 0);
    assert_eq!(f.configs_of("orders").await, before, "nothing changed");
    f.stop().await;
}

fn grow_req(topic: &str, count: i32, validate_only: bool) -> CreatePartitionsRequest {
    CreatePartitionsRequest::default()
        .with_validate_only(validate_only)
        .with_timeout_ms(30_000)
        .with_topics(vec![
            CreatePartitionsTopic::default()
                .with_name(name(topic))
                .with_count(count)
                .with_assignments(None),
        ])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_partitions_grows_and_never_shrinks() {
    let f = Fixture::start().await;
    f.given_topic("orders", 2, &[]).await;
    let count = async || {
        f.meta
            .describe_topic("orders")
            .await
            .unwrap()
            .partition_count
    };

    let resp = f.create_partitions(0, grow_req("orders", 4, false)).await;
    let r = &resp.results[0];
    assert_eq!((r.name.as_str(), r.error_code), ("orders", 0));
    assert_eq!(r.error_message, None);
    assert_eq!(count().await, 4);

    let resp = f.create_partitions(1, grow_req("orders", 6, true)).await;
    assert_eq!(resp.results[0].error_code, 0);
    assert_eq!(count().await, 4, "validate_only added partitions");

    let mut assigned = grow_req("orders", 5, false);
    // Two assignments for the one partition added.
    assigned.topics[0].assignments = Some(vec![
        CreatePartitionsAssignment::default().with_broker_ids(vec![BrokerId(1)]),
        CreatePartitionsAssignment::default().with_broker_ids(vec![BrokerId(2)]),
    ]);
    for (req, expected) in [
        (
            grow_req("orders", 4, false),
            ResponseError::InvalidPartitions,
        ),
        (
            grow_req("orders", 3, false),
            ResponseError::InvalidPartitions,
        ),
        (
            grow_req("orders", 3, true),
            ResponseError::InvalidPartitions,
        ),
        (
            grow_req("orders", 10_001, false),
            ResponseError::InvalidPartitions,
        ),
        (
            grow_req("missing", 3, false),
            ResponseError::UnknownTopicOrPartition,
        ),
        (assigned, ResponseError::InvalidReplicaAssignment),
    ] {
        let resp = f.create_partitions(2, req.clone()).await;
        assert_eq!(resp.results[0].error_code, expected.code(), "{req:?}");
        assert!(resp.results[0].error_message.is_some());
    }
    assert_eq!(count().await, 4);

    let resp = f.create_partitions(3, grow_req("orders", 5, false)).await;
    assert_eq!(resp.results[0].error_code, 0);
    assert_eq!(count().await, 5);

    // Assignments of the new partitions, consistent: accepted and ignored.
    let mut assigned = grow_req("orders", 7, false);
    assigned.topics[0].assignments = Some(vec![
        CreatePartitionsAssignment::default().with_broker_ids(vec![BrokerId(1), BrokerId(2)]),
        CreatePartitionsAssignment::default().with_broker_ids(vec![BrokerId(2), BrokerId(3)]),
    ]);
    let resp = f.create_partitions(3, assigned).await;
    assert_eq!(resp.results[0].error_code, 0, "{resp:?}");
    assert_eq!(count().await, 7);
    f.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_topics_by_name_and_by_id() {
    let f = Fixture::start().await;
    for t in ["a", "b", "c", "d"] {
        f.given_topic(t, 1, &[]).await;
    }
    let by_names = |names: &[&str]| {
        DeleteTopicsRequest::default()
            .with_topic_names(names.iter().map(|n| name(n)).collect())
            .with_timeout_ms(30_000)
    };

    let resp = f.delete_topics(1, by_names(&["a", "nope"])).await;
    let codes: Vec<(Option<&str>, i16)> = resp
        .responses
        .iter()
        .map(|r| (r.name.as_ref().map(|n| n.as_str()), r.error_code))
        .collect();
    assert_eq!(
        codes,
        vec![
            (Some("a"), 0),
            (Some("nope"), code(ResponseError::UnknownTopicOrPartition))
        ]
    );
    assert!(!f.exists("a").await);

    // The error message arrived with v5.
    let resp = f.delete_topics(4, by_names(&["nope"])).await;
    assert_eq!(resp.responses[0].error_message, None);
    let resp = f.delete_topics(5, by_names(&["nope", "b", "b"])).await;
    assert!(resp.responses[0].error_message.is_some());
    assert_eq!(
        resp.responses[1].error_code,
        code(ResponseError::InvalidRequest),
        "a topic named twice"
    );
    assert!(f.exists("b").await);
    let resp = f.delete_topics(5, by_names(&["b"])).await;
    assert_eq!(
        (
            resp.responses[0].error_code,
            &resp.responses[0].error_message
        ),
        (0, &None)
    );
    assert!(!f.exists("b").await);

    // v6: by id or by name, never both.
    let c_id = f.meta.describe_topic("c").await.unwrap().id.0;
    let d_id = f.meta.describe_topic("d").await.unwrap().id.0;
    let state = |n: Option<&str>, id: Uuid| {
        DeleteTopicState::default()
            .with_name(n.map(name))
            .with_topic_id(id)
    };
    let resp = f
        .delete_topics(
            6,
            DeleteTopicsRequest::default()
                .with_timeout_ms(30_000)
                .with_topics(vec![
                    state(None, c_id),
                    state(Some("d"), Uuid::nil()),
                    state(None, Uuid::new_v4()),
                    state(Some("x"), Uuid::new_v4()),
                ]),
        )
        .await;
    let got: Vec<(Option<&str>, Uuid, i16)> = resp
        .responses
        .iter()
        .map(|r| {
            (
                r.name.as_ref().map(|n| n.as_str()),
                r.topic_id,
                r.error_code,
            )
        })
        .collect();
    assert_eq!(got[0], (Some("c"), c_id, 0));
    assert_eq!(got[1], (Some("d"), d_id, 0));
    assert_eq!(got[2].2, code(ResponseError::UnknownTopicId));
    assert_eq!(got[3].2, code(ResponseError::InvalidRequest));
    assert!(!f.exists("c").await && !f.exists("d").await);
    f.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn describe_cluster_shows_the_proxy_as_the_only_broker() {
    // No metadata call is made: an address nothing listens on will do.
    let meta = MetaClient::new(vec!["127.0.0.1:1".into()]).unwrap();
    let cfg = admin_config();
    let describe = async |version: i16, req: DescribeClusterRequest| -> DescribeClusterResponse {
        match call_with(
            &meta,
            &cfg,
            version,
            ApiKey::DescribeCluster,
            RequestKind::DescribeCluster(req),
        )
        .await
        {
            ResponseKind::DescribeCluster(r) => r,
            other => panic!("{other:?}"),
        }
    };

    let r = describe(0, DescribeClusterRequest::default()).await;
    assert_eq!((r.error_code, &r.error_message), (0, &None));
    assert_eq!(r.cluster_id.as_str(), "floe-test");
    assert_eq!(*r.controller_id, NODE_ID);
    assert_eq!(r.cluster_authorized_operations, i32::MIN);
    let [b] = &r.brokers[..] else { panic!("{r:?}") };
    assert_eq!(
        (*b.broker_id, b.host.as_str(), b.port, &b.rack),
        (NODE_ID, "proxy.example", 9092, &None)
    );

    let r = describe(
        1,
        DescribeClusterRequest::default()
            .with_endpoint_type(1)
            .with_include_cluster_authorized_operations(true),
    )
    .await;
    assert_eq!(r.endpoint_type, 1);
    assert_ne!(r.cluster_authorized_operations, i32::MIN);
    let describe_bit = 1 << 8;
    assert_ne!(
        r.cluster_authorized_operations & describe_bit,
        0,
        "DESCRIBE allowed"
    );

    let r = describe(1, DescribeClusterRequest::default().with_endpoint_type(2)).await;
    assert_eq!(r.error_code, code(ResponseError::MismatchedEndpointType));
    assert!(r.brokers.is_empty());

    let r = describe(
        2,
        DescribeClusterRequest::default().with_include_fenced_brokers(true),
    )
    .await;
    assert_eq!(r.brokers.len(), 1);
    assert!(!r.brokers[0].is_fenced);

    // Not an admin request.
    let other = RequestKind::Metadata(MetadataRequest::default());
    let nodes = KafkaNodes::new(
        Vec::new(),
        crate::nodes::KafkaNode {
            id: NODE_ID,
            host: "h".into(),
            port: 1,
        },
    );
    assert!(
        handle_admin(&meta, &cfg, &nodes, 12, &other)
            .await
            .is_none()
    );
}

#[test]
fn metadata_errors_map_to_the_kafka_errors_clients_expect() {
    use floe_metadata::ids::{BrokerId as MetaBrokerId, Epoch, PartitionKey, TopicId};
    let p = PartitionKey {
        topic: TopicId(Uuid::nil()),
        partition: 0,
    };
    let cases = [
        (
            MetaError::TopicExists("t".into()),
            ResponseError::TopicAlreadyExists,
        ),
        (
            MetaError::UnknownTopic("t".into()),
            ResponseError::UnknownTopicOrPartition,
        ),
        (
            MetaError::UnknownPartition(p),
            ResponseError::UnknownTopicOrPartition,
        ),
        (
            MetaError::InvalidConfig("x".into()),
            ResponseError::InvalidConfig,
        ),
        (
            MetaError::InvalidRequest("x".into()),
            ResponseError::InvalidRequest,
        ),
        (
            MetaError::StaleEpoch {
                partition: p,
                current: Epoch(2),
                given: Epoch(1),
            },
            ResponseError::NotLeaderOrFollower,
        ),
        (
            MetaError::NotOwner {
                what: "p".into(),
                broker: MetaBrokerId(1),
                owner: None,
            },
            ResponseError::NotLeaderOrFollower,
        ),
        (
            MetaError::OffsetMismatch {
                partition: p,
                expected: 1,
                given: 2,
            },
            ResponseError::UnknownServerError,
        ),
        (
            MetaError::UnknownBroker(MetaBrokerId(3)),
            ResponseError::BrokerNotAvailable,
        ),
        (
            MetaError::NotLeader { leader: None },
            ResponseError::RequestTimedOut,
        ),
        (
            MetaError::Unavailable("x".into()),
            ResponseError::RequestTimedOut,
        ),
        (
            MetaError::Storage("x".into()),
            ResponseError::KafkaStorageError,
        ),
        (
            MetaError::NotFound("x".into()),
            ResponseError::ResourceNotFound,
        ),
    ];
    for (e, expected) in cases {
        assert_eq!(kafka_error_for(&e), expected, "{e}");
    }
}

/// DescribeLogDirs asked of two proxies, through each version's wire form.
async fn log_dirs_of(
    meta: &dyn MetaApi,
    nodes: &KafkaNodes,
    me: i32,
    version: i16,
    req: kafka_protocol::messages::DescribeLogDirsRequest,
) -> kafka_protocol::messages::DescribeLogDirsResponse {
    use kafka_protocol::messages::{DescribeLogDirsRequest, DescribeLogDirsResponse};
    use kafka_protocol::protocol::{Decodable, Encodable};
    let mut wire = BytesMut::new();
    req.encode(&mut wire, version).unwrap();
    let req = DescribeLogDirsRequest::decode(&mut wire.freeze(), version).unwrap();
    let resp = log_dirs::describe_log_dirs(meta, nodes, me, version, &req).await;
    let mut wire = BytesMut::new();
    resp.encode(&mut wire, version)
        .unwrap_or_else(|e| panic!("DescribeLogDirs v{version} response does not encode: {e}"));
    DescribeLogDirsResponse::decode(&mut wire.freeze(), version).unwrap()
}

#[tokio::test]
async fn describe_log_dirs_splits_partitions_between_proxies_as_their_leaders() {
    use kafka_protocol::messages::DescribeLogDirsRequest;
    use kafka_protocol::messages::describe_log_dirs_request::DescribableLogDirTopic;
    let f = Fixture::start().await;
    f.given_topic("sized", 6, &[]).await;
    f.given_topic("other", 2, &[]).await;
    let node = |id| crate::nodes::KafkaNode {
        id,
        host: "h".into(),
        port: 1,
    };
    let nodes = KafkaNodes::new(vec![node(7), node(8)], node(7));
    for version in 1..=4 {
        let mut seen = Vec::new();
        for me in [7, 8] {
            // Every topic (null), then the one asked for and one that is not there.
            let all = log_dirs_of(
                f.meta.as_ref(),
                &nodes,
                me,
                version,
                DescribeLogDirsRequest::default().with_topics(None),
            )
            .await;
            assert_eq!(all.results.len(), 1);
            let dir = &all.results[0];
            assert_eq!(dir.error_code, 0);
            assert_eq!(dir.log_dir.as_str(), log_dirs::LOG_DIR);
            if version >= 4 {
                assert_eq!((dir.total_bytes, dir.usable_bytes), (-1, -1));
            }
            let asked = log_dirs_of(
                f.meta.as_ref(),
                &nodes,
                me,
                version,
                DescribeLogDirsRequest::default().with_topics(Some(vec![
                    DescribableLogDirTopic::default()
                        .with_topic(TopicName(str_bytes("sized")))
                        .with_partitions(vec![0, 1, 2, 3, 4, 5, 99]),
                    DescribableLogDirTopic::default()
                        .with_topic(TopicName(str_bytes("missing")))
                        .with_partitions(vec![0]),
                ])),
            )
            .await;
            for t in &asked.results[0].topics {
                assert_eq!(
                    t.name.0.as_str(),
                    "sized",
                    "only existing topics are listed"
                );
                for p in &t.partitions {
                    // No data was written: nothing stored yet.
                    assert_eq!(p.partition_size, 0);
                    let key = floe_metadata::ids::PartitionKey::new(
                        f.meta.describe_topic("sized").await.unwrap().id,
                        p.partition_index as u32,
                    );
                    assert_eq!(nodes.leader(&key).id, me, "a proxy lists what it leads");
                    seen.push(p.partition_index);
                }
            }
            let in_all: usize = dir
                .topics
                .iter()
                .filter(|t| t.name.0.as_str() == "sized")
                .map(|t| t.partitions.len())
                .sum();
            let in_asked: usize = asked.results[0]
                .topics
                .iter()
                .map(|t| t.partitions.len())
                .sum();
            assert_eq!(in_all, in_asked);
        }
        seen.sort();
        assert_eq!(
            seen,
            vec![0, 1, 2, 3, 4, 5],
            "v{version}: each partition once"
        );
    }
    f.stop().await;
}

/// `req` aimed at group `group` (resource type 32) instead of a topic.
fn at_group_incremental(mut req: IncrementalAlterConfigsRequest) -> IncrementalAlterConfigsRequest {
    for r in &mut req.resources {
        r.resource_type = 32;
    }
    req
}

fn group_resource(group: &str) -> DescribeConfigsResource {
    DescribeConfigsResource::default()
        .with_resource_type(32)
        .with_resource_name(str_bytes(group))
        .with_configuration_keys(None)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn group_configs_are_described_altered_and_validated() {
    let f = Fixture::start().await;
    let describe = |version: i16| {
        f.describe_configs(
            version,
            describe_req(vec![group_resource("payments")]).with_include_synonyms(true),
        )
    };
    // A group never altered (and not existing): every key at its default.
    let resp = describe(4).await;
    let r = &resp.results[0];
    assert_eq!((r.error_code, r.resource_type), (0, 32));
    assert_eq!(r.configs.len(), 12);
    let session = entry(&r.configs, "consumer.session.timeout.ms");
    assert_eq!(
        (
            session.value.as_deref(),
            session.config_source,
            session.config_type
        ),
        (Some("45000"), 5, 3)
    );
    assert_eq!(
        entry(&r.configs, "share.auto.offset.reset").config_type,
        2,
        "STRING"
    );

    // SET two keys (validate_only first), then DELETE one.
    let set = incremental_req(
        "payments",
        &[
            ("consumer.session.timeout.ms", 0, Some("50000")),
            ("share.delivery.count.limit", 0, Some("3")),
        ],
        true,
    );
    let resp = f
        .incremental_alter_configs(1, at_group_incremental(set.clone()))
        .await;
    assert_eq!(resp.responses[0].error_code, 0);
    let unchanged = describe(4).await;
    assert!(
        unchanged.results[0]
            .configs
            .iter()
            .all(|c| c.config_source == 5)
    );
    let resp = f
        .incremental_alter_configs(1, at_group_incremental(set.with_validate_only(false)))
        .await;
    let r = &resp.responses[0];
    assert_eq!(
        (r.error_code, r.resource_type, r.resource_name.as_str()),
        (0, 32, "payments")
    );
    let resp = describe(4).await;
    let session = entry(&resp.results[0].configs, "consumer.session.timeout.ms");
    assert_eq!(
        (session.value.as_deref(), session.config_source),
        (Some("50000"), 8)
    );
    let synonyms: Vec<i8> = session.synonyms.iter().map(|s| s.source).collect();
    assert_eq!(synonyms, vec![8, 5], "GROUP_CONFIG, then the default");
    let configs = f.meta.group_configs("payments").await.unwrap();
    assert_eq!(configs.consumer_session_timeout_ms(), Some(50_000));
    assert_eq!(configs.share_delivery_count_limit(), 3);
    let resp = f
        .incremental_alter_configs(
            0,
            at_group_incremental(incremental_req(
                "payments",
                &[("consumer.session.timeout.ms", 1, None)],
                false,
            )),
        )
        .await;
    assert_eq!(resp.responses[0].error_code, 0);
    let configs = f.meta.group_configs("payments").await.unwrap();
    assert_eq!(configs.consumer_session_timeout_ms(), None);
    assert_eq!(configs.share_delivery_count_limit(), 3, "not named: kept");

    // Refused with Kafka's errors, nothing changed.
    for (ops, error) in [
        (
            vec![("consumer.session.timeout.ms", 0, Some("1000"))],
            ResponseError::InvalidConfig,
        ),
        (
            vec![("no.such.key", 0, Some("1"))],
            ResponseError::InvalidConfig,
        ),
        (
            vec![("share.isolation.level", 2, Some("x"))],
            ResponseError::InvalidConfig,
        ),
        (
            vec![("share.auto.offset.reset", 0, None)],
            ResponseError::InvalidRequest,
        ),
    ] {
        let resp = f
            .incremental_alter_configs(
                1,
                at_group_incremental(incremental_req("payments", &ops, false)),
            )
            .await;
        assert_eq!(resp.responses[0].error_code, code(error), "{ops:?}");
    }
    let resp = f
        .incremental_alter_configs(
            1,
            at_group_incremental(incremental_req(
                "",
                &[("share.delivery.count.limit", 0, Some("4"))],
                false,
            )),
        )
        .await;
    assert_eq!(
        resp.responses[0].error_code,
        code(ResponseError::InvalidRequest)
    );
    assert_eq!(f.meta.group_configs("payments").await.unwrap(), configs);

    // AlterConfigs replaces the group's whole set.
    let mut replace = alter_req(
        "payments",
        &[("share.record.lock.duration.ms", Some("20000"))],
        false,
    );
    replace.resources[0].resource_type = 32;
    let resp = f.alter_configs(2, replace).await;
    assert_eq!(resp.responses[0].error_code, 0);
    let configs = f.meta.group_configs("payments").await.unwrap();
    assert_eq!(configs.share_record_lock_duration_ms(), 20_000);
    assert_eq!(
        configs.share_delivery_count_limit(),
        5,
        "back to its default"
    );
    f.stop().await;
}
