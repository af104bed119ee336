//! Bearer tokens for people on the admin port (the indexer's query API):
//! `Authorization: Bearer TOKEN` names a principal (`User:alice`), whose
//! topic READ ACLs then decide what it may look up or backfill.
//!
//! The file (`--admin-token-file`) has one token a line:
//! `PRINCIPAL TOKEN` or `PRINCIPAL sha256:HEX` (the token's SHA-256, so
//! that the file need not hold the token itself); blank lines and `#`
//! comments are skipped. It is read again when it changes (looked at no
//! more than every [`RECHECK`]), so tokens are added and revoked without a
//! restart.

use std::path::PathBuf;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime};

use aws_lc_rs::digest;

/// How often the file's modification time is looked at.
pub const RECHECK: Duration = Duration::from_secs(2);
/// The shortest token accepted (characters).
pub const MIN_TOKEN_CHARS: usize = 16;

/// The tokens of one file's text.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Tokens {
    /// SHA-256 of each token, and its principal.
    by_hash: Vec<([u8; 32], String)>,
}

fn sha256(b: &[u8]) -> [u8; 32] {
    let d = digest::digest(&digest::SHA256, b);
    let mut out = [0u8; 32];
    out.copy_from_slice(d.as_ref());
    out
}

fn unhex32(s: &str) -> Option<[u8; 32]> {
    if s.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, o) in out.iter_mut().enumerate() {
        *o = u8::from_str_radix(s.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

impl Tokens {
    /// Parses a file's text; an error names the line.
    pub fn parse(text: &str) -> Result<Tokens, String> {
        let mut by_hash = Vec::new();
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let mut parts = line.split_whitespace();
            let (Some(principal), Some(token), None) = (parts.next(), parts.next(), parts.next())
            else {
                return Err(format!("line {}: PRINCIPAL TOKEN expected", n + 1));
            };
            if !principal.contains(':') {
                return Err(format!(
                    "line {}: the principal {principal:?} needs a type (User:NAME)",
                    n + 1
                ));
            }
            let hash = match token.strip_prefix("sha256:") {
                Some(hex) => unhex32(hex).ok_or_else(|| {
                    format!("line {}: sha256: wants 64 hexadecimal digits", n + 1)
                })?,
                None if token.len() < MIN_TOKEN_CHARS => {
                    return Err(format!(
                        "line {}: a token has at least {MIN_TOKEN_CHARS} characters",
                        n + 1
                    ));
                }
                None => sha256(token.as_bytes()),
            };
            by_hash.push((hash, principal.to_string()));
        }
        Ok(Tokens { by_hash })
    }

    /// The principal of a presented token. Every entry is compared, each
    /// in constant time, so timing tells nothing of which (if any) matched.
    pub fn principal(&self, token: &str) -> Option<&str> {
        let h = sha256(token.as_bytes());
        let mut found = None;
        for (k, p) in &self.by_hash {
            if aws_lc_rs::constant_time::verify_slices_are_equal(k, &h).is_ok() {
                found = Some(p.as_str());
            }
        }
        found
    }

    pub fn len(&self) -> usize {
        self.by_hash.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_hash.is_empty()
    }
}

/// A token file, read again when it changes.
#[derive(Debug)]
pub struct TokenFile {
    path: PathBuf,
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    tokens: Tokens,
    stamp: Option<SystemTime>,
    checked: Instant,
}

impl TokenFile {
    /// Reads the file; an error stops the process at start.
    pub fn open(path: PathBuf) -> Result<TokenFile, String> {
        let (tokens, stamp) = Self::read(&path)?;
        Ok(TokenFile {
            path,
            state: Mutex::new(State {
                tokens,
                stamp,
                checked: Instant::now(),
            }),
        })
    }

    fn read(path: &PathBuf) -> Result<(Tokens, Option<SystemTime>), String> {
        let stamp = std::fs::metadata(path).and_then(|m| m.modified()).ok();
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        let tokens = Tokens::parse(&text).map_err(|e| format!("{}: {e}", path.display()))?;
        Ok((tokens, stamp))
    }

    /// The principal of a presented token, from the file as it is now
    /// (a file that no longer parses keeps the tokens last read).
    pub fn principal(&self, token: &str) -> Option<String> {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if s.checked.elapsed() >= RECHECK {
            s.checked = Instant::now();
            let stamp = std::fs::metadata(&self.path)
                .and_then(|m| m.modified())
                .ok();
            if stamp != s.stamp {
                match Self::read(&self.path) {
                    Ok((tokens, stamp)) => {
                        tracing::info!(path = %self.path.display(), tokens = tokens.len(), "admin tokens reloaded");
                        s.tokens = tokens;
                        s.stamp = stamp;
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "admin token file changed but does not parse; keeping the tokens in use");
                        s.stamp = stamp;
                    }
                }
            }
        }
        s.tokens.principal(token).map(str::to_string)
    }
}

static TOKENS: OnceLock<TokenFile> = OnceLock::new();

/// Installs the process's admin tokens (once).
pub fn install(file: TokenFile) -> Result<(), String> {
    TOKENS
        .set(file)
        .map_err(|_| "admin tokens are already installed".to_string())
}

/// The process's admin tokens, if a file was given.
pub fn current() -> Option<&'static TokenFile> {
    TOKENS.get()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn tokens_name_their_principals() {
        let hashed = sha256(b"bob-token-0123456789")
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>();
        let t = Tokens::parse(&format!(
            "# people\nUser:alice alice-token-0123456789\n\nUser:bob sha256:{hashed}\n"
        ))
        .unwrap();
        assert_eq!(t.len(), 2);
        assert_eq!(t.principal("alice-token-0123456789"), Some("User:alice"));
        assert_eq!(t.principal("bob-token-0123456789"), Some("User:bob"));
        assert_eq!(t.principal("alice-token-012345678"), None);
        assert_eq!(t.principal(""), None);
    }

    #[test]
    fn bad_lines_are_refused_with_their_number() {
        for (text, want) in [
            ("User:a short", "line 1"),
            ("alice 0123456789abcdef0123", "User:NAME"),
            ("User:a", "PRINCIPAL TOKEN"),
            ("# c\nUser:a sha256:abc", "line 2"),
            ("User:a tok-0123456789abcdef extra", "PRINCIPAL TOKEN"),
        ] {
            let e = Tokens::parse(text).unwrap_err();
            assert!(e.contains(want), "{text}: {e}");
        }
    }

    #[test]
    fn the_file_is_read_again_when_it_changes() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("tokens");
        std::fs::write(&p, "User:a first-token-0123456789\n").unwrap();
        let f = TokenFile::open(p.clone()).unwrap();
        assert_eq!(
            f.principal("first-token-0123456789").as_deref(),
            Some("User:a")
        );
        std::fs::write(&p, "User:b second-token-0123456789\n").unwrap();
        std::fs::File::options()
            .write(true)
            .open(&p)
            .unwrap()
            .set_modified(SystemTime::now() + Duration::from_secs(5))
            .unwrap();
        f.state.lock().unwrap().checked = Instant::now() - RECHECK;
        assert_eq!(f.principal("first-token-0123456789"), None);
        assert_eq!(
            f.principal("second-token-0123456789").as_deref(),
            Some("User:b")
        );
    }
}
