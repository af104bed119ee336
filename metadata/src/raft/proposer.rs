//! Group commit: proposals that arrive while earlier ones are being written
//! share one Raft log entry, so one fsync makes several of them durable.
//!
//! openraft 0.9 appends each client write to the log on its own and waits
//! for its fsync before it looks at the next one: N proposals in flight cost
//! N fsyncs one after the other. The [`Proposer`] queues proposals instead.
//! At most [`Limits::in_flight`] entries are being written at once; whatever
//! queued meanwhile goes into the next entry, as one [`Command::Batch`] (a
//! proposal alone goes as itself). Each proposal still gets its own
//! [`Response`] (its command applied or refused on its own, as if it were
//! alone), and it is answered only once the entry holding it is committed,
//! i.e. durable on a majority: the durability promise is unchanged.
//!
//! Entries are handed to openraft in the order their proposals were queued,
//! with one exception: the proposals that keep a node's lease (heartbeats
//! and registrations, [`is_urgent`]) have a lane of their own, and the next
//! entry takes them first: a heartbeat waits for the entries being written,
//! never for a queue of thousands of topic creations (a lease runs out in
//! seconds, and the controller then moves every partition away from a
//! broker that is there).
//! Proposals still in the queue are concurrent (each caller waits for its
//! own), so taking one before another changes no order a caller relies on.

use std::future::Future;

use futures::StreamExt;
use futures::stream::FuturesOrdered;
use tokio::sync::{mpsc, oneshot};

use openraft::error::{ClientWriteError, RaftError};

use super::Raft;
use crate::command::{Command, Response};
use crate::error::MetaError;

/// What a proposal comes back with: its command's response and the index of
/// the log entry that holds it; an error when the entry was not committed.
pub type Written = Result<(Response, u64), MetaError>;

/// Where entries go: openraft's `client_write` in a node, a fake in tests.
pub trait Propose: Send + Sync + 'static {
    /// Proposes one entry and waits until it is committed and applied.
    fn propose(&self, cmd: Command) -> impl Future<Output = Written> + Send;
}

impl Propose for Raft {
    async fn propose(&self, cmd: Command) -> Written {
        match self.client_write(cmd).await {
            Ok(r) => Ok((r.data, r.log_id.index)),
            Err(e) => Err(
                crate::api::server::not_leader(&e).unwrap_or_else(|| match e {
                    RaftError::APIError(ClientWriteError::ChangeMembershipError(c)) => {
                        MetaError::InvalidRequest(c.to_string())
                    }
                    other => MetaError::Unavailable(other.to_string()),
                }),
            ),
        }
    }
}

/// How proposals are grouped.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Entries being written at once.
    pub in_flight: usize,
    /// Most proposals in one entry.
    pub max_commands: usize,
    /// Most bytes of one entry (the commands' binary encodings), so a
    /// batch is never above the bound a single command must keep.
    pub max_bytes: usize,
}

impl Limits {
    /// The defaults, with entries at most `max_bytes`.
    pub fn new(max_bytes: usize) -> Self {
        Self {
            in_flight: 2,
            max_commands: 512,
            max_bytes,
        }
    }
}

/// Bytes a batch takes beyond its commands' encodings (the variant and the
/// count), counted generously.
const BATCH_OVERHEAD: usize = 16;

/// Proposals waiting to be queued; beyond this, callers wait to queue.
const QUEUE: usize = 4096;

/// Whether `cmd` keeps a node's lease: it goes ahead of the queue.
pub fn is_urgent(cmd: &Command) -> bool {
    matches!(
        cmd,
        Command::Heartbeat { .. } | Command::RegisterNode { .. }
    )
}

struct Proposal {
    cmd: Command,
    /// The command's encoded size.
    size: usize,
    done: oneshot::Sender<Written>,
}

/// The queue in front of Raft; clones share it. The task that drains it
/// ends when every clone is dropped.
#[derive(Debug, Clone)]
pub struct Proposer {
    tx: mpsc::Sender<Proposal>,
    /// The lane of the proposals that keep leases.
    urgent: mpsc::Sender<Proposal>,
}

impl Proposer {
    /// Starts the task that groups proposals and hands them to `sink`.
    pub fn start<P: Propose>(sink: P, limits: Limits) -> Self {
        let (tx, rx) = mpsc::channel(QUEUE);
        let (urgent, urgent_rx) = mpsc::channel(QUEUE);
        tokio::spawn(run(
            sink,
            Lanes {
                urgent: urgent_rx,
                rest: rx,
            },
            limits,
        ));
        Self { tx, urgent }
    }

