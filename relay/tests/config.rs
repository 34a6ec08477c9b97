//! The relay's configuration layer: `--broker` and `--database-url` values,
//! their resolution from flags and environment, and the TOML config file.

use std::collections::HashMap;
use std::time::Duration;

use outbox_relay::Error;
use outbox_relay::broker_url::{BrokerUrl, DEFAULT_BROKER, resolve_broker_url};
use outbox_relay::config::{DeadLetterPolicy, RelayConfig, RoutingKey, parse_duration};
use outbox_relay::database_url::{
    DEFAULT_DATABASE_URL, DatabaseUrl, mask_password, resolve_database_url,
};

const EXAMPLE: &str = include_str!("../examples/relay.toml");

// ---------------------------------------------------------------------------
// Helpers

/// The error message of `result`, checked to be one line.
fn one_line<T: std::fmt::Debug>(result: Result<T, Error>) -> String {
    let message = result.expect_err("expected an error").to_string();
    assert!(!message.contains('\n'), "not one line: {message}");
    message
}

fn broker_error(input: &str) -> String {
    let result = BrokerUrl::parse(input);
    assert!(
        matches!(result, Err(Error::InvalidBrokerUrl { .. }) | Ok(_)),
        "wrong variant: {result:?}"
    );
    one_line(result)
}

fn database_error(input: &str) -> String {
    let result = DatabaseUrl::parse(input);
    assert!(
        matches!(result, Err(Error::InvalidDatabaseUrl { .. }) | Ok(_)),
        "wrong variant: {result:?}"
    );
    one_line(result)
}

fn config_error(text: &str) -> String {
    let result = RelayConfig::from_toml_str(text, "relay.toml");
    assert!(
        matches!(result, Err(Error::Config { ref path, .. }) if path == "relay.toml")
            || result.is_ok(),
        "wrong variant: {result:?}"
    );
    let message = one_line(result);
    assert!(
        message.starts_with("config relay.toml: "),
        "no path: {message}"
    );
    message
}

fn assert_contains(message: &str, parts: &[&str]) {
    for part in parts {
        assert!(
            message.contains(part),
            "`{message}` does not contain `{part}`"
        );
    }
}

fn environment(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let map: HashMap<String, String> = pairs
        .iter()
        .map(|(name, value)| ((*name).to_owned(), (*value).to_owned()))
        .collect();
    move |name| map.get(name).cloned()
}

fn parse_config(text: &str) -> RelayConfig {
    RelayConfig::from_toml_str(text, "relay.toml")
        .unwrap_or_else(|error| panic!("{text:?} should parse: {error}"))
}

fn kafka(brokers: &[&str]) -> BrokerUrl {
    BrokerUrl::Kafka {
        brokers: brokers.iter().map(|broker| (*broker).to_owned()).collect(),
    }
}

fn amqp(url: &str) -> BrokerUrl {
    BrokerUrl::Amqp {
        url: url.to_owned(),
    }
}

// ---------------------------------------------------------------------------
// Broker URLs

#[test]
fn kafka_broker_lists_parse() {
    let cases = [
        ("kafka://localhost:9092", kafka(&["localhost:9092"])),
        (
            "kafka://a.example.com:9092,b.example.com:9093,10.0.0.3:19092",
            kafka(&["a.example.com:9092", "b.example.com:9093", "10.0.0.3:19092"]),
        ),
        ("kafka://[::1]:9092", kafka(&["[::1]:9092"])),
        ("  KAFKA://broker_1:1/ ", kafka(&["broker_1:1"])),
        ("kafka://h:65535, h2:9092", kafka(&["h:65535", "h2:9092"])),
    ];
    for (input, expected) in cases {
        let parsed = BrokerUrl::parse(input).unwrap_or_else(|error| panic!("{input}: {error}"));
        assert_eq!(parsed, expected, "{input}");
        assert_eq!(parsed.kind(), "kafka");
    }
    let parsed: BrokerUrl = "kafka://a:1,b:2".parse().expect("FromStr");
    assert_eq!(parsed.to_string(), "kafka://a:1,b:2");
}

#[test]
fn amqp_urls_parse_and_keep_the_vhost() {
    let cases = [
        "amqp://guest:guest@localhost:5672/%2f",
        "amqp://guest:guest@localhost/%2f",
        "amqp://localhost",
        "amqp://user@rabbit.internal:5673/orders",
        "amqps://user:p%40ss@rabbit.example.com/prod?heartbeat=10",
        "amqp://guest:guest@[::1]:5672/%2fstaging",
    ];
    for input in cases {
        let parsed = BrokerUrl::parse(input).unwrap_or_else(|error| panic!("{input}: {error}"));
        assert_eq!(parsed, amqp(input));
        assert_eq!(parsed.kind(), "amqp");
    }
    assert_eq!(
        BrokerUrl::parse("AMQPS://h/v").expect("uppercase scheme"),
        amqp("amqps://h/v")
    );
}

