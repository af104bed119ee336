//! What a role tells its operator on stderr as it starts and stops ("ready:
//! Kafka on …", "stopping"): a plain line, or under `--log-format json` a
//! line in the logs' own shape, so that the stream stays one JSON object a
//! line. Never filtered by `RUST_LOG`: scripts and people wait for them.

use std::sync::atomic::{AtomicBool, Ordering};

static JSON: AtomicBool = AtomicBool::new(false);

/// Announcements from now on are JSON lines (`--log-format json`).
pub fn use_json(on: bool) {
    JSON.store(on, Ordering::SeqCst);
}

/// `message`, in the process's log format.
pub fn say(message: &str) {
    if JSON.load(Ordering::SeqCst) {
        eprintln!("{}", json_line(message, chrono::Utc::now()));
    } else {
        eprintln!("{message}");
    }
}

fn json_line(message: &str, at: chrono::DateTime<chrono::Utc>) -> String {
    serde_json::json!({
        "timestamp": at.to_rfc3339_opts(chrono::SecondsFormat::Micros, true),
        "level": "INFO",
        "target": "floe",
        "message": message,
    })
    .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_json_announcement_has_the_logs_fields() {
        let at = chrono::DateTime::from_timestamp(1_796_600_000, 123_456_000).expect("a time");
        let line: serde_json::Value =
            serde_json::from_str(&json_line("floe standalone ready: \"x\"", at)).expect("JSON");
        assert_eq!(line["timestamp"], "2026-12-06T23:33:20.123456Z");
        assert_eq!(line["level"], "INFO");
        assert_eq!(line["message"], "floe standalone ready: \"x\"");
    }
}
