//! The replication stream: one `START_REPLICATION` session on the slot at a
//! time, while this relay holds the stream's lease, reconnecting after
//! errors. It appends each committed transaction's events to [`Received`]
//! and reports the position [`Received`] says may be confirmed.
//!
//! A server probe (`server_probe.rs`) beside each session ends it when the server goes
//! away, so that a relay never holds a PostgreSQL shutdown.
//!
//! pgoutput runs in protocol version 1: the server sends a transaction only
//! once it has committed, so no uncommitted event is ever published.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use pgwire_replication::{
    Lsn, ReplicationClient, ReplicationConfig, ReplicationEvent, SslMode, TlsConfig,
};
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use super::pgoutput::{Change, PgOutputDecoder};
use super::received::Received;
use super::server_probe::{PROBE_INTERVAL, ServerProbe};
use crate::error::Error;
use crate::event::ClaimedEvent;
use crate::source::SlotName;

/// Shortest pause between two reports of the confirmed position: what a
/// killed relay had settled in the last one is published again by the next.
const STATUS_INTERVAL: Duration = Duration::from_millis(200);

/// Longest wait for data before the stream reports anyway.
const IDLE_WAKEUP_INTERVAL: Duration = Duration::from_secs(1);

/// The longest pause between two attempts to open the stream.
const MAX_RECONNECT_DELAY: Duration = Duration::from_secs(5);

sql_files!(slot_confirmed_position, stream_lease_held, end_stale_stream);

/// The `application_name` of the relays' replication connections: how a
/// lease holder tells another relay's stale connection on the slot from
/// another consumer.
const STREAM_APPLICATION_NAME: &str = "outbox-relay";

/// The session settings the stream's values are decoded with.
const SESSION_OPTIONS: &str = "-c datestyle=ISO -c timezone=UTC";

/// How to reach the server for replication, from the database URL.
#[derive(Clone)]
pub(crate) struct StreamTarget {
    config: ReplicationConfig,
}

impl std::fmt::Debug for StreamTarget {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("StreamTarget")
            .field("connection", &self.config.display_connection())
            .finish()
    }
}

impl StreamTarget {
    /// Read host, port, user, password, database and `sslmode` from a
    /// `postgres://` URL (`PGPASSWORD` when the URL has no password).
    ///
    /// # Errors
    /// [`Error::InvalidDatabaseUrl`] when the URL cannot be read.
    pub(crate) fn from_url(database_url: &str, slot: &SlotName) -> Result<Self, Error> {
        let invalid = |reason: String| Error::InvalidDatabaseUrl {
            url: outbox::mask_password(database_url),
            reason,
        };
        let url = url::Url::parse(database_url).map_err(|error| invalid(error.to_string()))?;
        let decode = |text: &str| {
            percent_decode(text).map_err(|()| invalid("invalid percent-encoding".to_owned()))
        };
        let host = url.host_str().unwrap_or("localhost").to_owned();
        let user = match url.username() {
            "" => std::env::var("PGUSER").unwrap_or_else(|_| "postgres".to_owned()),
            name => decode(name)?,
        };
        let password = match url.password() {
            Some(password) => decode(password)?,
            None => std::env::var("PGPASSWORD").unwrap_or_default(),
        };
        let database = match url.path().trim_start_matches('/') {
            "" => user.clone(),
            name => decode(name)?,
        };
        let mut tls = TlsConfig::disabled();
        let mut root_certificate = None;
        for (key, value) in url.query_pairs() {
            match key.as_ref() {
                "sslrootcert" => root_certificate = Some(std::path::PathBuf::from(value.as_ref())),
                "sslmode" => {
                    tls.mode = match value.as_ref() {
                        "require" => SslMode::Require,
                        "verify-ca" => SslMode::VerifyCa,
                        "verify-full" => SslMode::VerifyFull,
                        // `prefer` and `allow` stream without TLS.
                        _ => SslMode::Disable,
                    }
                }
                _ => {}
            }
        }
        tls.ca_pem_path = root_certificate;
        let config = ReplicationConfig::new(
            host,
            user,
            password,
            database,
            slot.as_str(),
            slot.publication(),
        )
        .with_port(url.port().unwrap_or(5432))
        .with_tls(tls)
        .with_status_interval(STATUS_INTERVAL)
        .with_wakeup_interval(IDLE_WAKEUP_INTERVAL)
        .with_options(SESSION_OPTIONS)
        .with_application_name(STREAM_APPLICATION_NAME);
        Ok(StreamTarget { config }.reading_ahead_within(
            usize::try_from(crate::source::DEFAULT_MAX_BATCH_BYTES).unwrap_or(usize::MAX),
        ))
    }

