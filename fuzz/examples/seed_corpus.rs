//! Writes the seed corpora of the fuzz targets into `corpus/<target>/`.
//!
//! Run from `fuzz`: `cargo run --example seed_corpus`. The output is
//! deterministic, so re-running it rewrites the same files.

use std::fs;
use std::path::{Path, PathBuf};

use bytes::Bytes;
use floe_storage::batch::Compression;
use floe_storage::ids::{PartitionKey, TopicId};
use floe_storage::records::{BatchBuilder, RecordSpec};
use floe_storage::segment::SegmentBuilder;
use floe_storage::wal::WalBuilder;
use kafka_protocol::messages::add_partitions_to_txn_request::{
    AddPartitionsToTxnTopic, AddPartitionsToTxnTransaction,
};
use kafka_protocol::messages::alter_client_quotas_request::{
    EntityData as QuotaEntityData, EntryData as QuotaEntryData, OpData as QuotaOpData,
};
use kafka_protocol::messages::api_versions_response::ApiVersion;
use kafka_protocol::messages::consumer_group_heartbeat_request::TopicPartitions as ConsumerGroupTopicPartitions;
use kafka_protocol::messages::create_topics_request::{
    CreatableReplicaAssignment, CreatableTopic, CreatableTopicConfig,
};
use kafka_protocol::messages::delete_records_request::{
    DeleteRecordsPartition, DeleteRecordsTopic,
};
use kafka_protocol::messages::delete_topics_request::DeleteTopicState;
use kafka_protocol::messages::describe_client_quotas_request::ComponentData as QuotaComponent;
use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use kafka_protocol::messages::describe_log_dirs_request::DescribableLogDirTopic;
use kafka_protocol::messages::describe_producers_request::TopicRequest as ProducersTopic;
use kafka_protocol::messages::describe_share_group_offsets_request;
use kafka_protocol::messages::describe_topic_partitions_request::{
    Cursor as PartitionsCursor, TopicRequest as PartitionsTopic,
};
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::offset_fetch_request::{
    OffsetFetchRequestGroup, OffsetFetchRequestTopic, OffsetFetchRequestTopics,
};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::share_acknowledge_request::{
    AcknowledgePartition, AcknowledgeTopic, AcknowledgementBatch as ShareAckBatch,
};
use kafka_protocol::messages::share_fetch_request::{
    AcknowledgementBatch, FetchPartition as ShareFetchPartition, FetchTopic as ShareFetchTopic,
    ForgottenTopic,
};
use kafka_protocol::messages::txn_offset_commit_request::{
    TxnOffsetCommitRequestPartition, TxnOffsetCommitRequestTopic,
};
use kafka_protocol::messages::{
    AddOffsetsToTxnRequest, AddPartitionsToTxnRequest, ApiKey, ApiVersionsRequest,
    ApiVersionsResponse, BrokerId, CreateTopicsRequest, DeleteRecordsRequest, DeleteTopicsRequest,
    DescribeConfigsRequest, DescribeTransactionsRequest, EndTxnRequest, FetchRequest,
    FindCoordinatorRequest, GroupId, HeartbeatRequest, InitProducerIdRequest, JoinGroupRequest,
    ListOffsetsRequest, ListTransactionsRequest, MetadataRequest, MetadataResponse, ProduceRequest,
    ProducerId, RequestHeader, RequestKind, ResponseKind, TopicName, TransactionalId,
    TxnOffsetCommitRequest,
};
use kafka_protocol::messages::{
    AlterShareGroupOffsetsRequest, DeleteShareGroupOffsetsRequest,
    alter_share_group_offsets_request, delete_share_group_offsets_request,
};
use kafka_protocol::messages::{
    ConsumerGroupDescribeRequest, ConsumerGroupHeartbeatRequest, DescribeShareGroupOffsetsRequest,
    ListGroupsRequest, ShareAcknowledgeRequest, ShareFetchRequest, ShareGroupDescribeRequest,
    ShareGroupHeartbeatRequest,
};
use kafka_protocol::messages::{
    DescribeLogDirsRequest, DescribeProducersRequest, DescribeTopicPartitionsRequest,
};
use kafka_protocol::protocol::StrBytes;

type AnyResult<T> = Result<T, Box<dyn std::error::Error>>;

/// Largest seed file: the targets run with `-max_len=65536`.
const MAX_SEED: usize = 64 * 1024;

const CODECS: [Compression; 5] = [
    Compression::None,
    Compression::Gzip,
    Compression::Snappy,
    Compression::Lz4,
    Compression::Zstd,
];

