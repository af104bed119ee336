//! The durable form of a share-partition as the metadata service keeps it
//! (`Command::ShareState`): the start offset as the group's offset of the
//! partition, and the in-flight window as a short text in its metadata
//! string, fenced by the partition's epoch. [`ShareStore`] is where a
//! [`super::ShareService`] reads and writes it.

use floe_storage::PartitionKey;
use floe_types::Offset;

use super::partition::{
    DeadLetterProgress, DeadLetterReason, DurableState, ShareError, ShareSnapshot, SnapshotRange,
};
use super::timers::{BucketState, TimerRef, TimerStore};
use crate::error::CallError;

/// Where share-partitions are kept durably, and who may write them; their
/// timer buckets go to the object store beside ([`TimerStore`]).
#[async_trait::async_trait]
pub trait ShareStore: TimerStore + Send + Sync {
    /// The epoch at which this broker serves `key` now; `None` if it does
    /// not (then nothing of the partition's share state is served here).
    fn owned_epoch(&self, key: &PartitionKey) -> Option<u64>;

    /// The last state written for `group` on `key`, if any.
    async fn load(
        &self,
        group: &str,
        key: &PartitionKey,
    ) -> Result<Option<ShareSnapshot>, CallError>;

    /// Writes the state of `group` on `key`, refused unless this broker
    /// still owns `key` at `epoch`.
    async fn save(
        &self,
        group: &str,
        key: &PartitionKey,
        epoch: u64,
        snapshot: &ShareSnapshot,
    ) -> Result<(), CallError>;

    /// Deletes the state of `group` on `key` (a deleted share group, or
    /// DeleteShareGroupOffsets); the next use starts it afresh at
    /// `share.auto.offset.reset`. Refused, like [`ShareStore::save`],
    /// unless this broker still owns `key` at `epoch`.
    async fn forget(&self, group: &str, key: &PartitionKey, epoch: u64) -> Result<(), CallError>;
}

/// The window as text: `first-last:state:count` ranges joined by `,`, where
/// state is `a` (available; `a<ms>` available from that time), `k`
/// (acknowledged), `x` (archived) or `dr` / `dl` (waiting for the
/// dead-letter topic: rejected / at the delivery limit). Versioned by a
/// leading `1;`. Optional sections follow, each after a `;`: the parked
/// (delayed) records, when there are any, as ranges of the same form
/// (`a<due ms>`); then the timer buckets, when there are any, as `t`
/// followed by `endpoint/token/size/count/next/next-due-ms` for each,
/// joined by `,`; then the dead-letter producer's progress, once there is
/// one, as `q<epoch>.<sequence>` and `.<offset>` while an append is under
/// way. A text without them (as written before they existed) has none.
pub fn encode_window(snapshot: &ShareSnapshot) -> String {
    let mut out = String::from("1;");
    encode_ranges(&mut out, &snapshot.ranges);
    if !snapshot.parked.is_empty() {
        out.push(';');
        encode_ranges(&mut out, &snapshot.parked);
    }
    if !snapshot.timers.is_empty() {
        out.push_str(";t");
        for (i, b) in snapshot.timers.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            let o = &b.object;
            out.push_str(&format!(
                "{}/{}/{}/{}/{}/{}",
                o.endpoint, o.token, o.size, b.count, b.next, b.next_due_ms
            ));
        }
    }
    let dlq = snapshot.dead_letter;
    if dlq != DeadLetterProgress::default() {
        out.push_str(&format!(";q{}.{}", dlq.producer_epoch, dlq.next_sequence));
        if let Some(o) = dlq.in_flight {
            out.push_str(&format!(".{}", o.0));
        }
    }
    out
}

fn encode_ranges(out: &mut String, ranges: &[SnapshotRange]) {
    for (i, r) in ranges.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        let state = match r.state {
            DurableState::Available { not_before_ms: 0 } => "a".to_owned(),
            DurableState::Available { not_before_ms } => format!("a{not_before_ms}"),
            DurableState::Acknowledged => "k".to_owned(),
            DurableState::Archived => "x".to_owned(),
            DurableState::DeadLettering {
                reason: DeadLetterReason::Rejected,
            } => "dr".to_owned(),
            DurableState::DeadLettering {
                reason: DeadLetterReason::DeliveryLimit,
            } => "dl".to_owned(),
        };
        out.push_str(&format!(
            "{}-{}:{}:{}",
            r.first.0, r.last.0, state, r.deliveries
        ));
    }
}

