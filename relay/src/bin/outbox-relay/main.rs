//! `outbox-relay`: see `outbox-relay --help` and the command line in
//! `docs/operations.md`.

use std::io::IsTerminal;
use std::process::ExitCode;

use clap::Parser;
mod args;
mod commands;

use args::{Cli, LogFormat};
use tracing_subscriber::EnvFilter;

/// The binary's allocator. A relay allocates and frees a few dozen small
/// buffers per event (rows, CloudEvents attributes, broker records) across
/// the runtime's threads; glibc's malloc spent about a third of the relay's
/// CPU on that (`docs/benchmarks-history.md`). The library leaves the choice to the
/// program that embeds it.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(error) => return usage_error(&error),
    };
    init_tracing(cli.log_format);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("outbox-relay: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(commands::execute(cli.command));
    // Every task the relay spawned has ended by now (`run` waits for its
    // `Tasks`); what is left are the clients' own (a pool's upkeep), which
    // stop here, so nothing logs after the line that says why it exits.
    runtime.shutdown_timeout(std::time::Duration::from_secs(1));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("outbox-relay: {error}");
            ExitCode::FAILURE
        }
    }
}

/// Print clap's error on one line (help and version print as usual).
fn usage_error(error: &clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    if matches!(
        error.kind(),
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion
    ) {
        let _ = error.print();
        return ExitCode::SUCCESS;
    }
    if error.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
        let _ = error.print();
        return ExitCode::from(2);
    }
    eprintln!(
        "outbox-relay: {} (see outbox-relay --help)",
        one_line(&error.to_string())
    );
    ExitCode::from(2)
}

/// The first line of clap's message; a line ending in `:` (such as "the
/// following required arguments were not provided:") takes the indented
/// lines after it, so the message names the argument.
fn one_line(rendered: &str) -> String {
    let mut lines = rendered.lines().skip_while(|line| line.trim().is_empty());
    let first_line = lines
        .next()
        .unwrap_or("invalid arguments")
        .trim_start_matches("error: ")
        .to_owned();
    if !first_line.ends_with(':') {
        return first_line;
    }
    let listed: Vec<&str> = lines
        .take_while(|line| line.starts_with(' ') && !line.trim().is_empty())
        .map(str::trim)
        .collect();
    format!("{first_line} {}", listed.join(", "))
}

fn init_tracing(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    // Colours only on a terminal: log files and collectors get plain text.
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}
