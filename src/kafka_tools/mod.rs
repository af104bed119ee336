//! `floe kafka-tool TOOL FLAGS…`: Kafka's shell tools (`kafka-topics.sh`,
//! `kafka-configs.sh`, …) with Kafka's flags and Kafka's output, mapped onto
//! the code of `floe topic`, `floe group`, `floe offsets`, `floe produce`,
//! `floe consume` and `floe acl`. The scripts in `bin/` call it, so that an
//! operator's runbook (and librdkafka's test suite, through `KAFKA_PATH`)
//! runs unchanged against Floe (docs/kafka-tools.md).
//!
//! This file holds what every tool shares: a flag parser shaped like Kafka's
//! (joptsimple: `--flag value`, `--flag=value`, a unique prefix of a flag),
//! the refusal of Kafka flags Floe does not support, the connection flags,
//! and the translation of a Java client's properties (`--command-config`,
//! `--producer.config`, …) into the librdkafka keys `floe-client` reads.

#![allow(clippy::print_stdout)]

pub mod acls;
pub mod configs;
pub mod console_consumer;
pub mod console_producer;
pub mod consumer_groups;
pub mod delete_records;
pub mod get_offsets;
pub mod pattern;
pub mod topics;

#[cfg(test)]
mod tests;

use std::collections::BTreeMap;

use anyhow::{Context as _, bail};
use clap::Args;

use crate::kafka_args::BootstrapArgs;

/// `floe kafka-tool`.
#[derive(Debug, Args)]
pub struct KafkaToolArgs {
    /// The tool, as Kafka names its script: kafka-topics.sh,
    /// kafka-configs.sh, kafka-consumer-groups.sh, kafka-get-offsets.sh,
    /// kafka-delete-records.sh, kafka-console-producer.sh,
    /// kafka-console-consumer.sh, kafka-acls.sh (`.sh` may be left out).
    pub tool: String,
    /// The tool's flags, as Kafka spells them.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    pub args: Vec<String>,
}

/// Runs one tool.
pub async fn run(a: KafkaToolArgs) -> anyhow::Result<()> {
    let name = a.tool.rsplit('/').next().unwrap_or(&a.tool);
    let name = name.strip_suffix(".sh").unwrap_or(name);
    let result = match name {
        "kafka-topics" => topics::run(&a.args).await,
        "kafka-configs" => configs::run(&a.args).await,
        "kafka-consumer-groups" => consumer_groups::run(&a.args).await,
        "kafka-get-offsets" => get_offsets::run(&a.args).await,
        "kafka-delete-records" => delete_records::run(&a.args).await,
        "kafka-console-producer" => console_producer::run(&a.args).await,
        "kafka-console-consumer" => console_consumer::run(&a.args).await,
        "kafka-acls" => acls::run(&a.args).await,
        other => bail!(
            "no Kafka tool {other:?}: kafka-topics.sh, kafka-configs.sh, kafka-consumer-groups.sh, \
             kafka-get-offsets.sh, kafka-delete-records.sh, kafka-console-producer.sh, \
             kafka-console-consumer.sh or kafka-acls.sh"
        ),
    };
    result.with_context(|| format!("{name}.sh"))
}

// ---------------------------------------------------------------------------
// Flags

/// Whether a flag takes a value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arity {
    Switch,
    Value,
    /// A value when one follows (`--state` of `--list`, Kafka's optional
    /// argument): `--flag=v`, or a next argument not starting with `--`.
    Optional,
}

/// The flags of one tool: those it takes, and Kafka's flags it refuses
/// with a reason.
#[derive(Debug, Clone, Copy)]
pub struct Spec {
    pub flags: &'static [(&'static str, Arity)],
    pub unsupported: &'static [(&'static str, &'static str)],
}

/// Kafka flags no Floe tool takes.
const NEVER: &[(&str, &str)] = &[
    (
        "zookeeper",
        "Floe has no ZooKeeper (and Kafka removed the flag in 4.0): use --bootstrap-server",
    ),
    (
        "bootstrap-controller",
        "Floe's metadata service does not speak the Kafka protocol: use --bootstrap-server",
    ),
    (
        "version",
        "this is Floe's implementation of the tool (floe --version)",
    ),
];

/// The flags given, by name (each occurrence's value, or empty for a
/// switch).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Parsed {
    values: BTreeMap<&'static str, Vec<String>>,
}

