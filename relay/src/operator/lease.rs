//! The stream's lease taken by an operator command (`recover-slot`,
//! `leave-logical`): while the command holds it no relay streams from the
//! slot, and the command is refused while a live relay holds it.

use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::{PgPool, Row};
use tokio_util::sync::CancellationToken;

use crate::error::Error;
use crate::tasks::Tasks;

const ACQUIRE_STREAM_LEASE: &str = include_str!("../source/logical/sql/acquire_stream_lease.sql");
const RENEW_STREAM_LEASE: &str = include_str!("../source/logical/sql/renew_stream_lease.sql");
const RELEASE_STREAM_LEASE: &str = include_str!("../source/logical/sql/release_stream_lease.sql");
sql_files!(stream_lease_holder);

/// How long an operator command's hold on the stream's lease lasts between
/// renewals; it is renewed every third of it while the command runs, also
/// while a statement of the command waits (for running transactions, say).
pub const OPERATOR_LEASE: Duration = Duration::from_secs(60);

/// The stream's lease, held by an operator command and renewed in the
/// background until [`OperatorLease::release`], or until it is dropped.
pub(super) struct OperatorLease {
    pool: PgPool,
    holder: String,
    token: i64,
    /// The renewal's task, which this lease owns.
    renewal: Tasks,
}

impl Drop for OperatorLease {
    fn drop(&mut self) {
        self.renewal.cancel();
    }
}

impl OperatorLease {
    /// Take the stream's lease as `holder`, or say who holds it and that
    /// `command` may run once every relay on the slot is stopped.
    pub(super) async fn acquire(
        pool: &PgPool,
        holder: &str,
        command: &str,
    ) -> Result<OperatorLease, Error> {
        let token: Option<i64> = sqlx::query_scalar(ACQUIRE_STREAM_LEASE)
            .bind(holder)
            .bind(OPERATOR_LEASE.as_secs_f64())
            .fetch_optional(pool)
            .await?;
        let Some(token) = token else {
            return Err(held_elsewhere(pool, command).await?);
        };
        let renewal = Tasks::new();
        renewal.spawn(keep(
            pool.clone(),
            holder.to_owned(),
            token,
            renewal.stop_token(),
        ));
        Ok(OperatorLease {
            pool: pool.clone(),
            holder: holder.to_owned(),
            token,
            renewal,
        })
    }

    /// The lease's fencing token.
    pub(super) fn token(&self) -> i64 {
        self.token
    }

    /// Stop renewing and give the lease up; a failure is logged, and the
    /// lease then expires on its own.
    pub(super) async fn release(self) {
        self.renewal.cancel();
        self.renewal.wait().await;
        let released = sqlx::query(RELEASE_STREAM_LEASE)
            .bind(&self.holder)
            .bind(self.token)
            .execute(&self.pool)
            .await;
        if let Err(error) = released {
            tracing::warn!(%error, "releasing the stream's lease failed; it expires on its own");
        }
    }
}

/// The error of a lease held by someone else, naming the holder.
async fn held_elsewhere(pool: &PgPool, command: &str) -> Result<Error, Error> {
    let holder = sqlx::query(sql::stream_lease_holder)
        .fetch_optional(pool)
        .await?;
    let (owner, expires_at) = match holder {
        Some(row) => (
            row.try_get::<String, _>("lease_owner")?,
            row.try_get::<DateTime<Utc>, _>("lease_expires_at")?
                .to_rfc3339(),
        ),
        None => ("another relay".to_owned(), "now".to_owned()),
    };
    Ok(Error::Logical(format!(
        "the stream's lease is held by `{owner}` until {expires_at}: stop every relay on the \
         slot, then run {command} again"
    )))
}

/// Renew the lease every third of [`OPERATOR_LEASE`] until `stop`.
async fn keep(pool: PgPool, holder: String, token: i64, stop: CancellationToken) {
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(OPERATOR_LEASE / 3) => {}
        }
        let renewed: Result<Option<i64>, sqlx::Error> = sqlx::query_scalar(RENEW_STREAM_LEASE)
            .bind(&holder)
            .bind(OPERATOR_LEASE.as_secs_f64())
            .bind(token)
            .fetch_optional(&pool)
            .await;
        match renewed {
            Ok(Some(_)) => {}
            Ok(None) => {
                tracing::warn!("the stream's lease was lost while the command ran");
                return;
            }
            Err(error) => tracing::warn!(%error, "renewing the stream's lease failed"),
        }
    }
}
