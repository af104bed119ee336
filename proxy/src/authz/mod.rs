//! Authorization: Kafka's ACLs (`floe_metadata::acl`), decided per
//! request with the cluster view's ACLs.
//!
//! Off (the default, `--authorizer none`), every authenticated client may
//! do everything and the ACL APIs answer SECURITY_DISABLED, as a Kafka
//! broker without `authorizer.class.name`. On (`--authorizer acl`), a
//! request is refused unless an ACL allows it, a super user
//! (`--super-users`) may do everything, and, with
//! `--allow-everyone-if-no-acl-found`, a resource no ACL names is open.
//!
//! [`requests`] says what each API needs; this module decides. Decisions
//! are kept per connection until the ACLs change, so a connection asks the
//! index once per resource and operation.

pub mod requests;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use floe_metadata::acl::{AclIndex, AclModel, CLUSTER_NAME, Decision, Operation, ResourceType};

use crate::groups::ClientInfo;
use crate::principal::Principal;

/// The authorizer's settings (Kafka's `authorizer.class.name`,
/// `super.users`, `allow.everyone.if.no.acl.found`).
#[derive(Debug, Clone, Default)]
pub struct AuthzSettings {
    pub enabled: bool,
    /// Principals allowed everything (`User:admin`).
    pub super_users: Vec<String>,
    /// Whether a resource no ACL names is open to everyone.
    pub allow_if_no_acls: bool,
}

impl AuthzSettings {
    /// Parses Kafka's `super.users`: principals separated by `;` (and, as
    /// a convenience, `,`).
    pub fn parse_super_users(s: &str) -> Result<Vec<String>, String> {
        s.split([';', ','])
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .map(|p| match p.split_once(':') {
                Some((k, n)) if !k.is_empty() && !n.is_empty() => Ok(p.to_string()),
                _ => Err(format!("super user {p:?} is not of the form User:name")),
            })
            .collect()
    }
}

/// The authorizer of a proxy: its settings and the index of the ACLs it
/// last saw.
#[derive(Debug, Default)]
pub struct Authorizer {
    settings: AuthzSettings,
    built: Mutex<Option<(Arc<AclModel>, Arc<AclIndex>)>>,
}

impl Authorizer {
    pub fn new(settings: AuthzSettings) -> Self {
        Authorizer {
            settings,
            built: Mutex::new(None),
        }
    }

    pub fn enabled(&self) -> bool {
        self.settings.enabled
    }

    /// The index of `acls`, built once per change of the ACLs (the view
    /// keeps the same `Arc` while they do not change).
    fn index(&self, acls: &Arc<AclModel>) -> Arc<AclIndex> {
        let mut built = self.built.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((m, ix)) = built.as_ref()
            && Arc::ptr_eq(m, acls)
        {
            return ix.clone();
        }
        let ix = Arc::new(AclIndex::new(acls));
        *built = Some((acls.clone(), ix.clone()));
        ix
    }

    /// What a request from `client` may do, under the ACLs of `acls`.
    pub fn check(self: &Arc<Self>, acls: &Arc<AclModel>, client: &ClientInfo) -> Check {
        let on = self.settings.enabled;
        let principal = client.principal.to_string();
        let superuser = on && self.settings.super_users.contains(&principal);
        Check {
            on: on && !superuser,
            index: if on && !superuser {
                self.index(acls)
            } else {
                Arc::default()
            },
            acls: acls.clone(),
            allow_if_none: self.settings.allow_if_no_acls,
            principal: Arc::from(principal),
            host: Arc::from(client.host.trim_start_matches('/')),
            session: client.authz.clone(),
        }
    }
}

/// Decisions a connection made, until the ACLs change.
#[derive(Debug, Default)]
pub struct SessionCache {
    inner: Mutex<CacheInner>,
}

#[derive(Debug, Default)]
struct CacheInner {
    /// The ACLs the decisions were made under (by address).
    acls: usize,
    principal: String,
    decisions: HashMap<(ResourceType, String, Operation), bool>,
}

