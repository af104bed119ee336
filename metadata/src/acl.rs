//! Access control lists, Kafka's model (KIP-11, KIP-290): a binding allows
//! or denies one operation on resources of one type, named literally (or
//! `*`, any name) or by a prefix, to a principal (or `User:*`) from a host
//! (or `*`).
//!
//! The bindings are kept in the model ([`crate::state::ClusterState`]) and
//! shown to every proxy in the cluster view; the proxies decide with them
//! (`floe_proxy::authz`). This module holds the model, the filters of
//! DescribeAcls and DeleteAcls, and the rule that decides a request.

use std::collections::{BTreeSet, HashMap};

use serde::{Deserialize, Serialize};

use crate::error::MetaError;

/// The resource types Floe authorizes, with Kafka's numeric codes.
/// (Delegation tokens and users as resources, Kafka's 6 and 7, are not
/// kept: Floe has no delegation tokens.)
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum ResourceType {
    Topic,
    Group,
    Cluster,
    TransactionalId,
}

impl ResourceType {
    pub const ALL: [ResourceType; 4] = [
        ResourceType::Topic,
        ResourceType::Group,
        ResourceType::Cluster,
        ResourceType::TransactionalId,
    ];

    /// Kafka's code.
    pub fn code(self) -> i8 {
        match self {
            ResourceType::Topic => 2,
            ResourceType::Group => 3,
            ResourceType::Cluster => 4,
            ResourceType::TransactionalId => 5,
        }
    }

    pub fn from_code(c: i8) -> Option<ResourceType> {
        Self::ALL.into_iter().find(|t| t.code() == c)
    }

    /// Kafka's name, as `kafka-acls.sh` prints it.
    pub fn name(self) -> &'static str {
        match self {
            ResourceType::Topic => "TOPIC",
            ResourceType::Group => "GROUP",
            ResourceType::Cluster => "CLUSTER",
            ResourceType::TransactionalId => "TRANSACTIONAL_ID",
        }
    }

    /// The type of a name (any case, `-` or `_` between words).
    pub fn from_name(s: &str) -> Option<ResourceType> {
        let s = s.to_ascii_uppercase().replace('-', "_");
        let s = if s == "TRANSACTIONALID" {
            "TRANSACTIONAL_ID".to_string()
        } else {
            s
        };
        Self::ALL.into_iter().find(|t| t.name() == s)
    }
}

/// The one name of the cluster resource.
pub const CLUSTER_NAME: &str = "kafka-cluster";
/// A literal resource name matching every name.
pub const WILDCARD: &str = "*";
/// The principal matching every principal.
pub const ANY_PRINCIPAL: &str = "User:*";

/// How a binding's resource name matches names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum PatternType {
    /// The name itself, or every name when it is `*`.
    Literal,
    /// Every name starting with it.
    Prefixed,
}

impl PatternType {
    pub fn code(self) -> i8 {
        match self {
            PatternType::Literal => 3,
            PatternType::Prefixed => 4,
        }
    }

    pub fn from_code(c: i8) -> Option<PatternType> {
        [PatternType::Literal, PatternType::Prefixed]
            .into_iter()
            .find(|p| p.code() == c)
    }

    pub fn name(self) -> &'static str {
        match self {
            PatternType::Literal => "LITERAL",
            PatternType::Prefixed => "PREFIXED",
        }
    }
}

/// An operation, with Kafka's codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Operation {
    All,
    Read,
    Write,
    Create,
    Delete,
    Alter,
    Describe,
    ClusterAction,
    DescribeConfigs,
    AlterConfigs,
    IdempotentWrite,
}

impl Operation {
    pub const ALL: [Operation; 11] = [
        Operation::All,
        Operation::Read,
        Operation::Write,
        Operation::Create,
        Operation::Delete,
        Operation::Alter,
        Operation::Describe,
        Operation::ClusterAction,
        Operation::DescribeConfigs,
        Operation::AlterConfigs,
        Operation::IdempotentWrite,
    ];

    pub fn code(self) -> i8 {
        match self {
            Operation::All => 2,
            Operation::Read => 3,
            Operation::Write => 4,
            Operation::Create => 5,
            Operation::Delete => 6,
            Operation::Alter => 7,
            Operation::Describe => 8,
            Operation::ClusterAction => 9,
            Operation::DescribeConfigs => 10,
            Operation::AlterConfigs => 11,
            Operation::IdempotentWrite => 12,
        }
    }

