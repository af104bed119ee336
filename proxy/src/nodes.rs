//! The Kafka brokers a client is shown: the proxies.
//!
//! Brokers are an internal detail; to a Kafka client every proxy is a
//! broker. In a cluster each `floe proxy` registers with the metadata
//! service as a node of kind proxy (its id and advertised Kafka address)
//! and renews a lease as brokers do ([`crate::registration`]); the cluster
//! view lists the live ones. Every answer that names brokers (Metadata,
//! FindCoordinator, DescribeCluster, broker configs) names them, from
//! [`KafkaNodes`]: the same view gives every proxy the same list, so every
//! proxy names the same leader for a partition and the same coordinator
//! for a group, spread over all of them so that client connections
//! balance. Any proxy serves any partition (it routes to the owner), so
//! the choice is only about where clients connect.
//!
//! A proxy killed without leaving stays in the view until its lease runs
//! out; meanwhile every proxy leaves out the peers whose Kafka port
//! refused a connection at their last probe ([`crate::peers`]), so that
//! clients are sent elsewhere at once. Leaving a live proxy out by mistake
//! costs nothing but balance: any proxy serves any partition.
//!
//! `floe standalone` has one proxy, in the process: it lists only itself
//! ([`SelfNode::alone`]).
//!
//! A proxy with several listeners ([`crate::listeners`]) shows each client
//! the brokers at the addresses of the listener the client came in on:
//! the connection answers each request within [`LISTENER`], and
//! [`SelfNode::node`] and [`SelfNode::nodes`] read it.

use std::collections::HashSet;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, Mutex};

use floe_metadata::model::{NodeKind, NodeState};
use floe_metadata::watch::ClusterSnapshot;
use floe_storage::PartitionKey;

tokio::task_local! {
    /// The name of the listener the request being answered came in on.
    pub static LISTENER: Arc<str>;
}

/// The listener of the request being answered, if any.
fn current_listener() -> Option<Arc<str>> {
    LISTENER.try_with(|l| l.clone()).ok()
}

/// One broker as clients are told of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KafkaNode {
    pub id: i32,
    pub host: String,
    pub port: i32,
}

impl KafkaNode {
    /// A node at `addr` (`HOST:PORT`); `None` if it is not one.
    pub fn parse(id: i32, addr: &str) -> Option<KafkaNode> {
        let (host, port) = addr.rsplit_once(':')?;
        let port = port.parse::<u16>().ok()?;
        let host = host.trim_start_matches('[').trim_end_matches(']');
        (!host.is_empty()).then(|| KafkaNode {
            id,
            host: host.to_string(),
            port: i32::from(port),
        })
    }
}

/// The brokers of one answer: never empty, sorted by id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KafkaNodes {
    nodes: Vec<KafkaNode>,
}

impl KafkaNodes {
    /// `nodes` sorted by id (one per id); `me` alone if it is empty.
    pub fn new(mut nodes: Vec<KafkaNode>, me: KafkaNode) -> KafkaNodes {
        nodes.sort_by_key(|n| n.id);
        nodes.dedup_by_key(|n| n.id);
        if nodes.is_empty() {
            nodes.push(me);
        }
        KafkaNodes { nodes }
    }

    pub fn all(&self) -> &[KafkaNode] {
        &self.nodes
    }

    pub fn get(&self, id: i32) -> Option<&KafkaNode> {
        self.nodes.iter().find(|n| n.id == id)
    }

    /// The node named the leader of a partition: a topic's partitions go
    /// round the nodes from a place its id chooses, so that each topic is
    /// spread evenly and topics do not all start on the same node.
    pub fn leader(&self, partition: &PartitionKey) -> &KafkaNode {
        let start = partition.topic.0.as_u64_pair().0;
        self.pick(start.wrapping_add(u64::from(partition.partition)))
    }

    /// The node named the coordinator of the groups of a coordinator shard.
    pub fn coordinator(&self, shard: u32) -> &KafkaNode {
        self.pick(u64::from(shard))
    }

    /// The node named the controller: the lowest id.
    pub fn controller(&self) -> &KafkaNode {
        &self.nodes[0]
    }

