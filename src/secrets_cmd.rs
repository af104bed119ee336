//! `floe secrets init`: a deployment's generated secrets, made once.
//!
//! For a cluster that has no secret store of its own (the compose file, a
//! handful of machines): `floe secrets init --out DIR` writes, when they are
//! missing,
//!
//! - `cluster-secret`: the shared secret that signs internal requests
//!   (`--cluster-secret-file`, docs/security.md);
//! - `s3-access-key` and `s3-secret-key`: an S3 server's root keys (MinIO
//!   reads them with `MINIO_ROOT_USER_FILE` and `MINIO_ROOT_PASSWORD_FILE`);
//! - `aws-credentials`: the same keys as an AWS shared credentials file's
//!   `[default]` profile, for Floe's processes (`AWS_SHARED_CREDENTIALS_FILE`).
//!
//! A file that exists is kept, so running it again at every start changes
//! nothing; `aws-credentials` is always written from the two key files, so
//! it never disagrees with them. Every file is readable by its owner only;
//! `--owner UID:GID` gives them to the user the other processes run as.

#![allow(clippy::print_stdout)]

use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};
use clap::{Args, Subcommand};

#[derive(Debug, Subcommand)]
pub enum SecretsCommand {
    /// Write the missing generated secrets of a deployment into a folder:
    /// cluster-secret, s3-access-key, s3-secret-key, aws-credentials.
    Init(InitArgs),
}

#[derive(Debug, Args)]
pub struct InitArgs {
    /// The folder to write them into (created if missing).
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
    /// Give the files (and the folder) to this user, as UID:GID (for a
    /// one-shot container that runs as root and writes for others).
    #[arg(long, value_name = "UID:GID", value_parser = parse_owner)]
    owner: Option<(u32, u32)>,
}

pub const CLUSTER_SECRET: &str = "cluster-secret";
pub const S3_ACCESS_KEY: &str = "s3-access-key";
pub const S3_SECRET_KEY: &str = "s3-secret-key";
pub const AWS_CREDENTIALS: &str = "aws-credentials";

pub fn run(cmd: SecretsCommand) -> anyhow::Result<()> {
    match cmd {
        SecretsCommand::Init(a) => {
            for line in init(&a.out, a.owner)? {
                println!("{line}");
            }
            Ok(())
        }
    }
}

fn parse_owner(s: &str) -> Result<(u32, u32), String> {
    let (u, g) = s
        .split_once(':')
        .ok_or_else(|| format!("{s:?}: expected UID:GID, such as 65532:65532"))?;
    let n = |x: &str| {
        x.parse::<u32>()
            .map_err(|_| format!("{s:?}: {x:?} is not a numeric id"))
    };
    Ok((n(u)?, n(g)?))
}

/// Writes the missing secrets into `dir`; returns a line per file saying
/// what was done (never the secret itself).
pub fn init(dir: &Path, owner: Option<(u32, u32)>) -> anyhow::Result<Vec<String>> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let mut report = Vec::new();
    // 32 random bytes: 43 characters, over the cluster secret's minimum of 16.
    let secret = ensure(dir, CLUSTER_SECRET, || token(32), &mut report)?;
    if secret.trim().len() < 16 {
        bail!(
            "{}: a cluster secret needs at least 16 characters",
            dir.join(CLUSTER_SECRET).display()
        );
    }
    // An access key as AWS shapes them (20 upper-case letters and digits),
    // a secret of 40 URL-safe characters; MinIO takes both.
    let access = ensure(dir, S3_ACCESS_KEY, || access_key(20), &mut report)?;
    let secret_key = ensure(dir, S3_SECRET_KEY, || token(30), &mut report)?;
    let (access, secret_key) = (access.trim(), secret_key.trim());
    if access.len() < 3 || secret_key.len() < 8 {
        bail!(
            "{}: an S3 access key needs 3 characters and a secret key 8",
            dir.display()
        );
    }
    let creds =
        format!("[default]\naws_access_key_id = {access}\naws_secret_access_key = {secret_key}\n");
    let path = dir.join(AWS_CREDENTIALS);
    let same = std::fs::read_to_string(&path).is_ok_and(|t| t == creds);
    if !same {
        write_secret(&path, &creds)?;
    }
    report.push(format!(
        "{}: {}",
        path.display(),
        if same { "kept" } else { "written" }
    ));
    if let Some((uid, gid)) = owner {
        give(dir, uid, gid)?;
        for name in [
            CLUSTER_SECRET,
            S3_ACCESS_KEY,
            S3_SECRET_KEY,
            AWS_CREDENTIALS,
        ] {
            give(&dir.join(name), uid, gid)?;
        }
    }
    Ok(report)
}

/// The file's content, made by `make` and written first if it is missing.
fn ensure(
    dir: &Path,
    name: &str,
    make: impl FnOnce() -> anyhow::Result<String>,
    report: &mut Vec<String>,
) -> anyhow::Result<String> {
    let path = dir.join(name);
    match std::fs::read_to_string(&path) {
        Ok(text) => {
            if text.trim().is_empty() {
                bail!(
                    "{} is empty: remove it to have a new one made",
                    path.display()
                );
            }
            report.push(format!("{}: kept", path.display()));
            Ok(text)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let text = format!("{}\n", make()?);
            write_secret(&path, &text)?;
            report.push(format!("{}: written", path.display()));
            Ok(text)
        }
        Err(e) => Err(e).with_context(|| format!("cannot read {}", path.display())),
    }
}

