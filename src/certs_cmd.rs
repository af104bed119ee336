//! `floe certs`: the cluster CA and the certificates of its processes
//! (internal mTLS, docs/security.md), made with rcgen.
//!
//! - `floe certs ca --out DIR`: `ca.pem` and `ca.key` (a new CA);
//! - `floe certs issue NAME --ca-dir DIR --out DIR [--host H]...`:
//!   `NAME.pem` and `NAME.key`, signed by the CA, good for TLS servers and
//!   clients. NAME is a cluster identity (`metadata-1`, `broker`,
//!   `broker-7`, `proxy`, `indexer`, `admin`), or any name with `--user`
//!   (a Kafka client's certificate for an mTLS listener).
//!
//! Keys are written readable by their owner only, and nothing is
//! overwritten unless `--force`.

#![allow(clippy::print_stdout)]

use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};
use clap::{Args, Subcommand};
use floe_metadata::cluster_tls::Member;

#[derive(Debug, Subcommand)]
pub enum CertsCommand {
    /// Make a new cluster CA: ca.pem (give it to every process) and ca.key
    /// (keep it away from the cluster; it signs new members).
    Ca(CaArgs),
    /// Make a certificate signed by the cluster CA for a process (or, with
    /// --user, for a Kafka client).
    Issue(IssueArgs),
}

#[derive(Debug, Args)]
pub struct CaArgs {
    /// Where to write ca.pem and ca.key.
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
    /// The CA's common name.
    #[arg(long, default_value = "Floe cluster CA")]
    name: String,
    /// How long the CA is valid.
    #[arg(long, default_value_t = 3650)]
    days: u32,
    /// Replace files that exist.
    #[arg(long)]
    force: bool,
}

#[derive(Debug, Args)]
pub struct IssueArgs {
    /// The certificate's identity (its common name): metadata-ID, broker,
    /// broker-ID, proxy, indexer or admin; any name with --user.
    name: String,
    /// The directory with the CA's ca.pem and ca.key.
    #[arg(long, value_name = "DIR")]
    ca_dir: PathBuf,
    /// Where to write NAME.pem and NAME.key.
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
    /// A host name or IP address the certificate is also valid for (for
    /// clients that check it, such as Kafka clients on a TLS listener);
    /// repeat for more.
    #[arg(long = "host", value_name = "HOST")]
    hosts: Vec<String>,
    /// How long the certificate is valid.
    #[arg(long, default_value_t = 365)]
    days: u32,
    /// A Kafka client's certificate: NAME need not be a cluster identity.
    #[arg(long)]
    user: bool,
    /// Replace files that exist.
    #[arg(long)]
    force: bool,
}

pub fn run(cmd: CertsCommand) -> anyhow::Result<()> {
    match cmd {
        CertsCommand::Ca(a) => ca(&a),
        CertsCommand::Issue(a) => issue(&a),
    }
}

fn validity(p: &mut rcgen::CertificateParams, days: u32) -> anyhow::Result<()> {
    if days == 0 {
        bail!("--days must be at least 1");
    }
    let now = time::OffsetDateTime::now_utc();
    // A little back, for clocks a few minutes behind.
    p.not_before = now - time::Duration::minutes(5);
    p.not_after = now + time::Duration::days(i64::from(days));
    Ok(())
}

/// Writes `text` to `path` (mode 0600 for keys), refusing to replace a
/// file unless `force`.
fn write(path: &Path, text: &str, secret: bool, force: bool) -> anyhow::Result<()> {
    if path.exists() && !force {
        bail!("{} exists (--force replaces it)", path.display());
    }
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create(true).truncate(true);
    #[cfg(unix)]
    if secret {
        use std::os::unix::fs::OpenOptionsExt as _;
        opts.mode(0o600);
    }
    #[cfg(not(unix))]
    let _ = secret;
    use std::io::Write as _;
    opts.open(path)
        .and_then(|mut f| f.write_all(text.as_bytes()))
        .with_context(|| format!("cannot write {}", path.display()))
}

fn ca(a: &CaArgs) -> anyhow::Result<()> {
    std::fs::create_dir_all(&a.out)
        .with_context(|| format!("cannot create {}", a.out.display()))?;
    let mut p = rcgen::CertificateParams::new(Vec::<String>::new())?;
    p.distinguished_name
        .push(rcgen::DnType::CommonName, a.name.as_str());
    p.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Constrained(0));
    p.key_usages = vec![
        rcgen::KeyUsagePurpose::KeyCertSign,
        rcgen::KeyUsagePurpose::CrlSign,
        rcgen::KeyUsagePurpose::DigitalSignature,
    ];
    validity(&mut p, a.days)?;
    let key = rcgen::KeyPair::generate()?;
    let cert = p.self_signed(&key)?;
    write(&a.out.join("ca.pem"), &cert.pem(), false, a.force)?;
    write(&a.out.join("ca.key"), &key.serialize_pem(), true, a.force)?;
    println!(
        "wrote {} and {}",
        a.out.join("ca.pem").display(),
        a.out.join("ca.key").display()
    );
    Ok(())
}

