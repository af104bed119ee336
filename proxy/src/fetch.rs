//! Fetch: the partitions a request names, read from their owners several
//! at a time, and put together into one answer within the byte caps.
//!
//! Reading one partition after the other made a catch-up read as slow as
//! the sum of its partitions' reads: on S3 one GET (or, for an owner in
//! another process, one RPC) per partition, in turn. The reads now go in
//! *waves*: a wave takes the partitions, in the request's order, whose
//! budgets all fit in what is left of the answer even if every read before
//! them in the wave comes back full, and reads them (at most
//! [`READS_IN_FLIGHT`] in flight at once, the next starting as one ends).
//! The answer is then put together in order with the same rule as a read
//! at a time, so it never holds more than the caps allow; a partition that
//! would have had a larger budget with the real total of the reads before
//! it starts the next wave instead.

use std::collections::HashMap;
use std::future::Future;
use std::time::Duration;

use bytes::Bytes;
use floe_broker::{CallError, PartitionOwner, RoutingError, RoutingErrorKind};
use futures::StreamExt;
use kafka_protocol::ResponseError;
use kafka_protocol::messages::fetch_response::{
    AbortedTransaction, FetchableTopicResponse, PartitionData,
};
use kafka_protocol::messages::*;

use crate::codec::FetchAnswer;
use crate::errors::call_code;
use crate::handlers::{Context, FetchLimits, leader_epoch};

/// Most partition reads of one fetch in flight at once.
pub const READS_IN_FLIGHT: usize = 16;

/// The partitions a fetch names, grouped by topic.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct FetchTarget {
    pub(crate) topic: TopicName,
    pub(crate) topic_id: uuid::Uuid,
    pub(crate) partitions: Vec<fetch_request::FetchPartition>,
}

/// A fetch's partitions, each once: Kafka keeps one entry per
/// topic-partition, so a partition named again takes the place of its
/// first mention with the last mention's offset and sizes. Topics keep the
/// order they first appear in.
pub(crate) fn fetch_targets(req: &FetchRequest) -> Vec<FetchTarget> {
    let mut out: Vec<FetchTarget> = Vec::new();
    let mut topic_at: HashMap<&str, usize> = HashMap::new();
    let mut partition_at: HashMap<(&str, i32), (usize, usize)> = HashMap::new();
    for t in &req.topics {
        let name = t.topic.0.as_str();
        let ti = *topic_at.entry(name).or_insert_with(|| {
            out.push(FetchTarget {
                topic: t.topic.clone(),
                topic_id: t.topic_id,
                partitions: Vec::new(),
            });
            out.len() - 1
        });
        for p in &t.partitions {
            match partition_at.get(&(name, p.partition)) {
                Some(&(ti, pi)) => out[ti].partitions[pi] = p.clone(),
                None => {
                    partition_at.insert((name, p.partition), (ti, out[ti].partitions.len()));
                    out[ti].partitions.push(p.clone());
                }
            }
        }
    }
    out
}

/// One partition's read as [`read_in_waves`] sees it: what came back, and
/// how many record bytes it would add to the answer.
#[derive(Debug)]
pub(crate) struct Read<T> {
    pub(crate) value: T,
    pub(crate) bytes: usize,
}

/// What [`read_in_waves`] did with one partition.
#[derive(Debug, PartialEq)]
pub(crate) enum Outcome<T> {
    /// Not read: an unknown partition, or nothing left of the answer's budget.
    NotRead,
    /// Read; `kept` says whether its records go in the answer (a read past
    /// the first with data that does not fit is left for the next fetch,
    /// as Kafka does).
    Read { value: T, kept: bool },
}

/// The budgets of the wave starting at `start`: one per partition from
/// `start` on, as long as each fits in what is left of `total_max` after
/// `total` and the budgets before it in the wave. `asks[i]` is the
/// partition's `partition_max_bytes`, `None` for a partition that is not
/// read (unknown). A partition whose budget would be smaller than with the
/// real total ends the wave, so it is planned again after the reads before
/// it; the first of a wave always gets the budget a read at a time would
/// give it. A budget of 0 means not read.
pub(crate) fn plan_wave(
    limits: &FetchLimits,
    asks: &[Option<i32>],
    start: usize,
    total: usize,
    total_max: usize,
) -> Vec<usize> {
    let mut budgets = Vec::new();
    let mut reserved = 0usize;
    for ask in &asks[start..] {
        let Some(ask) = *ask else {
            budgets.push(0);
            continue;
        };
        let left = total_max.saturating_sub(total.saturating_add(reserved));
        let budget = limits.partition_budget(ask, left, total == 0 && reserved == 0);
        let capped_by_wave = reserved > 0
            && budget < limits.partition_budget(ask, total_max.saturating_sub(total), total == 0);
        if capped_by_wave {
            break;
        }
        reserved += budget;
        budgets.push(budget);
    }
    budgets
}

