//! `kafka-delete-records.sh`: move partitions' starts to the offsets of a
//! JSON file (`{"partitions": [{"topic": …, "partition": …, "offset": …}],
//! "version": 1}`; offset -1 is the high watermark).

use std::collections::{BTreeMap, BTreeSet};

use anyhow::{Context as _, bail};

use super::{Arity, Spec};

const V: Arity = Arity::Value;
const S: Arity = Arity::Switch;

pub const SPEC: Spec = Spec {
    flags: &[
        ("bootstrap-server", V),
        ("command-config", V),
        ("offset-json-file", V),
        ("help", S),
    ],
    unsupported: &[],
};

/// The offsets of the JSON file, by topic and partition; a partition named
/// twice is an error, as in Kafka.
pub fn parse_offset_json(text: &str) -> anyhow::Result<BTreeMap<String, BTreeMap<i32, i64>>> {
    let js: serde_json::Value = serde_json::from_str(text)
        .map_err(|e| anyhow::anyhow!("The input string is not a valid JSON: {e}"))?;
    let version = js.get("version").map_or(Some(1), serde_json::Value::as_i64);
    if version != Some(1) {
        bail!("Not supported version field value {}", js["version"]);
    }
    let partitions = js
        .get("partitions")
        .and_then(serde_json::Value::as_array)
        .context("Missing partitions field")?;
    let mut out: BTreeMap<String, BTreeMap<i32, i64>> = BTreeMap::new();
    let mut duplicates = BTreeSet::new();
    for (i, entry) in partitions.iter().enumerate() {
        let topic = entry.get("topic").and_then(serde_json::Value::as_str);
        let partition = entry
            .get("partition")
            .and_then(serde_json::Value::as_i64)
            .and_then(|p| i32::try_from(p).ok());
        let offset = entry.get("offset").and_then(serde_json::Value::as_i64);
        let (Some(topic), Some(partition), Some(offset)) = (topic, partition, offset) else {
            bail!(
                "partitions[{i}]: expected {{\"topic\": STRING, \"partition\": INT, \"offset\": INT}}"
            );
        };
        if out
            .entry(topic.to_owned())
            .or_default()
            .insert(partition, offset)
            .is_some()
        {
            duplicates.insert(format!("{topic}-{partition}"));
        }
    }
    if !duplicates.is_empty() {
        bail!(
            "Offset json file contains duplicate topic partitions: {}",
            duplicates.into_iter().collect::<Vec<_>>().join(",")
        );
    }
    Ok(out)
}

pub async fn run(args: &[String]) -> anyhow::Result<()> {
    let Some(p) = super::parse_or_help("kafka-delete-records.sh", &SPEC, args)? else {
        return Ok(());
    };
    let file = p
        .value("offset-json-file")
        .context("Missing required argument \"[offset-json-file]\"")?;
    let text = std::fs::read_to_string(file).with_context(|| format!("cannot read {file}"))?;
    let offsets = parse_offset_json(&text)?;
    let props =
        super::client_properties(&p.values("command-config").iter().collect::<Vec<_>>(), &[])?;
    let mut client = super::connection(&p, &[], &props)?.connect().await?;
    println!("Executing records delete operation");
    let mut results: Vec<(String, Result<i64, String>)> = Vec::new();
    for (topic, before) in &offsets {
        match client.delete_records(topic, before).await {
            Ok(low) => {
                for p in before.keys() {
                    let r = low.get(p).copied().ok_or_else(|| "no answer".to_owned());
                    results.push((format!("{topic}-{p}"), r));
                }
            }
            Err(e) => {
                for p in before.keys() {
                    results.push((format!("{topic}-{p}"), Err(e.to_string())));
                }
            }
        }
    }
    println!("Records delete operation completed:");
    let mut failed = false;
    for (tp, r) in &results {
        match r {
            Ok(low) => println!("partition: {tp}\tlow_watermark: {low}"),
            Err(e) => {
                failed = true;
                println!("partition: {tp}\terror: {e}");
            }
        }
    }
    if failed {
        bail!("some partitions' records were not deleted");
    }
    Ok(())
}
