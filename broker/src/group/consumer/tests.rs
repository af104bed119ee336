use super::*;

const T: TopicId = TopicId(uuid::Uuid::from_bytes([7; 16]));

fn topics(name: &str) -> Option<TopicMeta> {
    (name == "t").then_some(TopicMeta {
        id: T,
        partitions: 6,
    })
}

fn cfg() -> ConsumerGroupConfig {
    ConsumerGroupConfig {
        session_timeout_ms: 10_000,
        heartbeat_interval_ms: 1_000,
    }
}

fn join(member: &str) -> ConsumerHeartbeat {
    ConsumerHeartbeat {
        group_id: "g".into(),
        member_id: member.into(),
        member_epoch: 0,
        rebalance_timeout_ms: 5_000,
        subscribed_topic_names: Some(vec!["t".into()]),
        owned: Some(Assignment::new()),
        ..Default::default()
    }
}

fn beat(member: &str, epoch: i32, owned: &Assignment) -> ConsumerHeartbeat {
    ConsumerHeartbeat {
        group_id: "g".into(),
        member_id: member.into(),
        member_epoch: epoch,
        rebalance_timeout_ms: -1,
        owned: Some(owned.clone()),
        ..Default::default()
    }
}

fn parts(a: &Assignment) -> BTreeSet<i32> {
    a.get(&T).cloned().unwrap_or_default()
}

/// A client: what it owns and its epoch, updated from each answer.
struct Client {
    id: String,
    epoch: i32,
    owned: Assignment,
}

impl Client {
    fn join(g: &mut ConsumerGroup, id: &str, now: u64) -> Client {
        let a = g.heartbeat(join(id), &cfg(), now, &topics).unwrap();
        Client {
            id: id.into(),
            epoch: a.member_epoch,
            owned: a.assignment.unwrap_or_default(),
        }
    }

    fn beat(&mut self, g: &mut ConsumerGroup, now: u64) {
        let a = g
            .heartbeat(
                beat(&self.id, self.epoch, &self.owned),
                &cfg(),
                now,
                &topics,
            )
            .unwrap();
        self.epoch = a.member_epoch;
        if let Some(x) = a.assignment {
            self.owned = x;
        }
    }
}

fn no_overlap(clients: &[&Client]) {
    let mut seen = BTreeSet::new();
    for c in clients {
        for p in parts(&c.owned) {
            assert!(seen.insert(p), "partition {p} owned twice");
        }
    }
}

#[test]
fn one_member_gets_everything_at_epoch_one() {
    let mut g = ConsumerGroup::new("g", 0);
    let a = Client::join(&mut g, "a", 0);
    assert_eq!(a.epoch, 1);
    assert_eq!(parts(&a.owned).len(), 6);
    assert_eq!(g.state(), "Stable");
}

#[test]
fn a_partition_moves_only_after_its_owner_gave_it_up() {
    let mut g = ConsumerGroup::new("g", 0);
    let mut a = Client::join(&mut g, "a", 0);
    let mut b = Client::join(&mut g, "b", 1);
    // b joined while a holds everything: b gets nothing yet.
    assert!(parts(&b.owned).is_empty());
    no_overlap(&[&a, &b]);
    // a is told to keep three; its epoch stays until it reports them gone.
    let before = a.epoch;
    a.beat(&mut g, 2);
    assert_eq!(parts(&a.owned).len(), 3);
    assert_eq!(a.epoch, before);
    // Its next heartbeat (owning three) moves it on.
    a.beat(&mut g, 3);
    assert!(a.epoch > before);
    b.beat(&mut g, 4);
    assert_eq!(parts(&b.owned).len(), 3);
    no_overlap(&[&a, &b]);
    assert_eq!(g.state(), "Stable");
}

