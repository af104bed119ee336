//! `kafka-console-consumer.sh`: a topic's records on stdout, printed as
//! Kafka's DefaultMessageFormatter prints them (`--property print.key=true`,
//! …), with `Processed a total of N messages` on stderr at the end. Reads
//! with `floe consume`'s consumer; with `--group` it starts at the group's
//! committed offsets and commits what it printed, without joining the
//! group (as `floe consume --group`).

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context as _, bail};
use floe_client::{Consumer, Isolation, Record, StartAt};

use super::{Arity, Parsed, Spec, bool_prop};
use crate::client_cmd::{PrintLimits, print_records};

const V: Arity = Arity::Value;
const S: Arity = Arity::Switch;

pub const SPEC: Spec = Spec {
    flags: &[
        ("bootstrap-server", V),
        ("topic", V),
        ("partition", V),
        ("offset", V),
        ("from-beginning", S),
        ("max-messages", V),
        ("timeout-ms", V),
        ("group", V),
        ("property", V),
        ("formatter-property", V),
        ("consumer-property", V),
        ("consumer.config", V),
        ("command-config", V),
        ("isolation-level", V),
        ("key-deserializer", V),
        ("value-deserializer", V),
        ("formatter", V),
        ("skip-message-on-error", S),
        ("help", S),
    ],
    unsupported: &[
        (
            "include",
            "read one --topic (Floe's console consumer reads one topic)",
        ),
        (
            "whitelist",
            "read one --topic (Floe's console consumer reads one topic)",
        ),
        (
            "formatter-config",
            "give each formatter property with --property",
        ),
        ("enable-systest-events", "Kafka's system tests only"),
    ],
};

/// How records are printed (Kafka's DefaultMessageFormatter properties).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Format {
    pub timestamp: bool,
    pub partition: bool,
    pub offset: bool,
    pub headers: bool,
    pub key: bool,
    pub value: bool,
    pub key_separator: String,
    pub line_separator: String,
    pub headers_separator: String,
    pub null_literal: String,
}

impl Default for Format {
    fn default() -> Self {
        Format {
            timestamp: false,
            partition: false,
            offset: false,
            headers: false,
            key: false,
            value: true,
            key_separator: "\t".into(),
            line_separator: "\n".into(),
            headers_separator: ",".into(),
            null_literal: "null".into(),
        }
    }
}

/// Where and how to read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerSettings {
    pub topic: String,
    pub partition: Option<i32>,
    pub start: StartAt,
    pub group: Option<String>,
    pub max_messages: Option<u64>,
    pub timeout: Option<Duration>,
    pub read_committed: bool,
    pub format: Format,
    /// The client's own properties (security, and what is not used).
    pub client: BTreeMap<String, String>,
}

/// Kafka's deserializers Floe can print with: strings and bytes as they are.
fn plain_deserializer(flag: &str, class: &str) -> anyhow::Result<()> {
    let short = class.rsplit('.').next().unwrap_or(class);
    if matches!(short, "StringDeserializer" | "ByteArrayDeserializer") {
        Ok(())
    } else {
        bail!(
            "{flag} {class}: Floe prints records as their bytes (StringDeserializer or ByteArrayDeserializer)"
        )
    }
}

pub fn settings(p: &Parsed, files: &BTreeMap<String, String>) -> anyhow::Result<ConsumerSettings> {
    let topic = p
        .value("topic")
        .context("Exactly one of --include/--topic is required.")?
        .to_owned();
    if p.has("offset") && !p.has("partition") {
        bail!("The partition is required when offset is specified.");
    }
    if p.has("offset") && p.has("from-beginning") {
        bail!("Options from-beginning and offset cannot be specified together.");
    }
    if p.has("group") && p.has("partition") {
        bail!("Options group and partition cannot be specified together.");
    }
    if let Some(f) = p.value("formatter")
        && !f.ends_with("DefaultMessageFormatter")
    {
        bail!("--formatter {f}: Floe prints with Kafka's DefaultMessageFormatter only");
    }
    for flag in ["key-deserializer", "value-deserializer"] {
        if let Some(c) = p.value(flag) {
            plain_deserializer(&format!("--{flag}"), c)?;
        }
    }
    let mut consumer = files.clone();
    for kv in p.values("consumer-property") {
        let (k, v) = super::key_value("consumer-property", kv)?;
        consumer.insert(k, v);
    }
    let mut format = Format::default();
    for kv in p
        .values("property")
        .iter()
        .chain(p.values("formatter-property"))
    {
        let (k, v) = super::key_value("property", kv)?;
        match k.as_str() {
            "print.timestamp" => format.timestamp = bool_prop(&k, &v)?,
            "print.partition" => format.partition = bool_prop(&k, &v)?,
            "print.offset" => format.offset = bool_prop(&k, &v)?,
            "print.headers" => format.headers = bool_prop(&k, &v)?,
            "print.key" => format.key = bool_prop(&k, &v)?,
            "print.value" => format.value = bool_prop(&k, &v)?,
            "key.separator" => format.key_separator = v,
            "line.separator" => format.line_separator = v,
            "headers.separator" => format.headers_separator = v,
            "null.literal" => format.null_literal = v,
            "key.deserializer" | "value.deserializer" | "headers.deserializer" => {
                plain_deserializer(&k, &v)?
            }
            other => eprintln!(
                "floe: note: formatter property {other} is not used by Floe and is ignored"
            ),
        }
    }
    let mut group = p.value("group").map(str::to_owned);
    let mut reset_earliest = p.has("from-beginning");
    let mut read_committed = false;
    let mut client = BTreeMap::new();
    for (k, v) in &consumer {
        match k.as_str() {
            "group.id" => {
                if group.as_ref().is_some_and(|g| g != v) {
                    bail!(
                        "The group ids provided in different places (directly using '--group', via '--consumer-property', or via '--consumer.config') do not match."
                    );
                }
                group = Some(v.clone());
            }
            "auto.offset.reset" => match v.trim() {
                "earliest" => reset_earliest = true,
                "latest" => {}
                other => bail!("auto.offset.reset={other}: earliest or latest"),
            },
            "isolation.level" => read_committed = isolation(v)?,
            "enable.auto.commit"
            | "auto.commit.interval.ms"
            | "key.deserializer"
            | "value.deserializer" => {}
            _ => {
                client.insert(k.clone(), v.clone());
            }
        }
    }
    if let Some(level) = p.value("isolation-level") {
        read_committed = isolation(level)?;
    }
    let start = match p.value("offset") {
        Some("earliest") => StartAt::Beginning,
        Some("latest") => StartAt::End,
        Some(o) => match o.parse::<i64>() {
            Ok(n) if n >= 0 => StartAt::Offset(n),
            _ => bail!(
                "The provided offset value '{o}' is incorrect. Valid values are 'earliest', 'latest', or a non-negative long."
            ),
        },
        None if reset_earliest => StartAt::Beginning,
        None => StartAt::End,
    };
    let partition = p.number::<i32>("partition")?;
    if partition.is_some_and(|n| n < 0) {
        bail!("--partition must not be negative");
    }
    Ok(ConsumerSettings {
        topic,
        partition,
        start,
        group,
        max_messages: p.number::<u64>("max-messages")?,
        timeout: p.number::<u64>("timeout-ms")?.map(Duration::from_millis),
        read_committed,
        format,
        client,
    })
}