    pub fn from_code(c: i8) -> Option<Operation> {
        Self::ALL.into_iter().find(|o| o.code() == c)
    }

    pub fn name(self) -> &'static str {
        match self {
            Operation::All => "ALL",
            Operation::Read => "READ",
            Operation::Write => "WRITE",
            Operation::Create => "CREATE",
            Operation::Delete => "DELETE",
            Operation::Alter => "ALTER",
            Operation::Describe => "DESCRIBE",
            Operation::ClusterAction => "CLUSTER_ACTION",
            Operation::DescribeConfigs => "DESCRIBE_CONFIGS",
            Operation::AlterConfigs => "ALTER_CONFIGS",
            Operation::IdempotentWrite => "IDEMPOTENT_WRITE",
        }
    }

    /// The operation of a name (any case, `-` or `_` between words, or
    /// none: `kafka-acls.sh` writes `DescribeConfigs`).
    pub fn from_name(s: &str) -> Option<Operation> {
        let want: String = s
            .chars()
            .filter(|c| *c != '_' && *c != '-')
            .collect::<String>()
            .to_ascii_uppercase();
        Self::ALL
            .into_iter()
            .find(|o| o.name().replace('_', "") == want)
    }

    /// Whether an allow of `self` grants `wanted`: ALL grants everything,
    /// READ, WRITE, DELETE and ALTER grant DESCRIBE, ALTER_CONFIGS grants
    /// DESCRIBE_CONFIGS (Kafka's implied operations).
    pub fn allows(self, wanted: Operation) -> bool {
        self == wanted
            || self == Operation::All
            || (wanted == Operation::Describe
                && matches!(
                    self,
                    Operation::Read | Operation::Write | Operation::Delete | Operation::Alter
                ))
            || (wanted == Operation::DescribeConfigs && self == Operation::AlterConfigs)
    }

    /// Whether a deny of `self` refuses `wanted`: only the operation itself
    /// and ALL (a denied READ does not deny DESCRIBE).
    pub fn denies(self, wanted: Operation) -> bool {
        self == wanted || self == Operation::All
    }
}

/// Allow or deny.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Permission {
    Deny,
    Allow,
}

impl Permission {
    pub fn code(self) -> i8 {
        match self {
            Permission::Deny => 2,
            Permission::Allow => 3,
        }
    }

    pub fn from_code(c: i8) -> Option<Permission> {
        [Permission::Deny, Permission::Allow]
            .into_iter()
            .find(|p| p.code() == c)
    }

    pub fn name(self) -> &'static str {
        match self {
            Permission::Deny => "DENY",
            Permission::Allow => "ALLOW",
        }
    }
}

/// One ACL.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct AclBinding {
    pub resource_type: ResourceType,
    pub resource_name: String,
    pub pattern: PatternType,
    /// `Type:name`, as `User:alice`, or [`ANY_PRINCIPAL`].
    pub principal: String,
    /// The client's IP address, or `*`.
    pub host: String,
    pub operation: Operation,
    pub permission: Permission,
}

/// The longest resource name, principal or host stored (bytes).
pub const MAX_FIELD_BYTES: usize = 1024;
/// The most ACLs the cluster keeps.
pub const MAX_ACLS: usize = 100_000;

impl AclBinding {
    /// Floe's rules for a stored binding, Kafka's words where it has them.
    pub fn validate(&self) -> Result<(), MetaError> {
        let bad = |what: String| Err(MetaError::InvalidRequest(what));
        if self.resource_name.is_empty() {
            return bad("the resource name is empty".into());
        }
        for (what, v) in [
            ("resource name", &self.resource_name),
            ("principal", &self.principal),
            ("host", &self.host),
        ] {
            if v.len() > MAX_FIELD_BYTES {
                return bad(format!("the {what} is over {MAX_FIELD_BYTES} bytes"));
            }
        }
        if self.resource_type == ResourceType::Cluster && self.resource_name != CLUSTER_NAME {
            return bad(format!(
                "the cluster resource is named {CLUSTER_NAME}, not {}",
                self.resource_name
            ));
        }
        if self.pattern == PatternType::Prefixed && self.resource_name == WILDCARD {
            return bad("a prefixed pattern cannot be '*'; use a literal '*'".into());
        }
        match self.principal.split_once(':') {
            Some((kind, name)) if !kind.is_empty() && !name.is_empty() => {}
            _ => {
                return bad(format!(
                    "principal {:?} is not of the form Type:name (User:alice)",
                    self.principal
                ));
            }
        }
        if self.host.is_empty() {
            return bad("the host is empty; '*' is every host".into());
        }
        Ok(())
    }
}

