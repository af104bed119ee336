//! `kafka-acls.sh`: add, remove and list ACLs with Kafka's flags, printed
//! as Kafka's AclCommand prints them; the bindings are `floe acl`'s
//! (floe_metadata::acl), checked against the operations each resource type
//! takes (`acl_cmd::operations_of`).

use std::collections::{BTreeMap, BTreeSet};

use anyhow::bail;
use floe_metadata::acl::{
    AclBinding, AclFilter, CLUSTER_NAME, Operation, PatternFilter, PatternType, Permission,
    ResourceType, WILDCARD,
};

use super::{Arity, Parsed, Spec};

const V: Arity = Arity::Value;
const S: Arity = Arity::Switch;

pub const SPEC: Spec = Spec {
    flags: &[
        ("bootstrap-server", V),
        ("command-config", V),
        ("add", S),
        ("remove", S),
        ("list", S),
        ("allow-principal", V),
        ("deny-principal", V),
        ("allow-host", V),
        ("deny-host", V),
        ("principal", V),
        ("operation", V),
        ("topic", V),
        ("group", V),
        ("cluster", S),
        ("transactional-id", V),
        ("resource-pattern-type", V),
        ("producer", S),
        ("consumer", S),
        ("idempotent", S),
        ("force", S),
        ("help", S),
    ],
    unsupported: &[
        ("delegation-token", "Floe has no delegation tokens"),
        ("user-principal", "Floe has no delegation tokens"),
        (
            "authorizer",
            "ACLs are managed through the Kafka protocol: use --bootstrap-server",
        ),
        (
            "authorizer-properties",
            "ACLs are managed through the Kafka protocol: use --bootstrap-server",
        ),
    ],
};

/// A resource pattern (or, for --list and --remove, a pattern filter).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resource {
    pub resource_type: ResourceType,
    pub name: String,
    pub pattern: PatternFilter,
}

impl Ord for Resource {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.resource_type, &self.name, self.pattern.code()).cmp(&(
            other.resource_type,
            &other.name,
            other.pattern.code(),
        ))
    }
}

impl PartialOrd for Resource {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

fn pattern_name(p: PatternFilter) -> &'static str {
    match p {
        PatternFilter::Any => "ANY",
        PatternFilter::Match => "MATCH",
        PatternFilter::Literal => "LITERAL",
        PatternFilter::Prefixed => "PREFIXED",
    }
}

impl std::fmt::Display for Resource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "ResourcePattern(resourceType={}, name={}, patternType={})",
            self.resource_type.name(),
            self.name,
            pattern_name(self.pattern)
        )
    }
}

/// An access control entry: who, from where, what, allowed or denied.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Entry {
    pub principal: String,
    pub host: String,
    pub operation: Operation,
    pub permission: Permission,
}

impl std::fmt::Display for Entry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "(principal={}, host={}, operation={}, permissionType={})",
            self.principal,
            self.host,
            self.operation.name(),
            self.permission.name()
        )
    }
}

fn pattern_filter(s: &str) -> anyhow::Result<PatternFilter> {
    Ok(match s.trim().to_ascii_uppercase().as_str() {
        "LITERAL" => PatternFilter::Literal,
        "PREFIXED" => PatternFilter::Prefixed,
        "ANY" => PatternFilter::Any,
        "MATCH" => PatternFilter::Match,
        other => bail!("--resource-pattern-type {other}: LITERAL, PREFIXED, ANY or MATCH"),
    })
}

fn principal(p: &str) -> anyhow::Result<String> {
    match p.trim().split_once(':') {
        Some((kind, name)) if !kind.is_empty() && !name.is_empty() => Ok(p.trim().to_owned()),
        _ => bail!("principal {p:?} is not of the form principalType:name (User:alice, User:*)"),
    }
}

/// The resources named (Kafka's resource filters).
pub fn resources(p: &Parsed, pattern: PatternFilter) -> Vec<Resource> {
    let mut out = Vec::new();
    let named = |rt: ResourceType, names: &[String]| {
        names
            .iter()
            .map(move |n| Resource {
                resource_type: rt,
                name: n.trim().to_owned(),
                pattern,
            })
            .collect::<Vec<_>>()
    };
    out.extend(named(ResourceType::Topic, p.values("topic")));
    if pattern == PatternFilter::Literal && (p.has("cluster") || p.has("idempotent")) {
        out.push(Resource {
            resource_type: ResourceType::Cluster,
            name: CLUSTER_NAME.to_owned(),
            pattern,
        });
    }
    out.extend(named(ResourceType::Group, p.values("group")));
    out.extend(named(
        ResourceType::TransactionalId,
        p.values("transactional-id"),
    ));
    out
}

