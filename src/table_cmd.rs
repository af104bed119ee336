//! `floe table`: a topic's Iceberg table (`table.format=iceberg`) as the
//! indexer's REST catalog serves it: list the tables, describe one (its
//! schema, snapshots and what each covers of the log); and its upkeep,
//! which the indexer also does by itself: compact its small files, expire
//! its old snapshots.

use std::io::Write as _;

use clap::{Args, Subcommand};
use floe_metadata::http::HttpClient;
use serde_json::Value;

use crate::indexer_cmd::{DEFAULT_INDEXER, encode, get_json, post_json};

/// The namespace of every table (`floe_indexer::table::catalog::NAMESPACE`).
const NAMESPACE: &str = floe_indexer::table::catalog::NAMESPACE;

#[derive(Debug, Subcommand)]
pub enum TableCommand {
    /// The topics that are Iceberg tables.
    List(TableArgs),
    /// A table's schema (field ids), snapshots and the log offsets each covers.
    Describe(DescribeArgs),
    /// Rewrites the table's small files now, each partition's files of an
    /// hour into files of up to table.target.file.bytes (the indexer does it
    /// by itself once an hour ended), and commits a replace snapshot.
    Compact(TopicArgs),
    /// Expires the table's snapshots older than --older-than-ms (default:
    /// its table.snapshot.max.age.ms) now, the current one kept, and
    /// deletes the files only they named.
    Expire(ExpireArgs),
}

#[derive(Debug, Args)]
pub struct TopicArgs {
    /// The table's topic.
    pub topic: String,
    #[command(flatten)]
    pub at: TableArgs,
}

#[derive(Debug, Args)]
pub struct ExpireArgs {
    /// The table's topic.
    pub topic: String,
    /// Expire the snapshots older than this many milliseconds (0: all but
    /// the current one).
    #[arg(long)]
    pub older_than_ms: Option<u64>,
    #[command(flatten)]
    pub at: TableArgs,
}

#[derive(Debug, Args)]
pub struct TableArgs {
    /// The indexer's HTTP API (its catalog is under /iceberg).
    #[arg(long, env = "FLOE_INDEXER", default_value = DEFAULT_INDEXER)]
    pub indexer: String,
}

#[derive(Debug, Args)]
pub struct DescribeArgs {
    /// The table's topic.
    pub topic: String,
    /// Snapshots to print, newest first.
    #[arg(long, default_value_t = 10)]
    pub snapshots: usize,
    #[command(flatten)]
    pub at: TableArgs,
}

pub async fn run(cmd: TableCommand) -> anyhow::Result<()> {
    let http = HttpClient::default();
    let mut out = std::io::stdout().lock();
    match cmd {
        TableCommand::List(a) => {
            let answer = get_json(
                &http,
                &a.indexer,
                &format!("/iceberg/v1/namespaces/{NAMESPACE}/tables"),
            )
            .await?;
            for t in answer["identifiers"].as_array().into_iter().flatten() {
                writeln!(
                    out,
                    "{NAMESPACE}.{}",
                    t["name"].as_str().unwrap_or_default()
                )?;
            }
        }
        TableCommand::Describe(d) => {
            let answer = get_json(
                &http,
                &d.at.indexer,
                &format!(
                    "/iceberg/v1/namespaces/{NAMESPACE}/tables/{}",
                    encode(&d.topic)
                ),
            )
            .await?;
            out.write_all(describe(&answer, d.snapshots).as_bytes())?;
        }
        TableCommand::Compact(c) => {
            let answer = post_json(
                &http,
                &c.at.indexer,
                &format!("/v1/tables/{}/compact", encode(&c.topic)),
                std::time::Duration::from_secs(3600),
            )
            .await?;
            writeln!(
                out,
                "{}: {} files written in place of {}",
                c.topic,
                answer["files_written"].as_u64().unwrap_or(0),
                answer["files_replaced"].as_u64().unwrap_or(0)
            )?;
        }
        TableCommand::Expire(e) => {
            let query = e
                .older_than_ms
                .map(|ms| format!("?older_than_ms={ms}"))
                .unwrap_or_default();
            let answer = post_json(
                &http,
                &e.at.indexer,
                &format!("/v1/tables/{}/expire{query}", encode(&e.topic)),
                std::time::Duration::from_secs(600),
            )
            .await?;
            writeln!(
                out,
                "{}: {} snapshots expired, {} files deleted",
                e.topic,
                answer["snapshots_expired"].as_u64().unwrap_or(0),
                answer["files_deleted"].as_u64().unwrap_or(0)
            )?;
        }
    }
    out.flush()?;
    Ok(())
}

