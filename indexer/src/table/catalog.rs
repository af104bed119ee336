//! Iceberg's REST catalog API over the topics that are tables, served by
//! the indexer under `/iceberg` (so the catalog's URI is
//! `http://<indexer>/iceberg`).
//!
//! One namespace, [`NAMESPACE`], holds a table per topic with
//! `table.format=iceberg` that has its first metadata file. What a reader
//! needs is here: the config, namespaces, the list of tables and loading a
//! table (its metadata and where it is). Tables are written by Floe alone,
//! from the topic's settings: creating, committing to, renaming or dropping
//! a table through the catalog is refused with Iceberg's 406
//! (`UnsupportedOperationException`), saying so.
//!
//! Who may see what is the query API's rule: cluster members and, on a
//! cluster without security, anyone; a bearer token's principal needs
//! DESCRIBE on a topic to see its table listed and READ to load it.

use axum::extract::{Path, Query, State};
use axum::http::{Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Extension, Json, Router};
use floe_metadata::acl::Operation;
use floe_metadata::http_server::{Caller, PeerAddr};
use serde_json::{Value, json};

use crate::error::{ErrorKind, IndexerError};
use crate::exporter::Indexer;
use crate::service::permit;
use crate::settings::ExportSettings;

/// The namespace every table is in.
pub const NAMESPACE: &str = "floe";

/// The endpoints this catalog serves, as its config names them.
const ENDPOINTS: &[&str] = &[
    "GET /v1/{prefix}/namespaces",
    "GET /v1/{prefix}/namespaces/{namespace}",
    "HEAD /v1/{prefix}/namespaces/{namespace}",
    "GET /v1/{prefix}/namespaces/{namespace}/tables",
    "GET /v1/{prefix}/namespaces/{namespace}/tables/{table}",
    "HEAD /v1/{prefix}/namespaces/{namespace}/tables/{table}",
];

pub fn router() -> Router<Indexer> {
    Router::new()
        .route("/v1/config", get(config))
        .route("/v1/namespaces", get(namespaces).fallback(unsupported))
        .route(
            "/v1/namespaces/{namespace}",
            get(namespace).head(namespace).fallback(unsupported),
        )
        .route(
            "/v1/namespaces/{namespace}/tables",
            get(tables).fallback(unsupported),
        )
        .route(
            "/v1/namespaces/{namespace}/tables/{table}",
            get(load_table).head(load_table).fallback(unsupported),
        )
        .fallback(unsupported)
}

/// Iceberg's error model.
fn error(status: StatusCode, kind: &str, message: impl Into<String>) -> Response {
    (
        status,
        Json(json!({"error": {
            "message": message.into(),
            "type": kind,
            "code": status.as_u16(),
        }})),
    )
        .into_response()
}

fn from_indexer(e: &IndexerError) -> Response {
    let (status, kind) = match e.kind {
        ErrorKind::UnknownTopic => (StatusCode::NOT_FOUND, "NoSuchTableException"),
        ErrorKind::InvalidRequest => (StatusCode::BAD_REQUEST, "BadRequestException"),
        ErrorKind::Conflict => (StatusCode::CONFLICT, "CommitFailedException"),
        ErrorKind::Corrupt => (StatusCode::INTERNAL_SERVER_ERROR, "ServerErrorException"),
        ErrorKind::Unavailable => (
            StatusCode::SERVICE_UNAVAILABLE,
            "ServiceUnavailableException",
        ),
    };
    error(status, kind, e.message.clone())
}

async fn unsupported(method: Method) -> Response {
    if method == Method::GET || method == Method::HEAD {
        return error(
            StatusCode::NOT_FOUND,
            "NotFoundException",
            "no such route in Floe's Iceberg catalog",
        );
    }
    error(
        StatusCode::NOT_ACCEPTABLE,
        "UnsupportedOperationException",
        "Floe's tables are written by Floe from the topics' settings: make a topic a table \
         with the topic config table.format=iceberg, change its columns with export.index",
    )
}

/// The 404 for a namespace of a path other than [`NAMESPACE`].
fn unknown_namespace(ns: &str) -> Option<Response> {
    (ns != NAMESPACE).then(|| {
        error(
            StatusCode::NOT_FOUND,
            "NoSuchNamespaceException",
            format!("no namespace {ns:?}: Floe's tables are in {NAMESPACE:?}"),
        )
    })
}

async fn config() -> Response {
    Json(json!({
        "defaults": {},
        "overrides": {},
        "endpoints": ENDPOINTS,
    }))
    .into_response()
}

