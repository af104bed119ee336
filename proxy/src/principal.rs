//! Who a connection is: Kafka's `KafkaPrincipal` (`User:alice`), and how a
//! client certificate's subject becomes one (Kafka's
//! `ssl.principal.mapping.rules`).
//!
//! A connection on a PLAINTEXT listener, or on an SSL listener without a
//! client certificate, is `User:ANONYMOUS`; after SASL it is the user that
//! authenticated; with a client certificate it is the certificate's subject
//! (RFC 2253, most specific first: `CN=alice,OU=eng,O=Example`) mapped by
//! the rules.

use std::fmt;

use regex::Regex;

/// A principal: Kafka's type (`User`) and name.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Principal {
    pub kind: String,
    pub name: String,
}

impl Default for Principal {
    /// `User:ANONYMOUS`.
    fn default() -> Self {
        Principal::anonymous()
    }
}

impl Principal {
    pub const USER: &'static str = "User";

    /// `User:name`.
    pub fn user(name: impl Into<String>) -> Principal {
        Principal {
            kind: Principal::USER.to_string(),
            name: name.into(),
        }
    }

    /// Kafka's unauthenticated principal.
    pub fn anonymous() -> Principal {
        Principal::user("ANONYMOUS")
    }

    pub fn is_anonymous(&self) -> bool {
        self.kind == Principal::USER && self.name == "ANONYMOUS"
    }
}

impl fmt::Display for Principal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.kind, self.name)
    }
}

/// A mapping rule that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("ssl principal mapping rules: {0}")]
pub struct RuleError(String);

/// How a name's case changes after a rule's replacement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Case {
    Keep,
    Lower,
    Upper,
}

#[derive(Debug, Clone)]
enum Rule {
    /// The subject as it is.
    Default,
    /// A subject that matches `pattern` whole becomes `replacement`.
    Replace {
        pattern: Regex,
        replacement: String,
        case: Case,
    },
}

/// Kafka's `ssl.principal.mapping.rules`: `RULE:pattern/replacement/[LU]`
/// entries and `DEFAULT`, separated by commas, tried in order; the first
/// whose pattern matches the whole subject decides. No rule matching is
/// the subject as it is (as `DEFAULT`).
#[derive(Debug, Clone)]
pub struct PrincipalRules {
    rules: Vec<Rule>,
}

impl Default for PrincipalRules {
    fn default() -> Self {
        PrincipalRules {
            rules: vec![Rule::Default],
        }
    }
}

/// Reads up to an unescaped `/`; `\/` stands for `/`.
fn until_slash(s: &str) -> Option<(String, &str)> {
    let mut out = String::new();
    let mut chars = s.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '\\' if s[i + 1..].starts_with('/') => {
                out.push('/');
                chars.next();
            }
            '/' => return Some((out, &s[i + 1..])),
            c => out.push(c),
        }
    }
    None
}

impl PrincipalRules {
    pub fn parse(spec: &str) -> Result<PrincipalRules, RuleError> {
        let mut rules = Vec::new();
        let mut rest = spec;
        loop {
            rest = rest.trim_start_matches(|c: char| c == ',' || c.is_whitespace());
            if rest.is_empty() {
                break;
            }
            if let Some(r) = rest.strip_prefix("DEFAULT") {
                rules.push(Rule::Default);
                rest = r;
                continue;
            }
            let Some(r) = rest.strip_prefix("RULE:") else {
                return Err(RuleError(format!(
                    "expected RULE:pattern/replacement/[LU] or DEFAULT at {rest:?}"
                )));
            };
            let (pattern, r) = until_slash(r)
                .ok_or_else(|| RuleError(format!("rule {rest:?} has no replacement")))?;
            let (replacement, r) = until_slash(r).ok_or_else(|| {
                RuleError(format!(
                    "rule {rest:?} does not end its replacement with '/'"
                ))
            })?;
            let (case, r) = match r.chars().next() {
                Some('L') => (Case::Lower, &r[1..]),
                Some('U') => (Case::Upper, &r[1..]),
                _ => (Case::Keep, r),
            };
            let pattern = Regex::new(&format!("^(?:{pattern})$"))
                .map_err(|e| RuleError(format!("pattern {pattern:?}: {e}")))?;
            rules.push(Rule::Replace {
                pattern,
                replacement,
                case,
            });
            rest = r;
        }
        if rules.is_empty() {
            rules.push(Rule::Default);
        }
        Ok(PrincipalRules { rules })
    }

    /// The principal name of a certificate subject.
    pub fn map(&self, subject: &str) -> String {
        for rule in &self.rules {
            match rule {
                Rule::Default => return subject.to_string(),
                Rule::Replace {
                    pattern,
                    replacement,
                    case,
                } => {
                    if !pattern.is_match(subject) {
                        continue;
                    }
                    let name = pattern.replace(subject, replacement.as_str()).into_owned();
                    return match case {
                        Case::Keep => name,
                        Case::Lower => name.to_lowercase(),
                        Case::Upper => name.to_uppercase(),
                    };
                }
            }
        }
        subject.to_string()
    }
}

