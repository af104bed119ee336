//! What a topic's settings ask of produced batches before they are
//! sequenced, work that reads or rewrites the records (so it is done
//! outside the partition's lock, and off the runtime on the produce path):
//!
//! - on a topic whose `cleanup.policy` names `compact`, every record needs a
//!   key: a batch with keyless records is refused whole with
//!   [`ErrorKind::InvalidRecord`] and the index of each such record
//!   (Kafka's KIP-467 `record_errors`);
//! - with a `compression.type` other than `producer`, batches in another
//!   codec are recompressed into it (`floe_storage::recompress`);
//! - on a topic with `floe.delayed.delivery`, batches holding a record not
//!   due yet are replaced by delayed batches (`crate::partitions::delayed::hold`).

use bytes::Bytes;
use floe_storage::batch::{BatchError, BatchView, Compression};
use floe_storage::recompress;
use floe_storage::records::{DEFAULT_MAX_DECOMPRESSED, DecodeLimits, RecordStream};

use crate::config::LogConfig;
use crate::error::{BrokerError, ErrorKind, RecordError, Result};

/// The part of a topic's settings that admission looks at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Admission {
    pub compacted: bool,
    pub codec: Option<Compression>,
    /// `max.message.bytes`: a batch larger once recompressed is refused.
    pub max_batch: usize,
    /// `floe.delayed.delivery`, with the topic's `retention.ms`.
    pub delayed: Option<crate::partitions::delayed::hold::HoldRules>,
}

/// What [`Admission::admit`] made of produced records.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Admitted {
    /// The records rewritten (`None`: as they are).
    pub records: Option<Bytes>,
    /// Whether they hold delayed batches (control batches the sequencing
    /// takes from here only).
    pub delayed: bool,
}

impl Admission {
    pub fn of(config: &LogConfig) -> Self {
        Self {
            compacted: config.compacted,
            codec: config.compression,
            max_batch: config.max_message_bytes,
            delayed: config
                .delayed
                .then_some(crate::partitions::delayed::hold::HoldRules {
                    retention_ms: config.retention_ms,
                    max_batch: config.max_message_bytes,
                }),
        }
    }

    /// Whether [`Admission::admit`] has anything to do for `records`
    /// (reads batch headers only).
    pub fn has_work(&self, records: &[u8]) -> bool {
        self.compacted
            || self
                .codec
                .is_some_and(|c| recompress::needs_recompression(records, c))
            || (self.delayed.is_some() && crate::partitions::delayed::hold::may_hold(records))
    }

    /// Checks `records` against the topic's settings and returns them
    /// rewritten when the topic's codec asks for it (`None`: as they are).
    /// A delayed topic's records are held at `now_ms` (after any
    /// recompression, so a delayed batch is in the topic's codec).
    pub fn admit(&self, records: &[u8], now_ms: u64) -> Result<Admitted> {
        if self.compacted {
            refuse_keyless(records)?;
        }
        let recompressed = match self.codec {
            Some(codec) if recompress::needs_recompression(records, codec) => {
                Some(in_codec(records, codec, self.max_batch)?)
            }
            _ => None,
        };
        let Some(rules) = self.delayed else {
            return Ok(Admitted {
                records: recompressed,
                delayed: false,
            });
        };
        let now = recompressed.as_deref().unwrap_or(records);
        match crate::partitions::delayed::hold::hold(now, now_ms, rules)? {
            Some(held) => Ok(Admitted {
                records: Some(held),
                delayed: true,
            }),
            None => Ok(Admitted {
                records: recompressed,
                delayed: false,
            }),
        }
    }
}

/// A batch whose records cannot be decoded: malformed (CORRUPT_MESSAGE),
/// or over the decoding bounds (MESSAGE_TOO_LARGE).
pub(crate) fn decoding(e: BatchError) -> BrokerError {
    let kind = if e.is_over_bounds() {
        ErrorKind::MessageTooLarge
    } else {
        ErrorKind::CorruptMessage
    };
    BrokerError::new(kind, e.to_string())
}

