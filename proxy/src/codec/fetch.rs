//! Fetch answers whose record bytes are sent as the owners returned them.
//!
//! A Fetch answer is mostly record bytes. Encoded the usual way, they are
//! copied twice more than they need be: once to join the pieces an owner
//! returned into the one buffer a partition's `records` field holds, and
//! once into the response frame. The profile of a catch-up read put a
//! quarter of the broker's CPU there (with the page faults of the large
//! fresh buffers). Here the rest of the answer is encoded with a small
//! marker in place of each partition's records, and the frame is sent as
//! chunks: the encoded parts around the markers, each records field's
//! length prefix, and the record pieces themselves, uncopied. The chunks
//! joined are byte for byte the usual encoding (tested for every version).

use bytes::Bytes;
use kafka_protocol::messages::{ApiKey, FetchResponse, ResponseKind};

use super::{CodecError, Side, Subject, encode_failed, encode_response};

/// A Fetch response with, apart, the record bytes of its partitions:
/// `records[i]` are those of the i-th partition (topics, then partitions,
/// in order), in pieces. Where they are empty, the partition's own
/// `records` field is sent as it is.
#[derive(Debug, Clone, Default)]
pub struct FetchAnswer {
    pub resp: FetchResponse,
    pub records: Vec<Vec<Bytes>>,
}

impl FetchAnswer {
    /// The response with every partition's pieces joined into its
    /// `records` field: the plain message, which the chunks must equal.
    #[cfg(test)]
    pub fn into_response(mut self) -> FetchResponse {
        let mut i = 0;
        for t in &mut self.resp.responses {
            for p in &mut t.partitions {
                if let Some(pieces) = self.records.get_mut(i).filter(|v| !v.is_empty()) {
                    p.records = Some(join(std::mem::take(pieces)));
                } else if p.records.is_none() {
                    p.records = Some(Bytes::new());
                }
                i += 1;
            }
        }
        self.resp
    }
}

/// A response frame: one buffer, or chunks to be written in order.
#[derive(Debug)]
pub enum Frame {
    One(bytes::BytesMut),
    Chunks(Vec<Bytes>),
}

impl Frame {
    /// Its size in bytes, the length prefix included.
    pub fn len(&self) -> usize {
        match self {
            Frame::One(b) => b.len(),
            Frame::Chunks(c) => c.iter().map(Bytes::len).sum(),
        }
    }

    /// Whether it holds no bytes (never, for an encoded frame).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Its bytes in one buffer (the connection writes the chunks).
    #[cfg(test)]
    pub fn to_bytes(&self) -> Bytes {
        match self {
            Frame::One(b) => Bytes::copy_from_slice(b),
            Frame::Chunks(c) => join(c.clone()),
        }
    }
}

#[cfg(test)]
fn join(pieces: Vec<Bytes>) -> Bytes {
    match pieces.len() {
        1 => pieces.into_iter().next().unwrap_or_default(),
        _ => {
            let mut b = bytes::BytesMut::with_capacity(pieces.iter().map(Bytes::len).sum());
            for p in pieces {
                b.extend_from_slice(&p);
            }
            b.freeze()
        }
    }
}

/// The length prefix of a `records` field of `len` bytes at `version`:
/// a 32-bit length before v12, an unsigned varint of `len + 1` (compact
/// bytes) from v12.
fn records_prefix(version: i16, len: usize) -> Vec<u8> {
    if version >= 12 {
        let mut v = (len as u64) + 1;
        let mut out = Vec::with_capacity(5);
        loop {
            let byte = (v & 0x7f) as u8;
            v >>= 7;
            if v == 0 {
                out.push(byte);
                return out;
            }
            out.push(byte | 0x80);
        }
    } else {
        (len as i32).to_be_bytes().to_vec()
    }
}

const MARKER_LEN: usize = 16;