impl Parsed {
    pub fn has(&self, flag: &str) -> bool {
        self.values.contains_key(flag)
    }

    /// The last value of `flag`.
    pub fn value(&self, flag: &str) -> Option<&str> {
        self.values
            .get(flag)
            .and_then(|v| v.last())
            .map(String::as_str)
    }

    /// Every value of `flag`, in order.
    pub fn values(&self, flag: &str) -> &[String] {
        self.values.get(flag).map(Vec::as_slice).unwrap_or(&[])
    }

    /// The value of `flag` as a number.
    pub fn number<T: std::str::FromStr>(&self, flag: &str) -> anyhow::Result<Option<T>> {
        match self.value(flag) {
            None => Ok(None),
            Some(v) => match v.trim().parse::<T>() {
                Ok(n) => Ok(Some(n)),
                Err(_) => bail!("--{flag}: {v:?} is not a valid number"),
            },
        }
    }

    /// The one flag of `actions` given; an error naming them unless exactly
    /// one is.
    pub fn action(&self, actions: &[&'static str]) -> anyhow::Result<&'static str> {
        let given: Vec<&'static str> = actions.iter().copied().filter(|a| self.has(a)).collect();
        match given.as_slice() {
            [one] => Ok(one),
            _ => bail!(
                "Command must include exactly one action: {}",
                actions
                    .iter()
                    .map(|a| format!("--{a}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        }
    }

    /// An error when any of `flags` was given (they do not go with `with`).
    pub fn refuse(&self, flags: &[&str], with: &str) -> anyhow::Result<()> {
        if let Some(f) = flags.iter().find(|f| self.has(f)) {
            bail!("Option --{f} can't be used with --{with}");
        }
        Ok(())
    }
}

/// Parses `args` as Kafka's tools do: `--flag value`, `--flag=value`, a
/// unique prefix of a flag's name; a flag Floe refuses, an unknown flag, a
/// missing value or a stray argument is an error naming it.
pub fn parse(spec: &Spec, args: &[String]) -> Result<Parsed, String> {
    let mut out = Parsed::default();
    let mut i = 0;
    while i < args.len() {
        let arg = &args[i];
        i += 1;
        let Some(body) = arg.strip_prefix("--") else {
            return Err(format!(
                "unexpected argument {arg:?} (every value follows its --flag)"
            ));
        };
        let (name, inline) = match body.split_once('=') {
            Some((n, v)) => (n, Some(v.to_owned())),
            None => (body, None),
        };
        if let Some((flag, why)) = NEVER
            .iter()
            .chain(spec.unsupported)
            .find(|(f, _)| *f == name)
        {
            return Err(format!("--{flag} is not supported by Floe: {why}"));
        }
        let (flag, arity) = find_flag(spec, name)?;
        let value = match (arity, inline) {
            (Arity::Switch, None) => String::new(),
            (Arity::Switch, Some(_)) => return Err(format!("--{flag} takes no value")),
            (Arity::Value, Some(v)) => v,
            (Arity::Optional, Some(v)) => v,
            (Arity::Optional, None) => match args.get(i) {
                Some(v) if !v.starts_with("--") => {
                    i += 1;
                    v.clone()
                }
                _ => String::new(),
            },
            (Arity::Value, None) => match args.get(i) {
                Some(v) => {
                    i += 1;
                    v.clone()
                }
                None => return Err(format!("Option --{flag} requires an argument")),
            },
        };
        out.values.entry(flag).or_default().push(value);
    }
    Ok(out)
}

/// The flag `name` names: itself, or the one flag it is a prefix of.
fn find_flag(spec: &Spec, name: &str) -> Result<(&'static str, Arity), String> {
    if let Some((f, a)) = spec.flags.iter().find(|(f, _)| *f == name) {
        return Ok((f, *a));
    }
    let candidates: Vec<&(&'static str, Arity)> = if name.is_empty() {
        Vec::new()
    } else {
        spec.flags
            .iter()
            .filter(|(f, _)| f.starts_with(name))
            .collect()
    };
    match candidates.as_slice() {
        [(f, a)] => Ok((f, *a)),
        [] => Err(format!(
            "--{name} is not a recognized option (Floe takes: {})",
            spec.flags
                .iter()
                .map(|(f, _)| format!("--{f}"))
                .collect::<Vec<_>>()
                .join(" ")
        )),
        many => Err(format!(
            "--{name} is ambiguous: {}",
            many.iter()
                .map(|(f, _)| format!("--{f}"))
                .collect::<Vec<_>>()
                .join(", ")
        )),
    }
}

/// Parses the flags, or prints the tool's flags for `--help`; `None` when
/// there is nothing more to do.
pub fn parse_or_help(tool: &str, spec: &Spec, args: &[String]) -> anyhow::Result<Option<Parsed>> {
    if args.iter().any(|a| a == "--help" || a == "-h") || args.is_empty() {
        println!("{tool}: Floe's implementation of Kafka's tool (docs/kafka-tools.md). Flags:");
        for (f, a) in spec.flags {
            match a {
                Arity::Switch => println!("  --{f}"),
                Arity::Value => println!("  --{f} VALUE"),
                Arity::Optional => println!("  --{f} [VALUE]"),
            }
        }
        if args.is_empty() {
            bail!("no action given");
        }
        return Ok(None);
    }
    parse(spec, args).map(Some).map_err(anyhow::Error::msg)
}

/// `k=v` of `--config`, `--property`, `--producer-property`, … (the value
/// may hold `=`; spaces around the key are dropped, as Kafka does).
pub fn key_value(flag: &str, s: &str) -> anyhow::Result<(String, String)> {
    crate::topic_cmd::parse_key_value(s).map_err(|e| anyhow::anyhow!("--{flag}: {e}"))
}

// ---------------------------------------------------------------------------
// Connection

/// The connection of a tool: `--bootstrap-server` (or one of `aliases`,
/// the legacy `--broker-list`), with the security of the Java client
/// properties in `props` (from `--command-config` and the like).
pub fn connection(
    p: &Parsed,
    aliases: &[&str],
    props: &BTreeMap<String, String>,
) -> anyhow::Result<BootstrapArgs> {
    let servers = std::iter::once("bootstrap-server")
        .chain(aliases.iter().copied())
        .find_map(|f| p.value(f))
        .context("--bootstrap-server must be specified")?;
    let translated = translate_java_properties(props).map_err(anyhow::Error::msg)?;
    for k in &translated.ignored {
        eprintln!("floe: note: client property {k} is not used by Floe and is ignored");
    }
    let mut rdkafka = translated.rdkafka;
    if let Ok(pw) = std::env::var("FLOE_SASL_PASSWORD") {
        rdkafka.insert("sasl.password".into(), pw);
    }
    Ok(BootstrapArgs {
        bootstrap: servers
            .split(',')
            .map(|s| s.trim().to_owned())
            .filter(|s| !s.is_empty())
            .collect(),
        request_timeout_ms: translated.request_timeout_ms.unwrap_or(30_000),
        command_config: None,
        properties: Some(rdkafka),
    })
}

/// The properties of the files and flags named (`--command-config FILE`,
/// then each `KEY=VALUE` of `inline`, which win).
pub fn client_properties(
    files: &[&String],
    inline: &[(String, String)],
) -> anyhow::Result<BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    for f in files {
        let text = std::fs::read_to_string(f).with_context(|| format!("cannot read {f}"))?;
        out.extend(parse_java_properties(&text));
    }
    out.extend(inline.iter().cloned());
    Ok(out)
}

/// A Java properties file: `key=value`, `key: value` or `key value`,
/// `#` and `!` comments, a line ending in `\` continued on the next one
/// (as `sasl.jaas.config` is often written), `\` escapes.
pub fn parse_java_properties(text: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut logical = String::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        let trimmed = line.trim_start();
        if logical.is_empty() && (trimmed.is_empty() || trimmed.starts_with(['#', '!'])) {
            continue;
        }
        logical.push_str(trimmed);
        // An odd number of trailing backslashes continues the line.
        let trailing = logical.chars().rev().take_while(|c| *c == '\\').count();
        if trailing % 2 == 1 {
            logical.pop();
            if lines.clone().next().is_some() {
                continue;
            }
        }
        let (k, v) = split_property(&logical);
        if !k.is_empty() {
            out.insert(k, v);
        }
        logical.clear();
    }
    out
}

/// One logical line into key and value, escapes resolved.
fn split_property(line: &str) -> (String, String) {
    let mut key = String::new();
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                if let Some(n) = chars.next() {
                    key.push(unescape(n));
                }
            }
            '=' | ':' => break,
            c if c.is_whitespace() => {
                // `key value`, or `key = value`.
                while chars.peek().is_some_and(|c| c.is_whitespace()) {
                    chars.next();
                }
                if chars.peek().is_some_and(|c| *c == '=' || *c == ':') {
                    chars.next();
                }
                break;
            }
            c => key.push(c),
        }
    }
    while chars.peek().is_some_and(|c| c.is_whitespace()) {
        chars.next();
    }
    let mut value = String::new();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                if let Some(n) = chars.next() {
                    value.push(unescape(n));
                }
            }
            c => value.push(c),
        }
    }
    (key, value.trim_end().to_owned())
}

