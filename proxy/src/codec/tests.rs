//! Tests of the codec: round trips, hostile frames, frame reading, response
//! encoding, and (in a child process) what happens without the guard.

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::api_versions_response::ApiVersion;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::metadata_response::{MetadataResponseBroker, MetadataResponseTopic};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    ApiKey, ApiVersionsRequest, ApiVersionsResponse, BrokerId, FetchRequest, MetadataRequest,
    MetadataResponse, ProduceRequest, RequestHeader, RequestKind, ResponseKind, TopicName,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use uuid::Uuid;

use super::*;

fn topic(name: &'static str) -> TopicName {
    TopicName(StrBytes::from_static_str(name))
}

fn header(api_key: ApiKey, version: i16, correlation_id: i32) -> RequestHeader {
    RequestHeader::default()
        .with_request_api_key(api_key as i16)
        .with_request_api_version(version)
        .with_correlation_id(correlation_id)
        .with_client_id(Some(StrBytes::from_static_str("floe-test")))
}

/// A request frame without its length prefix.
fn frame(header: &RequestHeader, body: &RequestKind) -> Bytes {
    let out = encode_request(header, body).unwrap().freeze();
    let len = i32::from_be_bytes(out[..4].try_into().unwrap());
    assert_eq!(len as usize, out.len() - 4, "length prefix");
    out.slice(4..)
}

/// The header alone, encoded at the right header version, to put a
/// hand-made (hostile) body after.
fn header_bytes(api_key: ApiKey, version: i16) -> BytesMut {
    let mut out = BytesMut::new();
    header(api_key, version, 1)
        .encode(&mut out, api_key.request_header_version(version))
        .unwrap();
    out
}

fn assert_round_trip(header: RequestHeader, body: RequestKind) {
    let decoded = decode_request(frame(&header, &body)).unwrap();
    assert_eq!(decoded.api_key as i16, header.request_api_key);
    assert_eq!(decoded.version, header.request_api_version);
    assert_eq!(decoded.header, header);
    assert_eq!(decoded.body, body);
}

fn metadata(version: i16) -> MetadataRequest {
    let mut t = MetadataRequestTopic::default().with_name(Some(topic("orders")));
    if version >= 10 {
        t = t.with_topic_id(Uuid::from_u128(0x1234_5678_9abc_def0_1122_3344_5566_7788));
    }
    let req = MetadataRequest::default().with_topics(Some(vec![
        t,
        MetadataRequestTopic::default().with_name(Some(topic("payments"))),
    ]));
    if version >= 4 {
        req.with_allow_auto_topic_creation(false)
    } else {
        req
    }
}

fn produce(records: Bytes) -> ProduceRequest {
    let data = TopicProduceData::default()
        .with_name(topic("orders"))
        .with_partition_data(vec![
            PartitionProduceData::default()
                .with_index(0)
                .with_records(Some(records)),
            PartitionProduceData::default()
                .with_index(7)
                .with_records(None),
        ]);
    ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(30_000)
        .with_topic_data(vec![data])
}

fn fetch(version: i16) -> FetchRequest {
    let mut part = FetchPartition::default()
        .with_partition(3)
        .with_fetch_offset(1_000_000_000_000)
        .with_partition_max_bytes(1024 * 1024);
    if version >= 5 {
        part = part.with_log_start_offset(17);
    }
    if version >= 9 {
        part = part.with_current_leader_epoch(5);
    }
    let mut req = FetchRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_max_wait_ms(500)
        .with_min_bytes(1)
        .with_max_bytes(50 * 1024 * 1024)
        .with_isolation_level(1)
        .with_topics(vec![
            FetchTopic::default()
                .with_topic(topic("orders"))
                .with_partitions(vec![part]),
        ]);
    if version >= 7 {
        req = req
            .with_session_id(123_456_789)
            .with_session_epoch(2_000_000_000);
    }
    req
}

