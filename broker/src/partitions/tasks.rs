//! The broker's background loops: lease heartbeats, following ownership
//! from the cluster view, and the flusher.

use futures::StreamExt;
use std::collections::HashSet;
use std::time::Duration;

use floe_metadata::error::ErrorKind as MetaKind;
use floe_metadata::ids::{Epoch, PartitionKey};
use floe_metadata::model::NodeKind;

use crate::config::{HEARTBEATS_PER_LEASE, LogConfig};
use crate::partitions::Partitions;
use crate::partitions::flush::pipeline::Pipeline;
use crate::partitions::lease::Renewal;
use crate::partitions::log::Status;

/// Renews the lease; registers again if the metadata forgot this broker.
/// The lease counts from when a heartbeat was sent (see [`crate::partitions::lease`]);
/// after it ran out, serving resumes only once a heartbeat got through and
/// [`revalidate`] checked what this broker still owns.
///
/// Heartbeats go out on a fixed cadence from their *send* times, without
/// waiting for the previous answer (at most [`HEARTBEATS_PER_LEASE`] in
/// flight): a slow metadata service delays the answers but not the next
/// send, so the lease's slack after a stall is the whole lease minus one
/// interval, not that minus the last heartbeat's round trip.
pub(crate) async fn heartbeat(b: Partitions) {
    let every = b.inner.cfg.heartbeat_interval();
    let mut tick = tokio::time::interval(every);
    // After a stall (the process paused), one heartbeat at once, then the
    // cadence again from it.
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut in_flight = futures::stream::FuturesUnordered::new();
    let mut lapse_logged = false;
    loop {
        let send = tokio::select! {
            _ = tick.tick() => true,
            _ = b.inner.renew_now.notified() => true,
            Some((sent, answer)) = in_flight.next(), if !in_flight.is_empty() => {
                if b.is_stopping() {
                    return;
                }
                on_heartbeat_answer(&b, sent, answer, &mut lapse_logged).await;
                false
            }
            _ = b.inner.stopped.notified() => return,
        };
        if b.is_stopping() {
            return;
        }
        if send && in_flight.len() < HEARTBEATS_PER_LEASE as usize {
            let b = b.clone();
            in_flight.push(async move {
                let sent = tokio::time::Instant::now();
                (sent, b.inner.meta.heartbeat(b.broker_id()).await)
            });
        }
    }
}

