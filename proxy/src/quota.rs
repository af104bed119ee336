//! Enforcing client quotas (`floe_metadata::quota`): each Produce request's
//! bytes and each Fetch answer's bytes are recorded against the quota that
//! applies to the client; once the client's rate over the quota window
//! goes above its quota, the answer carries `throttle_time_ms` and the
//! connection reads no further request for that long (KIP-219; answers to
//! Produce below v6 and Fetch below v8, which predate it, are held back
//! that long instead).
//!
//! As Kafka does, the rate is measured in `window_num` samples of
//! `window_size` each, over at least `window_num − 1` samples' time (so a
//! new client may send a burst of that many seconds' quota first), and the
//! throttle time is how long the client must stay silent for its rate over
//! the window to come down to the quota, at most the whole window. Clients
//! that the same entity's quota applies to share one measure (a quota set
//! on a client id: every connection of that client id to this proxy; on
//! the default client id: each client id on its own; on a user: every
//! client). The measure is per proxy, as Kafka's is per broker: a client
//! that reaches several proxies may get the quota from each.
//!
//! The user is the name of the connection's principal: the SASL user, the
//! client certificate's mapped subject, or `ANONYMOUS` without
//! authentication (Kafka's principal without SASL or mTLS), so a quota on
//! `ANONYMOUS` applies to every unauthenticated client.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::Duration;

use floe_metadata::quota::{CONSUMER_BYTE_RATE, PRODUCER_BYTE_RATE, QuotaEntity, QuotaModel};
use tokio::time::Instant;

/// The user every client is, without authentication.
pub const ANONYMOUS: &str = "ANONYMOUS";
/// Kafka's `quota.window.num`.
pub const DEFAULT_WINDOW_NUM: u32 = 11;
/// Kafka's `quota.window.size.seconds`.
pub const DEFAULT_WINDOW_SIZE: Duration = Duration::from_secs(1);
/// A client's measure unused this long is forgotten.
const IDLE_FORGET: Duration = Duration::from_secs(3600);

/// What is measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QuotaKind {
    /// Produce request bytes (`producer_byte_rate`).
    Produce,
    /// Fetch answer bytes (`consumer_byte_rate`).
    Fetch,
}

impl QuotaKind {
    fn key(self) -> &'static str {
        match self {
            QuotaKind::Produce => PRODUCER_BYTE_RATE,
            QuotaKind::Fetch => CONSUMER_BYTE_RATE,
        }
    }

    /// The metric label.
    pub fn label(self) -> &'static str {
        match self {
            QuotaKind::Produce => "produce",
            QuotaKind::Fetch => "fetch",
        }
    }

    /// Whether a request of this kind at `version` is answered at once and
    /// the connection muted (KIP-219), rather than answered late.
    pub fn mutes_at(self, version: i16) -> bool {
        match self {
            QuotaKind::Produce => version >= 6,
            QuotaKind::Fetch => version >= 8,
        }
    }
}

/// Quota windows (Kafka's `quota.window.num` and `quota.window.size.seconds`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuotaWindow {
    pub num: u32,
    pub size: Duration,
}

impl Default for QuotaWindow {
    fn default() -> Self {
        Self {
            num: DEFAULT_WINDOW_NUM,
            size: DEFAULT_WINDOW_SIZE,
        }
    }
}

/// Who shares one measure: the entity the quota was set on, its defaults
/// replaced by the client's own names.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct SensorKey {
    kind: QuotaKind,
    user: Option<String>,
    client_id: Option<String>,
}

/// Bytes recorded in consecutive samples of one window size each.
#[derive(Debug, Default)]
struct Sensor {
    /// (start, bytes) of each sample, oldest first.
    samples: VecDeque<(Instant, u64)>,
    last: Option<Instant>,
}

impl Sensor {
    /// Records `bytes` at `now`; returns the bytes in the window and how
    /// long the window is.
    fn record(&mut self, w: QuotaWindow, bytes: u64, now: Instant) -> (u64, Duration) {
        let size = w.size.max(Duration::from_millis(1));
        let num = w.num.max(1);
        match self.samples.back_mut() {
            Some((start, b)) if now < *start + size => *b += bytes,
            _ => self.samples.push_back((now, bytes)),
        }
        while self.samples.len() > 1
            && self
                .samples
                .front()
                .is_some_and(|(start, _)| now.saturating_duration_since(*start) >= size * num)
        {
            self.samples.pop_front();
        }
        self.last = Some(now);
        let total = self.samples.iter().map(|(_, b)| *b).sum();
        let oldest = self.samples.front().map_or(now, |(s, _)| *s);
        let elapsed = now
            .saturating_duration_since(oldest)
            .max(size * (num - 1))
            .max(size);
        (total, elapsed)
    }
}

/// How long a client whose window of `elapsed` holds `total` bytes must
/// wait for its rate to come down to `quota` bytes per second, at most
/// `max`.
pub fn throttle_time(total: u64, elapsed: Duration, quota: u64, max: Duration) -> Duration {
    if quota == 0 {
        return max;
    }
    let needed = Duration::try_from_secs_f64(total as f64 / quota as f64).unwrap_or(max);
    needed.saturating_sub(elapsed).min(max)
}

/// Every client's measures in this proxy.
#[derive(Debug, Default)]
pub struct Throttles {
    window: QuotaWindow,
    sensors: Mutex<Sensors>,
}

#[derive(Debug, Default)]
struct Sensors {
    by_key: HashMap<SensorKey, Sensor>,
    last_swept: Option<Instant>,
}

impl Throttles {
    pub fn new(window: QuotaWindow) -> Self {
        Self {
            window,
            sensors: Mutex::default(),
        }
    }