#[test]
fn metadata_requests_round_trip() {
    for version in [1, 9, 12] {
        assert_round_trip(
            header(ApiKey::Metadata, version, 11),
            RequestKind::Metadata(metadata(version)),
        );
    }
}

#[test]
fn produce_requests_round_trip() {
    let records = Bytes::from_static(b"not parsed by the codec, carried as bytes");
    for version in [3, 9] {
        assert_round_trip(
            header(ApiKey::Produce, version, 12),
            RequestKind::Produce(produce(records.clone())),
        );
    }
}

#[test]
fn fetch_requests_round_trip() {
    for version in [4, 12] {
        assert_round_trip(
            header(ApiKey::Fetch, version, 13),
            RequestKind::Fetch(fetch(version)),
        );
    }
}

#[test]
fn api_versions_request_round_trips() {
    let body = ApiVersionsRequest::default()
        .with_client_software_name(StrBytes::from_static_str("floe-cli"))
        .with_client_software_version(StrBytes::from_static_str("0.1.0"));
    assert_round_trip(
        header(ApiKey::ApiVersions, 3, 0),
        RequestKind::ApiVersions(body),
    );
}

#[test]
fn big_scalars_decode_exactly_through_the_second_pass() {
    // Every one of these i32s is larger than the bytes after it, so the first
    // pass clamps them; only the second pass gives the real values back.
    for version in [4, 12] {
        let mut body = fetch(version)
            .with_max_bytes(50 * 1024 * 1024)
            .with_max_wait_ms(i32::MAX)
            .with_min_bytes(1_000_000);
        body.topics[0].partitions[0].partition_max_bytes = 1 << 30;
        let h = header(ApiKey::Fetch, version, i32::MAX);
        let decoded = decode_request(frame(&h, &RequestKind::Fetch(body.clone()))).unwrap();
        assert_eq!(decoded.header.correlation_id, i32::MAX);
        assert_eq!(decoded.body, RequestKind::Fetch(body));
    }
    let h = header(ApiKey::Produce, 9, 1 << 28);
    let body = produce(Bytes::from_static(b"r")).with_timeout_ms(i32::MAX);
    let decoded = decode_request(frame(&h, &RequestKind::Produce(body.clone()))).unwrap();
    assert_eq!(decoded.body, RequestKind::Produce(body));
}

#[test]
fn trailing_bytes_are_ignored() {
    let h = header(ApiKey::Metadata, 9, 5);
    let body = RequestKind::Metadata(metadata(9));
    let mut padded = BytesMut::from(&frame(&h, &body)[..]);
    padded.put_slice(&[0xff, 0xff, 0xff, 0xff, 0x0f]);
    let decoded = decode_request(padded.freeze()).unwrap();
    assert_eq!(decoded.body, body);
}

fn assert_malformed(frame: Bytes) -> String {
    match decode_request(frame) {
        Err(e) => {
            assert_eq!(e.kind(), CodecErrorKind::Malformed, "{e}");
            e.to_string()
        }
        Ok(r) => panic!("decoded a hostile frame: {r:?}"),
    }
}

#[test]
fn metadata_v1_with_topic_count_i32_max_is_rejected() {
    let mut f = header_bytes(ApiKey::Metadata, 1);
    f.put_i32(i32::MAX);
    assert_malformed(f.freeze());
}

#[test]
fn metadata_v9_with_compact_count_u32_max_is_rejected() {
    let mut f = header_bytes(ApiKey::Metadata, 9);
    f.put_slice(&[0xff, 0xff, 0xff, 0xff, 0x0f]);
    f.put_slice(&[0, 0, 0]); // booleans and tagged fields, never reached
    let why = assert_malformed(f.freeze());
    assert!(why.contains("varint length or count 4294967295"), "{why}");
}