/// The entries of the principals and hosts given, for `operations`.
fn entries(p: &Parsed, operations: &[Operation]) -> anyhow::Result<BTreeSet<Entry>> {
    let mut out = BTreeSet::new();
    for (principals, hosts, permission) in [
        ("allow-principal", "allow-host", Permission::Allow),
        ("deny-principal", "deny-host", Permission::Deny),
    ] {
        let who = p.values(principals);
        let from: Vec<String> = if p.has(hosts) {
            p.values(hosts)
                .iter()
                .map(|h| h.trim().to_owned())
                .collect()
        } else {
            vec![WILDCARD.to_owned()]
        };
        for w in who {
            let w = principal(w)?;
            for h in &from {
                for op in operations {
                    out.insert(Entry {
                        principal: w.clone(),
                        host: h.clone(),
                        operation: *op,
                        permission,
                    });
                }
            }
        }
    }
    Ok(out)
}

/// The entries of --add and --remove, per resource: --producer and
/// --consumer's operations, or those of --operation (default All).
pub fn resource_entries(
    p: &Parsed,
    pattern: PatternFilter,
) -> anyhow::Result<BTreeMap<Resource, BTreeSet<Entry>>> {
    use Operation as O;
    let all = resources(p, pattern);
    if all.is_empty() {
        bail!(
            "You must provide at least one resource: --topic <topic> or --cluster or --group <group> or --transactional-id <id>"
        );
    }
    let of = |rt: ResourceType| all.iter().filter(move |r| r.resource_type == rt);
    let mut out: BTreeMap<Resource, BTreeSet<Entry>> = BTreeMap::new();
    let (producer, consumer) = (p.has("producer"), p.has("consumer"));
    if producer {
        if p.values("topic").is_empty() {
            bail!("With --producer you must specify a --topic");
        }
        for r in of(ResourceType::Topic) {
            out.entry(r.clone())
                .or_default()
                .extend(entries(p, &[O::Write, O::Describe, O::Create])?);
        }
        for r in of(ResourceType::TransactionalId) {
            out.entry(r.clone())
                .or_default()
                .extend(entries(p, &[O::Write, O::Describe])?);
        }
        if p.has("idempotent") {
            for r in of(ResourceType::Cluster) {
                out.entry(r.clone())
                    .or_default()
                    .extend(entries(p, &[O::IdempotentWrite])?);
            }
        }
    }
    if consumer {
        if p.values("topic").is_empty() || p.values("group").is_empty() {
            bail!("With --consumer you must specify a --topic and a --group");
        }
        for r in of(ResourceType::Topic) {
            out.entry(r.clone())
                .or_default()
                .extend(entries(p, &[O::Read, O::Describe])?);
        }
        for r in of(ResourceType::Group) {
            out.entry(r.clone())
                .or_default()
                .extend(entries(p, &[O::Read])?);
        }
    }
    if !producer && !consumer {
        let ops: Vec<Operation> = if p.has("operation") {
            p.values("operation")
                .iter()
                .map(|o| {
                    Operation::from_name(o.trim()).ok_or_else(|| {
                        anyhow::anyhow!(
                            "unknown operation {o:?}: {}",
                            Operation::ALL
                                .iter()
                                .map(|o| o.name())
                                .collect::<Vec<_>>()
                                .join(", ")
                        )
                    })
                })
                .collect::<anyhow::Result<_>>()?
        } else {
            vec![O::All]
        };
        let e = entries(p, &ops)?;
        for r in &all {
            out.insert(r.clone(), e.clone());
        }
    }
    for (r, es) in &out {
        let valid = crate::acl_cmd::operations_of(r.resource_type);
        if let Some(bad) = es.iter().find(|e| !valid.contains(&e.operation)) {
            bail!(
                "ResourceType {} only supports operations {} (not {})",
                r.resource_type.name(),
                valid
                    .iter()
                    .map(|o| o.name())
                    .collect::<Vec<_>>()
                    .join(", "),
                bad.operation.name()
            );
        }
    }
    Ok(out)
}

/// Kafka's block of a resource and its entries.
pub fn block(head: &str, entries: &BTreeSet<Entry>) -> String {
    let lines: Vec<String> = entries.iter().map(|e| format!("\t{e}")).collect();
    format!("{head}: \n {} \n", lines.join("\n"))
}

fn binding(r: &Resource, e: &Entry) -> anyhow::Result<AclBinding> {
    let pattern = match r.pattern {
        PatternFilter::Literal => PatternType::Literal,
        PatternFilter::Prefixed => PatternType::Prefixed,
        other => bail!(
            "A '--resource-pattern-type' value of '{}' is not valid when adding acls.",
            pattern_name(other)
        ),
    };
    Ok(AclBinding {
        resource_type: r.resource_type,
        resource_name: r.name.clone(),
        pattern,
        principal: e.principal.clone(),
        host: e.host.clone(),
        operation: e.operation,
        permission: e.permission,
    })
}