    /// Records `bytes` of `kind` for the client `client_id` of `user` and
    /// returns how long it is throttled (zero without a quota, or under it).
    pub fn record(
        &self,
        quotas: &QuotaModel,
        kind: QuotaKind,
        user: &str,
        client_id: &str,
        bytes: u64,
        now: Instant,
    ) -> Duration {
        let Some(q) = quotas.resolve(user, client_id, kind.key()) else {
            return Duration::ZERO;
        };
        let key = sensor_key(kind, &q.entity, user, client_id);
        let max = self.window.size * self.window.num.max(1);
        let mut s = self.sensors.lock().unwrap_or_else(|p| p.into_inner());
        if s.last_swept.is_none_or(|t| now >= t + IDLE_FORGET) {
            s.by_key
                .retain(|_, v| v.last.is_some_and(|l| now < l + IDLE_FORGET));
            s.last_swept = Some(now);
        }
        let (total, elapsed) = s
            .by_key
            .entry(key)
            .or_default()
            .record(self.window, bytes, now);
        drop(s);
        let t = throttle_time(total, elapsed, q.bytes_per_second, max);
        if !t.is_zero() {
            crate::metrics::throttled(kind.label(), t);
        }
        t
    }
}

fn sensor_key(kind: QuotaKind, entity: &QuotaEntity, user: &str, client_id: &str) -> SensorKey {
    SensorKey {
        kind,
        user: entity.user.as_ref().map(|_| user.to_string()),
        client_id: entity.client_id.as_ref().map(|_| client_id.to_string()),
    }
}

/// A connection's mute (KIP-219): no request is read before it ends.
#[derive(Debug, Default)]
pub struct Mute {
    until: Mutex<Option<Instant>>,
}

impl Mute {
    /// Mutes until `now + for_`, unless already muted longer.
    pub fn extend(&self, now: Instant, for_: Duration) {
        if for_.is_zero() {
            return;
        }
        let mut u = self.until.lock().unwrap_or_else(|p| p.into_inner());
        let end = now + for_;
        if u.is_none_or(|t| t < end) {
            *u = Some(end);
        }
    }

    /// When the mute ends, if it has not yet at `now`.
    pub fn until(&self, now: Instant) -> Option<Instant> {
        let u = *self.until.lock().unwrap_or_else(|p| p.into_inner());
        u.filter(|t| *t > now)
    }
}

/// Milliseconds for a `throttle_time_ms` field.
pub fn millis(d: Duration) -> i32 {
    i32::try_from(d.as_millis()).unwrap_or(i32::MAX)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::collections::BTreeMap;

    use floe_metadata::quota::{EntityName, QuotaAlteration};

    use super::*;

    fn model(client: EntityName, rate: u64) -> QuotaModel {
        let mut m = QuotaModel::default();
        m.alter(&[QuotaAlteration {
            entity: QuotaEntity {
                user: None,
                client_id: Some(client),
            },
            set: BTreeMap::from([(PRODUCER_BYTE_RATE.to_string(), rate)]),
            remove: vec![],
        }])
        .unwrap();
        m
    }

    #[test]
    fn throttle_is_the_wait_that_brings_the_rate_down_to_the_quota() {
        let max = Duration::from_secs(11);
        assert_eq!(
            throttle_time(3000, Duration::from_secs(2), 1000, max),
            Duration::from_secs(1)
        );
        assert_eq!(
            throttle_time(1000, Duration::from_secs(2), 1000, max),
            Duration::ZERO
        );
        assert_eq!(throttle_time(u64::MAX, Duration::ZERO, 1, max), max);
    }

    #[test]
    fn a_client_over_its_quota_is_throttled_and_a_default_measures_each_client_alone() {
        let t = Throttles::new(QuotaWindow {
            num: 2,
            size: Duration::from_secs(1),
        });
        let m = model(EntityName::Default, 1000);
        let now = Instant::now();
        // The window is at least one sample long: 1,000 bytes pass.
        assert!(
            t.record(&m, QuotaKind::Produce, ANONYMOUS, "a", 1000, now)
                .is_zero()
        );
        let d = t.record(&m, QuotaKind::Produce, ANONYMOUS, "a", 1000, now);
        assert_eq!(d, Duration::from_secs(1));
        // Another client id has its own measure under the default quota.
        assert!(
            t.record(&m, QuotaKind::Produce, ANONYMOUS, "b", 1000, now)
                .is_zero()
        );
        // No fetch quota.
        assert!(
            t.record(&m, QuotaKind::Fetch, ANONYMOUS, "a", 1 << 30, now)
                .is_zero()
        );
        // Once the samples age out of the window, the client is free again.
        let later = now + Duration::from_secs(5);
        assert!(
            t.record(&m, QuotaKind::Produce, ANONYMOUS, "a", 10, later)
                .is_zero()
        );
    }

    #[test]
    fn no_quota_no_throttle() {
        let t = Throttles::default();
        let m = model(EntityName::Named("x".into()), 1);
        let now = Instant::now();
        assert!(
            t.record(&m, QuotaKind::Produce, ANONYMOUS, "y", 1 << 20, now)
                .is_zero()
        );
        assert!(
            !t.record(&m, QuotaKind::Produce, ANONYMOUS, "x", 1 << 20, now)
                .is_zero()
        );
    }

    #[test]
    fn a_mute_only_grows() {
        let m = Mute::default();
        let now = Instant::now();
        assert_eq!(m.until(now), None);
        m.extend(now, Duration::from_secs(2));
        m.extend(now, Duration::from_secs(1));
        assert_eq!(m.until(now), Some(now + Duration::from_secs(2)));
        assert_eq!(m.until(now + Duration::from_secs(3)), None);
    }
}
