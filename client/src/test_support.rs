//! A fake broker for unit tests: a listener on 127.0.0.1:0 answering each
//! request with what a closure returns.

use floe_proxy::codec::{self, DecodedRequest};
use kafka_protocol::messages::api_versions_response::ApiVersion;
use kafka_protocol::messages::{ApiKey, ApiVersionsResponse, ResponseKind};
use tokio::io::AsyncWriteExt;

use crate::connection::CLIENT_VERSIONS;

/// Starts a fake broker on one connection and returns its address. `answer`
/// gives the response, the correlation id to put in it and the version to
/// encode it at, or `None` to answer nothing (Produce with acks=0).
pub(crate) async fn fake_broker(
    answer: impl Fn(&DecodedRequest) -> Option<(ResponseKind, i32, i16)> + Send + 'static,
) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("binding a port");
    let addr = listener.local_addr().expect("a local address").to_string();
    tokio::spawn(async move {
        let Ok((mut conn, _)) = listener.accept().await else {
            return;
        };
        while let Ok(Some(frame)) = codec::read_frame(&mut conn, codec::DEFAULT_MAX_FRAME).await {
            let req = codec::decode_request(frame).expect("a valid request");
            let Some((body, correlation_id, version)) = answer(&req) else {
                continue;
            };
            let out = codec::encode_response(req.api_key, version, correlation_id, &body)
                .expect("encoding the answer");
            if conn.write_all(&out).await.is_err() {
                return;
            }
        }
    });
    addr
}

/// An ApiVersions answer listing `keys`.
pub(crate) fn versions(error_code: i16, keys: &[(ApiKey, i16, i16)]) -> ApiVersionsResponse {
    let mut r = ApiVersionsResponse::default();
    r.error_code = error_code;
    r.api_keys = keys
        .iter()
        .map(|(k, lo, hi)| {
            ApiVersion::default()
                .with_api_key(*k as i16)
                .with_min_version(*lo)
                .with_max_version(*hi)
        })
        .collect();
    r
}

/// Answers ApiVersions with every version this client speaks, and any other
/// request with `other(request)` at the request's version and correlation id.
pub(crate) fn modern(
    req: &DecodedRequest,
    other: impl FnOnce(&DecodedRequest) -> Option<ResponseKind>,
) -> Option<(ResponseKind, i32, i16)> {
    let id = req.header.correlation_id;
    if req.api_key == ApiKey::ApiVersions {
        return Some((
            ResponseKind::ApiVersions(versions(0, CLIENT_VERSIONS)),
            id,
            req.version,
        ));
    }
    other(req).map(|body| (body, id, req.version))
}

/// [`modern`] with the same answer to every request but ApiVersions.
pub(crate) fn answer_metadata(
    req: &DecodedRequest,
    body: impl FnOnce() -> ResponseKind,
) -> Option<(ResponseKind, i32, i16)> {
    modern(req, |_| Some(body()))
}

/// A Metadata answer naming `topic` with partitions `0..partitions`, each led
/// by broker 1.
pub(crate) fn one_topic(topic: &str, partitions: i32) -> ResponseKind {
    use kafka_protocol::messages::metadata_response::{
        MetadataResponsePartition, MetadataResponseTopic,
    };
    use kafka_protocol::messages::{BrokerId, MetadataResponse};
    let partitions = (0..partitions)
        .map(|p| {
            MetadataResponsePartition::default()
                .with_partition_index(p)
                .with_leader_id(BrokerId(1))
        })
        .collect();
    ResponseKind::Metadata(MetadataResponse::default().with_topics(vec![
        MetadataResponseTopic::default()
            .with_name(Some(crate::topic_name(topic)))
            .with_partitions(partitions),
    ]))
}
