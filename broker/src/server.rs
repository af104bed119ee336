//! The broker's internal RPC server: every route family registered on one
//! router (the partitions', then each coordinator's), with the body limit.
//! The transport, the client and the partitions' handlers are in
//! [`crate::rpc`]; each coordinator keeps its routes and handlers in its own
//! module.

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use axum::routing::post;
use prost::Message;
use tracing::Instrument as _;

use crate::broker::Broker;
use crate::rpc::routes::{self, Route};
use crate::rpc::{ANSWERED_NOW, Answer, MAX_BODY_BYTES, bad, protobuf};

/// Registering a route's handler by its [`Route`] type: the request is
/// decoded as `R::Req` (400 if it is not one), the reply encoded as `R::Resp`.
trait Serve {
    fn serve<R, F, Fut>(self, handler: F) -> Self
    where
        R: Route,
        F: Fn(Broker, R::Req) -> Fut + Clone + Send + Sync + 'static,
        Fut: std::future::Future<Output = Answer<R::Resp>> + Send + 'static;
}

impl Serve for Router<Broker> {
    fn serve<R, F, Fut>(self, handler: F) -> Self
    where
        R: Route,
        F: Fn(Broker, R::Req) -> Fut + Clone + Send + Sync + 'static,
        Fut: std::future::Future<Output = Answer<R::Resp>> + Send + 'static,
    {
        self.route(
            R::PATH,
            post(
                move |State(b): State<Broker>, headers: HeaderMap, body: Bytes| async move {
                    let req = match R::Req::decode(body) {
                        Ok(r) => r,
                        Err(e) => return bad(e),
                    };
                    // Served in the caller's request (its id, its trace).
                    let (span, id) = crate::trace::rpc_span(R::PATH, &headers);
                    let answer = with_request(id.clone(), handler(b, req))
                        .instrument(span.clone())
                        .await;
                    match answer {
                        Answer::Now(reply) => {
                            let mut resp = protobuf(reply);
                            resp.headers_mut()
                                .insert(ANSWERED_NOW, axum::http::HeaderValue::from_static("1"));
                            resp
                        }
                        Answer::Later(reply) => {
                            let reply = with_request(id, reply).instrument(span);
                            let body = futures::stream::once(async move {
                                Ok::<_, std::convert::Infallible>(Bytes::from(
                                    reply.await.encode_to_vec(),
                                ))
                            });
                            (StatusCode::OK, Body::from_stream(body)).into_response()
                        }
                    }
                },
            ),
        )
    }
}

/// `fut` run for the request `id` names (nothing when the call named none).
async fn with_request<T>(
    id: Option<crate::trace::RequestId>,
    fut: impl std::future::Future<Output = T>,
) -> T {
    match id {
        Some(id) => crate::trace::REQUEST_ID.scope(id, fut).await,
        None => fut.await,
    }
}

/// Registers `$handler` (an `async fn(Broker, Req) -> Resp`) for `$route`.
macro_rules! serve {
    ($router:expr, $route:ty, $handler:expr) => {
        $router.serve::<$route, _, _>(|b, req| async move { Answer::Now($handler(b, req).await) })
    };
}

