//! Kafka's rule for topic names, checked in one place: by the proxy before
//! it asks the metadata service for anything (CreateTopics, Metadata
//! auto-create) and by the metadata service before it proposes a topic to
//! Raft, so a bad name never reaches the log.

use std::fmt;

/// Longest topic name Kafka accepts (255 minus room for a partition suffix).
pub const MAX_TOPIC_NAME_LEN: usize = 249;

/// A topic name that breaks Kafka's rule; its `Display` says why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidTopicName {
    /// The name as given (cut to a readable length).
    pub name: String,
    /// What is wrong with it.
    pub reason: &'static str,
}

impl fmt::Display for InvalidTopicName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "invalid topic name {:?}: {} (a topic name is 1 to {MAX_TOPIC_NAME_LEN} characters of [a-zA-Z0-9._-], not . or ..)",
            self.name, self.reason
        )
    }
}

impl std::error::Error for InvalidTopicName {}

/// Whether `c` may appear in a topic name.
fn legal_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')
}

/// Checks `name` against Kafka's rule: 1 to 249 characters of
/// `[a-zA-Z0-9._-]`, and not `.` or `..`.
pub fn validate_topic_name(name: &str) -> Result<(), InvalidTopicName> {
    let reason = if name.is_empty() {
        Some("empty")
    } else if name.len() > MAX_TOPIC_NAME_LEN {
        Some("too long")
    } else if name == "." || name == ".." {
        Some("reserved")
    } else if !name.chars().all(legal_char) {
        Some("illegal character")
    } else {
        None
    };
    match reason {
        None => Ok(()),
        Some(reason) => Err(InvalidTopicName {
            name: name.chars().take(MAX_TOPIC_NAME_LEN + 1).collect(),
            reason,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn legal_names_pass() {
        for name in [
            "a",
            "orders",
            "my.topic_v2-final",
            "..a",
            "_",
            &"x".repeat(249),
        ] {
            assert!(validate_topic_name(name).is_ok(), "{name}");
        }
    }

    #[test]
    fn illegal_names_say_why() {
        let cases = [
            ("", "empty"),
            (".", "reserved"),
            ("..", "reserved"),
            ("bad/name", "illegal character"),
            ("spa ce", "illegal character"),
            ("ümlaut", "illegal character"),
            ("nul\0", "illegal character"),
        ];
        for (name, why) in cases {
            let e = validate_topic_name(name).unwrap_err();
            assert_eq!(e.reason, why, "{name:?}");
            assert!(e.to_string().contains("invalid topic name"), "{e}");
        }
        let long = "x".repeat(250);
        assert_eq!(validate_topic_name(&long).unwrap_err().reason, "too long");
    }
}