/// The subject of a DER certificate as RFC 2253 writes it (most specific
/// attribute first: `CN=alice,OU=eng,O=Example,C=US`), as Kafka's
/// `X500Principal.getName()`; `None` if the certificate cannot be read.
pub fn subject_of(der: &[u8]) -> Option<String> {
    use x509_parser::prelude::{FromDer, X509Certificate};
    let (_, cert) = X509Certificate::from_der(der).ok()?;
    let mut rdns = Vec::new();
    for rdn in cert.subject().iter() {
        let attrs: Vec<String> = rdn
            .iter()
            .map(|a| {
                let oid = a.attr_type();
                let key =
                    x509_parser::objects::oid2abbrev(oid, x509_parser::objects::oid_registry())
                        .map(str::to_string)
                        .unwrap_or_else(|_| oid.to_id_string());
                let value = a
                    .as_str()
                    .map(escape_rfc2253)
                    .unwrap_or_else(|_| format!("#{}", hex(a.attr_value().data)));
                format!("{}={value}", short_key(&key))
            })
            .collect();
        rdns.push(attrs.join("+"));
    }
    rdns.reverse();
    Some(rdns.join(","))
}

/// RFC 2253's keywords for the registry's abbreviations that differ.
fn short_key(k: &str) -> &str {
    match k {
        "commonName" => "CN",
        "organizationName" => "O",
        "organizationalUnitName" => "OU",
        "countryName" => "C",
        "localityName" => "L",
        "stateOrProvinceName" => "ST",
        "streetAddress" => "STREET",
        "domainComponent" => "DC",
        "userId" => "UID",
        other => other,
    }
}

fn escape_rfc2253(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for (i, c) in v.chars().enumerate() {
        let special = matches!(c, ',' | '+' | '"' | '\\' | '<' | '>' | ';')
            || (i == 0 && (c == '#' || c == ' '))
            || (i + 1 == v.chars().count() && c == ' ');
        if special {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn rules_map_a_subject_as_kafka_does() {
        let rules = PrincipalRules::parse(
            "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,RULE:^CN=(.*?),OU=(.*?),O=(.*?)$/$1@$2/L, DEFAULT",
        )
        .unwrap();
        assert_eq!(
            rules.map("CN=kafka-client,OU=ServiceUsers,O=Org,C=US"),
            "kafka-client"
        );
        assert_eq!(rules.map("CN=Alice,OU=Eng,O=Example"), "alice@eng");
        assert_eq!(rules.map("CN=bob,O=Example"), "CN=bob,O=Example");
        let upper = PrincipalRules::parse("RULE:^CN=([a-z]+)$/$1/U").unwrap();
        assert_eq!(upper.map("CN=carol"), "CAROL");
        // No rule matches: the subject as it is.
        assert_eq!(upper.map("CN=Dan2"), "CN=Dan2");
        let slash = PrincipalRules::parse(r"RULE:^CN=(.*)$/svc\/$1/").unwrap();
        assert_eq!(slash.map("CN=x"), "svc/x");
        assert_eq!(PrincipalRules::default().map("CN=a,O=b"), "CN=a,O=b");
        assert_eq!(PrincipalRules::parse("").unwrap().map("CN=a"), "CN=a");
    }

    #[test]
    fn bad_rules_are_refused() {
        for bad in [
            "RULE:abc",
            "RULE:a/b",
            "RULE:(/x/",
            "NOPE",
            "DEFAULT,RULE:x",
        ] {
            assert!(PrincipalRules::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn principals_print_as_kafka_names_them() {
        assert_eq!(Principal::user("alice").to_string(), "User:alice");
        assert!(Principal::anonymous().is_anonymous());
        assert!(!Principal::user("alice").is_anonymous());
    }

    #[test]
    fn a_certificate_subject_is_written_most_specific_first() {
        use rustls_pki_types::CertificateDer;
        use rustls_pki_types::pem::PemObject;

        let ca = crate::tls::test_certs::ca("ca");
        let (pem, _) = crate::tls::test_certs::leaf(&ca, "Alice", &["localhost"]);
        let der = CertificateDer::from_pem_slice(pem.as_bytes()).unwrap();
        let subject = subject_of(&der).unwrap();
        assert_eq!(subject, "OU=eng,CN=Alice");
        let rules = PrincipalRules::parse("RULE:^OU=eng,CN=(.*)$/$1/L").unwrap();
        assert_eq!(rules.map(&subject), "alice");
        assert_eq!(subject_of(b"not a certificate"), None);
    }

    #[test]
    fn values_are_escaped_as_rfc_2253_says() {
        assert_eq!(escape_rfc2253("a,b"), r"a\,b");
        assert_eq!(escape_rfc2253(" x "), r"\ x\ ");
        assert_eq!(escape_rfc2253("#1"), r"\#1");
        assert_eq!(escape_rfc2253("plain"), "plain");
    }
}