/// The RPC routes of a broker.
pub fn router(broker: Broker) -> Router {
    use crate::group::rpc as g;
    use crate::rpc as p;
    use crate::share::{admin as sa, rpc as s};
    use crate::txn::rpc as t;
    let r = Router::new().serve::<routes::Produce, _, _>(|b: Broker, req| {
        p::rpc_produce(b.partitions().clone(), req)
    });
    let r = serve!(r, routes::Fetch, |b: Broker, req| p::rpc_fetch(
        b.partitions().clone(),
        req
    ));
    let r = serve!(r, routes::Wait, |b: Broker, req| p::rpc_wait(
        b.partitions().clone(),
        req
    ));
    let r = serve!(r, routes::ListOffset, |b: Broker, req| p::rpc_list_offset(
        b.partitions().clone(),
        req
    ));
    let r = serve!(r, routes::DeleteRecords, |b: Broker, req| {
        p::rpc_delete_records(b.partitions().clone(), req)
    });
    let r = serve!(r, routes::StoreStats, |b: Broker, req| p::rpc_store_stats(
        b.partitions().clone(),
        req
    ));
    let r = serve!(r, g::routes::GroupJoin, g::rpc_join);
    let r = serve!(r, g::routes::GroupSync, g::rpc_sync);
    let r = serve!(r, g::routes::GroupMember, g::rpc_member);
    let r = serve!(r, g::routes::GroupCommit, g::rpc_commit);
    let r = serve!(r, g::routes::GroupLeave, g::rpc_leave);
    let r = serve!(r, g::routes::GroupDescribe, g::rpc_describe);
    let r = serve!(r, g::routes::GroupList, g::rpc_list);
    let r = serve!(r, g::routes::GroupDelete, g::rpc_delete);
    let r = serve!(r, g::routes::GroupDeleteOffsets, g::rpc_delete_offsets);
    let r = serve!(r, t::routes::TxnStep, t::rpc_step);
    let r = serve!(r, t::routes::TxnDescribe, t::rpc_describe);
    let r = serve!(r, t::routes::TxnList, t::rpc_list);
    let r = serve!(r, routes::TxnMarker, |b: Broker, req| {
        crate::txn::markers::rpc_marker(b.partitions().clone(), req)
    });
    let r = serve!(r, routes::TxnDurable, |b: Broker, req| {
        crate::txn::markers::rpc_durable(b.partitions().clone(), req)
    });
    let r = serve!(r, routes::Producers, |b: Broker, req| {
        crate::txn::markers::rpc_producers(b.partitions().clone(), req)
    });
    let r = serve!(r, g::routes::ConsumerBeat, g::rpc_consumer_beat);
    let r = serve!(r, g::routes::ConsumerDescribe, g::rpc_consumer_describe);
    let r = serve!(r, s::routes::ShareFetch, |b: Broker, req| s::rpc_fetch(
        b.share().clone(),
        req
    ));
    let r = serve!(r, s::routes::ShareAck, |b: Broker, req| s::rpc_ack(
        b.share().clone(),
        req
    ));
    let r = serve!(r, s::routes::ShareRelease, |b: Broker, req| s::rpc_release(
        b.share().clone(),
        req
    ));
    let r = serve!(r, s::routes::ShareHeartbeat, |b: Broker, req| {
        s::rpc_heartbeat(b.share().clone(), req)
    });
    let r = serve!(r, s::routes::ShareDescribe, |b: Broker, req| {
        s::rpc_describe(b.share().clone(), req)
    });
    let r = serve!(r, sa::routes::ShareReset, |b: Broker, req| sa::rpc_reset(
        b.share().clone(),
        req
    ));
    let r = serve!(r, sa::routes::ShareInspect, |b: Broker, req| {
        sa::rpc_inspect(b.share().clone(), req)
    });
    let r = serve!(r, sa::routes::ShareGroups, |b: Broker, req| sa::rpc_groups(
        b.share().clone(),
        req
    ));
    let r = serve!(r, sa::routes::ShareCheck, |b: Broker, req| sa::rpc_check(
        b.share().clone(),
        req
    ));
    let r = serve!(r, sa::routes::ShareHoldEnd, |b: Broker, req| {
        sa::rpc_hold_end(b.share().clone(), req)
    });
    let r = serve!(r, sa::routes::ShareDeleteGroup, |b: Broker, req| {
        sa::rpc_delete_group(b.share().clone(), req)
    });
    r.layer(axum::extract::DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(broker)
}

/// Serves the RPC routes on `listener` with `limits` (see
/// `floe_metadata::http_server`) until the task is dropped.
pub async fn serve(
    listener: tokio::net::TcpListener,
    broker: Broker,
    limits: floe_metadata::http_server::HttpLimits,
) -> std::io::Result<()> {
    floe_metadata::http_server::serve(listener, router(broker), limits, "broker_rpc").await
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_path_is_unique_and_under_rpc() {
        let all = [
            crate::rpc::routes::ALL_PATHS,
            crate::group::rpc::routes::ALL_PATHS,
            crate::txn::rpc::routes::ALL_PATHS,
            crate::share::rpc::routes::ALL_PATHS,
            crate::share::admin::routes::ALL_PATHS,
        ];
        let mut seen = std::collections::HashSet::new();
        for p in all.iter().flat_map(|paths| paths.iter()) {
            assert!(p.starts_with("/rpc/"), "{p}");
            assert!(seen.insert(*p), "{p} defined twice");
        }
        assert_eq!(seen.len(), 34);
    }
}
