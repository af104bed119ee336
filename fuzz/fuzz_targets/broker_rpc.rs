//! Fuzzes the broker's internal RPC decoding: every request a broker decodes
//! from a peer proxy and every reply a proxy decodes from a broker
//! (protobuf, `floe_broker::rpc::proto`, `floe_broker::group_rpc::proto` and
//! `floe_broker::txn::rpc::proto`, with a transaction step read into its
//! command and a reply into the coordinator's answer; and a group's stored
//! membership, `GroupRecord`, resumed by a coordinator; a share-partition's
//! stored window text, `decode_window`, and the dead-letter lookup of a
//! record in fetched batches),
//! then what is read out of them: the partition (`convert::partition`), an
//! error's kind by its wire name, the offset spec. The first byte picks the
//! message. Nothing may panic, and decoding may not allocate beyond what the
//! bytes hold (prost bounds lengths by the input; libFuzzer's malloc limit
//! catches the rest).

#![no_main]

use floe_broker::ErrorKind;
use floe_broker::group_rpc::proto as group;
use floe_broker::rpc::proto;
use floe_broker::txn::rpc::proto as txn;
use floe_metadata::api::{convert, txn_routes};
use libfuzzer_sys::fuzz_target;
use prost::Message;

fn partition(p: Option<&proto::Partition>) {
    if let Ok(key) = convert::partition(p) {
        // A key read back from the wire encodes to the same message.
        let again = convert::partition_msg(&key);
        assert_eq!(convert::partition(Some(&again)).ok(), Some(key));
    }
}

fn error(e: Option<&proto::Error>) {
    if let Some(e) = e
        && let Some(kind) = ErrorKind::from_name(&e.kind)
    {
        assert_eq!(kind.name(), e.kind);
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&which, rest)) = data.split_first() else {
        return;
    };
    let body = bytes::Bytes::copy_from_slice(rest);
    match which % 21 {
        0 => {
            if let Ok(r) = proto::ProduceRequest::decode(body) {
                partition(r.partition.as_ref());
                assert!(r.records.len() <= rest.len());
            }
        }
        1 => {
            if let Ok(r) = proto::FetchRequest::decode(body) {
                partition(r.partition.as_ref());
            }
        }
        2 => {
            if let Ok(r) = proto::FetchResponse::decode(body) {
                error(r.error.as_ref());
                let total: usize = r.batches.iter().map(|b| b.len()).sum();
                assert!(total <= rest.len());
            }
        }
        3 => {
            if let Ok(r) = proto::WaitRequest::decode(body) {
                partition(r.partition.as_ref());
            }
        }
        4 => {
            if let Ok(r) = proto::ListOffsetRequest::decode(body) {
                partition(r.partition.as_ref());
            }
        }
        5 => {
            if let Ok(r) = proto::ListOffsetResponse::decode(body) {
                error(r.error.as_ref());
            }
        }
        6 => {
            if let Ok(r) = proto::DeleteRecordsRequest::decode(body) {
                partition(r.partition.as_ref());
            }
        }
        7 => {
            if let Ok(r) = proto::DeleteRecordsResponse::decode(body) {
                error(r.error.as_ref());
            }
        }
        8 => {
            if let Ok(r) = proto::ProduceResponse::decode(body) {
                error(r.error.as_ref());
            }
        }
        9 => {
            let _ = group::Join::decode(body);
        }
        10 => {
            let _ = group::JoinReply::decode(body);
        }
        11 => {
            let _ = group::Sync::decode(body);
        }
        12 => {
            let _ = group::SyncReply::decode(body);
        }
        13 => {
            let _ = group::MemberCall::decode(body);
            let _ = group::Leave::decode(bytes::Bytes::copy_from_slice(rest));
        }
        14 => {
            let _ = group::GroupIds::decode(body);
            let _ = group::ErrorReply::decode(bytes::Bytes::copy_from_slice(rest));
            // A group's stored membership, as another broker wrote it to the
            // metadata service, resumed by a coordinator taking the shard.
            use floe_broker::group::{GroupConfig, GroupCoordinator, GroupRecord, shard_of};
            if GroupRecord::from_bytes("g", rest).is_ok() {
                let c = GroupCoordinator::new(GroupConfig::default());
                let shard = shard_of("g", c.config().shards);
                assert_eq!(c.load_shard(shard, vec![("g".into(), rest.to_vec())]), 1);
                let _ = c.describe_group("g");
                let _ = c.list_groups(&[]);
            }
        }
        15 => {
            let _ = group::Descriptions::decode(body);
            // The transaction routes (markers, a commit's check, DescribeProducers).
            let again = || bytes::Bytes::copy_from_slice(rest);
            if let Ok(r) = proto::MarkerRequest::decode(again()) {
                partition(r.partition.as_ref());
            }
            if let Ok(r) = proto::MarkerResponse::decode(again()) {
                error(r.error.as_ref());
            }
            if let Ok(r) = proto::ProducersRequest::decode(again()) {
                partition(r.partition.as_ref());
            }
            // A commit's check at a partition's owner.
            if let Ok(r) = proto::DurableRequest::decode(again()) {
                partition(r.partition.as_ref());
            }
            if let Ok(r) = proto::DurableResponse::decode(again()) {
                error(r.error.as_ref());
            }
            if let Ok(r) = proto::ProducersResponse::decode(again()) {
                error(r.error.as_ref());
            }
        }
        16 => {
            if let Ok(r) = txn::TxnRequest::decode(body)
                && let Ok(cmd) = txn_routes::command(r)
            {
                // A step read from the wire encodes to the same step.
                let again = txn_routes::command(txn_routes::command_msg(&cmd));
                assert_eq!(again.ok(), Some(cmd));
            }
        }
        17 => {
            if let Ok(r) = txn::StepReply::decode(body)
                && let Some(reply) = r.reply
            {
                let _ = txn_routes::reply(reply);
            }
        }
        18 => {
            if let Ok(r) = txn::Infos::decode(body) {
                for t in r.txns {
                    let _ = txn_routes::info(t);
                }
            }
        }
        19 => {
            // A share-partition's durable state as the metadata service
            // returns it: read back, it encodes to text that reads the same.
            use floe_broker::share::durable::{decode_window, encode_window};
            let text = String::from_utf8_lossy(rest);
            if let Ok(snap) = decode_window(7, &text) {
                assert_eq!(decode_window(7, &encode_window(&snap)).ok(), Some(snap));
            }
            // The record a dead-letter append copies, found in fetched bytes.
            let offset = rest.first().map_or(0, |b| i64::from(*b));
            let half = rest.len() / 2;
            let _ = floe_broker::share::dead_letter::find(
                &[body.slice(..half), body.slice(half..)],
                floe_types::Offset(offset),
            );
        }
        _ => {
            let _ = txn::TxnId::decode(body);
            let _ = txn::ListRequest::decode(bytes::Bytes::copy_from_slice(rest));
        }
    }
});
