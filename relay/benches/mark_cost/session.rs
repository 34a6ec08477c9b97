//! The measured connection: its backend, whose CPU the bench reads, and
//! the statements it sends, as the relay sends them: in a transaction
//! after their `SET LOCAL`s, or alone once the settings are made for the
//! session.

use sqlx::{Connection, PgConnection};

use crate::cpu::BackendCpu;
use crate::statements::SESSION_SETTINGS;

/// The measured connection, its backend, and how many statements it
/// sent.
pub(crate) struct Session {
    pub(crate) connection: PgConnection,
    pub(crate) cpu: BackendCpu,
    /// Statements sent, `BEGIN` and `COMMIT` among them.
    pub(crate) statements: u64,
}

impl Session {
    /// Connect to `url`; with `session_settings`, make the relay's
    /// settings for the whole session.
    pub(crate) async fn connect(url: &str, session_settings: bool) -> Session {
        let mut connection = PgConnection::connect(url)
            .await
            .expect("connect the measured session");
        let pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
            .fetch_one(&mut connection)
            .await
            .expect("backend pid");
        if session_settings {
            for setting in SESSION_SETTINGS {
                sqlx::query(*setting)
                    .execute(&mut connection)
                    .await
                    .expect("session setting");
            }
        }
        Session {
            connection,
            cpu: BackendCpu::new(pid),
            statements: 0,
        }
    }

    /// Send one statement (`send` runs it on the connection it is given):
    /// `BEGIN`, `settings`, the statement, `COMMIT`; or, `alone`, the
    /// statement by itself, the settings made for the session.
    pub(crate) async fn send<T>(
        &mut self,
        settings: &[&'static str],
        alone: bool,
        send: impl AsyncFnOnce(&mut PgConnection) -> T,
    ) -> T {
        if alone {
            self.statements += 1;
            return send(&mut self.connection).await;
        }
        let mut transaction = self.connection.begin().await.expect("begin");
        for setting in settings {
            sqlx::query(*setting)
                .execute(&mut *transaction)
                .await
                .unwrap_or_else(|error| panic!("{setting}: {error}"));
        }
        let result = send(&mut transaction).await;
        transaction.commit().await.expect("commit");
        self.statements += settings.len() as u64 + 3;
        result
    }
}
