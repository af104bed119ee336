//! Redriving a share group's dead letters: each record of its dead-letter
//! topic (`floe.dlq.topic`) that the group put there goes back to the
//! partition it came from, as it was (key, value, headers; a new timestamp),
//! without the `floe-dlq-*` headers the broker added and with one header
//! naming the dead letter it is a copy of, so a consumer can tell a
//! redriven record and drop a second copy (a redrive is at least once).
//! The console's redrive action uses this; where the group's redrive has
//! got to is the committed offset of the consumer group [`mark_group`].

use floe_broker::share::dead_letter::{
    HEADER_DELIVERY_COUNT, HEADER_GROUP, HEADER_OFFSET, HEADER_PARTITION, HEADER_REASON,
    HEADER_TOPIC,
};
use floe_storage::records::{Record, RecordSpec};

/// The header a redriven record carries: `<dead-letter topic>/<partition>/<offset>`.
pub const HEADER_REDRIVEN_FROM: &str = "floe-redriven-from";

/// The consumer group whose committed offsets on the dead-letter topic
/// mark how far `group`'s dead letters were redriven.
pub fn mark_group(group: &str) -> String {
    format!("floe-redrive.{group}")
}

/// A dead letter read back: where it came from and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadLetterOrigin {
    pub group: String,
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    pub deliveries: Option<u16>,
    pub reason: Option<String>,
}

fn header<'a>(r: &'a Record, name: &str) -> Option<&'a [u8]> {
    r.headers
        .iter()
        .find(|h| h.key.as_ref() == name.as_bytes())
        .and_then(|h| h.value.as_deref())
}

fn text<T: std::str::FromStr>(r: &Record, name: &str) -> Option<T> {
    std::str::from_utf8(header(r, name)?).ok()?.parse().ok()
}

/// Where a record of a dead-letter topic came from, or `None` when it does
/// not carry the broker's headers (a record someone produced there).
pub fn origin(r: &Record) -> Option<DeadLetterOrigin> {
    Some(DeadLetterOrigin {
        group: text(r, HEADER_GROUP)?,
        topic: text(r, HEADER_TOPIC)?,
        partition: text(r, HEADER_PARTITION)?,
        offset: text(r, HEADER_OFFSET)?,
        deliveries: text(r, HEADER_DELIVERY_COUNT),
        reason: text(r, HEADER_REASON),
    })
}

/// What a redrive of `group` does with one record of `dead_letter_topic`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Redrive {
    /// Produce `record` to `topic`'s `partition` (where it came from), as
    /// a new record: with the time it is produced at, not the original's
    /// (an old timestamp would put it in reach of the topic's retention).
    To {
        topic: String,
        partition: i32,
        record: RecordSpec,
    },
    /// Another group's dead letter, or a record without the broker's
    /// headers: left where it is.
    Skip,
}

/// The redrive of record `r` at `offset` of `dead_letter_topic`'s
/// `partition` for `group`.
pub fn redrive(r: &Record, group: &str, dead_letter_topic: &str, partition: i32) -> Redrive {
    let Some(from) = origin(r).filter(|o| o.group == group) else {
        return Redrive::Skip;
    };
    let ours = [
        HEADER_TOPIC,
        HEADER_PARTITION,
        HEADER_OFFSET,
        HEADER_DELIVERY_COUNT,
        HEADER_REASON,
        HEADER_GROUP,
        HEADER_REDRIVEN_FROM,
    ];
    let mut headers: Vec<(Vec<u8>, Option<Vec<u8>>)> = r
        .headers
        .iter()
        .filter(|h| !ours.iter().any(|o| h.key.as_ref() == o.as_bytes()))
        .map(|h| (h.key.to_vec(), h.value.as_ref().map(|v| v.to_vec())))
        .collect();
    headers.push((
        HEADER_REDRIVEN_FROM.as_bytes().to_vec(),
        Some(format!("{dead_letter_topic}/{partition}/{}", r.offset).into_bytes()),
    ));
    let mut record = RecordSpec::new(
        r.key.as_ref().map(|k| k.to_vec()),
        r.value.as_ref().map(|v| v.to_vec()),
        0,
    );
    record.headers = headers;
    Redrive::To {
        topic: from.topic,
        partition: from.partition,
        record,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use floe_storage::records::RecordHeader;

    fn h(k: &str, v: &str) -> RecordHeader {
        RecordHeader {
            key: Bytes::copy_from_slice(k.as_bytes()),
            value: Some(Bytes::copy_from_slice(v.as_bytes())),
        }
    }

    fn dead(group: &str) -> Record {
        Record {
            offset: 7,
            timestamp: 1_700_000_000_000,
            key: Some(Bytes::from_static(b"k")),
            value: Some(Bytes::from_static(b"v")),
            headers: vec![
                h("trace", "abc"),
                h(HEADER_TOPIC, "orders"),
                h(HEADER_PARTITION, "2"),
                h(HEADER_OFFSET, "41"),
                h(HEADER_DELIVERY_COUNT, "5"),
                h(HEADER_REASON, "delivery-count-limit"),
                h(HEADER_GROUP, group),
            ],
        }
    }

    #[test]
    fn a_dead_letter_goes_back_where_it_came_from_without_the_brokers_headers() {
        let Redrive::To {
            topic,
            partition,
            record,
        } = redrive(&dead("g"), "g", "orders.dlq", 1)
        else {
            panic!("a dead letter of the group is redriven");
        };
        assert_eq!((topic.as_str(), partition), ("orders", 2));
        assert_eq!(record.key.as_deref(), Some(&b"k"[..]));
        assert_eq!(record.value.as_deref(), Some(&b"v"[..]));
        let names: Vec<&[u8]> = record.headers.iter().map(|(k, _)| k.as_slice()).collect();
        assert_eq!(names, vec![&b"trace"[..], HEADER_REDRIVEN_FROM.as_bytes()]);
        assert_eq!(record.headers[1].1.as_deref(), Some(&b"orders.dlq/1/7"[..]));
    }

    #[test]
    fn another_groups_dead_letter_or_a_plain_record_is_left() {
        assert_eq!(redrive(&dead("other"), "g", "d", 0), Redrive::Skip);
        let mut plain = dead("g");
        plain
            .headers
            .retain(|h| h.key.as_ref() != HEADER_OFFSET.as_bytes());
        assert_eq!(redrive(&plain, "g", "d", 0), Redrive::Skip);
        assert_eq!(origin(&plain), None);
    }

    #[test]
    fn the_origin_reads_the_brokers_headers() {
        assert_eq!(
            origin(&dead("g")),
            Some(DeadLetterOrigin {
                group: "g".into(),
                topic: "orders".into(),
                partition: 2,
                offset: 41,
                deliveries: Some(5),
                reason: Some("delivery-count-limit".into()),
            })
        );
    }
}
