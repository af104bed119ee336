//! `floe produce` and `floe consume`: records between stdin/stdout and a
//! topic over the Kafka protocol, like a small kcat. The Kafka side is
//! `floe_client`'s [`Producer`] and [`Consumer`]; this file reads lines,
//! groups them and prints records.
//!
//! `produce` reads lines (optionally `key SEP value`, or JSON objects with
//! `--input-format json`, see [`crate::record_input`]), groups them (at most
//! `--batch-records` records or `--batch-bytes` bytes, or what was read when
//! stdin paused for `--linger-ms`), and sends each group as one Produce
//! request. Keyed records go to the partition Kafka's default partitioner
//! picks (murmur2 of the key); unkeyed ones to one partition per group, in
//! turn.
//!
//! `consume` starts where `--from` (or `--from-time`, or the `--group`'s
//! committed offsets) says and fetches until `--max-messages` records were
//! printed or nothing new came for `--timeout-ms`; records are printed as
//! [`crate::record_format`] says. With `--group` it commits what it printed.

#![allow(clippy::print_stdout)]

use std::io::Write;
use std::time::{Duration, Instant};

use std::collections::BTreeMap;

use anyhow::{Context as _, bail};
use clap::{Args, ValueEnum};
use floe_client::{
    Acks, Compression, Consumer, Producer, ProducerConfig, ProducerRecord, Record, ResponseError,
    StartAt,
};

use crate::record_format::{FORMAT_HELP, Format, format_with, parse_format, record_json};
use crate::topic_cmd::parse_key_value;

use crate::kafka_args::{BootstrapArgs, IsolationArg};

/// Longest wait of one Fetch on the broker.
pub(crate) const FETCH_MAX_WAIT: Duration = Duration::from_millis(500);

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

