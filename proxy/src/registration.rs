//! A proxy's registration with the metadata service: the same nodes,
//! leases and heartbeats as brokers', of kind proxy. A proxy that stops
//! heartbeating (killed, cut off) expires one lease later and leaves every
//! proxy's Metadata answers ([`crate::nodes`]); one that stops on purpose
//! drains at once (it is no longer listed) before it closes its listener.

use std::sync::Arc;
use std::time::Duration;

use floe_metadata::MetaError;
use floe_metadata::api::MetaApi;
use floe_metadata::error::ErrorKind;
use floe_metadata::ids::BrokerId;

use crate::nodes::SelfNode;

/// A proxy's default lease: a killed proxy leaves the answers within about
/// this long (plus the controller's round).
pub const DEFAULT_LEASE: Duration = Duration::from_secs(3);

/// How a proxy registers.
#[derive(Debug, Clone)]
pub struct RegistrationConfig {
    /// The id to register under; `None`: the metadata gives one (and a new
    /// one after the registration expired).
    pub id: Option<BrokerId>,
    /// The Kafka address clients are given (`HOST:PORT`).
    pub advertise: String,
    pub lease: Duration,
}

/// A registered proxy: renews its lease in the background.
#[derive(Debug)]
pub struct Registration {
    meta: Arc<dyn MetaApi>,
    me: Arc<SelfNode>,
    heartbeats: tokio::task::JoinHandle<()>,
}

impl Registration {
    /// Registers (once; the metadata client follows the leader and retries
    /// on its own) and starts the heartbeats. `me` learns the id.
    pub async fn start(
        meta: Arc<dyn MetaApi>,
        cfg: RegistrationConfig,
        me: Arc<SelfNode>,
    ) -> Result<Registration, MetaError> {
        let id = register(meta.as_ref(), &cfg).await?;
        me.set_id(id_for_kafka(id)?);
        tracing::info!(id = id.0, advertise = %cfg.advertise, "proxy registered");
        let heartbeats = tokio::spawn(heartbeat(meta.clone(), cfg, me.clone(), id));
        Ok(Registration {
            meta,
            me,
            heartbeats,
        })
    }

    /// Stops renewing and leaves the list at once (drains: no proxy names
    /// this one any more; its registration then expires).
    pub async fn leave(self) {
        self.heartbeats.abort();
        let id = self.me.id();
        let Ok(id) = u32::try_from(id) else { return };
        match self.meta.drain(floe_metadata::ids::BrokerId(id)).await {
            Ok(_) => tracing::info!(id, "proxy left the cluster's brokers"),
            Err(e) => {
                tracing::warn!(id, error = %e, "leaving failed; the registration expires instead")
            }
        }
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.heartbeats.abort();
    }
}

async fn register(meta: &dyn MetaApi, cfg: &RegistrationConfig) -> Result<BrokerId, MetaError> {
    meta.register_proxy(cfg.id, &cfg.advertise, cfg.lease).await
}

/// Kafka node ids are i32.
fn id_for_kafka(id: BrokerId) -> Result<i32, MetaError> {
    i32::try_from(id.0)
        .map_err(|_| MetaError::InvalidRequest(format!("proxy id {id} is above Kafka's node ids")))
}

/// Heartbeats a proxy has sent and not had answered, at most: beyond, the
/// next one waits for an answer.
const HEARTBEATS_IN_FLIGHT: usize = 5;