#[test]
fn an_unacknowledged_revocation_keeps_the_partition_from_others() {
    let mut g = ConsumerGroup::new("g", 0);
    let mut a = Client::join(&mut g, "a", 0);
    let mut b = Client::join(&mut g, "b", 1);
    // a is told to give up three but its heartbeat still reports all six.
    let all = a.owned.clone();
    let r = g
        .heartbeat(beat("a", a.epoch, &all), &cfg(), 2, &topics)
        .unwrap();
    assert_eq!(parts(&r.assignment.unwrap()).len(), 3);
    b.beat(&mut g, 3);
    assert!(parts(&b.owned).is_empty());
    // Still owning six: still nothing for b.
    g.heartbeat(beat("a", a.epoch, &all), &cfg(), 4, &topics)
        .unwrap();
    b.beat(&mut g, 5);
    assert!(parts(&b.owned).is_empty());
    a.owned = g.describe().members[0].assignment.clone();
    a.beat(&mut g, 6);
    b.beat(&mut g, 7);
    assert_eq!(parts(&b.owned).len(), 3);
    no_overlap(&[&a, &b]);
}

#[test]
fn a_silent_member_is_removed_after_the_session_timeout() {
    let mut g = ConsumerGroup::new("g", 0);
    let mut a = Client::join(&mut g, "a", 0);
    let mut b = Client::join(&mut g, "b", 0);
    for t in 1..4 {
        a.beat(&mut g, t);
        b.beat(&mut g, t);
    }
    assert_eq!(parts(&a.owned).len(), 3);
    // b goes silent.
    a.beat(&mut g, 9_000);
    assert_eq!(parts(&a.owned).len(), 3);
    a.beat(&mut g, 13_500);
    assert_eq!(parts(&a.owned).len(), 6);
    assert!(!g.has_member("b"));
    let e = g.heartbeat(beat("b", b.epoch, &b.owned), &cfg(), 13_600, &topics);
    assert_eq!(e, Err(GroupError::UnknownMemberId));
}

#[test]
fn a_member_that_does_not_revoke_in_time_is_removed() {
    let mut g = ConsumerGroup::new("g", 0);
    let a = Client::join(&mut g, "a", 0);
    let all = a.owned.clone();
    let mut b = Client::join(&mut g, "b", 1);
    g.heartbeat(beat("a", a.epoch, &all), &cfg(), 2, &topics)
        .unwrap();
    // Past a's rebalance timeout (5 s) without giving anything up.
    b.beat(&mut g, 5_100);
    assert!(!g.has_member("a"));
    b.beat(&mut g, 5_200);
    assert_eq!(parts(&b.owned).len(), 6);
}

#[test]
fn leaving_hands_partitions_over() {
    let mut g = ConsumerGroup::new("g", 0);
    let mut a = Client::join(&mut g, "a", 0);
    let mut b = Client::join(&mut g, "b", 0);
    for t in 1..4 {
        a.beat(&mut g, t);
        b.beat(&mut g, t);
    }
    let r = g
        .heartbeat(beat("b", -1, &b.owned), &cfg(), 5, &topics)
        .unwrap();
    assert_eq!(r.member_epoch, -1);
    a.beat(&mut g, 6);
    assert_eq!(parts(&a.owned).len(), 6);
}

#[test]
fn wrong_epochs_are_fenced() {
    let mut g = ConsumerGroup::new("g", 0);
    let a = Client::join(&mut g, "a", 0);
    let e = g.heartbeat(beat("a", a.epoch + 5, &a.owned), &cfg(), 1, &topics);
    assert_eq!(e, Err(GroupError::FencedMemberEpoch));
    assert_eq!(
        g.validate_commit(a.epoch, "a", &cfg(), 1),
        Ok(()),
        "a member at its epoch commits"
    );
    assert_eq!(
        g.validate_commit(a.epoch - 1, "a", &cfg(), 1),
        Err(GroupError::StaleMemberEpoch)
    );
    assert_eq!(
        g.validate_commit(a.epoch + 1, "a", &cfg(), 1),
        Err(GroupError::FencedMemberEpoch)
    );
    assert_eq!(
        g.validate_commit(-1, "", &cfg(), 1),
        Err(GroupError::UnknownMemberId)
    );
}

