//! Kafka listeners as Kafka names them: `listeners`,
//! `advertised.listeners` and `listener.security.protocol.map`.
//!
//! A listener is a name, a security protocol and an address:
//! `PLAINTEXT://127.0.0.1:9092,SASL_SSL://0.0.0.0:9094`. Its name maps to
//! its protocol through the protocol map; the four protocol names map to
//! themselves unless the map says otherwise, so `SASL_SSL://…` needs no
//! map while `EXTERNAL://…` does (`EXTERNAL:SASL_SSL`). Each listener is
//! advertised at its own address (`advertised.listeners`, by name; the
//! bound address when not given), and a client is shown the brokers at the
//! addresses of the listener it came in on ([`crate::nodes`]).
//!
//! A proxy registers its advertised listeners with the metadata service as
//! one string: `HOST:PORT` when it has one listener (as before listeners
//! had names), `NAME://HOST:PORT,NAME://HOST:PORT` when it has several
//! ([`encode_advertised`], [`advertised_for`]).

use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;

/// How a listener's connections are secured (Kafka's `security.protocol`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SecurityProtocol {
    Plaintext,
    Ssl,
    SaslPlaintext,
    SaslSsl,
}

impl SecurityProtocol {
    pub const ALL: [SecurityProtocol; 4] = [
        SecurityProtocol::Plaintext,
        SecurityProtocol::Ssl,
        SecurityProtocol::SaslPlaintext,
        SecurityProtocol::SaslSsl,
    ];

    pub fn name(self) -> &'static str {
        match self {
            SecurityProtocol::Plaintext => "PLAINTEXT",
            SecurityProtocol::Ssl => "SSL",
            SecurityProtocol::SaslPlaintext => "SASL_PLAINTEXT",
            SecurityProtocol::SaslSsl => "SASL_SSL",
        }
    }

    pub fn from_name(name: &str) -> Option<SecurityProtocol> {
        SecurityProtocol::ALL
            .into_iter()
            .find(|p| p.name().eq_ignore_ascii_case(name))
    }

    /// Whether connections speak TLS.
    pub fn tls(self) -> bool {
        matches!(self, SecurityProtocol::Ssl | SecurityProtocol::SaslSsl)
    }

    /// Whether clients authenticate with SASL before any other request.
    pub fn sasl(self) -> bool {
        matches!(
            self,
            SecurityProtocol::SaslPlaintext | SecurityProtocol::SaslSsl
        )
    }
}

impl fmt::Display for SecurityProtocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A listener setting that cannot be used, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ListenerError(String);

fn err(msg: impl Into<String>) -> ListenerError {
    ListenerError(msg.into())
}

/// One `NAME://HOST:PORT` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    pub name: String,
    pub host: String,
    pub port: u16,
}

impl Endpoint {
    /// `NAME://HOST:PORT` (an IPv6 host in brackets).
    pub fn parse(s: &str) -> Result<Endpoint, ListenerError> {
        let s = s.trim();
        let (name, addr) = s
            .split_once("://")
            .ok_or_else(|| err(format!("listener {s:?} is not NAME://HOST:PORT")))?;
        if name.is_empty()
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        {
            return Err(err(format!(
                "listener name {name:?} must be letters, digits, '_' or '-'"
            )));
        }
        let (host, port) = addr
            .rsplit_once(':')
            .ok_or_else(|| err(format!("listener {s:?} has no port")))?;
        let port = port
            .parse::<u16>()
            .map_err(|_| err(format!("listener {s:?} has a bad port")))?;
        let host = host.trim_start_matches('[').trim_end_matches(']');
        Ok(Endpoint {
            name: name.to_ascii_uppercase(),
            host: host.to_string(),
            port,
        })
    }

    /// `HOST:PORT`, an IPv6 host in brackets.
    pub fn host_port(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}://{}", self.name, self.host_port())
    }
}

