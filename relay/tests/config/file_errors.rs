//! The config file: every error is one line naming the file, the field
//! and, for a parse error, its position.

use super::*;

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
    let cases: [(&str, &[&str]); 9] = [
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
            "[ui]\nenabled = \"yes\"",
            &["ui.enabled:", "invalid type", "(line 2, column 11)"],
        ),
        ("[ui]\ntoken_file = \"\"", &["ui.token_file:", "is empty"]),
        (
            "[ui]\ntokens = [\"alice=x\"]",
            &[
                "unknown field `tokens` in [ui]",
                "`enabled`",
                "`token_file`",
            ],
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
fn redis_stream_settings_are_checked_and_explained() {
    let cases: [(&str, &[&str]); 8] = [
        (
            "[redis]\nresponse_timeout = \"10s\"",
            &["redis.response_timeout: 10s must be less than publish_timeout (10s)"],
        ),
        (
            "[redis]\nconnect_timeout = \"0s\"",
            &["redis.connect_timeout"],
        ),
        (
            "[redis.streams.orders]\nkey = \"{topic}:p:{partition}\"",
            &[
                "redis.streams.orders.partitions",
                "has {partition}",
                "(line 2, column 1)",
            ],
        ),
        (
            "[redis.streams.orders]\npartitions = 4",
            &[
                "redis.streams.orders.partitions",
                "no {partition}",
                "(line 2, column 1)",
            ],
        ),
        (
            "[redis.streams.orders]\nkey = \"{topic}:{tenant}\"",
            &["redis.streams.orders.key", "`{tenant}`", "{aggregate_type}"],
        ),
        (
            "[redis.streams.orders]\nmaxlen = 10\nmax_age = \"1h\"",
            &["redis.streams.orders.max_age", "not both"],
        ),
        (
            "[redis.streams.orders]\nmaxlen = 0",
            &["redis.streams.orders.maxlen", "at least 1"],
        ),
        (
            "[redis.streams.orders]\nstream = \"x\"",
            &["unknown field `stream`", "`key`"],
        ),
    ];
    for (text, parts) in cases {
        assert_contains(&config_error(text), parts);
    }
}

#[test]
fn nats_settings_are_checked_and_explained() {
    let cases: [(&str, &[&str]); 8] = [
        (
            "[nats]\nack_timeout = \"10s\"",
            &["nats.ack_timeout: 10s must be less than publish_timeout (10s)"],
        ),
        (
            "[nats]\nconnect_timeout = \"0s\"",
            &["nats.connect_timeout"],
        ),
        (
            "[nats]\nuser = \"relay\"",
            &["nats.password", "user is set without its password"],
        ),
        (
            "[nats]\npassword = \"hunter2\"",
            &["nats.user", "password is set without a user"],
        ),
        (
            "[nats]\ntoken = \"hunter2\"\ncreds_file = \"relay.creds\"",
            &["nats.creds_file", "one way of logging in"],
        ),
        (
            "[nats.subjects.orders]\nsubject = \"orders.{tenant}\"",
            &[
                "nats.subjects.orders.subject",
                "`{tenant}`",
                "{aggregate_id}",
            ],
        ),
        (
            "[nats.subjects.orders]\nsubject = \"orders.>\"",
            &["nats.subjects.orders.subject", "wildcard `>`"],
        ),
        (
            "[nats.subjects.orders]\nstream = \"x\"",
            &["unknown field `stream`", "`subject`"],
        ),
    ];
    for (text, parts) in cases {
        let message = config_error(text);
        assert!(!message.contains("hunter2"), "{message}");
        assert_contains(&message, parts);
    }
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
    let mut config = RelayConfig::default();
    config.batch_size = Some(0);
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
    assert_eq!(RelayConfig::load(&path).expect("loads").batch_size(), 42);

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