#[test]
fn stdout_parses() {
    for input in ["stdout", "STDOUT", " stdout\n"] {
        assert_eq!(BrokerUrl::parse(input).expect(input), BrokerUrl::Stdout);
    }
    assert_eq!(BrokerUrl::Stdout.to_string(), "stdout");
    assert_eq!(BrokerUrl::Stdout.kind(), "stdout");
}

#[test]
fn broker_display_and_debug_mask_the_password() {
    let broker = BrokerUrl::parse("amqp://relay:s3cret@rabbit:5672/%2f").expect("valid");
    assert_eq!(broker.to_string(), "amqp://relay:***@rabbit:5672/%2f");
    let debug = format!("{broker:?}");
    assert!(!debug.contains("s3cret"), "{debug}");
    assert_contains(&debug, &["relay:***@rabbit"]);
    // The URL handed to the client keeps the password.
    assert_eq!(broker, amqp("amqp://relay:s3cret@rabbit:5672/%2f"));
}

#[test]
fn bad_kafka_urls_name_the_problem() {
    let cases: [(&str, &[&str]); 10] = [
        ("kafka://", &["no brokers", "kafka://HOST:PORT"]),
        ("kafka:///", &["no brokers"]),
        (
            "kafka://localhost",
            &["broker `localhost`", "no port", "localhost:9092"],
        ),
        ("kafka://a:9092,b", &["broker `b`", "no port"]),
        ("kafka://a:9092,,b:9092", &["broker 2", "empty"]),
        ("kafka://a:0", &["port 0", "1 to 65535"]),
        ("kafka://a:70000", &["`70000`", "1 to 65535"]),
        ("kafka://a:http", &["`http`", "1 to 65535"]),
        (
            "kafka://a:9092/topic",
            &["only a list of HOST:PORT", "/topic", "[kafka.options]"],
        ),
        ("kafka://bad host:9092", &["`bad host`", "not a host name"]),
    ];
    for (input, parts) in cases {
        let message = broker_error(input);
        assert!(message.starts_with("invalid broker `"), "{message}");
        assert_contains(&message, parts);
    }
    let message = broker_error("kafka://:9092");
    assert_contains(&message, &["no host"]);
}

#[test]
fn kafka_credentials_are_refused_and_masked() {
    let message = broker_error("kafka://user:hunter2@broker:9092");
    assert!(!message.contains("hunter2"), "{message}");
    assert_contains(
        &message,
        &["user:***@broker:9092", "sasl.username", "[kafka.options]"],
    );
}

#[test]
fn bad_amqp_urls_name_the_problem_and_mask_the_password() {
    let message = broker_error("amqp://relay:hunter2@/vhost");
    assert!(!message.contains("hunter2"), "{message}");
    assert_contains(&message, &["amqp://relay:***@/vhost", "no host"]);

    let message = broker_error("amqps://relay:hunter2@rabbit:99999/v");
    assert!(!message.contains("hunter2"), "{message}");
    assert_contains(
        &message,
        &["amqps://relay:***@rabbit:99999/v", "`99999`", "1 to 65535"],
    );

    let message = broker_error("amqp://rabbit/a/b");
    assert_contains(&message, &["vhost `a/b`", "%2f"]);

    let message = broker_error("amqp://");
    assert_contains(&message, &["no host"]);
}

#[test]
fn unknown_brokers_say_what_is_accepted() {
    let accepted = ["kafka://", "amqp://", "amqps://", "stdout"];
    let message = broker_error("redis://u:hunter2@localhost:6379");
    assert!(!message.contains("hunter2"), "{message}");
    assert_contains(&message, &["unsupported scheme `redis`"]);
    assert_contains(&message, &accepted);

    let message = broker_error("localhost:9092");
    assert_contains(&message, &["no scheme", "kafka://localhost:9092"]);

    let message = broker_error("rabbitmq://localhost");
    assert_contains(&message, &["amqp://"]);

    let message = broker_error("");
    assert_contains(&message, &["empty"]);
    assert_contains(&message, &accepted);

    let message = broker_error("stdout://");
    assert_contains(&message, &["`stdout` alone"]);
}

// ---------------------------------------------------------------------------
// Database URLs

