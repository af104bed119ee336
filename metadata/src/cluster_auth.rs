//! The cluster secret: the internal planes (the metadata API and Raft, the
//! broker RPC, the admin and query API) authenticate each other's requests
//! with an HMAC-SHA256 over the request, keyed with a secret every process
//! of the cluster reads from a file (`--cluster-secret-file`).
//!
//! A signed request carries `x-floe-auth: v1 ts=MILLIS nonce=HEX sig=HEX`,
//! the signature over the method, the path and query, the time, the nonce
//! and the SHA-256 of the body. A receiver refuses (401) a request that is
//! unsigned, badly signed, more than [`WINDOW`] away from its clock, or a
//! replay of a nonce it saw within the window. Health probes and
//! `/metrics` stay open. Rotation: a process accepts the signatures of the
//! secrets of every line of the file (the first signs), so a new secret is
//! added everywhere, then made first, then the old one removed.
//!
//! The secret is per process (installed once at start, [`install`]); off
//! when no file is given.

use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use aws_lc_rs::{digest, hmac};

/// The header a signed request carries.
pub const HEADER: &str = "x-floe-auth";
/// How far a request's time may be from the receiver's clock.
pub const WINDOW: Duration = Duration::from_secs(60);
/// The most nonces remembered (older ones are forgotten first; a replay
/// past this many requests in one window is still caught by its time).
const MAX_NONCES: usize = 1 << 20;

/// The shortest secret accepted (bytes).
pub const MIN_SECRET_BYTES: usize = 16;

/// The secrets of the cluster: the first signs, any verifies.
pub struct ClusterSecret {
    keys: Vec<hmac::Key>,
    seen: Mutex<Seen>,
}

impl std::fmt::Debug for ClusterSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterSecret")
            .field("keys", &self.keys.len())
            .finish_non_exhaustive()
    }
}

#[derive(Default)]
struct Seen {
    at: HashMap<[u8; 16], u64>,
    order: VecDeque<([u8; 16], u64)>,
}

/// Why a request was refused (the label of the metric).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    Missing,
    Malformed,
    BadSignature,
    Expired,
    Replayed,
}

