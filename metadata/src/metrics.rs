//! The metadata node's metrics, recorded on the process's `metrics` recorder
//! (served on `/metrics` by `floe standalone`; `floe meta` has no admin port).
//! Commands by result and their latency, log writes, and the nodes on record
//! (by kind and state) with the dead ones removed.

use std::time::Duration;

use metrics::{counter, describe_counter, describe_gauge, describe_histogram, gauge, histogram};

use crate::api::convert;
use crate::command::{NodeKind, Response};
use crate::state::{NodeState, NodesState};

const COMMANDS: &str = "floe_meta_commands_total";
const COMMAND_SECONDS: &str = "floe_meta_command_seconds";
const LOG_WRITE_SECONDS: &str = "floe_meta_log_write_seconds";
const NODES: &str = "floe_meta_nodes";
const NODES_REMOVED: &str = "floe_meta_nodes_removed_total";
const READ_CONFIRMATIONS: &str = "floe_meta_read_confirmations_total";
const CONFIRMED_READS: &str = "floe_meta_confirmed_reads_total";

/// The outcome of a proposed command: applied, refused by the cluster's
/// rules (a commit at an old epoch, …), or not committed (not the leader,
/// no quorum). Each command of a group-committed entry counts on its own.
pub(crate) fn command<T, E>(written: &Result<(Response, T), E>) {
    let result = match written {
        Ok((Response::Error(_), _)) => "refused",
        Ok(_) => "applied",
        Err(_) => "failed",
    };
    static DESCRIBED: std::sync::Once = std::sync::Once::new();
    DESCRIBED.call_once(|| {
        describe_counter!(
            COMMANDS,
            "commands proposed to Raft on this node, by result (applied, refused, failed, too_large: not proposed)"
        );
    });
    counter!(COMMANDS, "result" => result).increment(1);
}

/// One leadership confirmation shared by `reads` linearizable reads
/// ([`crate::raft::reads`]), by result.
pub(crate) fn read_confirmation(reads: usize, ok: bool) {
    static DESCRIBED: std::sync::Once = std::sync::Once::new();
    DESCRIBED.call_once(|| {
        describe_counter!(
            READ_CONFIRMATIONS,
            "leadership confirmations (a heartbeat round to a quorum) for linearizable reads, by result (ok, failed)"
        );
        describe_counter!(
            CONFIRMED_READS,
            "linearizable reads answered by a shared confirmation, by result (ok, failed)"
        );
    });
    let result = if ok { "ok" } else { "failed" };
    counter!(READ_CONFIRMATIONS, "result" => result).increment(1);
    counter!(CONFIRMED_READS, "result" => result).increment(reads as u64);
}

/// How long a proposed command took on this node, from its proposal to
/// its answer: queued behind the entries being written, written to a
/// majority's logs, and applied.
pub(crate) fn command_seconds(took: Duration) {
    describe_latencies();
    histogram!(COMMAND_SECONDS).record(took);
}

/// How long one durable write of the Raft log took (entries appended, a
/// vote, a truncation or a purge, with its fsync).
pub(crate) fn log_write_seconds(took: Duration) {
    describe_latencies();
    histogram!(LOG_WRITE_SECONDS).record(took);
}

fn describe_latencies() {
    static DESCRIBED: std::sync::Once = std::sync::Once::new();
    DESCRIBED.call_once(|| {
        describe_histogram!(
            COMMAND_SECONDS,
            metrics::Unit::Seconds,
            "a proposed command from its proposal to its answer (queued, committed, applied)"
        );
        describe_histogram!(
            LOG_WRITE_SECONDS,
            metrics::Unit::Seconds,
            "a durable write of this node's Raft log, its fsync included"
        );
    });
}

/// A command refused before it was proposed: above the size bound.
pub(crate) fn command_too_large() {
    counter!(COMMANDS, "result" => "too_large").increment(1);
}

/// The nodes on record in this node's model, by kind and state (every
/// pair set, zero included, so that a state no node is in any more reads 0).
pub(crate) fn nodes_on_record(nodes: &NodesState) {
    describe_nodes();
    for kind in [NodeKind::Broker, NodeKind::Proxy] {
        for state in [NodeState::Live, NodeState::Draining, NodeState::Dead] {
            let n = nodes
                .by_id
                .values()
                .filter(|n| n.kind == kind && n.state == state)
                .count();
            let (kind_name, state_name) =
                (convert::node_kind_name(kind), convert::node_state(state));
            gauge!(NODES, "kind" => kind_name, "state" => state_name).set(n as f64);
        }
    }
}

/// Dead nodes this node's controller removed (as the leader).
pub(crate) fn nodes_removed(n: usize) {
    describe_nodes();
    counter!(NODES_REMOVED).increment(n as u64);
}

fn describe_nodes() {
    static DESCRIBED: std::sync::Once = std::sync::Once::new();
    DESCRIBED.call_once(|| {
        describe_gauge!(
            NODES,
            "brokers and proxies on record in the metadata, by kind and state (live, draining, dead)"
        );
        describe_counter!(
            NODES_REMOVED,
            "dead nodes removed from the metadata after --dead-node-retention-ms, by this node's controller as the leader"
        );
    });
}

