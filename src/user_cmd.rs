//! `floe user …`: SCRAM users over the Kafka protocol, as
//! `kafka-configs.sh --entity-type users --alter --add-config
//! 'SCRAM-SHA-512=[password=…]'` manages them (AlterUserScramCredentials,
//! DescribeUserScramCredentials). The password is read from a file, an
//! environment variable or standard input, never from a flag (it would show
//! in `ps`), and is salted and hashed before it is sent.

#![allow(clippy::print_stdout)]

use std::io::BufRead as _;
use std::path::PathBuf;

use anyhow::{Context as _, bail};
use clap::Subcommand;
use floe_metadata::scram::ScramMechanism;

use crate::kafka_args::BootstrapArgs;
use crate::table::Table;

#[derive(Debug, Subcommand)]
pub enum UserCommand {
    /// Create a SCRAM user, or set a new password for one
    /// (AlterUserScramCredentials). The password comes from
    /// --password-file, FLOE_USER_PASSWORD, or the first line of stdin.
    Create {
        #[command(flatten)]
        conn: BootstrapArgs,
        /// The user name.
        name: String,
        /// SCRAM-SHA-256 or SCRAM-SHA-512; repeat for both.
        #[arg(long = "mechanism", default_value = "SCRAM-SHA-512")]
        mechanisms: Vec<String>,
        /// Rounds of the password's hashing (4096 to 16384).
        #[arg(long, default_value_t = 8192)]
        iterations: u32,
        /// A file whose first line is the password.
        #[arg(long, value_name = "FILE")]
        password_file: Option<PathBuf>,
    },
    /// Delete a user's credentials: those of --mechanism, or all it has.
    Delete {
        #[command(flatten)]
        conn: BootstrapArgs,
        /// The user name.
        name: String,
        /// SCRAM-SHA-256 or SCRAM-SHA-512 (default: every mechanism the user has).
        #[arg(long = "mechanism")]
        mechanisms: Vec<String>,
    },
    /// List users with their mechanisms and iteration counts
    /// (DescribeUserScramCredentials); every user for none named.
    List {
        #[command(flatten)]
        conn: BootstrapArgs,
        /// The users (default: all).
        names: Vec<String>,
    },
}

fn mechanisms(names: &[String]) -> anyhow::Result<Vec<ScramMechanism>> {
    names
        .iter()
        .map(|n| {
            ScramMechanism::from_name(n)
                .with_context(|| format!("--mechanism {n:?}: SCRAM-SHA-256 or SCRAM-SHA-512"))
        })
        .collect()
}

/// The password: from the file, the environment, or stdin's first line.
fn password(file: Option<&PathBuf>, env: Option<String>) -> anyhow::Result<String> {
    let line = match (file, env) {
        (Some(f), _) => std::fs::read_to_string(f)
            .with_context(|| format!("cannot read {}", f.display()))?
            .lines()
            .next()
            .unwrap_or_default()
            .to_string(),
        (None, Some(p)) => p,
        (None, None) => {
            let mut line = String::new();
            std::io::stdin()
                .lock()
                .read_line(&mut line)
                .context("reading the password from stdin")?;
            line.trim_end_matches(['\r', '\n']).to_string()
        }
    };
    if line.is_empty() {
        bail!("the password is empty (give it with --password-file, FLOE_USER_PASSWORD or stdin)");
    }
    Ok(line)
}

pub async fn run(cmd: UserCommand) -> anyhow::Result<()> {
    match cmd {
        UserCommand::Create {
            conn,
            name,
            mechanisms: names,
            iterations,
            password_file,
        } => {
            let mechs = mechanisms(&names)?;
            let pw = password(
                password_file.as_ref(),
                std::env::var("FLOE_USER_PASSWORD").ok(),
            )?;
            let mut client = conn.connect().await?;
            for m in mechs {
                client.upsert_user(&name, m, &pw, iterations).await?;
                eprintln!("user {name}: {} set", m.name());
            }
            Ok(())
        }
        UserCommand::Delete {
            conn,
            name,
            mechanisms: names,
        } => {
            let mut client = conn.connect().await?;
            let mut mechs = mechanisms(&names)?;
            if mechs.is_empty() {
                mechs = client
                    .describe_users(std::slice::from_ref(&name))
                    .await?
                    .iter()
                    .filter_map(|c| ScramMechanism::from_name(&c.mechanism))
                    .collect();
            }
            client.delete_user(&name, &mechs).await?;
            eprintln!("user {name}: deleted");
            Ok(())
        }
        UserCommand::List { conn, names } => {
            let creds = conn.connect().await?.describe_users(&names).await?;
            let mut table = Table::new(&["USER", "MECHANISM", "ITERATIONS"]);
            for c in creds {
                table.row(vec![c.user, c.mechanism, c.iterations.to_string()]);
            }
            print!("{}", table.render());
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn the_password_comes_from_a_file_or_the_environment_and_is_never_empty() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("pw");
        std::fs::write(&f, "s3cret\nignored\n").unwrap();
        assert_eq!(password(Some(&f), Some("env".into())).unwrap(), "s3cret");
        assert_eq!(password(None, Some("env".into())).unwrap(), "env");
        std::fs::write(&f, "\n").unwrap();
        assert!(password(Some(&f), None).is_err());
        assert!(password(Some(&dir.path().join("missing")), None).is_err());
    }

    #[test]
    fn mechanisms_are_kafkas_names() {
        assert_eq!(
            mechanisms(&["SCRAM-SHA-256".into(), "SCRAM-SHA-512".into()]).unwrap(),
            [ScramMechanism::Sha256, ScramMechanism::Sha512]
        );
        assert!(mechanisms(&["PLAIN".into()]).is_err());
    }
}
