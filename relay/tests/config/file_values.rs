//! The config file: good values, read as written.

use super::*;

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

        [ui]
        enabled = false
        token_file = "/etc/outbox/ui-tokens"
        "#,
    );
    assert_eq!(config.batch_size(), 10_000);
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
    assert!(!config.ui.enabled);
    assert_eq!(
        config.ui.token_file.as_deref(),
        Some(std::path::Path::new("/etc/outbox/ui-tokens"))
    );
}

#[test]
fn nats_settings_and_subjects_parse() {
    let config = parse_config(
        r#"
        [nats]
        ack_timeout = "2s"
        connect_timeout = "1s"
        user = "relay"
        password = "hunter2"
        tls_ca_file = "/etc/outbox/nats-ca.pem"

        [nats.subjects."orders"]
        subject = "orders.{aggregate_type}.{event_type}"

        [nats.subjects."audit"]
        "#,
    );
    assert_eq!(config.nats.ack_timeout, Duration::from_secs(2));
    assert_eq!(config.nats.connect_timeout, Duration::from_secs(1));
    assert_eq!(config.nats.user.as_deref(), Some("relay"));
    assert_eq!(config.nats.password.as_deref(), Some("hunter2"));
    assert_eq!(
        config.nats.tls_ca_file.as_deref(),
        Some(std::path::Path::new("/etc/outbox/nats-ca.pem"))
    );
    let debug = format!("{:?}", config.nats);
    assert!(!debug.contains("hunter2"), "{debug}");
    let orders = config.nats.subjects["orders"]
        .subject_template()
        .expect("valid subject");
    assert_eq!(orders.template(), "orders.{aggregate_type}.{event_type}");
    let audit = config.nats.subjects["audit"]
        .subject_template()
        .expect("default");
    assert_eq!(audit.template(), "{topic}");
    let defaults = RelayConfig::default().nats;
    assert_eq!(defaults.ack_timeout, Duration::from_secs(5));
    assert_eq!(defaults.connect_timeout, Duration::from_secs(5));
    assert_eq!(defaults.token, None);
    assert_eq!(defaults.creds_file, None);
    assert_eq!(defaults.tls_ca_file, None);
}

#[test]
fn redis_streams_parse() {
    let config = parse_config(
        r#"
        [redis]
        response_timeout = "2s"
        connect_timeout = "1s"

        [redis.streams."orders"]
        key = "orders:p:{partition}"
        partitions = 8
        maxlen = 1000000

        [redis.streams."audit"]
        max_age = "7d"
        "#,
    );
    assert_eq!(config.redis.response_timeout, Duration::from_secs(2));
    assert_eq!(config.redis.connect_timeout, Duration::from_secs(1));
    let orders = &config.redis.streams["orders"];
    assert_eq!(orders.partitions, Some(8));
    assert_eq!(orders.maxlen, Some(1_000_000));
    let key = orders.stream_key().expect("valid key");
    assert!(key.uses_partition());
    assert_eq!(key.template(), "orders:p:{partition}");
    let audit = &config.redis.streams["audit"];
    assert_eq!(audit.max_age, Some(Duration::from_secs(7 * 86_400)));
    assert_eq!(audit.stream_key().expect("default").template(), "{topic}");
    assert_eq!(
        RelayConfig::default().redis.response_timeout,
        Duration::from_secs(5)
    );
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