fn issue(a: &IssueArgs) -> anyhow::Result<()> {
    if !a.user && Member::parse(&a.name).is_none() {
        bail!(
            "{:?} is not a cluster identity: metadata-ID, broker, broker-ID, proxy, indexer or admin (--user for a Kafka client's certificate)",
            a.name
        );
    }
    if a.name.is_empty() || a.name.contains(['/', '\\']) || a.name.starts_with('.') {
        bail!("{:?} cannot name files", a.name);
    }
    let ca_pem_path = a.ca_dir.join("ca.pem");
    let ca_key_path = a.ca_dir.join("ca.key");
    let ca_pem = std::fs::read_to_string(&ca_pem_path)
        .with_context(|| format!("cannot read {}", ca_pem_path.display()))?;
    let ca_key = std::fs::read_to_string(&ca_key_path)
        .with_context(|| format!("cannot read {}", ca_key_path.display()))?;
    let ca_key = rcgen::KeyPair::from_pem(&ca_key)
        .with_context(|| format!("{} holds no usable key", ca_key_path.display()))?;
    let issuer = rcgen::Issuer::from_ca_cert_pem(&ca_pem, ca_key)
        .with_context(|| format!("{} is not a usable CA", ca_pem_path.display()))?;
    let mut p = rcgen::CertificateParams::new(a.hosts.clone())
        .context("a --host is neither a host name nor an IP address")?;
    p.distinguished_name
        .push(rcgen::DnType::CommonName, a.name.as_str());
    p.key_usages = vec![
        rcgen::KeyUsagePurpose::DigitalSignature,
        rcgen::KeyUsagePurpose::KeyEncipherment,
    ];
    p.extended_key_usages = vec![
        rcgen::ExtendedKeyUsagePurpose::ServerAuth,
        rcgen::ExtendedKeyUsagePurpose::ClientAuth,
    ];
    p.use_authority_key_identifier_extension = true;
    validity(&mut p, a.days)?;
    let key = rcgen::KeyPair::generate()?;
    let cert = p.signed_by(&key, &issuer)?;
    std::fs::create_dir_all(&a.out)
        .with_context(|| format!("cannot create {}", a.out.display()))?;
    let pem = a.out.join(format!("{}.pem", a.name));
    let key_path = a.out.join(format!("{}.key", a.name));
    write(&pem, &cert.pem(), false, a.force)?;
    write(&key_path, &key.serialize_pem(), true, a.force)?;
    println!("wrote {} and {}", pem.display(), key_path.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use floe_metadata::cluster_tls::{InternalTls, TlsFiles};

    #[test]
    fn issued_certificates_load_as_cluster_identities() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().to_path_buf();
        ca(&CaArgs {
            out: d.clone(),
            name: "test".into(),
            days: 10,
            force: false,
        })
        .unwrap();
        let issue_args = |name: &str, user: bool| IssueArgs {
            name: name.into(),
            ca_dir: d.clone(),
            out: d.clone(),
            hosts: vec!["127.0.0.1".into(), "floe.local".into()],
            days: 1,
            user,
            force: false,
        };
        issue(&issue_args("broker-7", false)).unwrap();
        let tls = InternalTls::new(TlsFiles {
            ca: d.join("ca.pem"),
            cert: d.join("broker-7.pem"),
            key: d.join("broker-7.key"),
        })
        .unwrap();
        assert_eq!(tls.me().name(), "broker-7");
        // Not overwritten without --force; not a member without --user.
        let e = issue(&issue_args("broker-7", false)).unwrap_err();
        assert!(e.to_string().contains("--force"), "{e}");
        let e = issue(&issue_args("alice", false)).unwrap_err();
        assert!(e.to_string().contains("--user"), "{e}");
        issue(&issue_args("alice", true)).unwrap();
        let e = InternalTls::new(TlsFiles {
            ca: d.join("ca.pem"),
            cert: d.join("alice.pem"),
            key: d.join("alice.key"),
        })
        .unwrap_err();
        assert!(e.to_string().contains("not a cluster identity"), "{e}");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = std::fs::metadata(d.join("broker-7.key"))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o077, 0, "the key is readable by others");
        }
    }
}
