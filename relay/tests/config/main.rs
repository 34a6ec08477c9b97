//! The relay's configuration layer: `--broker` and `--database-url` values,
//! their resolution from flags and environment, and the TOML config file.

use std::collections::HashMap;
use std::time::Duration;

use outbox::mask_password;
use outbox_relay::Error;
use outbox_relay::config::{BrokerUrl, DEFAULT_BROKER, resolve_broker_url};
use outbox_relay::config::{DEFAULT_DATABASE_URL, DatabaseUrl, resolve_database_url};
use outbox_relay::config::{DeadLetterPolicy, RelayConfig, RoutingKey, parse_duration};

const EXAMPLE: &str = include_str!("../../examples/relay.toml");

mod file_defaults;
mod file_errors;
mod file_values;
mod urls;

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
