//! Fetch sessions (KIP-227): a consumer of many partitions names them once,
//! then sends only what changed (a new fetch offset, a partition added or
//! forgotten), and each answer carries only the partitions with something
//! new (records, an error, a moved high watermark, last stable offset or
//! log start).
//!
//! The cache is the proxy's, keyed by session id: a session is not tied to
//! a connection, as in Kafka. A Fetch passes through [`FetchSessions::begin`],
//! which turns an incremental request into the full one the fetch logic
//! answers, then through [`FetchSessions::finish`], which drops the
//! partitions with nothing new and remembers what was answered.
//!
//! The epochs are Kafka's: `-1` asks for no session (and closes the one
//! named), `0` opens one (closing the one named), and every later request
//! carries the epoch the previous answer implies. An unknown session is
//! FETCH_SESSION_ID_NOT_FOUND and a wrong epoch INVALID_FETCH_SESSION_EPOCH;
//! the client then opens a new session with a full fetch. At most
//! `max_sessions` live at once (0: no sessions, every fetch is full); a new
//! one replaces the least recently used, and a session unused for
//! [`IDLE_EVICTION`] may be replaced whatever the count.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use kafka_protocol::ResponseError;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::{FetchRequest, TopicName};
use kafka_protocol::protocol::StrBytes;

use crate::codec::FetchAnswer;

/// Kafka's default `max.incremental.fetch.session.cache.slots`.
pub const DEFAULT_MAX_SESSIONS: usize = 1000;

/// A session unused this long may be evicted for a new one
/// (Kafka's `min.incremental.fetch.session.eviction.ms`).
pub const IDLE_EVICTION: Duration = Duration::from_secs(120);

/// The first Fetch version with sessions.
const FIRST_SESSION_VERSION: i16 = 7;
const FINAL_EPOCH: i32 = -1;
const INITIAL_EPOCH: i32 = 0;

/// What one partition of a session last asked for and was last answered.
#[derive(Debug, Clone)]
struct Entry {
    topic_id: uuid::Uuid,
    asked: FetchPartition,
    /// (high watermark, last stable offset, log start) of the last answer
    /// that carried this partition; `None` before the first.
    answered: Option<(i64, i64, i64)>,
}

#[derive(Debug)]
struct Session {
    /// The epoch the next request must carry.
    next_epoch: i32,
    partitions: BTreeMap<(String, i32), Entry>,
    last_used: Instant,
}

#[derive(Debug, Default)]
struct Cache {
    sessions: HashMap<i32, Session>,
    last_id: i32,
}

/// The proxy's fetch sessions.
#[derive(Debug)]
pub struct FetchSessions {
    max_sessions: usize,
    cache: Mutex<Cache>,
}

impl Default for FetchSessions {
    fn default() -> Self {
        Self::new(DEFAULT_MAX_SESSIONS)
    }
}

/// How a fetch uses a session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionUse {
    /// No session: the answer holds every partition, `session_id` 0.
    None,
    /// A full fetch that opened this session: every partition answered.
    Opened(i32),
    /// An incremental fetch of this session: only what changed is answered.
    Incremental(i32),
}

/// The outcome of [`FetchSessions::begin`].
#[derive(Debug)]
pub enum Begin {
    /// Fetch the request as sent, then [`FetchSessions::finish`].
    AsSent(SessionUse),
    /// Fetch this request instead (every partition of the session), then
    /// [`FetchSessions::finish`].
    Rewritten(Box<FetchRequest>, SessionUse),
    /// Answer this error at once, with no partition.
    Refuse(ResponseError),
}

fn key_of(topic: &TopicName, partition: i32) -> (String, i32) {
    (topic.0.to_string(), partition)
}

impl FetchSessions {
    /// A cache of at most `max_sessions` sessions (0: none).
    pub fn new(max_sessions: usize) -> Self {
        Self {
            max_sessions,
            cache: Mutex::new(Cache::default()),
        }
    }