/// Reads every partition of `asks` with `read(index, budget)`, wave after
/// wave ([`plan_wave`]), and decides in order which reads the answer keeps:
/// the first with data always, a later one if its bytes fit its budget.
/// Returns each partition's outcome and the bytes of the reads kept.
pub(crate) async fn read_in_waves<T, F, Fut>(
    limits: &FetchLimits,
    asks: &[Option<i32>],
    total_max: usize,
    read: F,
) -> (Vec<Outcome<T>>, usize)
where
    F: Fn(usize, usize) -> Fut,
    Fut: Future<Output = Read<T>>,
{
    let mut out = Vec::with_capacity(asks.len());
    let mut total = 0usize;
    while out.len() < asks.len() {
        let start = out.len();
        let budgets = plan_wave(limits, asks, start, total, total_max);
        let jobs: Vec<(usize, usize)> = (start..).zip(budgets.iter().copied()).collect();
        let reads: Vec<Option<Read<T>>> = futures::stream::iter(jobs)
            .map(|(i, budget)| {
                // Made here, not in the async block, so that the stream
                // holds no borrow of its own item.
                let fut = (budget > 0).then(|| read(i, budget));
                async move {
                    match fut {
                        Some(f) => Some(f.await),
                        None => None,
                    }
                }
            })
            .buffered(READS_IN_FLIGHT)
            .collect()
            .await;
        for (r, budget) in reads.into_iter().zip(budgets) {
            out.push(match r {
                None => Outcome::NotRead,
                Some(Read { value, bytes }) => {
                    let kept = total == 0 || bytes <= budget;
                    if kept {
                        total += bytes;
                    }
                    Outcome::Read { value, kept }
                }
            });
        }
    }
    (out, total)
}

/// One partition as the fetch asks its owner.
struct Asked<'a> {
    partition: &'a fetch_request::FetchPartition,
    key: Option<floe_storage::PartitionKey>,
}

/// One partition's read: the owner asked, its answer, and where to wait
/// for data if it had none.
type OwnerRead = (
    Option<std::sync::Arc<dyn PartitionOwner>>,
    Result<floe_broker::FetchData, CallError>,
);

