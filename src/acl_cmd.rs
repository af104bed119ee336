//! `floe acl …`: ACLs over the Kafka protocol, as `kafka-acls.sh` manages
//! them (CreateAcls, DescribeAcls, DeleteAcls; docs/security.md#acls).

#![allow(clippy::print_stdout)]

use anyhow::{Context as _, bail};
use clap::{Args, Subcommand};
use floe_client::acls::describe;
use floe_metadata::acl::{
    AclBinding, AclFilter, CLUSTER_NAME, Operation, PatternFilter, PatternType, Permission,
    ResourceType, WILDCARD,
};

use crate::kafka_args::BootstrapArgs;
use crate::table::Table;

/// The resources a command is about.
#[derive(Debug, Clone, Default, Args)]
pub struct Resources {
    /// A topic (repeat for several; `*`: every topic).
    #[arg(long = "topic")]
    pub topics: Vec<String>,
    /// A group (repeat for several; `*`: every group).
    #[arg(long = "group")]
    pub groups: Vec<String>,
    /// The cluster itself (`kafka-cluster`).
    #[arg(long)]
    pub cluster: bool,
    /// A transactional id (repeat for several; `*`: every one).
    #[arg(long = "transactional-id")]
    pub transactional_ids: Vec<String>,
}

impl Resources {
    /// The (type, name) pairs named.
    fn named(&self) -> Vec<(ResourceType, String)> {
        let mut out = Vec::new();
        out.extend(self.topics.iter().map(|t| (ResourceType::Topic, t.clone())));
        out.extend(self.groups.iter().map(|g| (ResourceType::Group, g.clone())));
        if self.cluster {
            out.push((ResourceType::Cluster, CLUSTER_NAME.to_string()));
        }
        out.extend(
            self.transactional_ids
                .iter()
                .map(|t| (ResourceType::TransactionalId, t.clone())),
        );
        out
    }
}

#[derive(Debug, Subcommand)]
pub enum AclCommand {
    /// Add ACLs (CreateAcls): each principal × host × operation × resource
    /// named. Needs ALTER on the cluster.
    Add {
        #[command(flatten)]
        conn: BootstrapArgs,
        /// A principal to allow (`User:alice`, `User:*` for everyone).
        #[arg(long = "allow-principal")]
        allow_principals: Vec<String>,
        /// A principal to deny; a DENY wins over any ALLOW.
        #[arg(long = "deny-principal")]
        deny_principals: Vec<String>,
        /// Hosts (IP addresses) the allowed principals may come from.
        #[arg(long = "allow-host", default_value = "*")]
        allow_hosts: Vec<String>,
        /// Hosts the denied principals are denied from.
        #[arg(long = "deny-host", default_value = "*")]
        deny_hosts: Vec<String>,
        /// An operation: All, Read, Write, Create, Delete, Alter, Describe,
        /// ClusterAction, DescribeConfigs, AlterConfigs, IdempotentWrite.
        #[arg(long = "operation")]
        operations: Vec<String>,
        /// What a producer needs: WRITE, DESCRIBE and CREATE on the topics;
        /// WRITE and DESCRIBE on the transactional ids given, else
        /// IDEMPOTENT_WRITE on the cluster.
        #[arg(long)]
        producer: bool,
        /// What a consumer needs: READ and DESCRIBE on the topics, READ on
        /// the groups (at least one --group).
        #[arg(long)]
        consumer: bool,
        #[command(flatten)]
        resources: Resources,
        /// How the names match: literal (`*` for every name) or prefixed.
        #[arg(long, default_value = "literal")]
        resource_pattern_type: String,
    },
    /// Remove the ACLs matching the selectors (DeleteAcls); a selector left
    /// out matches anything. Needs ALTER on the cluster.
    Remove {
        #[command(flatten)]
        conn: BootstrapArgs,
        #[command(flatten)]
        selector: Selector,
        /// Allow a removal with no selector at all: every ACL.
        #[arg(long)]
        all: bool,
    },
    /// List the ACLs matching the selectors (DescribeAcls). Needs DESCRIBE
    /// on the cluster.
    List {
        #[command(flatten)]
        conn: BootstrapArgs,
        #[command(flatten)]
        selector: Selector,
    },
}