/// The dead-letter progress from `q<epoch>.<sequence>[.<offset>]`.
fn decode_progress(text: &str) -> Result<DeadLetterProgress, ShareError> {
    let bad = ShareError::CorruptSnapshot;
    let body = text.strip_prefix('q').ok_or(bad("unknown section"))?;
    let mut fields = body.split('.');
    let (Some(epoch), Some(seq), offset, None) =
        (fields.next(), fields.next(), fields.next(), fields.next())
    else {
        return Err(bad("dead-letter progress without two or three fields"));
    };
    Ok(DeadLetterProgress {
        producer_epoch: epoch.parse().map_err(|_| bad("not an epoch"))?,
        next_sequence: seq.parse().map_err(|_| bad("not a sequence"))?,
        in_flight: match offset {
            Some(o) => Some(Offset(o.parse().map_err(|_| bad("not an offset"))?)),
            None => None,
        },
    })
}

/// Whether a group's stored offset metadata is a share-partition's state
/// (and not a classic group's commit metadata).
pub fn is_share_state(text: &str) -> bool {
    floe_metadata::command::is_share_state(text)
}

/// The snapshot from its start offset and [`encode_window`]'s text.
pub fn decode_window(start: i64, text: &str) -> Result<ShareSnapshot, ShareError> {
    let bad = ShareError::CorruptSnapshot;
    let body = text.strip_prefix("1;").ok_or(bad("unknown version"))?;
    let mut sections = body.split(';');
    let window = sections.next().unwrap_or_default();
    let mut parked = Vec::new();
    let mut timers = Vec::new();
    let mut dead_letter = DeadLetterProgress::default();
    // Sections in their order: parked (1), timers (2), progress (3).
    let mut seen = 0;
    for section in sections {
        let (rank, name) = match section.as_bytes().first() {
            Some(b'q') => (3, "dead-letter"),
            Some(b't') => (2, "timer"),
            _ => (1, "parked"),
        };
        if rank <= seen {
            return Err(bad(match name {
                "dead-letter" => "a dead-letter section out of place",
                "timer" => "a timer section out of place",
                _ => "a parked section out of place",
            }));
        }
        seen = rank;
        match rank {
            3 => dead_letter = decode_progress(section)?,
            2 => timers = decode_timers(&section[1..])?,
            _ => parked = decode_ranges(section)?,
        }
    }
    Ok(ShareSnapshot {
        start: Offset(start),
        ranges: decode_ranges(window)?,
        parked,
        timers,
        dead_letter,
    })
}

/// The timer buckets from `endpoint/token/size/count/next/due,…`.
fn decode_timers(text: &str) -> Result<Vec<BucketState>, ShareError> {
    let bad = ShareError::CorruptSnapshot;
    let mut out = Vec::new();
    for part in text.split(',') {
        if out.len() >= super::timers::MAX_BUCKETS {
            return Err(bad("more timer buckets than kept"));
        }
        let f: Vec<&str> = part.split('/').collect();
        let [endpoint, token, size, count, next, due] = f.as_slice() else {
            return Err(bad("a timer bucket without six fields"));
        };
        let name_ok = |s: &str| {
            !s.is_empty()
                && s.chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        };
        if !name_ok(endpoint) || !name_ok(token) {
            return Err(bad("a timer bucket's endpoint or token"));
        }
        let num = |s: &str| s.parse::<u64>().map_err(|_| bad("not a number"));
        let small = |s: &str| s.parse::<u32>().map_err(|_| bad("not a count"));
        out.push(BucketState {
            object: TimerRef {
                endpoint: floe_storage::EndpointId::new(endpoint),
                token: std::sync::Arc::from(*token),
                size: num(size)?,
            },
            count: small(count)?,
            next: small(next)?,
            next_due_ms: num(due)?,
        });
    }
    Ok(out)
}

