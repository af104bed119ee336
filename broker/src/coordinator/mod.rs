//! The coordinator runtime: what the broker's coordinators (consumer
//! groups, share groups, transactions) have in common, written once.
//!
//! - [`shards`]: the coordinator shards this broker owns at their epochs,
//!   the fence a coordinator's writes to the metadata carry, and which
//!   shard an id falls in.
//! - [`follow`]: following the cluster view: a shard given to this broker
//!   is loaded by every coordinator before it is served, one handed over
//!   or lost is dropped by each, and after a lapsed lease only the shards
//!   still this broker's at the same epoch are kept.
//! - [`timers`]: a coordinator's periodic work, stopped with the broker.
//!
//! A coordinator plugs in by implementing [`ShardCoordinator`]; the broker
//! (its composition root, `broker.rs`) hands the list to
//! [`follow::Runtime`]. A fourth coordinator adds its implementation there
//! and its RPC routes to the route table (`rpc/routes.rs`).

pub mod follow;
pub mod shards;
pub mod timers;

use floe_metadata::command::ShardFence;

pub use follow::Runtime;
pub use shards::{ShardTable, shard_of};

/// One coordinator on the runtime: what it does when a shard becomes this
/// broker's, and when it stops being so.
#[async_trait::async_trait]
pub trait ShardCoordinator: Send + Sync {
    /// Its name in logs.
    fn name(&self) -> &'static str;

    /// Before `fence`'s shard is loaded: the epoch its writes will carry.
    fn taking(&self, _fence: &ShardFence) {}

    /// Reads the shard's stored state and makes it served state; returns
    /// how many items (groups, transactions) it holds. An error leaves the
    /// shard unserved by every coordinator; it is tried again at the next
    /// pass of the view.
    async fn load(&self, fence: &ShardFence) -> Result<usize, String>;

    /// Once the shard is served: work that may go on in the background
    /// (transactions a previous coordinator decided, completed).
    fn served(&self, _fence: &ShardFence) {}

    /// The shard is no longer this broker's: forgets its state. Returns
    /// how many items it held.
    fn dropped(&self, shard: u32) -> usize;
}
