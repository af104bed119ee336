//! What `floe produce --input-format json` reads: one JSON object per line,
//!
//! ```text
//! {"key": "k", "value": "v", "headers": {"h": "1"}, "timestamp": 1714564800000}
//! ```
//!
//! `key` and `value` are strings (sent as their UTF-8 bytes), `null` or left
//! out (no key; a null value, i.e. a tombstone), `{"base64": "…"}` for
//! binary, or any other JSON (sent as its JSON text). `headers` is an object
//! or a list of `[name, value]` pairs (names may repeat); `timestamp` is ms
//! since the epoch or a time string (`floe produce --help`).

use base64::Engine;
use floe_client::ProducerRecord;
use serde_json::Value;

/// Bytes from a JSON value (see the module's text); `None` for null.
fn bytes_of(v: &Value, what: &str) -> Result<Option<Vec<u8>>, String> {
    Ok(match v {
        Value::Null => None,
        Value::String(s) => Some(s.as_bytes().to_vec()),
        Value::Object(m) if m.len() == 1 && m.contains_key("base64") => {
            let Some(Value::String(b)) = m.get("base64") else {
                return Err(format!("{what}: base64 must be a string"));
            };
            Some(
                base64::engine::general_purpose::STANDARD
                    .decode(b)
                    .map_err(|e| format!("{what}: bad base64: {e}"))?,
            )
        }
        other => Some(other.to_string().into_bytes()),
    })
}

/// A header's name: a string only.
fn header_name(v: &Value) -> Result<Vec<u8>, String> {
    match v {
        Value::String(s) => Ok(s.as_bytes().to_vec()),
        other => Err(format!("a header name must be a string, not {other}")),
    }
}

/// Parses one JSON line into a record; `default_ts` when it has no
/// timestamp.
pub fn parse_json_record(line: &[u8], default_ts: i64) -> Result<ProducerRecord, String> {
    let v: Value = serde_json::from_slice(line).map_err(|e| format!("not JSON: {e}"))?;
    let Value::Object(m) = v else {
        return Err("expected a JSON object with key, value, headers, timestamp".into());
    };
    if let Some(unknown) = m
        .keys()
        .find(|k| !["key", "value", "headers", "timestamp"].contains(&k.as_str()))
    {
        return Err(format!(
            "unknown field {unknown:?} (known: key, value, headers, timestamp)"
        ));
    }
    let key = match m.get("key") {
        None => None,
        Some(k) => bytes_of(k, "key")?,
    };
    let value = match m.get("value") {
        None => None,
        Some(v) => bytes_of(v, "value")?,
    };
    let headers = match m.get("headers") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Object(h)) => h
            .iter()
            .map(|(k, v)| Ok((k.as_bytes().to_vec(), bytes_of(v, "a header value")?)))
            .collect::<Result<Vec<_>, String>>()?,
        Some(Value::Array(pairs)) => pairs
            .iter()
            .map(|p| match p.as_array().map(Vec::as_slice) {
                Some([k, v]) => Ok((header_name(k)?, bytes_of(v, "a header value")?)),
                _ => Err(format!("a header must be [name, value], not {p}")),
            })
            .collect::<Result<Vec<_>, String>>()?,
        Some(other) => {
            return Err(format!(
                "headers must be an object or a list of [name, value], not {other}"
            ));
        }
    };
    let timestamp_ms = match m.get("timestamp") {
        None | Some(Value::Null) => default_ts,
        Some(Value::Number(n)) => n
            .as_i64()
            .ok_or_else(|| format!("timestamp {n} is not a whole number of ms"))?,
        Some(Value::String(s)) => crate::time_arg::parse_time(s)?,
        Some(other) => {
            return Err(format!(
                "timestamp must be a number or a string, not {other}"
            ));
        }
    };
    Ok(ProducerRecord {
        key,
        value,
        timestamp_ms,
        headers,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_field_is_read() {
        let r = parse_json_record(
            br#"{"key":"k","value":{"a":1},"headers":[["h","1"],["h",null]],"timestamp":5}"#,
            9,
        )
        .expect("parses");
        assert_eq!(r.key.as_deref(), Some(&b"k"[..]));
        assert_eq!(r.value.as_deref(), Some(&br#"{"a":1}"#[..]));
        assert_eq!(
            r.headers,
            vec![(b"h".to_vec(), Some(b"1".to_vec())), (b"h".to_vec(), None)]
        );
        assert_eq!(r.timestamp_ms, 5);
    }

    #[test]
    fn a_missing_or_null_value_is_a_tombstone_and_base64_is_binary() {
        let r = parse_json_record(br#"{"key":{"base64":"/wA="}}"#, 9).expect("parses");
        assert_eq!(r.key, Some(vec![0xff, 0]));
        assert_eq!(r.value, None);
        assert_eq!(r.timestamp_ms, 9);
        let r = parse_json_record(
            br#"{"value":null,"headers":{"a":"b"},"timestamp":"1970-01-01T00:00:01Z"}"#,
            9,
        )
        .expect("parses");
        assert_eq!((r.key, r.value, r.timestamp_ms), (None, None, 1000));
        assert_eq!(r.headers, vec![(b"a".to_vec(), Some(b"b".to_vec()))]);
    }

    #[test]
    fn bad_lines_say_why() {
        for (line, why) in [
            (&b"nope"[..], "not JSON"),
            (b"[1]", "expected a JSON object"),
            (b"{\"vlaue\":1}", "unknown field"),
            (b"{\"headers\":[[1,2]]}", "header name"),
            (b"{\"timestamp\":1.5}", "whole number"),
        ] {
            let err = parse_json_record(line, 0).expect_err("refused");
            assert!(err.contains(why), "{err}");
        }
    }
}
