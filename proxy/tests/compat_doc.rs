//! docs/kafka-compatibility.md cannot drift from what the proxy answers:
//! every Kafka API key is either in its table of answered keys, with the
//! versions ApiVersions advertises (the transaction APIs with
//! `--transactions`, the share-group APIs with `--share-groups`), or in its
//! table of keys not answered.
//!
//! The versions column is generated from the code: with
//! `FLOE_BLESS_DOCS=1` the test rewrites it (and the option a key needs)
//! from the proxy's tables instead of failing.

use std::collections::HashMap;

use floe_proxy::handlers::{SUPPORTED, TXN_SUPPORTED};
use floe_proxy::share::SHARE_SUPPORTED;
use kafka_protocol::messages::ApiKey;

/// Rows `| key | API | second column | …` of the doc's tables, by key number:
/// (line index, API name, the cell after it).
fn rows(doc: &str) -> HashMap<i16, Vec<(usize, String, String)>> {
    let mut out: HashMap<i16, Vec<(usize, String, String)>> = HashMap::new();
    for (i, line) in doc.lines().enumerate() {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        // "", key, name, third, ...
        if cells.len() < 5 {
            continue;
        }
        if let Ok(key) = cells[1].parse::<i16>() {
            out.entry(key)
                .or_default()
                .push((i, cells[2].to_string(), cells[3].to_string()));
        }
    }
    out
}

/// A key and the versions the proxy answers (its tables' rows).
type Versions = (ApiKey, i16, i16);

/// The versions cell the code says a key has: `min–max`, and the option
/// it needs in parentheses. `None`: not answered.
fn versions_cell(key: ApiKey) -> Option<String> {
    let tables: [(&[Versions], &str); 3] = [
        (SUPPORTED, ""),
        (TXN_SUPPORTED, " (`--transactions`)"),
        (SHARE_SUPPORTED, " (`--share-groups`)"),
    ];
    tables.iter().find_map(|(table, option)| {
        table
            .iter()
            .find(|(k, _, _)| *k == key)
            .map(|(_, min, max)| {
                if min == max {
                    format!("{min}{option}")
                } else {
                    format!("{min}–{max}{option}")
                }
            })
    })
}

/// The generated part of a versions cell: its first word and the option
/// in parentheses, if any; the rest (" (3–11 decoded)") is written by hand.
fn generated_part(cell: &str) -> String {
    let mut words = cell.split_whitespace();
    let mut out = words.next().unwrap_or("").to_string();
    if let Some(option) = cell.find("(`--") {
        let end = cell[option..]
            .find(')')
            .map_or(cell.len(), |e| option + e + 1);
        out.push(' ');
        out.push_str(&cell[option..end]);
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
    let bless = std::env::var_os("FLOE_BLESS_DOCS").is_some();
    let mut lines: Vec<String> = doc.lines().map(str::to_string).collect();
    let rows = rows(&doc);
    let mut missing = Vec::new();
    let mut wrong = Vec::new();
    for key in ApiKey::iter() {
        let n = key as i16;
        let name = format!("{key:?}");
        let Some(found) = rows.get(&n) else {
            missing.push(format!("{n} {name}"));
            continue;
        };
        assert_eq!(found.len(), 1, "key {n} ({name}) has {} rows", found.len());
        let (line, doc_name, cell) = &found[0];
        assert_eq!(doc_name, &name, "key {n} is named {doc_name} in the doc");
        match versions_cell(key) {
            Some(want) => {
                let have = generated_part(cell);
                if have != want {
                    if bless && cell.chars().next().is_some_and(|c| c.is_ascii_digit()) {
                        let by_hand = cell
                            .split_whitespace()
                            .skip(1)
                            .filter(|w| !w.contains("`--") && !w.starts_with(')'))
                            .collect::<Vec<_>>()
                            .join(" ");
                        let fresh = if by_hand.is_empty() {
                            want.clone()
                        } else {
                            format!("{want} {by_hand}")
                        };
                        lines[*line] = lines[*line].replacen(cell.as_str(), &fresh, 1);
                    } else {
                        wrong.push(format!(
                            "{name}: the doc says versions {cell:?}, ApiVersions advertises {want:?}"
                        ));
                    }
                }
            }
            None => assert!(
                !cell.chars().next().is_some_and(|c| c.is_ascii_digit()),
                "{name} is not answered, but the doc gives it versions {cell:?}"
            ),
        }
    }
    assert!(missing.is_empty(), "keys missing from the doc: {missing:?}");
    if bless {
        let mut out = lines.join("\n");
        out.push('\n');
        std::fs::write(path, out).expect("write docs/kafka-compatibility.md");
    }
    assert!(
        wrong.is_empty(),
        "{} (FLOE_BLESS_DOCS=1 rewrites the versions from the code)",
        wrong.join("; ")
    );
}

#[test]
fn the_generated_part_of_a_versions_cell() {
    assert_eq!(generated_part("0–11 (3–11 decoded)"), "0–11");
    assert_eq!(
        generated_part("0–4 (`--transactions`)"),
        "0–4 (`--transactions`)"
    );
    assert_eq!(generated_part("why not answered"), "why");
    assert_eq!(
        versions_cell(ApiKey::ShareFetch).as_deref(),
        Some("1 (`--share-groups`)")
    );
    assert_eq!(versions_cell(ApiKey::Produce).as_deref(), Some("0–11"));
    assert_eq!(versions_cell(ApiKey::Vote), None);
}
