//! A topic's Iceberg table over the API: read its pointer and column ids,
//! give new columns ids, move the pointer (`crate::table`).

use super::proto;
use super::server::AppState;
use crate::command::{Command, Response};
use crate::error::MetaError;

pub(super) async fn state(
    s: AppState,
    req: proto::TopicName,
) -> Result<proto::TableStateResponse, MetaError> {
    s.linearizable().await?;
    s.shared
        .read(|st| {
            let t = st.topics.by_name.get(&req.name)?;
            let empty = crate::table::TableState::default();
            let table = st.topics.tables.get(&t.id).unwrap_or(&empty);
            Some(proto::TableStateResponse {
                topic_id: t.id.to_string(),
                metadata_location: table.metadata_location.clone().unwrap_or_default(),
                version: table.version,
                columns: table
                    .columns
                    .iter()
                    .map(|c| proto::TableColumn {
                        name: c.name.clone(),
                        kind: c.kind.clone(),
                        id: c.id,
                    })
                    .collect(),
                compacting: table.compacting.as_ref().map(compaction_msg),
            })
        })
        .ok_or(MetaError::UnknownTopic(req.name))
}

pub fn compaction_msg(c: &crate::table::Compaction) -> proto::TableCompaction {
    proto::TableCompaction {
        partition: c.partition,
        generation: c.generation,
        file: Some(super::export_routes::file_msg(&c.file)),
        replaced: c.replaced.clone(),
    }
}

pub fn compaction_from(c: proto::TableCompaction) -> Result<crate::table::Compaction, MetaError> {
    let file = c
        .file
        .ok_or_else(|| MetaError::InvalidRequest("a compaction needs its file".into()))?;
    Ok(crate::table::Compaction {
        partition: c.partition,
        generation: c.generation,
        file: super::export_routes::file_from(file),
        replaced: c.replaced,
    })
}

pub(super) async fn compact_begin(
    s: AppState,
    req: proto::TableCompactBeginRequest,
) -> Result<proto::Empty, MetaError> {
    let compaction = compaction_from(
        req.compaction
            .ok_or_else(|| MetaError::InvalidRequest("a compaction is needed".into()))?,
    )?;
    match s
        .write(Command::TableCompactBegin {
            topic: req.topic,
            compaction,
        })
        .await?
    {
        (Response::Ok, _) => Ok(proto::Empty {}),
        (other, _) => Err(MetaError::Storage(format!("unexpected response {other:?}"))),
    }
}

pub(super) async fn compact_commit(
    s: AppState,
    req: proto::TableCompactCommitRequest,
) -> Result<proto::Empty, MetaError> {
    let file = req
        .file
        .ok_or_else(|| MetaError::InvalidRequest("a compacted file is needed".into()))?;
    match s
        .write(Command::TableCompactCommit {
            topic: req.topic,
            partition: req.partition,
            generation: req.generation,
            file: super::export_routes::file_from(file),
        })
        .await?
    {
        (Response::Ok, _) => Ok(proto::Empty {}),
        (other, _) => Err(MetaError::Storage(format!("unexpected response {other:?}"))),
    }
}

pub(super) async fn columns(
    s: AppState,
    req: proto::TableColumnsRequest,
) -> Result<proto::TableColumnsResponse, MetaError> {
    let columns = req.columns.into_iter().map(|c| (c.name, c.kind)).collect();
    match s
        .write(Command::TableColumns {
            topic: req.topic,
            columns,
        })
        .await?
    {
        (Response::TableColumnIds { ids }, _) => Ok(proto::TableColumnsResponse { ids }),
        (other, _) => Err(MetaError::Storage(format!("unexpected response {other:?}"))),
    }
}

pub(super) async fn commit(
    s: AppState,
    req: proto::TableCommitRequest,
) -> Result<proto::TableCommitResponse, MetaError> {
    if req.location.is_empty() {
        return Err(MetaError::InvalidRequest(
            "a table commit needs a metadata location".into(),
        ));
    }
    let expected = (!req.expected.is_empty()).then_some(req.expected);
    match s
        .write(Command::TableCommit {
            topic: req.topic,
            expected,
            location: req.location,
        })
        .await?
    {
        (Response::TableVersion { version }, _) => Ok(proto::TableCommitResponse { version }),
        (other, _) => Err(MetaError::Storage(format!("unexpected response {other:?}"))),
    }
}
