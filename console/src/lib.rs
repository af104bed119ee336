//! Floe's web console: the pages (plain HTML, CSS and JavaScript under
//! `console/assets/`, embedded in the binary) and the JSON they read, served
//! on the admin port of every proxy and of `floe standalone` at `/ui`.
//!
//! The JSON is built from Kafka requests answered by this process's proxy
//! exactly as a client's would be ([`floe_proxy::server::serve_as`]): the
//! same ACL checks before, the same filtering after, for the principal of
//! the request's bearer token (`--admin-token-file`), or `User:ANONYMOUS`
//! on a cluster without security. What Kafka cannot say (owners, epochs,
//! the metadata service's Raft state) is read from the proxy's cluster
//! view and the metadata service, shown only where the principal may
//! describe the topic or the cluster. A search by key goes to this
//! process's indexer through the small [`search::Search`] trait, where the
//! process runs one (`floe standalone`). `docs/console.md` describes the
//! pages and every route.

mod api;
mod assets;
mod caller;
mod error;
mod kafka;
mod rates;
pub mod search;

pub use api::exports::table_summary;
mod stores;

use std::sync::Arc;

use axum::Router;
use axum::routing::{get, post};
use floe_proxy::handlers::Context;

use rates::Rates;
use search::Search;

/// What the console answers from.
pub struct Console {
    /// The proxy of this process, which answers every Kafka request.
    pub(crate) ctx: Arc<Context>,
    /// The process's metrics, for the live charts.
    pub(crate) rates: Rates,
    /// Whether a request with no credentials is served, as `User:ANONYMOUS`
    /// (see [`caller::principal`]).
    pub(crate) anonymous: bool,
    /// The lookup by key and time, where this process runs an indexer.
    pub(crate) search: Option<Arc<dyn Search>>,
}

impl Console {
    /// A console over `ctx`, its charts read from `render_metrics` (the
    /// process's Prometheus text). `anonymous`: whether requests with no
    /// credentials are served (as `User:ANONYMOUS`); only when no Kafka
    /// listener of the proxy authenticates its clients.
    pub fn new(
        ctx: Arc<Context>,
        render_metrics: Arc<dyn Fn() -> String + Send + Sync>,
        anonymous: bool,
    ) -> Self {
        Console {
            ctx,
            rates: Rates::new(render_metrics),
            anonymous,
            search: None,
        }
    }

    /// Refuses (403, with `why`) unless `who` may do `op` on topic `name`,
    /// by the same ACLs as the Kafka port; for the console's own routes,
    /// which no Kafka request answers.
    pub(crate) fn may_topic(
        &self,
        who: &floe_proxy::groups::ClientInfo,
        op: floe_metadata::acl::Operation,
        name: &str,
        why: &str,
    ) -> error::ApiResult<()> {
        self.may(
            who,
            |c| c.topic(op, name),
            || format!("topic {name}: not allowed ({why})"),
        )
    }

    /// [`Console::may_topic`] for the cluster.
    pub(crate) fn may_cluster(
        &self,
        who: &floe_proxy::groups::ClientInfo,
        op: floe_metadata::acl::Operation,
        why: &str,
    ) -> error::ApiResult<()> {
        self.may(who, |c| c.cluster(op), || format!("not allowed: {why}"))
    }

    fn may(
        &self,
        who: &floe_proxy::groups::ClientInfo,
        allows: impl FnOnce(&floe_proxy::authz::Check) -> bool,
        refusal: impl FnOnce() -> String,
    ) -> error::ApiResult<()> {
        let check = self.ctx.authz.check(&self.ctx.view.current().acls, who);
        if allows(&check) {
            Ok(())
        } else {
            Err(error::ApiError::new(error::Kind::Denied, refusal()))
        }
    }

    /// The console with a lookup by key and time (this process's indexer):
    /// the records page offers a search by key only then.
    pub fn with_search(mut self, search: Arc<dyn Search>) -> Self {
        self.search = Some(search);
        self
    }
}

/// The console's routes: the pages under `/ui`, their JSON under `/ui/api/`.
pub fn router(console: Arc<Console>) -> Router {
    Router::new()
        .route("/ui", get(assets::index))
        .route("/ui/", get(assets::index))
        .route("/ui/assets/{*path}", get(assets::file))
        .route("/ui/api/whoami", get(api::whoami))
        .route("/ui/api/overview", get(api::overview::overview))
        .route("/ui/api/metrics", get(api::metrics))
        .route("/ui/api/stores", get(api::stores::endpoints))
        .route(
            "/ui/api/topics",
            get(api::topics::list).post(api::actions::create_topic),
        )
        .route("/ui/api/topics/{name}", get(api::topics::describe))
        .route("/ui/api/topics/{name}/records", get(api::records::records))
        .route(
            "/ui/api/topics/{name}/records/all",
            get(api::records::across),
        )
        .route("/ui/api/topics/{name}/search", get(api::search::search))
        .route("/ui/api/topics/{name}/objects", get(api::objects::objects))
        .route(
            "/ui/api/topics/{name}/delete",
            post(api::actions::delete_topic),
        )
        .route(
            "/ui/api/topics/{name}/configs",
            post(api::actions::alter_configs),
        )
        .route(
            "/ui/api/topics/{name}/partitions",
            post(api::actions::add_partitions),
        )
        .route("/ui/api/topics/{name}/produce", post(api::actions::produce))
        .route("/ui/api/topics/{name}/producers", get(api::txns::producers))
        .route("/ui/api/topics/{name}/export", get(api::exports::topic))
        .route(
            "/ui/api/topics/{name}/export/backfill",
            post(api::exports::backfill),
        )
        .route("/ui/api/transactions", get(api::txns::list))
        .route("/ui/api/exports", get(api::exports::list))
        .route("/ui/api/topics/{name}/table", get(api::exports::table))
        .route("/ui/api/groups", get(api::groups::list))
        .route("/ui/api/groups/{id}", get(api::groups::describe))
        .route(
            "/ui/api/groups/{id}/reset-offsets",
            post(api::actions::reset_offsets),
        )
        .route(
            "/ui/api/groups/{id}/delete",
            post(api::actions::delete_group),
        )
        .route("/ui/api/groups/{id}/share", get(api::share::internals))
        .route(
            "/ui/api/groups/{id}/dead-letters",
            get(api::share::dead_letters),
        )
        .route(
            "/ui/api/groups/{id}/redrive",
            post(api::share::redrive_dead_letters),
        )
        .fallback(api::not_found)
        .with_state(console)
}
