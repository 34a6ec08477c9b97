//! The statements of a backend with numbered placeholders (`$1` on
//! PostgreSQL, `?1` on SQLite): their SQL files number the values of each
//! statement in one order, written here once.

use super::Param::{
    AfterId, ErrorContains, EventId, EventIds, ExcludedIds, FilterEventType, FilterTopic,
    HoldDead, LastError, Leases, Limit, MaxBytes, OlderThan, PartitionCount, Partitions, RelayId,
    RetryDelay, SelectedAggregateId, SelectedAggregateType, SelectedEventId, Since, TimeToLive,
    Topic, Until,
};
use super::{LeaseStatements, Param, Statement, Statements};

/// The SQL of each file of `store/sql/<backend>/`, by the file's name.
#[derive(Debug, Clone, Copy)]
pub struct NumberedSql {
    pub partition_count: &'static str,
    pub heartbeat_upsert: &'static str,
    pub heartbeat_forget_dead: &'static str,
    pub live_relays: &'static str,
    pub deregister: &'static str,
    pub renew_leases: &'static str,
    pub acquire_leases: &'static str,
    pub release_leases: &'static str,
    pub fetch_pending: &'static str,
    pub mark_published: &'static str,
    pub delete_acknowledged: &'static str,
    pub record_failure: &'static str,
    pub delete_published: &'static str,
    pub backlog: &'static str,
    pub status: &'static str,
    pub status_topics: &'static str,
    pub status_leases: &'static str,
    pub database_time: &'static str,
    pub topic_exists: &'static str,
    pub fetch_published: &'static str,
    pub list_dead: &'static str,
    pub retry_dead: &'static str,
    pub discard_dead: &'static str,
    pub page_topics: &'static str,
    pub page_relays: &'static str,
    pub page_dead: &'static str,
    pub page_event: &'static str,
    pub page_published_recently: &'static str,
}

/// The filters of the dead-event statements.
const SELECTOR: &[Param] = &[SelectedEventId, SelectedAggregateType, SelectedAggregateId];

impl Statements {
    /// The statements of `sql`, each numbering its values in the order
    /// below; `UPDATE ... RETURNING` gives the leases changed.
    pub const fn numbered(sql: NumberedSql) -> Statements {
        Statements {
            partition_count: Statement::new(sql.partition_count, &[]),
            heartbeat_upsert: Statement::new(sql.heartbeat_upsert, &[RelayId, TimeToLive]),
            heartbeat_forget_dead: Statement::new(sql.heartbeat_forget_dead, &[]),
            live_relays: Statement::new(sql.live_relays, &[]),
            deregister: Statement::new(sql.deregister, &[RelayId]),
            leases: LeaseStatements::Returning {
                renew: Statement::new(sql.renew_leases, &[RelayId, TimeToLive, Leases]),
                acquire: Statement::new(sql.acquire_leases, &[RelayId, TimeToLive, Limit]),
            },
            release_leases: Statement::new(sql.release_leases, &[RelayId, Leases]),
            fetch_pending: Statement::new(
                sql.fetch_pending,
                &[
                    PartitionCount,
                    Partitions,
                    HoldDead,
                    Limit,
                    ExcludedIds,
                    MaxBytes,
                ],
            ),
            mark_published: Statement::new(
                sql.mark_published,
                &[RelayId, PartitionCount, Leases, EventIds],
            ),
            delete_acknowledged: Statement::new(
                sql.delete_acknowledged,
                &[RelayId, PartitionCount, Leases, EventIds],
            ),
            record_failure: Statement::new(
                sql.record_failure,
                &[
                    RelayId,
                    PartitionCount,
                    Leases,
                    EventId,
                    LastError,
                    RetryDelay,
                ],
            ),
            delete_published: Statement::new(sql.delete_published, &[OlderThan, Limit]),
            backlog: Statement::new(sql.backlog, &[]),
            status: Statement::new(sql.status, &[]),
            status_topics: Statement::new(sql.status_topics, &[]),
            status_leases: Statement::new(sql.status_leases, &[]),
            database_time: Statement::new(sql.database_time, &[]),
            topic_exists: Statement::new(sql.topic_exists, &[Topic]),
            fetch_published: Statement::new(
                sql.fetch_published,
                &[Topic, Since, Until, AfterId, Limit],
            ),
            list_dead: Statement::new(
                sql.list_dead,
                &[
                    SelectedEventId,
                    SelectedAggregateType,
                    SelectedAggregateId,
                    Limit,
                ],
            ),
            retry_dead: Statement::new(sql.retry_dead, SELECTOR),
            discard_dead: Statement::new(sql.discard_dead, SELECTOR),
            page_topics: Statement::new(sql.page_topics, &[]),
            page_relays: Statement::new(sql.page_relays, &[]),
            page_dead: Statement::new(
                sql.page_dead,
                &[
                    FilterTopic,
                    FilterEventType,
                    SelectedAggregateType,
                    SelectedAggregateId,
                    ErrorContains,
                    Since,
                    Until,
                    Limit,
                ],
            ),
            page_event: Statement::new(sql.page_event, &[EventId]),
            page_published_recently: Statement::new(sql.page_published_recently, &[OlderThan]),
        }
    }
}
