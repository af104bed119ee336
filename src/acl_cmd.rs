//! `floe acl …`: ACLs over the Kafka protocol, as `kafka-acls.sh` manages
//! them (CreateAcls, DescribeAcls, DeleteAcls; docs/security.md#acls).
//! Every name is checked here before anything is sent: a principal without
//! its `Type:`, an operation or pattern type Kafka does not have, an
//! operation the resource type does not know, or a removal with no
//! selector (which would remove every ACL) is refused.

#![allow(clippy::print_stdout)]

use std::collections::{BTreeSet, HashSet};

use anyhow::{Context as _, bail};
use clap::{Args, Subcommand, ValueEnum};
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
    #[arg(long = "topic", value_name = "TOPIC")]
    pub topics: Vec<String>,
    /// A group (repeat for several; `*`: every group).
    #[arg(long = "group", value_name = "GROUP")]
    pub groups: Vec<String>,
    /// The cluster itself (`kafka-cluster`).
    #[arg(long)]
    pub cluster: bool,
    /// A transactional id (repeat for several; `*`: every one).
    #[arg(long = "transactional-id", value_name = "ID")]
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

/// The subcommands of `floe acl`.
#[derive(Debug, Subcommand)]
pub enum AclCommand {
    /// Add ACLs (CreateAcls): each principal × host × operation × resource
    /// named. Needs ALTER on the cluster.
    Add(AddArgs),
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
        /// One JSON object per ACL instead of a table.
        #[arg(long)]
        json: bool,
    },
}

/// `floe acl add`.
#[derive(Debug, Args)]
pub struct AddArgs {
    #[command(flatten)]
    conn: BootstrapArgs,
    /// A principal to allow (`User:alice`, `User:*` for everyone; repeat
    /// for several).
    #[arg(long = "allow-principal", value_name = "PRINCIPAL", value_parser = principal)]
    allow_principals: Vec<String>,
    /// A principal to deny; a DENY wins over any ALLOW.
    #[arg(long = "deny-principal", value_name = "PRINCIPAL", value_parser = principal)]
    deny_principals: Vec<String>,
    /// Hosts (IP addresses) the allowed principals may come from.
    #[arg(long = "allow-host", value_name = "HOST", default_value = WILDCARD)]
    allow_hosts: Vec<String>,
    /// Hosts the denied principals are denied from.
    #[arg(long = "deny-host", value_name = "HOST", default_value = WILDCARD)]
    deny_hosts: Vec<String>,
    /// An operation (repeat for several): All, Read, Write, Create, Delete,
    /// Alter, Describe, ClusterAction, DescribeConfigs, AlterConfigs,
    /// IdempotentWrite.
    #[arg(long = "operation", value_name = "OPERATION", value_parser = operation)]
    operations: Vec<Operation>,
    /// What a producer needs: WRITE, DESCRIBE and CREATE on the topics;
    /// WRITE and DESCRIBE on the transactional ids given, else
    /// IDEMPOTENT_WRITE on the cluster.
    #[arg(long)]
    producer: bool,
    /// What a consumer needs: READ and DESCRIBE on the topics, READ on the
    /// groups (at least one --group).
    #[arg(long)]
    consumer: bool,
    #[command(flatten)]
    resources: Resources,
    /// How the names match: literal (`*` for every name) or prefixed (every
    /// name starting with it). The cluster and `*` are always literal.
    #[arg(long, value_enum, ignore_case = true, default_value_t = PatternArg::Literal)]
    resource_pattern_type: PatternArg,
}

/// `--resource-pattern-type` of `add`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PatternArg {
    Literal,
    Prefixed,
}

impl From<PatternArg> for PatternType {
    fn from(p: PatternArg) -> Self {
        match p {
            PatternArg::Literal => PatternType::Literal,
            PatternArg::Prefixed => PatternType::Prefixed,
        }
    }
}

/// `--resource-pattern-type` of `remove` and `list`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PatternFilterArg {
    // (The meanings are in the flag's help, which docs/cli.md shows.)
    Any,
    Match,
    Literal,
    Prefixed,
}

