//! docs/cli.md, the CLI reference, generated from the clap definitions: a
//! test fails when the file is stale, so flags, environment variables and
//! defaults cannot drift from the docs. Regenerate with
//! `FLOE_BLESS_DOCS=1 cargo test -p floe cli_reference`.

use clap::{Arg, ArgAction, Command, CommandFactory};

const HEADER: &str = "# CLI reference

<!-- Generated from the clap definitions by `src/cli_reference.rs`; do not edit.
     Regenerate: FLOE_BLESS_DOCS=1 cargo test -p floe cli_reference -->

Every command of the `floe` binary with its flags. A flag with an
environment variable may be set either way (the flag wins); the rules for
the variables shared between roles are in
[configuration.md](configuration.md#environment-variables-shared-between-roles).
`RUST_LOG` sets the log filter of every command (see configuration.md).
";

fn cell(s: &str) -> String {
    s.replace('|', "\\|").replace('\n', " ")
}

/// How an argument is written: `--name <VALUE>`, `--flag`, or `<NAME>`.
fn spelling(a: &Arg) -> String {
    let value = a
        .get_value_names()
        .and_then(|v| v.first())
        .map(|v| v.to_string())
        .unwrap_or_else(|| a.get_id().as_str().to_uppercase());
    let takes_value = !matches!(
        a.get_action(),
        ArgAction::SetTrue | ArgAction::SetFalse | ArgAction::Count
    );
    match (a.get_long(), a.get_short()) {
        (Some(long), short) => {
            let short = short.map(|s| format!("-{s}, ")).unwrap_or_default();
            if takes_value {
                format!("`{short}--{long} <{value}>`")
            } else {
                format!("`{short}--{long}`")
            }
        }
        (None, Some(short)) => format!("`-{short}`"),
        (None, None) => format!("`<{value}>`"),
    }
}

fn describe(a: &Arg) -> String {
    let mut help = a
        .get_long_help()
        .or_else(|| a.get_help())
        .map(|h| h.to_string())
        .unwrap_or_default()
        .trim()
        .to_owned();
    let sentence = |help: &mut String, more: &str| {
        if !help.is_empty() && !help.ends_with('.') {
            help.push('.');
        }
        if !help.is_empty() {
            help.push(' ');
        }
        help.push_str(more);
    };
    let values: Vec<String> = a
        .get_possible_values()
        .iter()
        .filter(|v| !v.is_hide_set())
        .map(|v| format!("`{}`", v.get_name()))
        .collect();
    if !values.is_empty() && !matches!(a.get_action(), ArgAction::SetTrue | ArgAction::SetFalse) {
        sentence(&mut help, &format!("One of {}.", values.join(", ")));
    }
    if a.is_required_set() {
        sentence(&mut help, "Required.");
    }
    cell(help.trim())
}

fn render(cmd: &mut Command, path: &str, out: &mut String) {
    let name = if path.is_empty() {
        cmd.get_name().to_owned()
    } else {
        format!("{path} {}", cmd.get_name())
    };
    out.push_str(&format!("\n## {name}\n\n"));
    if let Some(about) = cmd.get_long_about().or_else(|| cmd.get_about()) {
        out.push_str(&format!("{}\n\n", about.to_string().trim()));
    }
    let usage = cmd.render_usage().to_string();
    out.push_str(&format!(
        "```text\n{}\n```\n",
        usage.trim_start_matches("Usage: ").trim()
    ));
    let args: Vec<&Arg> = cmd
        .get_arguments()
        .filter(|a| !a.is_hide_set())
        .filter(|a| !matches!(a.get_id().as_str(), "help" | "version"))
        .collect();
    if !args.is_empty() {
        out.push_str("\n| flag | env | default | meaning |\n|---|---|---|---|\n");
        for a in args {
            let env = a
                .get_env()
                .map(|e| format!("`{}`", e.to_string_lossy()))
                .unwrap_or_default();
            let default: Vec<String> = a
                .get_default_values()
                .iter()
                .map(|d| d.to_string_lossy().into_owned())
                .collect();
            let default = if default.is_empty() {
                String::new()
            } else {
                format!("`{}`", default.join(","))
            };
            out.push_str(&format!(
                "| {} | {env} | {} | {} |\n",
                spelling(a),
                cell(&default),
                describe(a)
            ));
        }
    }
    let subs: Vec<String> = cmd
        .get_subcommands()
        .filter(|s| !s.is_hide_set() && s.get_name() != "help")
        .map(|s| s.get_name().to_owned())
        .collect();
    for sub in subs {
        if let Some(s) = cmd.find_subcommand_mut(&sub) {
            render(s, &name, out);
        }
    }
}

/// The reference as Markdown.
pub fn reference() -> String {
    let mut cmd = crate::Cli::command();
    cmd.build();
    let mut out = HEADER.to_owned();
    render(&mut cmd, "", &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cli_reference_matches_the_clap_definitions() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/cli.md");
        let want = reference();
        if std::env::var_os("FLOE_BLESS_DOCS").is_some() {
            std::fs::write(&path, &want).expect("writing docs/cli.md");
            return;
        }
        let have = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            have == want,
            "docs/cli.md is stale: regenerate it with \
             `FLOE_BLESS_DOCS=1 cargo test -p floe cli_reference` and commit it"
        );
    }

    /// The metric names in a crate's sources: string literals `"floe_…"`.
    fn metric_names(dir: &std::path::Path, out: &mut std::collections::BTreeSet<String>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for e in entries.flatten() {
            let path = e.path();
            if path.is_dir() {
                metric_names(&path, out);
            } else if path.extension().is_some_and(|x| x == "rs") {
                let text = std::fs::read_to_string(&path).unwrap_or_default();
                for (i, _) in text.match_indices("\"floe_") {
                    let rest = &text[i + 1..];
                    let name: String = rest
                        .chars()
                        .take_while(|c| c.is_ascii_lowercase() || *c == '_')
                        .collect();
                    if rest[name.len()..].starts_with('"') {
                        out.insert(name);
                    }
                }
            }
        }
    }

    #[test]
    fn every_metric_in_the_code_is_in_configuration_md() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut names = std::collections::BTreeSet::new();
        for dir in [
            "broker/src",
            "proxy/src",
            "storage/src",
            "metadata/src",
            "indexer/src",
        ] {
            metric_names(&root.join(dir), &mut names);
        }
        assert!(names.len() > 20, "found only {names:?}");
        let doc = std::fs::read_to_string(root.join("docs/configuration.md")).unwrap_or_default();
        let missing: Vec<&String> = names
            .iter()
            .filter(|n| !doc.contains(&format!("`{n}`")))
            .collect();
        assert!(
            missing.is_empty(),
            "metrics not in docs/configuration.md's table: {missing:?}"
        );
    }

    #[test]
    fn every_command_and_environment_variable_is_in_the_reference() {
        let r = reference();
        for needle in [
            "## floe group reset-offsets",
            "## floe topic add-partitions",
            "`FLOE_BOOTSTRAP`",
            "`--to-datetime <TIME>`",
        ] {
            assert!(r.contains(needle), "{needle} missing");
        }
    }
}
