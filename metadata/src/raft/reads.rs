//! Shared leadership confirmations for linearizable reads.
//!
//! A linearizable read asks openraft to confirm with a quorum that this node
//! still leads (`ensure_linearizable`): one heartbeat round to every voter
//! per call. A broker taking thousands of partitions over reads thousands of
//! indexes at once; with one round each, the leader's heartbeats and
//! appends queue behind them, confirmations time out, and leases lapse.
//!
//! The [`Reads`] queue lets reads share a round instead. A round starts only
//! after every read it answers was queued, so each read still sees every
//! write committed before it arrived: reads that come while a round is in
//! flight wait for the next one, which takes all of them. At most one round
//! is in flight; a read waits at most two rounds.

use std::future::Future;

use tokio::sync::{mpsc, oneshot};

use super::Raft;
use crate::error::MetaError;

/// What confirms leadership: openraft in a node, a fake in tests.
pub trait Confirm: Send + Sync + 'static {
    /// Confirms with a quorum that this node leads, and waits until it has
    /// applied everything committed before the call.
    fn confirm(&self) -> impl Future<Output = Result<(), MetaError>> + Send;
}

impl Confirm for Raft {
    async fn confirm(&self) -> Result<(), MetaError> {
        self.ensure_linearizable().await.map(|_| ()).map_err(|e| {
            crate::api::server::not_leader(&e)
                .unwrap_or_else(|| MetaError::Unavailable(e.to_string()))
        })
    }
}

type Waiter = oneshot::Sender<Result<(), MetaError>>;

/// The queue of reads waiting for a confirmation; clones share it. The task
/// behind it ends when every clone is dropped.
#[derive(Debug, Clone)]
pub struct Reads {
    tx: mpsc::UnboundedSender<Waiter>,
}

impl Reads {
    /// Starts the task that confirms leadership for queued reads.
    pub fn start<C: Confirm>(confirm: C) -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(run(confirm, rx));
        Self { tx }
    }

    /// Waits for a confirmation that started after this call.
    pub async fn linearizable(&self) -> Result<(), MetaError> {
        let gone = || MetaError::Unavailable("the metadata node is shutting down".into());
        let (done, rx) = oneshot::channel();
        self.tx.send(done).map_err(|_| gone())?;
        rx.await.map_err(|_| gone())?
    }
}

async fn run<C: Confirm>(confirm: C, mut rx: mpsc::UnboundedReceiver<Waiter>) {
    while let Some(first) = rx.recv().await {
        // Everything queued so far shares this round; whatever is queued
        // from here on waits for the next.
        let mut waiters = vec![first];
        while let Ok(w) = rx.try_recv() {
            waiters.push(w);
        }
        let r = confirm.confirm().await;
        crate::metrics::read_confirmation(waiters.len(), r.is_ok());
        for w in waiters {
            let _ = w.send(r.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use tokio::sync::Semaphore;

    use super::*;

    /// Counts rounds; each round waits for a permit the test hands out.
    #[derive(Clone)]
    struct Gate {
        rounds: Arc<AtomicUsize>,
        permits: Arc<Semaphore>,
        fail: bool,
    }

    impl Confirm for Gate {
        async fn confirm(&self) -> Result<(), MetaError> {
            self.rounds.fetch_add(1, Ordering::SeqCst);
            self.permits
                .acquire()
                .await
                .map_err(|e| MetaError::Unavailable(e.to_string()))?
                .forget();
            if self.fail {
                Err(MetaError::NotLeader { leader: None })
            } else {
                Ok(())
            }
        }
    }

    fn gate(fail: bool) -> Gate {
        Gate {
            rounds: Arc::new(AtomicUsize::new(0)),
            permits: Arc::new(Semaphore::new(0)),
            fail,
        }
    }

    async fn until(what: impl Fn() -> bool) {
        while !what() {
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test]
    async fn reads_arriving_during_a_round_share_the_next_one() {
        let g = gate(false);
        let reads = Reads::start(g.clone());
        let first = tokio::spawn({
            let r = reads.clone();
            async move { r.linearizable().await }
        });
        until(|| g.rounds.load(Ordering::SeqCst) == 1).await;
        // 100 reads queue while round 1 is in flight (polled once: queued):
        // none may be answered by it, since it started before they arrived.
        let mut later: Vec<_> = (0..100).map(|_| Box::pin(reads.linearizable())).collect();
        for f in &mut later {
            assert!(futures::poll!(f.as_mut()).is_pending());
        }
        g.permits.add_permits(1);
        first.await.expect("joined").expect("confirmed");
        until(|| g.rounds.load(Ordering::SeqCst) == 2).await;
        for f in &mut later {
            assert!(
                futures::poll!(f.as_mut()).is_pending(),
                "answered by an earlier round"
            );
        }
        g.permits.add_permits(1);
        for f in later {
            f.await.expect("confirmed");
        }
        assert_eq!(g.rounds.load(Ordering::SeqCst), 2, "one round for all 100");
    }

    #[tokio::test]
    async fn a_failed_round_fails_every_read_it_took() {
        let g = gate(true);
        let reads = Reads::start(g.clone());
        g.permits.add_permits(10);
        let all: Vec<_> = (0..5)
            .map(|_| {
                let r = reads.clone();
                tokio::spawn(async move { r.linearizable().await })
            })
            .collect();
        for h in all {
            let e = h.await.expect("joined").expect_err("not the leader");
            assert!(matches!(e, MetaError::NotLeader { .. }), "{e:?}");
        }
    }
}
