//! A coordinator's periodic work (session and transaction timeouts,
//! forgetting idle groups): run every period until the broker stops.

use std::future::Future;
use std::time::Duration;

use crate::partitions::Partitions;

/// Runs `tick` every `period` (the first after one period) until the
/// broker stops. A tick that is late delays the next; none overlap.
pub async fn every<F, Fut>(partitions: Partitions, period: Duration, mut tick: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = ()>,
{
    loop {
        tokio::select! {
            _ = tokio::time::sleep(period) => {}
            _ = partitions.stopped() => return,
        }
        if partitions.is_stopping() {
            return;
        }
        tick().await;
    }
}