#[test]
fn database_urls_parse_by_scheme() {
    let cases = [
        (
            "postgres://outbox:pw@db:5432/app",
            DatabaseUrl::Postgres("postgres://outbox:pw@db:5432/app".to_owned()),
        ),
        (
            "postgresql://db/app?sslmode=require",
            DatabaseUrl::Postgres("postgresql://db/app?sslmode=require".to_owned()),
        ),
        (
            "POSTGRES://db/app",
            DatabaseUrl::Postgres("postgres://db/app".to_owned()),
        ),
        (
            "postgres:///app?host=/var/run/postgresql",
            DatabaseUrl::Postgres("postgres:///app?host=/var/run/postgresql".to_owned()),
        ),
        (
            "mysql://root:pw@127.0.0.1:3306/app",
            DatabaseUrl::MySql("mysql://root:pw@127.0.0.1:3306/app".to_owned()),
        ),
        (
            "mariadb://root:pw@[::1]:3306/app",
            DatabaseUrl::MySql("mysql://root:pw@[::1]:3306/app".to_owned()),
        ),
        (
            "sqlite://outbox.db",
            DatabaseUrl::Sqlite("sqlite://outbox.db".to_owned()),
        ),
        (
            "sqlite:///var/lib/app/outbox.db?mode=rwc",
            DatabaseUrl::Sqlite("sqlite:///var/lib/app/outbox.db?mode=rwc".to_owned()),
        ),
        (
            "sqlite:data/app.db",
            DatabaseUrl::Sqlite("sqlite:data/app.db".to_owned()),
        ),
    ];
    for (input, expected) in cases {
        let parsed = DatabaseUrl::parse(input).unwrap_or_else(|error| panic!("{input}: {error}"));
        assert_eq!(parsed, expected, "{input}");
    }
    let parsed: DatabaseUrl = "mariadb://db/app".parse().expect("FromStr");
    assert_eq!(parsed.as_str(), "mysql://db/app");
    assert_eq!(parsed.backend(), "mysql");
}

#[test]
fn in_memory_sqlite_is_refused() {
    for input in [
        "sqlite::memory:",
        "sqlite://:memory:",
        "sqlite:file.db?mode=memory",
    ] {
        let message = database_error(input);
        assert_contains(
            &message,
            &["in-memory", "database file the application writes"],
        );
    }
    let message = database_error("sqlite://");
    assert_contains(&message, &["no database file", "sqlite://outbox.db"]);
}

#[test]
fn bad_database_urls_name_the_problem_and_mask_the_password() {
    let accepted = ["postgres://", "mysql://", "mariadb://", "sqlite://"];

    let message = database_error("redis://admin:hunter2@cache:6379/0");
    assert!(message.starts_with("invalid database URL `"), "{message}");
    assert!(!message.contains("hunter2"), "{message}");
    assert_contains(
        &message,
        &[
            "redis://admin:***@cache:6379/0",
            "unsupported scheme `redis`",
        ],
    );
    assert_contains(&message, &accepted);

    let message = database_error("postgres://app:hunter2@db:54x2/app");
    assert!(!message.contains("hunter2"), "{message}");
    assert_contains(&message, &["app:***@db:54x2", "`54x2`", "1 to 65535"]);

    let message = database_error("mysql:app:hunter2@db/app");
    assert_contains(&message, &["mysql://"]);

    let message = database_error("jdbc:postgresql://db/app");
    assert_contains(&message, &["JDBC", "jdbc:"]);

    let message = database_error("outbox.db");
    assert_contains(&message, &["no scheme", "sqlite://outbox.db"]);

    let message = database_error("   ");
    assert_contains(&message, &["empty"]);
}

#[test]
fn database_display_and_debug_mask_the_password() {
    let url = DatabaseUrl::parse("postgres://app:hunter2@db/app").expect("valid");
    assert_eq!(url.to_string(), "postgres://app:***@db/app");
    let debug = format!("{url:?}");
    assert!(!debug.contains("hunter2"), "{debug}");
    assert_eq!(url.as_str(), "postgres://app:hunter2@db/app");
    assert_eq!(url.backend(), "postgres");
}

#[test]
fn mask_password_covers_odd_urls() {
    let cases = [
        ("postgres://u:pw@h/db", "postgres://u:***@h/db"),
        ("postgres://u@h/db", "postgres://u@h/db"),
        ("postgres://h:5432/db", "postgres://h:5432/db"),
        ("postgres://:pw@h", "postgres://:***@h"),
        // An unencoded `@` in the password: the last `@` ends it.
        ("mysql://u:p@ss@h/db", "mysql://u:***@h/db"),
        // An unencoded `/` in the password: still masked.
        ("mysql://u:p/ss@h/db", "mysql://u:***@h/db"),
        (
            "postgres://h/db?user=u&password=pw&sslmode=require",
            "postgres://h/db?user=u&password=***&sslmode=require",
        ),
        ("sqlite://outbox.db", "sqlite://outbox.db"),
        ("stdout", "stdout"),
    ];
    for (input, expected) in cases {
        assert_eq!(mask_password(input), expected, "{input}");
    }
}

// ---------------------------------------------------------------------------
// Resolution: flag, then environment, then default

