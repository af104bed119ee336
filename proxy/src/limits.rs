//! What clients may make the Kafka listener hold: connections (in all and
//! per client address), requests and request bytes in flight on one
//! connection, request bytes being handled by the whole proxy, time idle,
//! and the memory one decoded request may take. `server.rs` applies them;
//! docs/operations.md ("Connections and requests") lists them for users.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::codec;

/// The listener's limits. `Default` gives the documented defaults.
#[derive(Debug, Clone)]
pub struct ListenerLimits {
    /// Open connections in all (Kafka's `max.connections`); a connection
    /// over it is closed as soon as it is accepted.
    pub max_connections: usize,
    /// Open connections from one client address (Kafka's
    /// `max.connections.per.ip`).
    pub max_connections_per_ip: usize,
    /// Requests read from one connection and not answered yet; reading
    /// pauses at this many.
    pub max_in_flight_requests: usize,
    /// Request bytes read from one connection and not handled yet; reading
    /// pauses while over it (one request is always let through).
    pub max_in_flight_bytes: usize,
    /// Request bytes being decoded and handled by the whole listener
    /// (Kafka's `queued.max.request.bytes`); every connection pauses
    /// reading while over it.
    pub queued_max_request_bytes: usize,
    /// A connection with no request for this long (and none in flight) is
    /// closed (Kafka's `connections.max.idle.ms`).
    pub idle_timeout: Duration,
    /// Cap on the memory one decoded request may take
    /// ([`codec::decode_budget`]).
    pub max_decode_bytes: usize,
}

/// Requests read from one connection and not answered yet, by default. A
/// produce is answered once it is in the object store, which takes a flush
/// (on S3 up to its 250 ms interval plus a PUT), while a client with
/// `linger.ms=1` sends up to a request a millisecond on a connection: the
/// bound must cover the client's request rate times the flush latency, or
/// the requests it cannot read wait in the socket buffers, where they add
/// seconds (1,000 records/s on S3: p50 4.5 s with 64, 151 ms with 1,024;
/// docs/benchmarks.md). Their bytes stay bounded by `max_in_flight_bytes`.
pub const DEFAULT_MAX_IN_FLIGHT_REQUESTS: usize = 1024;

/// Kafka's `connections.max.idle.ms` default: 10 minutes.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(600);

impl Default for ListenerLimits {
    fn default() -> Self {
        Self {
            max_connections: 10_000,
            max_connections_per_ip: 1_000,
            max_in_flight_requests: DEFAULT_MAX_IN_FLIGHT_REQUESTS,
            max_in_flight_bytes: codec::DEFAULT_MAX_FRAME,
            queued_max_request_bytes: 4 * codec::DEFAULT_MAX_FRAME,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            max_decode_bytes: codec::DEFAULT_MAX_DECODE_BYTES,
        }
    }
}

/// Why a connection was refused at accept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refused {
    /// `max_connections` are open.
    MaxConnections,
    /// `max_connections_per_ip` are open from this address.
    MaxConnectionsPerIp,
}

impl Refused {
    /// The metric label and log field.
    pub(crate) fn reason(self) -> &'static str {
        match self {
            Refused::MaxConnections => "max_connections",
            Refused::MaxConnectionsPerIp => "max_connections_per_ip",
        }
    }
}

#[derive(Debug, Default)]
struct Counts {
    total: usize,
    per_ip: HashMap<IpAddr, usize>,
}

/// The open connections, in all and per client address.
#[derive(Debug)]
pub(crate) struct ConnectionCounter {
    max: usize,
    max_per_ip: usize,
    counts: Mutex<Counts>,
}

impl ConnectionCounter {
    pub(crate) fn new(max: usize, max_per_ip: usize) -> Arc<Self> {
        Arc::new(Self {
            max,
            max_per_ip,
            counts: Mutex::new(Counts::default()),
        })
    }

    /// Counts a connection from `ip` if both limits allow it; the slot
    /// gives it back when dropped.
    pub(crate) fn admit(self: &Arc<Self>, ip: IpAddr) -> Result<ConnectionSlot, Refused> {
        let mut c = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        if c.total >= self.max {
            return Err(Refused::MaxConnections);
        }
        let from_ip = c.per_ip.entry(ip).or_insert(0);
        if *from_ip >= self.max_per_ip {
            return Err(Refused::MaxConnectionsPerIp);
        }
        *from_ip += 1;
        c.total += 1;
        Ok(ConnectionSlot {
            counter: self.clone(),
            ip,
        })
    }

    #[cfg(test)]
    fn open(&self) -> usize {
        self.counts.lock().map(|c| c.total).unwrap_or(0)
    }
}

/// One admitted connection; dropping it frees its place.
#[derive(Debug)]
pub(crate) struct ConnectionSlot {
    counter: Arc<ConnectionCounter>,
    ip: IpAddr,
}

impl Drop for ConnectionSlot {
    fn drop(&mut self) {
        let mut c = self
            .counter
            .counts
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        c.total = c.total.saturating_sub(1);
        if let Some(n) = c.per_ip.get_mut(&self.ip) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                c.per_ip.remove(&self.ip);
            }
        }
    }
}

/// A log line written at most once per interval; the lines held back in
/// between are counted and reported with the next one, so a flood of
/// refused connections does not flood the log.
#[derive(Debug)]
pub(crate) struct LogEvery {
    every: Duration,
    last: Mutex<Option<Instant>>,
    held_back: AtomicU64,
}

impl LogEvery {
    pub(crate) fn new(every: Duration) -> Self {
        Self {
            every,
            last: Mutex::new(None),
            held_back: AtomicU64::new(0),
        }
    }

    /// `Some(lines held back since the last one)` when a line may be
    /// written now, `None` when it is held back.
    pub(crate) fn check(&self) -> Option<u64> {
        let now = Instant::now();
        let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        match *last {
            Some(t) if now.duration_since(t) < self.every => {
                self.held_back.fetch_add(1, Ordering::Relaxed);
                None
            }
            _ => {
                *last = Some(now);
                Some(self.held_back.swap(0, Ordering::Relaxed))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn connections_are_limited_in_all_and_per_address() {
        let c = ConnectionCounter::new(3, 2);
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        let a1 = c.admit(a).unwrap();
        let _a2 = c.admit(a).unwrap();
        assert_eq!(c.admit(a).unwrap_err(), Refused::MaxConnectionsPerIp);
        let _b1 = c.admit(b).unwrap();
        assert_eq!(c.admit(b).unwrap_err(), Refused::MaxConnections);
        assert_eq!(c.open(), 3);
        drop(a1);
        assert_eq!(c.open(), 2);
        let _a3 = c.admit(a).unwrap();
    }

    #[test]
    fn log_every_holds_back_lines_and_counts_them() {
        let l = LogEvery::new(Duration::from_secs(3600));
        assert_eq!(l.check(), Some(0));
        assert_eq!(l.check(), None);
        assert_eq!(l.check(), None);
        let l2 = LogEvery::new(Duration::ZERO);
        assert_eq!(l2.check(), Some(0));
        assert_eq!(l2.check(), Some(0));
    }
}