#[test]
fn create_topics_with_huge_nested_counts_is_rejected() {
    // v4 (Int32 counts): one topic "t", then 2^31-1 replica assignments.
    let mut f = header_bytes(ApiKey::CreateTopics, 4);
    f.put_i32(1);
    f.put_i16(1);
    f.put_u8(b't');
    f.put_i32(-1); // num_partitions
    f.put_i16(-1); // replication_factor
    f.put_i32(i32::MAX); // assignments
    assert_malformed(f.freeze());

    // v4: one assignment whose broker id list claims 2^31-1 entries.
    let mut f = header_bytes(ApiKey::CreateTopics, 4);
    f.put_i32(1);
    f.put_i16(1);
    f.put_u8(b't');
    f.put_i32(-1);
    f.put_i16(-1);
    f.put_i32(1); // one assignment
    f.put_i32(0); // partition index
    f.put_i32(i32::MAX); // broker ids
    assert_malformed(f.freeze());

    // v5 (compact counts): the same nested assignments count as a varint.
    let mut f = header_bytes(ApiKey::CreateTopics, 5);
    f.put_u8(2); // one topic
    f.put_slice(&[2, b't']);
    f.put_i32(-1);
    f.put_i16(-1);
    f.put_slice(&[0xff, 0xff, 0xff, 0xff, 0x0f]);
    assert_malformed(f.freeze());
}

#[test]
fn huge_counts_in_a_response_are_rejected_by_decode_guarded() {
    // MetadataResponse v1 starts with the brokers array.
    let err = decode_guarded::<MetadataResponse>(Bytes::from_static(&[0x7f, 0xff, 0xff, 0xff]), 1)
        .unwrap_err();
    assert_eq!(err.kind(), CodecErrorKind::Malformed);
    let err = decode_guarded::<MetadataResponse>(
        Bytes::from_static(&[0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0x0f]),
        9,
    )
    .unwrap_err();
    assert_eq!(err.kind(), CodecErrorKind::Malformed);
}

#[test]
fn truncated_frames_are_rejected() {
    let cases = [
        (
            header(ApiKey::Metadata, 1, 1),
            RequestKind::Metadata(metadata(1)),
        ),
        (
            header(ApiKey::Metadata, 12, 1),
            RequestKind::Metadata(metadata(12)),
        ),
        (
            header(ApiKey::Produce, 9, 1),
            RequestKind::Produce(produce(Bytes::from_static(b"abc"))),
        ),
        (header(ApiKey::Fetch, 12, 1), RequestKind::Fetch(fetch(12))),
    ];
    for (h, body) in cases {
        let full = frame(&h, &body);
        for cut in 0..full.len() {
            let err = decode_request(full.slice(..cut)).unwrap_err();
            assert_eq!(err.kind(), CodecErrorKind::Malformed, "cut at {cut}: {err}");
        }
    }
}

#[test]
fn unknown_api_keys_and_versions_are_unsupported() {
    for (key, version) in [(9999, 0), (-1, 0), (3, 14), (3, -1), (0, 2), (18, 5)] {
        let mut f = BytesMut::new();
        f.put_i16(key);
        f.put_i16(version);
        f.put_i32(42);
        f.put_i16(-1);
        let err = decode_request(f.freeze()).unwrap_err();
        assert_eq!(
            err.kind(),
            CodecErrorKind::UnsupportedApi,
            "{key} v{version}: {err}"
        );
    }
}

#[test]
fn versions_the_message_types_cannot_decode_are_unsupported() {
    // kafka-protocol 0.18 lists these in ApiKey::valid_versions, but the
    // request types stop one version earlier.
    for (key, version) in [
        (ApiKey::OffsetCommit, 10),
        (ApiKey::OffsetFetch, 10),
        (ApiKey::InitProducerId, 6),
    ] {
        assert!(supported_versions(key).max < version);
        let mut f = header_bytes(key, version);
        f.put_slice(&[0; 32]);
        let err = decode_request(f.freeze()).unwrap_err();
        assert_eq!(err.kind(), CodecErrorKind::UnsupportedApi, "{key:?}: {err}");
    }
    assert_eq!(supported_versions(ApiKey::Fetch).min, 4);
    assert_eq!(supported_versions(ApiKey::Metadata).max, 13);
}