#[test]
fn regex_subscriptions_and_unknown_assignors_are_refused() {
    let mut g = ConsumerGroup::new("g", 0);
    let mut hb = join("a");
    hb.subscribed_topic_regex = Some("t.*".into());
    assert!(matches!(
        g.heartbeat(hb, &cfg(), 0, &topics),
        Err(GroupError::InvalidRequest(_))
    ));
    let mut hb = join("a");
    hb.server_assignor = Some("sticky".into());
    assert_eq!(
        g.heartbeat(hb, &cfg(), 0, &topics),
        Err(GroupError::UnsupportedAssignor)
    );
    assert!(g.is_empty());
}

#[test]
fn a_static_member_comes_back_with_its_partitions() {
    let mut g = ConsumerGroup::new("g", 0);
    let mut hb = join("a1");
    hb.instance_id = Some("i".into());
    let first = g.heartbeat(hb, &cfg(), 0, &topics).unwrap();
    let mut again = join("a2");
    again.instance_id = Some("i".into());
    assert_eq!(
        g.heartbeat(again.clone(), &cfg(), 1, &topics),
        Err(GroupError::UnreleasedInstanceId)
    );
    let owned = first.assignment.clone().unwrap();
    g.heartbeat(beat("a1", -2, &owned), &cfg(), 2, &topics)
        .unwrap();
    let back = g.heartbeat(again, &cfg(), 3, &topics).unwrap();
    assert_eq!(back.member_epoch, first.member_epoch);
    assert_eq!(back.assignment, first.assignment);
}

#[test]
fn a_stored_group_resumes_with_its_epochs_and_partitions_mid_reconciliation() {
    let mut g = ConsumerGroup::new("g", 0);
    let mut a = Client::join(&mut g, "a", 0);
    let b = Client::join(&mut g, "b", 1);
    // a is told to give three up and has not yet: a revocation in progress.
    a.beat(&mut g, 2);
    let before = g.describe();
    assert_eq!(before.state, "Reconciling");
    let bytes = g.durable().expect("a group with members is stored");
    let record = crate::group::GroupRecord::from_bytes("g", &bytes)
        .unwrap()
        .consumer
        .expect("a consumer group's record");
    let mut resumed = ConsumerGroup::restore("g", record.clone(), 4, 1_000).unwrap();
    assert_eq!(resumed.describe(), before);
    assert_eq!(resumed.shard_epoch, 4);
    assert_eq!(resumed.written, resumed.durable(), "counts as stored");
    // The members carry on at their epochs: a reports the three gone and
    // moves on; b, at its epoch, gets its whole assignment again.
    let gone: Assignment = a.owned.clone();
    let answer = resumed
        .heartbeat(beat("a", a.epoch, &gone), &cfg(), 1_001, &topics)
        .unwrap();
    assert!(answer.member_epoch >= a.epoch);
    let answer = resumed
        .heartbeat(beat("b", b.epoch, &b.owned), &cfg(), 1_002, &topics)
        .unwrap();
    assert_eq!(answer.member_epoch, b.epoch);
    assert!(answer.assignment.is_some(), "resent after a move");
    // Sessions start over at the load, not at the stored group's clock.
    resumed.expire(&cfg(), 1_000 + cfg().session_timeout_ms - 1);
    assert_eq!(resumed.describe().members.len(), 2);
    // A damaged record is an error, not a panic.
    let mut bad = record;
    bad.members[0].assigned[0].topic_id = vec![1, 2, 3];
    assert!(ConsumerGroup::restore("g", bad.clone(), 4, 0).is_err());
    bad.members[0].assigned.clear();
    bad.members[0].state = 9;
    assert!(ConsumerGroup::restore("g", bad, 4, 0).is_err());
    // Without members nothing is stored.
    assert_eq!(ConsumerGroup::new("e", 0).durable(), None);
}