#[test]
fn database_url_resolution_order() {
    let both = environment(&[
        ("OUTBOX_DATABASE_URL", "postgres://outbox-env/app"),
        ("DATABASE_URL", "mysql://generic-env/app"),
    ]);
    let resolved = resolve_database_url(Some("sqlite://flag.db"), &both).expect("flag");
    assert_eq!(resolved.as_str(), "sqlite://flag.db");

    let resolved = resolve_database_url(None, &both).expect("OUTBOX_DATABASE_URL");
    assert_eq!(resolved.as_str(), "postgres://outbox-env/app");

    let generic = environment(&[("DATABASE_URL", "mysql://generic-env/app")]);
    let resolved = resolve_database_url(None, generic).expect("DATABASE_URL");
    assert_eq!(resolved.as_str(), "mysql://generic-env/app");

    let blank = environment(&[
        ("OUTBOX_DATABASE_URL", "  "),
        ("DATABASE_URL", "mysql://g/app"),
    ]);
    let resolved = resolve_database_url(None, blank).expect("blank is unset");
    assert_eq!(resolved.as_str(), "mysql://g/app");

    let resolved = resolve_database_url(None, environment(&[])).expect("default");
    assert_eq!(
        resolved,
        DatabaseUrl::Sqlite("sqlite://outbox.db".to_owned())
    );
    assert_eq!(DEFAULT_DATABASE_URL, "sqlite://outbox.db");
}

#[test]
fn database_url_resolution_errors_name_the_source() {
    let bad_env = environment(&[("OUTBOX_DATABASE_URL", "oracle://u:hunter2@db")]);
    let message = one_line(resolve_database_url(None, &bad_env));
    assert!(!message.contains("hunter2"), "{message}");
    assert_contains(
        &message,
        &[
            "`oracle://u:***@db`",
            "environment variable OUTBOX_DATABASE_URL",
        ],
    );

    // The flag wins even over a bad environment, and its errors say so.
    let message = one_line(resolve_database_url(Some("sqlite::memory:"), &bad_env));
    assert_contains(&message, &["in-memory", "--database-url"]);
    assert!(resolve_database_url(Some("sqlite://x.db"), &bad_env).is_ok());

    let message = one_line(resolve_database_url(Some(""), environment(&[])));
    assert_contains(&message, &["empty", "--database-url"]);

    let generic = environment(&[("DATABASE_URL", "sqlite::memory:")]);
    let message = one_line(resolve_database_url(None, generic));
    assert_contains(&message, &["environment variable DATABASE_URL"]);
}

#[test]
fn broker_resolution_order() {
    let env = environment(&[("OUTBOX_BROKER", "kafka://env:9092")]);
    let resolved = resolve_broker_url(Some("amqp://flag"), &env).expect("flag");
    assert_eq!(resolved, amqp("amqp://flag"));

    let resolved = resolve_broker_url(None, &env).expect("env");
    assert_eq!(resolved, kafka(&["env:9092"]));

    let blank = environment(&[("OUTBOX_BROKER", "")]);
    assert_eq!(
        resolve_broker_url(None, blank).expect("blank"),
        BrokerUrl::Stdout
    );
    assert_eq!(
        resolve_broker_url(None, environment(&[])).expect("default"),
        BrokerUrl::Stdout
    );
    assert_eq!(DEFAULT_BROKER, "stdout");

    let bad = environment(&[("OUTBOX_BROKER", "amqp://u:hunter2@:5672")]);
    let message = one_line(resolve_broker_url(None, bad));
    assert!(!message.contains("hunter2"), "{message}");
    assert_contains(&message, &["no host", "environment variable OUTBOX_BROKER"]);

    let message = one_line(resolve_broker_url(Some("kafka://x"), environment(&[])));
    assert_contains(&message, &["no port", "--broker"]);
}

// ---------------------------------------------------------------------------
// The config file: defaults and the example

