//! How the Raft layer turns its values into bytes: log entries and the
//! log store's own records on disk, the bodies of Raft RPCs between nodes,
//! and snapshots.
//!
//! The encoding is `postcard` (compact binary, varint integers, no field
//! names) behind one format byte, [`BINARY_V1`]. Before it, everything was
//! JSON, where byte arrays and nested ids made a 100-partition commit
//! several times larger. [`decode`] still reads JSON (a JSON text never
//! starts with byte 0x01), so a node upgraded in place reads the log,
//! votes and snapshots it wrote before, and an RPC from a node that still
//! speaks JSON is understood (and answered in JSON, see [`Format`]).
//!
//! postcard is not self-describing: a type encoded here must not use serde
//! attributes that need it (`flatten`, `untagged`, `skip_serializing_if`);
//! `codec_round_trips_every_command` below encodes every command kind.

use serde::Serialize;
use serde::de::DeserializeOwned;

/// The format byte of a postcard body.
pub const BINARY_V1: u8 = 0x01;

/// How a value was (or is to be) encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// `BINARY_V1` followed by postcard.
    Binary,
    /// JSON, as every node wrote before the binary format.
    Json,
}

impl Format {
    /// The format of encoded bytes, told by their first byte.
    pub fn of(bytes: &[u8]) -> Format {
        match bytes.first() {
            Some(&BINARY_V1) => Format::Binary,
            _ => Format::Json,
        }
    }
}

/// The format bytes a later version may introduce: not JSON's first bytes,
/// so a body starting with one is refused as newer, not parsed as JSON.
const LATER_FORMATS: std::ops::RangeInclusive<u8> = 0x02..=0x08;

/// A value that could not be encoded or decoded.
#[derive(Debug, thiserror::Error)]
pub enum CodecError {
    #[error("binary encoding: {0}")]
    Binary(#[from] postcard::Error),
    #[error("json encoding: {0}")]
    Json(#[from] serde_json::Error),
    /// Bytes left after the value: a later version wrote fields this one
    /// does not know (added last, as the layouts' rules ask). Read, they
    /// would be dropped without a word.
    #[error(
        "{0} bytes after the value this version knows: written by a newer \
         version of Floe; refused rather than read without them (docs/upgrading.md)"
    )]
    Trailing(usize),
    /// A format byte of a later version.
    #[error("format byte {0:#04x} is newer than this version of Floe reads (docs/upgrading.md)")]
    NewerFormat(u8),
}

/// Encodes `v` in the binary format.
pub fn encode<T: Serialize + ?Sized>(v: &T) -> Result<Vec<u8>, CodecError> {
    encode_as(Format::Binary, v)
}

/// Encodes `v` in `format`.
pub fn encode_as<T: Serialize + ?Sized>(format: Format, v: &T) -> Result<Vec<u8>, CodecError> {
    match format {
        Format::Binary => {
            let out = vec![BINARY_V1];
            Ok(postcard::to_extend(v, out)?)
        }
        Format::Json => Ok(serde_json::to_vec(v)?),
    }
}

/// The size of `v` in the binary format, without keeping the bytes.
pub fn encoded_len<T: Serialize + ?Sized>(v: &T) -> Result<usize, CodecError> {
    Ok(1 + postcard::experimental::serialized_size(v)?)
}

