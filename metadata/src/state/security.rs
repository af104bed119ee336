//! Security: users' SCRAM credentials ([`crate::scram`]) and the ACLs
//! ([`crate::acl`]), with the revision at which the ACLs last changed
//! (which proxies watch).

use crate::acl::{AclBinding, AclFilter, AclModel};
use crate::error::MetaError;
use crate::ids::Revision;
use crate::scram::{ScramAlteration, ScramModel};

/// The SCRAM credentials and the ACLs.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SecurityState {
    pub scram: ScramModel,
    pub acls: AclModel,
}

impl SecurityState {
    /// Upserts and deletes one user's credentials, all or none.
    pub(crate) fn alter_scram(&mut self, a: &ScramAlteration) -> Result<(), MetaError> {
        self.scram.alter(a)
    }

    /// Adds bindings (all or none); the ACLs changed at `revision` if any
    /// was new.
    pub(crate) fn create_acls(
        &mut self,
        bindings: &[AclBinding],
        revision: Revision,
    ) -> Result<(), MetaError> {
        let before = self.acls.bindings.len();
        self.acls.create(bindings)?;
        if self.acls.bindings.len() != before {
            self.acls.changed_at(revision.0);
        }
        Ok(())
    }

    /// Deletes the bindings each filter matches and returns them, per
    /// filter; the ACLs changed at `revision` if any went.
    pub(crate) fn delete_acls(
        &mut self,
        filters: &[AclFilter],
        revision: Revision,
    ) -> Vec<Vec<AclBinding>> {
        let gone = self.acls.delete(filters);
        if gone.iter().any(|g| !g.is_empty()) {
            self.acls.changed_at(revision.0);
        }
        gone
    }
}

#[cfg(test)]
mod tests {
    use crate::command::{Command, Response};
    use crate::state::ClusterState;
    use crate::state::test_support::Sm;

    #[test]
    fn scram_credentials_are_altered_per_user_and_kept_in_snapshots() {
        use crate::scram::{ScramAlteration, ScramCredential, ScramMechanism};
        let cred = |iterations: u32| ScramCredential {
            salt: vec![1; 16],
            stored_key: vec![2; 32],
            server_key: vec![3; 32],
            iterations,
        };
        let set = |user: &str, iterations: u32| {
            Command::AlterScramCredentials(ScramAlteration {
                user: user.into(),
                upsert: vec![(ScramMechanism::Sha256, cred(iterations))],
                delete: vec![],
            })
        };
        let mut sm = Sm::new();
        sm.ok(set("alice", 4096));
        // One command a user in a batch, as `/v1/scram/alter` writes them:
        // bob's deletion of a credential he lacks is refused, alice's
        // change applies.
        let r = sm.apply(Command::Batch(vec![
            set("alice", 8192),
            Command::AlterScramCredentials(ScramAlteration {
                user: "bob".into(),
                upsert: vec![(ScramMechanism::Sha256, cred(4096))],
                delete: vec![ScramMechanism::Sha512],
            }),
        ]));
        let Response::Batch(rs) = r else {
            panic!("{r:?}")
        };
        assert_eq!(rs[0], Response::Ok);
        assert!(
            matches!(&rs[1], Response::Error(e) if e.kind() == crate::ErrorKind::NotFound),
            "{rs:?}"
        );
        assert_eq!(
            sm.state.security.scram.users["alice"][&ScramMechanism::Sha256].iterations,
            8192
        );
        assert!(!sm.state.security.scram.users.contains_key("bob"));
        // Bad credentials are refused and change nothing.
        assert_eq!(
            sm.error(set("carol", 100)).kind(),
            crate::ErrorKind::InvalidRequest
        );
        // A snapshot (the state as serialized) keeps them.
        let json = serde_json::to_vec(&sm.state).unwrap();
        let back: ClusterState = serde_json::from_slice(&json).unwrap();
        assert_eq!(back.security.scram, sm.state.security.scram);
        // One written before SCRAM credentials existed has none.
        let mut old: serde_json::Value = serde_json::from_slice(&json).unwrap();
        old.as_object_mut().unwrap().remove("scram");
        let back: ClusterState = serde_json::from_value(old).unwrap();
        assert!(back.security.scram.users.is_empty());
    }
}