#[test]
fn peek_prefix_reads_the_first_eight_bytes_only() {
    let f = frame(
        &header(ApiKey::Fetch, 12, -7),
        &RequestKind::Fetch(fetch(12)),
    );
    let p = peek_prefix(&f).unwrap();
    assert_eq!(
        p,
        RequestPrefix {
            api_key: 1,
            api_version: 12,
            correlation_id: -7
        }
    );
    assert_eq!(
        peek_prefix(&[0, 1, 0, 2, 0, 0, 0, 9])
            .unwrap()
            .correlation_id,
        9
    );
    let err = peek_prefix(&[0, 1, 0, 2, 0, 0, 0]).unwrap_err();
    assert_eq!(err.kind(), CodecErrorKind::Malformed);
}

#[test]
fn non_produce_frames_are_limited_to_8_mib() {
    let mut f = BytesMut::from(
        &frame(
            &header(ApiKey::Metadata, 1, 1),
            &RequestKind::Metadata(metadata(1)),
        )[..],
    );
    f.resize(MAX_NON_PRODUCE_FRAME + 1, 0);
    let err = decode_request(f.freeze()).unwrap_err();
    assert_eq!(err.kind(), CodecErrorKind::FrameTooLarge);

    let records = Bytes::from(vec![7u8; MAX_NON_PRODUCE_FRAME + 1]);
    let body = RequestKind::Produce(produce(records));
    let decoded = decode_request(frame(&header(ApiKey::Produce, 9, 1), &body)).unwrap();
    assert_eq!(decoded.body, body);
}

#[test]
fn encode_request_checks_the_body_matches_the_header() {
    let err = encode_request(
        &header(ApiKey::Fetch, 12, 1),
        &RequestKind::Metadata(metadata(12)),
    )
    .unwrap_err();
    assert_eq!(err.kind(), CodecErrorKind::Encode);
    let err = encode_request(
        &header(ApiKey::Metadata, 99, 1),
        &RequestKind::Metadata(metadata(12)),
    )
    .unwrap_err();
    assert_eq!(err.kind(), CodecErrorKind::UnsupportedApi);
}

fn api_versions_response() -> ApiVersionsResponse {
    ApiVersionsResponse::default().with_api_keys(vec![
        ApiVersion::default()
            .with_api_key(3)
            .with_min_version(0)
            .with_max_version(12),
    ])
}

#[test]
fn api_versions_responses_use_header_v0_at_every_version() {
    for version in 0..=4 {
        let body = api_versions_response();
        let out = encode_response(
            ApiKey::ApiVersions,
            version,
            77,
            &ResponseKind::ApiVersions(body.clone()),
        )
        .unwrap()
        .freeze();
        assert_eq!(
            i32::from_be_bytes(out[..4].try_into().unwrap()) as usize,
            out.len() - 4
        );
        assert_eq!(i32::from_be_bytes(out[4..8].try_into().unwrap()), 77);
        // Header v0 is the correlation id alone: the body starts right after.
        let decoded: ApiVersionsResponse = decode_guarded(out.slice(8..), version).unwrap();
        assert_eq!(decoded, body);
        let whole = decode_response(ApiKey::ApiVersions, version, out.slice(4..)).unwrap();
        assert_eq!(whole.header.correlation_id, 77);
        assert_eq!(whole.body, ResponseKind::ApiVersions(body));
    }
}

#[test]
fn flexible_responses_use_header_v1() {
    let body = MetadataResponse::default()
        .with_brokers(vec![
            MetadataResponseBroker::default()
                .with_node_id(BrokerId(1))
                .with_host(StrBytes::from_static_str("localhost"))
                .with_port(9092),
        ])
        .with_topics(vec![
            MetadataResponseTopic::default().with_name(Some(topic("orders"))),
        ]);
    let out = encode_response(
        ApiKey::Metadata,
        9,
        i32::MAX,
        &ResponseKind::Metadata(body.clone()),
    )
    .unwrap()
    .freeze();
    assert_eq!(
        out[8], 0,
        "header v1 ends with an empty tagged-field section"
    );
    let whole = decode_response(ApiKey::Metadata, 9, out.slice(4..)).unwrap();
    assert_eq!(whole.header.correlation_id, i32::MAX);
    assert_eq!(whole.body, ResponseKind::Metadata(body));
}

