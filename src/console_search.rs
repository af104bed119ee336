//! The console's search by key: the small [`floe_console::search::Search`]
//! seam implemented with `floe_indexer::query::run` over this process's
//! indexer ([`IndexerSearch`], `floe standalone`), or over the query API of
//! the cluster's indexer ([`RemoteSearch`], a proxy with
//! `--console-indexer`), so that the console crate does not depend on the
//! indexer. The console checks the person's READ on the topic first; the
//! remote call is then made as a cluster member (signed with the cluster
//! secret, or over internal mTLS), as a broker's calls are.

use floe_console::search::{
    BackfillFuture, Search, SearchAnswer, SearchError, SearchErrorKind, SearchFuture, SearchHit,
    SearchQuery, TableFuture,
};
use floe_indexer::lookup::Query;
use floe_indexer::{ErrorKind, Indexer};

/// Lookups by key and time through an indexer in this process.
pub struct IndexerSearch(pub Indexer);

fn error_of(e: floe_indexer::IndexerError) -> SearchError {
    let kind = match e.kind {
        ErrorKind::UnknownTopic => SearchErrorKind::NotFound,
        ErrorKind::InvalidRequest => SearchErrorKind::Invalid,
        ErrorKind::Conflict | ErrorKind::Corrupt | ErrorKind::Unavailable => {
            SearchErrorKind::Unavailable
        }
    };
    SearchError {
        kind,
        message: e.message,
    }
}

impl Search for IndexerSearch {
    fn table<'a>(&'a self, topic: &'a str) -> TableFuture<'a> {
        Box::pin(async move { self.0.load_table(topic).await.map_err(error_of) })
    }

    fn backfill<'a>(&'a self, topic: &'a str) -> BackfillFuture<'a> {
        Box::pin(async move { self.0.backfill(topic).await.map_err(error_of) })
    }

    fn search<'a>(&'a self, topic: &'a str, query: &'a SearchQuery) -> SearchFuture<'a> {
        Box::pin(async move {
            let q = Query {
                key: query.key.clone(),
                from_ms: query.from_ms,
                to_ms: query.to_ms,
                limit: query.limit,
            };
            let answer = floe_indexer::query::run(&self.0, topic, &q)
                .await
                .map_err(error_of)?;
            Ok(SearchAnswer {
                hits: answer
                    .records
                    .into_iter()
                    .map(|r| SearchHit {
                        partition: r.partition,
                        offset: r.offset,
                        timestamp: r.timestamp,
                        key: r.key,
                        value: r.value,
                        headers: r.headers,
                    })
                    .collect(),
                stats: serde_json::to_value(&answer.stats).unwrap_or_default(),
            })
        })
    }
}

/// Lookups by key and time through the query API of the cluster's indexer
/// (`GET /v1/topics/{topic}/records`).
pub struct RemoteSearch {
    http: floe_metadata::http::HttpClient,
    /// The indexer's admin port, `HOST:PORT`.
    addr: String,
}

/// How long a remote lookup may take (a lookup may read Parquet files and
/// the log's tail).
const REMOTE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

impl RemoteSearch {
    /// A search through the indexer at `url` (`http://HOST:PORT`, or
    /// `https://` on a cluster with internal TLS).
    pub fn new(url: &str) -> anyhow::Result<Self> {
        let rest = url
            .strip_prefix("http://")
            .or_else(|| url.strip_prefix("https://"))
            .unwrap_or(url)
            .trim_end_matches('/');
        anyhow::ensure!(
            !rest.is_empty() && !rest.contains('/') && rest.contains(':'),
            "--console-indexer wants http://HOST:PORT (the indexer's admin port), not {url:?}"
        );
        Ok(Self {
            http: floe_metadata::http::HttpClient::default(),
            addr: rest.to_string(),
        })
    }
}

/// A query string's value, percent-encoded.
fn encode(v: &str) -> String {
    url::form_urlencoded::byte_serialize(v.as_bytes()).collect()
}

/// Bytes the query API wrote as `name` (UTF-8 text) or `name_base64`.
fn bytes_of(o: &serde_json::Value, name: &str) -> Option<bytes::Bytes> {
    use base64::Engine as _;
    if let Some(s) = o[name].as_str() {
        return Some(bytes::Bytes::from(s.as_bytes().to_vec()));
    }
    o[format!("{name}_base64")]
        .as_str()
        .and_then(|b| base64::engine::general_purpose::STANDARD.decode(b).ok())
        .map(bytes::Bytes::from)
}

/// A record as the query API answers it.
fn hit_of(r: &serde_json::Value) -> Option<SearchHit> {
    Some(SearchHit {
        partition: u32::try_from(r["partition"].as_u64()?).ok()?,
        offset: r["offset"].as_i64()?,
        timestamp: r["timestamp"].as_i64()?,
        key: bytes_of(r, "key"),
        value: bytes_of(r, "value"),
        headers: r["headers"]
            .as_array()
            .map(|hs| {
                hs.iter()
                    .filter_map(|h| Some((h["key"].as_str()?.to_string(), bytes_of(h, "value"))))
                    .collect()
            })
            .unwrap_or_default(),
    })
}

