//! `floe meta …`: run a metadata node, and talk to a metadata cluster
//! (status, membership, a commit stream for failover checks, a benchmark).

#![allow(clippy::print_stdout)]

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::{Args, Subcommand};
use floe_metadata::MetaError;
use floe_metadata::api::MetaApi;
use floe_metadata::api::client::MetaClient;
use floe_metadata::api::{proto, routes};
use floe_metadata::ids::{BrokerId, EndpointId, ObjectKey, ObjectRef, PartitionKey, TopicId};
use floe_metadata::model::{Commit, CommitRange, NodeKind, ObjectSel, PartitionInfo, TopicInfo};
use floe_metadata::node::{MetaConfig, MetaNode};

#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct MetaArgs {
    #[command(subcommand)]
    command: Option<MetaCommand>,
    #[command(flatten)]
    run: RunArgs,
}

/// Running a node (the default when no subcommand is given).
#[derive(Debug, Args)]
struct RunArgs {
    /// This node's Raft id (1, 2, 3, …).
    #[arg(long, env = "FLOE_META_ID")]
    id: Option<u64>,
    /// Address of the HTTP server (Raft and API).
    #[arg(long, env = "FLOE_META_LISTEN", default_value = "127.0.0.1:7070")]
    listen: SocketAddr,
    /// Address other nodes and clients use, if not the listen address.
    #[arg(long, env = "FLOE_META_ADVERTISE")]
    advertise: Option<String>,
    /// Initial voters as id=host:port, comma-separated (this node included).
    #[arg(long, env = "FLOE_META_PEERS", value_delimiter = ',')]
    peers: Vec<String>,
    /// Where the Raft log and snapshots live.
    #[arg(long, env = "FLOE_META_DATA_DIR", default_value = "./floe-meta")]
    data_dir: PathBuf,
    /// Form a new cluster from --peers (first start of a new cluster only, on one node).
    #[arg(long)]
    init: bool,
    /// Raft log entries between snapshots.
    #[arg(long, env = "FLOE_META_SNAPSHOT_EVERY", default_value_t = 5000)]
    snapshot_every: u64,
}

#[derive(Debug, Args)]
struct ClusterArgs {
    /// Metadata node addresses, comma-separated.
    #[arg(
        long,
        env = "FLOE_META_ADDRS",
        value_delimiter = ',',
        default_value = "127.0.0.1:7070"
    )]
    addrs: Vec<String>,
}

impl ClusterArgs {
    fn client(&self) -> anyhow::Result<MetaClient> {
        Ok(MetaClient::new(self.addrs.clone())?)
    }
}

#[derive(Debug, Subcommand)]
enum MetaCommand {
    /// Leader, term, members and last applied index, as each node sees them.
    Status(ClusterArgs),
    /// Add a voter (it must be running, started without --init).
    AddMember {
        #[command(flatten)]
        cluster: ClusterArgs,
        #[arg(long)]
        id: u64,
        #[arg(long)]
        member_addr: String,
    },
    /// Remove a voter.
    RemoveMember {
        #[command(flatten)]
        cluster: ClusterArgs,
        #[arg(long)]
        id: u64,
    },
    /// Commit a stream of log-index entries to one partition, printing each
    /// acknowledged one (`ack <first> <last> <key>`), riding through leader changes.
    CommitStream {
        #[command(flatten)]
        cluster: ClusterArgs,
        #[arg(long, default_value = "stream")]
        topic: String,
        #[arg(long, default_value_t = 1000)]
        count: u64,
    },
    /// Print a partition's committed index as `entry <first> <last> <key>` lines.
    Index {
        #[command(flatten)]
        cluster: ClusterArgs,
        #[arg(long)]
        topic: String,
        #[arg(long, default_value_t = 0)]
        partition: u32,
    },
    /// Measure commits per second and commit latency through the API.
    Bench {
        #[command(flatten)]
        cluster: ClusterArgs,
        /// Partitions in each commit.
        #[arg(long, default_value_t = 1)]
        partitions_per_commit: u32,
        /// Commits in flight at once.
        #[arg(long, default_value_t = 8)]
        concurrency: u32,
        #[arg(long, default_value_t = 10)]
        seconds: u64,
    },
}

