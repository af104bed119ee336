//! A client of the metadata API that finds and follows the leader.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use prost::Message;

use crate::api::{PROTOBUF, proto};
use crate::error::{ErrorKind, MetaError};
use crate::http::{HttpClient, HttpError};

/// Talks to a metadata cluster given some of its node addresses.
#[derive(Debug)]
pub struct MetaClient {
    addrs: Vec<String>,
    leader: Mutex<Option<String>>,
    http: HttpClient,
    /// How long one call may keep trying (leader changes, unreachable nodes).
    pub deadline: Duration,
    /// Per-request timeout.
    pub request_timeout: Duration,
}

fn error_from(e: HttpError) -> MetaError {
    match e {
        HttpError::Status { status, body, .. } => match proto::ErrorBody::decode(body.as_ref()) {
            Ok(b) => match b.kind.as_str() {
                "NotLeader" => MetaError::NotLeader {
                    leader: Some(b.leader_addr).filter(|a| !a.is_empty()),
                },
                "TopicExists" => MetaError::TopicExists(b.message),
                "UnknownTopic" => MetaError::UnknownTopic(b.message),
                "InvalidConfig" => MetaError::InvalidConfig(b.message),
                "Unavailable" => MetaError::Unavailable(b.message),
                "StaleEpoch" | "NotOwner" | "OffsetMismatch" | "UnknownPartition"
                | "UnknownBroker" | "ExportConflict" => MetaError::Remote {
                    kind: ErrorKind::from_name(&b.kind).unwrap_or(ErrorKind::InvalidRequest),
                    message: b.message,
                },
                _ if status == 409 || status == 404 || status == 400 => {
                    MetaError::InvalidRequest(format!("{}: {}", b.kind, b.message))
                }
                _ => MetaError::Unavailable(format!("{}: {}", b.kind, b.message)),
            },
            Err(_) => MetaError::Unavailable(format!("status {status}")),
        },
        other => MetaError::Unavailable(other.to_string()),
    }
}

impl MetaClient {
    pub fn new(addrs: Vec<String>) -> Result<Self, MetaError> {
        if addrs.is_empty() {
            return Err(MetaError::InvalidRequest(
                "no metadata address given".into(),
            ));
        }
        Ok(Self {
            addrs,
            leader: Mutex::new(None),
            http: HttpClient::default(),
            deadline: Duration::from_secs(15),
            request_timeout: Duration::from_secs(5),
        })
    }

    fn leader(&self) -> Option<String> {
        self.leader
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    fn set_leader(&self, addr: Option<String>) {
        *self.leader.lock().unwrap_or_else(|p| p.into_inner()) = addr;
    }

    /// Calls `path` on one node only (for `status` of a given node).
    pub async fn call_node<Req: Message, Resp: Message + Default>(
        &self,
        addr: &str,
        path: &str,
        req: &Req,
    ) -> Result<Resp, MetaError> {
        let body = self
            .http
            .post(
                addr,
                path,
                PROTOBUF,
                req.encode_to_vec().into(),
                self.request_timeout,
            )
            .await
            .map_err(error_from)?;
        Resp::decode(body.as_ref()).map_err(|e| MetaError::Unavailable(format!("bad reply: {e}")))
    }

    /// Calls `path` on the leader, following redirects and trying other nodes
    /// while the cluster elects one, until `deadline`.
    pub async fn call<Req: Message, Resp: Message + Default>(
        &self,
        path: &str,
        req: &Req,
    ) -> Result<Resp, MetaError> {
        let started = Instant::now();
        let mut next = 0usize;
        let mut pause = Duration::from_millis(20);
        loop {
            let addr = self.leader().unwrap_or_else(|| {
                let a = self.addrs[next % self.addrs.len()].clone();
                next += 1;
                a
            });
            match self.call_node(&addr, path, req).await {
                Ok(r) => {
                    self.set_leader(Some(addr));
                    return Ok(r);
                }
                Err(MetaError::NotLeader { leader }) => {
                    self.set_leader(leader.filter(|l| *l != addr));
                }
                Err(MetaError::Unavailable(why)) => {
                    self.set_leader(None);
                    if started.elapsed() >= self.deadline {
                        return Err(MetaError::Unavailable(why));
                    }
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_millis(500));
                }
                Err(other) => return Err(other),
            }
            if started.elapsed() >= self.deadline {
                return Err(MetaError::Unavailable(
                    "no leader found before the deadline".into(),
                ));
            }
        }
    }
}