impl From<PatternFilterArg> for PatternFilter {
    fn from(p: PatternFilterArg) -> Self {
        match p {
            PatternFilterArg::Any => PatternFilter::Any,
            PatternFilterArg::Match => PatternFilter::Match,
            PatternFilterArg::Literal => PatternFilter::Literal,
            PatternFilterArg::Prefixed => PatternFilter::Prefixed,
        }
    }
}

/// `--permission`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PermissionArg {
    Allow,
    Deny,
}

impl From<PermissionArg> for Permission {
    fn from(p: PermissionArg) -> Self {
        match p {
            PermissionArg::Allow => Permission::Allow,
            PermissionArg::Deny => Permission::Deny,
        }
    }
}

/// What `remove` and `list` match.
#[derive(Debug, Clone, Args)]
pub struct Selector {
    #[command(flatten)]
    resources: Resources,
    /// Only this principal's ACLs (`User:alice`).
    #[arg(long, value_name = "PRINCIPAL", value_parser = principal)]
    principal: Option<String>,
    /// Only ACLs for this host.
    #[arg(long, value_name = "HOST")]
    host: Option<String>,
    /// Only ACLs of this operation (All, Read, Write, Create, Delete,
    /// Alter, Describe, ClusterAction, DescribeConfigs, AlterConfigs,
    /// IdempotentWrite).
    #[arg(long, value_name = "OPERATION", value_parser = operation)]
    operation: Option<Operation>,
    /// Only ALLOW or DENY ACLs.
    #[arg(long, value_enum, ignore_case = true)]
    permission: Option<PermissionArg>,
    /// How names match: any (the name exactly, whatever the pattern type),
    /// match (every ACL that applies to the name: literal, `*` and
    /// prefixes), literal or prefixed.
    #[arg(long, value_enum, ignore_case = true, default_value_t = PatternFilterArg::Any)]
    resource_pattern_type: PatternFilterArg,
}

impl Selector {
    /// Whether nothing narrows the selection (the pattern type alone does
    /// not count: it still matches nearly every ACL).
    fn is_empty(&self) -> bool {
        self.resources.named().is_empty()
            && self.principal.is_none()
            && self.host.is_none()
            && self.operation.is_none()
            && self.permission.is_none()
    }

    /// The filters: one per resource named, or one for every resource.
    fn filters(&self) -> Vec<AclFilter> {
        let base = AclFilter {
            resource_type: None,
            resource_name: None,
            pattern: self.resource_pattern_type.into(),
            principal: self.principal.clone(),
            host: self.host.clone(),
            operation: self.operation,
            permission: self.permission.map(Permission::from),
        };
        let named = self.resources.named();
        if named.is_empty() {
            return vec![base];
        }
        named
            .into_iter()
            .map(|(rt, name)| AclFilter {
                resource_type: Some(rt),
                resource_name: Some(name),
                ..base.clone()
            })
            .collect()
    }
}

/// An operation by name (`Read`, `READ`, `DescribeConfigs`,
/// `describe_configs`); an unknown one lists the valid names.
fn operation(s: &str) -> anyhow::Result<Operation> {
    Operation::from_name(s)
        .with_context(|| format!("unknown operation {s:?}: one of {}", names(&Operation::ALL)))
}

fn names(ops: &[Operation]) -> String {
    ops.iter().map(|o| o.name()).collect::<Vec<_>>().join(", ")
}

/// A principal, which must be `Type:name` (`User:alice`, `User:*`).
fn principal(p: &str) -> anyhow::Result<String> {
    match p.split_once(':') {
        Some((kind, name)) if !kind.is_empty() && !name.is_empty() => Ok(p.to_string()),
        _ => bail!("principal {p:?} is not of the form Type:name (User:alice, User:*)"),
    }
}