fn unescape(c: char) -> char {
    match c {
        'n' => '\n',
        't' => '\t',
        'r' => '\r',
        other => other,
    }
}

/// Java client properties as librdkafka's keys.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Translated {
    /// What `floe_client::security` reads.
    pub rdkafka: BTreeMap<String, String>,
    /// `request.timeout.ms`, if given.
    pub request_timeout_ms: Option<u64>,
    /// Keys that mean nothing to Floe (client.id, retries, …), sorted.
    pub ignored: Vec<String>,
}

/// A property that is `true` or `false` (`print.key`, `parse.key`, …).
pub(crate) fn bool_prop(k: &str, v: &str) -> anyhow::Result<bool> {
    match v.trim().to_ascii_lowercase().as_str() {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => bail!("{k}={v}: expected true or false"),
    }
}

/// Translates a Java client's security properties: `security.protocol`,
/// `sasl.mechanism`, `sasl.jaas.config` (PLAIN and SCRAM login modules),
/// PEM trust and key stores. A Java keystore (JKS, PKCS12) or a login
/// module Floe cannot use is an error that says so; keys of no meaning to
/// Floe are listed in `ignored`.
pub fn translate_java_properties(props: &BTreeMap<String, String>) -> Result<Translated, String> {
    let mut out = Translated::default();
    let get = |k: &str| props.get(k).map(|v| v.trim()).filter(|v| !v.is_empty());
    for (k, v) in props {
        let v = v.trim();
        match k.as_str() {
            k if floe_client::security::PROPERTY_KEYS.contains(&k) => {
                out.rdkafka.insert(k.to_owned(), v.to_owned());
            }
            "sasl.jaas.config" => {
                let login = parse_jaas(v)?;
                out.rdkafka.insert("sasl.username".into(), login.username);
                out.rdkafka.insert("sasl.password".into(), login.password);
            }
            "ssl.truststore.location" => {
                pem_store("truststore", v, get("ssl.truststore.type"))?;
                out.rdkafka.insert("ssl.ca.location".into(), v.to_owned());
            }
            "ssl.keystore.location" => {
                pem_store("keystore", v, get("ssl.keystore.type"))?;
                out.rdkafka
                    .insert("ssl.certificate.location".into(), v.to_owned());
                out.rdkafka.insert("ssl.key.location".into(), v.to_owned());
            }
            "ssl.endpoint.identification.algorithm" => {
                // Java's empty value turns the host name check off; Floe
                // does not offer that.
                let v = if v.is_empty() { "none" } else { v };
                out.rdkafka.insert(k.to_owned(), v.to_owned());
            }
            "ssl.truststore.certificates"
            | "ssl.keystore.certificate.chain"
            | "ssl.keystore.key" => {
                return Err(format!(
                    "{k}: PEM given inline is not supported by Floe; put it in a file and give \
                     ssl.truststore.location / ssl.keystore.location with type PEM"
                ));
            }
            "sasl.login.callback.handler.class"
            | "sasl.client.callback.handler.class"
            | "sasl.oauthbearer.token.endpoint.url" => {
                return Err(format!(
                    "{k}: custom login callbacks and OAUTHBEARER are not supported by the Floe tools"
                ));
            }
            "request.timeout.ms" | "default.api.timeout.ms" => match v.parse::<u64>() {
                Ok(ms) => {
                    out.request_timeout_ms = Some(out.request_timeout_ms.map_or(ms, |o| o.max(ms)))
                }
                Err(_) => return Err(format!("{k}={v:?} is not a number of ms")),
            },
            // Store types and passwords: meaningful with their location only.
            "ssl.truststore.type"
            | "ssl.keystore.type"
            | "ssl.truststore.password"
            | "ssl.keystore.password"
            | "ssl.key.password" => {}
            other => out.ignored.push(other.to_owned()),
        }
    }
    if let Some(m) = get("sasl.mechanism").or(get("sasl.mechanisms"))
        && !matches!(m, "PLAIN" | "SCRAM-SHA-256" | "SCRAM-SHA-512")
    {
        return Err(format!(
            "sasl.mechanism={m}: the Floe tools log in with PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512"
        ));
    }
    Ok(out)
}