impl Context {
    /// Fetch: whole batches per partition; waits up to `max_wait_ms` (capped)
    /// until `min_bytes` are available. Each partition is answered once
    /// however often the request names it, and the answer stays within the
    /// request's and this proxy's byte caps ([`FetchLimits`]). Partitions
    /// are read several at a time (`read_in_waves`). Each partition's
    /// records are left in the pieces its owner returned, for
    /// [`crate::codec::encode_fetch_response`] to send without copying them.
    pub async fn fetch_answer(&self, version: i16, req: &FetchRequest) -> FetchAnswer {
        let snap = self.view.current();
        let wait = Duration::from_millis(req.max_wait_ms.max(0) as u64).min(self.max_fetch_wait);
        let deadline = tokio::time::Instant::now() + wait;
        let min_bytes = req.min_bytes.max(0) as usize;
        let limits = self.fetch_limits;
        let total_max = limits.request_budget(req.max_bytes);
        let targets = fetch_targets(req);
        // Isolation level 1 (read_committed): only below the last stable
        // offset, with the aborted transactions of what is returned.
        let read_committed = req.isolation_level == 1;
        let asked: Vec<Asked<'_>> = targets
            .iter()
            .flat_map(|t| {
                let snap = &snap;
                t.partitions.iter().map(move |p| Asked {
                    partition: p,
                    key: Self::key_of(snap, &t.topic.0, p.partition),
                })
            })
            .collect();
        let asks: Vec<Option<i32>> = asked
            .iter()
            .map(|a| a.key.as_ref().map(|_| a.partition.partition_max_bytes))
            .collect();
        loop {
            let read = |i: usize, budget: usize| {
                let a = &asked[i];
                let snap = &snap;
                async move {
                    let Some(key) = &a.key else {
                        // Not asked for by read_in_waves (no budget).
                        let e = RoutingError::new(
                            RoutingErrorKind::UnknownPartition,
                            "no such partition",
                        );
                        return Read {
                            value: (None, Err(CallError::Routing(e))),
                            bytes: 0,
                        };
                    };
                    let epoch = if version >= 9 {
                        leader_epoch(a.partition.current_leader_epoch)
                    } else {
                        None
                    };
                    let (owner, r): OwnerRead = match self.route(snap, key) {
                        Ok(h) => {
                            let r = h
                                .fetch_isolated(
                                    key,
                                    a.partition.fetch_offset,
                                    budget,
                                    epoch,
                                    read_committed,
                                )
                                .await;
                            (Some(h), r)
                        }
                        Err(e) => (None, Err(CallError::Routing(e))),
                    };
                    let bytes = r.as_ref().map_or(0, |d| d.bytes());
                    Read {
                        value: (owner, r),
                        bytes,
                    }
                }
            };
            let (outcomes, total) = read_in_waves(&limits, &asks, total_max, read).await;
            let mut resp = FetchResponse::default();
            let mut waits = Vec::new();
            let mut records = Vec::new();
            let mut flat = asked.iter().zip(outcomes);
            for t in &targets {
                let mut tr = FetchableTopicResponse::default();
                tr.topic = t.topic.clone();
                tr.topic_id = t.topic_id;
                for (a, outcome) in flat.by_ref().take(t.partitions.len()) {
                    let p = a.partition;
                    let mut pd = PartitionData::default();
                    pd.partition_index = p.partition;
                    pd.high_watermark = -1;
                    pd.last_stable_offset = -1;
                    pd.log_start_offset = -1;
                    pd.preferred_read_replica = BrokerId(-1);
                    let mut pieces = Vec::new();
                    match (&a.key, outcome) {
                        (None, _) => pd.error_code = ResponseError::UnknownTopicOrPartition.code(),
                        (Some(_), Outcome::NotRead) => {}
                        (
                            Some(key),
                            Outcome::Read {
                                value: (owner, r),
                                kept,
                            },
                        ) => match r {
                            Ok(d) => {
                                if d.records.is_empty()
                                    && let Some(h) = owner
                                {
                                    // A read_committed reader at the LSO
                                    // waits for the next commit (a marker's
                                    // moves the LSO).
                                    let past = if read_committed {
                                        p.fetch_offset.max(d.high_watermark)
                                    } else {
                                        p.fetch_offset
                                    };
                                    waits.push((h, *key, past));
                                }
                                pd.high_watermark = d.high_watermark;
                                pd.last_stable_offset = d.last_stable_offset;
                                if read_committed {
                                    pd.aborted_transactions = Some(
                                        d.aborted
                                            .iter()
                                            .map(|a| {
                                                let mut t = AbortedTransaction::default();
                                                t.producer_id = ProducerId(a.producer_id.0);
                                                t.first_offset = a.first_offset;
                                                t
                                            })
                                            .collect(),
                                    );
                                }
                                if version >= 5 {
                                    pd.log_start_offset = d.log_start_offset;
                                }
                                pd.records = Some(Bytes::new());
                                if kept {
                                    pieces = d.records;
                                }
                            }
                            Err(e) => {
                                self.report_if_refused(key, &e);
                                pd.error_code = call_code(&e);
                            }
                        },
                    }
                    tr.partitions.push(pd);
                    records.push(pieces);
                }
                resp.responses.push(tr);
            }
            let now = tokio::time::Instant::now();
            if total >= min_bytes.max(1) || now >= deadline || waits.is_empty() {
                return FetchAnswer { resp, records };
            }
            // Wait for any of the empty partitions to get data, then fetch again.
            let futs = waits
                .iter()
                .map(|(h, k, off)| Box::pin(h.wait_for_data(k, *off, deadline)));
            futures::future::select_all(futs).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    fn limits(max_bytes: usize, max_partition_bytes: usize) -> FetchLimits {
        FetchLimits {
            max_bytes,
            max_partition_bytes,
        }
    }

    fn fetch_of(parts: &[(&str, i32, i64, i32)]) -> FetchRequest {
        let mut req = FetchRequest::default();
        for (topic, partition, offset, max) in parts {
            let mut t = fetch_request::FetchTopic::default();
            t.topic = TopicName(kafka_protocol::protocol::StrBytes::from_string(
                topic.to_string(),
            ));
            let mut p = fetch_request::FetchPartition::default();
            p.partition = *partition;
            p.fetch_offset = *offset;
            p.partition_max_bytes = *max;
            t.partitions.push(p);
            req.topics.push(t);
        }
        req
    }

    #[test]
    fn a_partition_named_many_times_is_fetched_once_with_its_last_mention() {
        let mut parts = vec![("a", 0, 0, 100); 500];
        parts.push(("b", 1, 3, 10));
        parts.push(("a", 1, 7, 20));
        parts.push(("a", 0, 42, 8 << 20));
        let targets = fetch_targets(&fetch_of(&parts));
        type Parts = Vec<(i32, i64, i32)>;
        let got: Vec<(String, Parts)> = targets
            .iter()
            .map(|t| {
                (
                    t.topic.0.to_string(),
                    t.partitions
                        .iter()
                        .map(|p| (p.partition, p.fetch_offset, p.partition_max_bytes))
                        .collect(),
                )
            })
            .collect();
        assert_eq!(
            got,
            vec![
                ("a".to_string(), vec![(0, 42, 8 << 20), (1, 7, 20)]),
                ("b".to_string(), vec![(1, 3, 10)]),
            ]
        );
    }

    #[test]
    fn a_wave_takes_every_partition_whose_budget_fits_what_is_left() {
        let l = limits(1000, 300);
        // Four partitions of 200 fit in 1,000 together: one wave, each
        // with the budget a read at a time would give it.
        assert_eq!(plan_wave(&l, &[Some(200); 4], 0, 0, 1000), vec![200; 4]);
        // Unknown partitions are not read and take nothing.
        assert_eq!(
            plan_wave(&l, &[Some(200), None, Some(200)], 0, 0, 1000),
            vec![200, 0, 200]
        );
        // The fifth of 300 would get only 100 if the four before came
        // back full: it waits for their real total, in the next wave.
        assert_eq!(plan_wave(&l, &[Some(300); 5], 0, 0, 1000), vec![300; 3]);
        // Planned after them, with what they really returned.
        assert_eq!(plan_wave(&l, &[Some(300); 5], 3, 250, 1000), vec![300; 2]);
        // Nothing left: the rest are not read, and that needs no wave of its own.
        assert_eq!(plan_wave(&l, &[Some(300); 3], 1, 1000, 1000), vec![0, 0]);
        // The first of the answer is always asked for one batch.
        assert_eq!(plan_wave(&l, &[Some(0), Some(0)], 0, 0, 1000), vec![1]);
        // A wave is bounded by bytes, not by count (READS_IN_FLIGHT bounds
        // the reads in flight within it).
        let many = vec![Some(1); READS_IN_FLIGHT * 4];
        assert_eq!(plan_wave(&l, &many, 0, 0, 1000).len(), READS_IN_FLIGHT * 4);
    }

    /// Reads of `sizes[i]` bytes each (at most the budget, as an owner
    /// answers, except the one batch a first read always gets), counting
    /// how many were in flight at once.
    async fn read_sizes(
        l: FetchLimits,
        asks: &[Option<i32>],
        total_max: usize,
        sizes: &[usize],
        in_flight: &AtomicUsize,
        most: &AtomicUsize,
    ) -> Vec<Outcome<(usize, usize)>> {
        read_in_waves(&l, asks, total_max, |i, budget| async move {
            let now = in_flight.fetch_add(1, Ordering::SeqCst) + 1;
            most.fetch_max(now, Ordering::SeqCst);
            tokio::task::yield_now().await;
            tokio::time::sleep(Duration::from_millis(5)).await;
            in_flight.fetch_sub(1, Ordering::SeqCst);
            let bytes = sizes[i];
            Read {
                value: (i, budget),
                bytes,
            }
        })
        .await
        .0
    }

    #[tokio::test]
    async fn partitions_are_read_together_and_answered_in_order_within_the_caps() {
        let (in_flight, most) = (AtomicUsize::new(0), AtomicUsize::new(0));
        let l = limits(1 << 20, 1 << 20);
        let asks = vec![Some(1000); 40];
        let got = read_sizes(l, &asks, 1 << 20, &[1000; 40], &in_flight, &most).await;
        assert_eq!(
            most.load(Ordering::SeqCst),
            READS_IN_FLIGHT,
            "read together, as many at once as allowed"
        );
        let want: Vec<_> = (0..40)
            .map(|i| Outcome::Read {
                value: (i, 1000),
                kept: true,
            })
            .collect();
        assert_eq!(
            got, want,
            "in the request's order, each with its whole budget"
        );
    }

    #[tokio::test]
    async fn an_answer_keeps_the_caps_when_reads_come_back_smaller_or_larger() {
        let (in_flight, most) = (AtomicUsize::new(0), AtomicUsize::new(0));
        let l = limits(1000, 400);
        // The first has no data, so the second is the first with data and
        // is kept though larger than its budget (one whole batch); the
        // third then gets what is left after it.
        let asks = vec![Some(400); 5];
        let sizes = [0, 600, 300, 100, 100];
        let got = read_sizes(l, &asks, 1000, &sizes, &in_flight, &most).await;
        let kept: Vec<_> = got
            .iter()
            .map(|o| match o {
                Outcome::NotRead => None,
                Outcome::Read { value, kept } => Some((value.1, *kept)),
            })
            .collect();
        // Wave 1: 400 and 400 (the third would get only 200 if both came
        // back full); wave 2, after a real total of 600: the third with 400,
        // whose 300 fit; wave 3: the 100 left for the fourth; nothing is
        // left for the fifth. The same as reading one at a time.
        assert_eq!(
            kept,
            vec![
                Some((400, true)),
                Some((400, true)),
                Some((400, true)),
                Some((100, true)),
                None
            ]
        );
        let total: usize = sizes
            .iter()
            .zip(&kept)
            .filter(|(_, k)| matches!(k, Some((_, true))))
            .map(|(s, _)| s)
            .sum();
        assert_eq!(total, 1000);
    }
}