pub async fn run(args: MetaArgs) -> anyhow::Result<()> {
    match args.command {
        None => run_node(args.run).await,
        Some(MetaCommand::Status(c)) => status(&c).await,
        Some(MetaCommand::AddMember {
            cluster,
            id,
            member_addr,
        }) => {
            let client: Arc<dyn MetaApi> = Arc::new(cluster.client()?);
            client
                .call::<routes::AddMember>(proto::AddMemberRequest {
                    id,
                    addr: member_addr,
                })
                .await?;
            println!("member {id} added");
            Ok(())
        }
        Some(MetaCommand::RemoveMember { cluster, id }) => {
            let client: Arc<dyn MetaApi> = Arc::new(cluster.client()?);
            client
                .call::<routes::RemoveMember>(proto::RemoveMemberRequest { id })
                .await?;
            println!("member {id} removed");
            Ok(())
        }
        Some(MetaCommand::CommitStream {
            cluster,
            topic,
            count,
        }) => commit_stream(&cluster.client()?, &topic, count).await,
        Some(MetaCommand::Index {
            cluster,
            topic,
            partition,
        }) => index(&cluster.client()?, &topic, partition).await,
        Some(MetaCommand::Bench {
            cluster,
            partitions_per_commit,
            concurrency,
            seconds,
        }) => {
            bench(
                cluster.client()?,
                partitions_per_commit,
                concurrency,
                seconds,
            )
            .await
        }
    }
}

fn parse_peers(items: &[String]) -> anyhow::Result<BTreeMap<u64, String>> {
    let mut out = BTreeMap::new();
    for item in items {
        let (id, addr) = item
            .split_once('=')
            .with_context(|| format!("peer {item:?}: write id=host:port"))?;
        let id: u64 = id.parse().with_context(|| format!("peer id {id:?}"))?;
        if out.insert(id, addr.to_string()).is_some() {
            bail!("peer id {id} given twice");
        }
    }
    Ok(out)
}

async fn run_node(args: RunArgs) -> anyhow::Result<()> {
    let id = args.id.context("--id is required to run a metadata node")?;
    let mut cfg = MetaConfig::new(id, args.listen, args.data_dir);
    cfg.advertise = args.advertise;
    cfg.peers = parse_peers(&args.peers)?;
    if !cfg.peers.is_empty() && !cfg.peers.contains_key(&id) {
        bail!("--peers must include this node ({id})");
    }
    cfg.init = args.init;
    cfg.snapshot_every = args.snapshot_every.max(10);
    cfg.keep_logs = (cfg.snapshot_every / 5).max(10);
    let node = MetaNode::start(cfg).await?;
    println!("metadata node {id} listening on {}", node.addr);
    crate::shutdown_signal().await;
    println!("metadata node {id} stopping");
    node.shutdown().await;
    Ok(())
}

async fn status(c: &ClusterArgs) -> anyhow::Result<()> {
    let client = c.client()?;
    let mut any = false;
    for addr in &c.addrs {
        match client.status_of(addr).await {
            Ok(s) => {
                any = true;
                let members: Vec<String> = s
                    .members
                    .iter()
                    .map(|m| {
                        format!(
                            "{}={}{}",
                            m.id,
                            m.addr,
                            if m.voter { "" } else { "(learner)" }
                        )
                    })
                    .collect();
                println!(
                    "node {} at {addr}: {} term {} leader {} ({}) last_applied {} last_log {} snapshot {} members [{}]",
                    s.node_id,
                    s.state,
                    s.term,
                    s.leader_id,
                    s.leader_addr,
                    s.last_applied,
                    s.last_log_index,
                    s.snapshot_index,
                    members.join(", ")
                );
            }
            Err(e) => println!("{addr}: unreachable ({e})"),
        }
    }
    if !any {
        bail!("no metadata node answered");
    }
    Ok(())
}

