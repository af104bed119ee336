//! Kafka frames on the wire: reading size-prefixed frames, decoding requests
//! through an allocation guard, and encoding responses (and requests, for
//! Floe's own client and tests).
//!
//! Message types come from kafka-protocol. Its decoders trust array counts
//! from the wire when they reserve memory, so every decode here goes through
//! the allocation guard in `codec/guard.rs` (its docs give the argument and
//! the one assumption it makes about the crate's schemas). Frames are size-limited before decoding:
//! [`DEFAULT_MAX_FRAME`] when reading, [`MAX_NON_PRODUCE_FRAME`] for every
//! request but Produce.
//!
//! Trailing bytes after a body are ignored. Kafka's broker does the same: it
//! parses the body from the frame's buffer and does not check that the buffer
//! was used up. Rejecting them would buy nothing here, since the guard
//! bounds reservations by the bytes left, trailing or not.

mod fetch;
mod frame;
mod guard;
mod kinds;
#[cfg(test)]
mod tests;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, RequestHeader, RequestKind, ResponseHeader, ResponseKind};
use kafka_protocol::protocol::{Decodable, Encodable, VersionRange};

pub use fetch::{FetchAnswer, Frame, encode_fetch_response};
pub use frame::{eof_in_length, frame_len, read_frame, read_frame_body, read_frame_len};
use guard::{BoxError, DecodeFailure, MemoryBudget};

/// Largest frame read from a connection (Kafka's `socket.request.max.bytes`).
pub const DEFAULT_MAX_FRAME: usize = 100 * 1024 * 1024;

/// Largest frame for a request other than Produce. Only Produce carries
/// bulk data; everything else is metadata-sized, and a smaller limit keeps
/// the memory a hostile request can make the decoder reserve small.
pub const MAX_NON_PRODUCE_FRAME: usize = 8 * 1024 * 1024;

/// Default for the memory one decoded request may take beyond its frame
/// (`--max-request-decode-bytes`); see [`decode_budget`].
pub const DEFAULT_MAX_DECODE_BYTES: usize = 64 * 1024 * 1024;

/// A decoded message may take at most this many times its frame size ...
pub const DECODE_BYTES_PER_FRAME_BYTE: usize = 64;

/// ... plus this much, so that small requests are never refused.
pub const DECODE_BYTES_FLOOR: usize = 1024 * 1024;

/// The memory the guard lets the decode of a `frame_len`-byte frame take:
/// `1 MiB + 64 × frame_len`, and never more than `max_decode_bytes`.
/// Tying it to the frame size bounds what the decoded requests of a
/// connection (or of the proxy) hold by the request bytes in flight; the
/// flag bounds one request. A real client's request takes a few times its
/// size at most (Produce: about 6× as the guard counts, most of it the
/// records, which are not copied), so neither refuses a normal request.
pub fn decode_budget(frame_len: usize, max_decode_bytes: usize) -> usize {
    frame_len
        .saturating_mul(DECODE_BYTES_PER_FRAME_BYTE)
        .saturating_add(DECODE_BYTES_FLOOR)
        .min(max_decode_bytes)
}

/// Bytes of a request that identify it: api key, version, correlation id.
const PREFIX_LEN: usize = 8;

/// What went wrong, for callers that branch on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CodecErrorKind {
    /// The connection failed or closed inside a frame.
    Io,
    /// A frame length was negative or over the limit.
    FrameTooLarge,
    /// An api key or version kafka-protocol cannot decode.
    UnsupportedApi,
    /// The bytes are not a valid message (or the guard refused them).
    Malformed,
    /// A message could not be encoded.
    Encode,
}