/// The operations an ACL on a resource type can name, Kafka's lists
/// (`kafka-acls.sh` refuses the others; the proxy asks no other).
pub(crate) fn operations_of(rt: ResourceType) -> &'static [Operation] {
    use Operation as O;
    match rt {
        ResourceType::Topic => &[
            O::All,
            O::Read,
            O::Write,
            O::Create,
            O::Delete,
            O::Alter,
            O::Describe,
            O::DescribeConfigs,
            O::AlterConfigs,
        ],
        // Group configs (KIP-848): DescribeConfigs and AlterConfigs on a group.
        ResourceType::Group => &[
            O::All,
            O::Read,
            O::Delete,
            O::Describe,
            O::DescribeConfigs,
            O::AlterConfigs,
        ],
        ResourceType::Cluster => &[
            O::All,
            O::Create,
            O::Alter,
            O::Describe,
            O::ClusterAction,
            O::DescribeConfigs,
            O::AlterConfigs,
            O::IdempotentWrite,
        ],
        ResourceType::TransactionalId => &[O::All, O::Write, O::Describe],
    }
}

/// Operations on one resource.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Grant {
    resource_type: ResourceType,
    name: String,
    pattern: PatternType,
    operations: Vec<Operation>,
}

impl Grant {
    /// A grant, refused when the type does not know an operation; the
    /// cluster and `*` are literal whatever `pattern` says.
    fn new(
        resource_type: ResourceType,
        name: &str,
        pattern: PatternType,
        operations: &[Operation],
    ) -> anyhow::Result<Self> {
        let valid = operations_of(resource_type);
        if let Some(op) = operations.iter().find(|o| !valid.contains(o)) {
            bail!(
                "{} {name}: operation {} does not apply to a {}; one of {}",
                resource_type.name(),
                op.name(),
                resource_type.name(),
                names(valid)
            );
        }
        let literal = resource_type == ResourceType::Cluster || name == WILDCARD;
        Ok(Grant {
            resource_type,
            name: name.to_string(),
            pattern: if literal {
                PatternType::Literal
            } else {
                pattern
            },
            operations: operations.to_vec(),
        })
    }
}

/// What --operation grants: its operations on every resource named.
fn operation_grants(a: &AddArgs, pattern: PatternType) -> anyhow::Result<Vec<Grant>> {
    if a.operations.is_empty() {
        return Ok(Vec::new());
    }
    let named = a.resources.named();
    if named.is_empty() {
        bail!("--operation needs a resource: --topic, --group, --cluster or --transactional-id");
    }
    named
        .iter()
        .map(|(rt, name)| Grant::new(*rt, name, pattern, &a.operations))
        .collect()
}

/// What --producer grants, as `kafka-acls.sh --producer`.
fn producer_grants(r: &Resources, pattern: PatternType) -> anyhow::Result<Vec<Grant>> {
    use Operation as O;
    if r.topics.is_empty() {
        bail!("--producer needs at least one --topic");
    }
    let mut out = Vec::new();
    for t in &r.topics {
        let ops = [O::Write, O::Describe, O::Create];
        out.push(Grant::new(ResourceType::Topic, t, pattern, &ops)?);
    }
    for id in &r.transactional_ids {
        let ops = [O::Write, O::Describe];
        out.push(Grant::new(
            ResourceType::TransactionalId,
            id,
            pattern,
            &ops,
        )?);
    }
    if r.transactional_ids.is_empty() {
        let ops = [O::IdempotentWrite];
        out.push(Grant::new(
            ResourceType::Cluster,
            CLUSTER_NAME,
            pattern,
            &ops,
        )?);
    }
    Ok(out)
}

/// What --consumer grants, as `kafka-acls.sh --consumer`.
fn consumer_grants(r: &Resources, pattern: PatternType) -> anyhow::Result<Vec<Grant>> {
    use Operation as O;
    if r.topics.is_empty() || r.groups.is_empty() {
        bail!("--consumer needs at least one --topic and one --group");
    }
    let mut out = Vec::new();
    for t in &r.topics {
        let ops = [O::Read, O::Describe];
        out.push(Grant::new(ResourceType::Topic, t, pattern, &ops)?);
    }
    for g in &r.groups {
        out.push(Grant::new(ResourceType::Group, g, pattern, &[O::Read])?);
    }
    Ok(out)
}