/// Encodes a whole Fetch response frame, its record pieces sent as they are.
pub fn encode_fetch_response(
    version: i16,
    correlation_id: i32,
    answer: FetchAnswer,
) -> Result<Frame, CodecError> {
    let what = Subject {
        api_key: ApiKey::Fetch,
        version,
        side: Side::Response,
    };
    let FetchAnswer {
        mut resp,
        mut records,
    } = answer;
    // Markers unique to this answer: a random 12-byte prefix and the index.
    let nonce = uuid::Uuid::new_v4();
    let mut subs: Vec<([u8; MARKER_LEN], Vec<Bytes>)> = Vec::new();
    let mut i = 0;
    for t in &mut resp.responses {
        for p in &mut t.partitions {
            let pieces = records.get_mut(i).map(std::mem::take).unwrap_or_default();
            i += 1;
            if pieces.iter().all(Bytes::is_empty) {
                // Never null: Kafka answers an empty record set, even for a
                // partition with an error, and librdkafka refuses a null
                // one ("invalid MessageSetSize -1") and drops the error.
                if p.records.is_none() {
                    p.records = Some(Bytes::new());
                }
                continue;
            }
            let mut m = [0u8; MARKER_LEN];
            m[..12].copy_from_slice(&nonce.as_bytes()[..12]);
            m[12..].copy_from_slice(&(subs.len() as u32).to_be_bytes());
            p.records = Some(Bytes::copy_from_slice(&m));
            subs.push((m, pieces));
        }
    }
    let head = encode_response(
        ApiKey::Fetch,
        version,
        correlation_id,
        &ResponseKind::Fetch(resp),
    )?;
    if subs.is_empty() {
        return Ok(Frame::One(head));
    }
    let head = head.freeze();
    let marker_prefix = records_prefix(version, MARKER_LEN);
    let mut chunks = Vec::with_capacity(subs.len() * 3 + 2);
    let mut pos = 4; // past the length prefix, written anew below
    let mut body = 0usize;
    for (m, pieces) in subs {
        let mut pattern = marker_prefix.clone();
        pattern.extend_from_slice(&m);
        let at = find(&head[pos..], &pattern)
            .map(|k| k + pos)
            .ok_or_else(|| encode_failed(what, "a records marker is missing"))?;
        let before = head.slice(pos..at);
        let len: usize = pieces.iter().map(Bytes::len).sum();
        let prefix = Bytes::from(records_prefix(version, len));
        body += before.len() + prefix.len() + len;
        chunks.push(before);
        chunks.push(prefix);
        chunks.extend(pieces.into_iter().filter(|p| !p.is_empty()));
        pos = at + pattern.len();
    }
    let rest = head.slice(pos..);
    body += rest.len();
    chunks.push(rest);
    let body = i32::try_from(body)
        .map_err(|_| encode_failed(what, format_args!("{body} bytes do not fit a frame")))?;
    chunks.insert(0, Bytes::copy_from_slice(&body.to_be_bytes()));
    Ok(Frame::Chunks(chunks))
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use kafka_protocol::messages::BrokerId;
    use kafka_protocol::messages::fetch_response::{FetchableTopicResponse, PartitionData};
    use kafka_protocol::protocol::StrBytes;

    use super::*;

    fn answer(version: i16) -> FetchAnswer {
        let mut resp = FetchResponse::default();
        let mut records = Vec::new();
        for t in 0..2 {
            let mut tr = FetchableTopicResponse::default();
            if version < 13 {
                tr.topic =
                    kafka_protocol::messages::TopicName(StrBytes::from_string(format!("t{t}")));
            } else {
                tr.topic_id = uuid::Uuid::from_u128(t + 1);
            }
            for p in 0..4 {
                let mut pd = PartitionData::default();
                pd.partition_index = p;
                pd.high_watermark = 1000 + i64::from(p);
                pd.preferred_read_replica = BrokerId(-1);
                // Partition 0: pieces; 1: an error, no records; 2: an
                // empty answer; 3: one large piece.
                match p {
                    0 => {
                        pd.records = Some(Bytes::new());
                        records.push(vec![
                            Bytes::from(vec![1u8; 300]),
                            Bytes::new(),
                            Bytes::from(vec![2u8; 70]),
                        ]);
                    }
                    1 => {
                        pd.error_code = 6;
                        records.push(Vec::new());
                    }
                    2 => {
                        pd.records = Some(Bytes::new());
                        records.push(Vec::new());
                    }
                    _ => {
                        pd.records = Some(Bytes::new());
                        records.push(vec![Bytes::from(vec![3u8; 20_000])]);
                    }
                }
                tr.partitions.push(pd);
            }
            resp.responses.push(tr);
        }
        FetchAnswer { resp, records }
    }

    /// The chunks joined are the usual encoding, byte for byte, at every
    /// Fetch version this proxy answers.
    #[test]
    fn chunks_are_the_usual_encoding_at_every_version() {
        let r = crate::codec::supported_versions(ApiKey::Fetch);
        for v in r.min..=r.max {
            let a = answer(v);
            let plain = encode_response(
                ApiKey::Fetch,
                v,
                77,
                &ResponseKind::Fetch(a.clone().into_response()),
            )
            .unwrap();
            let frame = encode_fetch_response(v, 77, a).unwrap();
            assert!(matches!(frame, Frame::Chunks(_)), "v{v}");
            assert_eq!(frame.to_bytes(), Bytes::from(plain.to_vec()), "v{v}");
        }
    }

    #[test]
    fn an_answer_without_records_is_one_buffer() {
        let mut a = answer(12);
        for r in &mut a.records {
            r.clear();
        }
        let plain = encode_response(
            ApiKey::Fetch,
            12,
            5,
            &ResponseKind::Fetch(a.clone().into_response()),
        )
        .unwrap();
        match encode_fetch_response(12, 5, a).unwrap() {
            Frame::One(b) => assert_eq!(b, plain),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_partition_without_records_has_an_empty_record_set_never_a_null_one() {
        for version in 4..=16 {
            let mut a = answer(version);
            for r in &mut a.records {
                r.clear();
            }
            // As the authorizer leaves a refused partition.
            for t in &mut a.resp.responses {
                for p in &mut t.partitions {
                    p.records = None;
                    p.error_code = 29;
                }
            }
            let Frame::One(b) = encode_fetch_response(version, 5, a).unwrap() else {
                panic!("v{version}: chunks without records")
            };
            let body = b.freeze().slice(4..);
            let d = crate::codec::decode_response(ApiKey::Fetch, version, body).unwrap();
            let ResponseKind::Fetch(f) = d.body else {
                panic!()
            };
            for p in f.responses.iter().flat_map(|t| &t.partitions) {
                assert_eq!(p.records.as_deref(), Some(&[][..]), "v{version}");
            }
        }
    }

    /// Length prefixes of every width (1 to 4 varint bytes from v12).
    #[test]
    fn records_of_every_prefix_width() {
        for len in [1usize, 126, 127, 128, 16_383, 16_384, 2_097_152] {
            for v in [11i16, 12] {
                let mut a = answer(v);
                a.records = vec![Vec::new(); 8];
                a.records[3] = vec![Bytes::from(vec![9u8; len])];
                let plain = encode_response(
                    ApiKey::Fetch,
                    v,
                    1,
                    &ResponseKind::Fetch(a.clone().into_response()),
                )
                .unwrap();
                let frame = encode_fetch_response(v, 1, a).unwrap();
                assert_eq!(frame.to_bytes(), Bytes::from(plain.to_vec()), "v{v} {len}");
            }
        }
    }
}
