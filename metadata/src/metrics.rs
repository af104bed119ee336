//! The metadata node's metrics, recorded on the process's `metrics` recorder
//! (served on `/metrics` by `floe standalone`; `floe meta` has no admin port).

use std::time::Duration;

use metrics::{counter, describe_counter, describe_histogram, histogram};

use crate::command::Response;

const COMMANDS: &str = "floe_meta_commands_total";
const COMMAND_SECONDS: &str = "floe_meta_command_seconds";
const LOG_WRITE_SECONDS: &str = "floe_meta_log_write_seconds";

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
