//! A share group's record filter (the group config `floe.filter`): which
//! records the group is sent, decided from their headers. Parsed from the
//! config's text, checked when the config is set, and matched by the
//! partition's owner when a record enters the group's share-partition.
//!
//! Accepted forms (RocketMQ's tag syntax, plus header equality):
//!
//! - `*` alone: every record (as no filter).
//! - alternatives joined by `||`, each one of:
//!   - a tag, `TagA`: the record has a header `floe-tag` whose value is
//!     exactly `TagA`;
//!   - `name=value`: the record has a header `name` whose value is
//!     exactly `value`.
//!
//! A record matches when one alternative does. Spaces around `||` and
//! around a whole alternative are ignored; inside a tag, a header name or a
//! value none is allowed. Tags, names and values are 1 to 255 printable
//! ASCII characters other than space, `|`, `=`, `*`, `&`, `!`, `(`, `)`,
//! `,` and quotes; at most 64 alternatives. Everything else (SQL92
//! expressions, `&&`, negation, an empty alternative) is refused.

use std::fmt;

/// The header a tag filter looks at.
pub const TAG_HEADER: &str = "floe-tag";

/// Most alternatives a filter may have.
const MAX_ALTERNATIVES: usize = 64;
/// Longest tag, header name or header value.
const MAX_WORD: usize = 255;

/// One alternative of a filter.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Alternative {
    /// The `floe-tag` header equals this.
    Tag(String),
    /// A header `name` equals `value`.
    Header { name: String, value: String },
}

/// A parsed `floe.filter`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordFilter {
    /// Empty: every record (`*`).
    any_of: Vec<Alternative>,
}

fn word(w: &str, what: &str) -> Result<String, String> {
    if w.is_empty() {
        return Err(format!("an empty {what}"));
    }
    if w.len() > MAX_WORD {
        return Err(format!("a {what} longer than {MAX_WORD} characters"));
    }
    if let Some(c) = w.chars().find(|c| {
        !c.is_ascii_graphic()
            || matches!(
                c,
                '|' | '=' | '*' | '&' | '!' | '(' | ')' | ',' | '"' | '\''
            )
    }) {
        return Err(format!("{c:?} in the {what} {w:?}"));
    }
    Ok(w.to_owned())
}

impl RecordFilter {
    /// Parses a filter (see the module's documentation for the forms); the
    /// error says what is wrong, for an INVALID_CONFIG answer.
    pub fn parse(text: &str) -> Result<Self, String> {
        let forms = "accepted: `*`, or alternatives joined by `||`, each a tag (`TagA`, matched against the floe-tag header) or `header=value`";
        let text = text.trim();
        if text == "*" {
            return Ok(Self { any_of: Vec::new() });
        }
        let mut any_of = Vec::new();
        for alt in text.split("||") {
            let alt = alt.trim();
            let parsed = match alt.split_once('=') {
                Some((name, value)) => word(name, "header name").and_then(|name| {
                    Ok(Alternative::Header {
                        name,
                        value: word(value, "header value")?,
                    })
                }),
                None => word(alt, "tag").map(Alternative::Tag),
            };
            any_of.push(parsed.map_err(|why| format!("{why}; {forms}"))?);
            if any_of.len() > MAX_ALTERNATIVES {
                return Err(format!("more than {MAX_ALTERNATIVES} alternatives"));
            }
        }
        Ok(Self { any_of })
    }

    /// The filter every record matches (`*`).
    pub fn all() -> Self {
        Self { any_of: Vec::new() }
    }

    /// Whether every record matches (`*`).
    pub fn is_all(&self) -> bool {
        self.any_of.is_empty()
    }

    /// Whether a record with these headers (key, value; a null value is
    /// `None`) is for the group.
    pub fn matches<'a>(
        &self,
        headers: impl Iterator<Item = (&'a [u8], Option<&'a [u8]>)> + Clone,
    ) -> bool {
        if self.is_all() {
            return true;
        }
        self.any_of.iter().any(|alt| {
            let (name, value) = match alt {
                Alternative::Tag(tag) => (TAG_HEADER, tag.as_str()),
                Alternative::Header { name, value } => (name.as_str(), value.as_str()),
            };
            headers
                .clone()
                .any(|(k, v)| k == name.as_bytes() && v == Some(value.as_bytes()))
        })
    }
}

/// The canonical text (`TagA || k=v`), which parses back to the same filter.
impl fmt::Display for RecordFilter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_all() {
            return f.write_str("*");
        }
        for (i, alt) in self.any_of.iter().enumerate() {
            if i > 0 {
                f.write_str(" || ")?;
            }
            match alt {
                Alternative::Tag(t) => f.write_str(t)?,
                Alternative::Header { name, value } => write!(f, "{name}={value}")?,
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn headers<'a>(
        h: &'a [(&'a str, Option<&'a str>)],
    ) -> impl Iterator<Item = (&'a [u8], Option<&'a [u8]>)> + Clone {
        h.iter().map(|(k, v)| (k.as_bytes(), v.map(str::as_bytes)))
    }

    #[test]
    fn tags_and_header_equality_match_as_documented() {
        let f = RecordFilter::parse(" TagA || TagB ||region=eu ").unwrap();
        assert_eq!(f.to_string(), "TagA || TagB || region=eu");
        assert_eq!(RecordFilter::parse(&f.to_string()).unwrap(), f);
        assert!(f.matches(headers(&[("floe-tag", Some("TagB"))])));
        assert!(f.matches(headers(&[("x", None), ("region", Some("eu"))])));
        assert!(!f.matches(headers(&[("floe-tag", Some("TagC"))])));
        assert!(!f.matches(headers(&[("floe-tag", Some("taga"))])));
        assert!(!f.matches(headers(&[("floe-tag", None)])));
        assert!(!f.matches(headers(&[("TagA", Some("TagA"))])));
        assert!(!f.matches(headers(&[])));
        let all = RecordFilter::parse("*").unwrap();
        assert!(all.is_all() && all.matches(headers(&[])));
    }

    #[test]
    fn other_forms_are_refused_with_the_accepted_ones_named() {
        for bad in [
            "",
            "TagA ||",
            "|| TagA",
            "TagA | TagB",
            "TagA && TagB",
            "a = b",
            "a=",
            "=b",
            "a=b=c",
            "* || TagA",
            "Tag A",
            "!TagA",
            "(TagA)",
            "a > 3",
            "tagé",
        ] {
            let e = RecordFilter::parse(bad).unwrap_err();
            assert!(
                e.contains("accepted") || e.contains("more than"),
                "{bad}: {e}"
            );
        }
        let many = vec!["t"; 65].join("||");
        assert!(RecordFilter::parse(&many).is_err());
        assert!(RecordFilter::parse(&"x".repeat(256)).is_err());
    }
}