    fn pick(&self, n: u64) -> &KafkaNode {
        let len = self.nodes.len() as u64;
        &self.nodes[(n % len) as usize]
    }
}

/// One advertised listener of this proxy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Advertised {
    pub listener: String,
    pub host: String,
    pub port: i32,
}

/// This proxy as a Kafka broker.
#[derive(Debug)]
pub struct SelfNode {
    /// Its advertised listeners, never empty; the first is the default
    /// (for a request that came in on none, such as a peer probe).
    advertised: Vec<Advertised>,
    /// The id it is registered under (it may change when it registers
    /// again after its registration expired); fixed when alone.
    id: AtomicI32,
    /// Listed alone, whatever the view says (`floe standalone`).
    alone: bool,
    /// Peers whose Kafka port refused a connection at their last probe.
    refused: Mutex<HashSet<i32>>,
    /// When the peers were last probed (one probe at a time, [`crate::peers`]).
    pub(crate) probed_at: tokio::sync::Mutex<Option<tokio::time::Instant>>,
}

impl SelfNode {
    /// The only proxy: every answer names it alone, with this id.
    pub fn alone(id: i32, host: String, port: i32) -> SelfNode {
        SelfNode {
            advertised: vec![Advertised {
                listener: String::new(),
                host,
                port,
            }],
            id: AtomicI32::new(id),
            alone: true,
            refused: Mutex::default(),
            probed_at: Default::default(),
        }
    }

    /// One of the registered proxies, known by `id` until it registers again.
    pub fn registered(id: i32, host: String, port: i32) -> SelfNode {
        SelfNode {
            advertised: vec![Advertised {
                listener: String::new(),
                host,
                port,
            }],
            id: AtomicI32::new(id),
            alone: false,
            refused: Mutex::default(),
            probed_at: Default::default(),
        }
    }

    /// This proxy with several advertised listeners (the first is the
    /// default); none leaves it as it was.
    pub fn with_listeners(mut self, advertised: Vec<Advertised>) -> SelfNode {
        if !advertised.is_empty() {
            self.advertised = advertised;
        }
        self
    }

    /// The listener the current request came in on, or the default.
    fn listener(&self) -> &Advertised {
        let current = current_listener();
        current
            .and_then(|name| {
                self.advertised
                    .iter()
                    .find(|a| a.listener.eq_ignore_ascii_case(&name))
            })
            .unwrap_or(&self.advertised[0])
    }

    pub fn id(&self) -> i32 {
        self.id.load(Ordering::Relaxed)
    }

    pub fn set_id(&self, id: i32) {
        self.id.store(id, Ordering::Relaxed);
    }

    /// Whether this proxy is listed alone (nothing to probe).
    pub fn is_alone(&self) -> bool {
        self.alone
    }

    /// The result of a probe: the peers whose port refused connections.
    pub fn set_refused(&self, ids: HashSet<i32>) {
        *self.refused.lock().unwrap_or_else(|p| p.into_inner()) = ids;
    }

    /// This proxy at the address of the current request's listener.
    pub fn node(&self) -> KafkaNode {
        let a = self.listener();
        KafkaNode {
            id: self.id(),
            host: a.host.clone(),
            port: a.port,
        }
    }

