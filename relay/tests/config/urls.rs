//! `--broker` and `--database-url` values, and their resolution from
//! flags, then the environment, then the default.

use super::*;

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
fn redis_urls_parse() {
    let cases = [
        "redis://localhost:6379",
        "redis://127.0.0.1",
        "redis://:s3cret@redis.internal:6380/2",
        "redis://relay:s3cret@[::1]:6379/0",
        "rediss://relay:s3cret@redis.example.com:6380",
    ];
    for input in cases {
        let parsed = BrokerUrl::parse(input).unwrap_or_else(|error| panic!("{input}: {error}"));
        assert_eq!(
            parsed,
            BrokerUrl::Redis {
                url: input.to_owned()
            }
        );
        assert_eq!(parsed.kind(), "redis");
    }
    let cluster = BrokerUrl::parse("redis+cluster://relay:s3cret@a:7000, b:7001,[::1]:7002")
        .expect("cluster");
    assert_eq!(
        cluster,
        BrokerUrl::RedisCluster {
            nodes: vec![
                "redis://relay:s3cret@a:7000".to_owned(),
                "redis://relay:s3cret@b:7001".to_owned(),
                "redis://relay:s3cret@[::1]:7002".to_owned(),
            ]
        }
    );
    assert_eq!(cluster.kind(), "redis-cluster");
    assert_eq!(
        cluster.to_string(),
        "redis+cluster://relay:***@a:7000,b:7001,[::1]:7002"
    );
    let debug = format!("{cluster:?}");
    assert!(!debug.contains("s3cret"), "{debug}");
    assert_eq!(
        BrokerUrl::parse("REDISS+CLUSTER://a:7000").expect("tls cluster"),
        BrokerUrl::RedisCluster {
            nodes: vec!["rediss://a:7000".to_owned()]
        }
    );
}

#[test]
fn nats_server_lists_parse() {
    let nats = |servers: &[&str]| BrokerUrl::Nats {
        servers: servers.iter().map(|server| (*server).to_owned()).collect(),
    };
    let cases = [
        ("nats://localhost:4222", nats(&["nats://localhost:4222"])),
        ("nats://127.0.0.1", nats(&["nats://127.0.0.1:4222"])),
        (
            "nats://a.example.com:4222, b.example.com:4223,[::1]",
            nats(&[
                "nats://a.example.com:4222",
                "nats://b.example.com:4223",
                "nats://[::1]:4222",
            ]),
        ),
        ("  NATS://n1:4222/ ", nats(&["nats://n1:4222"])),
        (
            "tls://nats.example.com",
            nats(&["tls://nats.example.com:4222"]),
        ),
    ];
    for (input, expected) in cases {
        let parsed = BrokerUrl::parse(input).unwrap_or_else(|error| panic!("{input}: {error}"));
        assert_eq!(parsed, expected, "{input}");
        assert_eq!(parsed.kind(), "nats");
    }
    let parsed: BrokerUrl = "nats://a:1,b:2".parse().expect("FromStr");
    assert_eq!(parsed.to_string(), "nats://a:1,b:2");
    assert_eq!(
        BrokerUrl::parse("tls://a,b:4333").expect("tls").to_string(),
        "tls://a:4222,b:4333"
    );
}

#[test]
fn bad_nats_urls_name_the_problem_and_mask_the_password() {
    let cases: [(&str, &[&str]); 6] = [
        ("nats://", &["no servers", "nats://HOST[:PORT]"]),
        (
            "nats://relay:hunter2@localhost:4222",
            &["takes no credentials", "[nats]", "relay:***@localhost"],
        ),
        ("nats://a:4222,", &["server 2 of the list is empty"]),
        ("nats://a:0", &["server `a:0`", "port 0"]),
        ("nats://a:4222/orders", &["`/orders`", "[nats]"]),
        ("tls://bad host", &["`bad host`", "not a host name"]),
    ];
    for (input, parts) in cases {
        let message = broker_error(input);
        assert!(message.starts_with("invalid broker `"), "{message}");
        assert!(!message.contains("hunter2"), "{message}");
        assert_contains(&message, parts);
    }
}

#[test]
fn bad_redis_urls_name_the_problem_and_mask_the_password() {
    let cases: [(&str, &[&str]); 8] = [
        ("redis://", &["no host", "redis://"]),
        ("redis://:hunter2@:6379", &["no host"]),
        ("redis://h:0", &["port 0", "1 to 65535"]),
        (
            "redis://h:6379/orders",
            &["database `orders`", "not a number"],
        ),
        ("redis://a:6379,b:6379", &["one server", "redis+cluster://"]),
        ("redis+cluster://", &["no nodes"]),
        ("redis+cluster://a:7000,b", &["node `b`", "no port"]),
        ("redis+cluster://a:7000/1", &["no database number"]),
    ];
    for (input, parts) in cases {
        let message = broker_error(input);
        assert!(message.starts_with("invalid broker `"), "{message}");
        assert!(!message.contains("hunter2"), "{message}");
        assert_contains(&message, parts);
    }
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
    let accepted = [
        "kafka://",
        "amqp://",
        "amqps://",
        "redis://",
        "rediss://",
        "redis+cluster://",
        "nats://",
        "tls://",
        "stdout",
    ];
    let message = broker_error("mqtt://u:hunter2@localhost:1883");
    assert!(!message.contains("hunter2"), "{message}");
    assert_contains(&message, &["unsupported scheme `mqtt`"]);
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
