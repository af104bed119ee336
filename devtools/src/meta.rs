//! `floe-dev meta …`: drivers of a metadata cluster through its API, as a
//! broker would drive it: a stream of commits that rides through leader
//! changes (the failover tests), and a commit benchmark (`bench/meta.sh`).
//!
//! Both register broker 1 at 127.0.0.1:9092 with a one-hour lease so that
//! the controller assigns it the partitions they commit to.

#![allow(clippy::print_stdout)]

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::{Args, Subcommand};
use floe_metadata::MetaError;
use floe_metadata::api::MetaApi;
use floe_metadata::api::client::MetaClient;
use floe_metadata::ids::{
    BrokerId, EndpointId, ObjectKey, ObjectRef, PartitionKey, Revision, TopicId,
};
use floe_metadata::model::{
    Commit, CommitRange, NodeKind, NodeState, ObjectSel, PartitionInfo, TopicInfo,
};

/// The fake broker the drivers commit as.
const FAKE_BROKER: BrokerId = BrokerId(1);
const FAKE_BROKER_ADDR: &str = "127.0.0.1:9092";
const FAKE_BROKER_LEASE: Duration = Duration::from_secs(3600);

#[derive(Debug, Args)]
pub struct ClusterArgs {
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
    fn client(&self) -> anyhow::Result<Arc<dyn MetaApi>> {
        Ok(Arc::new(MetaClient::new(self.addrs.clone())?))
    }
}

#[derive(Debug, Subcommand)]
pub enum MetaCommand {
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
    /// Measure commits per second and commit latency through the API.
    Bench {
        #[command(flatten)]
        cluster: ClusterArgs,
        /// Partitions in each commit.
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
        partitions_per_commit: u32,
        /// Commits in flight at once.
        #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..))]
        concurrency: u32,
        #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..))]
        seconds: u64,
    },
}

pub async fn run(cmd: MetaCommand) -> anyhow::Result<()> {
    match cmd {
        MetaCommand::CommitStream {
            cluster,
            topic,
            count,
        } => commit_stream(cluster.client()?.as_ref(), &topic, count).await,
        MetaCommand::Bench {
            cluster,
            partitions_per_commit,
            concurrency,
            seconds,
        } => {
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

/// Refuses to go on when a real broker is live in the cluster: the fake
/// broker would take partitions over from it and commit made-up data to
/// real topics.
async fn refuse_real_brokers(client: &dyn MetaApi) -> anyhow::Result<()> {
    let view = client
        .watch(Revision(0), Duration::from_millis(1))
        .await
        .context("reading the cluster's nodes")?;
    let real: Vec<String> = view
        .nodes
        .iter()
        .filter(|n| n.kind == NodeKind::Broker && n.state != NodeState::Dead)
        .filter(|n| !(n.id == FAKE_BROKER && n.addr == FAKE_BROKER_ADDR))
        .map(|n| format!("broker {} at {}", n.id.0, n.addr))
        .collect();
    if !real.is_empty() {
        bail!(
            "this cluster has live brokers ({}): floe-dev registers a fake broker that \
             would take their partitions over; point it at a throw-away metadata cluster",
            real.join(", ")
        );
    }
    Ok(())
}

/// Creates `topic` with `partitions` partitions if needed, registers the
/// fake broker and waits until it owns every partition; returns the topic.
/// Refused when the cluster has real brokers.
async fn prepare(client: &dyn MetaApi, topic: &str, partitions: u32) -> anyhow::Result<TopicInfo> {
    refuse_real_brokers(client).await?;
    match client.create_topic(topic, partitions, HashMap::new()).await {
        Ok(_) | Err(MetaError::TopicExists(_)) => {}
        Err(e) => return Err(e.into()),
    }
    client
        .register(
            FAKE_BROKER,
            NodeKind::Broker,
            FAKE_BROKER_ADDR,
            FAKE_BROKER_LEASE,
        )
        .await?;
    let started = Instant::now();
    loop {
        let t = client.describe_topic(topic).await?;
        if t.partitions.iter().all(|p| p.owner == Some(FAKE_BROKER)) {
            return Ok(t);
        }
        if started.elapsed() > Duration::from_secs(30) {
            bail!("partitions of {topic} were not assigned to broker {FAKE_BROKER}");
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

/// An object the drivers name in their commits (never written).
fn fake_object(key: String) -> ObjectRef {
    ObjectRef {
        endpoint: EndpointId::new("default"),
        key: ObjectKey::new(key),
        size: 1,
    }
}

async fn commit_stream(client: &dyn MetaApi, topic: &str, count: u64) -> anyhow::Result<()> {
    let t = prepare(client, topic, 1).await?;
    let p = *t.partitions.first().context("topic has no partition")?;
    let mut hw = p.high_watermark;
    let mut longest_gap = Duration::ZERO;
    let mut last_ack = Instant::now();
    let mut i = 0u64;
    while i < count {
        let key = format!("stream/{}-{i}", t.id);
        let commit = Commit {
            broker: FAKE_BROKER,
            object: fake_object(key.clone()),
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

/// The `q` quantile (0..=1) of sorted durations, nearest rank; zero for none.
fn percentile(sorted: &[Duration], q: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 - 1.0) * q.clamp(0.0, 1.0)).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

async fn bench(
    client: Arc<dyn MetaApi>,
    per_commit: u32,
    concurrency: u32,
    seconds: u64,
) -> anyhow::Result<()> {
    let total = per_commit
        .checked_mul(concurrency)
        .context("--partitions-per-commit times --concurrency is too large")?;
    let topic = format!("bench-{per_commit}x{concurrency}-{}", std::process::id());
    let t = prepare(client.as_ref(), &topic, total).await?;
    let t = Arc::new(t);
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let mut workers = Vec::new();
    for w in 0..concurrency {
        let client = client.clone();
        let t = t.clone();
        let mine: Vec<PartitionInfo> = t
            .partitions
            .iter()
            .skip((w * per_commit) as usize)
            .take(per_commit as usize)
            .cloned()
            .collect();
        workers.push(tokio::spawn(async move {
            let mut next = 0i64;
            let mut lat = Vec::new();
            while Instant::now() < deadline {
                let commit = Commit {
                    broker: FAKE_BROKER,
                    object: fake_object(format!("bench/{w}/{next}")),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_pick_the_nearest_rank() {
        let ms = |n: u64| Duration::from_millis(n);
        let sorted: Vec<Duration> = (1..=100).map(ms).collect();
        assert_eq!(percentile(&sorted, 0.5), ms(51));
        assert_eq!(percentile(&sorted, 0.99), ms(99));
        assert_eq!(percentile(&sorted, 1.0), ms(100));
        assert_eq!(percentile(&sorted, 0.0), ms(1));
        assert_eq!(percentile(&[], 0.5), Duration::ZERO);
        assert_eq!(percentile(&[ms(7)], 0.99), ms(7));
    }
}