/// What `remove` and `list` match.
#[derive(Debug, Clone, Args)]
pub struct Selector {
    #[command(flatten)]
    resources: Resources,
    /// Only this principal's ACLs.
    #[arg(long)]
    principal: Option<String>,
    /// Only ACLs for this host.
    #[arg(long)]
    host: Option<String>,
    /// Only ACLs of this operation.
    #[arg(long)]
    operation: Option<String>,
    /// Only ALLOW or DENY ACLs.
    #[arg(long)]
    permission: Option<String>,
    /// How names match: any (the name exactly, whatever the pattern type),
    /// match (every ACL that applies to the name: literal, `*` and
    /// prefixes), literal or prefixed.
    #[arg(long, default_value = "any")]
    resource_pattern_type: String,
}

impl Selector {
    fn is_empty(&self) -> bool {
        self.resources.named().is_empty()
            && self.principal.is_none()
            && self.host.is_none()
            && self.operation.is_none()
            && self.permission.is_none()
    }

    fn filters(&self) -> anyhow::Result<Vec<AclFilter>> {
        let pattern = match self.resource_pattern_type.to_ascii_lowercase().as_str() {
            "any" => PatternFilter::Any,
            "match" => PatternFilter::Match,
            "literal" => PatternFilter::Literal,
            "prefixed" => PatternFilter::Prefixed,
            other => bail!("--resource-pattern-type {other:?}: any, match, literal or prefixed"),
        };
        let base = AclFilter {
            resource_type: None,
            resource_name: None,
            pattern,
            principal: self
                .principal
                .as_deref()
                .map(checked_principal)
                .transpose()?,
            host: self.host.clone(),
            operation: self.operation.as_deref().map(operation).transpose()?,
            permission: self.permission.as_deref().map(permission).transpose()?,
        };
        let named = self.resources.named();
        if named.is_empty() {
            return Ok(vec![base]);
        }
        Ok(named
            .into_iter()
            .map(|(rt, name)| AclFilter {
                resource_type: Some(rt),
                resource_name: Some(name),
                ..base.clone()
            })
            .collect())
    }
}

fn operation(s: &str) -> anyhow::Result<Operation> {
    Operation::from_name(s).with_context(|| {
        let names: Vec<&str> = Operation::ALL.iter().map(|o| o.name()).collect();
        format!("operation {s:?}: one of {}", names.join(", "))
    })
}

fn permission(s: &str) -> anyhow::Result<Permission> {
    match s.to_ascii_uppercase().as_str() {
        "ALLOW" => Ok(Permission::Allow),
        "DENY" => Ok(Permission::Deny),
        _ => bail!("--permission {s:?}: allow or deny"),
    }
}

fn checked_principal(p: &str) -> anyhow::Result<String> {
    match p.split_once(':') {
        Some((k, n)) if !k.is_empty() && !n.is_empty() => Ok(p.to_string()),
        _ => bail!("principal {p:?} is not of the form Type:name (User:alice, User:*)"),
    }
}