    /// Proposes `cmd` (of encoded size `size`) and waits until the entry
    /// holding it is committed and applied.
    pub async fn propose(&self, cmd: Command, size: usize) -> Written {
        let (done, rx) = oneshot::channel();
        let gone = || MetaError::Unavailable("the metadata node is shutting down".into());
        let lane = if is_urgent(&cmd) {
            &self.urgent
        } else {
            &self.tx
        };
        lane.send(Proposal { cmd, size, done })
            .await
            .map_err(|_| gone())?;
        rx.await.map_err(|_| gone())?
    }
}

/// Proposals going into one entry.
struct Batch {
    proposals: Vec<Proposal>,
    bytes: usize,
}

impl Batch {
    fn new(first: Proposal) -> Self {
        Self {
            bytes: BATCH_OVERHEAD + first.size,
            proposals: vec![first],
        }
    }

    /// Whether `p` may join without the entry going above `limits`.
    fn fits(&self, p: &Proposal, limits: &Limits) -> bool {
        self.proposals.len() < limits.max_commands
            && self.bytes.saturating_add(p.size) <= limits.max_bytes
    }

    fn push(&mut self, p: Proposal) {
        self.bytes += p.size;
        self.proposals.push(p);
    }

    /// Proposes the batch as one entry and answers each proposal.
    async fn write<P: Propose>(self, sink: &P) {
        let mut proposals = self.proposals;
        if proposals.len() == 1 {
            if let Some(p) = proposals.pop() {
                let _ = p.done.send(sink.propose(p.cmd).await);
            }
            return;
        }
        let (cmds, dones): (Vec<Command>, Vec<oneshot::Sender<Written>>) =
            proposals.into_iter().map(|p| (p.cmd, p.done)).unzip();
        let count = cmds.len();
        let failed = match sink.propose(Command::Batch(cmds)).await {
            Ok((Response::Batch(responses), index)) if responses.len() == count => {
                for (done, r) in dones.into_iter().zip(responses) {
                    let _ = done.send(Ok((r, index)));
                }
                return;
            }
            Ok((other, _)) => MetaError::Storage(format!(
                "a batch of {count} commands was answered {other:?}"
            )),
            Err(e) => e,
        };
        for done in dones {
            let _ = done.send(Err(failed.clone()));
        }
    }
}

/// The two queues in front of Raft.
struct Lanes {
    urgent: mpsc::Receiver<Proposal>,
    rest: mpsc::Receiver<Proposal>,
}

impl Lanes {
    /// The next proposal waiting: an urgent one first, then `next` (left
    /// over from the last entry), then the rest of the queue.
    fn take(&mut self, next: &mut Option<Proposal>) -> Option<Proposal> {
        self.urgent
            .try_recv()
            .ok()
            .or_else(|| next.take())
            .or_else(|| self.rest.try_recv().ok())
    }
}

