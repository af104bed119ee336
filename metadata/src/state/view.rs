//! Which commands change the cluster view ([`crate::model::ClusterView`]:
//! nodes, topics with their partitions' owners, coordinator shards,
//! quotas, SCRAM users, ACLs), the snapshot every broker and proxy keeps
//! with one long poll.
//!
//! Most commands do not: a flush's commit, a heartbeat, an offset commit,
//! a compaction's ReplaceRanges change what the view leaves out (index,
//! high watermarks, leases, offsets). The watch answers a poller only when
//! the view changed after the revision it has (`Watch`,
//! `crate::api::server`), so a cluster of 100,000 partitions does not send
//! every poller the whole view after each of thousands of commits a second.

use crate::command::{Command, Response};

/// Whether applying `cmd` (answered `resp`) may have changed the view.
/// Exhaustive on purpose: a new command must say.
pub fn changes_the_view(cmd: &Command, resp: &Response) -> bool {
    match cmd {
        Command::Batch(cmds) => match resp {
            Response::Batch(resps) => cmds.iter().zip(resps).any(|(c, r)| changes_the_view(c, r)),
            _ => cmds.iter().any(|c| changes_the_view(c, &Response::Ok)),
        },
        // Nodes: a registration, a drain; an expiry or a report of a node
        // down only when a node died (its items moved).
        Command::RegisterNode { .. } | Command::Drain { .. } => true,
        Command::ExpireLeases { .. } | Command::NodeDown { .. } => match resp {
            Response::Expired { nodes } => !nodes.is_empty(),
            _ => true,
        },
        // Dead nodes leave the view once removed (a death time noted is
        // not in it).
        Command::SweepDeadNodes { .. } => match resp {
            Response::NodesRemoved { nodes } => !nodes.is_empty(),
            _ => true,
        },
        // Ownership, topics and their configs, partitions.
        Command::Reassign { .. }
        | Command::BeginHandover { .. }
        | Command::Release { .. }
        | Command::CreateTopic { .. }
        | Command::DeleteTopic { .. }
        | Command::AlterTopicConfig { .. }
        | Command::CreatePartitions { .. } => true,
        // Quotas, users, ACLs, broker configs.
        Command::AlterClientQuotas { .. }
        | Command::AlterScramCredentials(_)
        | Command::CreateAcls(_)
        | Command::DeleteAcls(_)
        | Command::AlterBrokerConfig { .. } => true,
        // The log's index, its watermarks and producers; leases; groups,
        // offsets, share state; transactions; exports: not in the view.
        Command::Heartbeat { .. }
        | Command::Commit { .. }
        | Command::CommitWithTxns { .. }
        | Command::TruncateLog { .. }
        | Command::ReplaceRanges { .. }
        | Command::ForgetObjects { .. }
        | Command::ExpireProducers { .. }
        | Command::AllocateProducerIds { .. }
        | Command::Txn(_)
        | Command::ExpireTransactionalIds { .. }
        | Command::CommitOffsets { .. }
        | Command::StoreGroup { .. }
        | Command::DeleteGroups { .. }
        | Command::DeleteOffsets { .. }
        | Command::DeleteOffsetsFenced { .. }
        | Command::DeleteGroupFenced { .. }
        | Command::AlterGroupConfig { .. }
        | Command::ShareState { .. }
        | Command::ForgetShareState { .. }
        | Command::ExportBegin { .. }
        | Command::ExportCommit { .. }
        | Command::ExportForget { .. }
        | Command::ExportReset { .. } => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::BrokerId;

    #[test]
    fn a_heartbeat_does_not_change_the_view_an_expiry_that_kills_does() {
        let hb = Command::Heartbeat {
            id: BrokerId(1),
            now_ms: 5,
        };
        assert!(!changes_the_view(&hb, &Response::Ok));
        let expire = Command::ExpireLeases { now_ms: 5 };
        assert!(!changes_the_view(
            &expire,
            &Response::Expired { nodes: vec![] }
        ));
        assert!(changes_the_view(
            &expire,
            &Response::Expired {
                nodes: vec![BrokerId(2)]
            }
        ));
        let drain = Command::Drain { id: BrokerId(1) };
        let batch = Command::Batch(vec![hb.clone(), drain]);
        assert!(changes_the_view(
            &batch,
            &Response::Batch(vec![Response::Ok, Response::Ok])
        ));
        assert!(!changes_the_view(
            &Command::Batch(vec![hb]),
            &Response::Batch(vec![Response::Ok])
        ));
    }
}