#[test]
fn defaults_are_the_documented_values() {
    let config = RelayConfig::default();
    assert_eq!(config.batch_size, 500);
    assert_eq!(config.lease_duration, Duration::from_secs(30));
    assert_eq!(config.lease_renewal_interval(), Duration::from_secs(10));
    assert_eq!(config.publish_timeout, Duration::from_secs(10));
    assert_eq!(config.poll_interval_min, Duration::from_millis(10));
    assert_eq!(config.poll_interval_max, Duration::from_secs(1));
    assert_eq!(config.shutdown_timeout, Duration::from_secs(30));
    assert_eq!(config.instance_id, None);
    assert_eq!(config.retry.base_delay, Duration::from_secs(1));
    assert_eq!(config.retry.max_delay, Duration::from_secs(300));
    assert_eq!(config.retry.max_attempts, 10);
    assert!(config.retry.jitter);
    assert_eq!(config.dead_letter.policy, DeadLetterPolicy::Hold);
    assert!(config.retention.enabled);
    assert_eq!(config.retention.published, Duration::from_secs(7 * 86_400));
    assert_eq!(config.retention.interval, Duration::from_secs(60));
    assert_eq!(config.retention.batch_size, 1000);
    assert_eq!(config.kafka.message_timeout, Duration::from_secs(5));
    assert!(!config.kafka.create_missing_topics);
    assert_eq!(config.kafka.new_topic_partitions, 3);
    assert_eq!(config.kafka.new_topic_replication_factor, 1);
    assert!(config.kafka.options.is_empty());
    assert_eq!(config.amqp.confirm_timeout, Duration::from_secs(5));
    assert_eq!(config.amqp.connect_timeout, Duration::from_secs(5));
    assert_eq!(config.amqp.default_routing_key, RoutingKey::EventType);
    assert!(config.amqp.routing.is_empty());
    assert_eq!(config.http.listen.to_string(), "127.0.0.1:9090");
    config.validate().expect("the defaults are valid");

    assert_eq!(parse_config(""), config);
    assert_eq!(parse_config("# nothing\n[retry]\n[kafka]\n"), config);
}

#[test]
fn the_example_file_is_the_defaults() {
    assert_eq!(parse_config(EXAMPLE), RelayConfig::default());
    let loaded = RelayConfig::load(concat!(env!("CARGO_MANIFEST_DIR"), "/examples/relay.toml"))
        .expect("the example loads");
    assert_eq!(loaded, RelayConfig::default());
}

/// The field names of the table at `table` (empty for the root), read
/// from the "expected one of" list of an unknown-field error, so the list
/// comes from the structs themselves.
fn fields_of(table: &str) -> Vec<String> {
    let text = if table.is_empty() {
        "zz_probe = 1".to_owned()
    } else {
        format!("[{table}]\nzz_probe = 1")
    };
    let message = config_error(&text);
    let expected = message
        .split_once("expected")
        .map(|(_, expected)| expected)
        .unwrap_or_else(|| panic!("no field list: {message}"));
    let expected = expected.split(" (line").next().unwrap_or(expected);
    expected
        .split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect()
}

#[test]
fn the_example_file_shows_every_field() {
    let example: toml::Table = toml::from_str(EXAMPLE).expect("the example is TOML");
    let tables = [
        "",
        "retry",
        "dead_letter",
        "retention",
        "kafka",
        "amqp",
        "http",
    ];
    for table in tables {
        let fields = fields_of(table);
        assert!(!fields.is_empty(), "no fields for [{table}]");
        let section = if table.is_empty() {
            &example
        } else {
            example[table].as_table().expect("a table")
        };
        for field in fields {
            let shown = section.contains_key(&field)
                // Optional fields without a default value are shown commented out.
                || EXAMPLE.contains(&format!("\n# {field} = "))
                // Per-topic routes are shown as a commented example.
                || (table == "amqp" && field == "routing" && EXAMPLE.contains("# [amqp.routing.\""));
            assert!(
                shown,
                "relay/examples/relay.toml does not show [{table}] {field}"
            );
        }
    }
}

// ---------------------------------------------------------------------------
// The config file: good values