    /// Sessions open now.
    pub fn len(&self) -> usize {
        self.lock().sessions.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Cache> {
        self.cache.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The full request to answer for `req`, and the session it uses.
    pub fn begin(&self, version: i16, req: &FetchRequest) -> Begin {
        let full = Begin::AsSent;
        // No session asked for and none to close (librdkafka, kafkajs):
        // the cache is not touched.
        let sessionless = req.session_epoch == FINAL_EPOCH && req.session_id == 0;
        if version < FIRST_SESSION_VERSION || sessionless {
            return full(SessionUse::None);
        }
        let now = Instant::now();
        let mut cache = self.lock();
        match req.session_epoch {
            FINAL_EPOCH => {
                cache.sessions.remove(&req.session_id);
                full(SessionUse::None)
            }
            INITIAL_EPOCH => {
                cache.sessions.remove(&req.session_id);
                match self.open(&mut cache, req, now) {
                    Some(id) => full(SessionUse::Opened(id)),
                    None => full(SessionUse::None),
                }
            }
            epoch => {
                let Some(s) = cache.sessions.get_mut(&req.session_id) else {
                    return Begin::Refuse(ResponseError::FetchSessionIdNotFound);
                };
                if epoch != s.next_epoch {
                    return Begin::Refuse(ResponseError::InvalidFetchSessionEpoch);
                }
                s.next_epoch = next_epoch(epoch);
                s.last_used = now;
                for t in &req.forgotten_topics_data {
                    for p in &t.partitions {
                        s.partitions.remove(&key_of(&t.topic, *p));
                    }
                }
                for t in &req.topics {
                    for p in &t.partitions {
                        let entry = s
                            .partitions
                            .entry(key_of(&t.topic, p.partition))
                            .or_insert_with(|| Entry {
                                topic_id: t.topic_id,
                                asked: p.clone(),
                                answered: None,
                            });
                        entry.asked = p.clone();
                    }
                }
                let mut full_req = req.clone();
                full_req.forgotten_topics_data = Vec::new();
                full_req.topics = topics_of(&s.partitions);
                Begin::Rewritten(Box::new(full_req), SessionUse::Incremental(req.session_id))
            }
        }
    }

    /// Opens a session holding `req`'s partitions, if there is room (or a
    /// session to replace).
    fn open(&self, cache: &mut Cache, req: &FetchRequest, now: Instant) -> Option<i32> {
        if self.max_sessions == 0 {
            return None;
        }
        if cache.sessions.len() >= self.max_sessions {
            // The least recently used goes.
            let oldest = cache
                .sessions
                .iter()
                .min_by_key(|(_, s)| s.last_used)
                .map(|(id, _)| *id)?;
            cache.sessions.remove(&oldest);
        }
        cache
            .sessions
            .retain(|_, s| now.duration_since(s.last_used) < IDLE_EVICTION);
        let mut id = cache.last_id;
        loop {
            id = if id == i32::MAX { 1 } else { id + 1 };
            if !cache.sessions.contains_key(&id) {
                break;
            }
        }
        cache.last_id = id;
        let mut partitions = BTreeMap::new();
        for t in &req.topics {
            for p in &t.partitions {
                partitions.insert(
                    key_of(&t.topic, p.partition),
                    Entry {
                        topic_id: t.topic_id,
                        asked: p.clone(),
                        answered: None,
                    },
                );
            }
        }
        cache.sessions.insert(
            id,
            Session {
                next_epoch: 1,
                partitions,
                last_used: now,
            },
        );
        Some(id)
    }

    /// Sets the answer's session id and, for an incremental fetch, keeps
    /// only the partitions with something new; remembers what each
    /// partition was answered.
    pub fn finish(&self, session: SessionUse, answer: &mut FetchAnswer) {
        let id = match session {
            SessionUse::None => {
                answer.resp.session_id = 0;
                return;
            }
            SessionUse::Opened(id) | SessionUse::Incremental(id) => id,
        };
        answer.resp.session_id = id;
        let incremental = matches!(session, SessionUse::Incremental(_));
        let mut cache = self.lock();
        // Closed meanwhile (replaced by a newer session): answered in full.
        let Some(s) = cache.sessions.get_mut(&id) else {
            answer.resp.session_id = 0;
            return;
        };
        let mut pieces = std::mem::take(&mut answer.records).into_iter();
        let mut kept_pieces = Vec::new();
        for t in &mut answer.resp.responses {
            let name = t.topic.0.to_string();
            t.partitions.retain_mut(|p| {
                let records = pieces.next().unwrap_or_default();
                let now = (p.high_watermark, p.last_stable_offset, p.log_start_offset);
                let entry = s.partitions.get_mut(&(name.clone(), p.partition_index));
                let changed = entry.as_ref().is_none_or(|e| e.answered != Some(now));
                let keep = !incremental || !records.is_empty() || p.error_code != 0 || changed;
                if let Some(e) = entry {
                    e.answered = Some(now);
                }
                if keep {
                    kept_pieces.push(records);
                }
                keep
            });
        }
        answer.resp.responses.retain(|t| !t.partitions.is_empty());
        answer.records = kept_pieces;
    }
}

impl crate::handlers::Context {
    /// A Fetch through its session, if it has one: the partitions the
    /// session holds are fetched, and only those with something new are
    /// answered.
    pub async fn fetch_in_session(&self, version: i16, req: &FetchRequest) -> FetchAnswer {
        let begin = self.fetch_sessions.begin(version, req);
        crate::metrics::fetch(match &begin {
            Begin::AsSent(SessionUse::None) => "none",
            Begin::AsSent(_) => "opened",
            Begin::Rewritten(..) => "incremental",
            Begin::Refuse(_) => "refused",
        });
        let (mut answer, session) = match begin {
            Begin::AsSent(session) => (self.fetch_answer(version, req).await, session),
            Begin::Rewritten(full, session) => (self.fetch_answer(version, &full).await, session),
            Begin::Refuse(e) => {
                return FetchAnswer {
                    resp: kafka_protocol::messages::FetchResponse::default()
                        .with_error_code(e.code()),
                    records: Vec::new(),
                };
            }
        };
        self.fetch_sessions.finish(session, &mut answer);
        answer
    }
}

/// The epoch after `epoch` (1 again after the largest).
fn next_epoch(epoch: i32) -> i32 {
    if epoch == i32::MAX { 1 } else { epoch + 1 }
}

/// A session's partitions as a request's topics.
fn topics_of(partitions: &BTreeMap<(String, i32), Entry>) -> Vec<FetchTopic> {
    let mut out: Vec<FetchTopic> = Vec::new();
    for ((topic, _), e) in partitions {
        match out.last_mut() {
            Some(t) if t.topic.0.as_str() == topic => t.partitions.push(e.asked.clone()),
            _ => out.push(
                FetchTopic::default()
                    .with_topic(TopicName(StrBytes::from_string(topic.clone())))
                    .with_topic_id(e.topic_id)
                    .with_partitions(vec![e.asked.clone()]),
            ),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use kafka_protocol::messages::FetchResponse;
    use kafka_protocol::messages::fetch_request::ForgottenTopic;
    use kafka_protocol::messages::fetch_response::{FetchableTopicResponse, PartitionData};

    use super::*;

    fn name(t: &str) -> TopicName {
        TopicName(StrBytes::from_string(t.to_owned()))
    }

    fn request(id: i32, epoch: i32, parts: &[(&str, i32, i64)]) -> FetchRequest {
        let mut topics: Vec<FetchTopic> = Vec::new();
        for (t, p, off) in parts {
            let fp = FetchPartition::default()
                .with_partition(*p)
                .with_fetch_offset(*off);
            match topics.iter_mut().find(|x| x.topic.0.as_str() == *t) {
                Some(x) => x.partitions.push(fp),
                None => topics.push(
                    FetchTopic::default()
                        .with_topic(name(t))
                        .with_partitions(vec![fp]),
                ),
            }
        }
        FetchRequest::default()
            .with_session_id(id)
            .with_session_epoch(epoch)
            .with_topics(topics)
    }

    /// The request to answer and its session use, `sent` being what the client sent.
    fn fetched(s: &FetchSessions, version: i16, sent: &FetchRequest) -> (FetchRequest, SessionUse) {
        match s.begin(version, sent) {
            Begin::AsSent(session) => (sent.clone(), session),
            Begin::Rewritten(req, session) => (*req, session),
            Begin::Refuse(e) => panic!("refused: {e:?}"),
        }
    }

    fn asked(req: &FetchRequest) -> Vec<(String, i32, i64)> {
        req.topics
            .iter()
            .flat_map(|t| {
                t.partitions
                    .iter()
                    .map(move |p| (t.topic.0.to_string(), p.partition, p.fetch_offset))
            })
            .collect()
    }

    /// An answer for every partition of `req`: hw as given per partition
    /// (default 10), records for those in `with_records`.
    fn answer(
        req: &FetchRequest,
        hw: &[(&str, i32, i64)],
        with_records: &[(&str, i32)],
    ) -> FetchAnswer {
        let mut resp = FetchResponse::default();
        let mut records = Vec::new();
        for t in &req.topics {
            let mut tr = FetchableTopicResponse::default().with_topic(t.topic.clone());
            for p in &t.partitions {
                let topic = t.topic.0.as_str();
                let h = hw
                    .iter()
                    .find(|(x, q, _)| *x == topic && *q == p.partition)
                    .map_or(10, |(_, _, h)| *h);
                tr.partitions.push(
                    PartitionData::default()
                        .with_partition_index(p.partition)
                        .with_high_watermark(h)
                        .with_last_stable_offset(h),
                );
                records.push(if with_records.contains(&(topic, p.partition)) {
                    vec![Bytes::from_static(b"batch")]
                } else {
                    Vec::new()
                });
            }
            resp.responses.push(tr);
        }
        FetchAnswer { resp, records }
    }

    fn answered(a: &FetchAnswer) -> Vec<(String, i32, bool)> {
        let mut i = 0;
        let mut out = Vec::new();
        for t in &a.resp.responses {
            for p in &t.partitions {
                out.push((
                    t.topic.0.to_string(),
                    p.partition_index,
                    !a.records[i].is_empty(),
                ));
                i += 1;
            }
        }
        out
    }

    #[test]
    fn a_session_answers_only_what_changed_and_keeps_what_was_not_resent() {
        let s = FetchSessions::new(10);
        let parts = [("a", 0, 0), ("a", 1, 0), ("b", 0, 5)];
        let (req, use_) = fetched(&s, 7, &request(0, 0, &parts));
        let SessionUse::Opened(id) = use_ else {
            panic!("no session: {use_:?}")
        };
        let mut a = answer(&req, &[], &[("a", 0)]);
        s.finish(use_, &mut a);
        assert_eq!(a.resp.session_id, id);
        assert_eq!(
            answered(&a).len(),
            3,
            "the opening fetch answers every partition"
        );

        // Only a/0 moved on: the other two are fetched from the session.
        let (req, use_) = fetched(&s, 7, &request(id, 1, &[("a", 0, 3)]));
        assert_eq!(use_, SessionUse::Incremental(id));
        assert_eq!(
            asked(&req),
            [("a".into(), 0, 3), ("a".into(), 1, 0), ("b".into(), 0, 5)]
        );
        // a/1 gets records, b/0's high watermark moves, a/0 nothing new.
        let mut a = answer(&req, &[("b", 0, 11)], &[("a", 1)]);
        s.finish(use_, &mut a);
        assert_eq!(
            answered(&a),
            [("a".into(), 1, true), ("b".into(), 0, false)]
        );

        // Nothing new at all: an empty answer, still in the session.
        let (req, use_) = fetched(&s, 7, &request(id, 2, &[]));
        let mut a = answer(&req, &[("b", 0, 11)], &[]);
        s.finish(use_, &mut a);
        assert!(answered(&a).is_empty());
        assert_eq!(a.resp.session_id, id);
    }

    #[test]
    fn forgotten_partitions_leave_and_added_ones_are_answered_at_once() {
        let s = FetchSessions::new(10);
        let (req, use_) = fetched(&s, 12, &request(0, 0, &[("a", 0, 0), ("a", 1, 0)]));
        let SessionUse::Opened(id) = use_ else {
            panic!()
        };
        s.finish(use_, &mut answer(&req, &[], &[]));
        let mut next = request(id, 1, &[("c", 4, 7)]);
        next.forgotten_topics_data = vec![
            ForgottenTopic::default()
                .with_topic(name("a"))
                .with_partitions(vec![1]),
        ];
        let (req, use_) = fetched(&s, 12, &next);
        assert_eq!(asked(&req), [("a".into(), 0, 0), ("c".into(), 4, 7)]);
        assert!(req.forgotten_topics_data.is_empty());
        let mut a = answer(&req, &[], &[]);
        s.finish(use_, &mut a);
        assert_eq!(
            answered(&a),
            [("c".into(), 4, false)],
            "new to the session: answered"
        );
    }

    #[test]
    fn unknown_sessions_and_wrong_epochs_are_refused_with_kafkas_errors() {
        let s = FetchSessions::new(10);
        assert!(matches!(
            s.begin(7, &request(42, 1, &[])),
            Begin::Refuse(ResponseError::FetchSessionIdNotFound)
        ));
        let (req, use_) = fetched(&s, 7, &request(0, 0, &[("a", 0, 0)]));
        let SessionUse::Opened(id) = use_ else {
            panic!()
        };
        s.finish(use_, &mut answer(&req, &[], &[]));
        assert!(matches!(
            s.begin(7, &request(id, 2, &[])),
            Begin::Refuse(ResponseError::InvalidFetchSessionEpoch)
        ));
        // The right epoch still works, once: a replay of it is refused.
        fetched(&s, 7, &request(id, 1, &[]));
        assert!(matches!(
            s.begin(7, &request(id, 1, &[])),
            Begin::Refuse(ResponseError::InvalidFetchSessionEpoch)
        ));
        // Epoch -1 closes it.
        let (_, use_) = fetched(&s, 7, &request(id, -1, &[("a", 0, 0)]));
        assert_eq!(use_, SessionUse::None);
        assert!(s.is_empty());
    }

    #[test]
    fn old_versions_and_a_cache_of_none_are_sessionless_and_the_cache_is_bounded() {
        let s = FetchSessions::new(2);
        let (_, use_) = fetched(&s, 6, &request(0, 0, &[("a", 0, 0)]));
        assert_eq!(use_, SessionUse::None);
        let off = FetchSessions::new(0);
        let (_, use_) = fetched(&off, 12, &request(0, 0, &[("a", 0, 0)]));
        assert_eq!(use_, SessionUse::None);
        let mut a = answer(&request(0, 0, &[("a", 0, 0)]), &[], &[]);
        off.finish(use_, &mut a);
        assert_eq!((a.resp.session_id, answered(&a).len()), (0, 1));

        let mut ids = Vec::new();
        for _ in 0..3 {
            let (_, use_) = fetched(&s, 12, &request(0, 0, &[("a", 0, 0)]));
            let SessionUse::Opened(id) = use_ else {
                panic!()
            };
            ids.push(id);
        }
        assert_eq!(s.len(), 2);
        assert!(
            matches!(
                s.begin(12, &request(ids[0], 1, &[])),
                Begin::Refuse(ResponseError::FetchSessionIdNotFound)
            ),
            "the least recently used made room"
        );
        fetched(&s, 12, &request(ids[2], 1, &[]));
    }
}
