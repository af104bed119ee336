//! DescribeTopicPartitions (KIP-966): the partitions of topics as Metadata
//! gives them, a page at a time, for clients that describe clusters with
//! more partitions than one Metadata answer should hold (Kafka's admin
//! client from 3.8 describes topics with it).
//!
//! Topics come sorted by name: the named ones (each one not there gets
//! UNKNOWN_TOPIC_OR_PARTITION), or every topic for an empty list. An answer
//! holds at most `response_partition_limit` partitions, and never more than
//! [`MAX_PARTITIONS_PER_ANSWER`] (Kafka's `max.request.partition.size.limit`
//! default); when partitions are left, `next_cursor` names the first of them
//! and the client asks again from there. Leaders, epochs, replicas and ISR
//! are those of Metadata ([`KafkaNodes::leader`]); Floe has no eligible
//! leader replicas (the object store holds the data), so those lists are
//! empty.

use kafka_protocol::ResponseError;
use kafka_protocol::messages::describe_topic_partitions_response::{
    Cursor, DescribeTopicPartitionsResponsePartition, DescribeTopicPartitionsResponseTopic,
};
use kafka_protocol::messages::{
    BrokerId, DescribeTopicPartitionsRequest, DescribeTopicPartitionsResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;

use floe_metadata::watch::ClusterSnapshot;
use floe_storage::PartitionKey;

use crate::nodes::KafkaNodes;

/// The most partitions one answer holds, whatever the client asks.
pub const MAX_PARTITIONS_PER_ANSWER: usize = 2000;

/// `topic_authorized_operations` when not computed (Floe has no ACLs yet).
const OPERATIONS_NOT_ASKED: i32 = i32::MIN;

/// The answer to `req` from the cluster view `snap`.
pub fn describe(
    snap: &ClusterSnapshot,
    nodes: &KafkaNodes,
    req: &DescribeTopicPartitionsRequest,
) -> DescribeTopicPartitionsResponse {
    let mut names: Vec<String> = if req.topics.is_empty() {
        snap.topics.keys().cloned().collect()
    } else {
        req.topics.iter().map(|t| t.name.0.to_string()).collect()
    };
    names.sort();
    names.dedup();
    let limit = usize::try_from(req.response_partition_limit)
        .unwrap_or(0)
        .clamp(1, MAX_PARTITIONS_PER_ANSWER);
    let (cursor_topic, cursor_partition) = match &req.cursor {
        Some(c) => (Some(c.topic_name.0.as_str()), c.partition_index.max(0)),
        None => (None, 0),
    };
    let mut left = limit;
    let mut topics = Vec::new();
    let mut next_cursor = None;
    for name in names
        .iter()
        .filter(|n| cursor_topic.is_none_or(|c| n.as_str() >= c))
    {
        let first = if cursor_topic == Some(name.as_str()) {
            cursor_partition
        } else {
            0
        };
        let mut t = DescribeTopicPartitionsResponseTopic::default()
            .with_name(Some(TopicName(StrBytes::from_string(name.clone()))))
            .with_topic_authorized_operations(OPERATIONS_NOT_ASKED);
        let Some(info) = snap.topics.get(name) else {
            topics.push(t.with_error_code(ResponseError::UnknownTopicOrPartition.code()));
            continue;
        };
        if left == 0 {
            next_cursor = Some(cursor_at(name, first));
            break;
        }
        t.topic_id = info.id.0;
        for p in info
            .partitions
            .iter()
            .filter(|p| p.partition as i32 >= first)
        {
            if left == 0 {
                next_cursor = Some(cursor_at(name, p.partition as i32));
                break;
            }
            left -= 1;
            let mut out = DescribeTopicPartitionsResponsePartition::default()
                .with_partition_index(p.partition as i32)
                .with_leader_epoch(i32::try_from(p.epoch.0).unwrap_or(i32::MAX))
                .with_eligible_leader_replicas(Some(Vec::new()))
                .with_last_known_elr(Some(Vec::new()));
            if p.owner.is_none() {
                out = out
                    .with_error_code(ResponseError::LeaderNotAvailable.code())
                    .with_leader_id(BrokerId(-1));
            } else {
                let leader = BrokerId(nodes.leader(&PartitionKey::new(info.id, p.partition)).id);
                out = out
                    .with_leader_id(leader)
                    .with_replica_nodes(vec![leader])
                    .with_isr_nodes(vec![leader]);
            }
            t.partitions.push(out);
        }
        topics.push(t);
        if next_cursor.is_some() {
            break;
        }
    }
    DescribeTopicPartitionsResponse::default()
        .with_topics(topics)
        .with_next_cursor(next_cursor)
}

fn cursor_at(topic: &str, partition: i32) -> Cursor {
    Cursor::default()
        .with_topic_name(TopicName(StrBytes::from_string(topic.to_owned())))
        .with_partition_index(partition)
}

#[cfg(test)]
mod tests {
    use kafka_protocol::messages::describe_topic_partitions_request::{
        Cursor as AskedCursor, TopicRequest,
    };

    use super::*;
    use crate::nodes::KafkaNode;
    use crate::test_support::add_topic;

    fn snapshot(topics: &[(&str, u32)]) -> ClusterSnapshot {
        let mut snap = ClusterSnapshot::default();
        for (i, (name, count)) in topics.iter().enumerate() {
            // Partition 1 of every topic has no owner yet.
            add_topic(
                &mut snap,
                name,
                i as u128 + 1,
                *count,
                |p| (p != 1).then_some(3),
                |p| u64::from(p) + 5,
            );
        }
        snap
    }

    fn nodes() -> KafkaNodes {
        let n = |id| KafkaNode {
            id,
            host: "h".into(),
            port: 1,
        };
        KafkaNodes::new(vec![n(1), n(2)], n(1))
    }

    fn ask(
        names: &[&str],
        limit: i32,
        cursor: Option<(&str, i32)>,
    ) -> DescribeTopicPartitionsRequest {
        DescribeTopicPartitionsRequest::default()
            .with_topics(
                names
                    .iter()
                    .map(|n| {
                        TopicRequest::default()
                            .with_name(TopicName(StrBytes::from_string(n.to_string())))
                    })
                    .collect(),
            )
            .with_response_partition_limit(limit)
            .with_cursor(cursor.map(|(t, p)| {
                AskedCursor::default()
                    .with_topic_name(TopicName(StrBytes::from_string(t.to_owned())))
                    .with_partition_index(p)
            }))
    }

    /// (topic, partition) pairs of an answer, in order.
    fn pairs(r: &DescribeTopicPartitionsResponse) -> Vec<(String, i32)> {
        r.topics
            .iter()
            .flat_map(|t| {
                let name = t.name.as_ref().map(|n| n.0.to_string()).unwrap_or_default();
                t.partitions
                    .iter()
                    .map(move |p| (name.clone(), p.partition_index))
            })
            .collect()
    }

    #[test]
    fn every_topic_sorted_by_name_with_leaders_as_metadata_names_them() {
        let snap = snapshot(&[("b", 2), ("a", 3)]);
        let r = describe(&snap, &nodes(), &ask(&[], 100, None));
        let names: Vec<_> = r
            .topics
            .iter()
            .map(|t| t.name.as_ref().unwrap().0.to_string())
            .collect();
        assert_eq!(names, ["a", "b"]);
        assert!(r.next_cursor.is_none());
        let a = &r.topics[0];
        assert_eq!(a.topic_id, snap.topics["a"].id.0);
        assert_eq!(a.error_code, 0);
        for p in &a.partitions {
            if p.partition_index == 1 {
                assert_eq!(p.error_code, ResponseError::LeaderNotAvailable.code());
                assert_eq!(p.leader_id, BrokerId(-1));
            } else {
                let key = PartitionKey::new(snap.topics["a"].id, p.partition_index as u32);
                let leader = BrokerId(nodes().leader(&key).id);
                assert_eq!(
                    (p.leader_id, p.replica_nodes.clone()),
                    (leader, vec![leader])
                );
                assert_eq!(p.leader_epoch, p.partition_index + 5);
            }
        }
    }

    #[test]
    fn named_topics_and_one_that_is_not_there() {
        let snap = snapshot(&[("a", 1), ("b", 1)]);
        let r = describe(&snap, &nodes(), &ask(&["b", "nope"], 100, None));
        assert_eq!(pairs(&r), [("b".to_string(), 0)]);
        let missing = r
            .topics
            .iter()
            .find(|t| t.name.as_ref().unwrap().0.as_str() == "nope")
            .unwrap();
        assert_eq!(
            missing.error_code,
            ResponseError::UnknownTopicOrPartition.code()
        );
        assert!(missing.partitions.is_empty() && missing.topic_id.is_nil());
    }

    #[test]
    fn pages_of_the_limit_follow_the_cursor_through_every_partition_once() {
        let snap = snapshot(&[("a", 3), ("b", 4), ("c", 2)]);
        let mut seen = Vec::new();
        let mut cursor: Option<(String, i32)> = None;
        let mut pages = 0;
        loop {
            let r = describe(
                &snap,
                &nodes(),
                &ask(&[], 2, cursor.as_ref().map(|(t, p)| (t.as_str(), *p))),
            );
            assert!(pairs(&r).len() <= 2);
            seen.extend(pairs(&r));
            pages += 1;
            match r.next_cursor {
                Some(c) => cursor = Some((c.topic_name.0.to_string(), c.partition_index)),
                None => break,
            }
            assert!(pages < 10, "the cursor does not move on");
        }
        let all: Vec<(String, i32)> = [("a", 3), ("b", 4), ("c", 2)]
            .iter()
            .flat_map(|(t, n)| (0..*n).map(move |p| (t.to_string(), p)))
            .collect();
        assert_eq!(seen, all);
        assert_eq!(pages, 5);
    }

    #[test]
    fn a_limit_out_of_range_is_brought_within_bounds() {
        let snap = snapshot(&[("a", 3)]);
        // 0 or negative: one partition at a time rather than nothing.
        let r = describe(&snap, &nodes(), &ask(&["a"], 0, None));
        assert_eq!(pairs(&r).len(), 1);
        assert_eq!(r.next_cursor.unwrap().partition_index, 1);
        let r = describe(&snap, &nodes(), &ask(&["a"], i32::MAX, None));
        assert_eq!(pairs(&r).len(), 3);
    }
}