impl SessionCache {
    /// The most decisions a connection keeps (then it starts again).
    const MAX: usize = 4096;
}

/// One request's authorization: who asks, and the ACLs it is judged by.
#[derive(Debug, Clone)]
pub struct Check {
    on: bool,
    index: Arc<AclIndex>,
    acls: Arc<AclModel>,
    allow_if_none: bool,
    principal: Arc<str>,
    host: Arc<str>,
    session: Arc<SessionCache>,
}

impl Check {
    /// A check that allows everything (no authorizer).
    pub fn open() -> Check {
        Check {
            on: false,
            index: Arc::default(),
            acls: Arc::default(),
            allow_if_none: true,
            principal: Arc::from(Principal::anonymous().to_string()),
            host: Arc::from(""),
            session: Arc::default(),
        }
    }

    /// Whether an authorizer judges this request (off, or a super user:
    /// everything is allowed).
    pub fn is_on(&self) -> bool {
        self.on
    }

    /// Whether the principal may do `op` on the resource.
    pub fn allows(&self, op: Operation, rt: ResourceType, name: &str) -> bool {
        if !self.on {
            return true;
        }
        let key = (rt, name.to_string(), op);
        let at = Arc::as_ptr(&self.acls) as usize;
        {
            let mut c = self.session.inner.lock().unwrap_or_else(|p| p.into_inner());
            if c.acls != at
                || c.principal != *self.principal
                || c.decisions.len() >= SessionCache::MAX
            {
                c.acls = at;
                c.principal = self.principal.to_string();
                c.decisions.clear();
            } else if let Some(d) = c.decisions.get(&key) {
                if !*d {
                    crate::metrics::authorization_denied(rt, op);
                }
                return *d;
            }
        }
        let d = self.index.decide(
            &self.principal,
            &self.host,
            op,
            rt,
            name,
            self.allow_if_none,
        );
        let allowed = d.allowed();
        if !allowed {
            crate::metrics::authorization_denied(rt, op);
            tracing::debug!(
                principal = %self.principal,
                host = %self.host,
                operation = op.name(),
                resource_type = rt.name(),
                resource = name,
                why = if d == Decision::Denied { "denied by an ACL" } else { "no ACL allows it" },
                "request refused"
            );
        }
        let mut c = self.session.inner.lock().unwrap_or_else(|p| p.into_inner());
        if c.acls == at {
            c.decisions.insert(key, allowed);
        }
        allowed
    }

    /// Whether the principal may do `op` on the cluster.
    pub fn cluster(&self, op: Operation) -> bool {
        self.allows(op, ResourceType::Cluster, CLUSTER_NAME)
    }

    pub fn topic(&self, op: Operation, name: &str) -> bool {
        self.allows(op, ResourceType::Topic, name)
    }

    pub fn group(&self, op: Operation, name: &str) -> bool {
        self.allows(op, ResourceType::Group, name)
    }

    pub fn txn_id(&self, op: Operation, name: &str) -> bool {
        self.allows(op, ResourceType::TransactionalId, name)
    }

    /// Whether the principal may write to some topic: what an idempotent
    /// producer needs without IDEMPOTENT_WRITE on the cluster (KIP-679).
    pub fn writes_any_topic(&self) -> bool {
        if !self.on {
            return true;
        }
        self.cluster(Operation::IdempotentWrite)
            || self.acls.bindings.iter().any(|b| {
                b.resource_type == ResourceType::Topic
                    && b.permission == floe_metadata::acl::Permission::Allow
                    && b.operation.allows(Operation::Write)
                    && (b.principal == *self.principal
                        || b.principal == floe_metadata::acl::ANY_PRINCIPAL)
                    && (b.host == *self.host || b.host == floe_metadata::acl::WILDCARD)
            })
    }

    /// The ACLs judged by.
    pub fn acls(&self) -> &AclModel {
        &self.acls
    }
}