#[cfg(test)]
mod tests {
    use metrics_util::debugging::{DebugValue, DebuggingRecorder};

    use crate::command::Response;
    use crate::error::MetaError;

    fn written(data: Response) -> Result<(Response, u64), ()> {
        Ok((data, 1))
    }

    #[test]
    fn commands_are_counted_by_result() {
        let recorder = DebuggingRecorder::new();
        let snap = recorder.snapshotter();
        metrics::with_local_recorder(&recorder, || {
            super::command(&written(Response::Ok));
            super::command(&written(Response::Ok));
            super::command(&written(Response::Error(MetaError::InvalidRequest(
                "old epoch".into(),
            ))));
            super::command::<u64, ()>(&Err(()));
        });
        let values: Vec<(String, DebugValue)> = snap
            .snapshot()
            .into_vec()
            .into_iter()
            .map(|(k, .., v)| {
                let result = k.key().labels().map(|l| l.value().to_string()).collect();
                (result, v)
            })
            .collect();
        let value = |result: &str| values.iter().find(|(r, _)| r == result).map(|(_, v)| v);
        assert_eq!(value("applied"), Some(&DebugValue::Counter(2)));
        assert_eq!(value("refused"), Some(&DebugValue::Counter(1)));
        assert_eq!(value("failed"), Some(&DebugValue::Counter(1)));
    }

    #[test]
    fn nodes_are_gauged_by_kind_and_state_and_removals_counted() {
        use crate::command::{Command, NodeKind};
        use crate::ids::{BrokerId, Revision};
        let mut s = crate::state::ClusterState::default();
        for (i, (id, kind)) in [
            (1, NodeKind::Broker),
            (2, NodeKind::Broker),
            (0, NodeKind::Proxy),
        ]
        .into_iter()
        .enumerate()
        {
            s.apply(
                Revision(i as u64 + 1),
                &Command::RegisterNode {
                    id: BrokerId(id),
                    kind,
                    addr: format!("127.0.0.1:{id}"),
                    now_ms: 0,
                    lease_ms: 1000,
                },
            );
        }
        s.apply(Revision(4), &Command::Drain { id: BrokerId(2) });
        s.apply(
            Revision(5),
            &Command::Heartbeat {
                id: BrokerId(2),
                now_ms: 5_000,
            },
        );
        // Broker 1 and the proxy expire.
        s.apply(Revision(6), &Command::ExpireLeases { now_ms: 2_000 });
        let recorder = DebuggingRecorder::new();
        let snap = recorder.snapshotter();
        metrics::with_local_recorder(&recorder, || {
            super::nodes_on_record(&s.nodes);
            super::nodes_removed(2);
        });
        let mut values: Vec<(String, DebugValue)> = snap
            .snapshot()
            .into_vec()
            .into_iter()
            .map(|(k, .., v)| {
                let labels: Vec<String> = k.key().labels().map(|l| l.value().to_string()).collect();
                (format!("{}{labels:?}", k.key().name()), v)
            })
            .collect();
        values.sort_by(|a, b| a.0.cmp(&b.0));
        let value = |name: &str| values.iter().find(|(n, _)| n == name).map(|(_, v)| v);
        let gauge = |n: f64| DebugValue::Gauge(n.into());
        assert_eq!(
            value(r#"floe_meta_nodes["broker", "live"]"#),
            Some(&gauge(0.0))
        );
        assert_eq!(
            value(r#"floe_meta_nodes["broker", "draining"]"#),
            Some(&gauge(1.0))
        );
        assert_eq!(
            value(r#"floe_meta_nodes["broker", "dead"]"#),
            Some(&gauge(1.0))
        );
        assert_eq!(
            value(r#"floe_meta_nodes["proxy", "dead"]"#),
            Some(&gauge(1.0))
        );
        assert_eq!(
            value(r#"floe_meta_nodes["proxy", "live"]"#),
            Some(&gauge(0.0))
        );
        assert_eq!(
            value("floe_meta_nodes_removed_total[]"),
            Some(&DebugValue::Counter(2))
        );
        assert_eq!(values.len(), 7, "{values:?}");
    }

    #[test]
    fn a_commands_time_and_the_logs_writes_are_recorded_in_seconds() {
        let recorder = DebuggingRecorder::new();
        let snap = recorder.snapshotter();
        metrics::with_local_recorder(&recorder, || {
            super::command_seconds(std::time::Duration::from_micros(550));
            super::log_write_seconds(std::time::Duration::from_micros(350));
            super::log_write_seconds(std::time::Duration::from_micros(250));
        });
        let mut seen: Vec<(String, Vec<f64>)> = snap
            .snapshot()
            .into_vec()
            .into_iter()
            .filter_map(|(k, _, _, v)| match v {
                DebugValue::Histogram(xs) => {
                    Some((k.key().name().to_string(), xs.iter().map(|x| x.0).collect()))
                }
                _ => None,
            })
            .collect();
        seen.sort_by(|a, b| a.0.cmp(&b.0));
        assert_eq!(
            seen,
            vec![
                ("floe_meta_command_seconds".to_string(), vec![0.00055]),
                (
                    "floe_meta_log_write_seconds".to_string(),
                    vec![0.00035, 0.00025]
                ),
            ]
        );
    }
}
