//! The `outbox-relay` command line, described in `docs/operations.md`
//! (Command line).

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

use outbox_relay::config::EventSourceKind;

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

/// Where committed events come from.
#[derive(Debug, Args)]
pub struct EventSourceArgs {
    /// `poll` reads the table under partition leases (every backend);
    /// `logical` streams `outbox_events` inserts from a PostgreSQL
    /// replication slot. Falls back to `OUTBOX_SOURCE`, then the config
    /// file's `source`, then `poll`.
    #[arg(long, env = "OUTBOX_SOURCE", value_parser = source_parser())]
    pub source: Option<EventSourceKind>,
    /// The replication slot of `--source logical` (the publication has the
    /// same name); both are created when missing. Falls back to
    /// `OUTBOX_SLOT`, then the config file's `slot`, then `outbox_relay`.
    #[arg(long, env = "OUTBOX_SLOT")]
    pub slot: Option<String>,
}

/// Who may act on the operators' page (`/ui`): named tokens. Without any,
/// the page is read-only.
#[derive(Args)]
pub struct UiTokenArgs {
    /// A token of the operators' page's actions, `NAME=SECRET` (the name
    /// is logged as who acted); repeat for more. Also read from
    /// `OUTBOX_UI_TOKEN` (pairs separated by commas). A command line is
    /// visible to other users of the host: prefer `--ui-token-file`.
    #[arg(long = "ui-token", value_name = "NAME=SECRET")]
    pub ui_token: Vec<String>,
    /// A file of tokens of the operators' page, one `NAME=SECRET` a line;
    /// blank lines and lines starting with `#` are skipped.
    #[arg(long, value_name = "PATH")]
    pub ui_token_file: Option<PathBuf>,
}

