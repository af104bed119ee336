//! A client of the metadata API that finds and follows the leader.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use prost::Message;

use crate::api::meta_api::{MetaApi, Reply, RouteCall};
use crate::api::routes::{self, Route};
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
                | "UnknownBroker" | "ExportConflict" | "StaleCoordinator" | "TooLarge"
                | "Incompatible" => MetaError::Remote {
                    kind: ErrorKind::from_name(&b.kind).unwrap_or(ErrorKind::InvalidRequest),
                    message: b.message,
                },
                _ if status == 409 || status == 404 || status == 400 => {
                    MetaError::InvalidRequest(format!("{}: {}", b.kind, b.message))
                }
                _ => MetaError::Unavailable(format!("{}: {}", b.kind, b.message)),
            },
            // The server's body limit answers 413 before any handler runs.
            Err(_) if status == 413 => MetaError::Remote {
                kind: ErrorKind::TooLarge,
                message: "request body above the metadata service's limit".into(),
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

    /// Posts an encoded request to `path` on one node only.
    async fn post_node(
        &self,
        addr: &str,
        path: &str,
        body: Vec<u8>,
    ) -> Result<bytes::Bytes, MetaError> {
        self.http
            .post(addr, path, PROTOBUF, body.into(), self.request_timeout)
            .await
            .map_err(error_from)
    }

    /// Calls route `R` on one node only (for the `status` of a given node).
    pub async fn call_node<R: Route>(
        &self,
        addr: &str,
        req: &R::Req,
    ) -> Result<R::Resp, MetaError> {
        let body = self.post_node(addr, R::PATH, req.encode_to_vec()).await?;
        R::Resp::decode(body.as_ref())
            .map_err(|e| MetaError::Unavailable(format!("bad reply: {e}")))
    }

    /// Posts `body` to `path` on the leader, following redirects and trying
    /// other nodes while the cluster elects one, until `deadline`.
    async fn post_leader(&self, path: &str, body: Vec<u8>) -> Result<bytes::Bytes, MetaError> {
        let started = Instant::now();
        let mut next = 0usize;
        let mut pause = Duration::from_millis(20);
        loop {
            let addr = self.leader().unwrap_or_else(|| {
                let a = self.addrs[next % self.addrs.len()].clone();
                next += 1;
                a
            });
            match self.post_node(&addr, path, body.clone()).await {
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

    /// Calls route `R` on the leader over HTTP: the wire-level form of
    /// [`MetaApi`], for tools and tests of the API itself.
    pub async fn call<R: Route>(&self, req: &R::Req) -> Result<R::Resp, MetaError> {
        let body = self.post_leader(R::PATH, req.encode_to_vec()).await?;
        R::Resp::decode(body.as_ref())
            .map_err(|e| MetaError::Unavailable(format!("bad reply: {e}")))
    }

    pub async fn status_of(&self, addr: &str) -> Result<proto::StatusResponse, MetaError> {
        self.call_node::<routes::Status>(addr, &proto::Empty {})
            .await
    }
}

#[async_trait::async_trait]
impl MetaApi for MetaClient {
    async fn call_route(&self, call: RouteCall) -> Result<Reply, MetaError> {
        let body = self.post_leader(call.path(), call.encode()).await?;
        call.decode_reply(&body)
    }
}