fn batch(base: i64, records: usize, ts: i64, codec: Compression) -> AnyResult<Bytes> {
    let mut b = BatchBuilder::new(base, ts);
    for i in 0..records {
        let mut r = RecordSpec::new(
            (i % 3 != 0).then(|| format!("key-{i}").into_bytes()),
            (i % 5 != 4).then(|| vec![b'a' + (i % 26) as u8; 8 + i % 40]),
            (i as i64) * 3,
        );
        if i % 4 == 1 {
            r.headers = vec![
                (b"trace".to_vec(), Some(format!("t{i}").into_bytes())),
                (b"empty".to_vec(), None),
            ];
        }
        b.push(r);
    }
    Ok(b.build(codec)?)
}

fn topic(n: u8) -> TopicId {
    TopicId::from_bytes([n; 16])
}

fn write(dir: &Path, name: &str, bytes: &[u8]) -> AnyResult<()> {
    if bytes.len() > MAX_SEED {
        return Err(format!("seed {name} is {} bytes, over {MAX_SEED}", bytes.len()).into());
    }
    fs::write(dir.join(name), bytes)?;
    println!("{}/{name}: {} bytes", dir.display(), bytes.len());
    Ok(())
}

fn dir(root: &Path, target: &str) -> AnyResult<PathBuf> {
    let d = root.join(target);
    fs::create_dir_all(&d)?;
    Ok(d)
}

fn batch_view(root: &Path) -> AnyResult<()> {
    let d = dir(root, "batch_view")?;
    for codec in CODECS {
        let name = format!("{codec:?}").to_lowercase();
        write(&d, &name, &batch(100, 12, 1_700_000_000_000, codec)?)?;
    }
    write(&d, "one_record", &batch(0, 1, 0, Compression::None)?)?;
    let empty = BatchBuilder::new(5, 0).build(Compression::None)?;
    write(&d, "no_records", &empty)?;
    let txn = {
        let mut b = BatchBuilder::new(7, 42).producer(1234, 3, 17, true);
        b.push(RecordSpec::new(None, Some(b"commit".to_vec()), 0));
        b.build(Compression::None)?
    };
    write(&d, "transactional", &txn)?;
    // Several batches back to back, as in a .log object or a WAL range.
    let mut log = Vec::new();
    for (i, codec) in CODECS.into_iter().enumerate() {
        log.extend_from_slice(&batch(i as i64 * 10, 4, 1_000 + i as i64, codec)?);
    }
    write(&d, "concatenated", &log)?;
    // Codec byte + compressed data, for the target's direct decompress call.
    let plain = b"floe floe floe floe floe floe floe floe".repeat(20);
    for codec in CODECS.into_iter().skip(1) {
        let mut raw = vec![codec.id()];
        raw.extend(floe_storage::records::compress(codec, &plain)?);
        write(
            &d,
            &format!("raw_{}", format!("{codec:?}").to_lowercase()),
            &raw,
        )?;
    }
    Ok(())
}

fn wal_footer(root: &Path) -> AnyResult<()> {
    let d = dir(root, "wal_footer")?;
    let layouts: [(&str, &[(u8, u32, usize)]); 3] = [
        ("one_partition", &[(1, 0, 1)]),
        ("three_partitions", &[(1, 0, 2), (1, 7, 1), (2, 3, 3)]),
        (
            "many_partitions",
            &[
                (1, 0, 1),
                (1, 1, 1),
                (1, 2, 1),
                (2, 0, 1),
                (3, 0, 1),
                (3, 9, 1),
                (4, 5, 1),
                (9, 1, 1),
            ],
        ),
    ];
    for (name, parts) in layouts {
        let mut w = WalBuilder::new();
        for &(t, p, batches) in parts {
            let key = PartitionKey::new(topic(t), p);
            for b in 0..batches {
                w.append(key, batch(b as i64 * 10, 3, 5_000, Compression::None)?)?;
            }
        }
        let obj = w.finish();
        let bytes: Vec<u8> = obj.chunks.iter().flat_map(|c| c.iter().copied()).collect();
        write(&d, name, &bytes)?;
        // The footer and trailer alone (the data section cut off).
        let tail = obj.chunks.last().map(|c| c.to_vec()).unwrap_or_default();
        write(&d, &format!("{name}_tail"), &tail)?;
    }
    Ok(())
}

