//! `floe cluster …`: what the metadata service knows of the cluster's
//! processes. `floe cluster nodes` lists every broker and proxy on record:
//! its state, its lease, and for a dead one how long it has been dead and
//! when it is removed (`--dead-node-retention-ms`, docs/running.md).

#![allow(clippy::print_stdout)]

use clap::{Args, Subcommand};
use floe_metadata::api::{proto, routes};

use crate::meta_cmd::ClusterArgs;
use crate::table::Table;

#[derive(Debug, Subcommand)]
pub enum ClusterCommand {
    /// List every broker and proxy on record: id, kind, address, state
    /// (live, draining, dead), the lease left or how long it has been dead,
    /// and when a dead one is removed.
    Nodes(NodesArgs),
}

#[derive(Debug, Args)]
pub struct NodesArgs {
    #[command(flatten)]
    cluster: ClusterArgs,
    /// One JSON object per node (times in ms since the Unix epoch, and
    /// durations in ms, against the metadata leader's clock) instead of a
    /// table.
    #[arg(long)]
    json: bool,
}

pub async fn run(cmd: ClusterCommand) -> anyhow::Result<()> {
    match cmd {
        ClusterCommand::Nodes(args) => nodes(args).await,
    }
}

async fn nodes(args: NodesArgs) -> anyhow::Result<()> {
    let list = args
        .cluster
        .client()?
        .call::<routes::ListNodes>(&proto::Empty {})
        .await?;
    if args.json {
        for n in &list.nodes {
            println!("{}", json(&list, n));
        }
    } else {
        print!("{}", table(&list).render());
    }
    Ok(())
}

/// A node as a JSON object: what the metadata answered, and the durations
/// it implies at the time of the answer (`null` where there is none).
fn json(list: &proto::ListNodesResponse, n: &proto::NodeRecord) -> serde_json::Value {
    let t = Times::of(list, n);
    serde_json::json!({
        "id": n.id,
        "kind": n.kind,
        "addr": n.addr,
        "state": n.state,
        "lease_ms": n.lease_ms,
        "lease_until_ms": n.lease_until_ms,
        "lease_left_ms": t.lease_left_ms,
        "dead_since_ms": (n.dead_since_ms > 0).then_some(n.dead_since_ms),
        "dead_for_ms": t.dead_for_ms,
        "removal_due_ms": (n.removal_due_ms > 0).then_some(n.removal_due_ms),
        "removal_in_ms": t.removal_in_ms,
        "held_by": n.held_by,
    })
}

fn table(list: &proto::ListNodesResponse) -> Table {
    let mut table = Table::new(&[
        "ID",
        "KIND",
        "ADDRESS",
        "STATE",
        "LEASE-LEFT",
        "DEAD-FOR",
        "REMOVAL",
    ]);
    for n in &list.nodes {
        let t = Times::of(list, n);
        table.row(vec![
            n.id.to_string(),
            n.kind.clone(),
            n.addr.clone(),
            n.state.clone(),
            t.lease_left_ms.map(human).unwrap_or_default(),
            t.dead_for_ms.map(human).unwrap_or_default(),
            removal(list, n, &t),
        ]);
    }
    table
}

/// The durations a node's record implies at the answer's time.
#[derive(Debug, Default, PartialEq, Eq)]
struct Times {
    /// A node not dead: how long its lease still runs (0 once it ended;
    /// the controller marks it dead at its next round).
    lease_left_ms: Option<u64>,
    /// A dead node whose death time is stamped: how long it has been dead.
    dead_for_ms: Option<u64>,
    /// A dead node due for removal: how long until it is (0 when due).
    removal_in_ms: Option<u64>,
}

impl Times {
    fn of(list: &proto::ListNodesResponse, n: &proto::NodeRecord) -> Times {
        let now = list.now_ms;
        if n.state != "dead" {
            return Times {
                lease_left_ms: Some(n.lease_until_ms.saturating_sub(now)),
                ..Times::default()
            };
        }
        Times {
            lease_left_ms: None,
            dead_for_ms: (n.dead_since_ms > 0).then(|| now.saturating_sub(n.dead_since_ms)),
            removal_in_ms: (n.removal_due_ms > 0).then(|| n.removal_due_ms.saturating_sub(now)),
        }
    }
}

