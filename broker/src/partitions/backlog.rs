//! The broker's write backlog: bytes sequenced but not yet committed (queued
//! for a flush or in one), counted against a cap. A produce reserves its
//! bytes before it is sequenced and waits for room while the backlog is
//! over the cap; the reservation ([`Held`]) travels with the queued batches
//! and gives its bytes back when it is dropped (committed, failed or rolled
//! back, whichever happens), so the count cannot drift.
//!
//! A slow or failing store therefore stops new produces after `cap` bytes
//! instead of growing the broker's memory without bound.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::sync::Notify;
use tokio::time::Instant;

/// Bytes sequenced and not yet committed, with their cap.
#[derive(Debug)]
pub(crate) struct Backlog {
    cap: usize,
    bytes: AtomicUsize,
    room: Notify,
}

/// Bytes reserved in a [`Backlog`]; given back on drop.
pub(crate) struct Held {
    backlog: Option<Arc<Backlog>>,
    bytes: usize,
}

impl std::fmt::Debug for Held {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Held({})", self.bytes)
    }
}

impl Held {
    /// A reservation in no backlog (tests, and transaction markers: a few
    /// dozen bytes that free a partition's last stable offset).
    pub(crate) fn untracked() -> Self {
        Held {
            backlog: None,
            bytes: 0,
        }
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        if let Some(b) = self.backlog.take() {
            b.bytes.fetch_sub(self.bytes, Ordering::SeqCst);
            b.room.notify_waiters();
        }
    }
}

impl Backlog {
    /// A backlog of at most `cap` bytes (a single reservation larger than
    /// the cap is admitted when the backlog is empty, so that no request
    /// is refused for ever).
    pub(crate) fn new(cap: usize) -> Arc<Self> {
        Arc::new(Self {
            cap: cap.max(1),
            bytes: AtomicUsize::new(0),
            room: Notify::new(),
        })
    }

    /// Bytes held now.
    pub(crate) fn bytes(&self) -> usize {
        self.bytes.load(Ordering::SeqCst)
    }

    pub(crate) fn cap(&self) -> usize {
        self.cap
    }

    /// Reserves `n` bytes if they fit now.
    pub(crate) fn try_hold(self: &Arc<Self>, n: usize) -> Option<Held> {
        let mut cur = self.bytes.load(Ordering::SeqCst);
        loop {
            if cur != 0 && cur.saturating_add(n) > self.cap {
                return None;
            }
            match self
                .bytes
                .compare_exchange(cur, cur + n, Ordering::SeqCst, Ordering::SeqCst)
            {
                Ok(_) => {
                    return Some(Held {
                        backlog: Some(self.clone()),
                        bytes: n,
                    });
                }
                Err(now) => cur = now,
            }
        }
    }

    /// Reserves `n` bytes, waiting for room until `until`; `None` if there
    /// was none by then.
    pub(crate) async fn hold(self: &Arc<Self>, n: usize, until: Instant) -> Option<Held> {
        loop {
            let room = self.room.notified();
            tokio::pin!(room);
            room.as_mut().enable();
            if let Some(h) = self.try_hold(n) {
                return Some(h);
            }
            if tokio::time::timeout_at(until, room).await.is_err() {
                return self.try_hold(n);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn reservations_count_until_dropped() {
        let b = Backlog::new(100);
        let x = b.try_hold(60).expect("fits");
        let y = b.try_hold(40).expect("fits exactly");
        assert_eq!(b.bytes(), 100);
        assert!(b.try_hold(1).is_none(), "over the cap");
        drop(x);
        assert_eq!(b.bytes(), 40);
        assert!(b.try_hold(60).is_some());
        drop(y);
        assert_eq!(b.bytes(), 0);
    }

    #[test]
    fn one_reservation_larger_than_the_cap_passes_when_empty() {
        let b = Backlog::new(10);
        let big = b.try_hold(50).expect("alone it passes");
        assert!(b.try_hold(1).is_none());
        drop(big);
        assert_eq!(b.bytes(), 0);
    }

    #[tokio::test]
    async fn a_waiting_reservation_gets_room_when_bytes_are_given_back() {
        let b = Backlog::new(100);
        let first = b.try_hold(100).expect("fits");
        let b2 = b.clone();
        let waiter = tokio::spawn(async move {
            b2.hold(30, Instant::now() + Duration::from_secs(30))
                .await
                .map(|h| h.bytes)
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiter.is_finished(), "waits while the backlog is full");
        drop(first);
        assert_eq!(waiter.await.expect("joined"), Some(30));
    }

    #[tokio::test]
    async fn a_reservation_without_room_gives_up_at_its_deadline() {
        let b = Backlog::new(100);
        let _full = b.try_hold(100).expect("fits");
        let start = Instant::now();
        let got = b.hold(1, start + Duration::from_millis(100)).await;
        assert!(got.is_none());
        assert!(Instant::now() >= start + Duration::from_millis(100));
        assert_eq!(b.bytes(), 100, "nothing leaked");
    }
}