fn segment_index(root: &Path) -> AnyResult<()> {
    let d = dir(root, "segment_index")?;
    for (name, batches, interval) in [("small", 8usize, 1u64), ("medium", 120, 300)] {
        let mut b = SegmentBuilder::new(interval);
        let mut off = 1_000i64;
        for i in 0..batches {
            let n = 1 + i % 3;
            // Timestamps dip now and then so the time index skips entries.
            let ts = 10_000 + off * 10 - if i % 5 == 2 { 300 } else { 0 };
            b.append(batch(off, n, ts, Compression::None)?)?;
            off += n as i64;
        }
        let seg = b.finish()?;
        for (kind, index) in [("index", &seg.index), ("timeindex", &seg.timeindex)] {
            let mut input = seg.log_size.to_be_bytes().to_vec();
            input.extend_from_slice(index);
            write(&d, &format!("{name}_{kind}"), &input)?;
        }
    }
    Ok(())
}

fn name(s: &'static str) -> TopicName {
    TopicName(StrBytes::from_static_str(s))
}

fn text(s: &'static str) -> StrBytes {
    StrBytes::from_static_str(s)
}

/// A request body of `api_key` for `version`, with the fields that version
/// has filled in.
fn request_body(api_key: ApiKey, version: i16, records: &Bytes) -> Option<RequestKind> {
    let uuid = |n: u128| uuid::Uuid::from_u128(n);
    Some(match api_key {
        ApiKey::ApiVersions => RequestKind::ApiVersions(if version >= 3 {
            ApiVersionsRequest::default()
                .with_client_software_name(text("floe-seed"))
                .with_client_software_version(text("0.1.0"))
        } else {
            ApiVersionsRequest::default()
        }),
        ApiKey::Metadata => {
            let mut t = MetadataRequestTopic::default().with_name(Some(name("orders")));
            if version >= 10 {
                t = t.with_topic_id(uuid(7));
            }
            let mut m = MetadataRequest::default().with_topics(Some(vec![
                t,
                MetadataRequestTopic::default().with_name(Some(name("payments"))),
            ]));
            if version >= 4 {
                m = m.with_allow_auto_topic_creation(false);
            }
            RequestKind::Metadata(m)
        }
        ApiKey::Produce => {
            let mut t = TopicProduceData::default().with_partition_data(vec![
                PartitionProduceData::default()
                    .with_index(0)
                    .with_records(Some(records.clone())),
                PartitionProduceData::default()
                    .with_index(1)
                    .with_records(None),
            ]);
            t = if version >= 13 {
                t.with_topic_id(uuid(9))
            } else {
                t.with_name(name("orders"))
            };
            RequestKind::Produce(
                ProduceRequest::default()
                    .with_transactional_id(Some(TransactionalId(text("txn-1"))))
                    .with_acks(-1)
                    .with_timeout_ms(30_000)
                    .with_topic_data(vec![t]),
            )
        }
        ApiKey::Fetch => {
            let mut p = FetchPartition::default()
                .with_partition(2)
                .with_fetch_offset(1_234_567)
                .with_partition_max_bytes(1 << 20);
            if version >= 5 {
                p = p.with_log_start_offset(10);
            }
            if version >= 9 {
                p = p.with_current_leader_epoch(4);
            }
            if version >= 12 {
                p = p.with_last_fetched_epoch(3);
            }
            let mut t = FetchTopic::default().with_partitions(vec![p]);
            t = if version >= 13 {
                t.with_topic_id(uuid(5))
            } else {
                t.with_topic(name("orders"))
            };
            let mut f = FetchRequest::default()
                .with_max_wait_ms(500)
                .with_min_bytes(1)
                .with_max_bytes(50 << 20)
                .with_isolation_level(1)
                .with_topics(vec![t]);
            if version <= 14 {
                f = f.with_replica_id(BrokerId(-1));
            }
            if version >= 7 {
                f = f.with_session_id(99).with_session_epoch(1);
            }
            if version >= 11 {
                f = f.with_rack_id(text("rack-a"));
            }
            RequestKind::Fetch(f)
        }
        ApiKey::ListOffsets => {
            let mut p = ListOffsetsPartition::default()
                .with_partition_index(0)
                .with_timestamp(-1);
            if version >= 4 {
                p = p.with_current_leader_epoch(2);
            }
            let mut l = ListOffsetsRequest::default()
                .with_replica_id(BrokerId(-1))
                .with_topics(vec![
                    ListOffsetsTopic::default()
                        .with_name(name("orders"))
                        .with_partitions(vec![p]),
                ]);
            if version >= 2 {
                l = l.with_isolation_level(1);
            }
            RequestKind::ListOffsets(l)
        }
        ApiKey::FindCoordinator => {
            let mut f = FindCoordinatorRequest::default();
            if version >= 4 {
                f = f.with_coordinator_keys(vec![text("group-a"), text("group-b")]);
            } else {
                f = f.with_key(text("group-a"));
            }
            if version >= 1 {
                f = f.with_key_type(0);
            }
            RequestKind::FindCoordinator(f)
        }
        ApiKey::CreateTopics => RequestKind::CreateTopics(
            CreateTopicsRequest::default()
                .with_topics(vec![
                    CreatableTopic::default()
                        .with_name(name("orders"))
                        .with_num_partitions(-1)
                        .with_replication_factor(-1)
                        .with_assignments(vec![
                            CreatableReplicaAssignment::default()
                                .with_partition_index(0)
                                .with_broker_ids(vec![BrokerId(1), BrokerId(2)]),
                        ])
                        .with_configs(vec![
                            CreatableTopicConfig::default()
                                .with_name(text("cleanup.policy"))
                                .with_value(Some(text("compact"))),
                        ]),
                ])
                .with_timeout_ms(30_000)
                .with_validate_only(true),
        ),
        ApiKey::DeleteTopics => RequestKind::DeleteTopics(if version >= 6 {
            DeleteTopicsRequest::default()
                .with_topics(vec![
                    DeleteTopicState::default().with_name(Some(name("orders"))),
                    DeleteTopicState::default().with_topic_id(uuid(3)),
                ])
                .with_timeout_ms(30_000)
        } else {
            DeleteTopicsRequest::default()
                .with_topic_names(vec![name("orders")])
                .with_timeout_ms(30_000)
        }),
        ApiKey::DeleteRecords => RequestKind::DeleteRecords(
            DeleteRecordsRequest::default()
                .with_topics(vec![
                    DeleteRecordsTopic::default()
                        .with_name(name("orders"))
                        .with_partitions(vec![
                            DeleteRecordsPartition::default()
                                .with_partition_index(0)
                                .with_offset(100),
                        ]),
                ])
                .with_timeout_ms(30_000),
        ),
        ApiKey::OffsetFetch => RequestKind::OffsetFetch(if version >= 8 {
            let mut t = OffsetFetchRequestTopics::default().with_partition_indexes(vec![0, 1]);
            t = if version >= 10 {
                t.with_topic_id(uuid(4))
            } else {
                t.with_name(name("orders"))
            };
            kafka_protocol::messages::OffsetFetchRequest::default()
                .with_groups(vec![
                    OffsetFetchRequestGroup::default()
                        .with_group_id(GroupId(text("group-a")))
                        .with_topics(Some(vec![t])),
                ])
                .with_require_stable(true)
        } else {
            kafka_protocol::messages::OffsetFetchRequest::default()
                .with_group_id(GroupId(text("group-a")))
                .with_topics(Some(vec![
                    OffsetFetchRequestTopic::default()
                        .with_name(name("orders"))
                        .with_partition_indexes(vec![0, 1]),
                ]))
        }),
        ApiKey::Heartbeat => RequestKind::Heartbeat(
            HeartbeatRequest::default()
                .with_group_id(GroupId(text("group-a")))
                .with_generation_id(3)
                .with_member_id(text("member-1")),
        ),
        ApiKey::InitProducerId => RequestKind::InitProducerId(
            InitProducerIdRequest::default()
                .with_transactional_id(Some(TransactionalId(text("txn-1"))))
                .with_transaction_timeout_ms(60_000),
        ),
        ApiKey::DescribeConfigs => {
            RequestKind::DescribeConfigs(DescribeConfigsRequest::default().with_resources(vec![
                DescribeConfigsResource::default()
                    .with_resource_type(2)
                    .with_resource_name(text("orders"))
                    .with_configuration_keys(Some(vec![text("retention.ms")])),
            ]))
        }
        ApiKey::JoinGroup => RequestKind::JoinGroup(
            JoinGroupRequest::default()
                .with_group_id(GroupId(text("group-a")))
                .with_session_timeout_ms(45_000)
                .with_protocol_type(text("consumer"))
                .with_protocols(vec![
                    JoinGroupRequestProtocol::default()
                        .with_name(text("range"))
                        .with_metadata(Bytes::from_static(&[0, 3, 0, 0, 0, 0])),
                ]),
        ),
        ApiKey::AddPartitionsToTxn => {
            let topics = vec![
                AddPartitionsToTxnTopic::default()
                    .with_name(name("orders"))
                    .with_partitions(vec![0, 1]),
            ];
            let r = if version <= 3 {
                AddPartitionsToTxnRequest::default()
                    .with_v3_and_below_transactional_id(TransactionalId(text("txn-a")))
                    .with_v3_and_below_producer_id(ProducerId(7))
                    .with_v3_and_below_producer_epoch(2)
                    .with_v3_and_below_topics(topics)
            } else {
                AddPartitionsToTxnRequest::default().with_transactions(vec![
                    AddPartitionsToTxnTransaction::default()
                        .with_transactional_id(TransactionalId(text("txn-a")))
                        .with_producer_id(ProducerId(7))
                        .with_producer_epoch(2)
                        .with_verify_only(true)
                        .with_topics(topics),
                ])
            };
            RequestKind::AddPartitionsToTxn(r)
        }
        ApiKey::AddOffsetsToTxn => RequestKind::AddOffsetsToTxn(
            AddOffsetsToTxnRequest::default()
                .with_transactional_id(TransactionalId(text("txn-a")))
                .with_producer_id(ProducerId(7))
                .with_producer_epoch(2)
                .with_group_id(GroupId(text("group-a"))),
        ),
        ApiKey::TxnOffsetCommit => RequestKind::TxnOffsetCommit(
            TxnOffsetCommitRequest::default()
                .with_transactional_id(TransactionalId(text("txn-a")))
                .with_group_id(GroupId(text("group-a")))
                .with_producer_id(ProducerId(7))
                .with_producer_epoch(2)
                .with_topics(vec![
                    TxnOffsetCommitRequestTopic::default()
                        .with_name(name("orders"))
                        .with_partitions(vec![
                            TxnOffsetCommitRequestPartition::default()
                                .with_partition_index(0)
                                .with_committed_offset(42)
                                .with_committed_metadata(Some(text("m"))),
                        ]),
                ]),
        ),
        ApiKey::EndTxn => RequestKind::EndTxn(
            EndTxnRequest::default()
                .with_transactional_id(TransactionalId(text("txn-a")))
                .with_producer_id(ProducerId(7))
                .with_producer_epoch(2)
                .with_committed(true),
        ),
        ApiKey::DescribeTransactions => RequestKind::DescribeTransactions(
            DescribeTransactionsRequest::default()
                .with_transactional_ids(vec![TransactionalId(text("txn-a"))]),
        ),
        ApiKey::ListTransactions => RequestKind::ListTransactions(
            ListTransactionsRequest::default()
                .with_state_filters(vec![text("Ongoing")])
                .with_producer_id_filters(vec![ProducerId(7)])
                .with_duration_filter(if version >= 1 { 1_000 } else { -1 }),
        ),
        ApiKey::ShareGroupHeartbeat => RequestKind::ShareGroupHeartbeat(
            ShareGroupHeartbeatRequest::default()
                .with_group_id(GroupId(text("share-a")))
                .with_member_id(text("Qk5mZW1iZXItMQ"))
                .with_member_epoch(0)
                .with_subscribed_topic_names(Some(vec![name("orders")])),
        ),
        ApiKey::ShareGroupDescribe => RequestKind::ShareGroupDescribe(
            ShareGroupDescribeRequest::default().with_group_ids(vec![GroupId(text("share-a"))]),
        ),
        ApiKey::ShareFetch => RequestKind::ShareFetch(
            ShareFetchRequest::default()
                .with_group_id(Some(GroupId(text("share-a"))))
                .with_member_id(Some(text("Qk5mZW1iZXItMQ")))
                .with_share_session_epoch(2)
                .with_max_wait_ms(500)
                .with_max_bytes(1 << 20)
                .with_max_records(500)
                .with_topics(vec![
                    ShareFetchTopic::default()
                        .with_topic_id(uuid::Uuid::from_u128(7))
                        .with_partitions(vec![
                            ShareFetchPartition::default()
                                .with_partition_index(0)
                                .with_acknowledgement_batches(vec![
                                    AcknowledgementBatch::default()
                                        .with_first_offset(10)
                                        .with_last_offset(12)
                                        .with_acknowledge_types(vec![1, 2, 3]),
                                ]),
                        ]),
                ])
                .with_forgotten_topics_data(vec![
                    ForgottenTopic::default()
                        .with_topic_id(uuid::Uuid::from_u128(8))
                        .with_partitions(vec![1]),
                ]),
        ),
        ApiKey::ShareAcknowledge => {
            // Partition 0 accepts a range, partition 1 gives one type per offset.
            let batch = |first: i64, types: Vec<i8>| {
                ShareAckBatch::default()
                    .with_first_offset(first)
                    .with_last_offset(first + types.len().max(1) as i64 - 1)
                    .with_acknowledge_types(types)
            };
            let partitions = vec![
                AcknowledgePartition::default()
                    .with_acknowledgement_batches(vec![batch(13, vec![1])]),
                AcknowledgePartition::default()
                    .with_partition_index(1)
                    .with_acknowledgement_batches(vec![batch(4, vec![0, 1, 2, 3, 4])]),
            ];
            let topic = AcknowledgeTopic::default()
                .with_topic_id(uuid::Uuid::from_u128(7))
                .with_partitions(partitions);
            RequestKind::ShareAcknowledge(
                ShareAcknowledgeRequest::default()
                    .with_group_id(Some(GroupId(text("share-a"))))
                    .with_member_id(Some(text("Qk5mZW1iZXItMQ")))
                    .with_share_session_epoch(3)
                    .with_topics(vec![topic]),
            )
        }
        ApiKey::DescribeClientQuotas => RequestKind::DescribeClientQuotas(
            kafka_protocol::messages::DescribeClientQuotasRequest::default()
                .with_components(vec![
                    QuotaComponent::default()
                        .with_entity_type(text("client-id"))
                        .with_match_type(0)
                        .with_match(Some(text("app"))),
                    QuotaComponent::default()
                        .with_entity_type(text("user"))
                        .with_match_type(1),
                ])
                .with_strict(true),
        ),
        ApiKey::AlterClientQuotas => RequestKind::AlterClientQuotas(
            kafka_protocol::messages::AlterClientQuotasRequest::default().with_entries(vec![
                QuotaEntryData::default()
                    .with_entity(vec![
                        QuotaEntityData::default()
                            .with_entity_type(text("client-id"))
                            .with_entity_name(Some(text("app"))),
                        QuotaEntityData::default().with_entity_type(text("user")),
                    ])
                    .with_ops(vec![
                        QuotaOpData::default()
                            .with_key(text("producer_byte_rate"))
                            .with_value(1_048_576.0),
                        QuotaOpData::default()
                            .with_key(text("consumer_byte_rate"))
                            .with_remove(true),
                    ]),
            ]),
        ),
        ApiKey::ConsumerGroupHeartbeat => RequestKind::ConsumerGroupHeartbeat(
            ConsumerGroupHeartbeatRequest::default()
                .with_group_id(GroupId(text("consumer-a")))
                .with_member_id(text("Qk5mZW1iZXItMQ"))
                .with_member_epoch(3)
                .with_instance_id(Some(text("instance-1")))
                .with_rebalance_timeout_ms(300_000)
                .with_subscribed_topic_names(Some(vec![name("orders")]))
                .with_server_assignor(Some(text("uniform")))
                .with_topic_partitions(Some(vec![
                    ConsumerGroupTopicPartitions::default()
                        .with_topic_id(uuid::Uuid::from_u128(7))
                        .with_partitions(vec![0, 2]),
                ])),
        ),
        ApiKey::ConsumerGroupDescribe => RequestKind::ConsumerGroupDescribe(
            ConsumerGroupDescribeRequest::default()
                .with_group_ids(vec![GroupId(text("consumer-a"))]),
        ),
        ApiKey::ListGroups => RequestKind::ListGroups(
            ListGroupsRequest::default()
                .with_states_filter(if version >= 4 {
                    vec![text("Stable")]
                } else {
                    vec![]
                })
                .with_types_filter(if version >= 5 {
                    vec![text("consumer")]
                } else {
                    vec![]
                }),
        ),
        ApiKey::DescribeShareGroupOffsets => RequestKind::DescribeShareGroupOffsets(
            DescribeShareGroupOffsetsRequest::default().with_groups(vec![
                describe_share_group_offsets_request::DescribeShareGroupOffsetsRequestGroup::default()
                    .with_group_id(GroupId(text("share-a")))
                    .with_topics(Some(vec![
                        describe_share_group_offsets_request::DescribeShareGroupOffsetsRequestTopic::default()
                            .with_topic_name(name("orders"))
                            .with_partitions(vec![0, 1]),
                    ])),
            ]),
        ),
        ApiKey::AlterShareGroupOffsets => RequestKind::AlterShareGroupOffsets(
            AlterShareGroupOffsetsRequest::default()
                .with_group_id(GroupId(text("share-a")))
                .with_topics(vec![
                    alter_share_group_offsets_request::AlterShareGroupOffsetsRequestTopic::default()
                        .with_topic_name(name("orders"))
                        .with_partitions(vec![
                            alter_share_group_offsets_request::AlterShareGroupOffsetsRequestPartition::default()
                                .with_partition_index(0)
                                .with_start_offset(42),
                            alter_share_group_offsets_request::AlterShareGroupOffsetsRequestPartition::default()
                                .with_partition_index(1)
                                .with_start_offset(0),
                        ]),
                ]),
        ),
        ApiKey::DeleteShareGroupOffsets => RequestKind::DeleteShareGroupOffsets(
            DeleteShareGroupOffsetsRequest::default()
                .with_group_id(GroupId(text("share-a")))
                .with_topics(vec![
                    delete_share_group_offsets_request::DeleteShareGroupOffsetsRequestTopic::default()
                        .with_topic_name(name("orders")),
                    delete_share_group_offsets_request::DeleteShareGroupOffsetsRequestTopic::default()
                        .with_topic_name(name("payments")),
                ]),
        ),
        ApiKey::DescribeLogDirs => RequestKind::DescribeLogDirs(
            DescribeLogDirsRequest::default().with_topics(Some(vec![
                DescribableLogDirTopic::default()
                    .with_topic(name("orders"))
                    .with_partitions(vec![0, 1, 2]),
            ])),
        ),
        ApiKey::DescribeTopicPartitions => RequestKind::DescribeTopicPartitions(
            DescribeTopicPartitionsRequest::default()
                .with_topics(vec![
                    PartitionsTopic::default().with_name(name("orders")),
                    PartitionsTopic::default().with_name(name("payments")),
                ])
                .with_response_partition_limit(2)
                .with_cursor(Some(
                    PartitionsCursor::default()
                        .with_topic_name(name("orders"))
                        .with_partition_index(1),
                )),
        ),
        ApiKey::DescribeProducers => RequestKind::DescribeProducers(
            DescribeProducersRequest::default().with_topics(vec![
                ProducersTopic::default()
                    .with_name(name("orders"))
                    .with_partition_indexes(vec![0, 1]),
            ]),
        ),
        _ => return None,
    })
}

