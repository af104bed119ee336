//! A topic's export index definition: typed Parquet columns that the indexer
//! extracts from JSON record values (topic config `export.index`).
//!
//! The definition is a JSON array, for example
//! `[{"name":"amount","path":"$.order.amount","type":"float64"}]`.
//! Paths start at `$` and go on with `.field`, `["any field"]` or `[N]`
//! (an array element). Types: `string`, `int64`, `float64`, `bool`,
//! `timestamp` (epoch milliseconds or an RFC 3339 string).

use serde::{Deserialize, Serialize};

/// Names the fixed columns take; an indexed column may not reuse them (nor
/// the Hive partition columns `dt` and `hr`).
pub const RESERVED_COLUMNS: &[&str] = &[
    "partition",
    "offset",
    "timestamp",
    "key",
    "value",
    "headers",
    "dt",
    "hr",
];

/// Most columns a definition may have.
pub const MAX_COLUMNS: usize = 64;

/// The type of an indexed column.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ColumnType {
    String,
    Int64,
    Float64,
    Bool,
    Timestamp,
}

impl ColumnType {
    /// The name `export.index` gives the type.
    pub fn name(self) -> &'static str {
        match self {
            ColumnType::String => "string",
            ColumnType::Int64 => "int64",
            ColumnType::Float64 => "float64",
            ColumnType::Bool => "bool",
            ColumnType::Timestamp => "timestamp",
        }
    }
}

/// One step of a JSON path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PathStep {
    Field(String),
    Index(usize),
}

/// One indexed column.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IndexColumn {
    pub name: String,
    pub path: String,
    #[serde(rename = "type")]
    pub kind: ColumnType,
}

impl IndexColumn {
    /// The parsed path (validated when the definition was parsed).
    pub fn steps(&self) -> Vec<PathStep> {
        parse_path(&self.path).unwrap_or_default()
    }
}

/// The typed columns of a topic's exports, in order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IndexDefinition {
    pub columns: Vec<IndexColumn>,
}

impl IndexDefinition {
    /// Parses and validates the `export.index` config value.
    pub fn parse(text: &str) -> Result<Self, String> {
        let text = text.trim();
        if text.is_empty() {
            return Ok(Self::default());
        }
        let columns: Vec<IndexColumn> = serde_json::from_str(text).map_err(|e| {
            format!("not a JSON array of {{\"name\", \"path\", \"type\"}} objects: {e}")
        })?;
        if columns.len() > MAX_COLUMNS {
            return Err(format!("{} columns; at most {MAX_COLUMNS}", columns.len()));
        }
        for (i, c) in columns.iter().enumerate() {
            if c.name.is_empty()
                || c.name.len() > 128
                || !c
                    .name
                    .chars()
                    .all(|ch| ch.is_ascii_alphanumeric() || ch == '_')
                || c.name.starts_with(|ch: char| ch.is_ascii_digit())
            {
                return Err(format!(
                    "column name {:?}: use letters, digits and _ (not first), at most 128",
                    c.name
                ));
            }
            if RESERVED_COLUMNS.contains(&c.name.to_ascii_lowercase().as_str()) {
                return Err(format!("column name {:?} is reserved", c.name));
            }
            if columns[..i]
                .iter()
                .any(|o| o.name.eq_ignore_ascii_case(&c.name))
            {
                return Err(format!("column name {:?} appears twice", c.name));
            }
            parse_path(&c.path).map_err(|why| format!("column {:?}: {why}", c.name))?;
        }
        Ok(Self { columns })
    }
}

/// Parses `$`, `$.a.b`, `$.items[0].price`, `$["a b"]`.
pub fn parse_path(path: &str) -> Result<Vec<PathStep>, String> {
    let bad = |why: &str| format!("path {path:?}: {why}");
    let rest = path
        .strip_prefix('$')
        .ok_or_else(|| bad("must start with $"))?;
    let chars: Vec<char> = rest.chars().collect();
    let mut steps = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        match chars[i] {
            '.' => {
                let start = i + 1;
                let mut end = start;
                while end < chars.len() && chars[end] != '.' && chars[end] != '[' {
                    end += 1;
                }
                if end == start {
                    return Err(bad("empty field name after '.'"));
                }
                steps.push(PathStep::Field(chars[start..end].iter().collect()));
                i = end;
            }
            '[' => {
                let close = chars[i..]
                    .iter()
                    .position(|&c| c == ']')
                    .map(|p| p + i)
                    .ok_or_else(|| bad("'[' without ']'"))?;
                let inner: String = chars[i + 1..close].iter().collect();
                if let Some(quoted) = inner.strip_prefix('"').and_then(|s| s.strip_suffix('"')) {
                    steps.push(PathStep::Field(quoted.to_string()));
                } else {
                    let n: usize = inner
                        .parse()
                        .map_err(|_| bad("[...] holds an array index or a \"quoted\" field"))?;
                    steps.push(PathStep::Index(n));
                }
                i = close + 1;
            }
            _ => return Err(bad("expected '.' or '['")),
        }
        if steps.len() > 32 {
            return Err(bad("deeper than 32 steps"));
        }
    }
    Ok(steps)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_parse() {
        assert_eq!(parse_path("$").unwrap(), vec![]);
        assert_eq!(
            parse_path("$.a.b[2][\"c d\"]").unwrap(),
            vec![
                PathStep::Field("a".into()),
                PathStep::Field("b".into()),
                PathStep::Index(2),
                PathStep::Field("c d".into()),
            ]
        );
        for bad in ["a.b", "$.", "$..a", "$[x]", "$[1", "$a", "$[-1]"] {
            assert!(parse_path(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn definitions_validate() {
        let d = IndexDefinition::parse(
            r#"[{"name":"amount","path":"$.amount","type":"float64"},
                {"name":"sku","path":"$.items[0].sku","type":"string"}]"#,
        )
        .unwrap();
        assert_eq!(d.columns.len(), 2);
        assert_eq!(d.columns[0].kind, ColumnType::Float64);
        assert!(IndexDefinition::parse("").unwrap().columns.is_empty());
        assert!(IndexDefinition::parse("[]").unwrap().columns.is_empty());
        for bad in [
            "{}",
            "not json",
            r#"[{"name":"a","path":"$.a","type":"decimal"}]"#,
            r#"[{"name":"a","path":"a","type":"string"}]"#,
            r#"[{"name":"key","path":"$.a","type":"string"}]"#,
            r#"[{"name":"a b","path":"$.a","type":"string"}]"#,
            r#"[{"name":"a","path":"$.a","type":"string"},{"name":"A","path":"$.b","type":"bool"}]"#,
            r#"[{"name":"a","path":"$.a","type":"string","extra":1}]"#,
        ] {
            assert!(IndexDefinition::parse(bad).is_err(), "{bad}");
        }
    }
}