/// Everything `add` grants, on which resources.
fn grants(a: &AddArgs) -> anyhow::Result<Vec<Grant>> {
    let pattern = PatternType::from(a.resource_pattern_type);
    let mut out = operation_grants(a, pattern)?;
    if a.producer {
        out.extend(producer_grants(&a.resources, pattern)?);
    }
    if a.consumer {
        out.extend(consumer_grants(&a.resources, pattern)?);
    }
    if out.is_empty() {
        bail!("name what to allow or deny: --operation, --producer or --consumer");
    }
    Ok(out)
}

/// Each principal from each host, with `permission`.
fn pairs<'a>(
    principals: &'a [String],
    hosts: &'a [String],
    permission: Permission,
) -> impl Iterator<Item = (&'a str, &'a str, Permission)> {
    principals.iter().flat_map(move |p| {
        hosts
            .iter()
            .map(move |h| (p.as_str(), h.as_str(), permission))
    })
}

/// Who `add` is about: each principal from each of its hosts, allowed or
/// denied.
fn who(a: &AddArgs) -> impl Iterator<Item = (&str, &str, Permission)> {
    pairs(&a.allow_principals, &a.allow_hosts, Permission::Allow).chain(pairs(
        &a.deny_principals,
        &a.deny_hosts,
        Permission::Deny,
    ))
}

/// The bindings `add` creates, each once, in the order named.
fn bindings_to_add(a: &AddArgs) -> anyhow::Result<Vec<AclBinding>> {
    if a.allow_principals.is_empty() && a.deny_principals.is_empty() {
        bail!("name a principal with --allow-principal or --deny-principal");
    }
    let grants = grants(a)?;
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    for (principal, host, permission) in who(a) {
        for g in &grants {
            for op in &g.operations {
                let b = AclBinding {
                    resource_type: g.resource_type,
                    resource_name: g.name.clone(),
                    pattern: g.pattern,
                    principal: principal.to_string(),
                    host: host.to_string(),
                    operation: *op,
                    permission,
                };
                b.validate()
                    .map_err(|e| anyhow::anyhow!("{}: {e}", describe(&b)))?;
                if seen.insert(b.clone()) {
                    out.push(b);
                }
            }
        }
    }
    Ok(out)
}

/// The cells of a row: type, name, pattern, principal, host, operation,
/// permission.
fn cells(b: &AclBinding) -> [(&'static str, String); 7] {
    [
        ("resource_type", b.resource_type.name().to_string()),
        ("name", b.resource_name.clone()),
        ("pattern", b.pattern.name().to_string()),
        ("principal", b.principal.clone()),
        ("host", b.host.clone()),
        ("operation", b.operation.name().to_string()),
        ("permission", b.permission.name().to_string()),
    ]
}

fn table(bindings: &BTreeSet<AclBinding>) -> String {
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
        table.row(cells(b).into_iter().map(|(_, v)| v).collect());
    }
    table.render()
}

/// An ACL as one JSON object, keyed by the table's columns in lower case.
fn json(b: &AclBinding) -> serde_json::Value {
    cells(b)
        .into_iter()
        .map(|(k, v)| (k.to_string(), serde_json::Value::String(v)))
        .collect::<serde_json::Map<_, _>>()
        .into()
}

async fn add(a: AddArgs) -> anyhow::Result<()> {
    let bindings = bindings_to_add(&a)?;
    a.conn.connect().await?.create_acls(&bindings).await?;
    for b in &bindings {
        println!("added: {}", describe(b));
    }
    Ok(())
}

async fn remove(conn: BootstrapArgs, selector: Selector, all: bool) -> anyhow::Result<()> {
    if selector.is_empty() && !all {
        bail!(
            "no selector: this would remove every ACL; name what to remove \
             (--topic, --group, --cluster, --transactional-id, --principal, --host, \
             --operation, --permission), or give --all"
        );
    }
    let gone = conn
        .connect()
        .await?
        .delete_acls(&selector.filters())
        .await?;
    let gone: Vec<AclBinding> = gone.into_iter().flatten().collect();
    for b in &gone {
        println!("removed: {}", describe(b));
    }
    if gone.is_empty() {
        eprintln!("no ACL matched");
    }
    Ok(())
}

