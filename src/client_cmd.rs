//! `floe produce` and `floe consume`: records between stdin/stdout and a
//! topic over the Kafka protocol, like a small kcat.
//!
//! `produce` reads lines (optionally `key SEP value`), groups them (at most
//! `--batch-records` records or `--batch-bytes` bytes, or what was read when
//! stdin paused for `--linger-ms`), and sends one Produce request per group,
//! with one record batch (magic 2) per partition. Keyed records go to the
//! partition Kafka's default partitioner picks (murmur2 of the key);
//! unkeyed ones to one partition per group, in turn.
//!
//! `consume` looks the partitions up (Metadata), finds where to start
//! (ListOffsets), and fetches until `--max-messages` records were printed or
//! nothing new came for `--timeout-ms`.

#![allow(clippy::print_stdout)]

use std::collections::BTreeMap;
use std::io::Write;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, bail};
use bytes::Bytes;
use clap::{Args, ValueEnum};
use floe_storage::batch::{BatchError, BatchIter, Compression};
use floe_storage::records::{
    BatchBuilder, DEFAULT_MAX_DECOMPRESSED, Record, RecordSpec, decode_records,
};
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{BrokerId, FetchRequest, ListOffsetsRequest, ProduceRequest};

use crate::kafka_client::{BootstrapArgs, ClientError, KafkaClient, check_code, topic_name};

/// Attempts of one Produce request while the broker answers retriable errors.
const PRODUCE_ATTEMPTS: u32 = 10;
/// Bytes asked per partition and per Fetch.
const PARTITION_MAX_BYTES: i32 = 4 * 1024 * 1024;
const FETCH_MAX_BYTES: i32 = 32 * 1024 * 1024;
/// Longest wait of one Fetch on the broker.
const FETCH_MAX_WAIT: Duration = Duration::from_millis(500);
/// ListOffsets timestamps meaning "the first offset" and "the next offset".
const EARLIEST: i64 = -2;
const LATEST: i64 = -1;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum AcksArg {
    /// Wait until the record is durable (acks=-1).
    All,
    /// Wait for the partition's leader (acks=1).
    #[value(name = "1")]
    Leader,
    /// Do not wait for an answer (acks=0).
    #[value(name = "0")]
    None,
}