#[test]
fn encode_response_refuses_a_body_of_another_api() {
    let err = encode_response(
        ApiKey::Metadata,
        9,
        1,
        &ResponseKind::ApiVersions(api_versions_response()),
    )
    .unwrap_err();
    assert_eq!(err.kind(), CodecErrorKind::Encode);
}

#[tokio::test]
async fn read_frame_reads_frames_back_to_back_then_none() {
    let a = encode_request(
        &header(ApiKey::Metadata, 1, 1),
        &RequestKind::Metadata(metadata(1)),
    )
    .unwrap();
    let b = encode_request(
        &header(ApiKey::Fetch, 12, 2),
        &RequestKind::Fetch(fetch(12)),
    )
    .unwrap();
    let mut wire = Vec::new();
    wire.extend_from_slice(&a);
    wire.extend_from_slice(&b);
    let mut r = &wire[..];
    let first = read_frame(&mut r, DEFAULT_MAX_FRAME)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(first, a[4..]);
    let second = read_frame(&mut r, DEFAULT_MAX_FRAME)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(decode_request(second).unwrap().header.correlation_id, 2);
    assert!(
        read_frame(&mut r, DEFAULT_MAX_FRAME)
            .await
            .unwrap()
            .is_none()
    );
}

#[tokio::test]
async fn read_frame_refuses_negative_and_oversized_lengths_before_the_body() {
    for len in [-1i32, i32::MIN, 1025, i32::MAX] {
        let wire = len.to_be_bytes();
        let mut r = &wire[..];
        let err = read_frame(&mut r, 1024).await.unwrap_err();
        assert_eq!(err.kind(), CodecErrorKind::FrameTooLarge, "{len}");
        assert!(err.to_string().contains(&len.to_string()), "{err}");
    }
    // Exactly the limit is fine.
    let mut wire = 4i32.to_be_bytes().to_vec();
    wire.extend_from_slice(&[1, 2, 3, 4]);
    let mut r = &wire[..];
    assert_eq!(
        read_frame(&mut r, 4).await.unwrap().unwrap().as_ref(),
        &[1, 2, 3, 4]
    );
}

#[tokio::test]
async fn read_frame_reports_eof_inside_a_frame() {
    let mut r: &[u8] = &[0, 0];
    let err = read_frame(&mut r, 1024).await.unwrap_err();
    assert_eq!(err.kind(), CodecErrorKind::Io);

    // A peer announcing 100 MiB and sending 3 bytes: an error, not a 100 MiB
    // buffer waiting to be filled.
    let (mut client, mut server) = tokio::io::duplex(64);
    let writer = tokio::spawn(async move {
        use tokio::io::AsyncWriteExt;
        client
            .write_all(&(100i32 << 20).to_be_bytes())
            .await
            .unwrap();
        client.write_all(&[1, 2, 3]).await.unwrap();
    });
    let err = read_frame(&mut server, DEFAULT_MAX_FRAME)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), CodecErrorKind::Io);
    writer.await.unwrap();
}

#[tokio::test]
async fn read_frame_returns_none_on_clean_eof() {
    let mut r: &[u8] = &[];
    assert!(read_frame(&mut r, 1024).await.unwrap().is_none());
}

/// Env var that turns [`alloc_child_entry`] into a child process body.
const CHILD_ENV: &str = "FLOE_CODEC_ALLOC_CHILD";
/// Address-space limit for the child, in KiB (`ulimit -v`): 2 GiB, far
/// above what the test needs and far below what the hostile count asks.
const CHILD_AS_LIMIT_KIB: u64 = 2 * 1024 * 1024;

