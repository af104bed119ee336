//! How `floe consume` prints a record: the default line
//! (`[partition:offset\t][key\t]value`), a kcat-like format string
//! (`--format`), or one JSON object per line (`--output json`).

use base64::Engine;
use floe_client::Record;
use serde_json::{Map, Value, json};

/// The directives of `--format`, for help and errors.
pub const FORMAT_HELP: &str = "%t topic, %p partition, %o offset, %T timestamp (ms), %k key, \
     %K key length, %s value, %S value length, %h headers (k=v,k=v), %% a percent sign; \
     \\n \\t \\\\ escapes. A null key or value prints as nothing, its length as -1";

/// One piece of a parsed format string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Piece {
    Text(Vec<u8>),
    Topic,
    Partition,
    Offset,
    Timestamp,
    Key,
    KeyLen,
    Value,
    ValueLen,
    Headers,
}

/// A parsed format string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Format(pub Vec<Piece>);

/// Parses a kcat-like format string (a clap value parser).
pub fn parse_format(s: &str) -> Result<Format, String> {
    parse_pieces(s).map(Format)
}

fn parse_pieces(s: &str) -> Result<Vec<Piece>, String> {
    let mut out = Vec::new();
    let mut text = Vec::new();
    let mut chars = s.chars();
    let flush = |text: &mut Vec<u8>, out: &mut Vec<Piece>| {
        if !text.is_empty() {
            out.push(Piece::Text(std::mem::take(text)));
        }
    };
    while let Some(c) = chars.next() {
        match c {
            '%' => {
                let piece = match chars.next() {
                    Some('t') => Piece::Topic,
                    Some('p') => Piece::Partition,
                    Some('o') => Piece::Offset,
                    Some('T') => Piece::Timestamp,
                    Some('k') => Piece::Key,
                    Some('K') => Piece::KeyLen,
                    Some('s') => Piece::Value,
                    Some('S') => Piece::ValueLen,
                    Some('h') => Piece::Headers,
                    Some('%') => {
                        text.push(b'%');
                        continue;
                    }
                    other => {
                        return Err(format!(
                            "unknown directive %{} in the format; known: {FORMAT_HELP}",
                            other.map(String::from).unwrap_or_default()
                        ));
                    }
                };
                flush(&mut text, &mut out);
                out.push(piece);
            }
            '\\' => match chars.next() {
                Some('n') => text.push(b'\n'),
                Some('t') => text.push(b'\t'),
                Some('\\') => text.push(b'\\'),
                Some(other) => {
                    text.push(b'\\');
                    text.extend_from_slice(other.to_string().as_bytes());
                }
                None => text.push(b'\\'),
            },
            c => text.extend_from_slice(c.to_string().as_bytes()),
        }
    }
    flush(&mut text, &mut out);
    Ok(out)
}

fn len_of(b: Option<&bytes::Bytes>) -> String {
    b.map_or_else(|| "-1".to_owned(), |b| b.len().to_string())
}

/// Appends the record as the format says (no newline unless it has one).
pub fn format_with(out: &mut Vec<u8>, pieces: &[Piece], topic: &str, partition: i32, r: &Record) {
    for piece in pieces {
        match piece {
            Piece::Text(t) => out.extend_from_slice(t),
            Piece::Topic => out.extend_from_slice(topic.as_bytes()),
            Piece::Partition => out.extend_from_slice(partition.to_string().as_bytes()),
            Piece::Offset => out.extend_from_slice(r.offset.to_string().as_bytes()),
            Piece::Timestamp => out.extend_from_slice(r.timestamp.to_string().as_bytes()),
            Piece::Key => out.extend_from_slice(r.key.as_deref().unwrap_or_default()),
            Piece::KeyLen => out.extend_from_slice(len_of(r.key.as_ref()).as_bytes()),
            Piece::Value => out.extend_from_slice(r.value.as_deref().unwrap_or_default()),
            Piece::ValueLen => out.extend_from_slice(len_of(r.value.as_ref()).as_bytes()),
            Piece::Headers => {
                for (i, h) in r.headers.iter().enumerate() {
                    if i > 0 {
                        out.push(b',');
                    }
                    out.extend_from_slice(&h.key);
                    out.push(b'=');
                    out.extend_from_slice(h.value.as_deref().unwrap_or_default());
                }
            }
        }
    }
}

/// Bytes as JSON: a string when they are UTF-8, else `{"base64": "…"}`;
/// `null` for none.
pub fn bytes_json(b: Option<&[u8]>) -> Value {
    match b {
        None => Value::Null,
        Some(b) => match std::str::from_utf8(b) {
            Ok(s) => Value::String(s.to_owned()),
            Err(_) => json!({ "base64": base64::engine::general_purpose::STANDARD.encode(b) }),
        },
    }
}

/// The record as one JSON object: topic, partition, offset, timestamp,
/// key, value, headers (a list of `[name, value]`, in order: names may
/// repeat).
pub fn record_json(topic: &str, partition: i32, r: &Record) -> Value {
    let headers: Vec<Value> = r
        .headers
        .iter()
        .map(|h| json!([bytes_json(Some(&h.key)), bytes_json(h.value.as_deref())]))
        .collect();
    let mut m = Map::new();
    m.insert("topic".into(), json!(topic));
    m.insert("partition".into(), json!(partition));
    m.insert("offset".into(), json!(r.offset));
    m.insert("timestamp".into(), json!(r.timestamp));
    m.insert("key".into(), bytes_json(r.key.as_deref()));
    m.insert("value".into(), bytes_json(r.value.as_deref()));
    m.insert("headers".into(), Value::Array(headers));
    Value::Object(m)
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use floe_storage::records::RecordHeader;

    use super::*;

    fn record() -> Record {
        Record {
            offset: 7,
            timestamp: 1_000,
            key: Some(Bytes::from_static(b"k")),
            value: None,
            headers: vec![
                RecordHeader {
                    key: Bytes::from_static(b"a"),
                    value: Some(Bytes::from_static(b"1")),
                },
                RecordHeader {
                    key: Bytes::from_static(b"b"),
                    value: None,
                },
            ],
        }
    }

    #[test]
    fn a_format_string_prints_every_directive() {
        let pieces = parse_pieces("%t/%p@%o %T [%k:%K] [%s:%S] {%h} 100%%\\n").expect("parses");
        let mut out = Vec::new();
        format_with(&mut out, &pieces, "t", 2, &record());
        assert_eq!(
            String::from_utf8(out).expect("utf-8"),
            "t/2@7 1000 [k:1] [:-1] {a=1,b=} 100%\n"
        );
        assert!(parse_format("%x").is_err());
        assert!(parse_format("%").is_err());
    }

    #[test]
    fn json_keeps_nulls_repeated_headers_and_binary_apart() {
        let mut r = record();
        r.value = Some(Bytes::from_static(&[0xff, 0x00]));
        let v = record_json("t", 2, &r);
        assert_eq!(v["key"], json!("k"));
        assert_eq!(v["value"], json!({"base64": "/wA="}));
        assert_eq!(v["headers"], json!([["a", "1"], ["b", null]]));
        assert_eq!(v["offset"], json!(7));
        r.value = None;
        assert_eq!(record_json("t", 2, &r)["value"], Value::Null);
    }
}
