//! Per-role environment variables. Several roles read the same variable
//! (`FLOE_ADMIN_LISTEN` is the admin port of the broker, the proxy, the
//! indexer and the standalone), so one env file shared by two roles on one
//! host binds both to one port. Each role therefore also reads its own
//! name: `FLOE_<ROLE>_<NAME>` for the shared `FLOE_<NAME>`, where ROLE is
//! `STANDALONE`, `BROKER`, `PROXY`, `INDEXER` or `META`
//! (`FLOE_PROXY_ADMIN_LISTEN`, `FLOE_META_META_LISTEN`). The role's own
//! name wins over the shared one; a flag on the command line wins over
//! both. The shared names keep working.
//!
//! This works on the arguments before clap parses them: a role-specific
//! variable that is set becomes `--flag=value` right after the role's name.

use std::ffi::OsString;

use clap::{ArgAction, CommandFactory};

/// The roles that read per-role variables, as subcommand names.
const ROLES: &[&str] = &["standalone", "broker", "proxy", "indexer", "meta"];

/// The role-specific name of a shared variable.
pub fn role_name(role: &str, shared: &str) -> Option<String> {
    let rest = shared.strip_prefix("FLOE_")?;
    Some(format!("FLOE_{}_{rest}", role.to_ascii_uppercase()))
}

fn truthy(v: &str) -> bool {
    matches!(v.to_ascii_lowercase().as_str(), "1" | "true" | "yes" | "on")
}

/// `args` with the role-specific variables `lookup` finds turned into
/// flags. Unchanged unless `args[1]` is a role that runs (no subcommand
/// after it).
pub fn with_role_env(
    args: Vec<OsString>,
    lookup: impl Fn(&str) -> Option<String>,
) -> Vec<OsString> {
    let Some(role) = args.get(1).and_then(|a| a.to_str()).map(str::to_owned) else {
        return args;
    };
    if !ROLES.contains(&role.as_str()) {
        return args;
    }
    let cli = crate::Cli::command();
    let Some(cmd) = cli.find_subcommand(&role) else {
        return args;
    };
    let subcommands: Vec<&str> = cmd.get_subcommands().map(|s| s.get_name()).collect();
    if args
        .get(2)
        .and_then(|a| a.to_str())
        .is_some_and(|a| subcommands.contains(&a))
    {
        return args;
    }
    let given = |long: &str| {
        args.iter()
            .filter_map(|a| a.to_str())
            .any(|a| a == format!("--{long}") || a.starts_with(&format!("--{long}=")))
    };
    let mut extra: Vec<OsString> = Vec::new();
    for arg in cmd.get_arguments() {
        let (Some(env), Some(long)) = (arg.get_env(), arg.get_long()) else {
            continue;
        };
        let Some(name) = env.to_str().and_then(|e| role_name(&role, e)) else {
            continue;
        };
        let Some(value) = lookup(&name) else {
            continue;
        };
        if given(long) {
            continue;
        }
        match arg.get_action() {
            ArgAction::SetTrue => {
                if truthy(&value) {
                    extra.push(format!("--{long}").into());
                }
            }
            ArgAction::SetFalse => {
                if !truthy(&value) {
                    extra.push(format!("--{long}").into());
                }
            }
            _ => extra.push(format!("--{long}={value}").into()),
        }
    }
    let mut out: Vec<OsString> = args[..2].to_vec();
    out.extend(extra);
    out.extend(args[2..].iter().cloned());
    out
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn run(args: &[&str], env: &[(&str, &str)]) -> Vec<String> {
        let env: HashMap<String, String> = env
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        with_role_env(args.iter().map(OsString::from).collect(), |k| {
            env.get(k).cloned()
        })
        .into_iter()
        .map(|a| a.into_string().expect("utf-8"))
        .collect()
    }

    #[test]
    fn a_roles_own_variable_becomes_a_flag_unless_the_flag_is_given() {
        let env = [
            ("FLOE_PROXY_ADMIN_LISTEN", "127.0.0.1:1"),
            ("FLOE_BROKER_ADMIN_LISTEN", "127.0.0.1:2"),
        ];
        assert_eq!(
            run(&["floe", "proxy", "--meta", "m"], &env),
            ["floe", "proxy", "--admin-listen=127.0.0.1:1", "--meta", "m"]
        );
        assert_eq!(
            run(&["floe", "proxy", "--admin-listen", "x"], &env),
            ["floe", "proxy", "--admin-listen", "x"]
        );
        assert_eq!(
            run(
                &["floe", "meta", "--init"],
                &[("FLOE_META_META_LISTEN", "a:1")]
            ),
            ["floe", "meta", "--listen=a:1", "--init"]
        );
    }

    #[test]
    fn switches_tools_and_subcommands_are_handled() {
        assert_eq!(
            run(&["floe", "meta"], &[("FLOE_META_META_INIT", "true")]),
            ["floe", "meta", "--init"]
        );
        assert_eq!(
            run(&["floe", "meta"], &[("FLOE_META_META_INIT", "0")]),
            ["floe", "meta"]
        );
        let env = [("FLOE_META_META_ADDRS", "x")];
        assert_eq!(
            run(&["floe", "meta", "status"], &env),
            ["floe", "meta", "status"]
        );
        assert_eq!(
            run(&["floe", "topic", "list"], &[("FLOE_TOPIC_BOOTSTRAP", "x")]),
            ["floe", "topic", "list"]
        );
    }

    /// Every variable any command reads, with the commands reading it.
    fn all_variables(cmd: &clap::Command, out: &mut std::collections::BTreeSet<String>) {
        for a in cmd.get_arguments() {
            if let Some(e) = a.get_env().and_then(|e| e.to_str()) {
                out.insert(e.to_owned());
            }
        }
        for sub in cmd.get_subcommands() {
            all_variables(sub, out);
        }
    }

    #[test]
    fn a_role_name_never_is_a_variable_something_else_reads() {
        let cli = crate::Cli::command();
        let mut existing = std::collections::BTreeSet::new();
        all_variables(&cli, &mut existing);
        for role in ROLES {
            let cmd = cli.find_subcommand(role).expect("a role");
            for a in cmd.get_arguments() {
                let Some(e) = a.get_env().and_then(|e| e.to_str()) else {
                    continue;
                };
                let name = role_name(role, e).expect("FLOE_ names");
                assert!(
                    !existing.contains(&name),
                    "{name} (floe {role} --{:?}) is already read as itself",
                    a.get_long()
                );
            }
        }
    }

    #[test]
    fn every_role_admin_port_has_its_own_name() {
        assert_eq!(
            role_name("indexer", "FLOE_ADMIN_LISTEN").as_deref(),
            Some("FLOE_INDEXER_ADMIN_LISTEN")
        );
        assert_eq!(role_name("broker", "RUST_LOG"), None);
    }
}