/// The bindings `add` creates.
#[allow(clippy::too_many_arguments)]
fn bindings_to_add(
    allow_principals: &[String],
    deny_principals: &[String],
    allow_hosts: &[String],
    deny_hosts: &[String],
    operations: &[String],
    producer: bool,
    consumer: bool,
    resources: &Resources,
    pattern: &str,
) -> anyhow::Result<Vec<AclBinding>> {
    let pattern = match pattern.to_ascii_lowercase().as_str() {
        "literal" => PatternType::Literal,
        "prefixed" => PatternType::Prefixed,
        other => bail!("--resource-pattern-type {other:?}: literal or prefixed"),
    };
    if allow_principals.is_empty() && deny_principals.is_empty() {
        bail!("name a principal with --allow-principal or --deny-principal");
    }
    let ops: Vec<Operation> = operations
        .iter()
        .map(|o| operation(o))
        .collect::<anyhow::Result<_>>()?;
    // (resource, operations) pairs.
    let mut grants: Vec<((ResourceType, String), Vec<Operation>)> = Vec::new();
    if !ops.is_empty() {
        let named = resources.named();
        if named.is_empty() {
            bail!("name a resource: --topic, --group, --cluster or --transactional-id");
        }
        grants.extend(named.into_iter().map(|r| (r, ops.clone())));
    }
    if producer {
        if resources.topics.is_empty() {
            bail!("--producer needs at least one --topic");
        }
        for t in &resources.topics {
            grants.push((
                (ResourceType::Topic, t.clone()),
                vec![Operation::Write, Operation::Describe, Operation::Create],
            ));
        }
        for id in &resources.transactional_ids {
            grants.push((
                (ResourceType::TransactionalId, id.clone()),
                vec![Operation::Write, Operation::Describe],
            ));
        }
        if resources.transactional_ids.is_empty() {
            grants.push((
                (ResourceType::Cluster, CLUSTER_NAME.to_string()),
                vec![Operation::IdempotentWrite],
            ));
        }
    }
    if consumer {
        if resources.topics.is_empty() || resources.groups.is_empty() {
            bail!("--consumer needs at least one --topic and one --group");
        }
        for t in &resources.topics {
            grants.push((
                (ResourceType::Topic, t.clone()),
                vec![Operation::Read, Operation::Describe],
            ));
        }
        for g in &resources.groups {
            grants.push(((ResourceType::Group, g.clone()), vec![Operation::Read]));
        }
    }
    if grants.is_empty() {
        bail!("name what to allow or deny: --operation, --producer or --consumer");
    }
    let mut out: Vec<AclBinding> = Vec::new();
    let who = allow_principals
        .iter()
        .flat_map(|p| allow_hosts.iter().map(move |h| (p, h, Permission::Allow)))
        .chain(
            deny_principals
                .iter()
                .flat_map(|p| deny_hosts.iter().map(move |h| (p, h, Permission::Deny))),
        );
    for (principal, host, permission) in who {
        let principal = checked_principal(principal)?;
        for ((rt, name), ops) in &grants {
            // The cluster is always literal.
            let pattern = if *rt == ResourceType::Cluster || name == WILDCARD {
                PatternType::Literal
            } else {
                pattern
            };
            for op in ops {
                let b = AclBinding {
                    resource_type: *rt,
                    resource_name: name.clone(),
                    pattern,
                    principal: principal.clone(),
                    host: host.clone(),
                    operation: *op,
                    permission,
                };
                b.validate()
                    .map_err(|e| anyhow::anyhow!("{}: {e}", describe(&b)))?;
                if !out.contains(&b) {
                    out.push(b);
                }
            }
        }
    }
    Ok(out)
}

fn print_table(bindings: &[AclBinding]) {
    let mut table = Table::new(&[
        "RESOURCE_TYPE",
        "NAME",
        "PATTERN",
        "PRINCIPAL",
        "HOST",
        "OPERATION",
        "PERMISSION",
    ]);
    for b in bindings {
        table.row(vec![
            b.resource_type.name().to_string(),
            b.resource_name.clone(),
            b.pattern.name().to_string(),
            b.principal.clone(),
            b.host.clone(),
            b.operation.name().to_string(),
            b.permission.name().to_string(),
        ]);
    }
    print!("{}", table.render());
}