/// How a filter matches bindings' names and pattern types (Kafka's
/// `PatternType` in a filter).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum PatternFilter {
    /// Any pattern type; a name, when given, is matched exactly.
    Any,
    /// Bindings that apply to the named resource: literal with its name,
    /// literal `*`, and prefixes of it.
    Match,
    Literal,
    Prefixed,
}

impl PatternFilter {
    pub fn code(self) -> i8 {
        match self {
            PatternFilter::Any => 1,
            PatternFilter::Match => 2,
            PatternFilter::Literal => 3,
            PatternFilter::Prefixed => 4,
        }
    }

    pub fn from_code(c: i8) -> Option<PatternFilter> {
        [
            PatternFilter::Any,
            PatternFilter::Match,
            PatternFilter::Literal,
            PatternFilter::Prefixed,
        ]
        .into_iter()
        .find(|p| p.code() == c)
    }
}

/// A filter of DescribeAcls and DeleteAcls: `None` matches anything.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AclFilter {
    pub resource_type: Option<ResourceType>,
    pub resource_name: Option<String>,
    pub pattern: PatternFilter,
    pub principal: Option<String>,
    pub host: Option<String>,
    pub operation: Option<Operation>,
    pub permission: Option<Permission>,
}

impl AclFilter {
    /// The filter matching every binding.
    pub fn any() -> Self {
        AclFilter {
            resource_type: None,
            resource_name: None,
            pattern: PatternFilter::Any,
            principal: None,
            host: None,
            operation: None,
            permission: None,
        }
    }

    pub fn matches(&self, b: &AclBinding) -> bool {
        self.resource_type.is_none_or(|t| t == b.resource_type)
            && self.matches_name(b)
            && self.principal.as_ref().is_none_or(|p| *p == b.principal)
            && self.host.as_ref().is_none_or(|h| *h == b.host)
            && self.operation.is_none_or(|o| o == b.operation)
            && self.permission.is_none_or(|p| p == b.permission)
    }

    fn matches_name(&self, b: &AclBinding) -> bool {
        let pattern_ok = match self.pattern {
            PatternFilter::Any | PatternFilter::Match => true,
            PatternFilter::Literal => b.pattern == PatternType::Literal,
            PatternFilter::Prefixed => b.pattern == PatternType::Prefixed,
        };
        let Some(name) = &self.resource_name else {
            return pattern_ok;
        };
        match self.pattern {
            PatternFilter::Match => match b.pattern {
                PatternType::Literal => b.resource_name == *name || b.resource_name == WILDCARD,
                PatternType::Prefixed => name.starts_with(&b.resource_name),
            },
            _ => pattern_ok && b.resource_name == *name,
        }
    }
}

/// Kafka's code for ANY in a filter (resource type, pattern type,
/// operation, permission).
pub const ANY_CODE: i8 = 1;

impl AclBinding {
    /// A binding from the codes and strings Kafka's ACL messages carry; an
    /// unknown code (or ANY) is refused, saying which. Not validated
    /// ([`AclBinding::validate`]).
    #[allow(clippy::too_many_arguments)]
    pub fn from_codes(
        resource_type: i8,
        resource_name: String,
        pattern: i8,
        principal: String,
        host: String,
        operation: i8,
        permission: i8,
    ) -> Result<AclBinding, String> {
        Ok(AclBinding {
            resource_type: ResourceType::from_code(resource_type).ok_or_else(|| {
                format!(
                    "resource type {resource_type} cannot have ACLs here (TOPIC, GROUP, CLUSTER, TRANSACTIONAL_ID)"
                )
            })?,
            resource_name,
            pattern: PatternType::from_code(pattern)
                .ok_or_else(|| format!("pattern type {pattern} is not LITERAL (3) or PREFIXED (4)"))?,
            principal,
            host,
            operation: Operation::from_code(operation)
                .ok_or_else(|| format!("operation {operation} is not one an ACL can name"))?,
            permission: Permission::from_code(permission)
                .ok_or_else(|| format!("permission type {permission} is not DENY (2) or ALLOW (3)"))?,
        })
    }
}

/// A filter's codes as Kafka's messages carry them: what it leaves open is
/// [`ANY_CODE`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FilterCodes {
    pub resource_type: i8,
    pub pattern: i8,
    pub operation: i8,
    pub permission: i8,
}