async fn list(conn: BootstrapArgs, selector: Selector, as_json: bool) -> anyhow::Result<()> {
    let mut client = conn.connect().await?;
    let mut found = BTreeSet::new();
    for f in selector.filters() {
        found.extend(client.describe_acls(&f).await?);
    }
    if as_json {
        for b in &found {
            println!("{}", json(b));
        }
    } else {
        print!("{}", table(&found));
    }
    Ok(())
}

/// Runs one `floe acl` subcommand.
pub async fn run(cmd: AclCommand) -> anyhow::Result<()> {
    match cmd {
        AclCommand::Add(a) => add(a).await,
        AclCommand::Remove {
            conn,
            selector,
            all,
        } => remove(conn, selector, all).await,
        AclCommand::List {
            conn,
            selector,
            json,
        } => list(conn, selector, json).await,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use clap::Parser;

    use super::*;

    use Operation as O;
    use ResourceType as R;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(subcommand)]
        cmd: AclCommand,
    }

    fn parse(args: &[&str]) -> Result<AclCommand, clap::Error> {
        Cli::try_parse_from(std::iter::once("acl").chain(args.iter().copied())).map(|c| c.cmd)
    }

    /// The bindings `floe acl add ARGS` creates, or why it refuses.
    fn add(args: &[&str]) -> anyhow::Result<Vec<AclBinding>> {
        let mut all = vec!["add"];
        all.extend(args);
        match parse(&all)? {
            AclCommand::Add(a) => bindings_to_add(&a),
            other => panic!("not add: {other:?}"),
        }
    }

    fn selector(args: &[&str]) -> (Selector, bool) {
        let mut all = vec!["remove"];
        all.extend(args);
        match parse(&all).unwrap() {
            AclCommand::Remove { selector, all, .. } => (selector, all),
            other => panic!("not remove: {other:?}"),
        }
    }

    fn ops(bs: &[AclBinding]) -> Vec<(ResourceType, &str, Operation)> {
        bs.iter()
            .map(|b| (b.resource_type, b.resource_name.as_str(), b.operation))
            .collect()
    }

    #[test]
    fn producer_and_consumer_grant_what_kafka_acls_grants() {
        let p = add(&[
            "--allow-principal",
            "User:alice",
            "--producer",
            "--topic",
            "orders",
        ])
        .unwrap();
        assert_eq!(
            ops(&p),
            vec![
                (R::Topic, "orders", O::Write),
                (R::Topic, "orders", O::Describe),
                (R::Topic, "orders", O::Create),
                (R::Cluster, CLUSTER_NAME, O::IdempotentWrite),
            ]
        );
        assert!(
            p.iter()
                .all(|b| b.host == "*" && b.permission == Permission::Allow)
        );
        let t = add(&[
            "--allow-principal",
            "User:alice",
            "--producer",
            "--topic",
            "orders",
            "--transactional-id",
            "tx-",
            "--resource-pattern-type",
            "PREFIXED",
        ])
        .unwrap();
        assert_eq!(
            ops(&t)[3..],
            [
                (R::TransactionalId, "tx-", O::Write),
                (R::TransactionalId, "tx-", O::Describe),
            ]
        );
        assert!(t.iter().all(|b| b.pattern == PatternType::Prefixed));
        let c = add(&[
            "--allow-principal",
            "User:bob",
            "--consumer",
            "--topic",
            "orders",
            "--group",
            "billing",
            "--resource-pattern-type",
            "prefixed",
        ])
        .unwrap();
        assert_eq!(
            ops(&c),
            vec![
                (R::Topic, "orders", O::Read),
                (R::Topic, "orders", O::Describe),
                (R::Group, "billing", O::Read),
            ]
        );
        assert!(c.iter().all(|b| b.pattern == PatternType::Prefixed));
        let e = add(&[
            "--allow-principal",
            "User:bob",
            "--consumer",
            "--topic",
            "t",
        ]);
        assert!(e.unwrap_err().to_string().contains("--group"));
        let e = add(&[
            "--allow-principal",
            "User:bob",
            "--producer",
            "--group",
            "g",
        ]);
        assert!(e.unwrap_err().to_string().contains("--topic"));
    }

    #[test]
    fn flags_make_a_cross_product_each_binding_once() {
        let bs = add(&[
            "--allow-principal",
            "User:a",
            "--allow-principal",
            "User:b",
            "--allow-host",
            "10.0.0.1",
            "--deny-principal",
            "User:c",
            "--operation",
            "read",
            "--operation",
            "Describe",
            "--operation",
            "READ",
            "--topic",
            "t1",
            "--topic",
            "t2",
            "--group",
            "g",
        ])
        .unwrap();
        // (2 allowed + 1 denied) × (t1, t2, g) × (READ, DESCRIBE).
        assert_eq!(bs.len(), 3 * 3 * 2);
        let denied: Vec<&AclBinding> = bs
            .iter()
            .filter(|b| b.permission == Permission::Deny)
            .collect();
        assert_eq!(denied.len(), 6);
        assert!(
            denied
                .iter()
                .all(|b| b.principal == "User:c" && b.host == "*")
        );
        assert!(
            bs.iter()
                .filter(|b| b.permission == Permission::Allow)
                .all(|b| b.host == "10.0.0.1")
        );
        // The cluster and `*` stay literal under --resource-pattern-type prefixed.
        let bs = add(&[
            "--allow-principal",
            "User:*",
            "--operation",
            "All",
            "--cluster",
            "--topic",
            "*",
            "--topic",
            "team-",
            "--resource-pattern-type",
            "prefixed",
        ])
        .unwrap();
        let patterns: Vec<(&str, PatternType)> = bs
            .iter()
            .map(|b| (b.resource_name.as_str(), b.pattern))
            .collect();
        assert_eq!(
            patterns,
            vec![
                ("*", PatternType::Literal),
                ("team-", PatternType::Prefixed),
                (CLUSTER_NAME, PatternType::Literal),
            ]
        );
    }

    #[test]
    fn bad_input_is_refused_before_anything_is_sent() {
        let err = |args: &[&str]| add(args).unwrap_err().to_string();
        let e = err(&[
            "--allow-principal",
            "alice",
            "--operation",
            "Read",
            "--topic",
            "t",
        ]);
        assert!(e.contains("Type:name"), "{e}");
        let e = err(&[
            "--deny-principal",
            ":bob",
            "--operation",
            "Read",
            "--topic",
            "t",
        ]);
        assert!(e.contains("Type:name"), "{e}");
        let e = err(&[
            "--allow-principal",
            "User:a",
            "--operation",
            "Reed",
            "--topic",
            "t",
        ]);
        assert!(e.contains("IDEMPOTENT_WRITE") && e.contains("Reed"), "{e}");
        let e = err(&[
            "--allow-principal",
            "User:a",
            "--operation",
            "Read",
            "--topic",
            "t",
            "--resource-pattern-type",
            "glob",
        ]);
        assert!(e.contains("literal") && e.contains("prefixed"), "{e}");
        let e = err(&["--operation", "Read", "--topic", "t"]);
        assert!(e.contains("--allow-principal"), "{e}");
        let e = err(&["--allow-principal", "User:a", "--topic", "t"]);
        assert!(e.contains("--operation"), "{e}");
        let e = err(&["--allow-principal", "User:a", "--operation", "Read"]);
        assert!(e.contains("--topic"), "{e}");
        let e = err(&[
            "--allow-principal",
            "User:a",
            "--operation",
            "Write",
            "--group",
            "g",
        ]);
        assert!(
            e.contains("does not apply to a GROUP") && e.contains("READ"),
            "{e}"
        );
        let e = err(&[
            "--allow-principal",
            "User:a",
            "--operation",
            "Read",
            "--topic",
            "",
        ]);
        assert!(e.contains("empty"), "{e}");
        let e = err(&[
            "--allow-principal",
            "User:a",
            "--allow-host",
            "",
            "--operation",
            "Read",
            "--topic",
            "t",
        ]);
        assert!(e.contains("host"), "{e}");
        let ok = add(&[
            "--allow-principal",
            "User:alice",
            "--operation",
            "DescribeConfigs",
            "--topic",
            "t",
        ])
        .unwrap();
        assert_eq!(ok[0].operation, O::DescribeConfigs);
        assert_eq!(ok[0].pattern, PatternType::Literal);
    }

    #[test]
    fn selectors_become_filters_one_a_resource() {
        let (sel, _) = selector(&[
            "--topic",
            "a",
            "--topic",
            "b",
            "--principal",
            "User:bob",
            "--operation",
            "write",
            "--permission",
            "DENY",
            "--resource-pattern-type",
            "match",
        ]);
        let f = sel.filters();
        assert_eq!(f.len(), 2);
        assert_eq!(f[0].resource_type, Some(R::Topic));
        assert_eq!(f[1].resource_name.as_deref(), Some("b"));
        assert_eq!(f[0].pattern, PatternFilter::Match);
        assert_eq!(f[0].operation, Some(O::Write));
        assert_eq!(f[0].permission, Some(Permission::Deny));
        assert_eq!(f[0].principal.as_deref(), Some("User:bob"));
        assert_eq!(f[0].host, None);
        let (cluster, _) = selector(&["--cluster", "--host", "10.0.0.1"]);
        let f = cluster.filters();
        assert_eq!(f[0].resource_name.as_deref(), Some(CLUSTER_NAME));
        assert_eq!(f[0].pattern, PatternFilter::Any);
        assert_eq!(f[0].host.as_deref(), Some("10.0.0.1"));
    }

    #[test]
    fn a_removal_needs_a_selector_or_all() {
        let (none, all) = selector(&[]);
        assert!(none.is_empty() && !all);
        assert_eq!(none.filters(), vec![AclFilter::any()]);
        let (pattern_only, _) = selector(&["--resource-pattern-type", "prefixed"]);
        assert!(
            pattern_only.is_empty(),
            "a pattern type alone is no selector"
        );
        let (_, all) = selector(&["--all"]);
        assert!(all);
        assert!(!selector(&["--principal", "User:x"]).0.is_empty());
        assert!(!selector(&["--permission", "allow"]).0.is_empty());
        assert!(parse(&["remove", "--principal", "bob"]).is_err());
        assert!(parse(&["list", "--operation", "fly"]).is_err());
        assert!(parse(&["list", "--resource-pattern-type", "MATCH", "--json"]).is_ok());
    }

    #[test]
    fn lists_are_tables_or_json_lines() {
        let b = AclBinding {
            resource_type: R::Topic,
            resource_name: "orders".into(),
            pattern: PatternType::Prefixed,
            principal: "User:alice".into(),
            host: "*".into(),
            operation: O::Write,
            permission: Permission::Allow,
        };
        let text = table(&BTreeSet::from([b.clone()]));
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[0].split_whitespace().collect::<Vec<_>>(),
            [
                "RESOURCE_TYPE",
                "NAME",
                "PATTERN",
                "PRINCIPAL",
                "HOST",
                "OPERATION",
                "PERMISSION"
            ]
        );
        assert_eq!(
            lines[1].split_whitespace().collect::<Vec<_>>(),
            [
                "TOPIC",
                "orders",
                "PREFIXED",
                "User:alice",
                "*",
                "WRITE",
                "ALLOW"
            ]
        );
        let v = json(&b);
        assert_eq!(v.as_object().map(|o| o.len()), Some(7));
        for (k, want) in [
            ("resource_type", "TOPIC"),
            ("name", "orders"),
            ("pattern", "PREFIXED"),
            ("principal", "User:alice"),
            ("host", "*"),
            ("operation", "WRITE"),
            ("permission", "ALLOW"),
        ] {
            assert_eq!(v[k], want, "{k}");
        }
    }
}
