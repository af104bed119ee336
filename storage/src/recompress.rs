//! Recompression of produced batches into a topic's `compression.type`.
//!
//! A batch keeps everything but its codec: the records section is
//! decompressed (bounded) and compressed again with the target codec, and
//! the header gets the new codec bits, the new batch length and a CRC-32C
//! over the new bytes. Offsets deltas, timestamps, producer id, epoch and
//! sequence, the record count and the other attribute bits are the
//! producer's, so idempotence and offsets work as for any batch. A batch
//! whose CRC does not match is refused before anything is rewritten: a new
//! CRC must never make corrupt bytes look sound.

use bytes::{BufMut, Bytes, BytesMut};

use crate::batch::{BatchError, BatchView, Compression, HEADER_LEN, LOG_OVERHEAD};
use crate::records::{compress, decompress};

/// Byte position of the attributes in a batch header.
const ATTRIBUTES_AT: usize = 21;
/// Byte position of the batch length.
const LENGTH_AT: usize = 8;
/// Byte position of the CRC, which covers everything after it.
const CRC_AT: usize = 17;
const COMPRESSION_MASK: u16 = 0x07;

/// Whether any batch of `records` (whole batches back to back) is not
/// compressed with `codec`. Reads headers only; a batch that does not
/// parse counts as needing work, so that [`recompress_batches`] reports it.
pub fn needs_recompression(records: &[u8], codec: Compression) -> bool {
    let mut pos = 0usize;
    while pos < records.len() {
        match BatchView::parse(&records[pos..], usize::MAX) {
            Ok(view) if view.compression() == codec => pos += view.size(),
            _ => return true,
        }
    }
    false
}

/// What one call of [`recompress_batches`] may cost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecompressLimits {
    /// Decompressed bytes of all the batches together: many small
    /// compressed batches cannot add up to more work or memory than one.
    pub max_decompressed: usize,
    /// Size of one batch once rewritten (the topic's `max.message.bytes`).
    pub max_batch: usize,
}

/// `records` with every batch compressed with `codec` (see the module
/// docs). Control batches are left as they are. Fails on the first batch
/// that does not parse, whose CRC is wrong, whose records cannot be
/// decompressed within what is left of `limits.max_decompressed`
/// ([`BatchError::OverBounds`]), or that is larger than `limits.max_batch`
/// once rewritten ([`BatchError::TooLarge`]).
pub fn recompress_batches(
    records: &[u8],
    codec: Compression,
    limits: RecompressLimits,
) -> Result<Bytes, BatchError> {
    let mut out = BytesMut::with_capacity(records.len());
    let mut budget = limits.max_decompressed;
    let mut pos = 0usize;
    while pos < records.len() {
        let view = BatchView::parse(&records[pos..], usize::MAX)?;
        view.verify_crc()?;
        if view.compression() == codec || view.is_control() {
            out.put_slice(view.bytes());
        } else {
            let start = out.len();
            let used = recompress_into(&view, codec, budget, &mut out)?;
            budget -= used;
            let size = out.len() - start;
            if size > limits.max_batch {
                return Err(BatchError::TooLarge {
                    size,
                    limit: limits.max_batch,
                });
            }
        }
        pos += view.size();
    }
    Ok(out.freeze())
}

