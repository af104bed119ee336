//! Telling a process that is gone from one that is slow: a TCP connection
//! to an address where nothing listens is *refused* at once (the peer's
//! kernel answers RST), while a paused, overloaded or cut-off process lets
//! it time out or accepts it. Brokers are marked dead at once on a refusal
//! (`/v1/nodes/down`), and only on that.

use std::time::Duration;

/// Whether an error, or any error it was caused by, is a refused connection
/// (`ECONNREFUSED`): nothing listens at the address.
pub fn is_refused(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur = Some(e);
    while let Some(e) = cur {
        if let Some(io) = e.downcast_ref::<std::io::Error>()
            && io.kind() == std::io::ErrorKind::ConnectionRefused
        {
            return true;
        }
        cur = e.source();
    }
    false
}

/// Whether a connection to `addr` is refused within `timeout`. A connection
/// accepted, timed out, or an address that does not resolve: false.
pub async fn refuses_connections(addr: &str, timeout: Duration) -> bool {
    match tokio::time::timeout(timeout, tokio::net::TcpStream::connect(addr)).await {
        Ok(Err(e)) => e.kind() == std::io::ErrorKind::ConnectionRefused,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_closed_port_refuses_and_a_listening_one_does_not() {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap().to_string();
        assert!(!refuses_connections(&addr, Duration::from_secs(2)).await);
        drop(l);
        assert!(refuses_connections(&addr, Duration::from_secs(2)).await);
        assert!(!refuses_connections("no-such-host.invalid:1", Duration::from_secs(2)).await);
    }

    #[test]
    fn a_refusal_is_found_through_the_causes() {
        #[derive(Debug, thiserror::Error)]
        #[error("wrapped")]
        struct Wrapped(#[source] std::io::Error);
        let refused = Wrapped(std::io::Error::from(std::io::ErrorKind::ConnectionRefused));
        assert!(is_refused(&refused));
        let timed_out = Wrapped(std::io::Error::from(std::io::ErrorKind::TimedOut));
        assert!(!is_refused(&timed_out));
    }
}
