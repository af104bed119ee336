//! `kafka-console-producer.sh`: stdin lines to a topic, a value per line or
//! `key SEP value` with `--property parse.key=true`, through `floe
//! produce`'s line reader and producer.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context as _, bail};
use floe_client::{Acks, Compression, Producer, ProducerConfig};

use super::{Arity, Parsed, Spec, bool_prop};
use crate::client_cmd::{GroupLimits, InputArg, LineParser, produce_lines};

const V: Arity = Arity::Value;
const S: Arity = Arity::Switch;
const O: Arity = Arity::Optional;

pub const SPEC: Spec = Spec {
    flags: &[
        ("bootstrap-server", V),
        ("broker-list", V),
        ("topic", V),
        ("property", V),
        ("reader-property", V),
        ("producer-property", V),
        ("producer.config", V),
        ("command-config", V),
        ("request-required-acks", V),
        ("compression-codec", O),
        ("batch-size", V),
        ("timeout", V),
        ("sync", S),
        ("help", S),
    ],
    unsupported: &[
        (
            "line-reader",
            "Floe reads lines as Kafka's default LineMessageReader does",
        ),
        ("reader-config", "give each reader property with --property"),
    ],
};

/// How lines become records and how they are sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProducerSettings {
    pub topic: String,
    /// The key separator with `parse.key=true`.
    pub key_separator: Option<String>,
    pub acks: Acks,
    pub compression: Compression,
    pub idempotent: bool,
    pub linger_ms: u64,
    pub batch_bytes: usize,
    /// The client's own properties (security, and what is not used).
    pub client: BTreeMap<String, String>,
}

fn acks(v: &str) -> anyhow::Result<Acks> {
    match v.trim() {
        "all" | "-1" => Ok(Acks::All),
        "1" => Ok(Acks::Leader),
        "0" => Ok(Acks::None),
        other => bail!("acks={other}: expected all, -1, 1 or 0"),
    }
}

fn compression(v: &str) -> anyhow::Result<Compression> {
    Ok(match v.trim().to_ascii_lowercase().as_str() {
        "none" => Compression::None,
        "gzip" | "" => Compression::Gzip,
        "snappy" => Compression::Snappy,
        "lz4" => Compression::Lz4,
        "zstd" => Compression::Zstd,
        other => bail!("compression {other}: none, gzip, snappy, lz4 or zstd"),
    })
}

/// The settings of the flags, the producer properties read from
/// `--producer.config` files (`files`) first.
pub fn settings(p: &Parsed, files: &BTreeMap<String, String>) -> anyhow::Result<ProducerSettings> {
    let topic = p
        .value("topic")
        .context("Missing required argument \"[topic]\"")?
        .to_owned();
    let mut producer = files.clone();
    for kv in p.values("producer-property") {
        let (k, v) = super::key_value("producer-property", kv)?;
        producer.insert(k, v);
    }
    let mut reader: BTreeMap<String, String> = BTreeMap::new();
    for kv in p
        .values("property")
        .iter()
        .chain(p.values("reader-property"))
    {
        let (k, v) = super::key_value("property", kv)?;
        reader.insert(k, v);
    }
    let mut s = ProducerSettings {
        topic,
        key_separator: None,
        acks: Acks::All,
        compression: Compression::None,
        idempotent: true,
        linger_ms: 100,
        batch_bytes: 1_000_000,
        client: BTreeMap::new(),
    };
    let parse_key = match reader.get("parse.key") {
        Some(v) => bool_prop("parse.key", v)?,
        None => false,
    };
    for (k, v) in &reader {
        match k.as_str() {
            "parse.key" | "key.separator" => {}
            "parse.headers" if bool_prop(k, v)? => {
                bail!("--property parse.headers=true is not supported by Floe's console producer")
            }
            "parse.headers" | "ignore.error" => {}
            other => {
                eprintln!("floe: note: reader property {other} is not used by Floe and is ignored")
            }
        }
    }
    if parse_key {
        let sep = reader.get("key.separator").map_or("\t", String::as_str);
        if sep.is_empty() {
            bail!("key.separator must not be empty");
        }
        s.key_separator = Some(sep.to_owned());
    }
    // The legacy flags first; the producer properties win.
    if let Some(a) = p.value("request-required-acks") {
        s.acks = acks(a)?;
    }
    if let Some(c) = p.value("compression-codec") {
        s.compression = compression(c)?;
    }
    if let Some(ms) = p.number::<u64>("timeout")? {
        s.linger_ms = ms;
    }
    if let Some(b) = p.number::<usize>("batch-size")? {
        s.batch_bytes = b.max(1);
    }
    if p.has("sync") {
        s.linger_ms = 0;
    }
    for (k, v) in &producer {
        match k.as_str() {
            "acks" => s.acks = acks(v)?,
            "compression.type" => s.compression = compression(v)?,
            "enable.idempotence" => s.idempotent = bool_prop(k, v)?,
            "linger.ms" => {
                s.linger_ms = v.trim().parse().with_context(|| format!("linger.ms={v}"))?
            }
            "batch.size" => {
                s.batch_bytes = v
                    .trim()
                    .parse::<usize>()
                    .with_context(|| format!("batch.size={v}"))?
                    .max(1)
            }
            _ => {
                s.client.insert(k.clone(), v.clone());
            }
        }
    }
    if s.acks != Acks::All {
        s.idempotent = false;
    }
    Ok(s)
}

pub async fn run(args: &[String]) -> anyhow::Result<()> {
    let Some(p) = super::parse_or_help("kafka-console-producer.sh", &SPEC, args)? else {
        return Ok(());
    };
    let files: Vec<&String> = p
        .values("producer.config")
        .iter()
        .chain(p.values("command-config"))
        .collect();
    let from_files = super::client_properties(&files, &[])?;
    let s = settings(&p, &from_files)?;
    let client = super::connection(&p, &["broker-list"], &s.client)?
        .connect()
        .await?;
    let config = ProducerConfig {
        acks: s.acks,
        compression: s.compression,
        idempotent: s.idempotent,
        ..ProducerConfig::default()
    };
    let mut producer = Producer::new(client, &s.topic, config).await?;
    let parser = LineParser {
        input: InputArg::Text,
        separator: s.key_separator.map(String::into_bytes),
        empty_as_null: false,
        headers: Vec::new(),
        timestamp: None,
    };
    let limits = GroupLimits {
        max_records: 1000,
        max_bytes: s.batch_bytes,
        linger: Duration::from_millis(s.linger_ms),
    };
    produce_lines(&mut producer, None, parser, limits).await
}
