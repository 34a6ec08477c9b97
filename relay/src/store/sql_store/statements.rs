//! What a dialect's SQL is: one [`Statement`] per thing the store does,
//! each naming the [`Param`] every placeholder of its SQL takes, so that
//! one body binds the values of a call for every backend, whether its
//! placeholders are numbered (`$1`, `?1`) or positional (`?`).

/// What one placeholder of a statement takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Param {
    /// The relay instance's id.
    RelayId,
    /// How long a heartbeat or lease lives.
    TimeToLive,
    /// How many rows at most (partitions to take, batch or page size).
    Limit,
    /// How many payload bytes a fetch returns at most, past its first event.
    MaxBytes,
    /// The leases the call is fenced by, a JSON array.
    Leases,
    /// Partition numbers.
    Partitions,
    /// How many partitions the table is split into.
    PartitionCount,
    /// Whether dead events hold back the rest of their aggregate.
    HoldDead,
    /// Event ids the fetch leaves out.
    ExcludedIds,
    /// Event ids to mark published.
    EventIds,
    /// The id of the event a failure is recorded for.
    EventId,
    /// The error of a failed attempt.
    LastError,
    /// How long until a failed event's retry, in the dialect's form.
    RetryDelay,
    /// Whether a failed event is dead (it has no retry).
    Dead,
    /// How long ago a published event must have been published to be
    /// deleted.
    OlderThan,
    /// A topic.
    Topic,
    /// The start of a replay window (inclusive).
    Since,
    /// The end of a replay window (exclusive).
    Until,
    /// The id a replay page starts after.
    AfterId,
    /// The event id of a dead-event selector, or NULL.
    SelectedEventId,
    /// The aggregate type of a dead-event selector, or NULL.
    SelectedAggregateType,
    /// The aggregate id of a dead-event selector, or NULL.
    SelectedAggregateId,
    /// The topic the operators' page filters dead events by, or NULL.
    FilterTopic,
    /// The event type the operators' page filters dead events by, or NULL.
    FilterEventType,
    /// A substring of the last error the operators' page filters dead
    /// events by, or NULL.
    ErrorContains,
}

/// One SQL statement and what its placeholders take, in order.
#[derive(Debug, Clone, Copy)]
pub struct Statement {
    /// The SQL, from `store/sql/<backend>/`.
    pub sql: &'static str,
    /// What each placeholder takes: the n-th entry is bound n-th. A value
    /// may appear more than once (positional placeholders repeat it).
    pub params: &'static [Param],
}

impl Statement {
    /// `sql`, binding `params` in this order.
    pub const fn new(sql: &'static str, params: &'static [Param]) -> Self {
        Statement { sql, params }
    }
}

/// How a dialect's lease statements give back the leases they change.
#[derive(Debug, Clone, Copy)]
pub enum LeaseStatements {
    /// `UPDATE ... RETURNING` returns the leases renewed or taken.
    #[cfg_attr(not(any(feature = "postgres", feature = "sqlite")), allow(dead_code))]
    Returning {
        /// Extend the leases held (`RelayId`, `TimeToLive`, `Leases`), returning them.
        renew: Statement,
        /// Take free partitions (`RelayId`, `TimeToLive`, `Limit`), returning the leases.
        acquire: Statement,
    },
    /// No `UPDATE ... RETURNING` (MariaDB): each change is an update and
    /// a select of the leases held, in one transaction.
    #[cfg_attr(not(feature = "mysql"), allow(dead_code))]
    UpdateThenSelect {
        /// Extend the leases held.
        renew: Statement,
        /// Lock up to `Limit` free partitions; returns their numbers.
        lock_free: Statement,
        /// Take the locked `Partitions`.
        take: Statement,
        /// The live leases of `RelayId` among `Partitions`.
        select_held: Statement,
    },
}

