//! OAUTHBEARER (RFC 7628, Kafka's KIP-255): the client's one message
//! carries a bearer token, checked by [`crate::oauth`].
//!
//! The message is `n,[a=AUTHZID],` then `key=value` pairs, each ended by
//! 0x01, and a last 0x01; the `auth` pair is `Bearer TOKEN`, the others are
//! extensions (KIP-342), which Floe accepts and ignores.

use std::time::SystemTime;

use super::{AuthError, AuthFailure, Credentials, Exchange, Step};

const SEP: u8 = 0x01;
/// The longest message read (bytes): a token and some extensions.
const MAX_MESSAGE_BYTES: usize = crate::oauth::MAX_TOKEN_BYTES + 4096;

/// The client's message, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientFirst {
    pub authzid: Option<String>,
    pub token: String,
    pub extensions: Vec<(String, String)>,
}

fn malformed(what: &str) -> AuthError {
    AuthError::new(
        AuthFailure::Malformed,
        format!("OAUTHBEARER message: {what}"),
    )
}

/// A SASL name with `=2C` and `=3D` unescaped (RFC 5801).
fn saslname(s: &str) -> Result<String, AuthError> {
    let mut out = String::new();
    let mut rest = s;
    while let Some(i) = rest.find('=') {
        out.push_str(&rest[..i]);
        match rest.get(i..i + 3) {
            Some("=2C") => out.push(','),
            Some("=3D") => out.push('='),
            _ => return Err(malformed("a bad escape in the authorization id")),
        }
        rest = &rest[i + 3..];
    }
    out.push_str(rest);
    Ok(out)
}

/// Parses the client's message.
pub fn parse_client_first(msg: &[u8]) -> Result<ClientFirst, AuthError> {
    if msg.len() > MAX_MESSAGE_BYTES {
        return Err(malformed("too long"));
    }
    let text = std::str::from_utf8(msg).map_err(|_| malformed("not UTF-8"))?;
    let (gs2, rest) = text
        .split_once(char::from(SEP))
        .ok_or_else(|| malformed("no separator after the header"))?;
    let mut parts = gs2.splitn(3, ',');
    match parts.next() {
        Some("n") | Some("y") => {}
        Some(p) if p.starts_with("p=") => {
            return Err(AuthError::new(
                AuthFailure::Unsupported,
                "OAUTHBEARER with channel binding is not supported",
            ));
        }
        _ => return Err(malformed("the header does not start with n or y")),
    }
    let authzid = match parts.next() {
        Some("") => None,
        Some(a) => Some(saslname(a.strip_prefix("a=").ok_or_else(|| {
            malformed("the authorization id does not start with a=")
        })?)?),
        None => return Err(malformed("a header without its second comma")),
    };
    if parts.next() != Some("") {
        return Err(malformed("the header does not end with a comma"));
    }
    let body = rest
        .strip_suffix(char::from(SEP))
        .ok_or_else(|| malformed("no final separator"))?;
    if !body.is_empty() && !body.ends_with(char::from(SEP)) {
        return Err(malformed("a pair without its separator"));
    }
    let mut token = None;
    let mut extensions = Vec::new();
    for pair in body.split(char::from(SEP)).filter(|p| !p.is_empty()) {
        let (k, v) = pair
            .split_once('=')
            .ok_or_else(|| malformed("a pair without ="))?;
        if k.is_empty() || !k.bytes().all(|b| b.is_ascii_alphabetic()) {
            return Err(malformed("a key that is not letters"));
        }
        if k == "auth" {
            if token.is_some() {
                return Err(malformed("auth given twice"));
            }
            let (scheme, t) = v
                .split_once(' ')
                .ok_or_else(|| malformed("auth is not 'Bearer TOKEN'"))?;
            if !scheme.eq_ignore_ascii_case("bearer") || t.trim().is_empty() {
                return Err(malformed("auth is not 'Bearer TOKEN'"));
            }
            token = Some(t.trim().to_string());
        } else {
            extensions.push((k.to_string(), v.to_string()));
        }
    }
    Ok(ClientFirst {
        authzid,
        token: token.ok_or_else(|| malformed("no auth pair"))?,
        extensions,
    })
}

/// The server's side: one message, checked, then done.
#[derive(Debug, Default)]
pub struct OAuthBearerServer {
    done: bool,
    expires: Option<SystemTime>,
}

impl Exchange for OAuthBearerServer {
    fn step(&mut self, client: &[u8], creds: &dyn Credentials) -> Result<Step, AuthError> {
        if self.done {
            return Err(AuthError::new(
                AuthFailure::OutOfOrder,
                "an OAUTHBEARER message after the exchange ended",
            ));
        }
        self.done = true;
        let first = parse_client_first(client)?;
        let validator = creds.oauth().ok_or_else(|| {
            AuthError::new(
                AuthFailure::Unsupported,
                "OAUTHBEARER has no JWKS configured",
            )
        })?;
        let v = validator.verify(&first.token, SystemTime::now())?;
        if first.authzid.as_ref().is_some_and(|a| *a != v.principal) {
            return Err(AuthError::new(
                AuthFailure::Unsupported,
                "an authorization id other than the token's principal",
            ));
        }
        self.expires = Some(v.expires);
        Ok(Step::Done {
            user: v.principal,
            reply: Vec::new(),
        })
    }

    fn expires(&self) -> Option<SystemTime> {
        self.expires
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn client_messages_parse_as_rfc_7628_writes_them() {
        let m = parse_client_first(b"n,,\x01auth=Bearer abc.def.ghi\x01\x01").unwrap();
        assert_eq!(m.token, "abc.def.ghi");
        assert_eq!(m.authzid, None);
        let m =
            parse_client_first(b"n,a=al=2Cice=3D,\x01traceId=42\x01auth=bearer t\x01\x01").unwrap();
        assert_eq!(m.authzid.as_deref(), Some("al,ice="));
        assert_eq!(m.extensions, vec![("traceId".into(), "42".into())]);
        for bad in [
            &b""[..],
            b"n,,",
            b"x,,\x01auth=Bearer t\x01\x01",
            b"n,,\x01auth=Bearer t\x01",
            b"n,,\x01auth=Basic t\x01\x01",
            b"n,,\x01auth=Bearer \x01\x01",
            b"n,,\x01\x01",
            b"n,b=x,\x01auth=Bearer t\x01\x01",
            b"n,a=bad=escape,\x01auth=Bearer t\x01\x01",
            b"n,,\x01auth=Bearer t\x01auth=Bearer u\x01\x01",
            b"n,,\x01k3y=v\x01auth=Bearer t\x01\x01",
            b"\xff,,\x01\x01",
        ] {
            assert!(parse_client_first(bad).is_err(), "{bad:?}");
        }
        assert_eq!(
            parse_client_first(b"p=tls-unique,,\x01auth=Bearer t\x01\x01")
                .unwrap_err()
                .failure,
            AuthFailure::Unsupported
        );
    }
}
