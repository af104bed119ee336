//! docs/kafka-compatibility.md cannot drift from what the proxy answers:
//! every Kafka API key is either in its table of answered keys, with the
//! versions ApiVersions advertises, or in its table of keys not answered.

use std::collections::HashMap;

use floe_proxy::handlers::SUPPORTED;
use kafka_protocol::messages::ApiKey;

/// Rows `| key | API | second column | …` of the doc's tables, by key number:
/// (API name, the cell after it).
fn rows(doc: &str) -> HashMap<i16, Vec<(String, String)>> {
    let mut out: HashMap<i16, Vec<(String, String)>> = HashMap::new();
    for line in doc.lines() {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        // "", key, name, third, ...
        if cells.len() < 5 {
            continue;
        }
        if let Ok(key) = cells[1].parse::<i16>() {
            out.entry(key)
                .or_default()
                .push((cells[2].to_string(), cells[3].to_string()));
        }
    }
    out
}

#[test]
fn every_api_key_is_in_the_compatibility_doc_with_the_versions_advertised() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../docs/kafka-compatibility.md"
    );
    let doc = std::fs::read_to_string(path).expect("docs/kafka-compatibility.md");
    let rows = rows(&doc);
    let mut missing = Vec::new();
    for key in ApiKey::iter() {
        let n = key as i16;
        let name = format!("{key:?}");
        let Some(found) = rows.get(&n) else {
            missing.push(format!("{n} {name}"));
            continue;
        };
        assert_eq!(found.len(), 1, "key {n} ({name}) has {} rows", found.len());
        let (doc_name, cell) = &found[0];
        assert_eq!(doc_name, &name, "key {n} is named {doc_name} in the doc");
        match SUPPORTED.iter().find(|(k, _, _)| *k == key) {
            Some((_, min, max)) => {
                let want = if min == max {
                    format!("{min}")
                } else {
                    format!("{min}–{max}")
                };
                let advertised = cell.split_whitespace().next().unwrap_or("");
                assert_eq!(
                    advertised, want,
                    "{name}: the doc says versions {cell:?}, ApiVersions advertises {want}"
                );
            }
            None => assert!(
                !cell.chars().next().is_some_and(|c| c.is_ascii_digit()),
                "{name} is not answered, but the doc gives it versions {cell:?}"
            ),
        }
    }
    assert!(missing.is_empty(), "keys missing from the doc: {missing:?}");
}