/// The text `floe table describe` prints for a LoadTable answer: the
/// console's summary of it (`floe_console::table_summary`), as lines.
fn describe(answer: &Value, snapshots: usize) -> String {
    let t = floe_console::table_summary(
        answer["metadata"]["properties"]["floe.topic"]
            .as_str()
            .unwrap_or("?"),
        answer,
        snapshots,
    );
    let text = |v: &Value| match v {
        Value::String(s) => s.clone(),
        Value::Null => "-".to_string(),
        other => other.to_string(),
    };
    let mut s = format!(
        "table     {}\nlocation  {}\nmetadata  {}\nformat    v{}\n",
        text(&t["topic"]),
        text(&t["location"]),
        text(&t["metadata_location"]),
        t["format_version"]
    );
    s += &format!(
        "\nschema {}:\n",
        answer["metadata"]["current-schema-id"]
            .as_i64()
            .unwrap_or(-1)
    );
    for f in t["schema"].as_array().into_iter().flatten() {
        let required = if f["required"].as_bool() == Some(true) {
            " not null"
        } else {
            ""
        };
        s += &format!(
            "  {:>4}  {}  {}{required}\n",
            f["id"].as_i64().unwrap_or(-1),
            text(&f["name"]),
            text(&f["type"])
        );
    }
    let cur = &t["current"];
    if cur.is_null() {
        s += "\nno snapshot yet\n";
    } else {
        s += &format!(
            "\ncurrent snapshot {}: {} records in {} data files, {} bytes\n",
            cur["snapshot_id"],
            text(&cur["records"]),
            text(&cur["files"]),
            text(&cur["bytes"])
        );
        if cur["mode"] == "upsert" {
            s += &format!(
                "upsert: {} rows, one per key ({} records superseded, named by position deletes)\n",
                text(&cur["rows"]),
                text(&cur["position_deletes"])
            );
        }
    }
    s += &format!(
        "\nsnapshots ({} kept, newest first):\n",
        t["snapshot_count"]
    );
    for x in t["snapshots"].as_array().into_iter().flatten() {
        let at = x["timestamp_ms"]
            .as_i64()
            .and_then(chrono::DateTime::from_timestamp_millis)
            .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
            .unwrap_or_default();
        s += &format!(
            "  {}  {at}  {:<9} +{} records, +{} files  offsets {}\n",
            x["snapshot_id"],
            text(&x["operation"]),
            text(&x["added_records"]),
            text(&x["added_files"]),
            text(&x["offsets"])
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_description_names_fields_snapshots_and_offsets() {
        let answer = json!({
            "metadata-location": "file:///d/tables/t/metadata/00002-x.metadata.json",
            "metadata": {
                "format-version": 2,
                "location": "file:///d/tables/t",
                "properties": {"floe.topic": "t"},
                "current-schema-id": 1,
                "schemas": [{"schema-id": 1, "fields": [
                    {"id": 2, "name": "offset", "required": true, "type": "long"},
                    {"id": 6, "name": "headers", "required": true, "type": {"type": "list"}},
                    {"id": 10, "name": "amount", "required": false, "type": "double"}]}],
                "current-snapshot-id": 7,
                "snapshots": [
                    {"snapshot-id": 5, "timestamp-ms": 1000, "summary": {"operation": "append",
                        "added-records": "3", "added-data-files": "1", "floe.offsets": "{\"0\":3}"}},
                    {"snapshot-id": 7, "timestamp-ms": 2000, "summary": {"operation": "append",
                        "added-records": "2", "added-data-files": "1", "total-records": "5",
                        "total-data-files": "2", "total-files-size": "900", "floe.offsets": "{\"0\":5}"}}]
            }
        });
        let text = describe(&answer, 10);
        assert!(text.contains("     2  offset  long not null"), "{text}");
        assert!(text.contains("    10  amount  double\n"), "{text}");
        assert!(
            text.contains("    6  headers  list not null")
                || text.contains("headers  list not null"),
            "{text}"
        );
        assert!(
            text.contains("current snapshot 7: 5 records in 2 data files, 900 bytes"),
            "{text}"
        );
        let newest = text.find("  7  ").unwrap();
        let oldest = text.find("  5  ").unwrap();
        assert!(newest < oldest, "newest first: {text}");
        assert!(text.contains("offsets {\"0\":3}"), "{text}");
        assert_eq!(describe(&answer, 1).matches("append").count(), 1);
    }
}
