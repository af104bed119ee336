//! Where a delayed partition's cursor is kept: the lowest offset that may
//! still hold a pending delayed entry. Written through the metadata
//! service's share-state command (`Command::ShareState`) under the reserved
//! group id [`DELAYED_CURSOR_GROUP`], so the write is fenced by the
//! partition's owner and epoch exactly as a share-partition's state is,
//! with no new command or model field. It is a hint: a cursor older than
//! it could be only makes the next owner read more of the log.

use floe_metadata::command::DELAYED_CURSOR_GROUP;
use floe_storage::PartitionKey;

use crate::error::{BrokerError, Result};
use crate::partitions::Partitions;

/// What the cursor's stored offset carries as its metadata text (not a
/// share-partition's state, which starts `1;`).
const CURSOR_TEXT: &str = "floe-delayed-cursor";

/// Reads and writes a partition's cursor.
#[async_trait::async_trait]
pub(crate) trait CursorStore: Send + Sync {
    /// The last cursor written for `key`, if any.
    async fn load_cursor(&self, key: &PartitionKey) -> Result<Option<i64>>;
    /// Writes `cursor`, refused unless this broker owns `key` at `epoch`.
    async fn save_cursor(&self, key: &PartitionKey, epoch: u64, cursor: i64) -> Result<()>;
}

#[async_trait::async_trait]
impl CursorStore for Partitions {
    async fn load_cursor(&self, key: &PartitionKey) -> Result<Option<i64>> {
        let topic = self.topic_name(key)?;
        let offsets = self
            .meta()
            .fetch_offsets(DELAYED_CURSOR_GROUP)
            .await
            .map_err(BrokerError::from)?;
        Ok(offsets
            .into_iter()
            .find(|o| {
                o.topic == topic
                    && o.partition == key.partition
                    && o.committed.metadata == CURSOR_TEXT
            })
            .map(|o| o.committed.offset))
    }

    async fn save_cursor(&self, key: &PartitionKey, epoch: u64, cursor: i64) -> Result<()> {
        self.meta()
            .share_state(
                self.owner_fence(key, epoch),
                DELAYED_CURSOR_GROUP,
                cursor,
                CURSOR_TEXT.to_owned(),
            )
            .await
            .map_err(BrokerError::from)?;
        Ok(())
    }
}
