//! The config file: its defaults, and the example that shows every one.

use super::*;

#[test]
fn defaults_are_the_documented_values() {
    let config = RelayConfig::default();
    assert_eq!(config.batch_size(), 500);
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
    assert!(config.ui.enabled, "the operators' page is on");
    assert_eq!(config.ui.token_file, None);
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
        "redis",
        "nats",
        "http",
        "ui",
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
                || (table == "amqp" && field == "routing" && EXAMPLE.contains("# [amqp.routing.\""))
                || (table == "redis" && field == "streams" && EXAMPLE.contains("# [redis.streams.\""))
                || (table == "nats" && field == "subjects" && EXAMPLE.contains("# [nats.subjects.\""));
            assert!(
                shown,
                "relay/examples/relay.toml does not show [{table}] {field}"
            );
        }
    }
}
