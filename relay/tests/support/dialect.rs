//! The SQL that differs between the backends in test seeding and checks:
//! the database's clock, time literals and casts to text.

/// Per-backend SQL fragments for literal test statements.
pub trait Dialect {
    /// The database's current time, as a column value.
    fn now() -> String;

    /// The database's current time shifted by `seconds` (may be negative).
    fn now_plus(seconds: i64) -> String;

    /// A fixed UTC time literal, from `YYYY-MM-DD HH:MM:SS.ffffff`.
    fn time_literal(utc: &str) -> String;

    /// `column` (a time) as RFC 3339 text in UTC.
    fn time_text(column: &str) -> String;

    /// `expression` (an integer) as text.
    fn integer_text(expression: &str) -> String;

    /// `expression` (an integer) as a 64-bit integer.
    fn bigint(expression: &str) -> String;

    /// `column` (a time) moved `seconds` (may be negative).
    fn shift_time(column: &str, seconds: i64) -> String;

    /// One text line per row of `outbox_events` with every column the relay
    /// or an operator command can change, ordered by id.
    fn outbox_rows() -> String;
}

impl Dialect for sqlx::Postgres {
    fn now() -> String {
        "now()".to_owned()
    }

    fn now_plus(seconds: i64) -> String {
        format!("(now() + interval '{seconds} seconds')")
    }

    fn time_literal(utc: &str) -> String {
        format!("TIMESTAMPTZ '{utc}+00'")
    }

    fn time_text(column: &str) -> String {
        format!("to_char({column} AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')")
    }

    fn integer_text(expression: &str) -> String {
        format!("CAST({expression} AS TEXT)")
    }

    fn bigint(expression: &str) -> String {
        format!("CAST({expression} AS BIGINT)")
    }

    fn shift_time(column: &str, seconds: i64) -> String {
        format!("({column} + interval '{seconds} seconds')")
    }

    fn outbox_rows() -> String {
        "SELECT concat_ws('|', id, event_id, topic, state, attempts, next_attempt_at, \
         last_error, published_at, created_at) FROM outbox_events ORDER BY id"
            .to_owned()
    }
}

impl Dialect for sqlx::MySql {
    fn now() -> String {
        "UTC_TIMESTAMP(6)".to_owned()
    }

    fn now_plus(seconds: i64) -> String {
        format!("(UTC_TIMESTAMP(6) + INTERVAL {seconds} SECOND)")
    }

    fn time_literal(utc: &str) -> String {
        format!("'{utc}'")
    }

    fn time_text(column: &str) -> String {
        format!("DATE_FORMAT({column}, '%Y-%m-%dT%H:%i:%s.%fZ')")
    }

    fn integer_text(expression: &str) -> String {
        format!("CAST({expression} AS CHAR)")
    }

    fn bigint(expression: &str) -> String {
        format!("CAST({expression} AS SIGNED)")
    }

    fn shift_time(column: &str, seconds: i64) -> String {
        format!("({column} + INTERVAL {seconds} SECOND)")
    }

    fn outbox_rows() -> String {
        "SELECT CAST(CONCAT_WS('|', id, event_id, topic, state, attempts, next_attempt_at, \
         last_error, published_at, created_at) AS CHAR) FROM outbox_events ORDER BY id"
            .to_owned()
    }
}

impl Dialect for sqlx::Sqlite {
    fn now() -> String {
        "strftime('%Y-%m-%dT%H:%M:%fZ', 'now')".to_owned()
    }

    fn now_plus(seconds: i64) -> String {
        format!("strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '{seconds:+} seconds')")
    }

    fn time_literal(utc: &str) -> String {
        // Milliseconds, as the column default writes them.
        let (date, time) = utc.split_once(' ').unwrap_or((utc, "00:00:00.000"));
        format!("'{date}T{:.12}Z'", time)
    }

    fn time_text(column: &str) -> String {
        column.to_owned()
    }

    fn integer_text(expression: &str) -> String {
        format!("CAST({expression} AS TEXT)")
    }

    fn bigint(expression: &str) -> String {
        expression.to_owned()
    }

    fn shift_time(column: &str, seconds: i64) -> String {
        format!("strftime('%Y-%m-%dT%H:%M:%fZ', {column}, '{seconds:+} seconds')")
    }

    fn outbox_rows() -> String {
        "SELECT concat_ws('|', id, event_id, topic, state, attempts, next_attempt_at, \
         last_error, published_at, created_at) FROM outbox_events ORDER BY id"
            .to_owned()
    }
}