impl Refusal {
    pub fn label(self) -> &'static str {
        match self {
            Refusal::Missing => "missing",
            Refusal::Malformed => "malformed",
            Refusal::BadSignature => "bad_signature",
            Refusal::Expired => "expired",
            Refusal::Replayed => "replayed",
        }
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

fn now_ms(now: SystemTime) -> u64 {
    now.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

fn message(method: &str, path: &str, ts: u64, nonce: &str, body: &[u8]) -> Vec<u8> {
    let body_hash = hex(digest::digest(&digest::SHA256, body).as_ref());
    format!("v1\n{method}\n{path}\n{ts}\n{nonce}\n{body_hash}").into_bytes()
}

impl ClusterSecret {
    /// The secrets of a file's text: one a line (blank lines and `#`
    /// comments skipped), each at least [`MIN_SECRET_BYTES`].
    pub fn parse(text: &str) -> Result<ClusterSecret, String> {
        let lines: Vec<&str> = text
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .collect();
        if lines.is_empty() {
            return Err("the cluster secret file has no secret".into());
        }
        if lines.iter().any(|l| l.len() < MIN_SECRET_BYTES) {
            return Err(format!(
                "a cluster secret has fewer than {MIN_SECRET_BYTES} characters"
            ));
        }
        Ok(ClusterSecret {
            keys: lines
                .iter()
                .map(|l| hmac::Key::new(hmac::HMAC_SHA256, l.as_bytes()))
                .collect(),
            seen: Mutex::new(Seen::default()),
        })
    }

    /// The secret of a file.
    pub fn read(path: &std::path::Path) -> Result<ClusterSecret, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read the cluster secret {}: {e}", path.display()))?;
        Self::parse(&text).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// The header value signing a request.
    pub fn sign(&self, method: &str, path: &str, body: &[u8], now: SystemTime) -> String {
        let mut nonce = [0u8; 16];
        if aws_lc_rs::rand::fill(&mut nonce).is_err() {
            // Without randomness the time still orders requests; a replay
            // check may then refuse one, never accept a forgery.
            nonce[..8].copy_from_slice(&now_ms(now).to_be_bytes());
        }
        let nonce = hex(&nonce);
        let ts = now_ms(now);
        let sig = hmac::sign(&self.keys[0], &message(method, path, ts, &nonce, body));
        format!("v1 ts={ts} nonce={nonce} sig={}", hex(sig.as_ref()))
    }

    /// Checks a request's header.
    pub fn verify(
        &self,
        header: Option<&str>,
        method: &str,
        path: &str,
        body: &[u8],
        now: SystemTime,
    ) -> Result<(), Refusal> {
        let header = header.ok_or(Refusal::Missing)?;
        let mut parts = header.split(' ');
        if parts.next() != Some("v1") {
            return Err(Refusal::Malformed);
        }
        let (mut ts, mut nonce, mut sig) = (None, None, None);
        for p in parts {
            match p.split_once('=') {
                Some(("ts", v)) => ts = v.parse::<u64>().ok(),
                Some(("nonce", v)) => nonce = Some(v),
                Some(("sig", v)) => sig = unhex(v),
                _ => return Err(Refusal::Malformed),
            }
        }
        let (Some(ts), Some(nonce), Some(sig)) = (ts, nonce, sig) else {
            return Err(Refusal::Malformed);
        };
        let nonce_bytes: [u8; 16] = unhex(nonce)
            .and_then(|n| n.try_into().ok())
            .ok_or(Refusal::Malformed)?;
        let msg = message(method, path, ts, nonce, body);
        if !self
            .keys
            .iter()
            .any(|k| hmac::verify(k, &msg, &sig).is_ok())
        {
            return Err(Refusal::BadSignature);
        }
        let now = now_ms(now);
        let window = u64::try_from(WINDOW.as_millis()).unwrap_or(u64::MAX);
        if ts.abs_diff(now) > window {
            return Err(Refusal::Expired);
        }
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        while let Some((n, at)) = seen.order.front().copied() {
            if at + 2 * window < now || seen.order.len() > MAX_NONCES {
                seen.order.pop_front();
                if seen.at.get(&n) == Some(&at) {
                    seen.at.remove(&n);
                }
            } else {
                break;
            }
        }
        if seen.at.insert(nonce_bytes, ts).is_some() {
            return Err(Refusal::Replayed);
        }
        seen.order.push_back((nonce_bytes, ts));
        Ok(())
    }
}

static SECRET: OnceLock<ClusterSecret> = OnceLock::new();

/// Installs the process's cluster secret (once; later calls are refused).
pub fn install(secret: ClusterSecret) -> Result<(), String> {
    SECRET
        .set(secret)
        .map_err(|_| "the cluster secret is already installed".to_string())
}

/// The process's cluster secret, if one is installed.
pub fn current() -> Option<&'static ClusterSecret> {
    SECRET.get()
}

/// Paths served without a signature: health probes, metrics, and the
/// console's static files (which hold no data: the page asks for a token
/// when its API, under `/ui/api/`, refuses it).
pub fn is_open_path(path: &str) -> bool {
    matches!(
        path,
        "/livez" | "/readyz" | "/healthz" | "/metrics" | "/ui" | "/ui/"
    ) || (path.starts_with("/ui/assets/") && !path.contains(".."))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn probes_metrics_and_the_consoles_files_are_open_and_its_data_is_not() {
        for open in [
            "/livez",
            "/readyz",
            "/metrics",
            "/ui",
            "/ui/",
            "/ui/assets/app.js",
            "/ui/assets/pages/topics.js",
        ] {
            assert!(is_open_path(open), "{open}");
        }
        for closed in [
            "/ui/api/topics",
            "/ui/apix",
            "/v1/status",
            "/ui/assets/../api/topics",
            "/uix",
        ] {
            assert!(!is_open_path(closed), "{closed}");
        }
    }

    fn secret(text: &str) -> ClusterSecret {
        ClusterSecret::parse(text).unwrap()
    }

    #[test]
    fn a_signed_request_verifies_once_within_the_window() {
        let s = secret("0123456789abcdef-secret\n");
        let now = SystemTime::now();
        let h = s.sign("POST", "/v1/commit", b"body", now);
        assert_eq!(
            s.verify(Some(&h), "POST", "/v1/commit", b"body", now),
            Ok(())
        );
        assert_eq!(
            s.verify(Some(&h), "POST", "/v1/commit", b"body", now),
            Err(Refusal::Replayed)
        );
        let h = s.sign("POST", "/v1/commit", b"body", now);
        for (m, p, b) in [
            ("GET", "/v1/commit", &b"body"[..]),
            ("POST", "/v1/other", b"body"),
            ("POST", "/v1/commit", b"bodz"),
        ] {
            assert_eq!(s.verify(Some(&h), m, p, b, now), Err(Refusal::BadSignature));
        }
        let late = now + Duration::from_secs(120);
        assert_eq!(
            s.verify(Some(&h), "POST", "/v1/commit", b"body", late),
            Err(Refusal::Expired)
        );
        assert_eq!(s.verify(None, "POST", "/", b"", now), Err(Refusal::Missing));
        for bad in [
            "",
            "v2 ts=1",
            "v1 ts=x nonce=00 sig=00",
            "v1 what=1",
            "v1 ts=1 nonce=zz sig=00",
        ] {
            assert!(s.verify(Some(bad), "POST", "/", b"", now).is_err(), "{bad}");
        }
    }

    #[test]
    fn another_secret_is_refused_and_rotation_accepts_both() {
        let now = SystemTime::now();
        let old = secret("old-secret-0123456789");
        let other = secret("someone-elses-secret-42");
        let h = other.sign("GET", "/v1/x", b"", now);
        assert_eq!(
            old.verify(Some(&h), "GET", "/v1/x", b"", now),
            Err(Refusal::BadSignature)
        );
        let both = secret("# rotation\nnew-secret-0123456789\nold-secret-0123456789\n");
        let h = old.sign("GET", "/v1/x", b"", now);
        assert_eq!(both.verify(Some(&h), "GET", "/v1/x", b"", now), Ok(()));
        let h = both.sign("GET", "/v1/y", b"", now);
        assert_eq!(
            old.verify(Some(&h), "GET", "/v1/y", b"", now),
            Err(Refusal::BadSignature)
        );
        assert!(ClusterSecret::parse("short").is_err());
        assert!(ClusterSecret::parse("# only a comment\n").is_err());
    }
}
