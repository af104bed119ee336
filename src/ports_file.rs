//! `--ports-file`: where a role's listeners are bound, for whoever started
//! it. A role may listen on port 0 (the system picks a free port, so nothing
//! races for it); once every listener is bound, it writes the addresses as
//! one JSON object (`{"kafka": "127.0.0.1:40123", "admin": …}`) and logs
//! them in one info line.
//!
//! The file is written to a temporary name beside it and renamed, so a
//! reader sees either no file or the whole of it.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use anyhow::Context as _;

/// The addresses a role's listeners are bound to, by name.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct BoundPorts(BTreeMap<String, SocketAddr>);

impl BoundPorts {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds listener `name` bound to `addr`.
    pub fn with(mut self, name: impl Into<String>, addr: SocketAddr) -> Self {
        self.0.insert(name.into(), addr);
        self
    }

    /// `{"name": "host:port", …}`.
    pub fn to_json(&self) -> String {
        let map: serde_json::Map<String, serde_json::Value> = self
            .0
            .iter()
            .map(|(k, v)| (k.clone(), serde_json::Value::String(v.to_string())))
            .collect();
        serde_json::Value::Object(map).to_string()
    }

    /// Logs the addresses (info) and, given a path, writes them there.
    pub fn publish(&self, role: &str, path: Option<&Path>) -> anyhow::Result<()> {
        let json = self.to_json();
        tracing::info!(role, ports = %json, "listeners bound");
        if let Some(path) = path {
            write_atomically(path, json.as_bytes())
                .with_context(|| format!("cannot write the ports file {}", path.display()))?;
        }
        Ok(())
    }
}

/// Writes `bytes` to `path` through a temporary file in the same folder and
/// a rename, so that `path` never holds part of them.
fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write as _;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "ports".into());
    let tmp: PathBuf = path.with_file_name(format!(".{name}.{}.tmp", std::process::id()));
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    drop(f);
    std::fs::rename(&tmp, path)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn the_file_holds_every_listener_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ports.json");
        let ports = BoundPorts::new()
            .with("kafka", "127.0.0.1:40123".parse().unwrap())
            .with("admin", "127.0.0.1:40124".parse().unwrap());
        ports.publish("test", Some(&path)).unwrap();
        let got: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert_eq!(
            got,
            serde_json::json!({"kafka": "127.0.0.1:40123", "admin": "127.0.0.1:40124"})
        );
        // Nothing else is left in the folder (the temporary file was renamed).
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(names.len(), 1);
    }

    #[test]
    fn a_second_write_replaces_the_first() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ports.json");
        BoundPorts::new()
            .with("meta", "127.0.0.1:1".parse().unwrap())
            .publish("test", Some(&path))
            .unwrap();
        BoundPorts::new()
            .with("meta", "127.0.0.1:2".parse().unwrap())
            .publish("test", Some(&path))
            .unwrap();
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            r#"{"meta":"127.0.0.1:2"}"#
        );
    }

    #[test]
    fn without_a_path_nothing_is_written() {
        let ports = BoundPorts::new().with("rpc", "127.0.0.1:3".parse().unwrap());
        ports.publish("test", None).unwrap();
    }
}