pub async fn run(cmd: AclCommand) -> anyhow::Result<()> {
    match cmd {
        AclCommand::Add {
            conn,
            allow_principals,
            deny_principals,
            allow_hosts,
            deny_hosts,
            operations,
            producer,
            consumer,
            resources,
            resource_pattern_type,
        } => {
            let bindings = bindings_to_add(
                &allow_principals,
                &deny_principals,
                &allow_hosts,
                &deny_hosts,
                &operations,
                producer,
                consumer,
                &resources,
                &resource_pattern_type,
            )?;
            conn.connect().await?.create_acls(&bindings).await?;
            for b in &bindings {
                eprintln!("added: {}", describe(b));
            }
            Ok(())
        }
        AclCommand::Remove {
            conn,
            selector,
            all,
        } => {
            if selector.is_empty() && !all {
                bail!(
                    "no selector: this would remove every ACL; name what to remove, or give --all"
                );
            }
            let filters = selector.filters()?;
            let gone = conn.connect().await?.delete_acls(&filters).await?;
            let gone: Vec<AclBinding> = gone.into_iter().flatten().collect();
            for b in &gone {
                eprintln!("removed: {}", describe(b));
            }
            if gone.is_empty() {
                eprintln!("no ACL matched");
            }
            Ok(())
        }
        AclCommand::List { conn, selector } => {
            let mut client = conn.connect().await?;
            let mut found = Vec::new();
            for f in selector.filters()? {
                for b in client.describe_acls(&f).await? {
                    if !found.contains(&b) {
                        found.push(b);
                    }
                }
            }
            print_table(&found);
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn res(topics: &[&str], groups: &[&str], ids: &[&str]) -> Resources {
        Resources {
            topics: topics.iter().map(|s| s.to_string()).collect(),
            groups: groups.iter().map(|s| s.to_string()).collect(),
            cluster: false,
            transactional_ids: ids.iter().map(|s| s.to_string()).collect(),
        }
    }

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn producer_and_consumer_grant_what_kafka_acls_grants() {
        let p = bindings_to_add(
            &s(&["User:alice"]),
            &[],
            &s(&["*"]),
            &s(&["*"]),
            &[],
            true,
            false,
            &res(&["orders"], &[], &[]),
            "literal",
        )
        .unwrap();
        let ops: Vec<(ResourceType, Operation)> =
            p.iter().map(|b| (b.resource_type, b.operation)).collect();
        assert_eq!(
            ops,
            vec![
                (ResourceType::Topic, Operation::Write),
                (ResourceType::Topic, Operation::Describe),
                (ResourceType::Topic, Operation::Create),
                (ResourceType::Cluster, Operation::IdempotentWrite),
            ]
        );
        let c = bindings_to_add(
            &s(&["User:bob"]),
            &[],
            &s(&["*"]),
            &s(&["*"]),
            &[],
            false,
            true,
            &res(&["orders"], &["billing"], &[]),
            "prefixed",
        )
        .unwrap();
        assert_eq!(c.len(), 3);
        assert!(c.iter().all(|b| b.pattern == PatternType::Prefixed));
        assert!(
            bindings_to_add(
                &s(&["User:bob"]),
                &[],
                &s(&["*"]),
                &s(&["*"]),
                &[],
                false,
                true,
                &res(&["t"], &[], &[]),
                "literal"
            )
            .is_err(),
            "a consumer needs a group"
        );
    }

    #[test]
    fn bad_input_is_refused_before_anything_is_sent() {
        let r = res(&["t"], &[], &[]);
        let add = |principals: &[&str], ops: &[&str], pattern: &str| {
            bindings_to_add(
                &s(principals),
                &[],
                &s(&["*"]),
                &s(&["*"]),
                &s(ops),
                false,
                false,
                &r,
                pattern,
            )
        };
        assert!(add(&["alice"], &["Read"], "literal").is_err());
        assert!(add(&["User:alice"], &["Reed"], "literal").is_err());
        assert!(add(&["User:alice"], &["Read"], "glob").is_err());
        assert!(add(&[], &["Read"], "literal").is_err());
        assert!(add(&["User:alice"], &[], "literal").is_err());
        let ok = add(&["User:alice"], &["DescribeConfigs"], "literal").unwrap();
        assert_eq!(ok[0].operation, Operation::DescribeConfigs);
    }

    #[test]
    fn selectors_become_filters_one_a_resource() {
        let sel = Selector {
            resources: res(&["a", "b"], &[], &[]),
            principal: Some("User:bob".into()),
            host: None,
            operation: Some("write".into()),
            permission: Some("deny".into()),
            resource_pattern_type: "match".into(),
        };
        let f = sel.filters().unwrap();
        assert_eq!(f.len(), 2);
        assert_eq!(f[1].resource_name.as_deref(), Some("b"));
        assert_eq!(f[0].pattern, PatternFilter::Match);
        assert_eq!(f[0].permission, Some(Permission::Deny));
        let none = Selector {
            resources: Resources::default(),
            principal: None,
            host: None,
            operation: None,
            permission: None,
            resource_pattern_type: "any".into(),
        };
        assert!(none.is_empty());
        assert_eq!(none.filters().unwrap(), vec![AclFilter::any()]);
    }
}