impl AcksArg {
    fn kafka(self) -> i16 {
        match self {
            Self::All => -1,
            Self::Leader => 1,
            Self::None => 0,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum CompressionArg {
    None,
    Gzip,
    Snappy,
    Lz4,
    Zstd,
}

impl From<CompressionArg> for Compression {
    fn from(c: CompressionArg) -> Self {
        match c {
            CompressionArg::None => Compression::None,
            CompressionArg::Gzip => Compression::Gzip,
            CompressionArg::Snappy => Compression::Snappy,
            CompressionArg::Lz4 => Compression::Lz4,
            CompressionArg::Zstd => Compression::Zstd,
        }
    }
}

#[derive(Debug, Args)]
pub struct ProduceArgs {
    #[command(flatten)]
    conn: BootstrapArgs,
    /// The topic to write to.
    topic: String,
    /// Write every record to this partition (default: by key, or in turn).
    #[arg(long, value_parser = clap::value_parser!(i32).range(0..))]
    partition: Option<i32>,
    /// Split each line at the first SEP into key and value (a line without
    /// SEP is an error). Without it, a line is a value with no key.
    #[arg(long, value_name = "SEP")]
    key_separator: Option<String>,
    /// Which acknowledgement to wait for.
    #[arg(long, value_enum, default_value_t = AcksArg::All)]
    acks: AcksArg,
    /// Compression of the record batches.
    #[arg(long, value_enum, default_value_t = CompressionArg::None)]
    compression: CompressionArg,
    /// Most records per Produce request.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..))]
    batch_records: u32,
    /// Most key and value bytes per Produce request (a larger line goes
    /// alone). The default keeps a batch under Kafka's default
    /// `max.message.bytes` (1 MiB).
    #[arg(long, default_value_t = 1_000_000)]
    batch_bytes: usize,
    /// Send what was read once no new line came for this long, in ms.
    #[arg(long, default_value_t = 100)]
    linger_ms: u64,
}

#[derive(Debug, Args)]
pub struct ConsumeArgs {
    #[command(flatten)]
    conn: BootstrapArgs,
    /// The topic to read.
    topic: String,
    /// Read only this partition (default: all).
    #[arg(long, value_parser = clap::value_parser!(i32).range(0..))]
    partition: Option<i32>,
    /// Where to start in each partition: `beginning`, `end`, an offset, or
    /// `-N` for N records before the end (write `--from=-N`).
    #[arg(long, default_value = "beginning", value_parser = parse_start)]
    from: Start,
    /// Stop after printing this many records.
    #[arg(long)]
    max_messages: Option<u64>,
    /// Stop after this many milliseconds without new records (default:
    /// 2000, or never with --follow).
    #[arg(long)]
    timeout_ms: Option<u64>,
    /// Keep waiting for new records (until Ctrl-C, or --timeout-ms if given).
    #[arg(long)]
    follow: bool,
    /// Prefix each line with `partition:offset` and a tab.
    #[arg(long)]
    print_offsets: bool,
}

// ---------------------------------------------------------------------------
// Partitioning

/// Kafka's `Utils.murmur2`: MurmurHash2 (32-bit) with seed `0x9747b28c`,
/// the hash its default partitioner applies to record keys.
pub fn murmur2(data: &[u8]) -> i32 {
    const SEED: u32 = 0x9747_b28c;
    const M: u32 = 0x5bd1_e995;
    const R: u32 = 24;
    // Kafka mixes in the length as a Java int.
    let mut h = SEED ^ (data.len() as u32);
    let mut words = data.chunks_exact(4);
    for w in &mut words {
        let mut k = u32::from_le_bytes([w[0], w[1], w[2], w[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M);
        h ^= k;
    }
    let tail = words.remainder();
    if !tail.is_empty() {
        for (i, b) in tail.iter().enumerate() {
            h ^= u32::from(*b) << (8 * i);
        }
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    h as i32
}

/// The partition of a record: `fixed` if given; else, for a key, Kafka's
/// `toPositive(murmur2(key)) % partitions`; else `round_robin`.
/// `partitions` must be at least 1.
pub fn choose_partition(
    key: Option<&[u8]>,
    fixed: Option<i32>,
    partitions: i32,
    round_robin: i32,
) -> i32 {
    match (fixed, key) {
        (Some(p), _) => p,
        (None, Some(key)) => (murmur2(key) & 0x7fff_ffff) % partitions.max(1),
        (None, None) => round_robin,
    }
}

// ---------------------------------------------------------------------------
// Input lines

/// A line without its end: `\n`, and a `\r` before it.
pub fn trim_line_end(line: &[u8]) -> &[u8] {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    line.strip_suffix(b"\r").unwrap_or(line)
}

/// Why an input line cannot be produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LineError {
    separator: String,
}

impl std::fmt::Display for LineError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "no key separator {:?} in the line", self.separator)
    }
}

impl std::error::Error for LineError {}

/// Splits a line at the first `separator` into key and value; without a
/// separator the whole line is the value, with no key.
pub fn split_line(
    line: &[u8],
    separator: Option<&[u8]>,
) -> Result<(Option<Vec<u8>>, Vec<u8>), LineError> {
    let Some(sep) = separator.filter(|s| !s.is_empty()) else {
        return Ok((None, line.to_vec()));
    };
    match line.windows(sep.len()).position(|w| w == sep) {
        Some(at) => Ok((Some(line[..at].to_vec()), line[at + sep.len()..].to_vec())),
        None => Err(LineError {
            separator: String::from_utf8_lossy(sep).into_owned(),
        }),
    }
}

// ---------------------------------------------------------------------------
// produce

/// One input record, with the time it was read.
#[derive(Debug)]
struct InputRecord {
    key: Option<Vec<u8>>,
    value: Vec<u8>,
    timestamp_ms: i64,
}

/// Records read but not sent yet.
#[derive(Debug, Default)]
struct Pending {
    records: Vec<InputRecord>,
    bytes: usize,
}

impl InputRecord {
    fn size(&self) -> usize {
        self.key.as_ref().map_or(0, Vec::len) + self.value.len()
    }
}

impl Pending {
    /// Whether `record` must wait for the next group: it would take this one
    /// over `max_bytes` (a record alone always fits).
    fn overflows_with(&self, record: &InputRecord, max_bytes: usize) -> bool {
        !self.records.is_empty() && self.bytes.saturating_add(record.size()) > max_bytes
    }

    fn push(&mut self, record: InputRecord) {
        self.bytes += record.size();
        self.records.push(record);
    }
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// What was written to one partition.
#[derive(Debug, Default)]
struct PartitionStats {
    records: u64,
    first_offset: Option<i64>,
    last_offset: Option<i64>,
}

/// Record batches ready to send, by partition: the bytes and the record count.
type Batches = BTreeMap<i32, (Bytes, i64)>;

#[derive(Debug)]
struct Producer {
    client: KafkaClient,
    topic: String,
    version: i16,
    acks: i16,
    compression: Compression,
    partitions: i32,
    fixed: Option<i32>,
    next_round_robin: i32,
    requests: u64,
    stats: BTreeMap<i32, PartitionStats>,
}

pub async fn produce(args: ProduceArgs) -> anyhow::Result<()> {
    let separator = args.key_separator.map(String::into_bytes);
    if separator.as_ref().is_some_and(Vec::is_empty) {
        bail!("--key-separator must not be empty");
    }
    let mut client = args.conn.connect().await?;
    let partitions = client.topic(&args.topic).await?.partitions.len();
    let partitions = i32::try_from(partitions).context("too many partitions")?;
    if partitions == 0 {
        bail!("topic {} has no partitions", args.topic);
    }
    if let Some(p) = args.partition
        && p >= partitions
    {
        bail!(
            "topic {} has {partitions} partition(s); there is no partition {p}",
            args.topic
        );
    }
    let version = client.version::<ProduceRequest>()?;
    let mut producer = Producer {
        client,
        topic: args.topic,
        version,
        acks: args.acks.kafka(),
        compression: args.compression.into(),
        partitions,
        fixed: args.partition,
        next_round_robin: 0,
        requests: 0,
        stats: BTreeMap::new(),
    };
    let limits = GroupLimits {
        max_records: args.batch_records as usize,
        max_bytes: args.batch_bytes,
        linger: Duration::from_millis(args.linger_ms),
    };
    let result = producer.run(separator, limits).await;
    eprint!("{}", producer.summary());
    result
}

impl Producer {
    async fn run(&mut self, separator: Option<Vec<u8>>, limits: GroupLimits) -> anyhow::Result<()> {
        // A thread reads and parses the lines (tokio's stdin needs a feature
        // this crate does not enable) and hands them over a channel.
        let (lines_tx, mut lines_rx) = tokio::sync::mpsc::channel(4096);
        std::thread::spawn(move || {
            read_lines(std::io::stdin().lock(), separator.as_deref(), &lines_tx);
        });
        let mut pending = Pending::default();
        loop {
            let next = if pending.records.is_empty() {
                lines_rx.recv().await
            } else {
                match tokio::time::timeout(limits.linger, lines_rx.recv()).await {
                    Ok(next) => next,
                    Err(_idle) => {
                        self.send(std::mem::take(&mut pending)).await?;
                        continue;
                    }
                }
            };
            let record = match next {
                None => break,
                Some(Ok(record)) => record,
                Some(Err(e)) => {
                    // What was read before the bad line is still sent.
                    if !pending.records.is_empty() {
                        self.send(std::mem::take(&mut pending)).await?;
                    }
                    return Err(e);
                }
            };
            if pending.overflows_with(&record, limits.max_bytes) {
                self.send(std::mem::take(&mut pending)).await?;
            }
            pending.push(record);
            if pending.records.len() >= limits.max_records {
                self.send(std::mem::take(&mut pending)).await?;
            }
        }
        if !pending.records.is_empty() {
            self.send(pending).await?;
        }
        if self.acks == 0 {
            // Nothing is answered with acks=0; a Metadata round trip makes
            // sure the broker has read every request before the exit.
            self.client.metadata(Some(&[self.topic.as_str()])).await?;
        }
        Ok(())
    }

    /// Sends one group of records: one batch per partition, one request.
    async fn send(&mut self, pending: Pending) -> anyhow::Result<()> {
        let round_robin = self.next_round_robin;
        self.next_round_robin = (self.next_round_robin + 1) % self.partitions;
        let mut by_partition: BTreeMap<i32, Vec<InputRecord>> = BTreeMap::new();
        for r in pending.records {
            let p = choose_partition(r.key.as_deref(), self.fixed, self.partitions, round_robin);
            by_partition.entry(p).or_default().push(r);
        }
        let compression = self.compression;
        // Compression is CPU work: keep it off the async threads.
        let batches = tokio::task::spawn_blocking(move || build_batches(by_partition, compression))
            .await
            .context("the batch-building task failed")?
            .context("building record batches")?;
        self.produce_with_retries(batches).await
    }

    async fn produce_with_retries(&mut self, mut batches: Batches) -> anyhow::Result<()> {
        let mut backoff = Duration::from_millis(100);
        for attempt in 1..=PRODUCE_ATTEMPTS {
            let req = self.request(&batches);
            self.requests += 1;
            if self.acks == 0 {
                self.client.send_only(self.version, req).await?;
                for (p, (_, n)) in batches {
                    self.stats.entry(p).or_default().records += n as u64;
                }
                return Ok(());
            }
            let resp = self.client.send(self.version, req).await?;
            let mut retriable: Option<ClientError> = None;
            let answers = resp
                .responses
                .iter()
                .filter(|t| t.name.0.as_str() == self.topic)
                .flat_map(|t| t.partition_responses.iter());
            for answer in answers {
                let Some((_, count)) = batches.get(&answer.index) else {
                    continue;
                };
                let count = *count;
                let topic = &self.topic;
                let checked = check_code(answer.error_code, answer.error_message.as_ref(), || {
                    format!("producing to {topic} partition {}", answer.index)
                });
                match checked {
                    Ok(()) => {
                        batches.remove(&answer.index);
                        let s = self.stats.entry(answer.index).or_default();
                        s.records += count as u64;
                        if answer.base_offset >= 0 {
                            s.first_offset.get_or_insert(answer.base_offset);
                            s.last_offset = Some(answer.base_offset + count - 1);
                        }
                    }
                    Err(e) if e.is_retriable() => retriable = Some(e),
                    Err(e) => return Err(e.into()),
                }
            }
            if batches.is_empty() {
                return Ok(());
            }
            if attempt == PRODUCE_ATTEMPTS {
                if let Some(e) = retriable {
                    return Err(anyhow::Error::new(e)
                        .context(format!("still failing after {attempt} attempts")));
                }
                let missing: Vec<String> = batches.keys().map(i32::to_string).collect();
                bail!(
                    "the broker did not answer for partition(s) {} of {}",
                    missing.join(", "),
                    self.topic
                );
            }
            tracing::debug!(attempt, ?backoff, "retrying produce");
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(Duration::from_secs(1));
        }
        Ok(())
    }

    fn request(&self, batches: &Batches) -> ProduceRequest {
        let partition_data = batches
            .iter()
            .map(|(p, (records, _))| {
                PartitionProduceData::default()
                    .with_index(*p)
                    .with_records(Some(records.clone()))
            })
            .collect();
        ProduceRequest::default()
            .with_acks(self.acks)
            .with_timeout_ms(self.client.timeout_ms())
            .with_topic_data(vec![
                TopicProduceData::default()
                    .with_name(topic_name(&self.topic))
                    .with_partition_data(partition_data),
            ])
    }

    fn summary(&self) -> String {
        let total: u64 = self.stats.values().map(|s| s.records).sum();
        let mut out = format!(
            "produced {total} record(s) to topic {} in {} request(s)\n",
            self.topic, self.requests
        );
        for (p, s) in &self.stats {
            let offsets = match (s.first_offset, s.last_offset) {
                (Some(first), Some(last)) => format!("offsets {first}..={last}"),
                _ if self.acks == 0 => "offsets unknown (acks=0)".to_owned(),
                _ => "offsets unknown".to_owned(),
            };
            out.push_str(&format!(
                "  partition {p}: {} record(s), {offsets}\n",
                s.records
            ));
        }
        out
    }
}

/// When a group of records is sent.
#[derive(Debug, Clone, Copy)]
struct GroupLimits {
    max_records: usize,
    max_bytes: usize,
    linger: Duration,
}

/// Reads lines until the end of `input` and sends them as records; a line
/// that cannot be parsed is sent as an error and ends the reading.
fn read_lines(
    mut input: impl std::io::BufRead,
    separator: Option<&[u8]>,
    lines_tx: &tokio::sync::mpsc::Sender<anyhow::Result<InputRecord>>,
) {
    let mut line = Vec::new();
    let mut line_no = 0u64;
    loop {
        line.clear();
        let item = match input.read_until(b'\n', &mut line) {
            Ok(0) => return,
            Ok(_) => {
                line_no += 1;
                split_line(trim_line_end(&line), separator)
                    .map(|(key, value)| InputRecord {
                        key,
                        value,
                        timestamp_ms: now_ms(),
                    })
                    .map_err(|e| anyhow::Error::new(e).context(format!("stdin line {line_no}")))
            }
            Err(e) => Err(anyhow::Error::new(e).context("reading stdin")),
        };
        let failed = item.is_err();
        // A closed channel means producing stopped: nothing left to do.
        if lines_tx.blocking_send(item).is_err() || failed {
            return;
        }
    }
}

/// Encodes one batch per partition; timestamps are the times lines were read.
fn build_batches(
    by_partition: BTreeMap<i32, Vec<InputRecord>>,
    compression: Compression,
) -> Result<Batches, BatchError> {
    let mut out = Batches::new();
    for (p, records) in by_partition {
        let base = records.iter().map(|r| r.timestamp_ms).min().unwrap_or(0);
        let mut builder = BatchBuilder::new(0, base);
        let count = records.len() as i64;
        for r in records {
            builder.push(RecordSpec::new(r.key, Some(r.value), r.timestamp_ms - base));
        }
        out.insert(p, (builder.build(compression)?, count));
    }
    Ok(out)
}

// ---------------------------------------------------------------------------
// consume

/// Where `consume` starts in each partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Start {
    Beginning,
    End,
    /// This offset.
    Offset(i64),
    /// This many records before the end (not before the beginning).
    BeforeEnd(i64),
}

pub fn parse_start(s: &str) -> Result<Start, String> {
    match s {
        "beginning" | "earliest" => Ok(Start::Beginning),
        "end" | "latest" => Ok(Start::End),
        _ => match s.parse::<i64>() {
            Ok(n) if n >= 0 => Ok(Start::Offset(n)),
            Ok(n) => Ok(Start::BeforeEnd(n.checked_neg().unwrap_or(i64::MAX))),
            Err(_) => Err(format!(
                "expected beginning, end, an offset or -N, got {s:?}"
            )),
        },
    }
}

pub async fn consume(args: ConsumeArgs) -> anyhow::Result<()> {
    let mut client = args.conn.connect().await?;
    let topic = client.topic(&args.topic).await?;
    let mut partitions: Vec<i32> = topic.partitions.iter().map(|p| p.partition_index).collect();
    partitions.sort_unstable();
    if let Some(p) = args.partition {
        if !partitions.contains(&p) {
            bail!(
                "topic {} has {} partition(s); there is no partition {p}",
                args.topic,
                partitions.len()
            );
        }
        partitions = vec![p];
    }
    if partitions.is_empty() {
        bail!("topic {} has no partitions", args.topic);
    }
    let mut positions = start_positions(&mut client, &args.topic, &partitions, args.from).await?;
    let idle_limit = match (args.follow, args.timeout_ms) {
        (_, Some(ms)) => Some(Duration::from_millis(ms)),
        (true, None) => None,
        (false, None) => Some(Duration::from_millis(2000)),
    };
    let version = client.version::<FetchRequest>()?;
    let mut out = std::io::BufWriter::new(std::io::stdout());
    let shutdown = crate::shutdown_signal();
    tokio::pin!(shutdown);
    let mut last_data = Instant::now();
    let mut printed = 0u64;
    let mut round = 0usize;
    'fetch: loop {
        if args.max_messages.is_some_and(|m| printed >= m) {
            break;
        }
        let wait = match idle_limit {
            None => FETCH_MAX_WAIT,
            Some(limit) => {
                let left = limit.saturating_sub(last_data.elapsed());
                if left.is_zero() {
                    break;
                }
                left.min(FETCH_MAX_WAIT)
            }
        };
        let req = fetch_request(&args.topic, &positions, round, wait);
        round = round.wrapping_add(1);
        let resp = tokio::select! {
            r = client.send(version, req) => r?,
            _ = &mut shutdown => break,
        };
        check_code(resp.error_code, None, || format!("fetching {}", args.topic))?;
        let mut fetched = Vec::new();
        let mut retriable = None;
        for t in resp.responses {
            for p in t.partitions {
                let Some(&position) = positions.get(&p.partition_index) else {
                    continue;
                };
                let topic = &args.topic;
                let checked = check_code(p.error_code, None, || {
                    format!(
                        "fetching {topic} partition {} at offset {position}",
                        p.partition_index
                    )
                });
                match (checked, p.records) {
                    (Err(e), _) if e.is_retriable() => retriable = Some(e),
                    (Err(e), _) => return Err(e.into()),
                    (Ok(()), Some(records)) if !records.is_empty() => {
                        fetched.push((p.partition_index, records, position));
                    }
                    (Ok(()), _) => {}
                }
            }
        }
        let decoded = tokio::task::spawn_blocking(move || {
            fetched
                .into_iter()
                .map(|(p, records, position)| {
                    decode_partition(&records, position)
                        .map(|(recs, next)| (p, recs, next))
                        .with_context(|| format!("decoding partition {p} from offset {position}"))
                })
                .collect::<anyhow::Result<Vec<_>>>()
        })
        .await
        .context("the decoding task failed")??;
        for (p, records, next) in decoded {
            if positions.insert(p, next).is_some_and(|old| next > old) {
                last_data = Instant::now();
            }
            for r in records {
                if args.max_messages.is_some_and(|m| printed >= m) {
                    break 'fetch;
                }
                if !write_record(&mut out, p, &r, args.print_offsets)? {
                    return Ok(());
                }
                printed += 1;
            }
        }
        if !flush(&mut out)? {
            return Ok(());
        }
        if let Some(e) = retriable {
            tracing::debug!(error = %e, "retrying fetch");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    flush(&mut out)?;
    Ok(())
}

/// The first offset to read in each partition.
async fn start_positions(
    client: &mut KafkaClient,
    topic: &str,
    partitions: &[i32],
    start: Start,
) -> anyhow::Result<BTreeMap<i32, i64>> {
    Ok(match start {
        Start::Beginning => list_offsets(client, topic, partitions, EARLIEST).await?,
        Start::End => list_offsets(client, topic, partitions, LATEST).await?,
        Start::Offset(n) => partitions.iter().map(|p| (*p, n)).collect(),
        Start::BeforeEnd(n) => {
            let first = list_offsets(client, topic, partitions, EARLIEST).await?;
            let end = list_offsets(client, topic, partitions, LATEST).await?;
            end.into_iter()
                .map(|(p, e)| {
                    let low = first.get(&p).copied().unwrap_or(0);
                    (p, e.saturating_sub(n).max(low))
                })
                .collect()
        }
    })
}

async fn list_offsets(
    client: &mut KafkaClient,
    topic: &str,
    partitions: &[i32],
    timestamp: i64,
) -> anyhow::Result<BTreeMap<i32, i64>> {
    let version = client.version::<ListOffsetsRequest>()?;
    let req = ListOffsetsRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_topics(vec![
            ListOffsetsTopic::default()
                .with_name(topic_name(topic))
                .with_partitions(
                    partitions
                        .iter()
                        .map(|p| {
                            ListOffsetsPartition::default()
                                .with_partition_index(*p)
                                .with_timestamp(timestamp)
                        })
                        .collect(),
                ),
        ]);
    let resp = client.send(version, req).await?;
    let mut offsets = BTreeMap::new();
    for t in resp.topics.iter().filter(|t| t.name.0.as_str() == topic) {
        for p in &t.partitions {
            check_code(p.error_code, None, || {
                format!("listing offsets of {topic} partition {}", p.partition_index)
            })?;
            offsets.insert(p.partition_index, p.offset);
        }
    }
    if let Some(p) = partitions.iter().find(|p| !offsets.contains_key(p)) {
        bail!("ListOffsets did not answer for {topic} partition {p}");
    }
    Ok(offsets)
}

fn fetch_request(
    topic: &str,
    positions: &BTreeMap<i32, i64>,
    round: usize,
    wait: Duration,
) -> FetchRequest {
    let mut partitions: Vec<FetchPartition> = positions
        .iter()
        .map(|(p, offset)| {
            FetchPartition::default()
                .with_partition(*p)
                .with_fetch_offset(*offset)
                .with_partition_max_bytes(PARTITION_MAX_BYTES)
        })
        .collect();
    // Brokers fill the response in request order: rotate so that no
    // partition always comes last.
    if !partitions.is_empty() {
        let n = round % partitions.len();
        partitions.rotate_left(n);
    }
    FetchRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_max_wait_ms(i32::try_from(wait.as_millis()).unwrap_or(i32::MAX))
        .with_min_bytes(1)
        .with_max_bytes(FETCH_MAX_BYTES)
        .with_topics(vec![
            FetchTopic::default()
                .with_topic(topic_name(topic))
                .with_partitions(partitions),
        ])
}

/// The records at or after `position` in a fetched partition's bytes, and the
/// next offset to fetch. A batch cut off at the end is left for the next fetch.
fn decode_partition(records: &Bytes, mut position: i64) -> Result<(Vec<Record>, i64), BatchError> {
    let mut out = Vec::new();
    for item in BatchIter::new(records, usize::MAX) {
        let (at, view) = match item {
            Ok(found) => found,
            Err(BatchError::Truncated { .. }) => break,
            Err(e) => return Err(e),
        };
        let next = view.next_offset();
        if next <= position {
            continue;
        }
        // Control batches (transaction markers) hold no records to print.
        if !view.is_control() {
            view.verify_crc()?;
            let batch = records.slice(at..at + view.size());
            out.extend(
                decode_records(&batch, DEFAULT_MAX_DECOMPRESSED)?
                    .into_iter()
                    .filter(|r| r.offset >= position),
            );
        }
        position = next;
    }
    Ok((out, position))
}

/// Writes one record line; `false` if stdout is closed (e.g. `| head`).
fn write_record(
    out: &mut impl Write,
    partition: i32,
    r: &Record,
    print_offsets: bool,
) -> anyhow::Result<bool> {
    let mut line = Vec::with_capacity(
        32 + r.key.as_ref().map_or(0, |k| k.len()) + r.value.as_ref().map_or(0, |v| v.len()),
    );
    format_record(&mut line, partition, r, print_offsets);
    stdout_result(out.write_all(&line))
}

/// `[partition:offset\t][key\t]value\n`.
fn format_record(line: &mut Vec<u8>, partition: i32, r: &Record, print_offsets: bool) {
    if print_offsets {
        line.extend_from_slice(format!("{partition}:{}\t", r.offset).as_bytes());
    }
    if let Some(key) = &r.key {
        line.extend_from_slice(key);
        line.push(b'\t');
    }
    if let Some(value) = &r.value {
        line.extend_from_slice(value);
    }
    line.push(b'\n');
}

fn flush(out: &mut impl Write) -> anyhow::Result<bool> {
    stdout_result(out.flush())
}

fn stdout_result(r: std::io::Result<()>) -> anyhow::Result<bool> {
    match r {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(false),
        Err(e) => Err(anyhow::Error::new(e).context("writing to stdout")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn murmur2_matches_kafkas_utils_murmur2() {
        // Values from Kafka's own tests of `Utils.murmur2`.
        assert_eq!(murmur2(b"21"), -973_932_308);
        assert_eq!(murmur2(b"foobar"), -790_332_482);
        assert_eq!(murmur2(b"a-little-bit-long-string"), -985_981_536);
        assert_eq!(murmur2(b"a-little-bit-longer-string"), -1_486_304_829);
        assert_eq!(
            murmur2(b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8"),
            -58_897_971
        );
        assert_eq!(murmur2(b"abc"), 479_470_107);
    }

    #[test]
    fn murmur2_of_the_empty_key_is_defined() {
        // Nothing to mix but the length: the finalizer of seed ^ 0.
        let mut h: u32 = 0x9747_b28c;
        h ^= h >> 13;
        h = h.wrapping_mul(0x5bd1_e995);
        h ^= h >> 15;
        assert_eq!(murmur2(b""), h as i32);
    }

    #[test]
    fn keyed_records_go_to_the_positive_hash_modulo_partitions() {
        // murmur2("21") is negative: the sign bit is dropped, not the value negated.
        let expected = ((-973_932_308i32) & 0x7fff_ffff) % 3;
        assert_eq!(choose_partition(Some(b"21"), None, 3, 0), expected);
        for n in 1..20 {
            let p = choose_partition(Some(b"some key"), None, n, 0);
            assert!((0..n).contains(&p));
        }
    }

    #[test]
    fn fixed_partition_wins_and_unkeyed_records_take_the_round_robin_one() {
        assert_eq!(choose_partition(Some(b"21"), Some(2), 3, 0), 2);
        assert_eq!(choose_partition(None, Some(1), 3, 2), 1);
        assert_eq!(choose_partition(None, None, 3, 2), 2);
    }

    #[test]
    fn same_key_always_lands_on_the_same_partition() {
        let keys: Vec<String> = (0..100).map(|i| format!("key-{i}")).collect();
        for k in &keys {
            let a = choose_partition(Some(k.as_bytes()), None, 7, 0);
            let b = choose_partition(Some(k.as_bytes()), None, 7, 5);
            assert_eq!(a, b);
        }
        // And keys spread over the partitions.
        let used: std::collections::BTreeSet<i32> = keys
            .iter()
            .map(|k| choose_partition(Some(k.as_bytes()), None, 7, 0))
            .collect();
        assert_eq!(used.len(), 7);
    }

    #[test]
    fn lines_split_at_the_first_separator() {
        assert_eq!(
            split_line(b"k:v", Some(b":")),
            Ok((Some(b"k".to_vec()), b"v".to_vec()))
        );
        assert_eq!(
            split_line(b"k:v:w", Some(b":")),
            Ok((Some(b"k".to_vec()), b"v:w".to_vec()))
        );
        assert_eq!(
            split_line(b":v", Some(b":")),
            Ok((Some(Vec::new()), b"v".to_vec()))
        );
        assert_eq!(
            split_line(b"k::=v", Some(b"::=")),
            Ok((Some(b"k".to_vec()), b"v".to_vec()))
        );
        assert!(split_line(b"no separator", Some(b":")).is_err());
    }

    #[test]
    fn without_a_separator_the_line_is_the_value() {
        assert_eq!(split_line(b"a:b", None), Ok((None, b"a:b".to_vec())));
        assert_eq!(split_line(b"", None), Ok((None, Vec::new())));
    }

    #[test]
    fn line_ends_are_trimmed() {
        assert_eq!(trim_line_end(b"abc\n"), b"abc");
        assert_eq!(trim_line_end(b"abc\r\n"), b"abc");
        assert_eq!(trim_line_end(b"abc"), b"abc");
        assert_eq!(trim_line_end(b"a\tb \n"), b"a\tb ");
    }

    #[test]
    fn start_positions_parse() {
        assert_eq!(parse_start("beginning"), Ok(Start::Beginning));
        assert_eq!(parse_start("end"), Ok(Start::End));
        assert_eq!(parse_start("42"), Ok(Start::Offset(42)));
        assert_eq!(parse_start("-5"), Ok(Start::BeforeEnd(5)));
        assert!(parse_start("soon").is_err());
    }

    #[test]
    fn records_print_as_key_tab_value_with_optional_offsets() {
        let rec = |key: Option<&str>, value: &str| Record {
            offset: 7,
            timestamp: 0,
            key: key.map(|k| Bytes::copy_from_slice(k.as_bytes())),
            value: Some(Bytes::copy_from_slice(value.as_bytes())),
            headers: Vec::new(),
        };
        let mut line = Vec::new();
        format_record(&mut line, 1, &rec(Some("k"), "v"), false);
        assert_eq!(line, b"k\tv\n");
        line.clear();
        format_record(&mut line, 1, &rec(None, "v"), false);
        assert_eq!(line, b"v\n");
        line.clear();
        format_record(&mut line, 2, &rec(Some("k"), "v"), true);
        assert_eq!(line, b"2:7\tk\tv\n");
    }

    fn batch(base: i64, n: usize, compression: Compression) -> Bytes {
        let mut b = BatchBuilder::new(base, 1_700_000_000_000);
        for i in 0..n {
            b.push(RecordSpec::new(
                Some(format!("k{i}").into_bytes()),
                Some(format!("v{}", base + i as i64).into_bytes()),
                0,
            ));
        }
        b.build(compression).expect("encoding a batch")
    }

    #[test]
    fn decoding_skips_records_before_the_position_and_a_cut_off_last_batch() {
        let mut all = Vec::new();
        all.extend_from_slice(&batch(0, 5, Compression::None));
        all.extend_from_slice(&batch(5, 5, Compression::Lz4));
        let third = batch(10, 5, Compression::None);
        all.extend_from_slice(&third[..third.len() / 2]);
        let (records, next) = decode_partition(&Bytes::from(all), 3).expect("decodes");
        let offsets: Vec<i64> = records.iter().map(|r| r.offset).collect();
        assert_eq!(offsets, vec![3, 4, 5, 6, 7, 8, 9]);
        assert_eq!(next, 10);
    }

    type KeyValue = (Option<Vec<u8>>, Vec<u8>);

    fn lines_of(input: &str, separator: Option<&str>) -> Vec<Result<KeyValue, String>> {
        let (lines_tx, mut lines_rx) = tokio::sync::mpsc::channel(100);
        read_lines(
            std::io::Cursor::new(input.as_bytes()),
            separator.map(str::as_bytes),
            &lines_tx,
        );
        drop(lines_tx);
        let mut out = Vec::new();
        while let Some(line) = lines_rx.blocking_recv() {
            out.push(line.map(|r| (r.key, r.value)).map_err(|e| format!("{e:#}")));
        }
        out
    }

    #[test]
    fn input_lines_become_records() {
        let kv = |k: &str, v: &str| Ok((Some(k.as_bytes().to_vec()), v.as_bytes().to_vec()));
        assert_eq!(
            lines_of("a:1\nb:2\r\nc:3", Some(":")),
            vec![kv("a", "1"), kv("b", "2"), kv("c", "3")]
        );
        assert_eq!(
            lines_of("x\n\ny\n", None),
            vec![
                Ok((None, b"x".to_vec())),
                Ok((None, Vec::new())),
                Ok((None, b"y".to_vec()))
            ]
        );
    }

    #[test]
    fn a_line_without_separator_ends_the_input_with_its_line_number() {
        let lines = lines_of("a:1\nbad\nc:3\n", Some(":"));
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0], Ok((Some(b"a".to_vec()), b"1".to_vec())));
        let err = lines[1].clone().expect_err("line 2 has no separator");
        assert!(err.contains("stdin line 2"), "{err}");
    }

    #[test]
    fn a_group_stops_before_the_record_that_would_cross_the_byte_limit() {
        let record = |n: usize| InputRecord {
            key: None,
            value: vec![b'x'; n],
            timestamp_ms: 0,
        };
        let mut pending = Pending::default();
        assert!(
            !pending.overflows_with(&record(500), 100),
            "a lone record always fits"
        );
        pending.push(record(60));
        assert!(!pending.overflows_with(&record(40), 100));
        assert!(pending.overflows_with(&record(41), 100));
    }

    #[test]
    fn batches_are_grouped_per_partition_with_their_counts() {
        let mut by_partition = BTreeMap::new();
        for p in 0..2 {
            let records = (0..3)
                .map(|i| InputRecord {
                    key: None,
                    value: format!("{p}-{i}").into_bytes(),
                    timestamp_ms: 1_000 + i,
                })
                .collect();
            by_partition.insert(p, records);
        }
        let batches = build_batches(by_partition, Compression::Gzip).expect("builds");
        assert_eq!(batches.len(), 2);
        for (p, (bytes, count)) in batches {
            assert_eq!(count, 3);
            let recs = decode_records(&bytes, DEFAULT_MAX_DECOMPRESSED).expect("decodes");
            assert_eq!(recs[2].value.as_deref(), Some(format!("{p}-2").as_bytes()));
            assert_eq!(recs[2].timestamp, 1_002);
        }
    }
}
