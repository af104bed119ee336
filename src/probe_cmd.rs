//! `floe probe`: asks a Floe process on this machine for a health path
//! (`/livez` by default) and exits 0 on a 200. It is the container image's
//! HEALTHCHECK: a distroless image has no curl or shell.

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{Context as _, bail};
use clap::Args;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

#[derive(Debug, Args)]
pub struct ProbeArgs {
    /// HOST:PORT to ask. Default: the role's admin listener
    /// ($FLOE_ADMIN_LISTEN, else 127.0.0.1:9644), and where nothing listens
    /// there, the metadata node's listener ($FLOE_META_LISTEN, else
    /// 127.0.0.1:7070), which has no admin port; an unspecified address
    /// (0.0.0.0, [::]) is asked on loopback.
    #[arg(long, env = "FLOE_PROBE_ADDR")]
    addr: Option<String>,
    /// The HTTP path asked (`/livez`, `/readyz`).
    #[arg(long, default_value = "/livez")]
    path: String,
    /// Deadline of the whole probe (connect, ask, read the status line).
    #[arg(long, default_value_t = 2_000)]
    timeout_ms: u64,
}

/// The addresses a probe asks, in turn while nothing listens at one: the
/// flag alone, else the admin listener and then the metadata listener. The
/// image sets `FLOE_ADMIN_LISTEN` for every role, and a metadata node has
/// no admin port, so one HEALTHCHECK serves every role.
fn targets(addr: Option<&str>, admin: Option<&str>, meta: Option<&str>) -> Vec<String> {
    let chosen = match addr {
        Some(a) => vec![a],
        None => vec![
            admin.unwrap_or("127.0.0.1:9644"),
            meta.unwrap_or("127.0.0.1:7070"),
        ],
    };
    let mut out: Vec<String> = Vec::new();
    for c in chosen {
        let a = on_loopback(c);
        if !out.contains(&a) {
            out.push(a);
        }
    }
    out
}

/// An unspecified address (0.0.0.0, [::]) is asked on loopback.
fn on_loopback(addr: &str) -> String {
    match addr.parse::<SocketAddr>() {
        Ok(a) if a.ip().is_unspecified() => {
            let lo = if a.is_ipv4() { "127.0.0.1" } else { "[::1]" };
            format!("{lo}:{}", a.port())
        }
        _ => addr.to_string(),
    }
}

/// The status code of an HTTP/1 status line (`HTTP/1.1 200 OK`).
fn status_code(head: &[u8]) -> Option<u16> {
    let line = head.split(|b| *b == b'\r' || *b == b'\n').next()?;
    let line = std::str::from_utf8(line).ok()?;
    let mut parts = line.split(' ');
    if !parts.next()?.starts_with("HTTP/1.") {
        return None;
    }
    parts.next()?.parse().ok()
}

/// Asks `path` of the first of `addrs` that takes the connection.
async fn ask_first(addrs: &[String], path: &str) -> anyhow::Result<(String, u16)> {
    let mut refused = Vec::new();
    for addr in addrs {
        match tokio::net::TcpStream::connect(addr.as_str()).await {
            Ok(conn) => return Ok((addr.clone(), ask(conn, addr, path).await?)),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
                refused.push(addr.as_str())
            }
            Err(e) => return Err(e).with_context(|| format!("cannot connect to {addr}")),
        }
    }
    bail!("nothing listens at {}", refused.join(" or "))
}

async fn ask(mut conn: tokio::net::TcpStream, addr: &str, path: &str) -> anyhow::Result<u16> {
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    conn.write_all(request.as_bytes()).await?;
    // The status line fits in the first bytes; read no more than needed.
    let mut head = Vec::with_capacity(64);
    let mut buf = [0u8; 64];
    while !head.contains(&b'\n') && head.len() < 1024 {
        let n = conn.read(&mut buf).await?;
        if n == 0 {
            break;
        }
        head.extend_from_slice(&buf[..n]);
    }
    status_code(&head).with_context(|| format!("{addr} did not answer HTTP"))
}