/// Renews the lease every third of it, on a fixed cadence from the sends:
/// a slow answer does not delay the next heartbeat (up to
/// [`HEARTBEATS_IN_FLIGHT`] at once), so the gap between two stays a third
/// of the lease however long the metadata service takes to answer. Registers
/// again when the metadata forgot this proxy (its lease ran out: it was
/// paused or cut off).
async fn heartbeat(
    meta: Arc<dyn MetaApi>,
    cfg: RegistrationConfig,
    me: Arc<SelfNode>,
    id: BrokerId,
) {
    let every = cfg.lease / 3;
    let mut id = id;
    let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut in_flight = tokio::task::JoinSet::new();
    loop {
        let answered = tokio::select! {
            _ = ticks.tick() => {
                if in_flight.len() < HEARTBEATS_IN_FLIGHT {
                    let (meta, sent) = (meta.clone(), id);
                    in_flight.spawn(async move { (sent, meta.heartbeat(sent).await) });
                }
                continue;
            }
            Some(done) = in_flight.join_next() => done,
        };
        let Ok((sent, Err(e))) = answered else {
            continue;
        };
        // An answer about a registration this proxy replaced since.
        if sent != id {
            continue;
        }
        if !matches!(e.kind(), ErrorKind::UnknownBroker) {
            tracing::warn!(id = id.0, error = %e, "proxy heartbeat failed");
            continue;
        }
        match register(meta.as_ref(), &cfg)
            .await
            .and_then(|new| Ok((new, id_for_kafka(new)?)))
        {
            Ok((new, kafka_id)) => {
                tracing::info!(
                    old = id.0,
                    id = new.0,
                    "proxy registered again after its lease ran out"
                );
                id = new;
                me.set_id(kafka_id);
            }
            Err(e) => tracing::warn!(error = %e, "registering the proxy again failed"),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use floe_metadata::model::{NodeKind, NodeState};
    use floe_metadata::watch::ClusterWatch;
    use floe_testkit::Cluster;

    use super::*;

    /// The metadata service, with every heartbeat answered `delay` late.
    #[derive(Debug)]
    struct SlowHeartbeats {
        inner: Arc<dyn MetaApi>,
        delay: Duration,
    }

    #[async_trait::async_trait]
    impl MetaApi for SlowHeartbeats {
        async fn call_route(
            &self,
            call: floe_metadata::api::RouteCall,
        ) -> Result<floe_metadata::api::meta_api::Reply, MetaError> {
            let heartbeat = format!("{call:?}").contains("/v1/nodes/heartbeat");
            let reply = self.inner.call_route(call).await;
            if heartbeat {
                tokio::time::sleep(self.delay).await;
            }
            reply
        }
    }

    /// Heartbeats answered a whole lease late: sent on their cadence, not
    /// each after the last answer, the proxy stays live throughout (waiting
    /// for each answer, its heartbeats would be a lease and a third apart).
    #[tokio::test]
    async fn a_proxy_stays_live_while_its_heartbeats_are_answered_late() {
        let c = Cluster::start().await;
        let view = ClusterWatch::start_polling(c.meta.clone(), Duration::from_millis(100));
        let lease = Duration::from_millis(900);
        let meta: Arc<dyn MetaApi> = Arc::new(SlowHeartbeats {
            inner: c.meta.clone(),
            delay: lease,
        });
        let me = Arc::new(SelfNode::registered(0, "127.0.0.1".into(), 1));
        let cfg = RegistrationConfig {
            id: None,
            advertise: "127.0.0.1:1".into(),
            lease,
        };
        let _r = Registration::start(meta, cfg, me.clone()).await.unwrap();
        let id = me.id();
        let proxy = |s: &floe_metadata::watch::ClusterSnapshot| {
            s.nodes
                .iter()
                .find(|n| n.kind == NodeKind::Proxy && n.id.0 as i32 == id)
                .map(|n| n.state)
        };
        // Over five leases, every snapshot shows it live, under its first id.
        let until = tokio::time::Instant::now() + lease * 5;
        while tokio::time::Instant::now() < until {
            let s = view.current();
            if let Some(state) = proxy(&s) {
                assert_eq!(state, NodeState::Live, "{:?}", s.nodes);
            }
            assert_eq!(me.id(), id, "registered again: its lease ran out");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(proxy(&view.current()), Some(NodeState::Live));
    }

    /// Two proxies register without ids, are given distinct ones and are
    /// both listed; one that leaves is dropped at once, one that stops
    /// heartbeating within a lease and the controller's round.
    #[tokio::test]
    async fn proxies_register_heartbeat_leave_and_expire() {
        let c = Cluster::start().await;
        let meta = c.meta.clone();
        let view = ClusterWatch::start_polling(meta.clone(), Duration::from_millis(100));
        let lease = Duration::from_millis(600);
        let start = |port: u16| {
            let meta = meta.clone();
            async move {
                let me = Arc::new(SelfNode::registered(0, "127.0.0.1".into(), i32::from(port)));
                let cfg = RegistrationConfig {
                    id: None,
                    advertise: format!("127.0.0.1:{port}"),
                    lease,
                };
                let r = Registration::start(meta, cfg, me.clone()).await.unwrap();
                (r, me)
            }
        };
        let (a, a_me) = start(1).await;
        let (b, b_me) = start(2).await;
        assert_ne!(a_me.id(), b_me.id());
        let live = |s: &floe_metadata::watch::ClusterSnapshot| -> Vec<i32> {
            let mut v: Vec<i32> = s
                .nodes
                .iter()
                .filter(|n| n.kind == NodeKind::Proxy && n.state == NodeState::Live)
                .map(|n| n.id.0 as i32)
                .collect();
            v.sort();
            v
        };
        // Both stay live over several leases (the heartbeats renew them).
        tokio::time::sleep(lease * 3).await;
        let s = view
            .wait_for(Duration::from_secs(5), |s| live(s).len() == 2)
            .await;
        assert_eq!(live(&s), [a_me.id(), b_me.id()]);
        // One leaves: gone from the live ones at once.
        a.leave().await;
        let s = view
            .wait_for(Duration::from_secs(5), |s| live(s).len() == 1)
            .await;
        assert_eq!(live(&s), [b_me.id()]);
        // The other stops heartbeating (as if killed): it expires.
        drop(b);
        let s = view
            .wait_for(Duration::from_secs(10), |s| live(s).is_empty())
            .await;
        assert!(live(&s).is_empty(), "{:?}", s.nodes);
    }
}
