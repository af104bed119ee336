//! `floe meta …`: run a metadata node, and talk to a metadata cluster
//! (status, membership, a partition's committed index).
//!
//! The drivers that write made-up commits (`commit-stream`, `bench`) are in
//! the developers' `floe-dev` binary (`devtools/`), not here.

#![allow(clippy::print_stdout)]

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::{Context, bail};
use clap::{Args, Subcommand};
use floe_metadata::api::MetaApi;
use floe_metadata::api::client::MetaClient;
use floe_metadata::api::{proto, routes};
use floe_metadata::ids::PartitionKey;
use floe_metadata::node::{MetaConfig, MetaNode};

use crate::ports_file::BoundPorts;

#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct MetaArgs {
    #[command(subcommand)]
    command: Option<MetaCommand>,
    #[command(flatten)]
    run: RunArgs,
}

impl MetaArgs {
    /// Whether this runs a node (no subcommand) rather than a tool.
    pub fn runs_a_node(&self) -> bool {
        self.command.is_none()
    }
}

/// Running a node (the default when no subcommand is given).
#[derive(Debug, Args)]
struct RunArgs {
    #[command(flatten)]
    pub config: crate::roles::ConfigFileArg,
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
    /// Form a new cluster from --peers (first start of a new cluster only, on
    /// one node; a node that is already part of a cluster ignores it).
    #[arg(long, env = "FLOE_META_INIT")]
    init: bool,
    /// Join an existing cluster through any of these members (comma-separated
    /// addresses): the node asks to be added as a voter at its advertised
    /// address (the bound one when --listen has port 0) instead of forming a
    /// cluster. Already a member (a restart), it does nothing more.
    #[arg(long, env = "FLOE_META_JOIN", value_delimiter = ',', conflicts_with_all = ["init", "peers"])]
    join: Vec<String>,
    /// Once the listener is bound, write its address here as JSON (`{"meta": …}`).
    #[arg(long, env = "FLOE_PORTS_FILE")]
    ports_file: Option<PathBuf>,
    /// Raft log entries between snapshots.
    #[arg(long, env = "FLOE_META_SNAPSHOT_EVERY", default_value_t = 5000)]
    snapshot_every: u64,
    /// Idempotent producer state not written for this long is dropped from
    /// the metadata (Kafka's producer.id.expiration.ms; 0: never).
    #[arg(
        long,
        env = "FLOE_PRODUCER_ID_EXPIRATION_MS",
        default_value_t = 86_400_000
    )]
    producer_id_expiration_ms: u64,
    #[command(flatten)]
    tuning: crate::roles::MetaTuning,
    #[command(flatten)]
    http: crate::roles::HttpTuning,
}

/// How a tool reaches a metadata cluster (`floe meta status`, `floe
/// cluster nodes`, `floe storage orphans`).
#[derive(Debug, Args)]
pub(crate) struct ClusterArgs {
    /// Metadata node addresses, comma-separated.
    #[arg(
        long,
        env = "FLOE_META_ADDRS",
        value_delimiter = ',',
        default_value = "127.0.0.1:7070"
    )]
    pub(crate) addrs: Vec<String>,
}

impl ClusterArgs {
    pub(crate) fn client(&self) -> anyhow::Result<MetaClient> {
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
    /// Print a partition's committed index as `entry <first> <last> <key>` lines.
    Index {
        #[command(flatten)]
        cluster: ClusterArgs,
        #[arg(long)]
        topic: String,
        #[arg(long, default_value_t = 0)]
        partition: u32,
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
            cluster
                .client()?
                .call::<routes::AddMember>(&proto::AddMemberRequest {
                    id,
                    addr: member_addr,
                })
                .await?;
            println!("member {id} added");
            Ok(())
        }
        Some(MetaCommand::RemoveMember { cluster, id }) => {
            cluster
                .client()?
                .call::<routes::RemoveMember>(&proto::RemoveMemberRequest { id })
                .await?;
            println!("member {id} removed");
            Ok(())
        }
        Some(MetaCommand::Index {
            cluster,
            topic,
            partition,
        }) => index(&cluster.client()?, &topic, partition).await,
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
    cfg.advertise = args.advertise.clone();
    cfg.peers = parse_peers(&args.peers)?;
    if !cfg.peers.is_empty() && !cfg.peers.contains_key(&id) {
        bail!("--peers must include this node ({id})");
    }
    cfg.init = args.init;
    cfg.joining = !args.join.is_empty();
    cfg.snapshot_every = args.snapshot_every.max(10);
    cfg.keep_logs = (cfg.snapshot_every / 5).max(10);
    cfg.producer_expiration = crate::roles::producer_expiration(args.producer_id_expiration_ms);
    args.tuning.apply(&mut cfg);
    // max_body_bytes is set from --meta-max-request-bytes by MetaNode::start.
    cfg.http = args.http.limits(cfg.max_rpc_bytes);
    let node = MetaNode::start(cfg).await?;
    let advertised = args
        .advertise
        .clone()
        .unwrap_or_else(|| node.addr.to_string());
    BoundPorts::new()
        .with("meta", node.addr)
        .publish("meta", args.ports_file.as_deref())?;
    println!("metadata node {id} listening on {}", node.addr);
    let joining = if args.join.is_empty() {
        None
    } else {
        let client = MetaClient::new(args.join.clone())?;
        Some(tokio::spawn(join(client, id, advertised)))
    };
    // A node whose Raft stopped on a fatal error (its log could not be
    // written: a disk full, an fsync that failed) exits with an error, so
    // that it is restarted once its disk is fixed instead of lingering.
    let fatal = tokio::select! {
        () = crate::shutdown_signal() => None,
        e = node.raft_stopped() => Some(e),
    };
    if let Some(e) = &fatal {
        tracing::error!(error = %e, "Raft stopped on a fatal error (its log could not be written: disk full, fsync failed?); exiting");
    }
    println!("metadata node {id} stopping");
    if let Some(task) = joining {
        task.abort();
    }
    node.shutdown().await;
    match fatal {
        Some(e) => bail!("metadata node {id}: Raft stopped: {e}"),
        None => Ok(()),
    }
}

/// Asks the cluster `client` reaches to add this node (`id` at `addr`) as a
/// voter, until it is one; returns at once when it already is (a restart).
async fn join(client: MetaClient, id: u64, addr: String) {
    let mut pause = std::time::Duration::from_millis(200);
    loop {
        match client.status_of(&addr).await {
            Ok(s) if s.members.iter().any(|m| m.id == id && m.voter) => {
                tracing::info!(node = id, "a voter of the metadata cluster");
                return;
            }
            _ => {}
        }
        match client
            .call::<routes::AddMember>(&proto::AddMemberRequest {
                id,
                addr: addr.clone(),
            })
            .await
        {
            Ok(_) => {
                tracing::info!(node = id, %addr, "joined the metadata cluster");
                return;
            }
            Err(e) => tracing::warn!(node = id, error = %e, "cannot join the metadata cluster yet"),
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(std::time::Duration::from_secs(5));
    }
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