async fn run<P: Propose>(sink: P, mut lanes: Lanes, limits: Limits) {
    let in_flight = limits.in_flight.max(1);
    let mut writing = FuturesOrdered::new();
    // A proposal that did not fit the last entry: it starts the next one
    // unless an urgent one waits (which then takes its place).
    let mut next: Option<Proposal> = None;
    // The proposal that arrived after a wait: it starts the next entry.
    let mut arrived: Option<Proposal> = None;
    let (mut urgent_open, mut rest_open) = (true, true);
    loop {
        if writing.len() < in_flight
            && let Some(first) = arrived.take().or_else(|| lanes.take(&mut next))
        {
            let mut batch = Batch::new(first);
            while let Some(p) = lanes.take(&mut next) {
                if batch.fits(&p, &limits) {
                    batch.push(p);
                } else {
                    // An urgent proposal that does not fit starts the
                    // next entry before any other.
                    if is_urgent(&p.cmd) {
                        arrived = Some(p);
                    } else {
                        next = Some(p);
                    }
                    break;
                }
            }
            writing.push_back(batch.write(&sink));
            continue;
        }
        let idle = next.is_none() && arrived.is_none() && writing.len() < in_flight;
        tokio::select! {
            // The entries being written are polled first: a new one is
            // handed to openraft before the next is formed, so entries keep
            // the order in which they were formed.
            biased;
            Some(()) = writing.next(), if !writing.is_empty() => {}
            p = lanes.urgent.recv(), if urgent_open && idle => match p {
                Some(p) => arrived = Some(p),
                None => urgent_open = false,
            },
            p = lanes.rest.recv(), if rest_open && idle => match p {
                Some(p) => arrived = Some(p),
                None => rest_open = false,
            },
            else => break,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};
    use std::time::{Duration, Instant};

    use tokio::sync::Semaphore;

    use super::*;

    /// A log that records the entries handed to it and commits one only
    /// when the test lets it (a permit of `commit`).
    #[derive(Clone)]
    struct FakeLog {
        entries: Arc<Mutex<Vec<Command>>>,
        commit: Arc<Semaphore>,
        fail: bool,
    }

    impl FakeLog {
        fn new(fail: bool) -> Self {
            Self {
                entries: Arc::new(Mutex::new(Vec::new())),
                commit: Arc::new(Semaphore::new(0)),
                fail,
            }
        }

        fn entries(&self) -> Vec<Command> {
            self.entries.lock().unwrap().clone()
        }
    }

    /// Each command is answered with what it asked for, so a caller can
    /// tell its own answer from the others'.
    fn answer(cmd: &Command) -> Response {
        match cmd {
            Command::AllocateProducerIds { count } => Response::ProducerIds {
                first: i64::from(*count),
                count: *count,
            },
            Command::Batch(cmds) => Response::Batch(cmds.iter().map(answer).collect()),
            _ => Response::Ok,
        }
    }

    impl Propose for FakeLog {
        async fn propose(&self, cmd: Command) -> Written {
            let index = {
                let mut entries = self.entries.lock().unwrap();
                entries.push(cmd.clone());
                entries.len() as u64
            };
            self.commit.acquire().await.unwrap().forget();
            if self.fail {
                return Err(MetaError::Unavailable("no quorum".into()));
            }
            Ok((answer(&cmd), index))
        }
    }

    fn ask(count: u32) -> Command {
        Command::AllocateProducerIds { count }
    }

    fn size(cmd: &Command) -> usize {
        crate::raft::codec::encoded_len(cmd).unwrap()
    }

    /// Waits (with a deadline) until `cond` holds.
    async fn until(what: &str, cond: impl Fn() -> bool) {
        let started = Instant::now();
        while !cond() {
            assert!(started.elapsed() < Duration::from_secs(20), "{what}");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Proposes `ask(1..=n)` at once, each from its own task.
    fn propose_many(
        proposer: &Proposer,
        range: std::ops::RangeInclusive<u32>,
    ) -> Vec<tokio::task::JoinHandle<Written>> {
        range
            .map(|i| {
                let p = proposer.clone();
                tokio::spawn(async move { p.propose(ask(i), size(&ask(i))).await })
            })
            .collect()
    }

    fn queued(proposer: &Proposer) -> usize {
        proposer.tx.max_capacity() - proposer.tx.capacity()
    }

    fn queued_urgent(proposer: &Proposer) -> usize {
        proposer.urgent.max_capacity() - proposer.urgent.capacity()
    }

    /// Proposes `first` and waits until its entry is being written, queues
    /// `rest` behind it, then lets the log commit. Returns the proposals in
    /// the order they were made.
    async fn queue_behind_a_write(
        log: &FakeLog,
        limits: Limits,
        first: u32,
        rest: std::ops::RangeInclusive<u32>,
    ) -> Vec<tokio::task::JoinHandle<Written>> {
        let proposer = Proposer::start(log.clone(), limits);
        let held = propose_many(&proposer, first..=first);
        until("the first entry is written", || log.entries().len() == 1).await;
        let waiting = rest.clone().count();
        let queued_behind = propose_many(&proposer, rest);
        until("the rest queued", || queued(&proposer) == waiting).await;
        log.commit.add_permits(1000);
        held.into_iter().chain(queued_behind).collect()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn proposals_queued_behind_a_write_share_one_entry() {
        let log = FakeLog::new(false);
        let limits = Limits {
            in_flight: 1,
            ..Limits::new(1 << 20)
        };
        let proposals = queue_behind_a_write(&log, limits, 1, 2..=40).await;
        for (i, h) in proposals.into_iter().enumerate() {
            let (r, _) = h.await.unwrap().unwrap();
            let count = i as u32 + 1;
            assert_eq!(
                r,
                Response::ProducerIds {
                    first: i64::from(count),
                    count
                }
            );
        }
        let entries = log.entries();
        assert_eq!(entries.len(), 2, "40 proposals, 2 entries: {entries:?}");
        assert_eq!(entries[0], ask(1), "a proposal alone goes as itself");
        match &entries[1] {
            Command::Batch(cmds) => {
                let mut counts: Vec<u32> = cmds
                    .iter()
                    .map(|c| match c {
                        Command::AllocateProducerIds { count } => *count,
                        other => panic!("{other:?}"),
                    })
                    .collect();
                counts.sort_unstable();
                assert_eq!(counts, (2..=40).collect::<Vec<_>>());
            }
            other => panic!("expected a batch, got {other:?}"),
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_entry_stays_within_the_byte_and_count_bounds() {
        let log = FakeLog::new(false);
        let one = size(&ask(100));
        let limits = Limits {
            in_flight: 1,
            max_commands: 4,
            // Room for 3 commands of this size beside the batch's overhead.
            max_bytes: BATCH_OVERHEAD + 3 * one,
        };
        for h in queue_behind_a_write(&log, limits, 100, 101..=108).await {
            h.await.unwrap().unwrap();
        }
        let sizes: Vec<usize> = log
            .entries()
            .iter()
            .map(|e| match e {
                Command::Batch(cmds) => cmds.len(),
                _ => 1,
            })
            .collect();
        assert_eq!(sizes, vec![1, 3, 3, 2]);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_failed_entry_fails_every_proposal_in_it() {
        let log = FakeLog::new(true);
        let limits = Limits {
            in_flight: 1,
            ..Limits::new(1 << 20)
        };
        for h in queue_behind_a_write(&log, limits, 1, 2..=5).await {
            let e = h.await.unwrap().unwrap_err();
            assert_eq!(e, MetaError::Unavailable("no quorum".into()));
        }
        assert_eq!(log.entries().len(), 2);
    }

    /// Behind a queue of many proposals (a burst of topic creations), a
    /// heartbeat goes into the next entry, not after the queue.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_heartbeat_goes_ahead_of_a_queue() {
        let log = FakeLog::new(false);
        let limits = Limits {
            in_flight: 1,
            max_commands: 8,
            max_bytes: 1 << 20,
        };
        let proposer = Proposer::start(log.clone(), limits);
        let held = propose_many(&proposer, 1..=1);
        until("the first entry is written", || log.entries().len() == 1).await;
        let queue = propose_many(&proposer, 100..=163);
        until("the queue is full", || queued(&proposer) == 64).await;
        let beat = Command::Heartbeat {
            id: crate::ids::BrokerId(7),
            now_ms: 1,
        };
        let heartbeat = {
            let p = proposer.clone();
            let (cmd, size) = (beat.clone(), size(&beat));
            tokio::spawn(async move { p.propose(cmd, size).await })
        };
        until("the heartbeat is queued", || queued_urgent(&proposer) == 1).await;
        log.commit.add_permits(1000);
        heartbeat.await.unwrap().unwrap();
        for h in held.into_iter().chain(queue) {
            h.await.unwrap().unwrap();
        }
        let entries = log.entries();
        // 1 alone, then the heartbeat with the first 7 of the queue, then
        // the other 57 in entries of 8.
        assert_eq!(entries.len(), 1 + 1 + 57_usize.div_ceil(8), "{entries:?}");
        match &entries[1] {
            Command::Batch(cmds) => {
                assert_eq!(cmds.len(), 8);
                assert_eq!(cmds[0], beat, "the heartbeat leads the next entry");
            }
            other => panic!("expected a batch, got {other:?}"),
        }
        assert!(!entries[2..].iter().any(|e| match e {
            Command::Batch(cmds) => cmds.contains(&beat),
            other => *other == beat,
        }));
    }

    /// Heartbeats and registrations keep leases; nothing else jumps the queue.
    #[test]
    fn only_lease_keeping_commands_are_urgent() {
        assert!(is_urgent(&Command::Heartbeat {
            id: crate::ids::BrokerId(1),
            now_ms: 0
        }));
        assert!(!is_urgent(&ask(1)));
        assert!(!is_urgent(&Command::Batch(vec![])));
    }
}