impl From<AcksArg> for Acks {
    fn from(a: AcksArg) -> Self {
        match a {
            AcksArg::All => Acks::All,
            AcksArg::Leader => Acks::Leader,
            AcksArg::None => Acks::None,
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

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum InputArg {
    /// A line is a value, or `key SEP value` with --key-separator.
    Text,
    /// A line is a JSON object: key, value, headers, timestamp.
    Json,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OutputArg {
    /// `[partition:offset<TAB>][key<TAB>]value` (or --format).
    Text,
    /// One JSON object per record: topic, partition, offset, timestamp,
    /// key, value, headers.
    Json,
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
    /// How the lines are read: text, or JSON lines
    /// (`{"key": …, "value": …, "headers": {…}, "timestamp": …}`; a null or
    /// missing value is a tombstone; `{"base64": "…"}` for binary).
    #[arg(long, value_enum, default_value_t = InputArg::Text)]
    input_format: InputArg,
    /// Split each line at the first SEP into key and value (a line without
    /// SEP is an error). Without it, a line is a value with no key.
    #[arg(long, value_name = "SEP", conflicts_with = "input_format")]
    key_separator: Option<String>,
    /// Send an empty value (text input) as null: a tombstone.
    #[arg(long)]
    empty_as_null: bool,
    /// A header added to every record, as NAME=VALUE; repeat for several.
    #[arg(long = "header", value_name = "NAME=VALUE", value_parser = parse_key_value)]
    headers: Vec<(String, String)>,
    /// The records' timestamp (default: when each is read; a JSON line's
    /// own timestamp wins): ms since the epoch, 2024-05-01T12:00:00[Z],
    /// 2024-05-01, or -DURATION before now.
    #[arg(long, value_name = "TIME", value_parser = crate::time_arg::parse_time, allow_hyphen_values = true)]
    timestamp: Option<i64>,
    /// Write as an idempotent producer, so that a retried request is not
    /// written twice (needs --acks all; off otherwise).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, value_name = "BOOL")]
    idempotence: bool,
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
    /// Read the lines from FILE instead of stdin (where no shell can pipe,
    /// e.g. the helm chart's test pod).
    #[arg(long, value_name = "FILE")]
    input: Option<std::path::PathBuf>,
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
    /// `-N` for N records before the end (write `--from=-N`). With --group,
    /// only where the group has no committed offset.
    #[arg(long, default_value = "beginning", value_parser = parse_start)]
    from: StartAt,
    /// Start at the first record at or after this time instead: ms since
    /// the epoch, 2024-05-01T12:00:00[Z], 2024-05-01, or -DURATION (-15m).
    #[arg(long, value_name = "TIME", conflicts_with = "from", value_parser = crate::time_arg::parse_time, allow_hyphen_values = true)]
    from_time: Option<i64>,
    /// Start at this group's committed offsets and commit what was printed
    /// (as a standalone consumer, without joining the group: refused while
    /// the group has live members).
    #[arg(long, value_name = "GROUP")]
    group: Option<String>,
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
    /// Exit with an error if fewer records than this were printed (a
    /// check, e.g. the helm chart's test pod).
    #[arg(long)]
    min_messages: Option<u64>,
    /// Print each record as this kcat-like format string instead, e.g.
    /// '%p:%o %T %k=%s %h\n'.
    #[arg(long, short = 'f', value_name = "FORMAT", long_help = format!("Print each record as this kcat-like format string instead, e.g. '%p:%o %T %k=%s %h\\n': {FORMAT_HELP}."), conflicts_with_all = ["print_offsets", "output"], value_parser = parse_format)]
    format: Option<Format>,
    /// The output: text lines, or one JSON object per record.
    #[arg(long, value_enum, default_value_t = OutputArg::Text, conflicts_with = "print_offsets")]
    output: OutputArg,
    /// What to read of transactions: `read_uncommitted` (the default, as
    /// Kafka's consumers and kafka-console-consumer: every record in the
    /// log, which is what a tool for looking at a topic shows) or
    /// `read_committed` (only committed records, up to the last stable
    /// offset; `--from end` starts there).
    #[arg(long, value_enum, value_name = "LEVEL", default_value_t = IsolationArg::ReadUncommitted)]
    isolation: IsolationArg,
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

/// Records read but not sent yet.
#[derive(Debug, Default)]
struct Pending {
    records: Vec<ProducerRecord>,
    bytes: usize,
}

impl Pending {
    /// Whether `record` must wait for the next group: it would take this one
    /// over `max_bytes` (a record alone always fits).
    fn overflows_with(&self, record: &ProducerRecord, max_bytes: usize) -> bool {
        !self.records.is_empty() && self.bytes.saturating_add(record.size()) > max_bytes
    }

    fn push(&mut self, record: ProducerRecord) {
        self.bytes += record.size();
        self.records.push(record);
    }
}

/// How input lines become records.
#[derive(Debug, Clone)]
pub(crate) struct LineParser {
    pub(crate) input: InputArg,
    pub(crate) separator: Option<Vec<u8>>,
    pub(crate) empty_as_null: bool,
    pub(crate) headers: Vec<(Vec<u8>, Option<Vec<u8>>)>,
    pub(crate) timestamp: Option<i64>,
}

impl LineParser {
    #[cfg(test)]
    fn text(separator: Option<&[u8]>) -> Self {
        Self {
            input: InputArg::Text,
            separator: separator.map(<[u8]>::to_vec),
            empty_as_null: false,
            headers: Vec::new(),
            timestamp: None,
        }
    }

    fn parse(&self, line: &[u8]) -> anyhow::Result<ProducerRecord> {
        let ts = self.timestamp.unwrap_or_else(crate::time_arg::now_ms);
        let mut record = match self.input {
            InputArg::Json => {
                crate::record_input::parse_json_record(line, ts).map_err(anyhow::Error::msg)?
            }
            InputArg::Text => {
                let (key, value) = split_line(line, self.separator.as_deref())?;
                ProducerRecord {
                    key,
                    value: Some(value).filter(|v| !(self.empty_as_null && v.is_empty())),
                    timestamp_ms: ts,
                    headers: Vec::new(),
                }
            }
        };
        if !self.headers.is_empty() {
            let own = std::mem::take(&mut record.headers);
            record.headers = self.headers.iter().cloned().chain(own).collect();
        }
        Ok(record)
    }
}

/// When a group of records is sent.
#[derive(Debug, Clone, Copy)]
pub(crate) struct GroupLimits {
    pub(crate) max_records: usize,
    pub(crate) max_bytes: usize,
    pub(crate) linger: Duration,
}

pub async fn produce(args: ProduceArgs) -> anyhow::Result<()> {
    let separator = args.key_separator.map(String::into_bytes);
    if separator.as_ref().is_some_and(Vec::is_empty) {
        bail!("--key-separator must not be empty");
    }
    // Opened before connecting: a missing file is the first error.
    let input: Option<std::fs::File> = match &args.input {
        Some(path) => Some(
            std::fs::File::open(path).with_context(|| format!("cannot open {}", path.display()))?,
        ),
        None => None,
    };
    let parser = LineParser {
        input: args.input_format,
        separator,
        empty_as_null: args.empty_as_null,
        headers: args
            .headers
            .into_iter()
            .map(|(k, v)| (k.into_bytes(), Some(v.into_bytes())))
            .collect(),
        timestamp: args.timestamp,
    };
    let client = args.conn.connect().await?;
    let config = ProducerConfig {
        acks: args.acks.into(),
        compression: args.compression.into(),
        partition: args.partition,
        idempotent: args.idempotence,
        ..ProducerConfig::default()
    };
    let mut producer = Producer::new(client, &args.topic, config).await?;
    let limits = GroupLimits {
        max_records: args.batch_records as usize,
        max_bytes: args.batch_bytes,
        linger: Duration::from_millis(args.linger_ms),
    };
    let result = produce_lines(&mut producer, input, parser, limits).await;
    eprint!("{}", summary(&producer));
    result
}

/// Reads `input` (stdin when `None`) to its end and sends it in groups.
pub(crate) async fn produce_lines(
    producer: &mut Producer,
    input: Option<std::fs::File>,
    parser: LineParser,
    limits: GroupLimits,
) -> anyhow::Result<()> {
    // A thread reads and parses the lines (tokio's stdin needs a feature
    // this crate does not enable) and hands them over a channel.
    let (lines_tx, mut lines_rx) = tokio::sync::mpsc::channel(4096);
    std::thread::spawn(move || match input {
        Some(file) => read_lines(std::io::BufReader::new(file), &parser, &lines_tx),
        None => read_lines(std::io::stdin().lock(), &parser, &lines_tx),
    });
    let mut pending = Pending::default();
    loop {
        let next = if pending.records.is_empty() {
            lines_rx.recv().await
        } else {
            match tokio::time::timeout(limits.linger, lines_rx.recv()).await {
                Ok(next) => next,
                Err(_idle) => {
                    producer.send(std::mem::take(&mut pending).records).await?;
                    continue;
                }
            }
        };
        let record = match next {
            None => break,
            Some(Ok(record)) => record,
            Some(Err(e)) => {
                // What was read before the bad line is still sent.
                producer.send(std::mem::take(&mut pending).records).await?;
                return Err(e);
            }
        };
        if pending.overflows_with(&record, limits.max_bytes) {
            producer.send(std::mem::take(&mut pending).records).await?;
        }
        pending.push(record);
        if pending.records.len() >= limits.max_records {
            producer.send(std::mem::take(&mut pending).records).await?;
        }
    }
    producer.send(pending.records).await?;
    producer.flush().await?;
    Ok(())
}

/// What was produced, per partition, for stderr.
fn summary(producer: &Producer) -> String {
    let stats = producer.stats();
    let total: u64 = stats.values().map(|s| s.records).sum();
    let mut out = format!(
        "produced {total} record(s) to topic {} in {} request(s)\n",
        producer.topic(),
        producer.requests()
    );
    if let Some(id) = producer.identity() {
        out.push_str(&format!(
            "  idempotent: producer id {} epoch {}\n",
            id.id, id.epoch
        ));
    }
    for (p, s) in stats {
        let offsets = match (s.first_offset, s.last_offset) {
            (Some(first), Some(last)) => format!("offsets {first}..={last}"),
            _ if producer.config().acks == Acks::None => "offsets unknown (acks=0)".to_owned(),
            _ => "offsets unknown".to_owned(),
        };
        out.push_str(&format!(
            "  partition {p}: {} record(s), {offsets}\n",
            s.records
        ));
    }
    out
}

/// Reads lines until the end of `input` and sends them as records; a line
/// that cannot be parsed is sent as an error and ends the reading.
fn read_lines(
    mut input: impl std::io::BufRead,
    parser: &LineParser,
    lines_tx: &tokio::sync::mpsc::Sender<anyhow::Result<ProducerRecord>>,
) {
    let mut line = Vec::new();
    let mut line_no = 0u64;
    loop {
        line.clear();
        let item = match input.read_until(b'\n', &mut line) {
            Ok(0) => return,
            Ok(_) => {
                line_no += 1;
                parser
                    .parse(trim_line_end(&line))
                    .map_err(|e| e.context(format!("stdin line {line_no}")))
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

// ---------------------------------------------------------------------------
// consume

pub fn parse_start(s: &str) -> Result<StartAt, String> {
    match s {
        "beginning" | "earliest" => Ok(StartAt::Beginning),
        "end" | "latest" => Ok(StartAt::End),
        _ => match s.parse::<i64>() {
            Ok(n) if n >= 0 => Ok(StartAt::Offset(n)),
            Ok(n) => Ok(StartAt::BeforeEnd(n.checked_neg().unwrap_or(i64::MAX))),
            Err(_) => Err(format!(
                "expected beginning, end, an offset or -N, got {s:?}"
            )),
        },
    }
}

/// How records are printed.
#[derive(Debug, Clone)]
enum Printer {
    /// `[partition:offset\t][key\t]value`.
    Lines {
        print_offsets: bool,
    },
    Format(Format),
    Json,
}

impl Printer {
    fn of(args: &ConsumeArgs) -> Self {
        match (&args.format, args.output) {
            (Some(pieces), _) => Self::Format(pieces.clone()),
            (None, OutputArg::Json) => Self::Json,
            (None, OutputArg::Text) => Self::Lines {
                print_offsets: args.print_offsets,
            },
        }
    }

    fn print(&self, line: &mut Vec<u8>, topic: &str, partition: i32, r: &Record) {
        match self {
            Self::Lines { print_offsets } => format_record(line, partition, r, *print_offsets),
            Self::Format(f) => format_with(line, &f.0, topic, partition, r),
            Self::Json => {
                line.extend_from_slice(record_json(topic, partition, r).to_string().as_bytes());
                line.push(b'\n');
            }
        }
    }
}

/// Commits the offsets after the records printed, for `--group`.
pub(crate) async fn commit_printed(
    consumer: &mut Consumer,
    group: Option<&str>,
    printed_up_to: &mut BTreeMap<i32, i64>,
) -> anyhow::Result<()> {
    let Some(group) = group else {
        return Ok(());
    };
    if printed_up_to.is_empty() {
        return Ok(());
    }
    let topic = consumer.topic().to_owned();
    let offsets = std::mem::take(printed_up_to)
        .into_iter()
        .map(|(p, o)| ((topic.clone(), p), o))
        .collect();
    match consumer.client_mut().commit_offsets(group, &offsets).await {
        Ok(()) => Ok(()),
        Err(e)
            if matches!(
                e.broker_error(),
                Some(
                    ResponseError::UnknownMemberId
                        | ResponseError::IllegalGeneration
                        | ResponseError::RebalanceInProgress
                )
            ) =>
        {
            Err(anyhow::Error::new(e).context(format!(
                "group {group} has live members: `floe consume --group` commits only for a \
                 group without members (it does not join the group)"
            )))
        }
        Err(e) => {
            Err(anyhow::Error::new(e).context(format!("committing the offsets of group {group}")))
        }
    }
}

pub async fn consume(args: ConsumeArgs) -> anyhow::Result<()> {
    let mut client = args.conn.connect().await?;
    let committed = match &args.group {
        Some(g) => client.committed_offsets(g).await?,
        None => Default::default(),
    };
    let start = args.from_time.map_or(args.from, StartAt::Time);
    let mut consumer = Consumer::isolated(
        client,
        &args.topic,
        args.partition,
        start,
        args.isolation.into(),
    )
    .await?;
    for ((topic, p), o) in committed {
        if topic == args.topic {
            consumer.seek(p, o);
        }
    }
    let printer = Printer::of(&args);
    let group = args.group.as_deref();
    let idle_limit = match (args.follow, args.timeout_ms) {
        (_, Some(ms)) => Some(Duration::from_millis(ms)),
        (true, None) => None,
        (false, None) => Some(Duration::from_millis(2000)),
    };
    let mut printed = 0u64;
    let limits = PrintLimits {
        max_messages: args.max_messages,
        idle_limit,
    };
    print_records(
        &mut consumer,
        group,
        &limits,
        &mut printed,
        |line, partition, r| printer.print(line, &args.topic, partition, r),
    )
    .await?;
    if let Some(min) = args.min_messages
        && printed < min
    {
        anyhow::bail!(
            "{printed} records read from {}, expected at least {min}",
            args.topic
        );
    }
    Ok(())
}

/// When a printing consumer ([`print_records`]) stops.
pub(crate) struct PrintLimits {
    /// After this many records.
    pub max_messages: Option<u64>,
    /// After this long without data (`None`: only at a signal).
    pub idle_limit: Option<Duration>,
}

/// Polls `consumer` and writes each record to stdout as `format` puts it
/// on a line, committing what was printed for `group` after each poll,
/// until `limits` or a signal (or stdout is closed). `printed` counts the
/// records written, kept up to date for a caller that reports it after an
/// error.
pub(crate) async fn print_records(
    consumer: &mut Consumer,
    group: Option<&str>,
    limits: &PrintLimits,
    printed: &mut u64,
    mut format: impl FnMut(&mut Vec<u8>, i32, &Record),
) -> anyhow::Result<()> {
    let mut out = std::io::BufWriter::new(std::io::stdout());
    let shutdown = crate::shutdown_signal();
    tokio::pin!(shutdown);
    let mut last_data = Instant::now();
    let mut printed_up_to: BTreeMap<i32, i64> = BTreeMap::new();
    let mut line = Vec::new();
    'fetch: loop {
        if limits.max_messages.is_some_and(|m| *printed >= m) {
            break;
        }
        let wait = match limits.idle_limit {
            None => FETCH_MAX_WAIT,
            Some(limit) => {
                let left = limit.saturating_sub(last_data.elapsed());
                if left.is_zero() {
                    break;
                }
                left.min(FETCH_MAX_WAIT)
            }
        };
        let polled = tokio::select! {
            r = consumer.poll(wait) => r?,
            _ = &mut shutdown => break,
        };
        if polled.progressed {
            last_data = Instant::now();
        }
        for fetched in &polled.partitions {
            for r in &fetched.records {
                if limits.max_messages.is_some_and(|m| *printed >= m) {
                    break 'fetch;
                }
                line.clear();
                format(&mut line, fetched.partition, r);
                if !stdout_result(out.write_all(&line))? {
                    return Ok(());
                }
                *printed += 1;
                printed_up_to.insert(fetched.partition, r.offset + 1);
            }
        }
        if !flush(&mut out)? {
            return Ok(());
        }
        commit_printed(consumer, group, &mut printed_up_to).await?;
        if let Some(e) = polled.retriable {
            tracing::debug!(error = %e, "retrying fetch");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    flush(&mut out)?;
    commit_printed(consumer, group, &mut printed_up_to).await?;
    Ok(())
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

pub(crate) fn flush(out: &mut impl Write) -> anyhow::Result<bool> {
    stdout_result(out.flush())
}

pub(crate) fn stdout_result(r: std::io::Result<()>) -> anyhow::Result<bool> {
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
        assert_eq!(parse_start("beginning"), Ok(StartAt::Beginning));
        assert_eq!(parse_start("end"), Ok(StartAt::End));
        assert_eq!(parse_start("42"), Ok(StartAt::Offset(42)));
        assert_eq!(parse_start("-5"), Ok(StartAt::BeforeEnd(5)));
        assert!(parse_start("soon").is_err());
    }

    #[test]
    fn records_print_as_key_tab_value_with_optional_offsets() {
        let rec = |key: Option<&str>, value: &str| Record {
            offset: 7,
            timestamp: 0,
            key: key.map(|k| bytes::Bytes::copy_from_slice(k.as_bytes())),
            value: Some(bytes::Bytes::copy_from_slice(value.as_bytes())),
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

    type KeyValue = (Option<Vec<u8>>, Vec<u8>);

    fn lines_of(input: &str, separator: Option<&str>) -> Vec<Result<KeyValue, String>> {
        let (lines_tx, mut lines_rx) = tokio::sync::mpsc::channel(100);
        read_lines(
            std::io::Cursor::new(input.as_bytes()),
            &LineParser::text(separator.map(str::as_bytes)),
            &lines_tx,
        );
        drop(lines_tx);
        let mut out = Vec::new();
        while let Some(line) = lines_rx.blocking_recv() {
            out.push(
                line.map(|r| (r.key, r.value.unwrap_or_default()))
                    .map_err(|e| format!("{e:#}")),
            );
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
        let record = |n: usize| ProducerRecord::value(vec![b'x'; n], 0);
        let mut pending = Pending::default();
        assert!(
            !pending.overflows_with(&record(500), 100),
            "a lone record always fits"
        );
        pending.push(record(60));
        assert!(!pending.overflows_with(&record(40), 100));
        assert!(pending.overflows_with(&record(41), 100));
    }
}
