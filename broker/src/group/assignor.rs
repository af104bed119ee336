//! The server-side assignors of consumer groups (KIP-848's
//! `group.remote.assignor`): `uniform` spreads every subscribed partition
//! evenly over the members and keeps a partition where it was when the
//! balance allows; `range` gives each member a contiguous range of every
//! topic it subscribes to.
//!
//! Both are pure functions of the members' subscriptions, the topics and
//! (for `uniform`) the previous target assignment.

use std::collections::{BTreeMap, BTreeSet};

use floe_types::TopicId;

/// Partitions by topic.
pub type Assignment = BTreeMap<TopicId, BTreeSet<i32>>;

/// The assignors the coordinator knows, by the names clients ask for.
pub const UNIFORM: &str = "uniform";
pub const RANGE: &str = "range";
pub const ASSIGNORS: [&str; 2] = [UNIFORM, RANGE];

/// One member as an assignor sees it: its subscribed topics (resolved,
/// with their partition counts).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AssignorMember {
    pub topics: BTreeMap<TopicId, u32>,
}

/// The target assignment of every member (each member in `members` has an
/// entry, maybe empty). Each partition goes to exactly one member
/// subscribed to its topic.
pub fn assign(
    assignor: &str,
    members: &BTreeMap<String, AssignorMember>,
    previous: &BTreeMap<String, Assignment>,
) -> BTreeMap<String, Assignment> {
    if assignor == RANGE {
        range(members)
    } else {
        uniform(members, previous)
    }
}

fn empty_result(members: &BTreeMap<String, AssignorMember>) -> BTreeMap<String, Assignment> {
    members
        .keys()
        .map(|id| (id.clone(), Assignment::new()))
        .collect()
}

/// Every topic with its partition count and the members subscribed to it
/// (sorted by id).
fn topics(members: &BTreeMap<String, AssignorMember>) -> BTreeMap<TopicId, (u32, Vec<&str>)> {
    let mut out: BTreeMap<TopicId, (u32, Vec<&str>)> = BTreeMap::new();
    for (id, m) in members {
        for (topic, parts) in &m.topics {
            let e = out.entry(*topic).or_insert((*parts, Vec::new()));
            e.0 = e.0.max(*parts);
            e.1.push(id.as_str());
        }
    }
    out
}

fn range(members: &BTreeMap<String, AssignorMember>) -> BTreeMap<String, Assignment> {
    let mut out = empty_result(members);
    for (topic, (parts, subscribers)) in topics(members) {
        let n = parts as usize;
        let m = subscribers.len();
        if m == 0 {
            continue;
        }
        let (each, extra) = (n / m, n % m);
        let mut next = 0usize;
        for (i, member) in subscribers.iter().enumerate() {
            let count = each + usize::from(i < extra);
            let set: BTreeSet<i32> = (next..next + count)
                .filter_map(|p| i32::try_from(p).ok())
                .collect();
            next += count;
            if !set.is_empty()
                && let Some(a) = out.get_mut(*member)
            {
                a.insert(topic, set);
            }
        }
    }
    out
}