/// Handles one heartbeat's answer: the lease renewed from its send time,
/// a registration again if the metadata service forgot this broker, the
/// ownership check after a lapse.
async fn on_heartbeat_answer(
    b: &Partitions,
    sent: tokio::time::Instant,
    answer: Result<(), floe_metadata::MetaError>,
    lapse_logged: &mut bool,
) {
    let renewed = match answer {
        Ok(()) => true,
        Err(e) => {
            tracing::warn!(error = %e, "heartbeat failed");
            if matches!(e.kind(), MetaKind::UnknownBroker | MetaKind::InvalidRequest) {
                let c = &b.inner.cfg;
                let sent_again = tokio::time::Instant::now();
                match b
                    .inner
                    .meta
                    .register(b.broker_id(), NodeKind::Broker, &c.advertise, c.lease)
                    .await
                {
                    Ok(()) => {
                        // A new registration: whatever was owned before
                        // was taken away when the old lease expired.
                        b.inner
                            .lease
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .renewed(sent_again.max(sent));
                        force_revalidation(b);
                        true
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "registering again failed");
                        false
                    }
                }
            } else {
                false
            }
        }
    };
    let now = tokio::time::Instant::now();
    if !renewed {
        let expired = b
            .inner
            .lease
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .expired_at(now);
        if expired && !*lapse_logged {
            tracing::warn!(
                broker = b.id(),
                lease_ms = b.inner.cfg.lease.as_millis() as u64,
                "lease ran out: not serving partitions or groups until a heartbeat gets through"
            );
            *lapse_logged = true;
        }
        return;
    }
    let renewal = b
        .inner
        .lease
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .renewed(sent);
    if renewal == Renewal::AfterLapse {
        match revalidate(b).await {
            Ok((kept, dropped)) => {
                b.inner
                    .lease
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .resume();
                crate::metrics::lease_lapse();
                tracing::info!(
                    broker = b.id(),
                    kept,
                    dropped,
                    answered_ms = now.duration_since(sent).as_millis() as u64,
                    "lease renewed after it ran out; serving again what is still owned"
                );
                *lapse_logged = false;
            }
            Err(e) => {
                tracing::warn!(error = %e, "checking ownership after the lease ran out failed; will retry");
                b.inner.renew_now.notify_one();
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// Marks the lease as needing an ownership check before serving again.
fn force_revalidation(b: &Partitions) {
    let mut lease = b.inner.lease.lock().unwrap_or_else(|p| p.into_inner());
    lease.force_revalidation();
}

/// After the lease ran out: reads the cluster from the metadata service
/// itself (not the watch, which may be as old as the lapse) and keeps only
/// the partitions and coordinator shards still this broker's at the same
/// epoch; the others are dropped (their queued writes fail with NOT_OWNER).
/// Returns (kept, dropped).
async fn revalidate(b: &Partitions) -> Result<(usize, usize), floe_metadata::MetaError> {
    let view = b
        .inner
        .meta
        .watch(floe_metadata::ids::Revision(0), Duration::ZERO)
        .await?;
    let me = Some(b.broker_id());
    let mut partitions = std::collections::HashMap::new();
    for t in &view.topics {
        for p in &t.partitions {
            if p.owner == me {
                partitions.insert(PartitionKey::new(t.id, p.partition), p.epoch.0);
            }
        }
    }
    let (mut kept, mut dropped) = (0, 0);
    for log in b.logs() {
        if partitions.get(&log.key) == Some(&log.epoch()) {
            kept += 1;
        } else {
            b.drop_partition(&log.key);
            dropped += 1;
        }
    }
    if let Some(l) = b.inner.listener.get() {
        let (k, d) = l.lease_revalidated(&view);
        kept += k;
        dropped += d;
    }
    Ok((kept, dropped))
}

/// Follows the cluster view: takes over partitions assigned to this broker,
/// hands over those the controller moves away, drops those it lost.
pub(crate) async fn ownership(b: Partitions) {
    let mut rx = b.inner.view.subscribe();
    loop {
        if b.is_stopping() {
            return;
        }
        let snap = rx.borrow_and_update().clone();
        let mut wanted = HashSet::new();
        let mut take = Vec::new();
        for t in snap.topics.values() {
            let config = LogConfig::from_entries(&t.configs);
            for p in &t.partitions {
                let key = PartitionKey::new(t.id, p.partition);
                if p.owner != Some(b.broker_id()) {
                    continue;
                }
                wanted.insert(key);
                match b.log(&key) {
                    Some(log) if log.epoch() == p.epoch.0 && log.status() != Status::Gone => {
                        {
                            let mut st = log.lock();
                            if st.config != config {
                                st.config = config.clone();
                            }
                        }
                        if p.handover_to.is_some() && log.status() == Status::Active {
                            log.lock().status = Status::Releasing;
                            tokio::spawn(release(b.clone(), key, p.epoch));
                        }
                    }
                    _ => {
                        if p.handover_to.is_some() {
                            // Being moved away: give it up at once.
                            tokio::spawn(release(b.clone(), key, p.epoch));
                            continue;
                        }
                        take.push(crate::partitions::control::TakeOver {
                            key,
                            topic: t.name.clone(),
                            epoch: p.epoch.0,
                            config: config.clone(),
                        });
                    }
                }
            }
        }
        // A new topic's partitions, or a dead broker's, are read from
        // metadata in a few batched reads, not one round trip each.
        let failed = b.take_over(take).await;
        if let Some((key, e)) = failed.first() {
            tracing::warn!(
                failed = failed.len(),
                first = %key,
                error = %e,
                "take-overs failed; will retry"
            );
        }
        for log in b.logs() {
            if wanted.contains(&log.key) {
                crate::metrics::lso_lag(&log.topic, log.key.partition, log.lso_lag());
            } else {
                b.drop_partition(&log.key);
                crate::metrics::lso_lag(&log.topic, log.key.partition, 0);
            }
        }
        crate::partitions::delayed::Schedulers::start_owned(&b);
        crate::metrics::owned_partitions(b.owned().len());
        tokio::select! {
            r = rx.changed() => if r.is_err() { return },
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
            _ = b.inner.stopped.notified() => return,
        }
    }
}

/// Drains a partition's queue, then tells metadata it is released.
async fn release(b: Partitions, key: PartitionKey, epoch: Epoch) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(8);
    if let Some(log) = b.log(&key) {
        loop {
            let busy = {
                let s = log.lock();
                !s.unflushed.is_empty() || s.in_flight > 0
            };
            if !busy || tokio::time::Instant::now() > deadline {
                break;
            }
            if !log.lock().unflushed.is_empty() {
                b.flush_at_once();
            } else {
                b.inner.flush_now.notify_one();
            }
            let _ =
                tokio::time::timeout(Duration::from_millis(50), b.inner.flushed.notified()).await;
        }
    }
    let r = b
        .inner
        .meta
        .release(b.broker_id(), &[(key, epoch)], &[])
        .await;
    match r {
        Ok(()) => tracing::info!(partition = %key, epoch = %epoch, "released for hand-over"),
        Err(e) => tracing::warn!(partition = %key, error = %e, "release failed"),
    }
    b.drop_partition(&key);
}

/// Flushes every `flush.interval` while data waits, at once when enough
/// bytes wait or a flush is asked for. When one commits, what queued
/// meanwhile goes at once, unless the policy is paced: then the next flush
/// starts one interval after the last one started (see
/// [`crate::config::FlushPolicy`]). While flushes are in flight, up to
/// `flush.max_in_flight`, another starts only when a whole `flush.bytes`
/// object waits (see [`crate::partitions::flush::pipeline`]).
pub(crate) async fn flusher(b: Partitions) {
    let every = b.inner.cfg.flush.interval;
    let paced = b.inner.cfg.flush.paced;
    let object_bytes = b.inner.cfg.flush.bytes;
    let flush = b.flush_settings();
    let mut pipe = Pipeline::new(&flush, b.inner.cfg.flush.max_in_flight);
    // When a flush may start without being asked for.
    let mut due = tokio::time::Instant::now();
    let mut asked = false;
    loop {
        let wanted = asked || tokio::time::Instant::now() >= due;
        // A hand-over waits on this flush: no waiting for those in flight.
        let at_once = b
            .inner
            .flush_at_once
            .swap(false, std::sync::atomic::Ordering::AcqRel);
        if pipe.may_start(wanted || at_once, b.inner.backlog.bytes(), object_bytes)
            || (at_once && pipe.has_room())
        {
            asked = false;
            due = tokio::time::Instant::now() + every;
            crate::metrics::unflushed_bytes(b.inner.backlog.bytes());
            if pipe.start(b.flush_order()) {
                crate::metrics::flushes_in_flight(pipe.len());
            }
        }
        if b.is_stopping() && pipe.is_empty() {
            // Keep serving flush requests made during shutdown.
            let idle = b.logs().iter().all(|l| l.lock().unflushed.is_empty());
            if idle {
                b.inner.flushed.notify_waiters();
                return;
            }
        }
        tokio::select! {
            done = pipe.next(), if !pipe.is_empty() => {
                if let Some(done) = done {
                    if done.flushed.committed > 0 {
                        crate::metrics::flushed(done.flushed.object.size, done.elapsed);
                    }
                    crate::metrics::flushes_in_flight(pipe.len());
                    b.inner.flushed.notify_waiters();
                    // What queued meanwhile goes at once, as with one
                    // flush, unless paced (then at `due`, or when
                    // `flush.bytes` wait).
                    if !paced {
                        asked = true;
                    }
                }
            }
            _ = tokio::time::sleep_until(due), if pipe.is_empty() => {}
            _ = b.inner.flush_now.notified() => asked = true,
        }
    }
}