/// `None` for ANY, the value of a known code, else an error naming `what`.
fn any_or<T>(c: i8, what: &str, known: impl Fn(i8) -> Option<T>) -> Result<Option<T>, String> {
    if c == ANY_CODE {
        return Ok(None);
    }
    known(c)
        .map(Some)
        .ok_or_else(|| format!("unknown {what} {c}"))
}

impl AclFilter {
    /// The filter's codes.
    pub fn codes(&self) -> FilterCodes {
        FilterCodes {
            resource_type: self.resource_type.map_or(ANY_CODE, ResourceType::code),
            pattern: self.pattern.code(),
            operation: self.operation.map_or(ANY_CODE, Operation::code),
            permission: self.permission.map_or(ANY_CODE, Permission::code),
        }
    }

    /// The filter of Kafka's codes and (optional) strings; an unknown code
    /// is refused, saying which.
    pub fn from_codes(
        codes: FilterCodes,
        resource_name: Option<String>,
        principal: Option<String>,
        host: Option<String>,
    ) -> Result<AclFilter, String> {
        Ok(AclFilter {
            resource_type: any_or(
                codes.resource_type,
                "resource type",
                ResourceType::from_code,
            )?,
            resource_name,
            pattern: PatternFilter::from_code(codes.pattern)
                .ok_or_else(|| format!("unknown pattern type {}", codes.pattern))?,
            principal,
            host,
            operation: any_or(codes.operation, "operation", Operation::from_code)?,
            permission: any_or(codes.permission, "permission", Permission::from_code)?,
        })
    }
}

/// Every ACL of the cluster.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AclModel {
    pub bindings: BTreeSet<AclBinding>,
    /// The revision of the last change: a cluster view asked for since a
    /// later revision leaves the ACLs out (they did not change).
    #[serde(default)]
    pub revision: u64,
}

impl AclModel {
    /// Adds bindings (one already there is kept once), all or none.
    pub fn create(&mut self, bindings: &[AclBinding]) -> Result<(), MetaError> {
        for b in bindings {
            b.validate()?;
        }
        let new = bindings
            .iter()
            .filter(|b| !self.bindings.contains(*b))
            .collect::<BTreeSet<_>>();
        if self.bindings.len() + new.len() > MAX_ACLS {
            return Err(MetaError::InvalidRequest(format!(
                "the cluster keeps at most {MAX_ACLS} ACLs"
            )));
        }
        self.bindings.extend(new.into_iter().cloned());
        Ok(())
    }

    /// Notes that the ACLs changed at `revision`.
    pub fn changed_at(&mut self, revision: u64) {
        self.revision = revision;
    }

    /// Removes the bindings each filter matches; returns them, per filter
    /// (a binding two filters match is listed under the first).
    pub fn delete(&mut self, filters: &[AclFilter]) -> Vec<Vec<AclBinding>> {
        filters
            .iter()
            .map(|f| {
                let gone: Vec<AclBinding> = self
                    .bindings
                    .iter()
                    .filter(|b| f.matches(b))
                    .cloned()
                    .collect();
                for b in &gone {
                    self.bindings.remove(b);
                }
                gone
            })
            .collect()
    }

    /// The bindings a filter matches.
    pub fn describe<'a>(&'a self, f: &'a AclFilter) -> impl Iterator<Item = &'a AclBinding> {
        self.bindings.iter().filter(|b| f.matches(b))
    }
}

/// One rule of an [`AclIndex`]: who, from where, what, allowed or not.
#[derive(Debug, Clone)]
struct Rule {
    principal: String,
    host: String,
    operation: Operation,
    permission: Permission,
}

/// The bindings arranged to decide requests quickly: by resource type,
/// literal names in a hash map, prefixes looked up by each prefix of the
/// name asked about.
/// Rules by resource type and name (or prefix).
type RulesByName = HashMap<(ResourceType, String), Vec<Rule>>;

#[derive(Debug, Default)]
pub struct AclIndex {
    literal: RulesByName,
    prefixed: RulesByName,
    /// The shortest prefix length per type (none: no prefixed binding).
    prefix_lens: HashMap<ResourceType, Vec<usize>>,
}

/// What decided a request: for metrics and logs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// An ALLOW binding granted it.
    Allowed,
    /// A DENY binding refused it.
    Denied,
    /// No binding granted it (deny by default).
    NoMatch,
    /// No binding names the resource at all, and the authorizer allows
    /// everyone then (`allow.everyone.if.no.acl.found`).
    NoAcls,
}