/// Appends `view` recompressed with `codec` to `out`; returns the bytes
/// decompressed (at most `max_decompressed`).
fn recompress_into(
    view: &BatchView<'_>,
    codec: Compression,
    max_decompressed: usize,
    out: &mut BytesMut,
) -> Result<usize, BatchError> {
    let plain = decompress(view.compression(), view.records_bytes(), max_decompressed)?;
    let used = plain.len();
    let packed = match codec {
        Compression::None => plain,
        codec => compress(codec, &plain)?,
    };
    let length = i32::try_from(HEADER_LEN - LOG_OVERHEAD + packed.len())
        .map_err(|_| BatchError::Invalid("recompressed batch over 2 GiB"))?;
    let start = out.len();
    out.put_slice(&view.bytes()[..HEADER_LEN]);
    out.put_slice(&packed);
    let batch = &mut out[start..];
    batch[LENGTH_AT..LENGTH_AT + 4].copy_from_slice(&length.to_be_bytes());
    let attributes = (view.attributes() & !COMPRESSION_MASK) | u16::from(codec.id());
    batch[ATTRIBUTES_AT..ATTRIBUTES_AT + 2].copy_from_slice(&attributes.to_be_bytes());
    let crc = crc32c::crc32c(&batch[CRC_AT + 4..]);
    batch[CRC_AT..CRC_AT + 4].copy_from_slice(&crc.to_be_bytes());
    Ok(used)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::{BatchBuilder, DEFAULT_MAX_DECOMPRESSED, RecordSpec, decode_records};

    const LIMITS: RecompressLimits = RecompressLimits {
        max_decompressed: DEFAULT_MAX_DECOMPRESSED,
        max_batch: usize::MAX,
    };

    const ALL: [Compression; 5] = [
        Compression::None,
        Compression::Gzip,
        Compression::Snappy,
        Compression::Lz4,
        Compression::Zstd,
    ];

    fn batch(codec: Compression, base_sequence: i32) -> Bytes {
        let mut b = BatchBuilder::new(0, 1_700_000_000_000).producer(42, 3, base_sequence, false);
        for i in 0..50u8 {
            let mut r = RecordSpec::new(
                (i % 3 != 0).then(|| vec![b'k', i]),
                (i % 7 != 0).then(|| vec![i; 100 + usize::from(i)]),
                i64::from(i) * 2,
            );
            if i % 5 == 0 {
                r.headers = vec![(b"h".to_vec(), Some(vec![i]))];
            }
            b.push(r);
        }
        b.build(codec).unwrap()
    }

    /// The header fields that must not change, in order.
    fn kept(v: &BatchView<'_>) -> (i64, i32, i32, i64, i64, i64, i16, i32, i32, u16) {
        (
            v.base_offset(),
            v.partition_leader_epoch(),
            v.last_offset_delta(),
            v.first_timestamp(),
            v.max_timestamp(),
            v.producer_id(),
            v.producer_epoch(),
            v.base_sequence(),
            v.record_count(),
            v.attributes() & !COMPRESSION_MASK,
        )
    }

    #[test]
    fn every_codec_into_every_codec_keeps_records_header_and_a_valid_crc() {
        for from in ALL {
            for to in ALL {
                let original = batch(from, 7);
                // Two batches back to back: both rewritten, in order.
                let mut two = original.to_vec();
                two.extend_from_slice(&batch(from, 57));
                assert_eq!(
                    needs_recompression(&two, to),
                    from != to,
                    "{from:?} → {to:?}"
                );
                let out = recompress_batches(&two, to, LIMITS).unwrap();
                let first = BatchView::parse(&out, usize::MAX).unwrap();
                first.verify_crc().unwrap();
                assert_eq!(first.compression(), to);
                let before = BatchView::parse(&original, usize::MAX).unwrap();
                assert_eq!(kept(&first), kept(&before), "{from:?} → {to:?}");
                let got = decode_records(&Bytes::copy_from_slice(first.bytes()), 1 << 24).unwrap();
                let want = decode_records(&original, 1 << 24).unwrap();
                assert_eq!(got, want, "{from:?} → {to:?}");
                let second = BatchView::parse(&out[first.size()..], usize::MAX).unwrap();
                second.verify_crc().unwrap();
                assert_eq!(second.base_sequence(), 57);
                assert_eq!(first.size() + second.size(), out.len());
                if from == to {
                    assert_eq!(&out[..], &two[..], "already in the codec: the same bytes");
                }
            }
        }
    }

    #[test]
    fn a_corrupt_batch_is_refused_not_given_a_new_crc() {
        let mut b = batch(Compression::None, 0).to_vec();
        let last = b.len() - 1;
        b[last] ^= 0xff;
        let err = recompress_batches(&b, Compression::Zstd, LIMITS).unwrap_err();
        assert!(matches!(err, BatchError::BadCrc { .. }), "{err}");
        let err = recompress_batches(&b[..40], Compression::Zstd, LIMITS).unwrap_err();
        assert!(matches!(err, BatchError::Truncated { .. }), "{err}");
        assert!(needs_recompression(&b[..40], Compression::None));
    }

    #[test]
    fn decompression_is_bounded_across_the_batches_and_output_by_the_batch_limit() {
        let one = batch(Compression::Zstd, 0);
        let tight = |max_decompressed, max_batch| RecompressLimits {
            max_decompressed,
            max_batch,
        };
        let err = recompress_batches(&one, Compression::Gzip, tight(1024, usize::MAX)).unwrap_err();
        assert!(err.is_over_bounds(), "{err}");
        // One batch fits the budget, two of them do not: the budget is shared.
        let plain = BatchView::parse(
            &recompress_batches(&one, Compression::None, LIMITS).unwrap(),
            usize::MAX,
        )
        .unwrap()
        .records_bytes()
        .len();
        let mut two = one.to_vec();
        two.extend_from_slice(&one);
        recompress_batches(&one, Compression::Gzip, tight(plain, usize::MAX)).unwrap();
        let err =
            recompress_batches(&two, Compression::Gzip, tight(plain, usize::MAX)).unwrap_err();
        assert!(err.is_over_bounds(), "{err}");
        // A batch larger than max_batch once rewritten is refused.
        let err = recompress_batches(
            &one,
            Compression::None,
            tight(DEFAULT_MAX_DECOMPRESSED, 1000),
        )
        .unwrap_err();
        assert!(matches!(err, BatchError::TooLarge { .. }), "{err}");
    }
}