    /// The brokers to name in an answer given the cluster view: the live
    /// proxies but those whose port refused the last probe, and this one
    /// while the view does not know it yet (it was just registered, again);
    /// this one alone if no other is (the view has not arrived, or the
    /// metadata service lost it).
    pub fn nodes(&self, snap: &ClusterSnapshot) -> KafkaNodes {
        let me = self.node();
        if self.alone {
            return KafkaNodes::new(Vec::new(), me);
        }
        let refused = self
            .refused
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let proxies = snap.nodes.iter().filter(|n| n.kind == NodeKind::Proxy);
        let mut known = false;
        let mut nodes = Vec::new();
        let listener = &self.listener().listener;
        for n in proxies {
            let Ok(id) = i32::try_from(n.id.0) else {
                continue;
            };
            known |= id == me.id;
            if n.state != NodeState::Live || (id != me.id && refused.contains(&id)) {
                continue;
            }
            let Some(addr) = crate::listeners::advertised_for(&n.addr, listener) else {
                // That proxy has no listener of this name.
                continue;
            };
            match KafkaNode::parse(id, addr) {
                Some(k) => nodes.push(k),
                None => {
                    tracing::debug!(id, addr = %n.addr, "proxy with an address that is not HOST:PORT")
                }
            }
        }
        if !known {
            nodes.push(me.clone());
        }
        KafkaNodes::new(nodes, me)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::collections::HashMap;

    use floe_metadata::ids::{BrokerId, TopicId};
    use floe_metadata::model::NodeInfo;

    use super::*;

    fn proxy(id: u32, port: u16, state: NodeState) -> NodeInfo {
        NodeInfo {
            id: BrokerId(id),
            kind: NodeKind::Proxy,
            addr: format!("10.0.0.{id}:{port}"),
            state,
        }
    }

    fn snap(nodes: Vec<NodeInfo>) -> ClusterSnapshot {
        ClusterSnapshot {
            nodes,
            ..Default::default()
        }
    }

    #[test]
    fn the_live_proxies_are_the_brokers_and_brokers_are_not() {
        let me = SelfNode::registered(1002, "10.0.0.2".into(), 9092);
        let s = snap(vec![
            NodeInfo {
                id: BrokerId(1),
                kind: NodeKind::Broker,
                addr: "10.0.1.1:9192".into(),
                state: NodeState::Live,
            },
            proxy(1003, 9092, NodeState::Live),
            proxy(1002, 9092, NodeState::Live),
            proxy(1001, 9092, NodeState::Dead),
            proxy(1004, 9092, NodeState::Draining),
        ]);
        let ids: Vec<i32> = me.nodes(&s).all().iter().map(|n| n.id).collect();
        assert_eq!(ids, [1002, 1003]);
        assert_eq!(me.nodes(&s).controller().id, 1002);
        assert_eq!(me.nodes(&s).get(1003).unwrap().host, "10.0.0.1003");
    }

    #[test]
    fn a_proxy_lists_itself_until_the_view_knows_it_and_when_nothing_is_live() {
        let me = SelfNode::registered(1005, "h".into(), 1);
        let s = snap(vec![proxy(1003, 9092, NodeState::Live)]);
        let ids: Vec<i32> = me.nodes(&s).all().iter().map(|n| n.id).collect();
        assert_eq!(ids, [1003, 1005]);
        // Known but draining (it is stopping): not listed, unless nothing else is.
        let s = snap(vec![
            proxy(1003, 9092, NodeState::Live),
            proxy(1005, 9092, NodeState::Draining),
        ]);
        let ids: Vec<i32> = me.nodes(&s).all().iter().map(|n| n.id).collect();
        assert_eq!(ids, [1003]);
        let s = snap(vec![proxy(1005, 9092, NodeState::Dead)]);
        assert_eq!(me.nodes(&s).all(), [me.node()]);
        // A peer whose port refused the last probe is left out.
        let s = snap(vec![
            proxy(1003, 9092, NodeState::Live),
            proxy(1005, 9092, NodeState::Live),
        ]);
        me.set_refused([1003].into());
        let ids: Vec<i32> = me.nodes(&s).all().iter().map(|n| n.id).collect();
        assert_eq!(ids, [1005]);
        me.set_refused(HashSet::new());
        // Alone (standalone): itself whatever the view.
        let alone = SelfNode::alone(1, "h".into(), 1);
        let s = snap(vec![proxy(1003, 9092, NodeState::Live)]);
        assert_eq!(alone.nodes(&s).all(), [alone.node()]);
    }

    #[test]
    fn leadership_and_coordinators_are_spread_evenly_and_the_same_everywhere() {
        let s = snap(
            (1001..=1003)
                .map(|i| proxy(i, 9092, NodeState::Live))
                .collect(),
        );
        // Two proxies with the same view name the same leaders.
        let a = SelfNode::registered(1001, "10.0.0.1".into(), 9092).nodes(&s);
        let b = SelfNode::registered(1003, "10.0.0.3".into(), 9092).nodes(&s);
        assert_eq!(a, b);
        for t in 0..20u128 {
            let topic = TopicId(uuid::Uuid::from_u128(
                t.wrapping_mul(0x9e37_79b9_7f4a_7c15_f39c),
            ));
            let mut per: HashMap<i32, usize> = HashMap::new();
            for p in 0..12 {
                let key = PartitionKey::new(topic, p);
                assert_eq!(a.leader(&key), b.leader(&key));
                *per.entry(a.leader(&key).id).or_default() += 1;
            }
            assert_eq!(per.len(), 3, "{per:?}");
            assert!(per.values().all(|&n| n == 4), "{per:?}");
        }
        let mut per: HashMap<i32, usize> = HashMap::new();
        for shard in 0..16 {
            *per.entry(a.coordinator(shard).id).or_default() += 1;
        }
        assert!(per.values().all(|&n| (5..=6).contains(&n)), "{per:?}");
    }

    #[tokio::test]
    async fn each_listener_shows_the_addresses_of_its_own_name() {
        let adv = |l: &str, h: &str, p: i32| Advertised {
            listener: l.into(),
            host: h.into(),
            port: p,
        };
        let me = SelfNode::registered(1001, "10.0.0.1".into(), 9092).with_listeners(vec![
            adv("INTERNAL", "10.0.0.1", 9092),
            adv("EXTERNAL", "kafka-1.example.com", 9094),
        ]);
        let s = snap(vec![
            NodeInfo {
                id: BrokerId(1001),
                kind: NodeKind::Proxy,
                addr: "INTERNAL://10.0.0.1:9092,EXTERNAL://kafka-1.example.com:9094".into(),
                state: NodeState::Live,
            },
            NodeInfo {
                id: BrokerId(1002),
                kind: NodeKind::Proxy,
                addr: "INTERNAL://10.0.0.2:9092,EXTERNAL://kafka-2.example.com:9094".into(),
                state: NodeState::Live,
            },
            // A proxy with one listener serves every listener name.
            proxy(1003, 9092, NodeState::Live),
            // A proxy without an EXTERNAL listener is not shown on it.
            NodeInfo {
                id: BrokerId(1004),
                kind: NodeKind::Proxy,
                addr: "INTERNAL://10.0.0.4:9092".into(),
                state: NodeState::Live,
            },
        ]);
        let on = |listener: &'static str| {
            let me = &me;
            let s = &s;
            LISTENER.sync_scope(Arc::from(listener), || {
                let all: Vec<(i32, String, i32)> = me
                    .nodes(s)
                    .all()
                    .iter()
                    .map(|n| (n.id, n.host.clone(), n.port))
                    .collect();
                (me.node(), all)
            })
        };
        let (node, all) = on("EXTERNAL");
        assert_eq!(
            (node.host.as_str(), node.port),
            ("kafka-1.example.com", 9094)
        );
        assert_eq!(
            all,
            [
                (1001, "kafka-1.example.com".to_string(), 9094),
                (1002, "kafka-2.example.com".to_string(), 9094),
                (1003, "10.0.0.1003".to_string(), 9092),
            ]
        );
        let (node, all) = on("INTERNAL");
        assert_eq!((node.host.as_str(), node.port), ("10.0.0.1", 9092));
        assert_eq!(all.len(), 4);
        // Outside any request (a peer probe): the first listener.
        assert_eq!(me.node().port, 9092);
        assert_eq!(me.nodes(&s).get(1002).unwrap().host, "10.0.0.2");
    }

    #[test]
    fn addresses_parse_with_ipv6_and_refuse_junk() {
        assert_eq!(
            KafkaNode::parse(1, "[::1]:9092"),
            Some(KafkaNode {
                id: 1,
                host: "::1".into(),
                port: 9092
            })
        );
        assert_eq!(KafkaNode::parse(1, "nohost"), None);
        assert_eq!(KafkaNode::parse(1, ":9092"), None);
        assert_eq!(KafkaNode::parse(1, "h:99999"), None);
    }
}