impl Decision {
    pub fn allowed(self) -> bool {
        matches!(self, Decision::Allowed | Decision::NoAcls)
    }
}

impl AclIndex {
    pub fn new(m: &AclModel) -> Self {
        let mut ix = AclIndex::default();
        for b in &m.bindings {
            let rule = Rule {
                principal: b.principal.clone(),
                host: b.host.clone(),
                operation: b.operation,
                permission: b.permission,
            };
            let key = (b.resource_type, b.resource_name.clone());
            match b.pattern {
                PatternType::Literal => ix.literal.entry(key).or_default().push(rule),
                PatternType::Prefixed => {
                    let lens = ix.prefix_lens.entry(b.resource_type).or_default();
                    if !lens.contains(&b.resource_name.len()) {
                        lens.push(b.resource_name.len());
                    }
                    ix.prefixed.entry(key).or_default().push(rule)
                }
            }
        }
        ix
    }

    /// Decides whether `principal` at `host` may do `op` on the resource
    /// (Kafka's rule: a matching DENY wins, then a matching ALLOW, else
    /// refused; with no binding at all on the resource, `allow_if_none`).
    pub fn decide(
        &self,
        principal: &str,
        host: &str,
        op: Operation,
        rt: ResourceType,
        name: &str,
        allow_if_none: bool,
    ) -> Decision {
        let mut found = false;
        let mut allowed = false;
        let mut visit = |rules: &[Rule]| -> bool {
            for r in rules {
                found = true;
                let who = r.principal == principal || r.principal == ANY_PRINCIPAL;
                let whence = r.host == host || r.host == WILDCARD;
                if !(who && whence) {
                    continue;
                }
                match r.permission {
                    Permission::Deny if r.operation.denies(op) => return true,
                    Permission::Allow if r.operation.allows(op) => allowed = true,
                    _ => {}
                }
            }
            false
        };
        let mut lookups: Vec<(&RulesByName, &str)> = vec![(&self.literal, name)];
        if name != WILDCARD {
            lookups.push((&self.literal, WILDCARD));
        }
        if let Some(lens) = self.prefix_lens.get(&rt) {
            for &n in lens {
                if let Some(p) = name.get(..n) {
                    lookups.push((&self.prefixed, p));
                }
            }
        }
        let mut key = (rt, String::new());
        for (map, n) in lookups {
            key.1.clear();
            key.1.push_str(n);
            if let Some(rules) = map.get(&key)
                && visit(rules)
            {
                return Decision::Denied;
            }
        }
        if allowed {
            Decision::Allowed
        } else if !found && allow_if_none {
            Decision::NoAcls
        } else {
            Decision::NoMatch
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn acl(
        rt: ResourceType,
        name: &str,
        pattern: PatternType,
        principal: &str,
        op: Operation,
        perm: Permission,
    ) -> AclBinding {
        AclBinding {
            resource_type: rt,
            resource_name: name.into(),
            pattern,
            principal: principal.into(),
            host: "*".into(),
            operation: op,
            permission: perm,
        }
    }

    fn index(bs: &[AclBinding]) -> AclIndex {
        let mut m = AclModel::default();
        m.create(bs).unwrap();
        AclIndex::new(&m)
    }

    use Operation as O;
    use PatternType::*;
    use Permission::*;
    use ResourceType::*;

    #[test]
    fn allow_implies_describe_and_deny_wins() {
        let ix = index(&[
            acl(Topic, "orders", Literal, "User:alice", O::Write, Allow),
            acl(Topic, "pay", Prefixed, "User:alice", O::Read, Allow),
            acl(Topic, "payroll", Literal, "User:alice", O::Read, Deny),
            acl(Topic, "*", Literal, "User:*", O::AlterConfigs, Allow),
        ]);
        let d = |op, name: &str| ix.decide("User:alice", "10.0.0.1", op, Topic, name, false);
        assert_eq!(d(O::Write, "orders"), Decision::Allowed);
        assert_eq!(d(O::Describe, "orders"), Decision::Allowed);
        assert_eq!(d(O::Read, "orders"), Decision::NoMatch);
        assert_eq!(d(O::Read, "payments"), Decision::Allowed);
        assert_eq!(d(O::Read, "payroll"), Decision::Denied);
        // A denied READ does not deny DESCRIBE, which the prefix allows.
        assert_eq!(d(O::Describe, "payroll"), Decision::Allowed);
        assert_eq!(d(O::DescribeConfigs, "anything"), Decision::Allowed);
        assert_eq!(d(O::Read, "pa"), Decision::NoMatch);
        // Another principal: only the wildcard binding applies.
        assert_eq!(
            ix.decide("User:bob", "h", O::Write, Topic, "orders", false),
            Decision::NoMatch
        );
        // Another resource type is not touched by topic bindings.
        assert_eq!(
            ix.decide("User:alice", "h", O::Read, Group, "orders", true),
            Decision::NoAcls
        );
        // With bindings on the resource, allow_if_none does not apply.
        assert_eq!(
            ix.decide("User:bob", "h", O::Write, Topic, "orders", true),
            Decision::NoMatch
        );
    }

    #[test]
    fn hosts_and_all_operations() {
        let mut b = acl(Group, "g", Literal, "User:alice", O::All, Allow);
        b.host = "127.0.0.1".into();
        let ix = index(&[b, acl(Group, "g", Literal, "User:*", O::Delete, Deny)]);
        assert_eq!(
            ix.decide("User:alice", "127.0.0.1", O::Read, Group, "g", false),
            Decision::Allowed
        );
        assert_eq!(
            ix.decide("User:alice", "127.0.0.2", O::Read, Group, "g", false),
            Decision::NoMatch
        );
        assert_eq!(
            ix.decide("User:alice", "127.0.0.1", O::Delete, Group, "g", false),
            Decision::Denied
        );
    }

    #[test]
    fn filters_match_as_kafka_filters_do() {
        let lit = acl(Topic, "orders", Literal, "User:a", O::Read, Allow);
        let star = acl(Topic, "*", Literal, "User:a", O::Read, Allow);
        let pre = acl(Topic, "ord", Prefixed, "User:a", O::Read, Allow);
        let other = acl(Group, "orders", Literal, "User:b", O::Read, Deny);
        let all = [&lit, &star, &pre, &other];
        let hits = |f: &AclFilter| all.iter().filter(|b| f.matches(b)).count();
        assert_eq!(hits(&AclFilter::any()), 4);
        let mut f = AclFilter::any();
        f.resource_name = Some("orders".into());
        assert_eq!(hits(&f), 2, "ANY with a name matches the name exactly");
        f.pattern = PatternFilter::Match;
        f.resource_type = Some(Topic);
        assert_eq!(hits(&f), 3, "MATCH: literal, wildcard and prefix");
        f.pattern = PatternFilter::Prefixed;
        f.resource_name = None;
        assert_eq!(hits(&f), 1);
        let mut f = AclFilter::any();
        f.permission = Some(Deny);
        f.principal = Some("User:b".into());
        assert_eq!(hits(&f), 1);
    }

    #[test]
    fn create_validates_and_delete_returns_what_it_removed() {
        let mut m = AclModel::default();
        let good = acl(Topic, "t", Literal, "User:a", O::Read, Allow);
        for bad in [
            acl(Cluster, "other", Literal, "User:a", O::Alter, Allow),
            acl(Topic, "", Literal, "User:a", O::Read, Allow),
            acl(Topic, "t", Literal, "alice", O::Read, Allow),
            acl(Topic, "*", Prefixed, "User:a", O::Read, Allow),
        ] {
            assert!(m.create(&[good.clone(), bad]).is_err());
        }
        assert!(m.bindings.is_empty(), "a refused batch adds nothing");
        m.create(&[good.clone(), good.clone()]).unwrap();
        assert_eq!(m.bindings.len(), 1);
        let mut f = AclFilter::any();
        f.resource_name = Some("t".into());
        let gone = m.delete(&[f.clone(), f]);
        assert_eq!(gone, vec![vec![good], vec![]]);
        assert!(m.bindings.is_empty());
    }

    #[test]
    fn names_parse_as_kafka_acls_writes_them() {
        assert_eq!(
            Operation::from_name("DescribeConfigs"),
            Some(O::DescribeConfigs)
        );
        assert_eq!(
            Operation::from_name("idempotent_write"),
            Some(O::IdempotentWrite)
        );
        assert_eq!(
            ResourceType::from_name("transactional-id"),
            Some(TransactionalId)
        );
        assert_eq!(
            ResourceType::from_name("TransactionalId"),
            Some(TransactionalId)
        );
        for o in Operation::ALL {
            assert_eq!(Operation::from_code(o.code()), Some(o));
        }
    }
}