fn resource_filter(r: &Resource) -> AclFilter {
    AclFilter {
        resource_type: Some(r.resource_type),
        resource_name: Some(r.name.clone()),
        pattern: r.pattern,
        ..AclFilter::any()
    }
}

pub async fn run(args: &[String]) -> anyhow::Result<()> {
    let Some(p) = super::parse_or_help("kafka-acls.sh", &SPEC, args)? else {
        return Ok(());
    };
    let action = p.action(&["add", "remove", "list"])?;
    if !p.has("bootstrap-server") {
        bail!("--bootstrap-server must be specified");
    }
    let pattern = pattern_filter(p.value("resource-pattern-type").unwrap_or("LITERAL"))?;
    if action == "list" {
        p.refuse(
            &[
                "producer",
                "consumer",
                "allow-principal",
                "deny-principal",
                "operation",
            ],
            "list",
        )?;
    } else {
        p.refuse(&["principal"], action)?;
    }
    // Checked before connecting.
    let planned = match action {
        "list" => BTreeMap::new(),
        _ => resource_entries(&p, pattern)?,
    };
    if action == "add" && planned.values().any(BTreeSet::is_empty) {
        bail!(
            "You must specify one of: --allow-principal, --deny-principal when trying to add ACLs."
        );
    }
    let props =
        super::client_properties(&p.values("command-config").iter().collect::<Vec<_>>(), &[])?;
    let mut client = super::connection(&p, &[], &props)?.connect().await?;
    match action {
        "add" => {
            for (r, es) in &planned {
                println!("{}", block(&format!("Adding ACLs for resource `{r}`"), es));
                let bindings = es
                    .iter()
                    .map(|e| binding(r, e))
                    .collect::<anyhow::Result<Vec<_>>>()?;
                client.create_acls(&bindings).await?;
            }
            Ok(())
        }
        "remove" => {
            for (r, es) in &planned {
                let question = if es.is_empty() {
                    format!(
                        "Are you sure you want to delete all ACLs for resource filter `{r}`? (y/n)"
                    )
                } else {
                    let lines: Vec<String> = es.iter().map(|e| format!("\t{e}")).collect();
                    format!(
                        "Are you sure you want to remove ACLs: \n {} \n from resource filter `{r}`? (y/n)",
                        lines.join("\n")
                    )
                };
                if !p.has("force") && !super::confirmed(&question) {
                    continue;
                }
                let base = resource_filter(r);
                let filters: Vec<AclFilter> = if es.is_empty() {
                    vec![base]
                } else {
                    es.iter()
                        .map(|e| AclFilter {
                            principal: Some(e.principal.clone()),
                            host: Some(e.host.clone()),
                            operation: Some(e.operation),
                            permission: Some(e.permission),
                            ..base.clone()
                        })
                        .collect()
                };
                client.delete_acls(&filters).await?;
            }
            Ok(())
        }
        _ => {
            let wanted = resources(&p, pattern);
            let filters = if wanted.is_empty() {
                vec![AclFilter::any()]
            } else {
                wanted.iter().map(resource_filter).collect()
            };
            let mut found: BTreeMap<Resource, BTreeSet<Entry>> = BTreeMap::new();
            for f in &filters {
                for b in client.describe_acls(f).await? {
                    let r = Resource {
                        resource_type: b.resource_type,
                        name: b.resource_name.clone(),
                        pattern: match b.pattern {
                            PatternType::Literal => PatternFilter::Literal,
                            PatternType::Prefixed => PatternFilter::Prefixed,
                        },
                    };
                    found.entry(r).or_default().insert(Entry {
                        principal: b.principal,
                        host: b.host,
                        operation: b.operation,
                        permission: b.permission,
                    });
                }
            }
            let principals: Vec<String> = p
                .values("principal")
                .iter()
                .map(|s| principal(s))
                .collect::<anyhow::Result<_>>()?;
            if principals.is_empty() {
                for (r, es) in &found {
                    println!("{}", block(&format!("Current ACLs for resource `{r}`"), es));
                }
            }
            for who in &principals {
                println!("ACLs for principal `{who}`");
                for (r, es) in &found {
                    let mine: BTreeSet<Entry> =
                        es.iter().filter(|e| e.principal == *who).cloned().collect();
                    if !mine.is_empty() {
                        println!(
                            "{}",
                            block(&format!("Current ACLs for resource `{r}`"), &mine)
                        );
                    }
                }
            }
            Ok(())
        }
    }
}