/// A store Floe can read: PEM. JKS and PKCS12 (Java's default is JKS)
/// are refused with how to convert them.
fn pem_store(what: &str, location: &str, kind: Option<&str>) -> Result<(), String> {
    let lower = location.to_ascii_lowercase();
    let looks_pem = [".pem", ".crt", ".cer", ".key"]
        .iter()
        .any(|e| lower.ends_with(e));
    match kind.map(str::to_ascii_uppercase).as_deref() {
        Some("PEM") => Ok(()),
        None if looks_pem => Ok(()),
        other => Err(format!(
            "ssl.{what}.location {location}: a Java {} store cannot be read by Floe; convert it \
             to PEM (keytool -exportcert -rfc, or openssl pkcs12 -nodes) and set \
             ssl.{what}.type=PEM",
            other
                .unwrap_or("JKS (the default ssl.{what}.type)")
                .replace("{what}", what)
        )),
    }
}

/// The user name and password of a JAAS login.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JaasLogin {
    pub username: String,
    pub password: String,
}

/// Reads `sasl.jaas.config`: `org.apache.kafka.common.security.plain.PlainLoginModule
/// required username="alice" password="secret";` (or ScramLoginModule).
pub fn parse_jaas(text: &str) -> Result<JaasLogin, String> {
    let text = text.trim().trim_end_matches(';').trim();
    let (module, rest) = text.split_once(char::is_whitespace).ok_or_else(|| {
        "sasl.jaas.config: expected `LoginModule required key=\"value\" …;`".to_owned()
    })?;
    let short = module.rsplit('.').next().unwrap_or(module);
    if !matches!(short, "PlainLoginModule" | "ScramLoginModule") {
        return Err(format!(
            "sasl.jaas.config: login module {short} is not supported by the Floe tools \
             (PlainLoginModule or ScramLoginModule)"
        ));
    }
    let rest = rest.trim_start();
    let rest = ["required", "requisite", "sufficient", "optional"]
        .iter()
        .find_map(|flag| rest.strip_prefix(flag))
        .unwrap_or(rest);
    let mut options: BTreeMap<String, String> = BTreeMap::new();
    let mut chars = rest.chars().peekable();
    loop {
        while chars.peek().is_some_and(|c| c.is_whitespace() || *c == ';') {
            chars.next();
        }
        if chars.peek().is_none() {
            break;
        }
        let key: String =
            std::iter::from_fn(|| chars.next_if(|c| *c != '=' && !c.is_whitespace())).collect();
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        if chars.next() != Some('=') {
            return Err(format!("sasl.jaas.config: option {key} has no `=`"));
        }
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        let mut value = String::new();
        if chars.peek() == Some(&'"') {
            chars.next();
            let mut closed = false;
            while let Some(c) = chars.next() {
                match c {
                    '\\' => value.extend(chars.next()),
                    '"' => {
                        closed = true;
                        break;
                    }
                    c => value.push(c),
                }
            }
            if !closed {
                return Err(format!(
                    "sasl.jaas.config: the value of {key} has no closing quote"
                ));
            }
        } else {
            value =
                std::iter::from_fn(|| chars.next_if(|c| !c.is_whitespace() && *c != ';')).collect();
        }
        options.insert(key, value);
    }
    let take = |k: &str| {
        options
            .get(k)
            .cloned()
            .ok_or_else(|| format!("sasl.jaas.config: no {k}=\"…\""))
    };
    Ok(JaasLogin {
        username: take("username")?,
        password: take("password")?,
    })
}

/// Kafka's internal topics (`--exclude-internal` leaves them out).
pub fn is_internal(topic: &str) -> bool {
    matches!(
        topic,
        "__consumer_offsets" | "__transaction_state" | "__share_group_state"
    )
}

/// Reads a line from stdin for a confirmation; `y` (any case) agrees.
pub fn confirmed(question: &str) -> bool {
    println!("{question}");
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).is_ok() && line.trim().eq_ignore_ascii_case("y")
}
