//! The `outbox-relay` command line (CONTRACT §4).

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

/// Publishes committed outbox events to Kafka or RabbitMQ as CloudEvents.
#[derive(Debug, Parser)]
#[command(name = "outbox-relay", version, about, long_about = None)]
pub struct Cli {
    /// Log format on stderr.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text, env = "OUTBOX_LOG_FORMAT")]
    pub log_format: LogFormat,

    /// The command to run.
    #[command(subcommand)]
    pub command: Command,
}

/// Log output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// The database to work on.
#[derive(Debug, Args)]
pub struct DatabaseArgs {
    /// `postgres://`, `mysql://` or `sqlite://` URL. Falls back to
    /// `OUTBOX_DATABASE_URL`, then `DATABASE_URL`, then `sqlite://outbox.db`.
    #[arg(long)]
    pub database_url: Option<String>,
}

/// `outbox-relay` subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the relay until SIGTERM or SIGINT.
    Run {
        /// The database.
        #[command(flatten)]
        database: DatabaseArgs,
        /// `kafka://host:port[,host:port...]`, `amqp://user:pass@host:port/vhost`,
        /// `amqps://...` or `stdout`. Falls back to `OUTBOX_BROKER`, then `stdout`.
        #[arg(long)]
        broker: Option<String>,
        /// TOML configuration file; every field has a default.
        #[arg(long)]
        config: Option<PathBuf>,
        /// Do not apply the outbox migrations before starting.
        #[arg(long)]
        skip_migrate: bool,
    },
    /// Create or upgrade the outbox tables.
    Migrate {
        /// The database.
        #[command(flatten)]
        database: DatabaseArgs,
    },
    /// Show pending, retrying, dead and published counts and live leases.
    Status {
        /// The database.
        #[command(flatten)]
        database: DatabaseArgs,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// List, retry or discard dead events.
    Dead {
        /// What to do.
        #[command(subcommand)]
        action: DeadAction,
    },
}

/// Which dead events a command applies to: exactly one of the three.
#[derive(Debug, Args)]
#[group(required = true, multiple = false)]
pub struct DeadSelection {
    /// One event, by its event id.
    #[arg(long)]
    pub event_id: Option<String>,
    /// Every dead event of one aggregate, written `TYPE:ID` (e.g. `order:42`).
    #[arg(long)]
    pub aggregate: Option<String>,
    /// Every dead event.
    #[arg(long)]
    pub all: bool,
}

/// `outbox-relay dead` actions.
#[derive(Debug, Subcommand)]
pub enum DeadAction {
    /// List dead events with their last error.
    List {
        /// The database.
        #[command(flatten)]
        database: DatabaseArgs,
        /// Which events; all of them when omitted.
        #[arg(long)]
        event_id: Option<String>,
        /// Only this aggregate, written `TYPE:ID`.
        #[arg(long, conflicts_with = "event_id")]
        aggregate: Option<String>,
        /// Most events listed.
        #[arg(long, default_value_t = 100)]
        limit: i64,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Make dead events pending again, with a fresh attempt count.
    Retry {
        /// The database.
        #[command(flatten)]
        database: DatabaseArgs,
        /// Which events.
        #[command(flatten)]
        selection: DeadSelection,
    },
    /// Delete dead events for good.
    Discard {
        /// The database.
        #[command(flatten)]
        database: DatabaseArgs,
        /// Which events.
        #[command(flatten)]
        selection: DeadSelection,
    },
}
