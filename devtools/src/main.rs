//! `floe-dev`: test and load drivers for Floe's developers, kept out of the
//! `floe` binary that users run.
//!
//! These commands write made-up data to the cluster they are pointed at: a
//! fake broker 1 at 127.0.0.1:9092 with a one-hour lease, which then owns
//! every partition the controller hands out, and test topics. Point them at
//! throw-away clusters only.

mod meta;

use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "floe-dev",
    version,
    about = "Floe's test and load drivers (never against a real cluster: they register a fake broker)"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Drive a metadata cluster: a commit stream for failover tests, a benchmark.
    #[command(subcommand)]
    Meta(meta::MetaCommand),
}

fn main() -> std::process::ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("floe-dev: cannot start the async runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        match cli.command {
            Command::Meta(cmd) => meta::run(cmd).await,
        }
    });
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("floe-dev: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