/// Errors of the codec. None of them is worth retrying on the same bytes:
/// Kafka closes the connection on all of them except an unsupported
/// ApiVersions version, which it answers.
#[derive(Debug, thiserror::Error)]
pub enum CodecError {
    /// Reading the connection failed, or it closed inside a frame.
    #[error("connection read failed: {0}")]
    Io(#[from] std::io::Error),
    /// A frame length prefix was negative or larger than the limit.
    #[error("frame length {len} is outside 0..={max}")]
    FrameTooLarge {
        /// The length announced (or the frame's size).
        len: i64,
        /// The limit that applied.
        max: usize,
    },
    /// The api key is unknown, or the version outside what kafka-protocol
    /// supports for it.
    #[error("unsupported api key {api_key} version {api_version}")]
    UnsupportedApi {
        /// The api key read from the frame.
        api_key: i16,
        /// The version read from the frame.
        api_version: i16,
    },
    /// The bytes do not decode as the message they claim to be.
    #[error("malformed {what}: {reason}")]
    Malformed {
        /// What was being decoded, e.g. `Fetch v12 request`.
        what: String,
        /// Why it failed.
        reason: String,
    },
    /// A message could not be encoded.
    #[error("cannot encode {what}: {reason}")]
    Encode {
        /// What was being encoded.
        what: String,
        /// Why it failed.
        reason: String,
    },
}

impl CodecError {
    /// The kind of error, to branch on.
    pub fn kind(&self) -> CodecErrorKind {
        match self {
            Self::Io(_) => CodecErrorKind::Io,
            Self::FrameTooLarge { .. } => CodecErrorKind::FrameTooLarge,
            Self::UnsupportedApi { .. } => CodecErrorKind::UnsupportedApi,
            Self::Malformed { .. } => CodecErrorKind::Malformed,
            Self::Encode { .. } => CodecErrorKind::Encode,
        }
    }
}

fn malformed(what: impl Into<String>, failure: DecodeFailure) -> CodecError {
    CodecError::Malformed {
        what: what.into(),
        reason: failure.to_string(),
    }
}

fn encode_failed(what: impl std::fmt::Display, reason: impl std::fmt::Display) -> CodecError {
    CodecError::Encode {
        what: what.to_string(),
        reason: format!("{reason:#}"),
    }
}

/// The header fields readable from any request frame without decoding it,
/// so that the caller can answer requests it cannot decode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestPrefix {
    /// The api key, known to kafka-protocol or not.
    pub api_key: i16,
    /// The api version, supported or not.
    pub api_version: i16,
    /// The correlation id to answer with.
    pub correlation_id: i32,
}

/// Reads the api key, version and correlation id at the start of a request
/// frame (the body after the length prefix).
pub fn peek_prefix(frame: &[u8]) -> Result<RequestPrefix, CodecError> {
    let short = || CodecError::Malformed {
        what: "request header".into(),
        reason: format!(
            "frame of {} bytes, a header needs {PREFIX_LEN}",
            frame.len()
        ),
    };
    let mut b = frame;
    let api_key = b.try_get_i16().map_err(|_| short())?;
    let api_version = b.try_get_i16().map_err(|_| short())?;
    let correlation_id = b.try_get_i32().map_err(|_| short())?;
    Ok(RequestPrefix {
        api_key,
        api_version,
        correlation_id,
    })
}

/// Which side of an exchange a version check or a message is.
#[derive(Clone, Copy)]
enum Side {
    Request,
    Response,
}

/// A message named in errors, e.g. `Fetch v12 request` (formatted only
/// when an error happens).
#[derive(Clone, Copy)]
struct Subject {
    api_key: ApiKey,
    version: i16,
    side: Side,
}

impl std::fmt::Display for Subject {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let side = match self.side {
            Side::Request => "request",
            Side::Response => "response",
        };
        write!(f, "{:?} v{} {side}", self.api_key, self.version)
    }
}

/// The request versions this codec decodes and encodes for `api_key`: those
/// in `ApiKey::valid_versions` that the request type also supports (for a few
/// apis kafka-protocol 0.18's key table lists a version its message type
/// cannot decode, e.g. OffsetFetch v10).
pub fn supported_versions(api_key: ApiKey) -> VersionRange {
    api_key
        .valid_versions()
        .intersect(&kinds::request_type_range(api_key))
}

