//! The indexer's export progress over the API: read a topic's export state,
//! begin, commit and forget files, reset for a backfill.

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::routing::post;

use super::server::{ApiResult, AppState, decode, ok};
use super::{convert, proto};
use crate::command::{Command, Response};
use crate::error::MetaError;
use crate::export::{ExportFile, ExportState};
use crate::ids::PartitionRef;

pub(super) fn routes() -> Router<AppState> {
    Router::new()
        .route("/v1/exports/state", post(state))
        .route("/v1/exports/begin", post(begin))
        .route("/v1/exports/commit", post(commit))
        .route("/v1/exports/forget", post(forget))
        .route("/v1/exports/reset", post(reset))
}

fn file_msg(f: &ExportFile) -> proto::ExportFile {
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

fn file_from(f: proto::ExportFile) -> ExportFile {
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

async fn state(State(s): State<AppState>, body: Bytes) -> ApiResult {
    let req: proto::ExportStateRequest = decode(&body)?;
    s.linearizable().await?;
    let resp = s.shared.read(|st| {
        let t = st.topics.get(&req.topic)?;
        Some(proto::ExportStateResponse {
            topic_id: t.id.to_string(),
            partitions: (0..t.partitions)
                .filter_map(|i| {
                    let p = st.partitions.get(&PartitionRef {
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
        Some(r) => Ok(ok(r)),
        None => Err(MetaError::UnknownTopic(req.topic).into()),
    }
}

async fn begin(State(s): State<AppState>, body: Bytes) -> ApiResult {
    let req: proto::ExportBeginRequest = decode(&body)?;
    let partition = convert::partition(req.partition.as_ref())?;
    let Some(file) = req.file else {
        return Err(MetaError::InvalidRequest("export begin without a file".into()).into());
    };
    s.write(Command::ExportBegin {
        partition,
        generation: req.generation,
        file: file_from(file),
    })
    .await?;
    Ok(ok(proto::Empty {}))
}

async fn commit(State(s): State<AppState>, body: Bytes) -> ApiResult {
    let req: proto::ExportCommitRequest = decode(&body)?;
    let partition = convert::partition(req.partition.as_ref())?;
    let Some(file) = req.file else {
        return Err(MetaError::InvalidRequest("export commit without a file".into()).into());
    };
    s.write(Command::ExportCommit {
        partition,
        generation: req.generation,
        file: file_from(file),
    })
    .await?;
    Ok(ok(proto::Empty {}))
}

async fn forget(State(s): State<AppState>, body: Bytes) -> ApiResult {
    let req: proto::ExportForgetRequest = decode(&body)?;
    let partition = convert::partition(req.partition.as_ref())?;
    s.write(Command::ExportForget {
        partition,
        generation: req.generation,
        keys: req.keys,
    })
    .await?;
    Ok(ok(proto::Empty {}))
}

async fn reset(State(s): State<AppState>, body: Bytes) -> ApiResult {
    let req: proto::ExportResetRequest = decode(&body)?;
    match s.write(Command::ExportReset { topic: req.topic }).await? {
        (Response::ExportGeneration { generation }, _) => {
            Ok(ok(proto::ExportResetResponse { generation }))
        }
        (other, _) => Err(MetaError::Storage(format!("unexpected response {other:?}")).into()),
    }
}