fn uniform(
    members: &BTreeMap<String, AssignorMember>,
    previous: &BTreeMap<String, Assignment>,
) -> BTreeMap<String, Assignment> {
    let mut out = empty_result(members);
    let topics = topics(members);
    let total: usize = topics.values().map(|(p, _)| *p as usize).sum();
    let subscribed = members.values().filter(|m| !m.topics.is_empty()).count();
    if subscribed == 0 || total == 0 {
        return out;
    }
    let floor = total / subscribed;
    let mut extra = total % subscribed;
    let mut counts: BTreeMap<&str, usize> = members.keys().map(|k| (k.as_str(), 0)).collect();
    let mut taken: BTreeSet<(TopicId, i32)> = BTreeSet::new();
    // First the partitions that stay where they were, up to each member's
    // share.
    for (member, prev) in previous {
        let Some(m) = members.get(member) else {
            continue;
        };
        for (topic, parts) in prev {
            let Some(count) = m.topics.get(topic) else {
                continue;
            };
            for &p in parts {
                if p < 0 || p as u32 >= *count || taken.contains(&(*topic, p)) {
                    continue;
                }
                let c = counts.get(member.as_str()).copied().unwrap_or(0);
                let allowed = if c < floor {
                    true
                } else if c == floor && extra > 0 {
                    extra -= 1;
                    true
                } else {
                    false
                };
                if !allowed {
                    continue;
                }
                taken.insert((*topic, p));
                counts.insert(member.as_str(), c + 1);
                if let Some(a) = out.get_mut(member) {
                    a.entry(*topic).or_default().insert(p);
                }
            }
        }
    }
    // Then the rest, each to the subscribed member with the fewest.
    for (topic, (parts, subscribers)) in &topics {
        for p in 0..*parts {
            let Ok(p) = i32::try_from(p) else { continue };
            if taken.contains(&(*topic, p)) {
                continue;
            }
            let Some(best) = subscribers
                .iter()
                .min_by_key(|m| (counts.get(**m).copied().unwrap_or(0), **m))
                .copied()
            else {
                continue;
            };
            *counts.entry(best).or_default() += 1;
            if let Some(a) = out.get_mut(best) {
                a.entry(*topic).or_default().insert(p);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn topic(n: u8) -> TopicId {
        TopicId(uuid::Uuid::from_bytes([n; 16]))
    }

    fn members(ids: &[&str], topics: &[(TopicId, u32)]) -> BTreeMap<String, AssignorMember> {
        ids.iter()
            .map(|id| {
                (
                    id.to_string(),
                    AssignorMember {
                        topics: topics.iter().copied().collect(),
                    },
                )
            })
            .collect()
    }

    fn count(a: &Assignment) -> usize {
        a.values().map(BTreeSet::len).sum()
    }

    fn every_partition_once(out: &BTreeMap<String, Assignment>, topics: &[(TopicId, u32)]) {
        let mut seen = BTreeSet::new();
        for a in out.values() {
            for (t, ps) in a {
                for p in ps {
                    assert!(seen.insert((*t, *p)), "{p} given twice");
                }
            }
        }
        let total: u32 = topics.iter().map(|(_, n)| n).sum();
        assert_eq!(seen.len(), total as usize);
    }

    #[test]
    fn uniform_balances_and_keeps_partitions_where_it_can() {
        let t = [(topic(1), 6)];
        let two = members(&["a", "b"], &t);
        let first = assign(UNIFORM, &two, &BTreeMap::new());
        every_partition_once(&first, &t);
        assert!(first.values().all(|a| count(a) == 3));
        let three = members(&["a", "b", "c"], &t);
        let second = assign(UNIFORM, &three, &first);
        every_partition_once(&second, &t);
        assert!(second.values().all(|a| count(a) == 2));
        // a and b keep two of their three each; c gets one from each.
        for m in ["a", "b"] {
            let kept = second[m][&topic(1)]
                .intersection(&first[m][&topic(1)])
                .count();
            assert_eq!(kept, 2, "{m}");
        }
    }

    #[test]
    fn uniform_with_more_members_than_partitions() {
        let t = [(topic(1), 2)];
        let out = assign(UNIFORM, &members(&["a", "b", "c"], &t), &BTreeMap::new());
        every_partition_once(&out, &t);
        assert_eq!(out.values().filter(|a| count(a) == 0).count(), 1);
    }

    #[test]
    fn uniform_gives_only_subscribed_topics() {
        let mut ms = members(&["a"], &[(topic(1), 2)]);
        ms.extend(members(&["b"], &[(topic(2), 2)]));
        let out = assign(UNIFORM, &ms, &BTreeMap::new());
        assert_eq!(out["a"].keys().collect::<Vec<_>>(), vec![&topic(1)]);
        assert_eq!(out["b"].keys().collect::<Vec<_>>(), vec![&topic(2)]);
    }

    #[test]
    fn range_gives_contiguous_ranges_per_topic() {
        let t = [(topic(1), 5), (topic(2), 2)];
        let out = assign(RANGE, &members(&["a", "b"], &t), &BTreeMap::new());
        every_partition_once(&out, &t);
        assert_eq!(
            out["a"][&topic(1)].iter().copied().collect::<Vec<_>>(),
            [0, 1, 2]
        );
        assert_eq!(
            out["b"][&topic(1)].iter().copied().collect::<Vec<_>>(),
            [3, 4]
        );
        assert_eq!(out["a"][&topic(2)].iter().copied().collect::<Vec<_>>(), [0]);
        assert_eq!(out["b"][&topic(2)].iter().copied().collect::<Vec<_>>(), [1]);
    }
}