#[test]
fn a_full_config_parses() {
    let config = parse_config(
        r#"
        batch_size = 10000
        lease_duration = "1m"
        publish_timeout = "20s"
        poll_interval_min = "1ms"
        poll_interval_max = "1ms"
        shutdown_timeout = "1s"
        instance_id = "relay-a"

        [retry]
        base_delay = "250ms"
        max_delay = "1h30m"
        max_attempts = 1
        jitter = false

        [dead_letter]
        policy = "skip"

        [retention]
        enabled = false
        published = "0s"
        interval = "10s"
        batch_size = 1

        [kafka]
        message_timeout = "19s"
        create_missing_topics = true
        new_topic_partitions = 12
        new_topic_replication_factor = 3

        [kafka.options]
        "linger.ms" = 5
        "enable.idempotence" = true
        acks = "all"
        "compression.type" = "zstd"
        "batch.size" = 1_000_000
        "queue.buffering.backoff.ms" = 1.5

        [amqp]
        confirm_timeout = "2s"
        connect_timeout = "3s"
        default_routing_key = "all-events"

        [amqp.routing."orders"]
        routing_key = "event_type"

        [amqp.routing."billing.v2"]
        routing_key = "billing"

        [http]
        listen = "[::]:0"
        "#,
    );
    assert_eq!(config.batch_size, 10_000);
    assert_eq!(config.lease_duration, Duration::from_secs(60));
    assert_eq!(config.poll_interval_min, Duration::from_millis(1));
    assert_eq!(config.shutdown_timeout, Duration::from_secs(1));
    assert_eq!(config.instance_id.as_deref(), Some("relay-a"));
    assert_eq!(config.retry.max_delay, Duration::from_secs(5400));
    assert_eq!(config.dead_letter.policy, DeadLetterPolicy::Skip);
    assert!(!config.retention.enabled);
    assert_eq!(config.retention.published, Duration::ZERO);
    assert_eq!(config.kafka.new_topic_partitions, 12);
    assert_eq!(config.kafka.new_topic_replication_factor, 3);
    let options: Vec<(&str, &str)> = config
        .kafka
        .options
        .iter()
        .map(|(name, value)| (name.as_str(), value.as_str()))
        .collect();
    assert_eq!(
        options,
        [
            ("acks", "all"),
            ("batch.size", "1000000"),
            ("compression.type", "zstd"),
            ("enable.idempotence", "true"),
            ("linger.ms", "5"),
            ("queue.buffering.backoff.ms", "1.5"),
        ]
    );
    assert_eq!(
        config.amqp.default_routing_key,
        RoutingKey::Fixed("all-events".to_owned())
    );
    assert_eq!(
        config.amqp.routing_key_for("orders", "order.created"),
        "order.created"
    );
    assert_eq!(
        config.amqp.routing_key_for("billing.v2", "invoice.paid"),
        "billing"
    );
    assert_eq!(config.amqp.routing_key_for("other", "x.y"), "all-events");
    assert_eq!(
        RelayConfig::default()
            .amqp
            .routing_key_for("any", "order.created"),
        "order.created"
    );
    assert_eq!(config.http.listen.to_string(), "[::]:0");
}

#[test]
fn durations_parse() {
    let cases = [
        ("0s", Duration::ZERO),
        ("250ms", Duration::from_millis(250)),
        ("30s", Duration::from_secs(30)),
        ("5m", Duration::from_secs(300)),
        ("2h", Duration::from_secs(7200)),
        ("7d", Duration::from_secs(7 * 86_400)),
        ("1m30s", Duration::from_secs(90)),
        ("1h 30m", Duration::from_secs(5400)),
        (" 10 s ", Duration::from_secs(10)),
        ("1s500ms", Duration::from_millis(1500)),
    ];
    for (input, expected) in cases {
        assert_eq!(parse_duration(input), Ok(expected), "{input}");
    }
}

// ---------------------------------------------------------------------------
// The config file: errors

#[test]
fn unknown_fields_are_refused_at_every_level() {
    let cases: [(&str, &[&str]); 10] = [
        (
            "batchsize = 3",
            &[
                "unknown field `batchsize` in [root], expected one of `batch_size`",
                "did you mean `batch_size`?",
                "(line 1, column 1)",
            ],
        ),
        (
            "[retry]\nmax_attempt = 3",
            &[
                "unknown field `max_attempt` in [retry]",
                "`max_attempts`",
                "(line 2, column 1)",
            ],
        ),
        (
            "[dead_letter]\nmode = \"hold\"",
            &["unknown field `mode` in [dead_letter]", "`policy`"],
        ),
        (
            "[retention]\nkeep = \"1d\"",
            &["unknown field `keep` in [retention]", "`published`"],
        ),
        (
            "[kafka]\nbrokers = \"x\"",
            &["unknown field `brokers` in [kafka]", "`message_timeout`"],
        ),
        (
            "[amqp]\nexchange = \"x\"",
            &["unknown field `exchange` in [amqp]", "`routing`"],
        ),
        (
            "[amqp.routing.\"orders.v1\"]\nkey = \"x\"",
            &[
                "unknown field `key` in [amqp.routing.\"orders.v1\"]",
                "`routing_key`",
            ],
        ),
        (
            "[http]\nport = 9090",
            &["unknown field `port` in [http]", "`listen`"],
        ),
        (
            "retry = { base_delay = \"1s\", maxdelay = \"2s\" }",
            &[
                "unknown field `maxdelay` in [retry]",
                "did you mean `max_delay`?",
            ],
        ),
        (
            "[metrics]\nlisten = \"x\"",
            &["unknown field `metrics` in [root]"],
        ),
    ];
    for (text, parts) in cases {
        assert_contains(&config_error(text), parts);
    }
}

#[test]
fn a_route_needs_its_routing_key() {
    let message = config_error("[amqp.routing.orders]\n");
    assert_contains(
        &message,
        &["amqp.routing.orders", "missing field `routing_key`"],
    );
}

