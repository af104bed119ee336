//! The broker's own view of its lease with the metadata service: until when
//! it may surely still serve its partitions and coordinator shards.
//!
//! The metadata service renews a lease from when it *receives* a heartbeat;
//! the broker counts from when it *sent* it (earlier), minus a margin for
//! clocks running at slightly different rates. So the broker stops serving
//! before the metadata service could declare it dead and give its
//! partitions to another broker. A lease that ran out (the process was
//! paused, or cut off from the metadata service) is not trusted again until
//! a heartbeat succeeds *and* the broker has checked, against a fresh view,
//! which partitions are still its own: [`Lease::renewed`] says when that
//! check is needed, [`Lease::resume`] ends it.
//!
//! Time is passed in: this is a plain state machine.

use std::time::Duration;

use tokio::time::Instant;

/// What a successful renewal means for serving.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Renewal {
    /// The lease never lapsed: keep serving.
    Continuous,
    /// The lease had run out before this renewal was sent: serving waits
    /// until ownership is checked again ([`Lease::resume`]).
    AfterLapse,
}

/// The lease as this broker may rely on it.
#[derive(Debug, Clone)]
pub(crate) struct Lease {
    length: Duration,
    margin: Duration,
    /// Serving is safe strictly before this instant.
    valid_until: Option<Instant>,
    /// Set by a renewal after a lapse, until ownership is checked again.
    revalidating: bool,
}

impl Lease {
    /// A lease of `length` (as registered), not yet granted.
    pub(crate) fn new(length: Duration) -> Self {
        Self {
            length,
            margin: Self::margin_for(length),
            valid_until: None,
            revalidating: false,
        }
    }

    /// The part of the lease not relied on: a tenth, at most one second.
    pub(crate) fn margin_for(length: Duration) -> Duration {
        (length / 10).min(Duration::from_secs(1))
    }

    /// A registration or heartbeat sent at `sent_at` succeeded.
    pub(crate) fn renewed(&mut self, sent_at: Instant) -> Renewal {
        let lapsed = match self.valid_until {
            // The first grant (registration) needs no check: nothing is owned yet.
            None => false,
            Some(until) => self.revalidating || sent_at >= until,
        };
        let until = sent_at + self.length.saturating_sub(self.margin);
        self.valid_until = Some(self.valid_until.map_or(until, |u| u.max(until)));
        if lapsed {
            self.revalidating = true;
            Renewal::AfterLapse
        } else {
            Renewal::Continuous
        }
    }

    /// The lease was granted anew (a new registration after the metadata
    /// service forgot this broker): serving waits for an ownership check.
    pub(crate) fn force_revalidation(&mut self) {
        self.revalidating = true;
    }

    /// Ownership was checked after a lapse: serve again (while valid).
    pub(crate) fn resume(&mut self) {
        self.revalidating = false;
    }

    /// Whether the broker may serve at `now`.
    pub(crate) fn serves_at(&self, now: Instant) -> bool {
        !self.revalidating && self.valid_until.is_some_and(|u| now < u)
    }

    /// Whether the lease has run out at `now` (time to renew at once).
    pub(crate) fn expired_at(&self, now: Instant) -> bool {
        self.valid_until.is_none_or(|u| now >= u)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const L: Duration = Duration::from_secs(10);

    #[test]
    fn serving_ends_a_lease_minus_the_margin_after_the_heartbeat_was_sent() {
        let t0 = Instant::now();
        let mut l = Lease::new(L);
        assert!(!l.serves_at(t0), "nothing granted yet");
        assert_eq!(l.renewed(t0), Renewal::Continuous);
        let margin = Lease::margin_for(L);
        assert_eq!(margin, Duration::from_secs(1));
        assert!(l.serves_at(t0 + L - margin - Duration::from_millis(1)));
        assert!(!l.serves_at(t0 + L - margin));
        assert!(l.expired_at(t0 + L - margin));
    }

    #[test]
    fn a_late_answer_counts_from_when_its_heartbeat_was_sent() {
        let t0 = Instant::now();
        let mut l = Lease::new(L);
        l.renewed(t0);
        // Sent at t0 + 3 s, answered 20 s later: the lease still ends at
        // t0 + 3 s + 9 s, so it is over when the answer comes.
        let sent = t0 + Duration::from_secs(3);
        assert_eq!(l.renewed(sent), Renewal::Continuous);
        assert!(l.serves_at(sent + Duration::from_secs(8)));
        assert!(!l.serves_at(sent + Duration::from_secs(20)));
    }

    #[test]
    fn an_older_answer_never_shortens_the_lease() {
        let t0 = Instant::now();
        let mut l = Lease::new(L);
        l.renewed(t0 + Duration::from_secs(5));
        l.renewed(t0);
        assert!(l.serves_at(t0 + Duration::from_secs(13)));
    }

    #[test]
    fn after_a_lapse_serving_waits_for_the_ownership_check() {
        let t0 = Instant::now();
        let mut l = Lease::new(L);
        l.renewed(t0);
        // Paused for 30 s: the next heartbeat is sent after the lease ran out.
        let back = t0 + Duration::from_secs(30);
        assert!(!l.serves_at(back));
        assert!(l.expired_at(back));
        assert_eq!(l.renewed(back), Renewal::AfterLapse);
        assert!(!l.serves_at(back), "not before ownership is checked");
        // Another heartbeat before the check does not end it either.
        assert_eq!(
            l.renewed(back + Duration::from_secs(1)),
            Renewal::AfterLapse
        );
        assert!(!l.serves_at(back + Duration::from_secs(1)));
        l.resume();
        assert!(l.serves_at(back + Duration::from_secs(2)));
        assert_eq!(
            l.renewed(back + Duration::from_secs(3)),
            Renewal::Continuous
        );
    }

    #[test]
    fn short_leases_keep_a_tenth_as_margin() {
        assert_eq!(
            Lease::margin_for(Duration::from_millis(2000)),
            Duration::from_millis(200)
        );
        let t0 = Instant::now();
        let mut l = Lease::new(Duration::from_millis(2000));
        l.renewed(t0);
        assert!(l.serves_at(t0 + Duration::from_millis(1799)));
        assert!(!l.serves_at(t0 + Duration::from_millis(1800)));
    }
}