    /// Let the replication client read at most [`messages_ahead`] messages
    /// ahead of the stream for a buffer of `max_bytes`. The client's queue
    /// counts messages, not bytes (8,192 by default: 7 GB of 900 KB rows),
    /// so it is kept short enough that rows of up to 512 KiB fill it with
    /// `max_bytes` at most.
    pub(crate) fn reading_ahead_within(mut self, max_bytes: usize) -> Self {
        self.config = self.config.with_buffer_size(messages_ahead(max_bytes));
        self
    }
}

/// Messages the replication client may queue ahead of the stream: one per
/// 512 KiB of `max_bytes`, from 16 to 8,192.
pub(crate) fn messages_ahead(max_bytes: usize) -> usize {
    (max_bytes / (512 << 10)).clamp(16, 8192)
}

fn percent_decode(text: &str) -> Result<String, ()> {
    let bytes = text.as_bytes();
    let mut decoded = Vec::with_capacity(bytes.len());
    let mut index = 0;
    while index < bytes.len() {
        if bytes[index] == b'%' {
            let hex = text.get(index + 1..index + 3).ok_or(())?;
            decoded.push(u8::from_str_radix(hex, 16).map_err(|_| ())?);
            index += 3;
        } else {
            decoded.push(bytes[index]);
            index += 1;
        }
    }
    String::from_utf8(decoded).map_err(|_| ())
}

/// Stream under the lease of `lease_token` until `stop`: open a session at
/// the slot's confirmed position, and after an error open another. Before
/// each session the lease is checked: a relay that lost it (another one
/// acquired it since) stops streaming instead of taking the slot back.
pub(crate) async fn stream_while_leased(
    pool: PgPool,
    target: StreamTarget,
    slot: SlotName,
    received: Arc<Received>,
    lease_token: i64,
    stop: CancellationToken,
) {
    let mut delay = Duration::from_millis(100);
    while !stop.is_cancelled() {
        let opened = match claim_slot(&pool, &slot, lease_token).await {
            Ok(true) => run_session(&pool, &target, &slot, &received, lease_token, &stop).await,
            Ok(false) => {
                tracing::warn!(
                    slot = %slot,
                    lease_token,
                    "the stream's lease was taken by another relay; not opening the stream again"
                );
                break;
            }
            Err(error) => Err(error),
        };
        match opened {
            Ok(()) => break,
            Err(error) => {
                received.note_stream_failed();
                tracing::warn!(
                    slot = %slot,
                    %error,
                    retry_in_ms = delay.as_millis() as u64,
                    "replication stream failed; reopening it"
                );
            }
        }
        tokio::select! {
            () = stop.cancelled() => break,
            () = tokio::time::sleep(delay) => {}
        }
        delay = (delay * 2).min(MAX_RECONNECT_DELAY);
    }
    received.end_session();
}

/// Before a session: whether the lease of `lease_token` is still this
/// relay's; if so, end any other relay's connection still on the slot (it
/// lost the lease), so the slot need not wait for its `wal_sender_timeout`.
async fn claim_slot(pool: &PgPool, slot: &SlotName, lease_token: i64) -> Result<bool, Error> {
    let held: bool = sqlx::query_scalar(sql::stream_lease_held)
        .bind(lease_token)
        .fetch_one(pool)
        .await?;
    if !held {
        return Ok(false);
    }
    let ended: Result<Vec<i32>, sqlx::Error> = sqlx::query_scalar(sql::end_stale_stream)
        .bind(slot.as_str())
        .bind(lease_token)
        .bind(STREAM_APPLICATION_NAME)
        .fetch_all(pool)
        .await;
    match ended {
        Ok(pids) => {
            for pid in pids {
                tracing::info!(
                    slot = %slot,
                    lease_token,
                    pid,
                    "ended the replication connection of a relay that lost the stream's lease"
                );
            }
        }
        // Without the right to end it (another role, not a member of
        // pg_signal_backend), the slot frees up at wal_sender_timeout.
        Err(error) => tracing::warn!(
            slot = %slot,
            %error,
            "could not end another relay's replication connection on the slot"
        ),
    }
    Ok(true)
}