/// Refuses `records` if a record of any batch has no key, naming each one.
/// A batch that does not parse or whose CRC is wrong is left to the
/// sequencing checks (CORRUPT_MESSAGE), as are control batches. All the
/// batches together are decoded within [`DEFAULT_MAX_DECOMPRESSED`] bytes.
fn refuse_keyless(records: &[u8]) -> Result<()> {
    let mut keyless = Vec::new();
    let mut budget = DEFAULT_MAX_DECOMPRESSED;
    let mut pos = 0usize;
    while pos < records.len() {
        let Ok(view) = BatchView::parse(&records[pos..], usize::MAX) else {
            return Ok(());
        };
        if view.verify_crc().is_err() {
            return Ok(());
        }
        pos += view.size();
        if view.is_control() {
            continue;
        }
        let batch = Bytes::copy_from_slice(view.bytes());
        let limits = DecodeLimits {
            max_bytes: budget,
            ..DecodeLimits::DEFAULT
        };
        let mut stream = RecordStream::new(&batch, limits).map_err(decoding)?;
        for (i, record) in stream.by_ref().enumerate() {
            let record = record.map_err(decoding)?;
            if record.key.is_none() {
                keyless.push(RecordError {
                    batch_index: i32::try_from(i).unwrap_or(i32::MAX),
                    message: "a compacted topic cannot accept a record without a key".into(),
                });
            }
        }
        budget = budget.saturating_sub(stream.decoded_bytes());
    }
    if keyless.is_empty() {
        return Ok(());
    }
    Err(BrokerError::new(
        ErrorKind::InvalidRecord,
        format!(
            "{} record(s) without a key: a topic whose cleanup.policy is compact \
             needs a key on every record",
            keyless.len()
        ),
    )
    .with_record_errors(keyless))
}

/// Produced batches rewritten into the topic's `compression.type` codec:
/// all of them decompressed within the bound every reader of one batch
/// uses, each no larger than `max_batch` once rewritten.
fn in_codec(records: &[u8], codec: Compression, max_batch: usize) -> Result<Bytes> {
    let limits = recompress::RecompressLimits {
        max_decompressed: DEFAULT_MAX_DECOMPRESSED,
        max_batch,
    };
    recompress::recompress_batches(records, codec, limits).map_err(|e| {
        let kind = match e {
            BatchError::OverBounds(_) | BatchError::TooLarge { .. } => ErrorKind::MessageTooLarge,
            _ => ErrorKind::CorruptMessage,
        };
        BrokerError::new(kind, format!("recompressing into {codec:?}: {e}"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use floe_storage::records::{BatchBuilder, RecordSpec};

    fn batch(keys: &[Option<&str>], codec: Compression) -> Bytes {
        let mut b = BatchBuilder::new(0, 1_000);
        for k in keys {
            b.push(RecordSpec::new(
                k.map(|k| k.as_bytes().to_vec()),
                Some(b"v".to_vec()),
                0,
            ));
        }
        b.build(codec).unwrap()
    }

    const COMPACTED: Admission = Admission {
        compacted: true,
        codec: None,
        max_batch: usize::MAX,
        delayed: None,
    };

    #[test]
    fn keyless_records_on_a_compacted_topic_are_named_by_their_index() {
        let b = batch(&[Some("a"), None, Some("c"), None], Compression::Lz4);
        let e = COMPACTED.admit(&b, 0).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidRecord);
        let indexes: Vec<i32> = e.record_errors().iter().map(|r| r.batch_index).collect();
        assert_eq!(indexes, vec![1, 3]);
        assert!(e.record_errors().iter().all(|r| !r.message.is_empty()));
        // Keyed records pass; a topic that is not compacted takes anything.
        let keyed = batch(&[Some("a"), Some("b")], Compression::None);
        assert_eq!(COMPACTED.admit(&keyed, 0).unwrap(), Admitted::default());
        let plain = Admission {
            compacted: false,
            codec: None,
            max_batch: usize::MAX,
            delayed: None,
        };
        assert!(!plain.has_work(&b));
        assert_eq!(plain.admit(&b, 0).unwrap(), Admitted::default());
    }

    #[test]
    fn a_corrupt_batch_is_left_to_the_crc_check() {
        let mut b = batch(&[None], Compression::None).to_vec();
        let last = b.len() - 1;
        b[last] ^= 0xff;
        assert_eq!(COMPACTED.admit(&b, 0).unwrap(), Admitted::default());
    }

    #[test]
    fn recompression_follows_the_key_check() {
        let zstd = Admission {
            compacted: true,
            codec: Some(Compression::Zstd),
            max_batch: usize::MAX,
            delayed: None,
        };
        let b = batch(&[Some("a")], Compression::Gzip);
        let out = zstd.admit(&b, 0).unwrap().records.unwrap();
        let v = BatchView::parse(&out, usize::MAX).unwrap();
        assert_eq!(v.compression(), Compression::Zstd);
        let keyless = batch(&[None], Compression::Gzip);
        assert_eq!(
            zstd.admit(&keyless, 0).unwrap_err().kind(),
            ErrorKind::InvalidRecord
        );
    }
}