/// Every statement of one dialect.
#[derive(Debug, Clone, Copy)]
pub struct Statements {
    /// The number of partitions (one column: an integer).
    pub partition_count: Statement,
    /// Record a relay as alive.
    pub heartbeat_upsert: Statement,
    /// Forget relays dead for a while.
    pub heartbeat_forget_dead: Statement,
    /// The number of live relays (one column).
    pub live_relays: Statement,
    /// Forget a relay.
    pub deregister: Statement,
    /// Renew and acquire leases.
    pub leases: LeaseStatements,
    /// Give leases up.
    pub release_leases: Statement,
    /// The batch loop's fetch.
    pub fetch_pending: Statement,
    /// Mark events published, fenced.
    pub mark_published: Statement,
    /// Delete acknowledged events instead of marking them, fenced like
    /// the mark (`retention.published = "0s"`).
    pub delete_acknowledged: Statement,
    /// Record one failed attempt, fenced.
    pub record_failure: Statement,
    /// Retention: delete old published events.
    pub delete_published: Statement,
    /// The `/metrics` gauges.
    pub backlog: Statement,
    /// The counts of `outbox-relay status`.
    pub status: Statement,
    /// The per-topic counts of `outbox-relay status`.
    pub status_topics: Statement,
    /// The live leases of `outbox-relay status`.
    pub status_leases: Statement,
    /// The database's clock (one column).
    pub database_time: Statement,
    /// Whether a topic has events (one column: a count).
    pub topic_exists: Statement,
    /// One page of a replay.
    pub fetch_published: Statement,
    /// Dead events matching a selector.
    pub list_dead: Statement,
    /// Make matching dead events pending again.
    pub retry_dead: Statement,
    /// Delete matching dead events.
    pub discard_dead: Statement,
    /// The operators' page: per-topic counts.
    pub page_topics: Statement,
    /// The operators' page: live relays and their leases.
    pub page_relays: Statement,
    /// The operators' page: dead events under its filters.
    pub page_dead: Statement,
    /// The operators' page: one event by id.
    pub page_event: Statement,
    /// The operators' page: events published lately (one column).
    pub page_published_recently: Statement,
}

impl Statements {
    /// Every statement, for checks over all of them.
    #[cfg(test)]
    pub(crate) fn all(&self) -> Vec<Statement> {
        let mut all = vec![
            self.partition_count,
            self.heartbeat_upsert,
            self.heartbeat_forget_dead,
            self.live_relays,
            self.deregister,
            self.release_leases,
            self.fetch_pending,
            self.mark_published,
            self.delete_acknowledged,
            self.record_failure,
            self.delete_published,
            self.backlog,
            self.status,
            self.status_topics,
            self.status_leases,
            self.database_time,
            self.topic_exists,
            self.fetch_published,
            self.list_dead,
            self.retry_dead,
            self.discard_dead,
            self.page_topics,
            self.page_relays,
            self.page_dead,
            self.page_event,
            self.page_published_recently,
        ];
        match self.leases {
            LeaseStatements::Returning { renew, acquire } => all.extend([renew, acquire]),
            LeaseStatements::UpdateThenSelect {
                renew,
                lock_free,
                take,
                select_held,
            } => all.extend([renew, lock_free, take, select_held]),
        }
        all
    }
}

#[cfg(test)]
mod tests {
    use super::Statements;
    use crate::store::mysql::MySqlDialect;
    use crate::store::postgres::PostgresDialect;
    use crate::store::sql_store::Dialect;
    use crate::store::sqlite::SqliteDialect;

    /// The SQL of a statement without its comment lines.
    fn code(sql: &str) -> String {
        sql.lines()
            .filter(|line| !line.trim_start().starts_with("--"))
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// The highest `n` of the numbered placeholders `{marker}n` in `sql`.
    fn highest_numbered(sql: &str, marker: char) -> usize {
        let code = code(sql);
        code.match_indices(marker)
            .filter_map(|(at, _)| {
                let digits: String = code[at + 1..]
                    .chars()
                    .take_while(char::is_ascii_digit)
                    .collect();
                digits.parse().ok()
            })
            .max()
            .unwrap_or(0)
    }

    fn assert_numbered(statements: &Statements, marker: char) {
        for statement in statements.all() {
            assert_eq!(
                statement.params.len(),
                highest_numbered(statement.sql, marker),
                "placeholders of {}",
                statement.sql
            );
        }
    }

    #[test]
    fn every_numbered_placeholder_has_its_value() {
        assert_numbered(PostgresDialect::STATEMENTS, '$');
        assert_numbered(SqliteDialect::STATEMENTS, '?');
    }

    #[test]
    fn every_positional_placeholder_has_its_value() {
        for statement in MySqlDialect::STATEMENTS.all() {
            assert_eq!(
                statement.params.len(),
                code(statement.sql).matches('?').count(),
                "placeholders of {}",
                statement.sql
            );
        }
    }
}
