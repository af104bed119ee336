//! Fuzzes the proxy's guarded Kafka decoding on arbitrary bytes.
//!
//! The input is a request frame without its length prefix (api key, version,
//! correlation id, client id, body), given to `peek_prefix` and
//! `decode_request`. Whatever decodes must re-encode, and the re-encoded frame
//! must decode and encode to the same bytes. The same input is then read as a
//! response: its first four bytes pick the api key and version, the rest is
//! the response frame given to `decode_response`.
//!
//! Nothing may panic, and no input may make the decoder reserve memory out of
//! proportion to its size: run with `-malloc_limit_mb=512` (as `run.sh` does),
//! so that one oversized reservation is reported as a crash.
//!
//! The decode memory budget is checked too: a request refused for memory is
//! `Malformed`, and the budget only ever refuses, never changes what decodes
//! (whatever decodes within a tight budget decodes the same way with the
//! default one).

#![no_main]

use bytes::Bytes;
use floe_proxy::codec::{self, CodecErrorKind};
use kafka_protocol::messages::ApiKey;
use libfuzzer_sys::fuzz_target;

/// How the guard words a refused varint (see `proxy/src/codec/guard.rs`).
const GUARD_REFUSAL: &str = "varint length or count";

/// A tight budget: the guard's frame-tied floor is 1 MiB, so cap below it.
const TIGHT_BUDGET: usize = 64 * 1024;

fn request(data: &[u8]) {
    let tight = codec::decode_request_within(Bytes::copy_from_slice(data), TIGHT_BUDGET);
    if let Err(e) = &tight {
        assert_ne!(e.kind(), CodecErrorKind::Io);
        assert_ne!(e.kind(), CodecErrorKind::Encode);
    }
    let prefix = codec::peek_prefix(data);
    assert_eq!(prefix.is_ok(), data.len() >= 8);
    let decoded = match codec::decode_request(Bytes::copy_from_slice(data)) {
        Ok(d) => d,
        Err(e) => {
            assert_ne!(e.kind(), CodecErrorKind::Io);
            assert_ne!(e.kind(), CodecErrorKind::Encode);
            assert!(
                tight.is_err(),
                "a tight budget decoded what the default refused"
            );
            return;
        }
    };
    if let Ok(t) = &tight {
        assert_eq!(
            codec::encode_request(&t.header, &t.body).ok(),
            codec::encode_request(&decoded.header, &decoded.body).ok(),
            "a tight budget changed what decodes"
        );
    }
    let prefix = prefix.expect("a decoded frame has a prefix");
    assert_eq!(prefix.api_key, decoded.api_key as i16);
    assert_eq!(prefix.api_version, decoded.version);
    assert_eq!(prefix.correlation_id, decoded.header.correlation_id);
    assert_eq!(decoded.header.request_api_key, prefix.api_key);
    assert_eq!(decoded.header.request_api_version, prefix.api_version);

    // Compared as bytes, not values: float fields may hold NaN.
    let first = codec::encode_request(&decoded.header, &decoded.body)
        .expect("a decoded request re-encodes")
        .freeze();
    let again = match codec::decode_request(first.slice(4..)) {
        Ok(again) => again,
        // The guard's one false positive: an unknown tag above 16383 that is
        // larger than what follows it. Trailing bytes in the input could make
        // it fit there; the re-encoded frame has none.
        Err(e) if e.to_string().contains(GUARD_REFUSAL) => return,
        Err(e) => panic!("a re-encoded request does not decode: {e}"),
    };
    let second = codec::encode_request(&again.header, &again.body)
        .expect("a re-decoded request re-encodes")
        .freeze();
    assert_eq!(first, second);
}

fn response(data: &[u8]) {
    let [k0, k1, v0, v1, rest @ ..] = data else {
        return;
    };
    let Ok(api_key) = ApiKey::try_from(i16::from_be_bytes([*k0, *k1])) else {
        return;
    };
    let version = i16::from_be_bytes([*v0, *v1]);
    let decoded = match codec::decode_response(api_key, version, Bytes::copy_from_slice(rest)) {
        Ok(d) => d,
        Err(_) => return,
    };
    let first = codec::encode_response(
        api_key,
        version,
        decoded.header.correlation_id,
        &decoded.body,
    )
    .expect("a decoded response re-encodes")
    .freeze();
    let again = match codec::decode_response(api_key, version, first.slice(4..)) {
        Ok(again) => again,
        Err(e) if e.to_string().contains(GUARD_REFUSAL) => return,
        Err(e) => panic!("a re-encoded response does not decode: {e}"),
    };
    let second = codec::encode_response(api_key, version, again.header.correlation_id, &again.body)
        .expect("a re-decoded response re-encodes")
        .freeze();
    assert_eq!(first, second);
}

fuzz_target!(|data: &[u8]| {
    request(data);
    response(data);
});
