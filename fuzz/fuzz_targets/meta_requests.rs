//! Fuzzes the metadata service's decoders and its state machine: the first
//! byte picks what the rest is decoded as (API protobuf requests with their
//! conversions, Raft JSON bodies, JSON commands applied to a model, a JSON
//! snapshot of the model). Nothing may panic.

#![no_main]

use floe_metadata::api::{convert, proto, txn_routes};
use floe_metadata::command::Command;
use floe_metadata::ids::Revision;
use floe_metadata::raft::TypeConfig;
use floe_metadata::state::{ClusterState, validate_topic_name};
use floe_metadata::topic_config::TopicConfig;
use libfuzzer_sys::fuzz_target;
use prost::Message;

fn apply_all(state: &mut ClusterState, cmds: &[Command]) {
    for (i, c) in cmds.iter().enumerate() {
        let _ = state.apply(Revision(i as u64 + 1), c);
        let _ = floe_metadata::controller::plan(state, i as u64 * 1000);
    }
    let _ = convert::cluster_view(state);
}

fuzz_target!(|data: &[u8]| {
    let Some((&sel, body)) = data.split_first() else {
        return;
    };
    match sel % 9 {
        0 => {
            if let Ok(r) = proto::CommitRequest::decode(body) {
                for range in &r.ranges {
                    let _ = convert::partition(range.partition.as_ref());
                }
            }
        }
        1 => {
            if let Ok(r) = proto::CreateTopicRequest::decode(body) {
                let _ = validate_topic_name(&r.name);
                let _ = TopicConfig::from_settings(&r.configs.into_iter().collect());
            }
        }
        2 => {
            if let Ok(r) = proto::ReleaseRequest::decode(body) {
                for p in &r.partitions {
                    let _ = convert::partition(p.partition.as_ref());
                }
            }
        }
        3 => {
            let _ =
                proto::IndexRequest::decode(body).map(|r| convert::partition(r.partition.as_ref()));
            let _ = proto::WatchRequest::decode(body);
            let _ = proto::ErrorBody::decode(body);
            // The indexer's export steps.
            let _ = proto::ExportBeginRequest::decode(body)
                .map(|r| convert::partition(r.partition.as_ref()));
            let _ = proto::ExportCommitRequest::decode(body)
                .map(|r| convert::partition(r.partition.as_ref()));
            let _ = proto::ExportForgetRequest::decode(body);
            // Dynamic broker configs, with the model's checks.
            let _ = proto::BrokerConfigsRequest::decode(body);
            if let Ok(r) = proto::AlterBrokerConfigRequest::decode(body) {
                let _ = floe_metadata::broker_config::check_resource(&r.broker);
                let _ = floe_metadata::broker_config::BrokerConfigs::default()
                    .alter(&r.set.into_iter().collect(), &r.delete);
            }
            let _ = proto::ExportStateResponse::decode(body);
            // The indexer's table steps (Iceberg pointer, field ids, compactions).
            let _ = proto::TableColumnsRequest::decode(body);
            let _ = proto::TableCommitRequest::decode(body);
            if let Ok(r) = proto::TableStateResponse::decode(body) {
                let _ = r
                    .compacting
                    .map(floe_metadata::api::table_routes::compaction_from);
            }
            if let Ok(r) = proto::TableCompactBeginRequest::decode(body) {
                let _ = r
                    .compaction
                    .map(floe_metadata::api::table_routes::compaction_from);
            }
            let _ = proto::TableCompactCommitRequest::decode(body);
            // Classic groups' stored membership.
            let _ = proto::StoreGroupRequest::decode(body);
            // A share-partition's state deleted by its owner.
            let _ = proto::ShareForgetRequest::decode(body)
                .map(|r| convert::partition(r.partition.as_ref()));
            let _ = proto::GroupRecordsResponse::decode(body);
            // A transaction coordinator's steps, and a commit's transactional events.
            if let Ok(r) = proto::TxnRequest::decode(body) {
                let _ = txn_routes::command(r);
            }
            if let Ok(r) = proto::CommitRequest::decode(body) {
                for t in &r.txns {
                    let _ = txn_routes::range_txns(t);
                }
            }
        }
        4 => {
            if let Ok(cmds) = serde_json::from_slice::<Vec<Command>>(body) {
                apply_all(&mut ClusterState::default(), &cmds);
            }
        }
        5 => {
            // Raft bodies: binary (format byte 0x01) or JSON from an older node.
            use floe_metadata::raft::codec::decode;
            let _ = decode::<openraft::raft::AppendEntriesRequest<TypeConfig>>(body);
            let _ = decode::<openraft::raft::VoteRequest<u64>>(body);
            if let Ok(cmds) = decode::<Vec<Command>>(body) {
                apply_all(&mut ClusterState::default(), &cmds);
            }
        }
        6 => {
            let _ = floe_metadata::raft::codec::decode::<
                openraft::raft::InstallSnapshotRequest<TypeConfig>,
            >(body);
        }
        7 => {
            // A snapshot from a peer, then more commands on top of it.
            let mut de =
                serde_json::Deserializer::from_slice(body).into_iter::<serde_json::Value>();
            let state = de
                .next()
                .and_then(|v| v.ok())
                .and_then(|v| serde_json::from_value::<ClusterState>(v).ok());
            let cmds = de
                .next()
                .and_then(|v| v.ok())
                .and_then(|v| serde_json::from_value::<Vec<Command>>(v).ok());
            if let (Some(mut state), Some(cmds)) = (state, cmds) {
                apply_all(&mut state, &cmds);
            }
        }
        _ => {
            // Replies as a client reads them: decoded, then into the model.
            let _ = proto::StatusResponse::decode(body);
            if let Ok(v) = proto::ClusterView::decode(body) {
                let _ = convert::cluster_view_from(v);
            }
            if let Ok(r) = proto::IndexResponse::decode(body) {
                let p = floe_metadata::ids::PartitionKey::new(
                    floe_metadata::ids::TopicId(uuid::Uuid::nil()),
                    0,
                );
                let _ = convert::partition_index_from(p, r);
            }
            if let Ok(r) = proto::CommitResponse::decode(body) {
                let _ = convert::commit_outcome(r);
            }
            if let Ok(r) = proto::TxnResponse::decode(body) {
                let _ = txn_routes::reply(r);
            }
            if let Ok(l) = proto::TxnListResponse::decode(body) {
                for t in l.txns {
                    let _ = txn_routes::info(t);
                }
            }
            if let Ok(t) = proto::TopicInfo::decode(body) {
                let _ = convert::topic_info_from(t);
            }
            if let Ok(l) = proto::ObjectList::decode(body) {
                for o in l.objects {
                    let _ = convert::unreferenced_from(o);
                }
            }
        }
    }
});