/// The api key, if kafka-protocol knows it and supports `version` for it on
/// that `side`.
fn supported_api(api_key: i16, api_version: i16, side: Side) -> Result<ApiKey, CodecError> {
    ApiKey::try_from(api_key)
        .ok()
        .filter(|k| {
            let range = match side {
                Side::Request => supported_versions(*k),
                Side::Response => k
                    .valid_versions()
                    .intersect(&kinds::response_type_range(*k)),
            };
            (range.min..=range.max).contains(&api_version)
        })
        .ok_or(CodecError::UnsupportedApi {
            api_key,
            api_version,
        })
}

/// A decoded request.
#[derive(Debug, Clone, PartialEq)]
pub struct DecodedRequest {
    /// The request header (at the header version for this api and version).
    pub header: RequestHeader,
    /// The api key, from the header.
    pub api_key: ApiKey,
    /// The api version, from the header.
    pub version: i16,
    /// The request body.
    pub body: RequestKind,
}

/// Decodes a request frame (the bytes after the length prefix): the header
/// at the header version kafka-protocol gives for the api key and version,
/// then the body, both through the guard.
///
/// An unknown api key or a version outside [`supported_versions`] is
/// [`CodecError::UnsupportedApi`]; a frame over [`MAX_NON_PRODUCE_FRAME`] for
/// anything but Produce is [`CodecError::FrameTooLarge`]. Trailing bytes are
/// ignored (see the module docs). The decoded request may take the memory
/// [`decode_budget`] gives with [`DEFAULT_MAX_DECODE_BYTES`].
pub fn decode_request(frame: Bytes) -> Result<DecodedRequest, CodecError> {
    decode_request_within(frame, DEFAULT_MAX_DECODE_BYTES)
}

/// [`decode_request`] with `max_decode_bytes` as the cap of
/// [`decode_budget`]: a request whose decoding would take more is
/// [`CodecError::Malformed`], and nothing more is allocated for it.
pub fn decode_request_within(
    frame: Bytes,
    max_decode_bytes: usize,
) -> Result<DecodedRequest, CodecError> {
    let budget = MemoryBudget {
        bytes: decode_budget(frame.len(), max_decode_bytes),
    };
    let prefix = peek_prefix(&frame)?;
    let api_key = supported_api(prefix.api_key, prefix.api_version, Side::Request)?;
    let version = prefix.api_version;
    if api_key != ApiKey::Produce && frame.len() > MAX_NON_PRODUCE_FRAME {
        return Err(CodecError::FrameTooLarge {
            len: i64::try_from(frame.len()).unwrap_or(i64::MAX),
            max: MAX_NON_PRODUCE_FRAME,
        });
    }
    let header_version = api_key.request_header_version(version);
    let (header, body) = guard::decode_two_pass(&frame, budget, |b| {
        RequestHeader::decode(b, header_version).map_err(BoxError::from)
    })
    .map_err(|e| malformed(format!("{api_key:?} v{version} request header"), e))?;
    let (body, _trailing) = guard::decode_two_pass(&body, budget, |b| {
        kinds::decode_request_body(api_key, b, version)
    })
    .map_err(|e| malformed(format!("{api_key:?} v{version} request"), e))?;
    Ok(DecodedRequest {
        header,
        api_key,
        version,
        body,
    })
}

/// A decoded response.
#[derive(Debug, Clone, PartialEq)]
pub struct DecodedResponse {
    /// The response header.
    pub header: ResponseHeader,
    /// The response body.
    pub body: ResponseKind,
}

/// The response header version: as kafka-protocol says, except that
/// ApiVersions responses always use v0 (so that a client that sent a version
/// the broker does not know can still read the answer).
fn response_header_version(api_key: ApiKey, version: i16) -> i16 {
    if api_key == ApiKey::ApiVersions {
        0
    } else {
        api_key.response_header_version(version)
    }
}