async fn namespaces(Query(q): Query<std::collections::HashMap<String, String>>) -> Response {
    // No namespace has children.
    if q.get("parent").is_some_and(|p| !p.is_empty()) {
        return Json(json!({"namespaces": []})).into_response();
    }
    Json(json!({"namespaces": [[NAMESPACE]]})).into_response()
}

async fn namespace(Path(ns): Path<String>) -> Response {
    if let Some(r) = unknown_namespace(&ns) {
        return r;
    }
    Json(json!({"namespace": [NAMESPACE], "properties": {}})).into_response()
}

/// The topics that are tables with a first metadata file, by name.
async fn table_topics(ix: &Indexer) -> Result<Vec<String>, IndexerError> {
    let mut out = Vec::new();
    for t in ix.meta().list_topics().await? {
        if !ExportSettings::from_topic(&t).table {
            continue;
        }
        match ix.meta().table_state(&t.name).await {
            Ok(v) if v.state.metadata_location.is_some() => out.push(t.name),
            Ok(_) => {}
            // Deleted since it was listed.
            Err(e) if e.kind() == floe_metadata::ErrorKind::UnknownTopic => {}
            Err(e) => return Err(e.into()),
        }
    }
    out.sort();
    Ok(out)
}

async fn tables(
    State(ix): State<Indexer>,
    caller: Option<Extension<Caller>>,
    peer: Option<Extension<PeerAddr>>,
    Path(ns): Path<String>,
) -> Response {
    if let Some(r) = unknown_namespace(&ns) {
        return r;
    }
    let names = match table_topics(&ix).await {
        Ok(n) => n,
        Err(e) => return from_indexer(&e),
    };
    let mut identifiers = Vec::new();
    for name in names {
        let may = permit(
            &ix,
            caller.as_deref(),
            peer.as_deref(),
            &name,
            Operation::Describe,
        )
        .await;
        match may {
            Ok(()) => identifiers.push(json!({"namespace": [NAMESPACE], "name": name})),
            // Unauthenticated: refuse the whole call, not each table.
            Err(r) if r.status() == StatusCode::UNAUTHORIZED => return r,
            Err(_) => {}
        }
    }
    Json(json!({"identifiers": identifiers})).into_response()
}

async fn load_table(
    State(ix): State<Indexer>,
    caller: Option<Extension<Caller>>,
    peer: Option<Extension<PeerAddr>>,
    method: Method,
    Path((ns, table)): Path<(String, String)>,
) -> Response {
    if let Some(r) = unknown_namespace(&ns) {
        return r;
    }
    if let Err(r) = permit(
        &ix,
        caller.as_deref(),
        peer.as_deref(),
        &table,
        Operation::Read,
    )
    .await
    {
        return r;
    }
    let no_table = || {
        error(
            StatusCode::NOT_FOUND,
            "NoSuchTableException",
            format!(
                "no table {NAMESPACE}.{table}: no such topic, or it is not a table \
                 (table.format=iceberg) or has no metadata yet"
            ),
        )
    };
    let location = match ix.table_location(&table).await {
        Ok(Some(l)) => l,
        Ok(None) => return no_table(),
        Err(e) if e.kind == ErrorKind::UnknownTopic => return no_table(),
        Err(e) => return from_indexer(&e),
    };
    if method == Method::HEAD {
        return StatusCode::NO_CONTENT.into_response();
    }
    match load_result(&ix, &location).await {
        Ok(v) => Json(v).into_response(),
        Err(e) => from_indexer(&e),
    }
}

/// The catalog's LoadTable answer for the metadata file at `location`.
async fn load_result(ix: &Indexer, location: &str) -> Result<Value, IndexerError> {
    let bytes = ix.read_uri(location).await?;
    let metadata: Value = serde_json::from_slice(&bytes)
        .map_err(|e| IndexerError::corrupt(format!("table metadata {location}: {e}")))?;
    Ok(json!({
        "metadata-location": location,
        "metadata": metadata,
        "config": {},
    }))
}

impl Indexer {
    /// The catalog's answer for `topic`'s table, `None` when the topic is
    /// not a table or has no metadata file yet (no ACL check: the caller's).
    pub async fn load_table(&self, topic: &str) -> Result<Option<Value>, IndexerError> {
        match self.table_location(topic).await? {
            Some(location) => Ok(Some(load_result(self, &location).await?)),
            None => Ok(None),
        }
    }

    /// The current metadata file of `topic`'s table, `None` when the topic
    /// is not a table (`table.format`) or has no metadata file yet.
    async fn table_location(&self, topic: &str) -> Result<Option<String>, IndexerError> {
        let info = self.meta().describe_topic(topic).await?;
        if !ExportSettings::from_topic(&info).table {
            return Ok(None);
        }
        Ok(self
            .meta()
            .table_state(topic)
            .await?
            .state
            .metadata_location)
    }
}
