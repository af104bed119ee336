//! `/ui/api/topics/{name}/objects?partition=&offset=&limit=`: the store
//! objects that hold a partition's log, as the metadata service's index
//! records them: WAL objects not compacted yet and segments, each with the
//! offsets and bytes of the partition in it. DESCRIBE on the topic needed
//! (like its owners and epochs).

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, Query, State};
use floe_metadata::acl::Operation;
use floe_metadata::model::IndexEntry;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::Console;
use crate::caller::Asker;
use crate::error::{ApiError, ApiResult, Kind};

/// The most objects one page lists.
pub const MAX_OBJECTS: usize = 500;
/// A page's objects when no limit is asked: the last 100.
pub const DEFAULT_OBJECTS: usize = 100;

/// Which page of a partition's objects.
#[derive(Debug, Default, Deserialize)]
pub struct Params {
    pub partition: Option<u32>,
    /// The first object's place in the list; without it, the last page.
    pub offset: Option<usize>,
    pub limit: Option<usize>,
}

/// What kind of object holds a range, by its key's prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ObjectKind {
    /// A broker's WAL object (`wal/`): many partitions' batches, not
    /// compacted into a segment yet.
    Wal,
    /// A segment of this partition (`segments/`).
    Segment,
    /// Any other key.
    Other,
}

impl ObjectKind {
    pub fn of_key(key: &str) -> Self {
        if key.starts_with("wal/") {
            ObjectKind::Wal
        } else if key.starts_with("segments/") {
            ObjectKind::Segment
        } else {
            ObjectKind::Other
        }
    }

    fn name(self) -> &'static str {
        match self {
            ObjectKind::Wal => "wal",
            ObjectKind::Segment => "segment",
            ObjectKind::Other => "other",
        }
    }
}

/// One object and the partition's part of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectRow {
    pub kind: ObjectKind,
    pub endpoint: String,
    pub key: String,
    /// The partition's first and last offset in it (inclusive).
    pub first_offset: i64,
    pub last_offset: i64,
    /// Bytes of the partition's ranges in it.
    pub bytes: u64,
    /// The whole object's size.
    pub object_bytes: u64,
}

/// The index's entries, in offset order, as one row per run of entries
/// in the same object.
pub fn rows_of(entries: &[IndexEntry]) -> Vec<ObjectRow> {
    let mut rows: Vec<ObjectRow> = Vec::new();
    let mut last_id = None;
    for e in entries {
        if last_id == Some(e.object_id)
            && let Some(row) = rows.last_mut()
        {
            row.first_offset = row.first_offset.min(e.first_offset);
            row.last_offset = row.last_offset.max(e.last_offset);
            row.bytes += e.byte_len;
            continue;
        }
        last_id = Some(e.object_id);
        rows.push(ObjectRow {
            kind: ObjectKind::of_key(e.object.key.as_str()),
            endpoint: e.object.endpoint.as_str().to_string(),
            key: e.object.key.as_str().to_string(),
            first_offset: e.first_offset,
            last_offset: e.last_offset,
            bytes: e.byte_len,
            object_bytes: e.object.size,
        });
    }
    rows
}

impl Params {
    /// The page's bounds in a list of `total`: from `offset`, or the last
    /// `limit` without one.
    pub fn bounds(&self, total: usize) -> ApiResult<(usize, usize)> {
        let limit = self.limit.unwrap_or(DEFAULT_OBJECTS);
        if limit == 0 || limit > MAX_OBJECTS {
            return Err(ApiError::new(
                Kind::Invalid,
                format!("limit={limit}: between 1 and {MAX_OBJECTS}"),
            ));
        }
        let offset = match self.offset {
            Some(o) => o.min(total),
            None => total.saturating_sub(limit),
        };
        Ok((offset, limit))
    }
}

