//! A small HTTP/1.1 client (hyper) shared by the Raft network and the API
//! client: over TLS with the process's certificate when internal TLS is on
//! ([`crate::cluster_tls`]), signed when a cluster secret is set
//! ([`crate::cluster_auth`]).

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

/// Largest response body read.
pub const MAX_BODY: usize = 256 * 1024 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    #[error("cannot reach {addr}: {message}")]
    Unreachable { addr: String, message: String },
    #[error("{addr} did not answer within {timeout:?}")]
    Timeout { addr: String, timeout: Duration },
    #[error("{addr} answered with status {status}")]
    Status {
        addr: String,
        status: u16,
        body: Bytes,
    },
    #[error("bad request to {addr}: {message}")]
    Request { addr: String, message: String },
}

/// A pooled HTTP client.
#[derive(Debug, Clone)]
pub struct HttpClient {
    client: Client<HttpsConnector<HttpConnector>, Full<Bytes>>,
}

impl Default for HttpClient {
    fn default() -> Self {
        Self {
            client: Client::builder(TokioExecutor::new())
                .pool_idle_timeout(Duration::from_secs(30))
                .build(crate::cluster_tls::connector(Duration::from_secs(2), false)),
        }
    }
}

impl HttpClient {
    /// POSTs `body` to `http://{addr}{path}` and returns the response body of a 2xx answer.
    pub async fn post(
        &self,
        addr: &str,
        path: &str,
        content_type: &str,
        body: Bytes,
        timeout: Duration,
    ) -> Result<Bytes, HttpError> {
        let mut req =
            hyper::Request::post(format!("{}://{addr}{path}", crate::cluster_tls::scheme()))
                .header(hyper::header::CONTENT_TYPE, content_type);
        if let Some(s) = crate::cluster_auth::current() {
            req = req.header(
                crate::cluster_auth::HEADER,
                s.sign("POST", path, &body, std::time::SystemTime::now()),
            );
        }
        let req = req.body(Full::new(body)).map_err(|e| HttpError::Request {
            addr: addr.to_string(),
            message: e.to_string(),
        })?;
        self.send(addr, req, timeout).await
    }

    /// GETs `http://{addr}{path}` and returns the response body of a 2xx answer.
    pub async fn get(&self, addr: &str, path: &str, timeout: Duration) -> Result<Bytes, HttpError> {
        let mut req =
            hyper::Request::get(format!("{}://{addr}{path}", crate::cluster_tls::scheme()));
        if let Some(s) = crate::cluster_auth::current() {
            req = req.header(
                crate::cluster_auth::HEADER,
                s.sign("GET", path, b"", std::time::SystemTime::now()),
            );
        }
        let req = req
            .body(Full::new(Bytes::new()))
            .map_err(|e| HttpError::Request {
                addr: addr.to_string(),
                message: e.to_string(),
            })?;
        self.send(addr, req, timeout).await
    }

    async fn send(
        &self,
        addr: &str,
        req: hyper::Request<Full<Bytes>>,
        timeout: Duration,
    ) -> Result<Bytes, HttpError> {
        let call = async {
            let resp = self
                .client
                .request(req)
                .await
                .map_err(|e| HttpError::Unreachable {
                    addr: addr.to_string(),
                    message: format!("{e:?}"),
                })?;
            let status = resp.status();
            let body = http_body_util::Limited::new(resp.into_body(), MAX_BODY)
                .collect()
                .await
                .map_err(|e| HttpError::Unreachable {
                    addr: addr.to_string(),
                    message: e.to_string(),
                })?
                .to_bytes();
            if status.is_success() {
                Ok(body)
            } else {
                Err(HttpError::Status {
                    addr: addr.to_string(),
                    status: status.as_u16(),
                    body,
                })
            }
        };
        tokio::time::timeout(timeout, call)
            .await
            .map_err(|_| HttpError::Timeout {
                addr: addr.to_string(),
                timeout,
            })?
    }
}