fn random(n: usize) -> anyhow::Result<Vec<u8>> {
    let mut b = vec![0u8; n];
    aws_lc_rs::rand::fill(&mut b)
        .map_err(|_| anyhow::anyhow!("the system's random source failed"))?;
    Ok(b)
}

/// `n` random bytes as URL-safe base64 without padding.
fn token(n: usize) -> anyhow::Result<String> {
    use base64::Engine as _;
    Ok(base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(random(n)?))
}

/// `n` characters of A–Z and 2–7 (base32's alphabet: 5 bits each, no bias).
fn access_key(n: usize) -> anyhow::Result<String> {
    const ALPHABET: &[u8; 32] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
    Ok(random(n)?
        .into_iter()
        .map(|b| char::from(ALPHABET[usize::from(b & 31)]))
        .collect())
}

fn write_secret(path: &Path, text: &str) -> anyhow::Result<()> {
    use std::io::Write as _;
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt as _;
        opts.mode(0o600);
    }
    opts.open(path)
        .and_then(|mut f| f.write_all(text.as_bytes()))
        .with_context(|| format!("cannot write {}", path.display()))
}

#[cfg(unix)]
fn give(path: &Path, uid: u32, gid: u32) -> anyhow::Result<()> {
    std::os::unix::fs::chown(path, Some(uid), Some(gid))
        .with_context(|| format!("cannot give {} to {uid}:{gid}", path.display()))
}

#[cfg(not(unix))]
fn give(path: &Path, _uid: u32, _gid: u32) -> anyhow::Result<()> {
    bail!("{}: --owner needs a Unix system", path.display())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(dir: &Path, name: &str) -> String {
        std::fs::read_to_string(dir.join(name)).expect("read")
    }

    #[test]
    fn init_writes_every_secret_once_and_keeps_them() {
        let dir = tempfile::tempdir().expect("tempdir");
        let out = dir.path().join("secrets");
        let first = init(&out, None).expect("init");
        assert!(first.iter().all(|l| l.ends_with("written")), "{first:?}");
        let secret = read(&out, CLUSTER_SECRET);
        let (access, key) = (read(&out, S3_ACCESS_KEY), read(&out, S3_SECRET_KEY));
        assert_eq!(secret.trim().len(), 43);
        assert_eq!(access.trim().len(), 20);
        assert!(
            access
                .trim()
                .bytes()
                .all(|b| b.is_ascii_uppercase() || (b'2'..=b'7').contains(&b))
        );
        assert_eq!(key.trim().len(), 40);
        assert_eq!(
            read(&out, AWS_CREDENTIALS),
            format!(
                "[default]\naws_access_key_id = {}\naws_secret_access_key = {}\n",
                access.trim(),
                key.trim()
            )
        );
        #[cfg(unix)]
        for name in [
            CLUSTER_SECRET,
            S3_ACCESS_KEY,
            S3_SECRET_KEY,
            AWS_CREDENTIALS,
        ] {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = std::fs::metadata(out.join(name))
                .expect("stat")
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600, "{name}");
        }
        // Again: nothing changes.
        let second = init(&out, None).expect("init again");
        assert!(second.iter().all(|l| l.ends_with("kept")), "{second:?}");
        assert_eq!(read(&out, CLUSTER_SECRET), secret);
        // Another folder: other secrets.
        let other = dir.path().join("other");
        init(&other, None).expect("init other");
        assert_ne!(read(&other, CLUSTER_SECRET), secret);
        assert_ne!(read(&other, S3_SECRET_KEY), key);
    }

    #[test]
    fn credentials_follow_keys_set_by_hand_and_bad_files_are_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let out = dir.path();
        std::fs::write(out.join(S3_ACCESS_KEY), "minioadmin\n").expect("write");
        std::fs::write(out.join(S3_SECRET_KEY), "a-long-secret\n").expect("write");
        std::fs::write(out.join(AWS_CREDENTIALS), "[default]\nstale\n").expect("write");
        init(out, None).expect("init");
        assert_eq!(
            read(out, AWS_CREDENTIALS),
            "[default]\naws_access_key_id = minioadmin\naws_secret_access_key = a-long-secret\n"
        );
        std::fs::write(out.join(S3_SECRET_KEY), "short\n").expect("write");
        let err = init(out, None).expect_err("short secret key").to_string();
        assert!(err.contains("secret key 8"), "{err}");
        std::fs::write(out.join(CLUSTER_SECRET), "\n").expect("write");
        let err = init(out, None)
            .expect_err("empty cluster secret")
            .to_string();
        assert!(err.contains("is empty"), "{err}");
    }

    #[test]
    fn owner_is_uid_colon_gid() {
        assert_eq!(parse_owner("65532:65532"), Ok((65532, 65532)));
        assert!(parse_owner("65532").is_err());
        assert!(parse_owner("nonroot:nonroot").is_err());
    }
}