#[test]
fn bad_durations_name_the_field() {
    let cases: [(&str, &[&str]); 8] = [
        (
            "lease_duration = \"2w\"",
            &[
                "lease_duration: unknown unit `w` in \"2w\"",
                "ms, s, m, h or d",
                "(line 1, column 18)",
            ],
        ),
        (
            "[retry]\nbase_delay = \"10\"",
            &["retry.base_delay:", "no unit", "\"10s\"", "(line 2"],
        ),
        (
            "[retention]\npublished = \"1.5d\"",
            &["retention.published:", "fraction"],
        ),
        (
            "publish_timeout = 10",
            &["publish_timeout:", "invalid type: integer `10`", "\"30s\""],
        ),
        (
            "[kafka]\nmessage_timeout = \"-5s\"",
            &["kafka.message_timeout:", "negative"],
        ),
        (
            "[amqp]\nconfirm_timeout = \"\"",
            &["amqp.confirm_timeout:", "empty duration"],
        ),
        (
            "shutdown_timeout = \"soon\"",
            &["shutdown_timeout:", "not a duration"],
        ),
        (
            "poll_interval_max = \"99999999999999999999d\"",
            &["poll_interval_max:", "too long"],
        ),
    ];
    for (text, parts) in cases {
        assert_contains(&config_error(text), parts);
    }
    let reason = parse_duration("3 weeks").expect_err("weeks");
    assert_contains(&reason, &["unknown unit `weeks`"]);
    let reason = parse_duration("1000000000000d").expect_err("overflow");
    assert_contains(&reason, &["too long"]);
}

#[test]
fn bad_types_and_values_name_the_field() {
    let cases: [(&str, &[&str]); 6] = [
        (
            "batch_size = \"500\"",
            &["batch_size:", "invalid type: string"],
        ),
        ("batch_size = -1", &["batch_size:", "-1"]),
        (
            "[retry]\njitter = \"yes\"",
            &["retry.jitter:", "invalid type"],
        ),
        (
            "[dead_letter]\npolicy = \"drop\"",
            &["dead_letter.policy:", "`drop`", "`hold`", "`skip`"],
        ),
        (
            "[http]\nlisten = \"localhost:9090\"",
            &[
                "http.listen:",
                "not an IP address and port",
                "127.0.0.1:9090",
                "(line 2, column 10)",
            ],
        ),
        (
            "[kafka.options]\n\"bootstrap.servers\" = [\"a:1\"]",
            &[
                "kafka.options.\"bootstrap.servers\":",
                "invalid type",
                "string, integer, float or boolean",
            ],
        ),
    ];
    for (text, parts) in cases {
        assert_contains(&config_error(text), parts);
    }
}

#[test]
fn syntax_errors_are_one_line_with_a_position() {
    let message = config_error("batch_size = 1\n\n[retry\nbase_delay = \"1s\"\n");
    assert_contains(&message, &["(line 3, column"]);
    let message = config_error("batch_size = = 3");
    assert_contains(&message, &["(line 1, column 14)"]);
    let message = config_error("batch_size = 1\nbatch_size = 2");
    assert_contains(
        &message,
        &["duplicate key `batch_size`", "(line 2, column 1)"],
    );
}

#[test]
fn out_of_range_values_name_the_field() {
    let cases: [(&str, &[&str]); 11] = [
        (
            "batch_size = 0",
            &[
                "batch_size: 0 is out of range; use 1 to 10000",
                "(line 1, column 1)",
            ],
        ),
        (
            "batch_size = 10001",
            &["batch_size: 10001 is out of range; use 1 to 10000"],
        ),
        (
            "lease_duration = \"1999ms\"",
            &["lease_duration: 1999ms is too short", "at least 2s"],
        ),
        (
            "[retry]\nmax_attempts = 0",
            &[
                "retry.max_attempts: 0 is out of range",
                "at least 1",
                "(line 2",
            ],
        ),
        (
            "[retry]\nbase_delay = \"0s\"",
            &["retry.base_delay: must be more than 0s"],
        ),
        (
            "[retention]\nbatch_size = 0",
            &["retention.batch_size: 0 is out of range; use 1 to 100000"],
        ),
        (
            "[retention]\ninterval = \"0s\"",
            &["retention.interval: must be more than 0s"],
        ),
        (
            "[kafka]\nnew_topic_partitions = 0",
            &["kafka.new_topic_partitions: 0 is out of range"],
        ),
        (
            "[kafka]\nnew_topic_replication_factor = 0",
            &["kafka.new_topic_replication_factor: 0 is out of range"],
        ),
        (
            "poll_interval_min = \"0ms\"",
            &["poll_interval_min: must be more than 0s"],
        ),
        ("instance_id = \" \"", &["instance_id: is empty"]),
    ];
    for (text, parts) in cases {
        assert_contains(&config_error(text), parts);
    }
}