/// Typed calls for the routes Floe's own processes and tools use most.
impl MetaClient {
    pub async fn status_of(&self, addr: &str) -> Result<proto::StatusResponse, MetaError> {
        self.call_node(addr, "/v1/status", &proto::Empty {}).await
    }

    pub async fn create_topic(
        &self,
        name: &str,
        partitions: u32,
        configs: std::collections::HashMap<String, String>,
    ) -> Result<String, MetaError> {
        let r: proto::CreateTopicResponse = self
            .call(
                "/v1/topics/create",
                &proto::CreateTopicRequest {
                    name: name.to_string(),
                    partitions,
                    configs,
                },
            )
            .await?;
        Ok(r.topic_id)
    }

    pub async fn describe_topic(&self, name: &str) -> Result<proto::TopicInfo, MetaError> {
        self.call(
            "/v1/topics/describe",
            &proto::TopicName {
                name: name.to_string(),
            },
        )
        .await
    }

    pub async fn register(
        &self,
        id: u32,
        kind: &str,
        addr: &str,
        lease_ms: u64,
    ) -> Result<(), MetaError> {
        let _: proto::Empty = self
            .call(
                "/v1/nodes/register",
                &proto::RegisterRequest {
                    id,
                    kind: kind.to_string(),
                    addr: addr.to_string(),
                    lease_ms,
                },
            )
            .await?;
        Ok(())
    }

    pub async fn commit(
        &self,
        req: &proto::CommitRequest,
    ) -> Result<proto::CommitResponse, MetaError> {
        self.call("/v1/commit", req).await
    }

    /// The committed index of one partition, from `from_offset` on.
    pub async fn partition_index(
        &self,
        topic_id: &str,
        partition: u32,
        from_offset: i64,
    ) -> Result<proto::IndexResponse, MetaError> {
        self.call(
            "/v1/partitions/index",
            &proto::IndexRequest {
                partition: Some(proto::Partition {
                    topic_id: topic_id.to_string(),
                    partition,
                }),
                from_offset,
            },
        )
        .await
    }
}

/// The indexer's export progress (see `crate::export`).
impl MetaClient {
    pub async fn export_state(&self, topic: &str) -> Result<proto::ExportStateResponse, MetaError> {
        self.call(
            "/v1/exports/state",
            &proto::ExportStateRequest {
                topic: topic.to_string(),
            },
        )
        .await
    }

    pub async fn export_begin(
        &self,
        partition: proto::Partition,
        generation: u64,
        file: proto::ExportFile,
    ) -> Result<(), MetaError> {
        let _: proto::Empty = self
            .call(
                "/v1/exports/begin",
                &proto::ExportBeginRequest {
                    partition: Some(partition),
                    generation,
                    file: Some(file),
                },
            )
            .await?;
        Ok(())
    }

    pub async fn export_commit(
        &self,
        partition: proto::Partition,
        generation: u64,
        file: proto::ExportFile,
    ) -> Result<(), MetaError> {
        let _: proto::Empty = self
            .call(
                "/v1/exports/commit",
                &proto::ExportCommitRequest {
                    partition: Some(partition),
                    generation,
                    file: Some(file),
                },
            )
            .await?;
        Ok(())
    }

    pub async fn export_forget(
        &self,
        partition: proto::Partition,
        generation: u64,
        keys: Vec<String>,
    ) -> Result<(), MetaError> {
        let _: proto::Empty = self
            .call(
                "/v1/exports/forget",
                &proto::ExportForgetRequest {
                    partition: Some(partition),
                    generation,
                    keys,
                },
            )
            .await?;
        Ok(())
    }

    /// Starts a topic's exports over; returns the new generation.
    pub async fn export_reset(&self, topic: &str) -> Result<u64, MetaError> {
        let r: proto::ExportResetResponse = self
            .call(
                "/v1/exports/reset",
                &proto::ExportResetRequest {
                    topic: topic.to_string(),
                },
            )
            .await?;
        Ok(r.generation)
    }
}