/// Parses a comma-separated list of endpoints; names must not repeat.
pub fn parse_endpoints(list: &[String]) -> Result<Vec<Endpoint>, ListenerError> {
    let mut out: Vec<Endpoint> = Vec::new();
    for s in list.iter().flat_map(|s| s.split(',')) {
        if s.trim().is_empty() {
            continue;
        }
        let e = Endpoint::parse(s)?;
        if out.iter().any(|o| o.name == e.name) {
            return Err(err(format!("listener name {} given twice", e.name)));
        }
        out.push(e);
    }
    Ok(out)
}

/// `listener.security.protocol.map`: `NAME:PROTOCOL,…`; the protocol
/// names map to themselves unless the map says otherwise.
pub fn parse_protocol_map(
    list: &[String],
) -> Result<BTreeMap<String, SecurityProtocol>, ListenerError> {
    let mut map: BTreeMap<String, SecurityProtocol> = SecurityProtocol::ALL
        .into_iter()
        .map(|p| (p.name().to_string(), p))
        .collect();
    for s in list.iter().flat_map(|s| s.split(',')) {
        let s = s.trim();
        if s.is_empty() {
            continue;
        }
        let (name, proto) = s
            .split_once(':')
            .ok_or_else(|| err(format!("protocol map entry {s:?} is not NAME:PROTOCOL")))?;
        let proto = SecurityProtocol::from_name(proto.trim()).ok_or_else(|| {
            err(format!(
                "unknown security protocol {proto:?} (PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL)"
            ))
        })?;
        map.insert(name.trim().to_ascii_uppercase(), proto);
    }
    Ok(map)
}

/// One listener to bind: its name, protocol, the address to bind and the
/// address to advertise.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListenerSpec {
    pub name: String,
    pub protocol: SecurityProtocol,
    pub bind: SocketAddr,
    /// `HOST:PORT` clients are told; `None`: the bound address (known once
    /// bound, when the port is 0).
    pub advertise: Option<String>,
}

/// Resolves `listeners`, `advertised.listeners` and the protocol map into
/// the listeners to bind. An advertised name that no listener has, or a
/// listener whose name maps to no protocol, is an error.
pub fn resolve(
    listeners: &[Endpoint],
    advertised: &[Endpoint],
    map: &BTreeMap<String, SecurityProtocol>,
) -> Result<Vec<ListenerSpec>, ListenerError> {
    if listeners.is_empty() {
        return Err(err("no listener"));
    }
    if let Some(a) = advertised
        .iter()
        .find(|a| !listeners.iter().any(|l| l.name == a.name))
    {
        return Err(err(format!(
            "advertised listener {} names no listener",
            a.name
        )));
    }
    listeners
        .iter()
        .map(|l| {
            let protocol = *map.get(&l.name).ok_or_else(|| {
                err(format!(
                    "listener {} has no security protocol: name it in --listener-security-protocol-map (e.g. {}:SASL_SSL)",
                    l.name, l.name
                ))
            })?;
            let ip: std::net::IpAddr = if l.host.is_empty() {
                std::net::IpAddr::from([0, 0, 0, 0])
            } else {
                l.host.parse().map_err(|_| {
                    err(format!(
                        "listener {l}: bind to an IP address (0.0.0.0 for every interface); advertise names with --advertised-listeners"
                    ))
                })?
            };
            Ok(ListenerSpec {
                name: l.name.clone(),
                protocol,
                bind: SocketAddr::new(ip, l.port),
                advertise: advertised
                    .iter()
                    .find(|a| a.name == l.name)
                    .map(Endpoint::host_port),
            })
        })
        .collect()
}

/// The string a proxy registers its advertised listeners as: `HOST:PORT`
/// for one, `NAME://HOST:PORT,…` for several.
pub fn encode_advertised(advertised: &[(String, String)]) -> String {
    match advertised {
        [(_, one)] => one.clone(),
        many => many
            .iter()
            .map(|(name, addr)| format!("{name}://{addr}"))
            .collect::<Vec<_>>()
            .join(","),
    }
}

