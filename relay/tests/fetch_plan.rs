//! The batch loop's fetch is planned as an ordered walk of the pending
//! rows, whatever the statistics: on a table of 100,000 pending rows that
//! was never analyzed (a backlog written in a burst, before autovacuum got
//! to it), the plan must not read and sort every pending row. The plan's
//! shape is checked, never a duration. What the fetch does above its
//! `LIMIT` (summing the sizes of at most `batch_size` candidates for the
//! byte cap) may sort those few rows.

use outbox_relay::store::{MySqlStore, PostgresStore};
use serde_json::Value;

const PENDING_ROWS: i64 = 100_000;

/// The first `Limit` node of a PostgreSQL plan: the candidates, under the
/// byte cap's window.
fn limit_node(plan: &Value) -> Option<&Value> {
    match plan {
        Value::Object(map) => {
            if map.get("Node Type").and_then(Value::as_str) == Some("Limit") {
                return Some(plan);
            }
            map.values().find_map(limit_node)
        }
        Value::Array(items) => items.iter().find_map(limit_node),
        _ => None,
    }
}

/// Every value of `key` anywhere in `plan`.
fn values_of<'a>(plan: &'a Value, key: &str, found: &mut Vec<&'a Value>) {
    match plan {
        Value::Object(map) => {
            for (name, value) in map {
                if name == key {
                    found.push(value);
                }
                values_of(value, key, found);
            }
        }
        Value::Array(items) => items.iter().for_each(|item| values_of(item, key, found)),
        _ => {}
    }
}

#[tokio::test]
async fn postgres_fetches_in_index_order_from_a_never_analyzed_backlog() {
    let db = outbox_testkit::postgres().await;
    outbox::migrate(db.pool()).await.expect("migrate");
    // Autovacuum must not analyze the table while the test runs.
    for statement in [
        "ALTER TABLE outbox_events SET (autovacuum_enabled = false)".to_owned(),
        format!(
            "INSERT INTO outbox_events (event_id, event_type, source, aggregate_type, aggregate_id, topic, payload) \
             SELECT gen_random_uuid(), 'moved', '/s', 'shipment', 's-' || (g % 1000), 'shipments', '{{}}' \
             FROM generate_series(1, {PENDING_ROWS}) AS g"
        ),
    ] {
        sqlx::query(sqlx::AssertSqlSafe(statement))
            .execute(db.pool())
            .await
            .expect("set up the backlog");
    }
    let analyzed: (
        Option<chrono::DateTime<chrono::Utc>>,
        Option<chrono::DateTime<chrono::Utc>>,
    ) = sqlx::query_as(
        "SELECT last_analyze, last_autoanalyze FROM pg_stat_user_tables \
             WHERE relname = 'outbox_events'",
    )
    .fetch_one(db.pool())
    .await
    .expect("analyze times");
    assert_eq!(
        analyzed,
        (None, None),
        "the table must never have been analyzed"
    );

    let store = PostgresStore::new(db.pool().clone());
    let all_partitions: Vec<i32> = (0..32).collect();
    for partitions in [all_partitions, vec![3, 7, 11]] {
        let whole = store
            .fetch_pending_plan(32, &partitions, true, 500)
            .await
            .expect("explain the fetch");
        let plan = limit_node(&whole).unwrap_or_else(|| panic!("no Limit node: {whole:#}"));
        let mut node_types = Vec::new();
        values_of(plan, "Node Type", &mut node_types);
        let node_types: Vec<&str> = node_types
            .iter()
            .filter_map(|value| value.as_str())
            .collect();
        assert!(
            !node_types.contains(&"Sort") && !node_types.contains(&"Incremental Sort"),
            "the fetch sorts the pending rows ({partitions:?}): {plan:#}"
        );
        let mut index_names = Vec::new();
        values_of(plan, "Index Name", &mut index_names);
        assert!(
            index_names
                .iter()
                .any(|name| name.as_str() == Some("outbox_events_pending_idx")),
            "the fetch does not walk the pending index: {plan:#}"
        );
    }
}

#[tokio::test]
async fn mysql_fetches_in_index_order_without_a_filesort() {
    let db = outbox_testkit::mysql().await;
    outbox::migrate(db.pool()).await.expect("migrate");
    // 100,000 rows from five cross-joined digits (portable to MySQL and
    // MariaDB, and no recursion limit).
    let digits = "(SELECT 0 AS d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 \
                  UNION ALL SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 \
                  UNION ALL SELECT 8 UNION ALL SELECT 9)";
    let insert = format!(
        "INSERT INTO outbox_events (event_id, event_type, source, aggregate_type, aggregate_id, topic, payload) \
         SELECT UUID(), 'moved', '/s', 'shipment', \
                CONCAT('s-', (a.d + 10 * b.d + 100 * c.d + 1000 * d.d + 10000 * e.d) % 1000), \
                'shipments', '{{}}' \
         FROM {digits} AS a, {digits} AS b, {digits} AS c, {digits} AS d, {digits} AS e"
    );
    sqlx::query(sqlx::AssertSqlSafe(insert))
        .execute(db.pool())
        .await
        .expect("set up the backlog");
    assert_eq!(
        db.count("SELECT COUNT(*) FROM outbox_events WHERE state = 'pending'")
            .await,
        PENDING_ROWS
    );

    let store = MySqlStore::new(db.pool().clone());
    let plan = store
        .fetch_pending_plan(32, &(0..32).collect::<Vec<i32>>(), true, 500)
        .await
        .expect("explain the fetch");
    let mut sort_keys = Vec::new();
    values_of(&plan, "sort_key", &mut sort_keys);
    assert!(
        sort_keys
            .iter()
            .filter_map(|key| key.as_str())
            .all(|key| key.starts_with("candidate.") || key.starts_with("sized.")),
        "the fetch sorts the pending rows, not only its candidates: {plan:#}"
    );
    let mut keys = Vec::new();
    values_of(&plan, "key", &mut keys);
    assert!(
        keys.iter()
            .any(|key| key.as_str() == Some("outbox_events_state_id_idx")),
        "the fetch does not walk the (state, id) index: {plan:#}"
    );
}