fn decode_ranges(text: &str) -> Result<Vec<SnapshotRange>, ShareError> {
    let bad = ShareError::CorruptSnapshot;
    let mut ranges = Vec::new();
    for part in text.split(',').filter(|p| !p.is_empty()) {
        let mut fields = part.split(':');
        let (Some(span), Some(state), Some(count), None) =
            (fields.next(), fields.next(), fields.next(), fields.next())
        else {
            return Err(bad("a range without three fields"));
        };
        let (first, last) = span.split_once('-').ok_or(bad("a range without '-'"))?;
        let num = |s: &str| s.parse::<i64>().map_err(|_| bad("not a number"));
        let state = match state {
            "k" => DurableState::Acknowledged,
            "x" => DurableState::Archived,
            "dr" => DurableState::DeadLettering {
                reason: DeadLetterReason::Rejected,
            },
            "dl" => DurableState::DeadLettering {
                reason: DeadLetterReason::DeliveryLimit,
            },
            s => DurableState::Available {
                not_before_ms: match s.strip_prefix('a').ok_or(bad("unknown state"))? {
                    "" => 0,
                    ms => ms.parse().map_err(|_| bad("not a time"))?,
                },
            },
        };
        ranges.push(SnapshotRange {
            first: Offset(num(first)?),
            last: Offset(num(last)?),
            state,
            deliveries: count.parse().map_err(|_| bad("not a count"))?,
        });
    }
    Ok(ranges)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn a_window_survives_its_text_form() {
        let snap = ShareSnapshot {
            start: Offset(10),
            ranges: vec![
                SnapshotRange {
                    first: Offset(10),
                    last: Offset(12),
                    state: DurableState::Available { not_before_ms: 0 },
                    deliveries: 2,
                },
                SnapshotRange {
                    first: Offset(13),
                    last: Offset(13),
                    state: DurableState::Acknowledged,
                    deliveries: 0,
                },
                SnapshotRange {
                    first: Offset(14),
                    last: Offset(20),
                    state: DurableState::Available {
                        not_before_ms: 1_700_000_000_000,
                    },
                    deliveries: 1,
                },
                SnapshotRange {
                    first: Offset(21),
                    last: Offset(21),
                    state: DurableState::Archived,
                    deliveries: 0,
                },
            ],
            parked: vec![],
            timers: vec![],
            dead_letter: DeadLetterProgress::default(),
        };
        let text = encode_window(&snap);
        assert_eq!(
            text,
            "1;10-12:a:2,13-13:k:0,14-20:a1700000000000:1,21-21:x:0"
        );
        assert_eq!(decode_window(10, &text).unwrap(), snap);
        let empty = ShareSnapshot {
            start: Offset(5),
            ..ShareSnapshot::default()
        };
        assert_eq!(decode_window(5, &encode_window(&empty)).unwrap(), empty);
    }

    #[test]
    fn parked_records_follow_the_window_and_old_texts_have_none() {
        let snap = ShareSnapshot {
            start: Offset(10),
            ranges: vec![SnapshotRange {
                first: Offset(10),
                last: Offset(11),
                state: DurableState::Archived,
                deliveries: 0,
            }],
            parked: vec![
                SnapshotRange {
                    first: Offset(3),
                    last: Offset(4),
                    state: DurableState::Available {
                        not_before_ms: 1_700_000_000_000,
                    },
                    deliveries: 0,
                },
                SnapshotRange {
                    first: Offset(11),
                    last: Offset(11),
                    state: DurableState::Available { not_before_ms: 0 },
                    deliveries: 1,
                },
            ],
            ..ShareSnapshot::default()
        };
        let text = encode_window(&snap);
        assert_eq!(text, "1;10-11:x:0;3-4:a1700000000000:0,11-11:a:1");
        assert_eq!(decode_window(10, &text).unwrap(), snap);
        let old = decode_window(10, "1;10-11:x:0").unwrap();
        assert!(old.parked.is_empty());
        assert!(decode_window(10, "1;10-11:x:0;3-4:a:0;5-5:a:0").is_err());
    }

    #[test]
    fn parked_records_and_the_dead_letter_progress_go_together() {
        let snap = ShareSnapshot {
            start: Offset(10),
            parked: vec![SnapshotRange {
                first: Offset(3),
                last: Offset(3),
                state: DurableState::Available { not_before_ms: 9 },
                deliveries: 0,
            }],
            dead_letter: DeadLetterProgress {
                producer_epoch: 1,
                next_sequence: 4,
                in_flight: None,
            },
            ..ShareSnapshot::default()
        };
        let text = encode_window(&snap);
        assert_eq!(text, "1;;3-3:a9:0;q1.4");
        assert_eq!(decode_window(10, &text).unwrap(), snap);
        // Out of order, or twice: refused.
        assert!(decode_window(10, "1;;q1.4;3-3:a9:0").is_err());
        assert!(decode_window(10, "1;;q1.4;q1.5").is_err());
    }

    #[test]
    fn timer_buckets_sit_between_the_parked_records_and_the_progress() {
        let bucket = |t: &str, next| BucketState {
            object: TimerRef {
                endpoint: floe_storage::EndpointId::new("s3-a"),
                token: std::sync::Arc::from(t),
                size: 4_136,
            },
            count: 256,
            next,
            next_due_ms: 1_700_000_000_000,
        };
        let snap = ShareSnapshot {
            start: Offset(10),
            parked: vec![SnapshotRange {
                first: Offset(3),
                last: Offset(3),
                state: DurableState::Available { not_before_ms: 9 },
                deliveries: 0,
            }],
            timers: vec![bucket("0f1e", 0), bucket("a_b", 17)],
            dead_letter: DeadLetterProgress {
                producer_epoch: 1,
                next_sequence: 4,
                in_flight: None,
            },
            ..ShareSnapshot::default()
        };
        let text = encode_window(&snap);
        assert_eq!(
            text,
            "1;;3-3:a9:0;ts3-a/0f1e/4136/256/0/1700000000000,s3-a/a_b/4136/256/17/1700000000000;q1.4"
        );
        assert_eq!(decode_window(10, &text).unwrap(), snap);
        let only = ShareSnapshot {
            start: Offset(10),
            timers: vec![bucket("x", 1)],
            ..ShareSnapshot::default()
        };
        assert_eq!(decode_window(10, &encode_window(&only)).unwrap(), only);
        for bad in [
            "1;;ta/b/1/2/3",
            "1;;ta/b/1/2/3/4/5",
            "1;;ta/b c/1/2/3/4",
            "1;;t/b/1/2/3/4",
            "1;;ta/b/1/2/-3/4",
            "1;;q1.4;ta/b/1/2/3/4",
            "1;;ta/b/1/2/3/4;3-3:a9:0",
            "1;;ta/b/1/2/3/4;ta/b/1/2/3/4",
        ] {
            assert!(decode_window(0, bad).is_err(), "{bad}");
        }
    }

    /// A share-partition's stored state as each release wrote it
    /// (`floe_types::format_samples`): every release's decodes, and this
    /// version writes exactly its own sample.
    #[test]
    fn share_states_of_every_release_decode() {
        let range = |first, last, state, deliveries| SnapshotRange {
            first: Offset(first),
            last: Offset(last),
            state,
            deliveries,
        };
        let snap = ShareSnapshot {
            start: Offset(10),
            ranges: vec![
                range(10, 12, DurableState::Available { not_before_ms: 0 }, 2),
                range(13, 13, DurableState::Acknowledged, 0),
                range(
                    14,
                    14,
                    DurableState::DeadLettering {
                        reason: DeadLetterReason::DeliveryLimit,
                    },
                    5,
                ),
                range(15, 15, DurableState::Archived, 1),
            ],
            parked: vec![range(
                3,
                3,
                DurableState::Available {
                    not_before_ms: 1_767_225_660_000,
                },
                1,
            )],
            timers: vec![BucketState {
                object: TimerRef {
                    endpoint: floe_storage::EndpointId::new("default"),
                    token: std::sync::Arc::from("0f1e"),
                    size: 4_136,
                },
                count: 256,
                next: 3,
                next_due_ms: 1_767_225_700_000,
            }],
            dead_letter: DeadLetterProgress {
                producer_epoch: 1,
                next_sequence: 4,
                in_flight: Some(Offset(14)),
            },
        };
        let written = encode_window(&snap);
        let root = floe_types::format_samples::root(env!("CARGO_MANIFEST_DIR"));
        floe_types::format_samples::check(
            &root,
            env!("CARGO_PKG_VERSION"),
            "share-state.txt",
            written.as_bytes(),
            |release, bytes| {
                let text = String::from_utf8(bytes).unwrap();
                let back = decode_window(10, &text).unwrap_or_else(|e| panic!("{release}: {e:?}"));
                assert_eq!(back, snap, "{release}");
            },
        );
    }

    #[test]
    fn records_waiting_for_the_dead_letter_topic_and_its_progress_survive_the_text_form() {
        let mut snap = ShareSnapshot {
            start: Offset(3),
            ranges: vec![
                SnapshotRange {
                    first: Offset(3),
                    last: Offset(4),
                    state: DurableState::DeadLettering {
                        reason: DeadLetterReason::Rejected,
                    },
                    deliveries: 1,
                },
                SnapshotRange {
                    first: Offset(5),
                    last: Offset(5),
                    state: DurableState::DeadLettering {
                        reason: DeadLetterReason::DeliveryLimit,
                    },
                    deliveries: 5,
                },
            ],
            dead_letter: DeadLetterProgress {
                producer_epoch: 2,
                next_sequence: 17,
                in_flight: Some(Offset(4)),
            },
            ..ShareSnapshot::default()
        };
        let text = encode_window(&snap);
        assert_eq!(text, "1;3-4:dr:1,5-5:dl:5;q2.17.4");
        assert_eq!(decode_window(3, &text).unwrap(), snap);
        snap.dead_letter.in_flight = None;
        let text = encode_window(&snap);
        assert_eq!(text, "1;3-4:dr:1,5-5:dl:5;q2.17");
        assert_eq!(decode_window(3, &text).unwrap(), snap);
        for bad in [
            "1;3-4:dr:1;q",
            "1;3-4:dr:1;q1",
            "1;;r1.2",
            "1;;q1.2.3.4",
            "1;;qa.1",
        ] {
            assert!(decode_window(0, bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_damaged_window_is_refused() {
        for text in [
            "",
            "2;1-2:a:1",
            "1;1-2:a",
            "1;1:a:1",
            "1;1-2:q:1",
            "1;1-2:a:x",
            "1;1-2:a:1;3-4:a",
        ] {
            assert!(decode_window(0, text).is_err(), "{text}");
        }
    }
}