/// The `HOST:PORT` a registered address gives for listener `name`: a plain
/// `HOST:PORT` serves every listener; a list gives the entry of that name,
/// or none (its first entry for the empty name: a proxy's default).
pub fn advertised_for<'a>(registered: &'a str, name: &str) -> Option<&'a str> {
    if !registered.contains("://") {
        return Some(registered);
    }
    registered.split(',').find_map(|e| {
        let (n, addr) = e.trim().split_once("://")?;
        (name.is_empty() || n.eq_ignore_ascii_case(name)).then_some(addr)
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn list(s: &str) -> Vec<String> {
        vec![s.to_string()]
    }

    #[test]
    fn listeners_resolve_with_the_default_protocol_names_and_a_map() {
        let l = parse_endpoints(&list(
            "PLAINTEXT://127.0.0.1:9092,sasl_ssl://0.0.0.0:9094,EXTERNAL://[::1]:0",
        ))
        .unwrap();
        let a = parse_endpoints(&list("SASL_SSL://kafka.example.com:443")).unwrap();
        let map = parse_protocol_map(&list("EXTERNAL:SSL")).unwrap();
        let specs = resolve(&l, &a, &map).unwrap();
        assert_eq!(specs.len(), 3);
        assert_eq!(specs[0].protocol, SecurityProtocol::Plaintext);
        assert_eq!(specs[0].advertise, None);
        assert_eq!(specs[1].name, "SASL_SSL");
        assert_eq!(specs[1].protocol, SecurityProtocol::SaslSsl);
        assert_eq!(specs[1].advertise.as_deref(), Some("kafka.example.com:443"));
        assert_eq!(specs[2].protocol, SecurityProtocol::Ssl);
        assert_eq!(specs[2].bind, "[::1]:0".parse().unwrap());
    }

    #[test]
    fn bad_listener_settings_say_what_is_wrong() {
        let e = |l: &str, a: &str, m: &str| {
            let l = parse_endpoints(&list(l))?;
            let a = parse_endpoints(&list(a))?;
            let m = parse_protocol_map(&list(m))?;
            resolve(&l, &a, &m)
        };
        let msg = |r: Result<Vec<ListenerSpec>, ListenerError>| r.unwrap_err().to_string();
        assert!(
            msg(e("INTERNAL://127.0.0.1:1", "", "")).contains("--listener-security-protocol-map")
        );
        assert!(msg(e("PLAINTEXT://127.0.0.1:1", "SSL://h:1", "")).contains("names no listener"));
        assert!(
            msg(e("PLAINTEXT://127.0.0.1:1,PLAINTEXT://127.0.0.1:2", "", "")).contains("twice")
        );
        assert!(msg(e("PLAINTEXT://h:1", "", "")).contains("IP address"));
        assert!(msg(e("PLAINTEXT://127.0.0.1", "", "")).contains("no port"));
        assert!(msg(e("127.0.0.1:1", "", "")).contains("NAME://"));
        assert!(
            msg(e("PLAINTEXT://127.0.0.1:1", "", "X:TLS")).contains("unknown security protocol")
        );
        assert!(msg(e("", "", "")).contains("no listener"));
    }

    #[test]
    fn registered_addresses_give_each_listener_its_own() {
        let one = encode_advertised(&[("PLAINTEXT".into(), "h:1".into())]);
        assert_eq!(one, "h:1");
        assert_eq!(advertised_for(&one, "SASL_SSL"), Some("h:1"));
        let many = encode_advertised(&[
            ("PLAINTEXT".into(), "10.0.0.1:9092".into()),
            ("SASL_SSL".into(), "kafka.example.com:9094".into()),
        ]);
        assert_eq!(
            many,
            "PLAINTEXT://10.0.0.1:9092,SASL_SSL://kafka.example.com:9094"
        );
        assert_eq!(advertised_for(&many, "PLAINTEXT"), Some("10.0.0.1:9092"));
        assert_eq!(
            advertised_for(&many, "sasl_ssl"),
            Some("kafka.example.com:9094")
        );
        assert_eq!(advertised_for(&many, "SSL"), None);
        assert_eq!(advertised_for(&many, ""), Some("10.0.0.1:9092"));
    }
}