pub async fn objects(
    State(c): State<Arc<Console>>,
    Asker(who): Asker,
    Path(name): Path<String>,
    Query(params): Query<Params>,
) -> ApiResult<Json<Value>> {
    c.may_topic(
        &who,
        Operation::Describe,
        &name,
        "its objects need DESCRIBE on it",
    )?;
    let partition = params.partition.unwrap_or(0);
    let topic = c.ctx.meta.describe_topic(&name).await.map_err(|e| {
        if matches!(e, floe_metadata::error::MetaError::UnknownTopic(_)) {
            ApiError::new(Kind::NotFound, format!("topic {name}: not found"))
        } else {
            ApiError::new(
                Kind::Unavailable,
                format!("the metadata service did not describe {name}: {e}"),
            )
        }
    })?;
    let Some(key) = topic.partition_key(partition) else {
        return Err(ApiError::new(
            Kind::NotFound,
            format!("topic {name} has no partition {partition}"),
        ));
    };
    let index = c.ctx.meta.partition_index(key, 0).await.map_err(|e| {
        ApiError::new(
            Kind::Unavailable,
            format!("the metadata service did not answer {name}'s index: {e}"),
        )
    })?;
    let rows = rows_of(&index.entries);
    let total = rows.len();
    let (offset, limit) = params.bounds(total)?;
    let shown: Vec<Value> = rows
        .iter()
        .skip(offset)
        .take(limit)
        .map(|r| {
            json!({
                "kind": r.kind.name(),
                "endpoint": r.endpoint,
                "key": r.key,
                "first_offset": r.first_offset,
                "last_offset": r.last_offset,
                "bytes": r.bytes,
                "object_bytes": r.object_bytes,
            })
        })
        .collect();
    let count = |k: ObjectKind| rows.iter().filter(|r| r.kind == k).count();
    Ok(Json(json!({
        "topic": name,
        "partition": partition,
        "partitions": topic.partition_count,
        "log_start_offset": index.info.log_start_offset,
        "high_watermark": index.info.high_watermark,
        "total": total,
        "wal_objects": count(ObjectKind::Wal),
        "segments": count(ObjectKind::Segment),
        "offset": offset,
        "limit": limit,
        "objects": shown,
    })))
}

#[cfg(test)]
mod tests {
    use super::*;
    use floe_metadata::ids::ObjectId;
    use floe_storage::{EndpointId, ObjectKey, ObjectRef};

    fn entry(id: u64, key: &str, first: i64, last: i64, len: u64) -> IndexEntry {
        IndexEntry {
            first_offset: first,
            last_offset: last,
            max_timestamp: 0,
            object_id: ObjectId(id),
            object: ObjectRef {
                endpoint: EndpointId::new("local"),
                key: ObjectKey::new(key),
                size: 4096,
            },
            byte_start: 0,
            byte_len: len,
        }
    }

    #[test]
    fn runs_of_one_object_are_one_row_with_their_kind() {
        let rows = rows_of(&[
            entry(1, "segments/t/0/00000000000000000000.a.log", 0, 99, 1000),
            entry(1, "segments/t/0/00000000000000000000.a.log", 100, 149, 500),
            entry(2, "wal/1/x.wal", 150, 159, 80),
            entry(3, "wal/1/y.wal", 160, 169, 90),
        ]);
        assert_eq!(rows.len(), 3);
        assert_eq!(rows[0].kind, ObjectKind::Segment);
        assert_eq!((rows[0].first_offset, rows[0].last_offset), (0, 149));
        assert_eq!(rows[0].bytes, 1500);
        assert_eq!(rows[1].kind, ObjectKind::Wal);
        assert_eq!(rows[2].key, "wal/1/y.wal");
        assert_eq!(ObjectKind::of_key("elsewhere/k"), ObjectKind::Other);
    }

    #[test]
    fn a_page_is_the_last_objects_unless_an_offset_is_asked() {
        let last = Params::default();
        assert_eq!(last.bounds(250).expect("bounds"), (150, DEFAULT_OBJECTS));
        assert_eq!(last.bounds(7).expect("bounds"), (0, DEFAULT_OBJECTS));
        let from = Params {
            offset: Some(300),
            limit: Some(10),
            ..Params::default()
        };
        assert_eq!(from.bounds(250).expect("bounds"), (250, 10));
        let too_many = Params {
            limit: Some(MAX_OBJECTS + 1),
            ..Params::default()
        };
        assert_eq!(too_many.bounds(1).unwrap_err().kind, Kind::Invalid);
    }
}