/// Encoded requests (frames without the length prefix), then responses
/// (api key and version, then the response frame without its length
/// prefix), for the main APIs over their version ranges.
fn kafka_requests(root: &Path) -> AnyResult<()> {
    let d = dir(root, "kafka_requests")?;
    let records = batch(0, 3, 1_700_000_000_000, Compression::None)?;
    let apis = [
        ApiKey::ApiVersions,
        ApiKey::Metadata,
        ApiKey::Produce,
        ApiKey::Fetch,
        ApiKey::ListOffsets,
        ApiKey::FindCoordinator,
        ApiKey::CreateTopics,
        ApiKey::DeleteTopics,
        ApiKey::DeleteRecords,
        ApiKey::OffsetFetch,
        ApiKey::Heartbeat,
        ApiKey::InitProducerId,
        ApiKey::DescribeConfigs,
        ApiKey::JoinGroup,
        ApiKey::AddPartitionsToTxn,
        ApiKey::AddOffsetsToTxn,
        ApiKey::TxnOffsetCommit,
        ApiKey::EndTxn,
        ApiKey::DescribeTransactions,
        ApiKey::ListTransactions,
        ApiKey::ShareGroupHeartbeat,
        ApiKey::ShareGroupDescribe,
        ApiKey::ShareFetch,
        ApiKey::ShareAcknowledge,
        ApiKey::DescribeClientQuotas,
        ApiKey::AlterClientQuotas,
        ApiKey::ConsumerGroupHeartbeat,
        ApiKey::ConsumerGroupDescribe,
        ApiKey::ListGroups,
        ApiKey::DescribeShareGroupOffsets,
        ApiKey::AlterShareGroupOffsets,
        ApiKey::DeleteShareGroupOffsets,
        ApiKey::DescribeLogDirs,
        ApiKey::DescribeTopicPartitions,
        ApiKey::DescribeProducers,
    ];
    for api_key in apis {
        let range = api_key.valid_versions();
        for version in range.min..=range.max {
            let Some(body) = request_body(api_key, version, &records) else {
                continue;
            };
            let header = RequestHeader::default()
                .with_request_api_key(api_key as i16)
                .with_request_api_version(version)
                .with_correlation_id(1_000 + i32::from(version))
                .with_client_id(Some(text("floe-seed")));
            let frame = match floe_proxy::codec::encode_request(&header, &body) {
                Ok(f) => f,
                Err(e) => {
                    println!("skip {api_key:?} v{version}: {e}");
                    continue;
                }
            };
            let name = format!("{api_key:?}_v{version}").to_lowercase();
            write(&d, &name, &frame[4..])?;
        }
    }
    let responses = [
        (
            ApiKey::ApiVersions,
            3,
            ResponseKind::ApiVersions(ApiVersionsResponse::default().with_api_keys(vec![
                ApiVersion::default()
                    .with_api_key(3)
                    .with_min_version(0)
                    .with_max_version(12),
            ])),
        ),
        (
            ApiKey::Metadata,
            1,
            ResponseKind::Metadata(metadata_response(1)),
        ),
        (
            ApiKey::Metadata,
            12,
            ResponseKind::Metadata(metadata_response(12)),
        ),
    ];
    for (api_key, version, body) in responses {
        let frame = floe_proxy::codec::encode_response(api_key, version, 7, &body)?;
        let mut input = (api_key as i16).to_be_bytes().to_vec();
        input.extend_from_slice(&version.to_be_bytes());
        input.extend_from_slice(&frame[4..]);
        let name = format!("response_{api_key:?}_v{version}").to_lowercase();
        write(&d, &name, &input)?;
    }
    Ok(())
}