/// When a dead node is removed, in words.
fn removal(list: &proto::ListNodesResponse, n: &proto::NodeRecord, t: &Times) -> String {
    if n.state != "dead" {
        return String::new();
    }
    if list.dead_node_retention_ms == 0 {
        return "never".into();
    }
    match t.removal_in_ms {
        // Dead by a report: the controller stamps its death at its next
        // round, and the retention runs from there.
        None => format!("after {}", human(list.dead_node_retention_ms)),
        Some(_) if n.held_by > 0 => format!("once {} items move", n.held_by),
        Some(0) => "now".into(),
        Some(ms) => format!("in {}", human(ms)),
    }
}

/// A duration for people: `850ms`, `12.5s`, `7m05s`, `2h03m`, `3d04h`.
fn human(ms: u64) -> String {
    let s = ms / 1000;
    match ms {
        0..1_000 => format!("{ms}ms"),
        1_000..60_000 => format!("{}.{}s", s, (ms % 1000) / 100),
        60_000..3_600_000 => format!("{}m{:02}s", s / 60, s % 60),
        3_600_000..86_400_000 => format!("{}h{:02}m", s / 3600, (s % 3600) / 60),
        _ => format!("{}d{:02}h", s / 86_400, (s % 86_400) / 3600),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(id: u32, state: &str) -> proto::NodeRecord {
        proto::NodeRecord {
            id,
            kind: "broker".into(),
            addr: format!("127.0.0.1:{id}"),
            state: state.into(),
            lease_ms: 3_000,
            lease_until_ms: 10_000,
            ..Default::default()
        }
    }

    fn list(nodes: Vec<proto::NodeRecord>, retention_ms: u64) -> proto::ListNodesResponse {
        proto::ListNodesResponse {
            nodes,
            now_ms: 8_000,
            dead_node_retention_ms: retention_ms,
            highest_id: 1002,
        }
    }

    #[test]
    fn durations_read_as_people_write_them() {
        assert_eq!(human(850), "850ms");
        assert_eq!(human(12_540), "12.5s");
        assert_eq!(human(425_000), "7m05s");
        assert_eq!(human(7_380_000), "2h03m");
        assert_eq!(human(273_600_000), "3d04h");
    }

    #[test]
    fn a_live_node_shows_its_lease_and_a_dead_one_when_it_goes() {
        let live = node(1, "live");
        let mut dead = node(1001, "dead");
        dead.dead_since_ms = 5_000;
        dead.removal_due_ms = 65_000;
        let mut held = node(1002, "dead");
        held.dead_since_ms = 1_000;
        held.removal_due_ms = 2_000;
        held.held_by = 3;
        let reported = node(1003, "dead");
        let l = list(vec![live, dead, held, reported], 60_000);
        let rows = table(&l).render();
        // STATE, LEASE-LEFT, DEAD-FOR and REMOVAL (the rest of the line).
        let cells: Vec<Vec<String>> = rows
            .lines()
            .map(|line| {
                let words: Vec<&str> = line.split_whitespace().collect();
                let mut c: Vec<String> = words[3..6].iter().map(|w| w.to_string()).collect();
                c.push(words[6..].join(" "));
                c
            })
            .collect();
        assert_eq!(cells.len(), 5, "{rows}");
        assert_eq!(cells[1], ["live", "2.0s", "-", "-"], "{rows}");
        assert_eq!(cells[2], ["dead", "-", "3.0s", "in 57.0s"], "{rows}");
        assert_eq!(cells[3], ["dead", "-", "7.0s", "once 3 items move"]);
        assert_eq!(cells[4], ["dead", "-", "-", "after 1m00s"]);
        let j = json(&l, &l.nodes[1]);
        assert_eq!(j["dead_for_ms"], 3_000);
        assert_eq!(j["removal_in_ms"], 57_000);
        assert_eq!(j["lease_left_ms"], serde_json::Value::Null);
        let j = json(&l, &l.nodes[0]);
        assert_eq!(j["lease_left_ms"], 2_000);
        assert_eq!(j["dead_since_ms"], serde_json::Value::Null);
        // Kept forever.
        let l = list(vec![l.nodes[1].clone()], 0);
        let rows = table(&l).render();
        assert!(
            rows.lines().nth(1).is_some_and(|r| r.ends_with("never")),
            "{rows}"
        );
    }
}
