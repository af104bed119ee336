//! What the metadata service keeps of a group so that the next coordinator
//! of its shard resumes it without a rebalance (Kafka keeps the same in its
//! `__consumer_offsets` group records). A classic group: the generation,
//! the protocol, the leader, and every member with its subscriptions and
//! assignment, written when a generation's assignment is handed out and
//! when a static member is replaced. A consumer group (KIP-848): the group
//! and assignment epochs, the target assignment, and every member's epochs,
//! subscription and partitions, written before a heartbeat that changed
//! any of it is answered. Forgotten when the group empties (see
//! [`GroupStore`]); encoded with protobuf so that fields can be added.

use std::fmt;

use prost::Message;

use super::types::GroupError;

/// A classic group as stored.
#[derive(Clone, PartialEq, prost::Message)]
pub struct GroupRecord {
    #[prost(int32, tag = "1")]
    pub generation: i32,
    #[prost(string, tag = "2")]
    pub protocol_type: String,
    #[prost(string, tag = "3")]
    pub protocol_name: String,
    #[prost(string, tag = "4")]
    pub leader: String,
    #[prost(message, repeated, tag = "5")]
    pub members: Vec<MemberRecord>,
    /// Set for a consumer group (KIP-848), whose record this is then (the
    /// fields above are unused).
    #[prost(message, optional, tag = "6")]
    pub consumer: Option<ConsumerRecord>,
}

