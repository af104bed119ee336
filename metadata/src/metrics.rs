//! The metadata node's metrics, recorded on the process's `metrics` recorder
//! (served on `/metrics` by `floe standalone`; `floe meta` has no admin port).

use metrics::{counter, describe_counter};
use openraft::raft::ClientWriteResponse;

use crate::command::Response;
use crate::raft::TypeConfig;

const COMMANDS: &str = "floe_meta_commands_total";

/// The outcome of a proposed command: applied, refused by the cluster's
/// rules (a commit at an old epoch, …), or not committed (not the leader,
/// no quorum).
pub(crate) fn command<E>(written: &Result<ClientWriteResponse<TypeConfig>, E>) {
    let result = match written {
        Ok(r) if matches!(r.data, Response::Error(_)) => "refused",
        Ok(_) => "applied",
        Err(_) => "failed",
    };
    static DESCRIBED: std::sync::Once = std::sync::Once::new();
    DESCRIBED.call_once(|| {
        describe_counter!(
            COMMANDS,
            "commands proposed to Raft on this node, by result"
        );
    });
    counter!(COMMANDS, "result" => result).increment(1);
}
