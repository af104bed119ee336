//! The console's search by key over this process's indexer: the small
//! [`floe_console::search::Search`] seam implemented with
//! `floe_indexer::query::run`, so that the console crate does not depend
//! on the indexer.

use floe_console::search::{
    Search, SearchAnswer, SearchError, SearchErrorKind, SearchFuture, SearchHit, SearchQuery,
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