impl std::fmt::Debug for UiTokenArgs {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("UiTokenArgs")
            .field("ui_token", &format_args!("{} given", self.ui_token.len()))
            .field("ui_token_file", &self.ui_token_file)
            .finish()
    }
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
        /// `amqps://...`, `redis://...`, `nats://host:port[,host:port...]` or
        /// `stdout`. Falls back to `OUTBOX_BROKER`, then `stdout`.
        #[arg(long)]
        broker: Option<String>,
        /// TOML configuration file; every field has a default.
        #[arg(long)]
        config: Option<PathBuf>,
        /// Do not apply the outbox migrations before starting.
        #[arg(long)]
        skip_migrate: bool,
        /// Where committed events come from.
        #[command(flatten)]
        events: EventSourceArgs,
        /// Who may act on the operators' page (`/ui` on the HTTP endpoint).
        #[command(flatten)]
        ui_tokens: UiTokenArgs,
    },
    /// Serve the operators' page (`/ui`) of a database, with no relay in
    /// this process, until SIGTERM or SIGINT.
    ///
    /// The page shows the table's counts per topic, the oldest pending
    /// event, the live relays and their leases, the logical slot's lag
    /// (`--source logical`) and the dead events grouped by their error;
    /// with a token, it retries and discards dead events. The broker's
    /// state is unknown here (a relay's own endpoint shows it).
    Ui {
        /// The database.
        #[command(flatten)]
        database: DatabaseArgs,
        /// The address to listen on. Keep it on loopback and put a reverse
        /// proxy with TLS in front to reach it from elsewhere.
        #[arg(long, default_value = "127.0.0.1:9091")]
        listen: SocketAddr,
        /// Where the relays find committed events: `logical` shows the
        /// slot's lag and retained WAL.
        #[command(flatten)]
        events: EventSourceArgs,
        /// Who may act on the page.
        #[command(flatten)]
        ui_tokens: UiTokenArgs,
    },
    /// Create or upgrade the outbox tables; with `--source logical`, also
    /// the replication slot and its publication.
    Migrate {
        /// The database.
        #[command(flatten)]
        database: DatabaseArgs,
        /// Where committed events come from.
        #[command(flatten)]
        events: EventSourceArgs,
    },
    /// Show event counts, per-topic counts and the live partition leases.
    ///
    /// pending: events not yet published (waiting to retry included).
    /// retrying: pending events that failed at least once. in flight:
    /// pending events due now (not waiting for a retry) in a partition held
    /// by a live lease, i.e. what the relays are publishing now or will fetch
    /// next; events held back behind a failed event of their aggregate count
    /// too. dead: events that used up their attempts. published: published
    /// events retention has not deleted yet. Times are UTC on the database's
    /// clock.
    ///
    /// `--json` prints one object with the fields `pending`, `retrying`,
    /// `in_flight`, `dead`, `published`, `oldest_pending_at` (RFC 3339 or
    /// null), `oldest_pending_age_seconds` (or null), `leased_partitions`,
    /// `partitions`, `live_relays`, `topics` (`topic`, `pending`,
    /// `retrying`, `dead`, `published`; by topic) and `leases`
    /// (`partition_no`, `owner`, `lease_token`, `expires_at`; by
    /// partition; on PostgreSQL, partition -1 is the logical source's
    /// stream lease) and `slots` (PostgreSQL: the logical source's
    /// replication slots, each with `slot`, `confirmed_flush_lsn`,
    /// `confirmed_position`, `lag_bytes`, `retained_wal_bytes`, `active`
    /// and `wal_status`; empty elsewhere), `source` (`poll` or `logical`),
    /// `stream_owned` and `slot_backlogs`.
    ///
    /// With `--source logical` a streamed event published without a write
    /// stays a pending row until retention deletes it, so pending, in
    /// flight and the oldest pending event count only the events the table
    /// path owns and has not published (failed and waiting for a retry,
    /// held behind one, or handed over by `recover-slot`), and the slots'
    /// backlogs not yet handed to the table path; `stream_owned` (null
    /// when polling) counts the pending rows the stream publishes without
    /// writing them: already published, or still ahead in the slot (its
    /// `lag_bytes` tells how much WAL that is). `slot_backlogs` (null when
    /// polling) lists each slot's backlog still to publish, the events
    /// committed before the slot existed: `slot`, `remaining`,
    /// `not_handed_over` and `oldest_at`.
    Status {
        /// The database.
        #[command(flatten)]
        database: DatabaseArgs,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
        /// How the relays find committed events, as for `run`: `logical`
        /// counts as the logical source publishes. Falls back to
        /// `OUTBOX_SOURCE`, then `poll`.
        #[arg(long, env = "OUTBOX_SOURCE", value_parser = source_parser())]
        source: Option<EventSourceKind>,
    },
    /// Recover from a replication slot PostgreSQL invalidated
    /// (`--source logical`), with every relay on the slot stopped.
    ///
    /// Takes the stream's lease (refused while a live relay holds it),
    /// drops the slot if PostgreSQL invalidated it (`wal_status = lost`)
    /// and creates it again; a slot that is not invalidated is kept. Then
    /// hands to the relays' table path every event created from `--since`
    /// until the new slot existed that only the stream could have
    /// published: once started, the relays publish those again from the
    /// table, with their event ids and as ordinary events (not replays),
    /// each aggregate in id order and before its newer events, retrying
    /// failures as usual. Every event is published by the new slot or from
    /// the table, or both; the ones published again are those created since
    /// `--since` that the old slot had published already. Writes no event
    /// to a broker itself; safe to run again.
    RecoverSlot {
        /// The database (PostgreSQL).
        #[command(flatten)]
        database: DatabaseArgs,
        /// The replication slot (and publication). Falls back to
        /// `OUTBOX_SLOT`, then `outbox_relay`.
        #[arg(long, env = "OUTBOX_SLOT")]
        slot: Option<String>,
        /// Publish again the events created at or after this time: RFC 3339
        /// (`2026-11-30T10:00:00Z`) or a duration ago (`2h`, `30m`, `7d`).
        /// Pick it before the slot stopped moving, less the longest
        /// transaction of the producers.
        #[arg(long)]
        since: String,
    },
    /// Switch from `--source logical` back to polling, with every relay on
    /// the slot stopped.
    ///
    /// Takes the stream's lease (refused while a live relay holds it) and
    /// peeks at the slot, confirming nothing, for the events it would
    /// still send. The other streamed events of the transactions finished
    /// when it started are marked published, as polling marks them; every
    /// other event stays pending, so the polling relays publish it (at
    /// least once). Then drops the slot and its publication, so the slot
    /// keeps no more WAL. Events of the failure path are left to polling
    /// as they are. Producers may go on writing. Writes no event to a
    /// broker; safe to run again. Start the relays with `--source poll`
    /// afterwards.
    LeaveLogical {
        /// The database (PostgreSQL).
        #[command(flatten)]
        database: DatabaseArgs,
        /// The replication slot (and publication). Falls back to
        /// `OUTBOX_SLOT`, then `outbox_relay`.
        #[arg(long, env = "OUTBOX_SLOT")]
        slot: Option<String>,
    },
    /// Publish already published events of one topic again.
    ///
    /// Re-publishes the events of `--topic` that are published and were
    /// created at or after `--since` (and before `--until`, by default the
    /// moment the replay starts), in id order, `batch_size` at a time, with
    /// their original event ids and every event of one aggregate after the
    /// previous one is acknowledged. Each carries the CloudEvents extension
    /// attribute `outboxreplay` = `true` (Kafka header `ce_outboxreplay`,
    /// AMQP header `cloudEvents:outboxreplay`). Pending and dead events are
    /// not replayed. With `--source logical` the streamed events the broker
    /// acknowledged are replayed too (their rows stay pending): those
    /// committed before the newest retention checkpoint the slot has
    /// confirmed; the replay says how many newer ones it left out. Nothing
    /// in the database changes and no lease is taken,
    /// so it can run beside a live relay. It stops at the first event the
    /// broker does not take, with a non-zero exit naming how many events
    /// were replayed before it.
    Replay {
        /// The database.
        #[command(flatten)]
        database: DatabaseArgs,
        /// As for `run`: `kafka://...`, `amqp://...`, `amqps://...`,
        /// `redis://...`, `nats://...` or `stdout`. Falls back to
        /// `OUTBOX_BROKER`, then `stdout`.
        #[arg(long)]
        broker: Option<String>,
        /// TOML configuration file, as for `run` (broker options and
        /// `batch_size`, the page size).
        #[arg(long)]
        config: Option<PathBuf>,
        /// The topic (or exchange) whose events to replay.
        #[arg(long, value_parser = clap::builder::NonEmptyStringValueParser::new())]
        topic: String,
        /// Replay events created at or after this time: RFC 3339
        /// (`2026-11-30T10:00:00Z`) or a duration ago (`2h`, `30m`, `7d`).
        #[arg(long)]
        since: String,
        /// Replay events created before this time, written as `--since`.
        /// Default: when the replay starts.
        #[arg(long)]
        until: Option<String>,
        /// How the relays find committed events, as for `run`.
        #[command(flatten)]
        events: EventSourceArgs,
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

/// `--source`: `poll` or `logical`, listed in `--help`.
fn source_parser() -> impl clap::builder::TypedValueParser<Value = EventSourceKind> {
    use clap::builder::TypedValueParser;
    clap::builder::PossibleValuesParser::new([
        EventSourceKind::Poll.as_str(),
        EventSourceKind::Logical.as_str(),
    ])
    .map(|name| {
        if name == EventSourceKind::Logical.as_str() {
            EventSourceKind::Logical
        } else {
            EventSourceKind::Poll
        }
    })
}

#[cfg(test)]
mod tests {
    /// The synopsis in `docs/operations.md` is the one CLI reference: it lists
    /// every command and every flag the binary takes, and nothing else.
    #[test]
    fn the_documented_synopsis_matches_the_command_line() {
        let documented = documented_synopsis();
        let defined = defined_synopsis();
        assert_eq!(
            documented.keys().collect::<Vec<_>>(),
            defined.keys().collect::<Vec<_>>(),
            "the commands in docs/operations.md (Command line) against the binary's"
        );
        for (path, flags) in &defined {
            assert_eq!(
                &documented[path], flags,
                "the flags of `outbox-relay {path}` in docs/operations.md (Command line) against the binary's"
            );
        }
    }

    /// The long flags of each command path in the synopsis of
    /// `docs/operations.md` ("Command line"), by path (`dead list`, `run`).
    fn documented_synopsis()
    -> std::collections::BTreeMap<String, std::collections::BTreeSet<String>> {
        let operations = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../docs/operations.md"
        ))
        .expect("read docs/operations.md");
        let section = operations
            .split("\n## Command line\n")
            .nth(1)
            .and_then(|rest| rest.split("\n## ").next())
            .expect("docs/operations.md has a \"Command line\" section");
        let block = section
            .split("```text\n")
            .nth(1)
            .and_then(|rest| rest.split("```").next())
            .expect("the Command line section opens with a text block of the synopsis");
        block
            .lines()
            .filter_map(|line| line.strip_prefix("outbox-relay "))
            .map(|line| {
                let path: Vec<&str> = line
                    .split_whitespace()
                    .take_while(|word| {
                        word.chars().all(|c| c.is_ascii_lowercase() || c == '-')
                            && !word.starts_with('-')
                    })
                    .collect();
                let flags = line
                    .split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
                    .filter(|word| word.starts_with("--"))
                    .map(str::to_owned)
                    .collect();
                (path.join(" "), flags)
            })
            .collect()
    }

    /// The long flags clap defines for each command path, without the global
    /// `--log-format` and clap's own `--help` and `--version`.
    fn defined_synopsis() -> std::collections::BTreeMap<String, std::collections::BTreeSet<String>>
    {
        use clap::CommandFactory;
        fn walk(
            command: &clap::Command,
            path: Vec<String>,
            out: &mut std::collections::BTreeMap<String, std::collections::BTreeSet<String>>,
        ) {
            if command.has_subcommands() {
                for sub in command.get_subcommands() {
                    let mut deeper = path.clone();
                    deeper.push(sub.get_name().to_owned());
                    walk(sub, deeper, out);
                }
                return;
            }
            let flags = command
                .get_arguments()
                .filter(|argument| !argument.is_global_set())
                .filter_map(|argument| argument.get_long())
                .filter(|long| !["help", "version", "log-format"].contains(long))
                .map(|long| format!("--{long}"))
                .collect();
            out.insert(path.join(" "), flags);
        }
        let mut out = std::collections::BTreeMap::new();
        walk(&super::Cli::command(), Vec::new(), &mut out);
        out
    }
}