/// The hostile body: a Metadata v1 topics count of 2^31-1 and nothing else.
const HOSTILE_METADATA_V1: [u8; 4] = [0x7f, 0xff, 0xff, 0xff];

/// Does nothing in a normal run. In the child process started by the tests
/// below, decodes the hostile body and exits 0 if the decode returned.
#[test]
fn alloc_child_entry() {
    let mode = std::env::var(CHILD_ENV).unwrap_or_default();
    let input = Bytes::from_static(&HOSTILE_METADATA_V1);
    let returned = match mode.as_str() {
        "unguarded" => MetadataRequest::decode(&mut input.clone(), 1).is_err(),
        "guarded" => decode_guarded::<MetadataRequest>(input, 1).is_err(),
        _ => return,
    };
    std::process::exit(if returned { 0 } else { 1 });
}

/// Runs [`alloc_child_entry`] in a child process under an address-space
/// limit, so that a huge reservation fails even where the kernel would
/// overcommit it.
fn run_alloc_child(mode: &str) -> std::process::ExitStatus {
    let exe = std::env::current_exe().unwrap();
    std::process::Command::new("/bin/sh")
        .arg("-c")
        .arg(format!(
            "ulimit -v {CHILD_AS_LIMIT_KIB} && exec \"$0\" --exact \
             codec::tests::alloc_child_entry --test-threads=1 --quiet"
        ))
        .arg(exe)
        .env(CHILD_ENV, mode)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap()
}

#[test]
fn unguarded_decode_of_a_four_byte_count_aborts_the_process() {
    use std::os::unix::process::ExitStatusExt;
    let status = run_alloc_child("unguarded");
    // The crate reserves 2^31-1 topics before reading one: the allocation
    // fails and Rust aborts (SIGABRT). Nothing to catch.
    assert_eq!(status.signal(), Some(6), "child status: {status:?}");
}

#[test]
fn guarded_decode_of_the_same_bytes_returns_an_error() {
    let status = run_alloc_child("guarded");
    assert!(status.success(), "child status: {status:?}");
}

/// A flexible Produce (v9) naming `topics` topics with empty names and no
/// partitions: three bytes on the wire each, 96 bytes decoded.
fn produce_of_empty_topics(topics: usize) -> Bytes {
    let mut body = ProduceRequest::default()
        .with_acks(1)
        .with_timeout_ms(30_000);
    body.topic_data = (0..topics).map(|_| TopicProduceData::default()).collect();
    frame(&header(ApiKey::Produce, 9, 7), &RequestKind::Produce(body))
}

#[test]
fn produce_that_would_decode_into_too_much_memory_is_refused() {
    // 200,000 empty topics: a 600 KB frame that would decode into ~19 MB
    // of structs (and a 100 MiB one into 3.3 GB). The guard counts ~77 MB
    // by its estimate, over 1 MiB + 64 × the frame (39 MB).
    let f = produce_of_empty_topics(200_000);
    assert!(f.len() < 700_000, "{}", f.len());
    let budget = decode_budget(f.len(), DEFAULT_MAX_DECODE_BYTES);
    assert!(budget < 45 * 1024 * 1024, "{budget}");
    let why = assert_malformed(f.clone());
    assert!(why.contains("bytes of memory"), "{why}");
    // A small cap refuses it too; an unlimited one lets it through.
    assert!(decode_request_within(f.clone(), 1024 * 1024).is_err());
    assert!(
        decode_request_within(f.clone(), usize::MAX).is_err(),
        "the frame-tied part still applies"
    );
    let small = produce_of_empty_topics(1_000);
    assert!(
        decode_request(small).is_ok(),
        "a thousand topics are within the floor"
    );
}