/// A consumer group (KIP-848) as stored.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ConsumerRecord {
    #[prost(int32, tag = "1")]
    pub group_epoch: i32,
    #[prost(int32, tag = "2")]
    pub assignment_epoch: i32,
    #[prost(string, tag = "3")]
    pub assignor: String,
    #[prost(message, repeated, tag = "4")]
    pub members: Vec<ConsumerMemberRecord>,
    /// The subscribed topics as they were when the target was computed.
    #[prost(message, repeated, tag = "5")]
    pub topics_seen: Vec<SeenTopic>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ConsumerMemberRecord {
    #[prost(string, tag = "1")]
    pub member_id: String,
    #[prost(string, optional, tag = "2")]
    pub instance_id: Option<String>,
    #[prost(string, optional, tag = "3")]
    pub rack_id: Option<String>,
    #[prost(string, tag = "4")]
    pub client_id: String,
    #[prost(string, tag = "5")]
    pub client_host: String,
    #[prost(int32, tag = "6")]
    pub epoch: i32,
    #[prost(int32, tag = "7")]
    pub previous_epoch: i32,
    /// 0 stable, 1 must give partitions up, 2 waits for released ones.
    #[prost(int32, tag = "8")]
    pub state: i32,
    #[prost(string, repeated, tag = "9")]
    pub subscribed: Vec<String>,
    #[prost(string, optional, tag = "10")]
    pub assignor: Option<String>,
    #[prost(uint64, tag = "11")]
    pub rebalance_timeout_ms: u64,
    #[prost(message, repeated, tag = "12")]
    pub assigned: Vec<TopicPartitions>,
    #[prost(message, repeated, tag = "13")]
    pub revoking: Vec<TopicPartitions>,
    /// The member's part of the target assignment.
    #[prost(message, repeated, tag = "14")]
    pub target: Vec<TopicPartitions>,
    #[prost(bool, tag = "15")]
    pub left_static: bool,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct TopicPartitions {
    /// The topic's UUID, 16 bytes.
    #[prost(bytes = "vec", tag = "1")]
    pub topic_id: Vec<u8>,
    #[prost(int32, repeated, tag = "2")]
    pub partitions: Vec<i32>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct SeenTopic {
    #[prost(string, tag = "1")]
    pub name: String,
    /// The topic existed (then `topic_id` and `partitions` are set).
    #[prost(bool, tag = "2")]
    pub exists: bool,
    #[prost(bytes = "vec", tag = "3")]
    pub topic_id: Vec<u8>,
    #[prost(uint32, tag = "4")]
    pub partitions: u32,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct MemberRecord {
    #[prost(string, tag = "1")]
    pub member_id: String,
    #[prost(string, optional, tag = "2")]
    pub group_instance_id: Option<String>,
    #[prost(string, tag = "3")]
    pub client_id: String,
    #[prost(string, tag = "4")]
    pub client_host: String,
    #[prost(uint32, tag = "5")]
    pub session_timeout_ms: u32,
    #[prost(uint32, tag = "6")]
    pub rebalance_timeout_ms: u32,
    /// Every protocol the member joined with, in its order of preference
    /// (so that a rejoin with the same metadata is recognised).
    #[prost(message, repeated, tag = "7")]
    pub protocols: Vec<ProtocolRecord>,
    #[prost(bytes = "bytes", tag = "8")]
    pub assignment: bytes::Bytes,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ProtocolRecord {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(bytes = "bytes", tag = "2")]
    pub metadata: bytes::Bytes,
}

/// A stored record that does not decode (written by a broker of another
/// version, or damaged): the group is not resumed and its members rejoin.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("group record of {group} does not decode: {reason}")]
pub struct RecordError {
    pub group: String,
    pub reason: String,
}

impl GroupRecord {
    pub fn to_bytes(&self) -> Vec<u8> {
        self.encode_to_vec()
    }

    pub fn from_bytes(group: &str, bytes: &[u8]) -> Result<Self, RecordError> {
        let record = Self::decode(bytes).map_err(|e| RecordError {
            group: group.to_string(),
            reason: e.to_string(),
        })?;
        if record.members.iter().any(|m| m.member_id.is_empty())
            || record
                .consumer
                .iter()
                .flat_map(|c| &c.members)
                .any(|m| m.member_id.is_empty())
        {
            return Err(RecordError {
                group: group.to_string(),
                reason: "a member without an id".into(),
            });
        }
        Ok(record)
    }
}

/// Where a coordinator stores its groups: the metadata service, fenced by
/// the shard epoch the coordinator holds the group's shard at.
#[async_trait::async_trait]
pub trait GroupStore: Send + Sync + fmt::Debug {
    /// Stores `record` as the group's membership (`None`: forgets it).
    /// NOT_COORDINATOR once the shard has moved on from `shard_epoch`;
    /// COORDINATOR_NOT_AVAILABLE when it could not be stored.
    async fn write(
        &self,
        shard: u32,
        shard_epoch: u64,
        group: &str,
        record: Option<Vec<u8>>,
    ) -> Result<(), GroupError>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_round_trips_and_garbage_is_an_error() {
        let r = GroupRecord {
            generation: 65_539,
            protocol_type: "consumer".into(),
            protocol_name: "range".into(),
            leader: "m-1".into(),
            members: vec![MemberRecord {
                member_id: "m-1".into(),
                group_instance_id: Some("i".into()),
                client_id: "c".into(),
                client_host: "/127.0.0.1".into(),
                session_timeout_ms: 45_000,
                rebalance_timeout_ms: 300_000,
                protocols: vec![ProtocolRecord {
                    name: "range".into(),
                    metadata: bytes::Bytes::from_static(b"meta"),
                }],
                assignment: bytes::Bytes::from_static(b"assigned"),
            }],
            consumer: None,
        };
        assert_eq!(GroupRecord::from_bytes("g", &r.to_bytes()).unwrap(), r);
        assert!(GroupRecord::from_bytes("g", &[0xff, 0xff, 0xff]).is_err());
        let mut nameless = r;
        nameless.members[0].member_id.clear();
        assert!(GroupRecord::from_bytes("g", &nameless.to_bytes()).is_err());
    }

    /// A group's stored membership (a classic group, and a KIP-848 group's
    /// members) as each release wrote it (`floe_types::format_samples`): a
    /// new coordinator resumes the group from it.
    #[test]
    fn group_records_of_every_release_resume() {
        let topic = vec![0x5a; 16];
        let classic = GroupRecord {
            generation: 4,
            protocol_type: "consumer".into(),
            protocol_name: "range".into(),
            leader: "m-1".into(),
            members: vec![MemberRecord {
                member_id: "m-1".into(),
                group_instance_id: None,
                client_id: "c".into(),
                client_host: "/10.0.0.9".into(),
                session_timeout_ms: 45_000,
                rebalance_timeout_ms: 300_000,
                protocols: vec![ProtocolRecord {
                    name: "range".into(),
                    metadata: bytes::Bytes::from_static(b"subscription"),
                }],
                assignment: bytes::Bytes::from_static(b"assignment"),
            }],
            consumer: None,
        };
        let parts = |p: Vec<i32>| TopicPartitions {
            topic_id: topic.clone(),
            partitions: p,
        };
        let consumer = GroupRecord {
            protocol_type: "consumer".into(),
            consumer: Some(ConsumerRecord {
                group_epoch: 9,
                assignment_epoch: 9,
                assignor: "uniform".into(),
                members: vec![ConsumerMemberRecord {
                    member_id: "a1b2".into(),
                    instance_id: Some("i-1".into()),
                    rack_id: None,
                    client_id: "c".into(),
                    client_host: "/10.0.0.9".into(),
                    epoch: 9,
                    previous_epoch: 8,
                    state: 0,
                    subscribed: vec!["orders".into()],
                    assignor: None,
                    rebalance_timeout_ms: 300_000,
                    assigned: vec![parts(vec![0, 1])],
                    revoking: vec![],
                    target: vec![parts(vec![0, 1, 2])],
                    left_static: false,
                }],
                topics_seen: vec![SeenTopic {
                    name: "orders".into(),
                    exists: true,
                    topic_id: topic.clone(),
                    partitions: 3,
                }],
            }),
            ..GroupRecord::default()
        };
        let root = floe_types::format_samples::root(env!("CARGO_MANIFEST_DIR"));
        for (name, record) in [
            ("group-classic.pb", classic),
            ("group-consumer.pb", consumer),
        ] {
            floe_types::format_samples::check(
                &root,
                env!("CARGO_PKG_VERSION"),
                name,
                &record.to_bytes(),
                |release, bytes| {
                    let back = GroupRecord::from_bytes("g", &bytes)
                        .unwrap_or_else(|e| panic!("{release}: {e:?}"));
                    assert_eq!(back, record, "{release}");
                },
            );
        }
    }
}