/// Creates `topic` (1 partition) if needed, registers broker 1 and waits
/// until it owns every partition; returns the topic.
async fn prepare(client: &dyn MetaApi, topic: &str, partitions: u32) -> anyhow::Result<TopicInfo> {
    match client.create_topic(topic, partitions, HashMap::new()).await {
        Ok(_) | Err(MetaError::TopicExists(_)) => {}
        Err(e) => return Err(e.into()),
    }
    client
        .register(
            BrokerId(1),
            NodeKind::Broker,
            "127.0.0.1:9092",
            Duration::from_secs(3600),
        )
        .await?;
    let started = Instant::now();
    loop {
        let t = client.describe_topic(topic).await?;
        if t.partitions.iter().all(|p| p.owner == Some(BrokerId(1))) {
            return Ok(t);
        }
        if started.elapsed() > Duration::from_secs(30) {
            bail!("partitions of {topic} were not assigned to broker 1");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn range(topic: TopicId, p: &PartitionInfo, first: i64, last: i64) -> CommitRange {
    CommitRange {
        partition: PartitionKey::new(topic, p.partition),
        epoch: p.epoch,
        first_offset: first,
        last_offset: last,
        max_timestamp: 0,
        object: ObjectSel::New,
        byte_start: 0,
        byte_len: 1,
        producers: vec![],
    }
}

fn test_object(key: String) -> ObjectRef {
    ObjectRef {
        endpoint: EndpointId::new("default"),
        key: ObjectKey::new(key),
        size: 1,
    }
}

async fn commit_stream(client: &dyn MetaApi, topic: &str, count: u64) -> anyhow::Result<()> {
    let t = prepare(client, topic, 1).await?;
    let p = t
        .partitions
        .first()
        .context("topic has no partition")?
        .clone();
    let mut hw = p.high_watermark;
    let mut longest_gap = Duration::ZERO;
    let mut last_ack = Instant::now();
    let mut i = 0u64;
    while i < count {
        let key = format!("stream/{}-{i}", t.id);
        let commit = Commit {
            broker: BrokerId(1),
            object: test_object(key.clone()),
            ranges: vec![range(t.id, &p, hw, hw)],
        };
        match client.commit(&commit).await {
            Ok(r) => {
                println!("ack {hw} {hw} {key}");
                hw = r.high_watermarks.first().map_or(hw + 1, |h| h.1);
                longest_gap = longest_gap.max(last_ack.elapsed());
                last_ack = Instant::now();
                i += 1;
            }
            Err(e) => {
                // The outcome is unknown (the leader may have committed it and
                // died): read the committed end and go on from there.
                eprintln!("commit at {hw} failed ({e}); re-reading the committed end");
                let idx = client
                    .partition_index(PartitionKey::new(t.id, p.partition), 0)
                    .await?;
                let new_hw = idx.info.high_watermark;
                if new_hw > hw {
                    eprintln!("commit at {hw} had landed (unacknowledged)");
                    hw = new_hw;
                    i += 1;
                }
            }
        }
    }
    println!("longest_gap_ms {}", longest_gap.as_millis());
    Ok(())
}

async fn index(client: &dyn MetaApi, topic: &str, partition: u32) -> anyhow::Result<()> {
    let t = client.describe_topic(topic).await?;
    let idx = client
        .partition_index(PartitionKey::new(t.id, partition), 0)
        .await?;
    for e in &idx.entries {
        println!(
            "entry {} {} {}",
            e.first_offset, e.last_offset, e.object.key
        );
    }
    println!("high_watermark {}", idx.info.high_watermark);
    Ok(())
}

fn percentile(sorted: &[Duration], q: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 - 1.0) * q).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

async fn bench(
    client: MetaClient,
    per_commit: u32,
    concurrency: u32,
    seconds: u64,
) -> anyhow::Result<()> {
    if per_commit == 0 || concurrency == 0 {
        bail!("--partitions-per-commit and --concurrency must be at least 1");
    }
    let total = per_commit * concurrency;
    let topic = format!("bench-{per_commit}x{concurrency}-{}", std::process::id());
    let client: Arc<dyn MetaApi> = Arc::new(client);
    let t = prepare(client.as_ref(), &topic, total).await?;
    let t = Arc::new(t);
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let mut workers = Vec::new();
    for w in 0..concurrency {
        let client = client.clone();
        let t = t.clone();
        workers.push(tokio::spawn(async move {
            let mine: Vec<PartitionInfo> =
                t.partitions[(w * per_commit) as usize..((w + 1) * per_commit) as usize].to_vec();
            let mut next = 0i64;
            let mut lat = Vec::new();
            while Instant::now() < deadline {
                let commit = Commit {
                    broker: BrokerId(1),
                    object: test_object(format!("bench/{w}/{next}")),
                    ranges: mine.iter().map(|p| range(t.id, p, next, next)).collect(),
                };
                let started = Instant::now();
                client.commit(&commit).await?;
                lat.push(started.elapsed());
                next += 1;
            }
            Ok::<_, MetaError>(lat)
        }));
    }
    let mut all = Vec::new();
    for w in workers {
        all.extend(w.await??);
    }
    all.sort();
    let n = all.len();
    println!(
        "partitions_per_commit={per_commit} concurrency={concurrency} commits={n} commits_per_s={:.0} partition_ranges_per_s={:.0} p50_ms={:.2} p99_ms={:.2}",
        n as f64 / seconds as f64,
        (n as f64 * per_commit as f64) / seconds as f64,
        percentile(&all, 0.5).as_secs_f64() * 1e3,
        percentile(&all, 0.99).as_secs_f64() * 1e3,
    );
    Ok(())
}