/// Decodes a response frame (after the length prefix) to a request sent as
/// `api_key` at `version`, through the guard. For Floe's own client.
pub fn decode_response(
    api_key: ApiKey,
    version: i16,
    frame: Bytes,
) -> Result<DecodedResponse, CodecError> {
    supported_api(api_key as i16, version, Side::Response)?;
    let budget = MemoryBudget {
        bytes: decode_budget(frame.len(), DEFAULT_MAX_DECODE_BYTES),
    };
    let header_version = response_header_version(api_key, version);
    let (header, body) = guard::decode_two_pass(&frame, budget, |b| {
        ResponseHeader::decode(b, header_version).map_err(BoxError::from)
    })
    .map_err(|e| malformed(format!("{api_key:?} v{version} response header"), e))?;
    let (body, _trailing) = guard::decode_two_pass(&body, budget, |b| {
        kinds::decode_response_body(api_key, b, version)
    })
    .map_err(|e| malformed(format!("{api_key:?} v{version} response"), e))?;
    Ok(DecodedResponse { header, body })
}

/// Decodes any kafka-protocol message at `version` through the guard.
/// Trailing bytes are ignored.
pub fn decode_guarded<T: Decodable>(buf: Bytes, version: i16) -> Result<T, CodecError> {
    let budget = MemoryBudget {
        bytes: decode_budget(buf.len(), DEFAULT_MAX_DECODE_BYTES),
    };
    guard::decode_two_pass(&buf, budget, |b| {
        T::decode(b, version).map_err(BoxError::from)
    })
    .map(|(value, _trailing)| value)
    .map_err(|e| {
        let name = std::any::type_name::<T>();
        let short = name.rsplit("::").next().unwrap_or(name);
        malformed(format!("{short} v{version}"), e)
    })
}

/// Starts a frame: room for the length prefix, filled in by [`finish_frame`].
fn start_frame() -> BytesMut {
    let mut out = BytesMut::with_capacity(256);
    out.put_i32(0);
    out
}

fn finish_frame(mut out: BytesMut, what: Subject) -> Result<BytesMut, CodecError> {
    let len = out.len() - 4;
    let len = i32::try_from(len)
        .map_err(|_| encode_failed(what, format_args!("{len} bytes do not fit a frame")))?;
    out[..4].copy_from_slice(&len.to_be_bytes());
    Ok(out)
}

/// Encodes a whole response frame: the length prefix, the response header
/// (v0 for ApiVersions, else the version kafka-protocol gives for this api
/// key and version) and the body.
pub fn encode_response(
    api_key: ApiKey,
    version: i16,
    correlation_id: i32,
    body: &ResponseKind,
) -> Result<BytesMut, CodecError> {
    let what = Subject {
        api_key,
        version,
        side: Side::Response,
    };
    match kinds::response_api_key(body) {
        Some(k) if k == api_key => {}
        other => {
            return Err(encode_failed(
                what,
                format_args!("the body is a {other:?} response"),
            ));
        }
    }
    supported_api(api_key as i16, version, Side::Response)?;
    let mut out = start_frame();
    ResponseHeader::default()
        .with_correlation_id(correlation_id)
        .encode(&mut out, response_header_version(api_key, version))
        .map_err(|e| encode_failed(what, e))?;
    body.encode(&mut out, version)
        .map_err(|e| encode_failed(what, e))?;
    finish_frame(out, what)
}

/// Encodes a whole request frame: the length prefix, the header (at the
/// header version for its api key and version) and the body, whose kind
/// must match the header's api key.
pub fn encode_request(header: &RequestHeader, body: &RequestKind) -> Result<BytesMut, CodecError> {
    let api_key = supported_api(
        header.request_api_key,
        header.request_api_version,
        Side::Request,
    )?;
    let version = header.request_api_version;
    let what = Subject {
        api_key,
        version,
        side: Side::Request,
    };
    match kinds::request_api_key(body) {
        Some(k) if k == api_key => {}
        other => {
            return Err(encode_failed(
                what,
                format_args!("the body is a {other:?} request"),
            ));
        }
    }
    let mut out = start_frame();
    header
        .encode(&mut out, api_key.request_header_version(version))
        .map_err(|e| encode_failed(what, e))?;
    body.encode(&mut out, version)
        .map_err(|e| encode_failed(what, e))?;
    finish_frame(out, what)
}
