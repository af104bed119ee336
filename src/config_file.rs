//! The config file, the third way to set a role's settings beside flags and
//! environment variables: `--config-file FILE` (`FLOE_CONFIG_FILE`), a TOML
//! file whose keys are the role's flag names without the dashes:
//!
//! ```toml
//! meta = "10.0.0.1:7070,10.0.0.2:7070"   # any role that has --meta
//! flush-interval-ms = 250
//!
//! [proxy]                                # only `floe proxy`
//! admin-listen = "0.0.0.0:9646"
//! ```
//!
//! Top-level keys apply to every role that has the flag (a key no role has
//! is an error, a typo); a `[standalone]`, `[broker]`, `[proxy]`,
//! `[indexer]` or `[meta-node]` (`floe meta`) table applies to that role
//! only and wins over the top level; a key the role does not have is an
//! error there. (TOML cannot have both `meta = "…"`, the `--meta` flag,
//! and a `[meta]` table.) A flag wins over an environment variable, which
//! wins over the file. Arrays are joined with commas.
//!
//! Like [`crate::role_env`], this works on the arguments before clap parses
//! them: each setting from the file that neither a flag nor a variable
//! sets becomes `--flag=value` after the role's name.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;

use clap::{ArgAction, Command, CommandFactory};

use crate::role_env::role_name;

const ROLES: &[&str] = &["standalone", "broker", "proxy", "indexer", "meta"];
const FLAG: &str = "config-file";

/// The table of a role in the file.
fn table_name(role: &str) -> &str {
    if role == "meta" { "meta-node" } else { role }
}

/// The role subcommand `args` run, if it runs one (no tool subcommand).
fn running_role(args: &[OsString], cli: &Command) -> Option<String> {
    let role = args.get(1)?.to_str()?;
    if !ROLES.contains(&role) {
        return None;
    }
    let cmd = cli.find_subcommand(role)?;
    let next = args.get(2).and_then(|a| a.to_str());
    if next.is_some_and(|n| cmd.get_subcommands().any(|s| s.get_name() == n)) {
        return None;
    }
    Some(role.to_owned())
}

/// The value of `--long V` or `--long=V` in `args`.
fn flag_value(args: &[OsString], long: &str) -> Option<String> {
    let strs: Vec<&str> = args.iter().filter_map(|a| a.to_str()).collect();
    let eq = format!("--{long}=");
    strs.iter().enumerate().find_map(|(i, a)| {
        if let Some(v) = a.strip_prefix(&eq) {
            Some(v.to_owned())
        } else if *a == format!("--{long}") {
            strs.get(i + 1).map(|v| (*v).to_owned())
        } else {
            None
        }
    })
}

fn value_text(key: &str, v: &toml::Value) -> Result<String, String> {
    Ok(match v {
        toml::Value::String(s) => s.clone(),
        toml::Value::Integer(n) => n.to_string(),
        toml::Value::Float(f) => f.to_string(),
        toml::Value::Boolean(b) => b.to_string(),
        toml::Value::Array(items) => items
            .iter()
            .map(|i| value_text(key, i))
            .collect::<Result<Vec<_>, _>>()?
            .join(","),
        other => return Err(format!("{key}: expected a value, not {}", other.type_str())),
    })
}

