//! `kafka-get-offsets.sh` (Kafka's GetOffsetShell): the offset at a time
//! (`latest` by default) of each partition, as `topic:partition:offset`.

use std::collections::BTreeMap;

use anyhow::bail;
use floe_client::{EARLIEST, LATEST};

use super::pattern::Pattern;
use super::{Arity, Spec, is_internal};

const V: Arity = Arity::Value;
const S: Arity = Arity::Switch;

pub const SPEC: Spec = Spec {
    flags: &[
        ("bootstrap-server", V),
        ("broker-list", V),
        ("command-config", V),
        ("topic", V),
        ("partitions", V),
        ("time", V),
        ("exclude-internal-topics", S),
        ("help", S),
    ],
    unsupported: &[(
        "topic-partitions",
        "give --topic (a pattern) and --partitions",
    )],
};

/// What `--time` asks for: `latest`/-1, `earliest`/-2, or ms since the
/// epoch.
pub fn parse_time(s: &str) -> anyhow::Result<i64> {
    match s.trim() {
        "latest" | "-1" => Ok(LATEST),
        "earliest" | "-2" => Ok(EARLIEST),
        "max-timestamp" | "-3" | "earliest-local" | "-4" | "latest-tiered" | "-5" => {
            bail!("--time {s}: not supported by Floe (latest/-1, earliest/-2 or a timestamp in ms)")
        }
        t => match t.parse::<i64>() {
            Ok(ms) if ms >= 0 => Ok(ms),
            _ => bail!(
                "Malformed time argument {s}. Please use -1 or latest / -2 or earliest, or a \
                 specified long format timestamp"
            ),
        },
    }
}

/// `--partitions 0,2`.
pub fn parse_partitions(s: &str) -> anyhow::Result<Vec<i32>> {
    s.split(',')
        .map(|p| match p.trim().parse::<i32>() {
            Ok(n) if n >= 0 => Ok(n),
            _ => bail!(
                "--partitions expects a comma separated list of numeric partition ids, got {s:?}"
            ),
        })
        .collect()
}

pub async fn run(args: &[String]) -> anyhow::Result<()> {
    let Some(p) = super::parse_or_help("kafka-get-offsets.sh", &SPEC, args)? else {
        return Ok(());
    };
    let at = parse_time(p.value("time").unwrap_or("latest"))?;
    let only = p.value("partitions").map(parse_partitions).transpose()?;
    let pattern = p
        .value("topic")
        .map(Pattern::new)
        .transpose()
        .map_err(anyhow::Error::msg)?;
    let props =
        super::client_properties(&p.values("command-config").iter().collect::<Vec<_>>(), &[])?;
    let mut client = super::connection(&p, &["broker-list"], &props)?
        .connect()
        .await?;
    let topics: Vec<String> = client
        .list_topics()
        .await?
        .into_iter()
        .map(|t| t.name)
        .filter(|n| !(p.has("exclude-internal-topics") && is_internal(n)))
        .filter(|n| pattern.as_ref().is_none_or(|pat| pat.matches(n)))
        .collect();
    // Sorted as Kafka sorts them: by `topic-partition`.
    let mut out: BTreeMap<String, String> = BTreeMap::new();
    let mut matched = 0usize;
    for topic in &topics {
        let ids: Vec<i32> = client
            .topic(topic)
            .await?
            .partition_ids()
            .into_iter()
            .filter(|id| only.as_ref().is_none_or(|o| o.contains(id)))
            .collect();
        if ids.is_empty() {
            continue;
        }
        matched += ids.len();
        for (partition, offset) in client.list_offsets(topic, &ids, at).await? {
            // -1: no record at or after the time.
            if offset >= 0 {
                out.insert(
                    format!("{topic}-{partition}"),
                    format!("{topic}:{partition}:{offset}"),
                );
            }
        }
    }
    if matched == 0 {
        bail!("Could not match any topic-partitions with the specified filters");
    }
    for line in out.values() {
        println!("{line}");
    }
    Ok(())
}
