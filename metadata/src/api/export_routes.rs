//! The indexer's export progress over the API: read a topic's export state,
//! begin, commit and forget files, reset for a backfill.

use super::server::AppState;
use super::{convert, proto};
use crate::command::{Command, Response};
use crate::error::MetaError;
use crate::export::{ExportFile, ExportState};
use crate::ids::PartitionKey;

pub(crate) fn file_msg(f: &ExportFile) -> proto::ExportFile {
    proto::ExportFile {
        endpoint: f.endpoint.clone(),
        key: f.key.clone(),
        first_offset: f.first_offset,
        last_offset: f.last_offset,
        rows: f.rows,
        size: f.size,
        min_timestamp: f.min_timestamp,
        max_timestamp: f.max_timestamp,
    }
}

pub(crate) fn file_from(f: proto::ExportFile) -> ExportFile {
    ExportFile {
        endpoint: f.endpoint,
        key: f.key,
        first_offset: f.first_offset,
        last_offset: f.last_offset,
        rows: f.rows,
        size: f.size,
        min_timestamp: f.min_timestamp,
        max_timestamp: f.max_timestamp,
    }
}

fn partition_export(
    index: u32,
    e: &ExportState,
    log_start: i64,
    hw: i64,
) -> proto::PartitionExport {
    proto::PartitionExport {
        partition: index,
        generation: e.generation,
        next_offset: e.next_offset,
        pending: e.pending.as_ref().map(file_msg),
        files: e.files.iter().map(file_msg).collect(),
        log_start_offset: log_start,
        high_watermark: hw,
    }
}

pub(super) async fn state(
    s: AppState,
    req: proto::ExportStateRequest,
) -> Result<proto::ExportStateResponse, MetaError> {
    s.linearizable().await?;
    let resp = s.shared.read(|st| {
        let t = st.topics.by_name.get(&req.topic)?;
        Some(proto::ExportStateResponse {
            topic_id: t.id.to_string(),
            partitions: (0..t.partitions)
                .filter_map(|i| {
                    let p = st.topics.partitions.get(&PartitionKey {
                        topic: t.id,
                        partition: i,
                    })?;
                    Some(partition_export(
                        i,
                        &p.export,
                        p.log_start_offset,
                        p.high_watermark,
                    ))
                })
                .collect(),
        })
    });
    match resp {
        Some(r) => Ok(r),
        None => Err(MetaError::UnknownTopic(req.topic)),
    }
}

pub(super) async fn begin(
    s: AppState,
    req: proto::ExportBeginRequest,
) -> Result<proto::Empty, MetaError> {
    let partition = convert::partition(req.partition.as_ref())?;
    let Some(file) = req.file else {
        return Err(MetaError::InvalidRequest(
            "export begin without a file".into(),
        ));
    };
    s.write(Command::ExportBegin {
        partition,
        generation: req.generation,
        file: file_from(file),
    })
    .await?;
    Ok(proto::Empty {})
}

pub(super) async fn commit(
    s: AppState,
    req: proto::ExportCommitRequest,
) -> Result<proto::Empty, MetaError> {
    let partition = convert::partition(req.partition.as_ref())?;
    let Some(file) = req.file else {
        return Err(MetaError::InvalidRequest(
            "export commit without a file".into(),
        ));
    };
    s.write(Command::ExportCommit {
        partition,
        generation: req.generation,
        file: file_from(file),
    })
    .await?;
    Ok(proto::Empty {})
}

pub(super) async fn forget(
    s: AppState,
    req: proto::ExportForgetRequest,
) -> Result<proto::Empty, MetaError> {
    let partition = convert::partition(req.partition.as_ref())?;
    s.write(Command::ExportForget {
        partition,
        generation: req.generation,
        keys: req.keys,
    })
    .await?;
    Ok(proto::Empty {})
}

pub(super) async fn reset(
    s: AppState,
    req: proto::ExportResetRequest,
) -> Result<proto::ExportResetResponse, MetaError> {
    match s.write(Command::ExportReset { topic: req.topic }).await? {
        (Response::ExportGeneration { generation }, _) => {
            Ok(proto::ExportResetResponse { generation })
        }
        (other, _) => Err(MetaError::Storage(format!("unexpected response {other:?}"))),
    }
}

/// The domain's form of a topic's export state as the API answers it.
pub(crate) fn topic_exports_from(
    m: proto::ExportStateResponse,
) -> Result<crate::export::TopicExports, MetaError> {
    Ok(crate::export::TopicExports {
        topic_id: convert::topic_id(&m.topic_id)?,
        partitions: m
            .partitions
            .into_iter()
            .map(|p| crate::export::PartitionExports {
                partition: p.partition,
                generation: p.generation,
                next_offset: p.next_offset,
                pending: p.pending.map(file_from),
                files: p.files.into_iter().map(file_from).collect(),
                log_start_offset: p.log_start_offset,
                high_watermark: p.high_watermark,
            })
            .collect(),
    })
}