fn isolation(v: &str) -> anyhow::Result<bool> {
    match v.trim() {
        "read_committed" => Ok(true),
        "read_uncommitted" => Ok(false),
        other => bail!("isolation level {other}: read_committed or read_uncommitted"),
    }
}

/// One record as the formatter prints it.
pub fn format_record(out: &mut Vec<u8>, f: &Format, partition: i32, r: &Record) {
    let mut columns: Vec<Vec<u8>> = Vec::new();
    let or_null = |b: &Option<bytes::Bytes>| {
        b.as_ref()
            .map_or_else(|| f.null_literal.as_bytes().to_vec(), |b| b.to_vec())
    };
    if f.timestamp {
        columns.push(format!("CreateTime:{}", r.timestamp).into_bytes());
    }
    if f.partition {
        columns.push(format!("Partition:{partition}").into_bytes());
    }
    if f.offset {
        columns.push(format!("Offset:{}", r.offset).into_bytes());
    }
    if f.headers {
        if r.headers.is_empty() {
            columns.push(b"NO_HEADERS".to_vec());
        } else {
            let mut h = Vec::new();
            for (i, header) in r.headers.iter().enumerate() {
                if i > 0 {
                    h.extend_from_slice(f.headers_separator.as_bytes());
                }
                h.extend_from_slice(&header.key);
                h.push(b':');
                h.extend(or_null(&header.value));
            }
            columns.push(h);
        }
    }
    if f.key {
        columns.push(or_null(&r.key));
    }
    if f.value {
        columns.push(or_null(&r.value));
    }
    if columns.is_empty() {
        return;
    }
    out.extend(columns.join(f.key_separator.as_bytes()));
    out.extend_from_slice(f.line_separator.as_bytes());
}

pub async fn run(args: &[String]) -> anyhow::Result<()> {
    let Some(p) = super::parse_or_help("kafka-console-consumer.sh", &SPEC, args)? else {
        return Ok(());
    };
    let files: Vec<&String> = p
        .values("consumer.config")
        .iter()
        .chain(p.values("command-config"))
        .collect();
    let from_files = super::client_properties(&files, &[])?;
    let s = settings(&p, &from_files)?;
    let mut printed = 0u64;
    let result = consume(&p, &s, &mut printed).await;
    eprintln!("Processed a total of {printed} messages");
    result
}

async fn consume(p: &Parsed, s: &ConsumerSettings, printed: &mut u64) -> anyhow::Result<()> {
    let mut client = super::connection(p, &[], &s.client)?.connect().await?;
    let committed = match &s.group {
        Some(g) => client.committed_offsets(g).await?,
        None => BTreeMap::new(),
    };
    let isolation = if s.read_committed {
        Isolation::ReadCommitted
    } else {
        Isolation::ReadUncommitted
    };
    let mut consumer =
        Consumer::isolated(client, &s.topic, s.partition, s.start, isolation).await?;
    for ((topic, partition), offset) in committed {
        if topic == s.topic {
            consumer.seek(partition, offset);
        }
    }
    let limits = PrintLimits {
        max_messages: s.max_messages,
        idle_limit: s.timeout,
    };
    print_records(
        &mut consumer,
        s.group.as_deref(),
        &limits,
        printed,
        |line, partition, r| format_record(line, &s.format, partition, r),
    )
    .await
}