fn metadata_response(version: i16) -> MetadataResponse {
    let mut topic = MetadataResponseTopic::default()
        .with_name(Some(name("orders")))
        .with_partitions(vec![
            MetadataResponsePartition::default()
                .with_partition_index(0)
                .with_leader_id(BrokerId(1))
                .with_replica_nodes(vec![BrokerId(1), BrokerId(2)])
                .with_isr_nodes(vec![BrokerId(1)]),
        ]);
    if version >= 10 {
        topic = topic.with_topic_id(uuid::Uuid::from_u128(7));
    }
    MetadataResponse::default()
        .with_brokers(vec![
            MetadataResponseBroker::default()
                .with_node_id(BrokerId(1))
                .with_host(text("localhost"))
                .with_port(9092),
        ])
        .with_topics(vec![topic])
}

fn main() -> AnyResult<()> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus");
    batch_view(&root)?;
    wal_footer(&root)?;
    segment_index(&root)?;
    kafka_requests(&root)?;
    indexer_inputs(&root)?;
    Ok(())
}

/// Seeds of `indexer_inputs`: the first byte picks the input kind.
fn indexer_inputs(root: &Path) -> AnyResult<()> {
    let d = dir(root, "indexer_inputs")?;
    let with = |sel: u8, body: &[u8]| {
        let mut v = vec![sel];
        v.extend_from_slice(body);
        v
    };
    write(
        &d,
        "definition",
        &with(
            0,
            br#"[{"name":"amount","path":"$.order.amount","type":"float64"},{"name":"sku","path":"$.items[0][\"sku id\"]","type":"string"}]"#,
        ),
    )?;
    let value =
        br#"{"a":{"b":"x"},"items":[{"n":5}],"x y":1.5,"ok":true,"at":"2026-11-29T14:00:00Z"}"#;
    write(&d, "value", &with(1, value))?;
    let records: Vec<floe_storage::records::Record> = (0..40)
        .map(|i| floe_storage::records::Record {
            offset: i,
            timestamp: 1_795_960_800_000 + i,
            key: Some(Bytes::from(format!("k{}", i % 3))),
            value: Some(Bytes::from_static(value)),
            headers: vec![],
        })
        .collect();
    let def = floe_metadata::export_def::IndexDefinition::parse(
        r#"[{"name":"n","path":"$.items[0].n","type":"int64"}]"#,
    )?;
    let opts = floe_indexer::columns::FileOptions {
        row_group_rows: 16,
        ..Default::default()
    };
    let file = floe_indexer::columns::write_file(0, &records, &def, &opts)?;
    write(&d, "parquet", &with(2, &file))?;
    write(&d, "upsert-data", &with(5, &file))?;
    let deletes = floe_indexer::table::upsert::position_delete_parquet(&[
        ("file:///d/exports/t/0-a.parquet", 0),
        ("file:///d/exports/t/0-a.parquet", 7),
        ("file:///d/exports/t/0-b.parquet", 2),
    ])?;
    write(&d, "position-deletes", &with(5, &deletes))?;
    write(
        &d,
        "catalog-uri",
        &with(
            5,
            b"postgresql://floe:pw@db:5432/lake?sslmode=verify-ca&sslrootcert=%2Fetc%2Fca.pem&hostaddr=127.0.0.1",
        ),
    )?;
    write(
        &d,
        "query",
        &with(
            3,
            b"key=k1&from=2026-11-29T14:00:00Z&to=1795964400000&limit=5",
        ),
    )?;
    Ok(())
}
