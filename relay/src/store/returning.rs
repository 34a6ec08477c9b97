//! The statements of the databases with `UPDATE ... RETURNING`, PostgreSQL
//! and SQLite. They differ only in the SQL files they load
//! (`store/sql/<backend>/`), in how a list of integers and a time are bound
//! (an array and `timestamptz` on PostgreSQL, JSON and text on SQLite), in
//! the settings of a mark, and in how commits are watched, so one macro
//! writes the three store traits for both; `postgres.rs` and `sqlite.rs`
//! invoke it with their differences.

/// Implement [`LeaseStore`](crate::store::LeaseStore),
/// [`EventSource`](crate::store::EventSource) and
/// [`OperatorStore`](crate::store::OperatorStore) for a store with a `pool`
/// field.
macro_rules! returning_statements {
    ($store:ty, $backend:literal, $bind_integers:path, $bind_time:path, $fetch_settings:path, $mark_settings:path, $watch_commits:path) => {
        const _: () = {
            use std::time::Duration;

            use chrono::{DateTime, Utc};
            use futures::future::BoxFuture;
            use tokio_util::sync::CancellationToken;

            use $crate::store::rows::{
                backlog_from_row, claimed_from_row, dead_from_row, lease_from_row, leases_json,
                map_rows, outbound_from_row, seconds, selector_binds, status_from_rows,
            };
            use $crate::store::{
                ClaimedEvent, DeadEvent, DeadSelector, EventSource, FailedAttempt, Lease,
                LeaseStore, OperatorStore, OutboxBacklog, OutboxStatus, ReplayWindow,
            };
            use $crate::wakeup::Wakeup;
            use $crate::{Error, OutboundEvent};
            impl LeaseStore for $store {
                fn partition_count(&self) -> BoxFuture<'_, Result<i32, Error>> {
                    Box::pin(async move {
                        Ok(sqlx::query_scalar(include_str!(concat!(
                            "sql/",
                            $backend,
                            "/partition_count.sql"
                        )))
                        .fetch_one(&self.pool)
                        .await?)
                    })
                }

                fn heartbeat<'a>(
                    &'a self,
                    relay_id: &'a str,
                    ttl: Duration,
                ) -> BoxFuture<'a, Result<i64, Error>> {
                    Box::pin(async move {
                        sqlx::query(include_str!(concat!(
                            "sql/",
                            $backend,
                            "/heartbeat_upsert.sql"
                        )))
                        .bind(relay_id)
                        .bind(seconds(ttl))
                        .execute(&self.pool)
                        .await?;
                        sqlx::query(include_str!(concat!(
                            "sql/",
                            $backend,
                            "/heartbeat_forget_dead.sql"
                        )))
                        .execute(&self.pool)
                        .await?;
                        Ok(sqlx::query_scalar(include_str!(concat!(
                            "sql/",
                            $backend,
                            "/live_relays.sql"
                        )))
                        .fetch_one(&self.pool)
                        .await?)
                    })
                }

                fn deregister<'a>(&'a self, relay_id: &'a str) -> BoxFuture<'a, Result<(), Error>> {
                    Box::pin(async move {
                        sqlx::query(include_str!(concat!("sql/", $backend, "/deregister.sql")))
                            .bind(relay_id)
                            .execute(&self.pool)
                            .await?;
                        Ok(())
                    })
                }

                fn renew_leases<'a>(
                    &'a self,
                    relay_id: &'a str,
                    leases: &'a [Lease],
                    ttl: Duration,
                ) -> BoxFuture<'a, Result<Vec<Lease>, Error>> {
                    Box::pin(async move {
                        if leases.is_empty() {
                            return Ok(Vec::new());
                        }
                        let rows = sqlx::query(include_str!(concat!(
                            "sql/",
                            $backend,
                            "/renew_leases.sql"
                        )))
                        .bind(relay_id)
                        .bind(seconds(ttl))
                        .bind(leases_json(leases))
                        .fetch_all(&self.pool)
                        .await?;
                        Ok(map_rows(&rows, lease_from_row)?)
                    })
                }

                fn acquire_leases<'a>(
                    &'a self,
                    relay_id: &'a str,
                    limit: i64,
                    ttl: Duration,
                ) -> BoxFuture<'a, Result<Vec<Lease>, Error>> {
                    Box::pin(async move {
                        if limit <= 0 {
                            return Ok(Vec::new());
                        }
                        let rows = sqlx::query(include_str!(concat!(
                            "sql/",
                            $backend,
                            "/acquire_leases.sql"
                        )))
                        .bind(relay_id)
                        .bind(seconds(ttl))
                        .bind(limit)
                        .fetch_all(&self.pool)
                        .await?;
                        Ok(map_rows(&rows, lease_from_row)?)
                    })
                }

                fn release_leases<'a>(
                    &'a self,
                    relay_id: &'a str,
                    leases: &'a [Lease],
                ) -> BoxFuture<'a, Result<u64, Error>> {
                    Box::pin(async move {
                        if leases.is_empty() {
                            return Ok(0);
                        }
                        let result = sqlx::query(include_str!(concat!(
                            "sql/",
                            $backend,
                            "/release_leases.sql"
                        )))
                        .bind(relay_id)
                        .bind(leases_json(leases))
                        .execute(&self.pool)
                        .await?;
                        Ok(result.rows_affected())
                    })
                }
            }

            impl EventSource for $store {
                fn fetch_pending<'a>(
                    &'a self,
                    partition_count: i32,
                    partitions: &'a [i32],
                    exclude: &'a [i64],
                    hold_dead: bool,
                    limit: i64,
                ) -> BoxFuture<'a, Result<Vec<ClaimedEvent>, Error>> {
                    Box::pin(async move {
                        if partitions.is_empty() {
                            return Ok(Vec::new());
                        }
                        // Not a cached prepared statement: the database plans
                        // each fetch with its actual values. A generic plan of a
                        // cached statement compares every row with each id of
                        // `exclude` (thousands while marks are in flight);
                        // PostgreSQL's plan for the actual list hashes it.
                        let fetch = sqlx::query(include_str!(concat!(
                            "sql/",
                            $backend,
                            "/fetch_pending.sql"
                        )))
                        .persistent(false)
                        .bind(partition_count)
                        .bind($bind_integers(partitions))
                        .bind(hold_dead)
                        .bind(limit)
                        .bind($bind_integers(exclude));
                        if $fetch_settings.is_empty() {
                            let rows = fetch.fetch_all(&self.pool).await?;
                            return Ok(map_rows(&rows, claimed_from_row)?);
                        }
                        let mut transaction = self.pool.begin().await?;
                        for setting in $fetch_settings {
                            sqlx::query(*setting).execute(&mut *transaction).await?;
                        }
                        let rows = fetch.fetch_all(&mut *transaction).await?;
                        transaction.commit().await?;
                        Ok(map_rows(&rows, claimed_from_row)?)
                    })
                }

                fn mark_published<'a>(
                    &'a self,
                    relay_id: &'a str,
                    partition_count: i32,
                    leases: &'a [Lease],
                    ids: &'a [i64],
                ) -> BoxFuture<'a, Result<u64, Error>> {
                    Box::pin(async move {
                        if ids.is_empty() {
                            return Ok(0);
                        }
                        let mark = sqlx::query(include_str!(concat!(
                            "sql/",
                            $backend,
                            "/mark_published.sql"
                        )))
                        .bind(relay_id)
                        .bind(partition_count)
                        .bind(leases_json(leases))
                        .bind($bind_integers(ids));
                        if $mark_settings.is_empty() {
                            return Ok(mark.execute(&self.pool).await?.rows_affected());
                        }
                        let mut transaction = self.pool.begin().await?;
                        for setting in $mark_settings {
                            sqlx::query(*setting).execute(&mut *transaction).await?;
                        }
                        let result = mark.execute(&mut *transaction).await?;
                        transaction.commit().await?;
                        Ok(result.rows_affected())
                    })
                }

                fn record_failures<'a>(
                    &'a self,
                    relay_id: &'a str,
                    partition_count: i32,
                    leases: &'a [Lease],
                    failures: &'a [FailedAttempt],
                ) -> BoxFuture<'a, Result<u64, Error>> {
                    Box::pin(async move {
                        let leases = leases_json(leases);
                        let mut updated = 0;
                        let mut tx = self.pool.begin().await?;
                        for failure in failures {
                            let result = sqlx::query(include_str!(concat!(
                                "sql/",
                                $backend,
                                "/record_failure.sql"
                            )))
                            .bind(relay_id)
                            .bind(partition_count)
                            .bind(&leases)
                            .bind(failure.id)
                            .bind(&failure.error)
                            .bind(failure.retry_in.map(seconds))
                            .execute(&mut *tx)
                            .await?;
                            updated += result.rows_affected();
                        }
                        tx.commit().await?;
                        Ok(updated)
                    })
                }

                fn watch_commits(&self, wakeup: Wakeup, stop: CancellationToken) {
                    $watch_commits(&self.pool, wakeup, stop);
                }
            }

            impl OperatorStore for $store {
                fn migrate(&self) -> BoxFuture<'_, Result<(), Error>> {
                    Box::pin(async move { Ok(outbox::migrate(&self.pool).await?) })
                }

                fn delete_published(
                    &self,
                    older_than: Duration,
                    limit: i64,
                ) -> BoxFuture<'_, Result<u64, Error>> {
                    Box::pin(async move {
                        let result = sqlx::query(include_str!(concat!(
                            "sql/",
                            $backend,
                            "/delete_published.sql"
                        )))
                        .bind(seconds(older_than))
                        .bind(limit)
                        .execute(&self.pool)
                        .await?;
                        Ok(result.rows_affected())
                    })
                }

                fn backlog(&self) -> BoxFuture<'_, Result<OutboxBacklog, Error>> {
                    Box::pin(async move {
                        let row =
                            sqlx::query(include_str!(concat!("sql/", $backend, "/backlog.sql")))
                                .fetch_one(&self.pool)
                                .await?;
                        Ok(backlog_from_row(&row)?)
                    })
                }

                fn status(&self) -> BoxFuture<'_, Result<OutboxStatus, Error>> {
                    Box::pin(async move {
                        let row =
                            sqlx::query(include_str!(concat!("sql/", $backend, "/status.sql")))
                                .fetch_one(&self.pool)
                                .await?;
                        let topic_rows = sqlx::query(include_str!(concat!(
                            "sql/",
                            $backend,
                            "/status_topics.sql"
                        )))
                        .fetch_all(&self.pool)
                        .await?;
                        let lease_rows = sqlx::query(include_str!(concat!(
                            "sql/",
                            $backend,
                            "/status_leases.sql"
                        )))
                        .fetch_all(&self.pool)
                        .await?;
                        Ok(status_from_rows(&row, &topic_rows, &lease_rows)?)
                    })
                }

                fn database_time(&self) -> BoxFuture<'_, Result<DateTime<Utc>, Error>> {
                    Box::pin(async move {
                        Ok(sqlx::query_scalar(include_str!(concat!(
                            "sql/",
                            $backend,
                            "/database_time.sql"
                        )))
                        .fetch_one(&self.pool)
                        .await?)
                    })
                }

                fn topic_exists<'a>(
                    &'a self,
                    topic: &'a str,
                ) -> BoxFuture<'a, Result<bool, Error>> {
                    Box::pin(async move {
                        let found: i64 = sqlx::query_scalar(include_str!(concat!(
                            "sql/",
                            $backend,
                            "/topic_exists.sql"
                        )))
                        .bind(topic)
                        .fetch_one(&self.pool)
                        .await?;
                        Ok(found > 0)
                    })
                }

                fn fetch_published<'a>(
                    &'a self,
                    window: &'a ReplayWindow,
                    after_id: i64,
                    limit: i64,
                ) -> BoxFuture<'a, Result<Vec<OutboundEvent>, Error>> {
                    Box::pin(async move {
                        let rows = sqlx::query(include_str!(concat!(
                            "sql/",
                            $backend,
                            "/fetch_published.sql"
                        )))
                        .bind(window.topic.as_str())
                        .bind($bind_time(window.since))
                        .bind($bind_time(window.until))
                        .bind(after_id)
                        .bind(limit)
                        .fetch_all(&self.pool)
                        .await?;
                        Ok(map_rows(&rows, outbound_from_row)?)
                    })
                }

                fn list_dead<'a>(
                    &'a self,
                    selector: &'a DeadSelector,
                    limit: i64,
                ) -> BoxFuture<'a, Result<Vec<DeadEvent>, Error>> {
                    Box::pin(async move {
                        let (event_id, aggregate_type, aggregate_id) = selector_binds(selector);
                        let rows =
                            sqlx::query(include_str!(concat!("sql/", $backend, "/list_dead.sql")))
                                .bind(event_id)
                                .bind(aggregate_type)
                                .bind(aggregate_id)
                                .bind(limit)
                                .fetch_all(&self.pool)
                                .await?;
                        Ok(map_rows(&rows, dead_from_row)?)
                    })
                }

                fn retry_dead<'a>(
                    &'a self,
                    selector: &'a DeadSelector,
                ) -> BoxFuture<'a, Result<u64, Error>> {
                    Box::pin(async move {
                        let (event_id, aggregate_type, aggregate_id) = selector_binds(selector);
                        let result =
                            sqlx::query(include_str!(concat!("sql/", $backend, "/retry_dead.sql")))
                                .bind(event_id)
                                .bind(aggregate_type)
                                .bind(aggregate_id)
                                .execute(&self.pool)
                                .await?;
                        Ok(result.rows_affected())
                    })
                }

                fn discard_dead<'a>(
                    &'a self,
                    selector: &'a DeadSelector,
                ) -> BoxFuture<'a, Result<u64, Error>> {
                    Box::pin(async move {
                        let (event_id, aggregate_type, aggregate_id) = selector_binds(selector);
                        let result = sqlx::query(include_str!(concat!(
                            "sql/",
                            $backend,
                            "/discard_dead.sql"
                        )))
                        .bind(event_id)
                        .bind(aggregate_type)
                        .bind(aggregate_id)
                        .execute(&self.pool)
                        .await?;
                        Ok(result.rows_affected())
                    })
                }
            }
        };
    };
}
pub(crate) use returning_statements;
