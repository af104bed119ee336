//! Fuzzes what the indexer reads from outside: the `export.index` definition
//! (topic config), record values run through a definition into a Parquet
//! file, Parquet files searched by key and time (a corrupt or hostile file in
//! the store), query parameters, and an Iceberg table's metadata file,
//! manifest list and manifest as a commit reads them from the store; an
//! upsert table's reads of a data file's keys and of a position delete file,
//! and a SQL catalog URI's TLS parameters. The first byte picks which. Nothing may panic, with two exceptions that are
//! caught and turned into errors, so the harness lets them unwind:
//! `search_file` catches a panic inside the parquet/arrow reader (which
//! asserts on some malformed page data), and the table decoders one inside
//! apache-avro (which unwraps on some malformed schemas). A panic anywhere
//! else, or one that escapes those, is still a crash.

#![no_main]

use std::collections::HashMap;
use std::sync::{Arc, Once, OnceLock};

use bytes::Bytes;
use floe_indexer::columns::{FileOptions, write_file};
use floe_indexer::lookup::{Query, search_file};
use floe_indexer::service::parse_query;
use floe_metadata::export_def::{IndexDefinition, parse_path};
use floe_storage::records::{Record, RecordHeader};
use libfuzzer_sys::fuzz_target;
use object_store::ObjectStoreExt;
use object_store::memory::InMemory;
use object_store::path::Path;

const DEFINITION: &str = r#"[
  {"name":"s","path":"$.a.b","type":"string"},
  {"name":"i","path":"$.items[0].n","type":"int64"},
  {"name":"f","path":"$[\"x y\"]","type":"float64"},
  {"name":"b","path":"$.ok","type":"bool"},
  {"name":"t","path":"$.at","type":"timestamp"}
]"#;

fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("a runtime")
    })
}

/// libFuzzer's panic hook aborts at once; keep it for every panic but those
/// raised in the parquet/arrow reader, which `search_file` catches.
fn let_reader_panics_unwind() {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        let abort = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let in_reader = info.location().is_some_and(|l| {
                let file = l.file();
                // The Avro reader under the table decoders, caught there too.
                file.contains("/parquet-")
                    || file.contains("/arrow-")
                    || file.contains("/apache-avro-")
            });
            if !in_reader {
                abort(info);
            }
        }));
    });
}

fuzz_target!(|data: &[u8]| {
    let_reader_panics_unwind();
    let Some((&sel, body)) = data.split_first() else {
        return;
    };
    match sel % 6 {
        0 => {
            let text = String::from_utf8_lossy(body);
            let _ = parse_path(&text);
            if let Ok(def) = IndexDefinition::parse(&text) {
                for c in &def.columns {
                    let _ = c.steps();
                }
            }
        }
        1 => {
            let Ok(def) = IndexDefinition::parse(DEFINITION) else {
                return;
            };
            let value = Bytes::copy_from_slice(body);
            let records: Vec<Record> = (0..3)
                .map(|i| Record {
                    offset: i,
                    timestamp: i * 1000,
                    key: Some(value.slice(..value.len().min(8))),
                    value: Some(value.clone()),
                    headers: vec![RecordHeader {
                        key: value.slice(..value.len().min(4)),
                        value: None,
                    }],
                })
                .collect();
            let opts = FileOptions {
                row_group_rows: 2,
                ..FileOptions::default()
            };
            let _ = write_file(0, &records, &def, &opts);
        }
        2 => {
            let store = Arc::new(InMemory::new());
            let path = Path::from("f.parquet");
            let size = body.len() as u64;
            runtime().block_on(async {
                if store
                    .put(&path, Bytes::copy_from_slice(body).into())
                    .await
                    .is_err()
                {
                    return;
                }
                let q = Query {
                    key: Some(Bytes::from_static(b"k1")),
                    from_ms: Some(0),
                    to_ms: Some(i64::MAX),
                    limit: 10,
                };
                // The seed file holds 40 rows; the metadata bounds what a footer may claim.
                let _ = search_file(store.clone(), path.clone(), size, &q, 40).await;
                let all = Query {
                    key: None,
                    from_ms: None,
                    to_ms: None,
                    limit: 10,
                };
                let _ = search_file(store, path, size, &all, 40).await;
            });
        }
        4 => {
            if let Ok(m) = floe_indexer::table::commit::parse_metadata(body, "fuzz") {
                let _ = floe_indexer::table::Covered::of(m.current_snapshot().map(|s| &**s));
            }
            let _ = floe_indexer::table::commit::parse_manifest_list(
                body,
                iceberg::spec::FormatVersion::V2,
            );
            let _ = floe_indexer::table::commit::parse_manifest(body);
        }
        5 => {
            use floe_indexer::table::{pg_tls, upsert};
            let bytes = Bytes::copy_from_slice(body);
            // The seed files hold 40 rows and 3 deletes; the manifest entry
            // says how many a file must have.
            let _ = upsert::rows_of_parquet(bytes.clone(), "fuzz", 40);
            let _ = upsert::positions_of_parquet(bytes, "fuzz", 3);
            // Only the split: the connector reads the files the URI names.
            let _ = pg_tls::split(&String::from_utf8_lossy(body));
        }
        _ => {
            let text = String::from_utf8_lossy(body);
            let params: HashMap<String, String> = text
                .split('&')
                .filter_map(|kv| kv.split_once('='))
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            let _ = parse_query(&params);
        }
    }
});