/// Decodes bytes in either format. The binary value must take every byte
/// ([`CodecError::Trailing`] otherwise), as a JSON one must.
pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, CodecError> {
    match (Format::of(bytes), bytes.split_first()) {
        (Format::Binary, Some((_, rest))) => {
            let (v, left) = postcard::take_from_bytes(rest)?;
            if left.is_empty() {
                Ok(v)
            } else {
                Err(CodecError::Trailing(left.len()))
            }
        }
        (_, Some((first, _))) if LATER_FORMATS.contains(first) => {
            Err(CodecError::NewerFormat(*first))
        }
        _ => Ok(serde_json::from_slice(bytes)?),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::command::{
        Command, CommitRange, CommittedOffset, NewObject, NodeKind, ObjectSel, OwnedItem,
        OwnershipChange, ProducerBatch, ShardFence,
    };
    use crate::ids::{
        BrokerId, Epoch, ObjectId, PartitionKey, ProducerEpoch, ProducerId, ShardId, TopicId,
        TransactionalId,
    };
    use crate::raft::{Entry, LogId};
    use crate::txn::{ProducerIdEpoch, RangeTxns, TxnCommand, TxnEvent, TxnOp};

    fn key() -> PartitionKey {
        PartitionKey::new(TopicId(uuid::Uuid::from_bytes([7; 16])), 3)
    }

    fn range() -> CommitRange {
        CommitRange {
            partition: key(),
            epoch: Epoch(4),
            first_offset: 10,
            last_offset: 19,
            max_timestamp: 1_700_000_000_000,
            object: ObjectSel::New,
            byte_start: 0,
            byte_len: 1234,
            producers: vec![ProducerBatch {
                producer_id: 1000,
                epoch: 0,
                first_sequence: 0,
                last_sequence: 9,
                first_offset: 10,
                last_offset: 19,
            }],
        }
    }

    fn offsets() -> Vec<(String, u32, CommittedOffset)> {
        vec![(
            "t".into(),
            1,
            CommittedOffset {
                offset: 5,
                leader_epoch: -1,
                metadata: "m".into(),
            },
        )]
    }

    fn every_command() -> Vec<Command> {
        let obj = NewObject {
            endpoint: "default".into(),
            key: "wal/1/x.wal".into(),
            size: 99,
        };
        let change = OwnershipChange {
            item: OwnedItem::Shard(ShardId(2)),
            owner: Some(BrokerId(1)),
        };
        let file = crate::export::ExportFile {
            endpoint: "default".into(),
            key: "exports/t/x.parquet".into(),
            first_offset: 0,
            last_offset: 9,
            rows: 10,
            size: 100,
            min_timestamp: 1,
            max_timestamp: 2,
        };
        let mut all = vec![
            Command::RegisterNode {
                id: BrokerId(1),
                kind: NodeKind::Broker,
                addr: "127.0.0.1:9092".into(),
                now_ms: 5,
                lease_ms: 6,
            },
            Command::Heartbeat {
                id: BrokerId(1),
                now_ms: 7,
            },
            Command::Drain { id: BrokerId(2) },
            Command::ExpireLeases { now_ms: 8 },
            Command::NodeDown {
                id: BrokerId(2),
                addr: "127.0.0.1:9192".into(),
            },
            Command::Reassign {
                changes: vec![change.clone()],
            },
            Command::BeginHandover {
                changes: vec![change],
                now_ms: 9,
            },
            Command::Release {
                broker: BrokerId(1),
                items: vec![(OwnedItem::Partition(key()), Epoch(3))],
            },
            Command::CreateTopic {
                name: "t".into(),
                id: TopicId(uuid::Uuid::from_bytes([1; 16])),
                partitions: 3,
                config: BTreeMap::from([("retention.ms".into(), "1".into())]),
            },
            Command::DeleteTopic { name: "t".into() },
            Command::AlterTopicConfig {
                name: "t".into(),
                set: BTreeMap::new(),
                delete: vec!["retention.ms".into()],
            },
            Command::CreatePartitions {
                name: "t".into(),
                total: 4,
            },
            Command::Commit {
                now_ms: 11,
                broker: BrokerId(1),
                object: Some(obj.clone()),
                ranges: vec![range(), {
                    let mut r = range();
                    r.object = ObjectSel::Existing(ObjectId(5));
                    r
                }],
            },
            Command::CommitOffsets {
                group: "g".into(),
                offsets: offsets(),
                fence: Some(ShardFence {
                    broker: BrokerId(1),
                    shard: ShardId(3),
                    epoch: Epoch(2),
                }),
            },
            Command::StoreGroup {
                fence: ShardFence {
                    broker: BrokerId(1),
                    shard: ShardId(3),
                    epoch: Epoch(2),
                },
                group: "g".into(),
                record: Some(vec![1, 2, 3]),
            },
            Command::DeleteGroups {
                groups: vec!["g".into()],
            },
            Command::DeleteOffsets {
                group: "g".into(),
                partitions: vec![("t".into(), 0)],
            },
            Command::ForgetShareState {
                broker: BrokerId(1),
                partition: key(),
                epoch: Epoch(4),
                group: "sg".into(),
            },
            Command::DeleteOffsetsFenced {
                group: "g".into(),
                partitions: vec![("t".into(), 0)],
                fence: ShardFence {
                    broker: BrokerId(1),
                    shard: ShardId(3),
                    epoch: Epoch(2),
                },
            },
            Command::DeleteGroupFenced {
                group: "g".into(),
                fence: ShardFence {
                    broker: BrokerId(1),
                    shard: ShardId(3),
                    epoch: Epoch(2),
                },
            },
            Command::AllocateProducerIds { count: 10 },
            Command::ForgetObjects {
                ids: vec![ObjectId(1)],
            },
            Command::TruncateLog {
                broker: BrokerId(1),
                partition: key(),
                epoch: Epoch(1),
                log_start_offset: 5,
            },
            Command::ReplaceRanges {
                broker: BrokerId(1),
                partition: key(),
                epoch: Epoch(1),
                first_offset: 0,
                last_offset: 9,
                max_timestamp: 3,
                object: obj,
            },
            Command::ExportBegin {
                partition: key(),
                generation: 1,
                file: file.clone(),
            },
            Command::ExportCommit {
                partition: key(),
                generation: 1,
                file,
            },
            Command::ExportForget {
                partition: key(),
                generation: 1,
                keys: vec!["k".into()],
            },
            Command::ExportReset { topic: "t".into() },
            Command::ExpireProducers {
                now_ms: 10,
                expiration_ms: 20,
            },
        ];
        // Every transaction step.
        let producer = ProducerIdEpoch {
            producer_id: ProducerId(1000),
            epoch: ProducerEpoch(3),
        };
        let ops = [
            TxnOp::InitProducer {
                timeout_ms: 60_000,
                max_timeout_ms: 900_000,
                expected: Some(producer),
            },
            TxnOp::AddPartitions {
                producer,
                partitions: vec![key()],
            },
            TxnOp::AddGroup {
                producer,
                group: "g".into(),
            },
            TxnOp::CommitOffsets {
                producer,
                group: "g".into(),
                offsets: offsets(),
            },
            TxnOp::End {
                producer,
                commit: true,
            },
            TxnOp::Complete {
                producer,
                commit: false,
            },
            TxnOp::AbortExpired { producer },
        ];
        all.extend(ops.into_iter().map(|op| {
            Command::Txn(TxnCommand {
                fence: ShardFence {
                    broker: BrokerId(1),
                    shard: ShardId(3),
                    epoch: Epoch(2),
                },
                id: TransactionalId::new("tx"),
                now_ms: 12,
                op,
            })
        }));
        all.push(Command::CommitWithTxns {
            broker: BrokerId(1),
            object: None,
            ranges: vec![range()],
            now_ms: 13,
            txns: vec![RangeTxns {
                partition: key(),
                events: vec![
                    TxnEvent::Begin {
                        producer_id: ProducerId(1000),
                        epoch: ProducerEpoch(0),
                        offset: 10,
                    },
                    TxnEvent::Marker {
                        producer_id: ProducerId(1000),
                        epoch: ProducerEpoch(0),
                        commit: true,
                        offset: 19,
                    },
                ],
            }],
        });
        all.push(Command::ExpireTransactionalIds {
            now_ms: 14,
            expiration_ms: 15,
        });
        all.push(Command::AlterClientQuotas {
            alterations: vec![crate::quota::QuotaAlteration {
                entity: crate::quota::QuotaEntity {
                    user: Some(crate::quota::EntityName::Default),
                    client_id: Some(crate::quota::EntityName::Named("c".into())),
                },
                set: BTreeMap::from([("producer_byte_rate".into(), 1024)]),
                remove: vec!["consumer_byte_rate".into()],
            }],
        });
        all.push(Command::AlterScramCredentials(
            crate::scram::ScramAlteration {
                user: "alice".into(),
                upsert: vec![(
                    crate::scram::ScramMechanism::Sha256,
                    crate::scram::ScramCredential {
                        salt: vec![1, 2],
                        stored_key: vec![3; 32],
                        server_key: vec![4; 32],
                        iterations: 4096,
                    },
                )],
                delete: vec![crate::scram::ScramMechanism::Sha512],
            },
        ));
        all.push(Command::CreateAcls(vec![crate::acl::AclBinding {
            resource_type: crate::acl::ResourceType::Topic,
            resource_name: "t".into(),
            pattern: crate::acl::PatternType::Literal,
            principal: "User:alice".into(),
            host: "*".into(),
            operation: crate::acl::Operation::Read,
            permission: crate::acl::Permission::Allow,
        }]));
        all.push(Command::DeleteAcls(vec![crate::acl::AclFilter::any()]));
        all.push(Command::AlterGroupConfig {
            group: "g".into(),
            set: BTreeMap::from([("share.delivery.count.limit".into(), "3".into())]),
            delete: vec!["consumer.session.timeout.ms".into()],
        });
        all.push(Command::ShareState {
            broker: BrokerId(1),
            partition: key(),
            epoch: Epoch(1),
            group: "sg".into(),
            state: CommittedOffset {
                offset: 3,
                leader_epoch: -1,
                metadata: "3-4:a0:1".into(),
            },
        });
        all.push(Command::SweepDeadNodes {
            now_ms: 16,
            retention_ms: Some(3_600_000),
        });
        all.push(Command::SweepDeadNodes {
            now_ms: 17,
            retention_ms: None,
        });
        // A group-committed entry holds commands of every kind.
        all.push(Command::Batch(all.clone()));
        // Commands of 0.2.0, after 0.1.0's batch: each release's entries
        // read pairwise against this list.
        all.push(Command::TableColumns {
            topic: "t".into(),
            columns: vec![("amount".into(), "float64".into())],
        });
        all.push(Command::TableCommit {
            topic: "t".into(),
            expected: None,
            location: "file:///m.json".into(),
        });
        let file = crate::export::ExportFile {
            endpoint: "default".into(),
            key: "exports/t/0-0-9.parquet".into(),
            first_offset: 0,
            last_offset: 9,
            rows: 10,
            size: 100,
            min_timestamp: 1,
            max_timestamp: 2,
        };
        all.push(Command::TableCompactBegin {
            topic: "t".into(),
            compaction: crate::table::Compaction {
                partition: 0,
                generation: 1,
                file: file.clone(),
                replaced: vec![
                    "exports/t/0-0-4.parquet".into(),
                    "exports/t/0-5-9.parquet".into(),
                ],
            },
        });
        all.push(Command::TableCompactCommit {
            topic: "t".into(),
            partition: 0,
            generation: 1,
            file,
        });
        all
    }

    fn entry(index: u64, payload: openraft::EntryPayload<crate::raft::TypeConfig>) -> Entry {
        Entry {
            log_id: LogId::new(openraft::CommittedLeaderId::new(2, 1), index),
            payload,
        }
    }

    /// Raft log entries of every command, as each release wrote them
    /// (`floe_types::format_samples`): every release's read as written, and
    /// this version writes exactly its own sample.
    #[test]
    fn raft_entries_of_every_release_read() {
        let entries: Vec<Entry> = every_command()
            .into_iter()
            .enumerate()
            .map(|(i, c)| entry(i as u64 + 1, openraft::EntryPayload::Normal(c)))
            .collect();
        let written = encode(&entries).unwrap();
        let root = floe_types::format_samples::root(env!("CARGO_MANIFEST_DIR"));
        let check = |release: &str, bytes: Vec<u8>| {
            let back: Vec<Entry> = decode(&bytes).unwrap_or_else(|e| panic!("{release}: {e}"));
            assert!(!back.is_empty(), "{release}");
            // An older release knew fewer commands: each reads as written.
            for (b, e) in back.iter().zip(&entries) {
                assert_eq!(format!("{b:?}"), format!("{e:?}"), "{release}");
            }
        };
        floe_types::format_samples::check(
            &root,
            env!("CARGO_PKG_VERSION"),
            "raft-entries.bin",
            &written,
            check,
        );
    }

    #[test]
    fn codec_round_trips_every_command() {
        for cmd in every_command() {
            let e = entry(7, openraft::EntryPayload::Normal(cmd));
            let bytes = encode(&e).unwrap();
            assert_eq!(bytes[0], BINARY_V1);
            assert_eq!(bytes.len(), encoded_len(&e).unwrap());
            let back: Entry = decode(&bytes).unwrap();
            assert_eq!(format!("{back:?}"), format!("{e:?}"));
        }
        let blank = entry(1, openraft::EntryPayload::Blank);
        let back: Entry = decode(&encode(&blank).unwrap()).unwrap();
        assert_eq!(back.log_id, blank.log_id);
    }

    #[test]
    fn a_batch_inside_a_batch_is_refused_at_any_depth() {
        let nested = Command::Batch(vec![Command::Batch(vec![Command::Drain {
            id: BrokerId(1),
        }])]);
        assert!(decode::<Command>(&encode(&nested).unwrap()).is_err());
        assert!(decode::<Command>(&serde_json::to_vec(&nested).unwrap()).is_err());
        // A crafted body nesting a million batches (two bytes each) fails
        // at the second level instead of exhausting the stack.
        let empty = encode(&Command::Batch(Vec::new())).unwrap();
        let (tag, len) = (&empty[1..empty.len() - 1], empty[empty.len() - 1]);
        assert_eq!(len, 0);
        let mut deep = vec![BINARY_V1];
        for _ in 0..1_000_000 {
            deep.extend_from_slice(tag);
            deep.push(1);
        }
        deep.extend_from_slice(&empty[1..]);
        assert!(decode::<Command>(&deep).is_err());
        // A batch decoded after a refused one is read as usual.
        let flat = Command::Batch(vec![Command::Drain { id: BrokerId(2) }]);
        assert_eq!(decode::<Command>(&encode(&flat).unwrap()).unwrap(), flat);
    }

    #[test]
    fn json_written_before_the_binary_format_is_still_read() {
        let e = entry(
            9,
            openraft::EntryPayload::Normal(Command::Commit {
                now_ms: 0,
                broker: BrokerId(1),
                object: None,
                ranges: vec![range()],
            }),
        );
        let json = serde_json::to_vec(&e).unwrap();
        assert_eq!(Format::of(&json), Format::Json);
        let back: Entry = decode(&json).unwrap();
        assert_eq!(format!("{back:?}"), format!("{e:?}"));
        // Values the log store keeps beside the entries: a vote, a committed id.
        let none: Option<LogId> = decode(b"null").unwrap();
        assert_eq!(none, None);
    }

    #[test]
    fn a_commit_of_100_partitions_is_much_smaller_than_json() {
        let ranges: Vec<CommitRange> = (0..100)
            .map(|i| {
                let mut r = range();
                r.partition.partition = i;
                r
            })
            .collect();
        let e = entry(
            1,
            openraft::EntryPayload::Normal(Command::Commit {
                now_ms: 0,
                broker: BrokerId(1),
                object: None,
                ranges,
            }),
        );
        let (bin, json) = (encode(&e).unwrap(), serde_json::to_vec(&e).unwrap());
        assert!(
            bin.len() * 3 < json.len(),
            "binary {} bytes, json {}",
            bin.len(),
            json.len()
        );
    }

    /// What a later version writes is refused, never read in part: fields
    /// added after the ones this version knows, or a later format byte.
    #[test]
    fn what_a_newer_version_wrote_is_refused() {
        #[derive(Debug, Serialize, serde::Deserialize, PartialEq)]
        struct Now {
            a: u64,
            b: String,
        }
        #[derive(Debug, Serialize)]
        struct Later {
            a: u64,
            b: String,
            c: Vec<u32>,
        }
        let now = Now {
            a: 7,
            b: "x".into(),
        };
        assert_eq!(decode::<Now>(&encode(&now).unwrap()).unwrap(), now);
        let later = encode(&Later {
            a: 7,
            b: "x".into(),
            c: vec![1, 2, 3],
        })
        .unwrap();
        let e = decode::<Now>(&later).unwrap_err();
        assert!(matches!(e, CodecError::Trailing(4)), "{e:?}");
        assert!(e.to_string().contains("newer version"), "{e}");
        let mut newer = encode(&now).unwrap();
        newer[0] = 0x02;
        let e = decode::<Now>(&newer).unwrap_err();
        assert!(matches!(e, CodecError::NewerFormat(2)), "{e:?}");
        // JSON still reads, surrounding whitespace included.
        assert_eq!(decode::<Now>(b" {\"a\":7,\"b\":\"x\"}\n").unwrap(), now);
    }
}