pub async fn run(args: ProbeArgs) -> anyhow::Result<()> {
    let admin = std::env::var("FLOE_ADMIN_LISTEN").ok();
    let meta = std::env::var("FLOE_META_LISTEN").ok();
    let addrs = targets(args.addr.as_deref(), admin.as_deref(), meta.as_deref());
    let (addr, code) = tokio::time::timeout(
        Duration::from_millis(args.timeout_ms),
        ask_first(&addrs, &args.path),
    )
    .await
    .with_context(|| {
        format!(
            "{} did not answer within {} ms",
            addrs.join(" or "),
            args.timeout_ms
        )
    })??;
    if code != 200 {
        bail!("{addr}{} answered {code}", args.path);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_flag_alone_else_the_admin_then_the_metadata_listener() {
        assert_eq!(
            targets(Some("10.0.0.1:1"), Some("0.0.0.0:9645"), None),
            ["10.0.0.1:1"]
        );
        assert_eq!(
            targets(None, Some("0.0.0.0:9645"), Some("0.0.0.0:7071")),
            ["127.0.0.1:9645", "127.0.0.1:7071"]
        );
        assert_eq!(
            targets(None, None, Some("[::]:7070")),
            ["127.0.0.1:9644", "[::1]:7070"]
        );
        assert_eq!(
            targets(None, None, None),
            ["127.0.0.1:9644", "127.0.0.1:7070"]
        );
        assert_eq!(
            targets(None, Some("127.0.0.1:7070"), None),
            ["127.0.0.1:7070"]
        );
        assert_eq!(targets(Some("floe:9644"), None, None), ["floe:9644"]);
    }

    /// The image's HEALTHCHECK in a metadata node's container: the admin
    /// address the image sets has no listener, the metadata node's has.
    #[tokio::test]
    async fn where_no_admin_port_listens_the_metadata_listener_is_asked() {
        let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let nothing = closed.local_addr().unwrap().to_string();
        drop(closed);
        let meta = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let meta_addr = meta.local_addr().unwrap().to_string();
        tokio::spawn(async move {
            if let Ok((mut c, _)) = meta.accept().await {
                let mut buf = [0u8; 256];
                let _ = c.read(&mut buf).await;
                let _ = c.write_all(b"HTTP/1.1 200 OK\r\n\r\n").await;
            }
        });
        let (asked, code) = ask_first(&[nothing.clone(), meta_addr.clone()], "/livez")
            .await
            .unwrap();
        assert_eq!((asked, code), (meta_addr, 200));
        let e = ask_first(std::slice::from_ref(&nothing), "/livez")
            .await
            .unwrap_err();
        assert!(e.to_string().contains("nothing listens"), "{e}");
    }

    #[test]
    fn only_an_http_status_line_has_a_code() {
        assert_eq!(status_code(b"HTTP/1.1 200 OK\r\nx: y\r\n"), Some(200));
        assert_eq!(
            status_code(b"HTTP/1.0 503 Service Unavailable\r\n"),
            Some(503)
        );
        assert_eq!(status_code(b"SSH-2.0-x\r\n"), None);
        assert_eq!(status_code(b""), None);
    }

    async fn one_answer(answer: &'static [u8]) -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        tokio::spawn(async move {
            if let Ok((mut s, _)) = listener.accept().await {
                let mut buf = [0u8; 256];
                let _ = s.read(&mut buf).await;
                let _ = s.write_all(answer).await;
            }
        });
        addr
    }

    #[tokio::test]
    async fn a_200_passes_and_anything_else_fails() {
        let ok = one_answer(b"HTTP/1.1 200 OK\r\ncontent-length: 3\r\n\r\nok\n").await;
        let args = |addr: String| ProbeArgs {
            addr: Some(addr),
            path: "/livez".into(),
            timeout_ms: 5_000,
        };
        run(args(ok)).await.unwrap();
        let starting = one_answer(b"HTTP/1.1 503 Service Unavailable\r\n\r\n").await;
        let e = run(args(starting)).await.unwrap_err();
        assert!(e.to_string().contains("503"), "{e:#}");
        // Nothing listening: refused.
        let closed = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().to_string()
        };
        assert!(run(args(closed)).await.is_err());
    }
}