#[test]
fn relations_between_fields_are_checked_and_explained() {
    let cases: [(&str, &[&str]); 6] = [
        (
            "publish_timeout = \"15s\"",
            &[
                "publish_timeout: 15s must be less than half of lease_duration (30s / 2 = 15s)",
                "taken over and published again",
            ],
        ),
        (
            "lease_duration = \"10s\"",
            &[
                "publish_timeout: 10s must be less than half of lease_duration (10s / 2 = 5s)",
                // publish_timeout keeps its default: the position is lease_duration's.
                "(line 1, column 1)",
            ],
        ),
        (
            "poll_interval_min = \"2s\"",
            &["poll_interval_max: 1s is less than poll_interval_min (2s)"],
        ),
        (
            "[retry]\nbase_delay = \"10m\"",
            &[
                "retry.max_delay: 5m is less than retry.base_delay (10m)",
                "(line 2, column 1)",
            ],
        ),
        (
            "[kafka]\nmessage_timeout = \"10s\"",
            &[
                "kafka.message_timeout: 10s must be less than publish_timeout (10s)",
                "delivery",
            ],
        ),
        (
            "[amqp]\nconfirm_timeout = \"11s\"",
            &[
                "amqp.confirm_timeout: 11s must be less than publish_timeout (10s)",
                "confirm",
            ],
        ),
    ];
    for (text, parts) in cases {
        assert_contains(&config_error(text), parts);
    }
    // Raising the bounds together is fine.
    parse_config(
        "lease_duration = \"2m\"\npublish_timeout = \"50s\"\n[kafka]\nmessage_timeout = \"45s\"",
    );
}

#[test]
fn kafka_options_that_break_the_contract_are_refused() {
    let cases: [(&str, &[&str]); 5] = [
        (
            "acks = 1",
            &[
                "kafka.options.acks: \"1\" would weaken acknowledgements",
                "acks=all",
            ],
        ),
        (
            "\"request.required.acks\" = 0",
            &["kafka.options.\"request.required.acks\"", "acks=all"],
        ),
        (
            "\"enable.idempotence\" = false",
            &["kafka.options.\"enable.idempotence\"", "idempotent"],
        ),
        ("\"bootstrap.servers\" = \"a:1\"", &["set from --broker"]),
        (
            "\"message.timeout.ms\" = 100",
            &["set from [kafka] message_timeout"],
        ),
    ];
    for (option, parts) in cases {
        let message = config_error(&format!("[kafka.options]\n{option}\n"));
        assert_contains(&message, parts);
        assert_contains(&message, &["(line 2, column 1)"]);
    }
    parse_config("[kafka.options]\nacks = -1\n");
}

#[test]
fn validate_reports_without_a_file() {
    let config = RelayConfig {
        batch_size: 0,
        ..RelayConfig::default()
    };
    let message = one_line(config.validate());
    assert_eq!(
        message,
        "config --config: batch_size: 0 is out of range; use 1 to 10000"
    );
}

#[test]
fn load_names_a_missing_file() {
    let path = std::env::temp_dir().join("outbox-relay-no-such-config.toml");
    let message = one_line(RelayConfig::load(&path));
    assert_contains(
        &message,
        &[&format!("config {}: cannot read the file", path.display())],
    );
}

#[test]
fn load_reads_a_file_and_names_it_in_errors() {
    let directory =
        std::env::temp_dir().join(format!("outbox-relay-config-{}", std::process::id()));
    std::fs::create_dir_all(&directory).expect("temp dir");
    let path = directory.join("relay.toml");
    std::fs::write(&path, "batch_size = 42\n").expect("write");
    assert_eq!(RelayConfig::load(&path).expect("loads").batch_size, 42);

    std::fs::write(&path, "\n[retry]\nbase_delay = \"1y\"\n").expect("write");
    let message = one_line(RelayConfig::load(&path));
    assert_contains(
        &message,
        &[
            &format!(
                "config {}: retry.base_delay: unknown unit `y`",
                path.display()
            ),
            "(line 3, column 14)",
        ],
    );
    std::fs::remove_dir_all(&directory).expect("cleanup");
}

#[test]
fn handover_after_defaults_to_three_leases_and_is_at_least_one() {
    let defaults = parse_config("");
    assert_eq!(defaults.handover_after, None);
    assert_eq!(defaults.effective_handover_after(), Duration::from_secs(90));
    let long_lease = parse_config("lease_duration = \"40s\"");
    assert_eq!(
        long_lease.effective_handover_after(),
        Duration::from_secs(120)
    );
    let set = parse_config("handover_after = \"2m\"");
    assert_eq!(set.effective_handover_after(), Duration::from_secs(120));

    assert_contains(
        &config_error("handover_after = \"10s\""),
        &[
            "handover_after: 10s is shorter than lease_duration (30s)",
            "hand its partitions over",
        ],
    );
    assert_contains(
        &config_error("handover_after = \"soon\""),
        &["handover_after"],
    );
}