/// One session: returns `Ok` when stopped, an error when the session broke.
async fn run_session(
    pool: &PgPool,
    target: &StreamTarget,
    slot: &SlotName,
    received: &Received,
    lease_token: i64,
    stop: &CancellationToken,
) -> Result<(), Error> {
    let confirmed = confirmed_position(pool, slot).await?;
    received.begin_session(confirmed);
    let config = target
        .config
        .clone()
        .with_start_lsn(Lsn::from_u64(confirmed))
        .with_ack_lsn(Lsn::from_u64(confirmed));
    let mut client = ReplicationClient::connect(config)
        .await
        .map_err(|error| Error::Logical(format!("replication stream: {error}")))?;
    tokio::select! {
        () = stop.cancelled() => return Ok(()),
        started = client.wait_started() => started
            .map_err(|error| Error::Logical(format!("replication stream: {error}")))?,
    }
    received.clear_stream_failure();
    tracing::info!(slot = %slot, lease_token, confirmed = %Lsn::from_u64(confirmed), "streaming from the slot");
    let mut positions = received.confirmed_positions();
    let mut session = SessionState::default();
    let mut probe = ServerProbe::open(pool).await?;
    let mut probe_due = tokio::time::interval(PROBE_INTERVAL);
    probe_due.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        // Taken before the check: a settle in between still wakes the wait.
        let room_made = received.room_made();
        if received.is_full() {
            tokio::select! {
                () = stop.cancelled() => break,
                _ = positions.changed() => client.update_applied_lsn(Lsn::from_u64(*positions.borrow_and_update())),
                () = room_made => {}
                _ = probe_due.tick() => probe.check().await?,
            }
            continue;
        }
        tokio::select! {
            () = stop.cancelled() => break,
            _ = positions.changed() => {
                client.update_applied_lsn(Lsn::from_u64(*positions.borrow_and_update()));
            }
            _ = probe_due.tick() => probe.check().await?,
            event = client.recv() => {
                let event = event.map_err(|error| Error::Logical(format!("replication stream: {error}")))?;
                let Some(event) = event else {
                    return Err(Error::Logical("replication stream ended".to_owned()));
                };
                session.handle(event, received)?;
            }
        }
    }
    probe.close().await;
    let last_position = *positions.borrow();
    report_last_position(&client, last_position).await;
    if let Err(error) = client.shutdown().await {
        tracing::debug!(%error, "closing the replication stream");
    }
    Ok(())
}

/// Confirm `position` and wait (a couple of status intervals at most) for
/// the server to be told, so that a graceful stop does not have the next
/// holder publish again what this one settled last.
async fn report_last_position(client: &ReplicationClient, position: u64) {
    client.update_applied_lsn(Lsn::from_u64(position));
    let metrics = client.metrics();
    let deadline = tokio::time::Instant::now() + IDLE_WAKEUP_INTERVAL;
    while metrics.last_applied_lsn().as_u64() < position && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The transaction being received.
#[derive(Default)]
struct SessionState {
    decoder: PgOutputDecoder,
    in_transaction: bool,
    events: Vec<ClaimedEvent>,
}

impl SessionState {
    fn handle(&mut self, event: ReplicationEvent, received: &Received) -> Result<(), Error> {
        match event {
            ReplicationEvent::Begin { .. } => {
                self.in_transaction = true;
                self.events.clear();
            }
            ReplicationEvent::XLogData { data, .. } => {
                match self
                    .decoder
                    .decode(&data)
                    .map_err(|error| Error::Logical(error.to_string()))?
                {
                    Change::Inserted(claimed) => self.events.push(*claimed),
                    Change::Skipped => {}
                }
            }
            ReplicationEvent::Commit {
                end_lsn,
                commit_time_micros,
                ..
            } => {
                self.in_transaction = false;
                let committed_at = commit_time(commit_time_micros);
                for claimed in &mut self.events {
                    claimed.committed_at = committed_at;
                }
                received.push_transaction(end_lsn.as_u64(), std::mem::take(&mut self.events));
            }
            ReplicationEvent::KeepAlive { wal_end, .. } => {
                if !self.in_transaction {
                    received.observe_idle_position(wal_end.as_u64());
                }
            }
            ReplicationEvent::Message { .. } | ReplicationEvent::StoppedAt { .. } => {}
        }
        Ok(())
    }
}

/// Microseconds from PostgreSQL's epoch (2000-01-01) to the Unix epoch.
const POSTGRES_EPOCH_MICROS: i64 = 946_684_800_000_000;

/// A commit record's time, in microseconds since PostgreSQL's epoch.
fn commit_time(micros: i64) -> Option<DateTime<Utc>> {
    DateTime::from_timestamp_micros(micros.checked_add(POSTGRES_EPOCH_MICROS)?)
}

/// The slot's `confirmed_flush_lsn`.
async fn confirmed_position(pool: &PgPool, slot: &SlotName) -> Result<u64, Error> {
    let text: Option<String> = sqlx::query_scalar(sql::slot_confirmed_position)
        .bind(slot.as_str())
        .fetch_optional(pool)
        .await?
        .flatten();
    let text = text.ok_or_else(|| {
        Error::Logical(format!(
            "replication slot `{slot}` does not exist: run `outbox-relay migrate --source logical`"
        ))
    })?;
    Lsn::parse(&text)
        .map(Lsn::as_u64)
        .map_err(|error| Error::Logical(format!("slot `{slot}` position {text}: {error}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_commit_time_counts_from_postgres_epoch() {
        let committed_at = commit_time(0).expect("in range");
        assert_eq!(committed_at.to_rfc3339(), "2000-01-01T00:00:00+00:00");
        let committed_at = commit_time(1_500_000).expect("in range");
        assert_eq!(committed_at.to_rfc3339(), "2000-01-01T00:00:01.500+00:00");
        assert_eq!(commit_time(i64::MAX), None);
    }
}
