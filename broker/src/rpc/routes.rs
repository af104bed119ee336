//! The routes of the broker's internal RPC that reach a partition's owner,
//! and the [`Route`] trait and `routes!` macro every coordinator defines its
//! own routes with (`group::rpc::routes`, `txn::rpc::routes`,
//! `share::rpc::routes`, `share::admin::routes`), each defined once: its
//! path, its request and its reply. The server (`server::router`) registers handlers
//! by these types and [`super::RemoteBroker`] calls by them, so a path is
//! never written twice and a request can only be sent with the reply type
//! it gets. The same shape as the metadata API's `floe_metadata::api::routes`.

use super::proto;

/// One route of the broker RPC (`POST`, protobuf bodies).
pub trait Route: Send + Sync + 'static {
    /// The HTTP path.
    const PATH: &'static str;
    type Req: prost::Message + Default + Send + 'static;
    type Resp: prost::Message + Default + Send + 'static;
}

macro_rules! routes {
    ($($(#[$m:meta])* $name:ident = $path:literal : $req:path => $resp:path;)*) => {
        $(
            $(#[$m])*
            #[derive(Debug, Clone, Copy)]
            pub struct $name;

            impl Route for $name {
                const PATH: &'static str = $path;
                type Req = $req;
                type Resp = $resp;
            }
        )*

        /// Every route's path, for tests.
        pub const ALL_PATHS: &[&str] = &[$($path),*];
    };
}

pub(crate) use routes;

routes! {
    /// Answers in two steps on one stream: the headers once the batches are
    /// sequenced, the body once the acknowledgement level is met.
    Produce = "/rpc/produce": proto::ProduceRequest => proto::ProduceResponse;
    Fetch = "/rpc/fetch": proto::FetchRequest => proto::FetchResponse;
    /// A long poll: returns when data past the offset may be there.
    Wait = "/rpc/wait": proto::WaitRequest => proto::Empty;
    ListOffset = "/rpc/list-offset": proto::ListOffsetRequest => proto::ListOffsetResponse;
    DeleteRecords = "/rpc/delete-records": proto::DeleteRecordsRequest => proto::DeleteRecordsResponse;
    /// The broker's store endpoints and how its pool sees each.
    StoreStats = "/rpc/store/stats": proto::Empty => proto::StoreStats;
    /// Answers once the marker is committed (as `acks=all`).
    TxnMarker = "/rpc/txn/marker": proto::MarkerRequest => proto::MarkerResponse;
    /// Before a commit is decided; answers once the producer's open
    /// transaction on the partition is durable there.
    TxnDurable = "/rpc/txn/durable": proto::DurableRequest => proto::DurableResponse;
    /// DescribeProducers of one partition.
    Producers = "/rpc/producers": proto::ProducersRequest => proto::ProducersResponse;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_path_is_unique_and_under_rpc() {
        let mut seen = std::collections::HashSet::new();
        for p in ALL_PATHS {
            assert!(p.starts_with("/rpc/"), "{p}");
            assert!(seen.insert(*p), "{p} defined twice");
        }
        assert_eq!(ALL_PATHS.len(), 9);
    }
}