fn remote_error(e: floe_metadata::http::HttpError) -> SearchError {
    use floe_metadata::http::HttpError;
    match e {
        HttpError::Status { status, body, .. } => {
            let message = serde_json::from_slice::<serde_json::Value>(&body)
                .ok()
                .and_then(|v| v["error"].as_str().map(str::to_string))
                .unwrap_or_else(|| format!("the indexer answered {status}"));
            let kind = match status {
                404 => SearchErrorKind::NotFound,
                400 => SearchErrorKind::Invalid,
                _ => SearchErrorKind::Unavailable,
            };
            SearchError { kind, message }
        }
        other => SearchError {
            kind: SearchErrorKind::Unavailable,
            message: format!("the indexer: {other}"),
        },
    }
}

impl Search for RemoteSearch {
    fn table<'a>(&'a self, topic: &'a str) -> TableFuture<'a> {
        Box::pin(async move {
            let path = format!(
                "/iceberg/v1/namespaces/{}/tables/{}",
                floe_indexer::table::catalog::NAMESPACE,
                encode(topic)
            );
            let body = match self.http.get(&self.addr, &path, REMOTE_TIMEOUT).await {
                Ok(b) => b,
                // No table, or none yet: the catalog's 404.
                Err(floe_metadata::http::HttpError::Status { status: 404, .. }) => return Ok(None),
                Err(e) => return Err(remote_error(e)),
            };
            serde_json::from_slice(&body)
                .map(Some)
                .map_err(|e| SearchError {
                    kind: SearchErrorKind::Unavailable,
                    message: format!("the indexer's catalog answer is not JSON: {e}"),
                })
        })
    }

    fn backfill<'a>(&'a self, topic: &'a str) -> BackfillFuture<'a> {
        Box::pin(async move {
            let path = format!("/v1/topics/{}/backfill", encode(topic));
            let body = self
                .http
                .post(
                    &self.addr,
                    &path,
                    "application/json",
                    bytes::Bytes::new(),
                    REMOTE_TIMEOUT,
                )
                .await
                .map_err(remote_error)?;
            serde_json::from_slice::<serde_json::Value>(&body)
                .ok()
                .and_then(|v| v["generation"].as_u64())
                .ok_or_else(|| SearchError {
                    kind: SearchErrorKind::Unavailable,
                    message: "the indexer's answer to a backfill names no generation".into(),
                })
        })
    }

    fn search<'a>(&'a self, topic: &'a str, query: &'a SearchQuery) -> SearchFuture<'a> {
        Box::pin(async move {
            let mut params = vec![format!("limit={}", query.limit)];
            if let Some(k) = &query.key {
                let Ok(k) = std::str::from_utf8(k) else {
                    return Err(SearchError {
                        kind: SearchErrorKind::Invalid,
                        message: "the cluster's indexer is asked for keys in UTF-8 only".into(),
                    });
                };
                params.push(format!("key={}", encode(k)));
            }
            if let Some(f) = query.from_ms {
                params.push(format!("from={f}"));
            }
            if let Some(t) = query.to_ms {
                params.push(format!("to={t}"));
            }
            let path = format!("/v1/topics/{}/records?{}", encode(topic), params.join("&"));
            let body = self
                .http
                .get(&self.addr, &path, REMOTE_TIMEOUT)
                .await
                .map_err(remote_error)?;
            let answer: serde_json::Value =
                serde_json::from_slice(&body).map_err(|e| SearchError {
                    kind: SearchErrorKind::Unavailable,
                    message: format!("the indexer's answer is not JSON: {e}"),
                })?;
            let hits = answer["records"]
                .as_array()
                .map(|rs| rs.iter().filter_map(hit_of).collect())
                .unwrap_or_default();
            Ok(SearchAnswer {
                hits,
                stats: answer["stats"].clone(),
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_remote_indexer_is_a_host_and_port() {
        assert!(RemoteSearch::new("http://indexer:9644").is_ok());
        assert!(RemoteSearch::new("https://10.0.0.5:9644/").is_ok());
        assert!(RemoteSearch::new("http://indexer:9644/v1").is_err());
        assert!(RemoteSearch::new("indexer").is_err());
    }

    #[test]
    fn a_record_of_the_query_api_is_read_back_text_or_base64() {
        let r = serde_json::json!({
            "partition": 2, "offset": 7, "timestamp": 99,
            "key": "k", "value": null, "value_base64": "/wA=",
            "headers": [{"key": "h", "value": "v"}, {"key": "n", "value": null}],
        });
        let hit = hit_of(&r).expect("a record");
        assert_eq!((hit.partition, hit.offset, hit.timestamp), (2, 7, 99));
        assert_eq!(hit.key.as_deref(), Some(&b"k"[..]));
        assert_eq!(hit.value.as_deref(), Some(&[0xff, 0x00][..]));
        assert_eq!(
            hit.headers,
            vec![
                ("h".to_string(), Some(bytes::Bytes::from_static(b"v"))),
                ("n".to_string(), None)
            ]
        );
    }
}
