//! The console's JSON routes, one module per page.

pub mod actions;
pub mod exports;
pub mod groups;
pub mod objects;
pub mod overview;
pub mod records;
pub mod search;
pub mod share;
pub mod stores;
pub mod topics;
pub mod txns;

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use serde::Deserialize;

use crate::Console;
use crate::caller::Asker;
use crate::error::{ApiError, ApiResult, Kind};

/// The largest page of a list.
pub const MAX_PAGE: usize = 500;
/// A list's page when none is asked.
pub const DEFAULT_PAGE: usize = 50;

/// A list's filter and page (`?q=&offset=&limit=`).
#[derive(Debug, Default, Deserialize)]
pub struct Page {
    pub q: Option<String>,
    pub offset: Option<usize>,
    pub limit: Option<usize>,
}

impl Page {
    /// Whether `name` passes the filter (a substring, any case).
    pub fn matches(&self, name: &str) -> bool {
        match self.q.as_deref().map(str::trim) {
            None | Some("") => true,
            Some(q) => name.to_lowercase().contains(&q.to_lowercase()),
        }
    }

    /// The page's bounds in a list of `total`, or why they are refused.
    pub fn bounds(&self, total: usize) -> ApiResult<(usize, usize)> {
        let limit = self.limit.unwrap_or(DEFAULT_PAGE);
        if limit == 0 || limit > MAX_PAGE {
            return Err(ApiError::new(
                Kind::Invalid,
                format!("limit={limit}: between 1 and {MAX_PAGE}"),
            ));
        }
        let offset = self.offset.unwrap_or(0).min(total);
        Ok((offset, limit))
    }
}

/// `/ui/api/whoami`: who the console serves, and whether ACLs judge it.
pub async fn whoami(State(c): State<Arc<Console>>, Asker(who): Asker) -> Json<serde_json::Value> {
    Json(serde_json::json!({
        "principal": who.principal.to_string(),
        "authorizer": c.ctx.authz.enabled(),
        "search": c.search.is_some(),
        "version": env!("CARGO_PKG_VERSION"),
    }))
}

/// `/ui/api/metrics`: this process's counters, for the live charts (no
/// resource of the cluster in it, but a principal still signs in).
pub async fn metrics(State(c): State<Arc<Console>>, Asker(_): Asker) -> Json<serde_json::Value> {
    Json(c.rates.now())
}

/// Any other path under the console.
pub async fn not_found() -> ApiError {
    ApiError::new(Kind::NotFound, "no such page or route in the console")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_is_bounded_and_filters_by_substring() {
        let p = Page {
            q: Some("ORD".into()),
            offset: Some(10),
            limit: None,
        };
        assert!(p.matches("orders"));
        assert!(!p.matches("payments"));
        assert_eq!(p.bounds(5).expect("bounds"), (5, DEFAULT_PAGE));
        let too_many = Page {
            limit: Some(MAX_PAGE + 1),
            ..Page::default()
        };
        assert_eq!(too_many.bounds(10).unwrap_err().kind, Kind::Invalid);
    }
}
