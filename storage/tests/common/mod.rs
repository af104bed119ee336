//! Test harness shared by the storage integration tests: a real S3-compatible
//! server (moto) in a child process, and a TCP proxy that can cut or hang the
//! connection to it.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

pub mod pool;

use std::net::{SocketAddr, TcpListener as StdListener, TcpStream as StdStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tokio::io::AsyncReadExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// Where the `moto_server` of the test venv is: `$FLOE_MOTO_SERVER`, else
/// `.venv/bin/moto_server` at the workspace root (made by `tests/run.sh`).
fn moto_binary() -> PathBuf {
    if let Ok(p) = std::env::var("FLOE_MOTO_SERVER") {
        return PathBuf::from(p);
    }
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.venv/bin/moto_server");
    assert!(
        p.exists(),
        "moto_server not found at {}: run tests/run.sh (it creates .venv with moto[server]) \
         or set FLOE_MOTO_SERVER",
        p.display()
    );
    p
}

fn free_port() -> u16 {
    StdListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A moto S3 server on 127.0.0.1, killed when dropped.
pub struct Moto {
    child: Child,
    pub port: u16,
}

impl Moto {
    pub fn start() -> Moto {
        let bin = moto_binary();
        for _ in 0..3 {
            let port = free_port();
            let child = Command::new(&bin)
                .args(["-H", "127.0.0.1", "-p", &port.to_string()])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap_or_else(|e| panic!("cannot start {}: {e}", bin.display()));
            let mut moto = Moto { child, port };
            if moto.wait_ready(Duration::from_secs(30)) {
                return moto;
            }
        }
        panic!("moto_server did not start");
    }

    fn wait_ready(&mut self, limit: Duration) -> bool {
        let started = Instant::now();
        while started.elapsed() < limit {
            if let Ok(Some(_)) = self.child.try_wait() {
                return false;
            }
            if StdStream::connect(("127.0.0.1", self.port)).is_ok() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        false
    }

    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An S3 URL for a bucket on the server at `endpoint`, with moto's test credentials.
pub fn s3_url(bucket: &str, prefix: &str, endpoint: &str) -> String {
    format!(
        "s3://{bucket}/{prefix}?endpoint={endpoint}&region=us-east-1&path_style=true\
         &access_key_id=testing&secret_access_key=testing"
    )
}

/// What the fault proxy does with traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProxyMode {
    /// Forward both ways.
    Pass,
    /// Close every connection, open or new (a dead node, a cut cable).
    Cut,
    /// Accept and swallow requests, never answer (a hung node).
    Hang,
}

/// A TCP proxy in front of one upstream port, with a switch.
pub struct FaultProxy {
    pub addr: SocketAddr,
    mode: watch::Sender<ProxyMode>,
    task: tokio::task::JoinHandle<()>,
}

impl FaultProxy {
    pub async fn start(upstream_port: u16) -> FaultProxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (mode, _) = watch::channel(ProxyMode::Pass);
        let mode_tx = mode.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((client, _)) = listener.accept().await else {
                    return;
                };
                let rx = mode_tx.subscribe();
                tokio::spawn(serve(client, upstream_port, rx));
            }
        });
        FaultProxy { addr, mode, task }
    }

    pub fn set(&self, mode: ProxyMode) {
        self.mode.send_replace(mode);
    }

    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn swallow(mut client: TcpStream, mut rx: watch::Receiver<ProxyMode>) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        tokio::select! {
            n = client.read(&mut buf) => {
                if matches!(n, Ok(0) | Err(_)) {
                    return;
                }
            }
            changed = rx.changed() => {
                if changed.is_err() || *rx.borrow() != ProxyMode::Hang {
                    return;
                }
            }
        }
    }
}

async fn serve(mut client: TcpStream, upstream_port: u16, mut rx: watch::Receiver<ProxyMode>) {
    let mode = *rx.borrow_and_update();
    match mode {
        ProxyMode::Cut => return,
        ProxyMode::Hang => return swallow(client, rx).await,
        ProxyMode::Pass => {}
    }
    let Ok(mut upstream) = TcpStream::connect(("127.0.0.1", upstream_port)).await else {
        return;
    };
    tokio::select! {
        _ = tokio::io::copy_bidirectional(&mut client, &mut upstream) => {}
        _ = async {
            loop {
                if rx.changed().await.is_err() {
                    return;
                }
                if *rx.borrow() != ProxyMode::Pass {
                    return;
                }
            }
        } => {
            // Mode left Pass mid-connection: drop both sockets (cut), or keep
            // the client waiting forever (hang).
            drop(upstream);
            if *rx.borrow() == ProxyMode::Hang {
                swallow(client, rx).await;
            }
        }
    }
}