/// The settings `text` gives `role`, by flag name: the top level, then the
/// role's table over it. Errors name the key and why.
pub fn settings_for(
    text: &str,
    role: &str,
    cli: &Command,
) -> Result<BTreeMap<String, String>, String> {
    let table: toml::Table = text.parse().map_err(|e| format!("not TOML: {e}"))?;
    let longs_of = |name: &str| -> BTreeSet<String> {
        cli.find_subcommand(name)
            .map(|c| {
                c.get_arguments()
                    .filter_map(|a| a.get_long().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    };
    let mine = longs_of(role);
    let anyone: BTreeSet<String> = ROLES.iter().flat_map(|r| longs_of(r)).collect();
    let mut out = BTreeMap::new();
    for (key, value) in &table {
        if ROLES.iter().any(|r| table_name(r) == key) {
            continue;
        }
        if !anyone.contains(key) {
            return Err(format!("unknown setting {key:?}: no role has --{key}"));
        }
        if mine.contains(key) && key != FLAG {
            out.insert(key.clone(), value_text(key, value)?);
        }
    }
    for r in ROLES {
        let name = table_name(r);
        match table.get(name) {
            None => {}
            Some(toml::Value::Table(t)) => {
                if *r != role {
                    continue;
                }
                for (key, value) in t {
                    if !mine.contains(key) || key == FLAG {
                        return Err(format!("[{name}] {key}: floe {role} has no --{key}"));
                    }
                    out.insert(key.clone(), value_text(key, value)?);
                }
            }
            Some(_) => return Err(format!("{name} must be a table ([{name}])")),
        }
    }
    Ok(out)
}

/// `args` with the settings of the config file (if one is named) that no
/// flag and no environment variable sets turned into flags.
pub fn with_config_file(
    args: Vec<OsString>,
    lookup: impl Fn(&str) -> Option<String>,
) -> Result<Vec<OsString>, String> {
    let cli = crate::Cli::command();
    let Some(role) = running_role(&args, &cli) else {
        return Ok(args);
    };
    let Some(path) = flag_value(&args, FLAG)
        .or_else(|| role_name(&role, "FLOE_CONFIG_FILE").and_then(|n| lookup(&n)))
        .or_else(|| lookup("FLOE_CONFIG_FILE"))
    else {
        return Ok(args);
    };
    let text = std::fs::read_to_string(&path)
        .map_err(|e| format!("cannot read the config file {path}: {e}"))?;
    let settings =
        settings_for(&text, &role, &cli).map_err(|e| format!("config file {path}: {e}"))?;
    let Some(cmd) = cli.find_subcommand(&role) else {
        return Ok(args);
    };
    let mut extra: Vec<OsString> = Vec::new();
    for arg in cmd.get_arguments() {
        let Some(long) = arg.get_long() else {
            continue;
        };
        let Some(value) = settings.get(long) else {
            continue;
        };
        if flag_value(&args, long).is_some()
            || args
                .iter()
                .any(|a| a.to_str() == Some(&format!("--{long}")))
        {
            continue;
        }
        let from_env = arg.get_env().and_then(|e| e.to_str()).is_some_and(|e| {
            lookup(e).is_some() || role_name(&role, e).is_some_and(|n| lookup(&n).is_some())
        });
        if from_env {
            continue;
        }
        match arg.get_action() {
            ArgAction::SetTrue => {
                if value == "true" {
                    extra.push(format!("--{long}").into());
                }
            }
            _ => extra.push(format!("--{long}={value}").into()),
        }
    }
    let mut out: Vec<OsString> = args[..2].to_vec();
    out.extend(extra);
    out.extend(args[2..].iter().cloned());
    Ok(out)
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn cli() -> Command {
        crate::Cli::command()
    }

    #[test]
    fn top_level_keys_apply_to_roles_that_have_them_and_role_tables_win() {
        let text = r#"
            meta = ["10.0.0.1:7070", "10.0.0.2:7070"]
            flush-interval-ms = 250
            [proxy]
            admin-listen = "0.0.0.0:9646"
            [broker]
            admin-listen = "0.0.0.0:9645"
        "#;
        let proxy = settings_for(text, "proxy", &cli()).expect("valid");
        assert_eq!(
            proxy.get("meta").map(String::as_str),
            Some("10.0.0.1:7070,10.0.0.2:7070")
        );
        assert_eq!(
            proxy.get("admin-listen").map(String::as_str),
            Some("0.0.0.0:9646")
        );
        assert_eq!(proxy.get("flush-interval-ms"), None, "not a proxy flag");
        let standalone = settings_for(text, "standalone", &cli()).expect("valid");
        assert_eq!(
            standalone.get("meta"),
            None,
            "floe standalone has no --meta"
        );
        let broker = settings_for(text, "broker", &cli()).expect("valid");
        assert_eq!(
            broker.get("flush-interval-ms").map(String::as_str),
            Some("250")
        );
        assert_eq!(
            broker.get("admin-listen").map(String::as_str),
            Some("0.0.0.0:9645")
        );
    }

    #[test]
    fn the_example_in_configuration_md_is_valid_for_every_role() {
        let doc = include_str!("../docs/configuration.md");
        let example = doc
            .split("```toml\n")
            .nth(1)
            .and_then(|rest| rest.split("```").next())
            .expect("a TOML example in configuration.md");
        for role in ROLES {
            settings_for(example, role, &cli()).unwrap_or_else(|e| panic!("{role}: {e}"));
        }
        let broker = settings_for(example, "broker", &cli()).expect("valid");
        assert_eq!(broker.get("id").map(String::as_str), Some("1"));
        assert!(broker.contains_key("store") && broker.contains_key("meta"));
    }

    #[test]
    fn typos_and_misplaced_keys_are_errors() {
        let err = settings_for("flush-intervl-ms = 1", "broker", &cli()).expect_err("typo");
        assert!(err.contains("flush-intervl-ms"), "{err}");
        let err = settings_for("[proxy]\nflush-interval-ms = 1", "proxy", &cli())
            .expect_err("not a proxy flag");
        assert!(err.contains("[proxy] flush-interval-ms"), "{err}");
        assert!(settings_for("proxy = 1", "proxy", &cli()).is_err());
        assert!(settings_for("=", "proxy", &cli()).is_err());
    }

    #[test]
    fn flags_and_variables_win_over_the_file() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let path = dir.path().join("floe.toml");
        std::fs::write(
            &path,
            "default-partitions = 5\nadmin-listen = \"f:1\"\nauto-create-topics = false\nkafka-listen = \"f:2\"\n",
        )
        .expect("written");
        let env: HashMap<&str, &str> = HashMap::from([
            ("FLOE_CONFIG_FILE", path.to_str().expect("utf-8")),
            ("FLOE_STANDALONE_KAFKA_LISTEN", "e:2"),
        ]);
        let args: Vec<OsString> = ["floe", "standalone", "--admin-listen", "a:1"]
            .iter()
            .map(OsString::from)
            .collect();
        let out = with_config_file(args, |k| env.get(k).map(|v| (*v).to_owned())).expect("applies");
        let out: Vec<String> = out
            .into_iter()
            .map(|a| a.into_string().expect("utf-8"))
            .collect();
        assert!(
            out.contains(&"--default-partitions=5".to_owned()),
            "{out:?}"
        );
        assert!(
            out.contains(&"--auto-create-topics=false".to_owned()),
            "{out:?}"
        );
        assert!(
            !out.iter().any(|a| a.contains("f:1")),
            "the flag wins: {out:?}"
        );
        assert!(
            !out.iter().any(|a| a.contains("f:2")),
            "the variable wins: {out:?}"
        );
    }
}
