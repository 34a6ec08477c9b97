//! [`ServerProbe`]: a plain connection beside the replication stream that
//! notices the server going away.
//!
//! A logical walsender does not end on a PostgreSQL fast shutdown until
//! its client has reported everything it was sent as written; the relay
//! reports only what it has settled (the replication client sends one
//! position for write, flush and apply), and it cannot settle anything
//! while the server refuses its other connections. Without the probe, a
//! relay with unsettled events holds the server's shutdown until it dies.
//! A fast shutdown ends the probe's connection at once; the stream then
//! ends its session, and opens another once the server is back.

use std::time::Duration;

use sqlx::{Connection, PgConnection, PgPool};

use crate::error::Error;

/// How often the probe asks the server.
pub(crate) const PROBE_INTERVAL: Duration = Duration::from_secs(1);

/// Longest wait for the probe's answer.
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

const PROBE: &str = "SELECT 1";

/// A connection of its own to the stream's server.
pub(crate) struct ServerProbe {
    connection: PgConnection,
}

impl ServerProbe {
    /// Open the probe's connection with the pool's settings.
    ///
    /// # Errors
    /// [`Error::Database`] when the server cannot be reached.
    pub(crate) async fn open(pool: &PgPool) -> Result<Self, Error> {
        let connection = PgConnection::connect_with(&pool.connect_options()).await?;
        Ok(ServerProbe { connection })
    }

    /// Ask the server; an error when it is going away or does not answer.
    ///
    /// # Errors
    /// [`Error::Logical`] naming what failed.
    pub(crate) async fn check(&mut self) -> Result<(), Error> {
        match tokio::time::timeout(
            PROBE_TIMEOUT,
            sqlx::query(PROBE).execute(&mut self.connection),
        )
        .await
        {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(error)) => Err(Error::Logical(format!(
                "the server is going away (its other connections fail: {error}); ending the \
                 replication stream"
            ))),
            Err(_) => Err(Error::Logical(format!(
                "the server did not answer within {} ms; ending the replication stream",
                PROBE_TIMEOUT.as_millis()
            ))),
        }
    }

    /// Close the probe's connection.
    pub(crate) async fn close(self) {
        if let Err(error) = self.connection.close().await {
            tracing::debug!(%error, "closing the server probe");
        }
    }
}
