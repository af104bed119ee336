//! `/ui/api/topics/{name}/search?key=&from=&to=&limit=`: a topic's records
//! by key and time, looked up by this process's indexer (its exports and
//! the log not exported yet). READ on the topic needed, as a consumer
//! does; a process without an indexer (a proxy of a cluster) says where to
//! ask instead.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, Query, State};
use base64::Engine as _;
use bytes::Bytes;
use floe_metadata::acl::Operation;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::Console;
use crate::caller::Asker;
use crate::error::{ApiError, ApiResult, Kind};
use crate::search::{SearchErrorKind, SearchHit, SearchQuery};

/// The most records one search answers.
pub const MAX_HITS: usize = 500;
/// A search's records when no limit is asked.
pub const DEFAULT_HITS: usize = 100;

/// What a process without an indexer answers.
pub const NO_INDEXER: &str = "this console reaches no indexer, so it cannot search by key here \
     (a proxy of a cluster searches with --console-indexer http://HOST:PORT): ask the indexer \
     with `floe query --indexer URL TOPIC --key KEY`";

/// The search's parameters as the page sends them.
#[derive(Debug, Default, Deserialize)]
pub struct Params {
    /// The key as text.
    pub key: Option<String>,
    /// The key as base64, for a key that is not UTF-8.
    pub key_base64: Option<String>,
    /// Records at or after this time (ms since the Unix epoch).
    pub from: Option<i64>,
    /// Records before this time (ms since the Unix epoch).
    pub to: Option<i64>,
    pub limit: Option<usize>,
}

impl Params {
    /// The lookup these parameters ask for, or why they are refused.
    pub fn query(&self) -> ApiResult<SearchQuery> {
        let key = match (&self.key, &self.key_base64) {
            (Some(_), Some(_)) => {
                return Err(ApiError::new(
                    Kind::Invalid,
                    "give key or key_base64, not both",
                ));
            }
            (Some(k), None) => Some(Bytes::from(k.clone().into_bytes())),
            (None, Some(b)) => Some(Bytes::from(
                base64::engine::general_purpose::STANDARD
                    .decode(b.trim())
                    .map_err(|_| ApiError::new(Kind::Invalid, "key_base64: not base64"))?,
            )),
            (None, None) => None,
        };
        if key.is_none() && self.from.is_none() && self.to.is_none() {
            return Err(ApiError::new(
                Kind::Invalid,
                "give a key, or a time range (from, to)",
            ));
        }
        if let (Some(from), Some(to)) = (self.from, self.to)
            && from >= to
        {
            return Err(ApiError::new(Kind::Invalid, "from must be before to"));
        }
        let limit = self.limit.unwrap_or(DEFAULT_HITS);
        if limit == 0 || limit > MAX_HITS {
            return Err(ApiError::new(
                Kind::Invalid,
                format!("limit={limit}: between 1 and {MAX_HITS}"),
            ));
        }
        Ok(SearchQuery {
            key,
            from_ms: self.from,
            to_ms: self.to,
            limit,
        })
    }
}

fn b64(b: &Option<Bytes>) -> Value {
    match b {
        Some(b) => json!(base64::engine::general_purpose::STANDARD.encode(b)),
        None => Value::Null,
    }
}

/// A record found, as the records page shows one (bytes in base64).
fn hit_json(r: &SearchHit) -> Value {
    json!({
        "partition": r.partition,
        "offset": r.offset,
        "timestamp": r.timestamp,
        "key": b64(&r.key),
        "value": b64(&r.value),
        "headers": r.headers.iter().map(|(k, v)| json!({ "key": k, "value": b64(v) })).collect::<Vec<_>>(),
    })
}

/// A failed call to the indexer as the console answers it.
pub(crate) fn api_error(e: crate::search::SearchError) -> ApiError {
    let kind = match e.kind {
        SearchErrorKind::NotFound => Kind::NotFound,
        SearchErrorKind::Invalid => Kind::Invalid,
        SearchErrorKind::Unavailable => Kind::Unavailable,
    };
    ApiError::new(kind, e.message)
}

pub async fn search(
    State(c): State<Arc<Console>>,
    Asker(who): Asker,
    Path(name): Path<String>,
    Query(params): Query<Params>,
) -> ApiResult<Json<Value>> {
    c.may_topic(
        &who,
        Operation::Read,
        &name,
        "searching its records needs READ on it",
    )?;
    let query = params.query()?;
    let Some(search) = &c.search else {
        return Err(ApiError::new(Kind::Unavailable, NO_INDEXER));
    };
    let answer = search.search(&name, &query).await.map_err(api_error)?;
    Ok(Json(json!({
        "topic": name,
        "limit": query.limit,
        "records": answer.hits.iter().map(hit_json).collect::<Vec<_>>(),
        "stats": answer.stats,
    })))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_search_needs_a_key_or_a_time_and_a_bounded_limit() {
        let none = Params::default();
        assert_eq!(none.query().unwrap_err().kind, Kind::Invalid);
        let by_key = Params {
            key: Some("k-1".into()),
            ..Params::default()
        };
        let q = by_key.query().expect("a key");
        assert_eq!(q.key.as_deref(), Some(&b"k-1"[..]));
        assert_eq!(q.limit, DEFAULT_HITS);
        let too_many = Params {
            key: Some("k".into()),
            limit: Some(MAX_HITS + 1),
            ..Params::default()
        };
        assert_eq!(too_many.query().unwrap_err().kind, Kind::Invalid);
        let backwards = Params {
            from: Some(10),
            to: Some(10),
            ..Params::default()
        };
        assert_eq!(backwards.query().unwrap_err().kind, Kind::Invalid);
    }

    #[test]
    fn a_key_that_is_not_text_comes_as_base64() {
        let p = Params {
            key_base64: Some("AP8=".into()),
            ..Params::default()
        };
        assert_eq!(
            p.query().expect("base64").key.as_deref(),
            Some(&[0u8, 255][..])
        );
        let both = Params {
            key: Some("a".into()),
            key_base64: Some("YQ==".into()),
            ..Params::default()
        };
        assert_eq!(both.query().unwrap_err().kind, Kind::Invalid);
        let bad = Params {
            key_base64: Some("not base64!".into()),
            ..Params::default()
        };
        assert_eq!(bad.query().unwrap_err().kind, Kind::Invalid);
    }
}