#[test]
fn produce_to_many_partitions_with_records_fits_the_budget() {
    // What a busy producer sends: 2,000 partitions of 5 topics, each with
    // a small record set (the smallest record batch is 61 bytes).
    let records = Bytes::from(vec![7u8; 70]);
    let mut body = ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(30_000);
    body.topic_data = (0..5)
        .map(|t| {
            let mut td = TopicProduceData::default()
                .with_name(TopicName(StrBytes::from_string(format!("topic-{t}"))));
            td.partition_data = (0..400)
                .map(|p| {
                    PartitionProduceData::default()
                        .with_index(p)
                        .with_records(Some(records.clone()))
                })
                .collect();
            td
        })
        .collect();
    for version in [3, 9] {
        let mut b = body.clone();
        b.transactional_id = None;
        let f = frame(
            &header(ApiKey::Produce, version, 1),
            &RequestKind::Produce(b),
        );
        let decoded = decode_request(f).unwrap();
        let RequestKind::Produce(p) = decoded.body else {
            panic!("not a produce");
        };
        assert_eq!(p.topic_data.len(), 5);
    }
}

#[test]
fn metadata_naming_many_short_topics_fits_the_budget() {
    for version in [1, 9, 12] {
        let mut body = MetadataRequest::default();
        body.topics = Some(
            (0..50_000)
                .map(|i| {
                    MetadataRequestTopic::default()
                        .with_name(Some(TopicName(StrBytes::from_string(format!("t{i}")))))
                })
                .collect(),
        );
        let f = frame(
            &header(ApiKey::Metadata, version, 1),
            &RequestKind::Metadata(body),
        );
        decode_request(f).unwrap();
    }
}

/// The fuzz seeds of the share requests (`fuzz/corpus/kafka_requests/share*`)
/// decode as what they are named after and re-encode to the same bytes, so
/// the fuzzer starts from frames that reach the share decoders.
#[test]
fn the_share_request_seeds_decode_and_re_encode() {
    let dir =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/kafka_requests");
    for (file, key) in [
        ("sharegroupheartbeat_v1", ApiKey::ShareGroupHeartbeat),
        ("sharegroupdescribe_v1", ApiKey::ShareGroupDescribe),
        ("sharefetch_v1", ApiKey::ShareFetch),
        ("shareacknowledge_v1", ApiKey::ShareAcknowledge),
        (
            "describesharegroupoffsets_v0",
            ApiKey::DescribeShareGroupOffsets,
        ),
        ("altersharegroupoffsets_v0", ApiKey::AlterShareGroupOffsets),
        (
            "deletesharegroupoffsets_v0",
            ApiKey::DeleteShareGroupOffsets,
        ),
    ] {
        let bytes = Bytes::from(std::fs::read(dir.join(file)).unwrap());
        let decoded = decode_request(bytes.clone()).unwrap();
        let version = if file.ends_with("_v0") { 0 } else { 1 };
        assert_eq!((decoded.api_key, decoded.version), (key, version), "{file}");
        let again = encode_request(&decoded.header, &decoded.body).unwrap();
        assert_eq!(&again[4..], &bytes[..], "{file}");
    }
}

/// The fuzz seeds of the describe requests `floe` and admin clients send
/// (`fuzz/corpus/kafka_requests/describe{logdirs,topicpartitions,producers}_v*`)
/// decode as what they are named after and re-encode to the same bytes.
#[test]
fn the_describe_request_seeds_decode_and_re_encode() {
    let dir =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/kafka_requests");
    for (prefix, key) in [
        ("describelogdirs", ApiKey::DescribeLogDirs),
        ("describetopicpartitions", ApiKey::DescribeTopicPartitions),
        ("describeproducers", ApiKey::DescribeProducers),
    ] {
        let range = key.valid_versions();
        for version in range.min..=range.max {
            let file = format!("{prefix}_v{version}");
            let bytes = Bytes::from(std::fs::read(dir.join(&file)).unwrap());
            let decoded = decode_request(bytes.clone()).unwrap();
            assert_eq!((decoded.api_key, decoded.version), (key, version), "{file}");
            let again = encode_request(&decoded.header, &decoded.body).unwrap();
            assert_eq!(&again[4..], &bytes[..], "{file}");
        }
    }
}
