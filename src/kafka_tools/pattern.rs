//! The topic patterns of `--topic`: Kafka takes a Java regular expression
//! that must match the whole name. The `regex` crate reads the syntax topic
//! names need (classes, groups, alternatives, quantifiers, `\d`, `\w`)
//! the same way; a pattern it cannot read is refused with its message.

/// A compiled pattern, anchored at both ends.
#[derive(Debug, Clone)]
pub struct Pattern(regex::Regex);

impl Pattern {
    /// Compiles `s`, or says what it cannot read.
    pub fn new(s: &str) -> Result<Pattern, String> {
        regex::Regex::new(&format!("^(?:{s})$"))
            .map(Pattern)
            .map_err(|e| format!("topic pattern {s:?}: {e}"))
    }

    /// Whether the whole of `name` matches.
    pub fn matches(&self, name: &str) -> bool {
        self.0.is_match(name)
    }
}
