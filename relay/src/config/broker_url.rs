//! [`BrokerUrl`]: the `--broker` value, checked before anything connects,
//! and [`resolve_broker_url`], which picks it from the flag, the
//! environment or the default.

use std::fmt;
use std::str::FromStr;

use crate::config::database_url::{UrlParts, parse_port, resolve_url, split_host_port};
use crate::error::Error;
use crate::publish::has_name_characters_only;
use outbox::mask_password;

/// The broker the relay publishes to when neither `--broker` nor the
/// environment names one.
pub const DEFAULT_BROKER: &str = "stdout";

/// The environment variable consulted for the broker.
const BROKER_VARIABLE: &str = "OUTBOX_BROKER";

const ACCEPTED_BROKERS: &str = "expected kafka://HOST:PORT[,HOST:PORT...], \
                                amqp://USER:PASSWORD@HOST[:PORT]/VHOST, amqps://..., \
                                redis://[USER:PASSWORD@]HOST:PORT[/DB], rediss://..., \
                                redis+cluster://HOST:PORT[,HOST:PORT...], \
                                nats://HOST[:PORT][,HOST[:PORT]...], tls://... or stdout";

/// Where the relay publishes.
///
/// [`Display`](fmt::Display) masks the AMQP password.
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum BrokerUrl {
    /// A Kafka cluster, reached through its bootstrap brokers.
    Kafka {
        /// The bootstrap brokers, each `host:port`, in the order given
        /// (`bootstrap.servers` is these joined with `,`).
        brokers: Vec<String>,
    },
    /// A RabbitMQ (AMQP 0-9-1) server.
    Amqp {
        /// The full `amqp://` or `amqps://` URL as given, with its password
        /// and its percent-encoded vhost (`%2f` for `/`). Without a port,
        /// the client uses 5672 for `amqp://` and 5671 for `amqps://`.
        url: String,
    },
    /// A Redis server, whose streams take the events (`XADD`).
    Redis {
        /// The full `redis://` or `rediss://` URL as given, with its
        /// password and database number.
        url: String,
    },
    /// A Redis Cluster, reached through some of its nodes.
    RedisCluster {
        /// One `redis://` (or `rediss://`) URL per node given, with the
        /// credentials of the `redis+cluster://` URL.
        nodes: Vec<String>,
    },
    /// NATS servers with JetStream, reached through any of them.
    Nats {
        /// One `nats://host:port` (or `tls://host:port`) URL per server
        /// given, in the order given, the port 4222 when none was given.
        /// Credentials are not part of them: they come from `[nats]`.
        servers: Vec<String>,
    },
    /// One CloudEvents JSON document per line on standard output, for
    /// trying the relay out and for piping into other tools.
    Stdout,
}

impl BrokerUrl {
    /// Checks `input` and classifies it by scheme.
    ///
    /// Accepts `kafka://host:port[,host:port...]` (every broker with a port
    /// from 1 to 65535), `amqp://user:password@host[:port][/vhost][?query]`,
    /// `amqps://...`, `redis://[user:password@]host[:port][/db]`,
    /// `rediss://...`, `redis+cluster://[user:password@]host:port[,host:port...]`
    /// (`rediss+cluster://` for TLS), `nats://host[:port][,host[:port]...]`
    /// (`tls://` for TLS) and `stdout`. Surrounding whitespace is ignored and the
    /// scheme is case-insensitive.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidBrokerUrl`], with the password masked and a reason
    /// that names what is wrong and what is accepted;
    /// [`Error::FeatureNotBuilt`] for a broker (or `amqps://`) this build
    /// was compiled without.
    pub fn parse(input: &str) -> Result<Self, Error> {
        let trimmed = input.trim();
        let broker = parse_broker(trimmed).map_err(|reason| Error::InvalidBrokerUrl {
            url: mask_password(trimmed),
            reason,
        })?;
        broker.check_built()?;
        Ok(broker)
    }

    /// [`Error::FeatureNotBuilt`] when this build cannot publish to the
    /// broker.
    pub(crate) fn check_built(&self) -> Result<(), Error> {
        let needed_for = || format!("--broker {self}");
        match self {
            BrokerUrl::Kafka { .. } => {
                Error::require_feature(self.feature(), cfg!(feature = "kafka"), needed_for)
            }
            BrokerUrl::Amqp { url } => {
                Error::require_feature(self.feature(), cfg!(feature = "rabbitmq"), needed_for)?;
                let secure = url
                    .get(..6)
                    .is_some_and(|scheme| scheme.eq_ignore_ascii_case("amqps:"));
                Error::require_feature("tls", !secure || cfg!(feature = "tls"), needed_for)
            }
            BrokerUrl::Redis { url } => {
                Error::require_feature(self.feature(), cfg!(feature = "redis"), needed_for)?;
                Error::require_feature("tls", !is_rediss(url) || cfg!(feature = "tls"), needed_for)
            }
            BrokerUrl::RedisCluster { nodes } => {
                Error::require_feature(self.feature(), cfg!(feature = "redis"), needed_for)?;
                let secure = nodes.first().is_some_and(|node| is_rediss(node));
                Error::require_feature("tls", !secure || cfg!(feature = "tls"), needed_for)
            }
            // async-nats always carries its TLS (rustls on `ring`).
            BrokerUrl::Nats { .. } => {
                Error::require_feature(self.feature(), cfg!(feature = "nats"), needed_for)
            }
            BrokerUrl::Stdout => Ok(()),
        }
    }

    /// The Cargo feature that builds this broker's publisher (`stdout` is
    /// always built).
    pub(crate) fn feature(&self) -> &'static str {
        match self {
            BrokerUrl::Kafka { .. } => "kafka",
            BrokerUrl::Amqp { .. } => "rabbitmq",
            BrokerUrl::Redis { .. } | BrokerUrl::RedisCluster { .. } => "redis",
            BrokerUrl::Nats { .. } => "nats",
            BrokerUrl::Stdout => "stdout",
        }
    }

    /// The broker's kind, for logs: `kafka`, `amqp`, `redis`,
    /// `redis-cluster`, `nats` or `stdout`.
    pub fn kind(&self) -> &'static str {
        match self {
            BrokerUrl::Kafka { .. } => "kafka",
            BrokerUrl::Amqp { .. } => "amqp",
            BrokerUrl::Redis { .. } => "redis",
            BrokerUrl::RedisCluster { .. } => "redis-cluster",
            BrokerUrl::Nats { .. } => "nats",
            BrokerUrl::Stdout => "stdout",
        }
    }
}

impl FromStr for BrokerUrl {
    type Err = Error;

    fn from_str(input: &str) -> Result<Self, Self::Err> {
        BrokerUrl::parse(input)
    }
}

/// The broker as it would be written on the command line, with any
/// password masked.
impl fmt::Display for BrokerUrl {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BrokerUrl::Kafka { brokers } => write!(formatter, "kafka://{}", brokers.join(",")),
            BrokerUrl::Amqp { url } | BrokerUrl::Redis { url } => {
                formatter.write_str(&mask_password(url))
            }
            BrokerUrl::RedisCluster { nodes } => {
                formatter.write_str(&mask_password(&cluster_url(nodes)))
            }
            BrokerUrl::Nats { servers } => formatter.write_str(&nats_url(servers)),
            BrokerUrl::Stdout => formatter.write_str("stdout"),
        }
    }
}

/// Masks the password, like [`Display`](fmt::Display), so that `{:?}` is
/// safe to log too.
impl fmt::Debug for BrokerUrl {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BrokerUrl::Kafka { brokers } => formatter
                .debug_struct("Kafka")
                .field("brokers", brokers)
                .finish(),
            BrokerUrl::Amqp { url } => formatter
                .debug_struct("Amqp")
                .field("url", &mask_password(url))
                .finish(),
            BrokerUrl::Redis { url } => formatter
                .debug_struct("Redis")
                .field("url", &mask_password(url))
                .finish(),
            BrokerUrl::RedisCluster { nodes } => formatter
                .debug_struct("RedisCluster")
                .field(
                    "nodes",
                    &nodes
                        .iter()
                        .map(|node| mask_password(node))
                        .collect::<Vec<_>>(),
                )
                .finish(),
            BrokerUrl::Nats { servers } => formatter
                .debug_struct("Nats")
                .field("servers", servers)
                .finish(),
            BrokerUrl::Stdout => formatter.write_str("Stdout"),
        }
    }
}

/// Picks the broker: the `--broker` flag if given, else the environment
/// variable `OUTBOX_BROKER` if set and not blank, else [`DEFAULT_BROKER`].
///
/// `env` looks up one environment variable; pass
/// `|name| std::env::var(name).ok()` in the binary and a map in tests.
///
/// # Errors
///
/// [`Error::InvalidBrokerUrl`] for the value that was picked; the reason
/// says where it came from.
pub fn resolve_broker_url(
    flag: Option<&str>,
    env: impl Fn(&str) -> Option<String>,
) -> Result<BrokerUrl, Error> {
    resolve_url(
        flag.map(|value| ("--broker", value)),
        &[BROKER_VARIABLE],
        DEFAULT_BROKER,
        env,
        BrokerUrl::parse,
    )
}

fn parse_broker(input: &str) -> Result<BrokerUrl, String> {
    if input.is_empty() {
        return Err(format!("the value is empty; {ACCEPTED_BROKERS}"));
    }
    if input.eq_ignore_ascii_case("stdout") {
        return Ok(BrokerUrl::Stdout);
    }
    let Some((scheme, rest)) = input.split_once("://") else {
        return Err(without_scheme(input));
    };
    match scheme.to_ascii_lowercase().as_str() {
        "kafka" => parse_kafka(rest),
        "amqp" | "amqps" => parse_amqp(&scheme.to_ascii_lowercase(), rest),
        "redis" | "rediss" => parse_redis(&scheme.to_ascii_lowercase(), rest),
        "redis+cluster" | "rediss+cluster" => {
            parse_redis_cluster(&scheme.to_ascii_lowercase(), rest)
        }
        "nats" | "tls" => parse_nats(&scheme.to_ascii_lowercase(), rest),
        "rabbitmq" | "rabbit" => Err(format!(
            "unsupported scheme `{scheme}`; RabbitMQ is reached with amqp:// or amqps:// ({ACCEPTED_BROKERS})"
        )),
        "stdout" => Err(format!(
            "write `stdout` alone, without `://` ({ACCEPTED_BROKERS})"
        )),
        _ => Err(format!("unsupported scheme `{scheme}`; {ACCEPTED_BROKERS}")),
    }
}

/// The reason for a value without `://`: a bare `host:port` gets a hint.
fn without_scheme(input: &str) -> String {
    let looks_like_host_port = input.rsplit_once(':').is_some_and(|(host, port)| {
        !host.is_empty() && !port.is_empty() && port.bytes().all(|byte| byte.is_ascii_digit())
    });
    if looks_like_host_port {
        format!("no scheme; for a Kafka broker write kafka://{input} ({ACCEPTED_BROKERS})")
    } else {
        format!("no scheme; {ACCEPTED_BROKERS}")
    }
}

fn parse_kafka(rest: &str) -> Result<BrokerUrl, String> {
    let UrlParts {
        authority,
        after_authority,
    } = UrlParts::split(rest);
    if authority.contains('@') {
        return Err(
            "kafka:// takes no credentials; set sasl.username and sasl.password \
                    in [kafka.options] of the config file"
                .to_owned(),
        );
    }
    if !after_authority.is_empty() && after_authority != "/" {
        return Err(format!(
            "kafka:// takes only a list of HOST:PORT, but `{after_authority}` follows it; \
             set client options in [kafka.options] of the config file"
        ));
    }
    if authority.is_empty() {
        return Err(
            "no brokers after kafka://; write kafka://HOST:PORT[,HOST:PORT...], \
                    e.g. kafka://localhost:9092"
                .to_owned(),
        );
    }
    let mut brokers = Vec::new();
    for (index, broker) in authority.split(',').enumerate() {
        let position = index + 1;
        let broker = broker.trim();
        if broker.is_empty() {
            return Err(format!(
                "broker {position} of the list is empty; write kafka://HOST:PORT[,HOST:PORT...]"
            ));
        }
        check_kafka_broker(broker).map_err(|reason| format!("broker `{broker}`: {reason}"))?;
        brokers.push(broker.to_owned());
    }
    Ok(BrokerUrl::Kafka { brokers })
}

fn check_kafka_broker(broker: &str) -> Result<(), String> {
    let (host, port) = split_host_port(broker)?;
    check_host(host)?;
    match port {
        Some(port) => parse_port(port).map(drop),
        None => Err(format!(
            "no port; every Kafka broker needs one, e.g. {host}:9092"
        )),
    }
}

fn parse_amqp(scheme: &str, rest: &str) -> Result<BrokerUrl, String> {
    let path = checked_server(
        rest,
        &format!(
            "{scheme}://USER:PASSWORD@HOST[:PORT]/VHOST, e.g. {scheme}://guest:guest@localhost/%2f"
        ),
    )?;
    if let Some(vhost) = path.strip_prefix('/')
        && vhost.contains('/')
    {
        return Err(format!(
            "the vhost `{vhost}` contains `/`; percent-encode it as %2f (the vhost `/` is written {scheme}://HOST/%2f)"
        ));
    }
    Ok(BrokerUrl::Amqp {
        url: format!("{scheme}://{rest}"),
    })
}

/// The path of a one-server URL (`rest` follows `scheme://`), once the host
/// and port after any `USER:PASSWORD@` are checked; `usage` says how to
/// write the URL when it names no host.
fn checked_server<'a>(rest: &'a str, usage: &str) -> Result<&'a str, String> {
    let UrlParts {
        authority,
        after_authority,
    } = UrlParts::split(rest);
    let host_and_port = authority
        .rfind('@')
        .map_or(authority, |at| &authority[at + 1..]);
    let (host, port) = split_host_port(host_and_port)?;
    if host.is_empty() {
        return Err(format!("no host; write {usage}"));
    }
    check_host(host)?;
    if let Some(port) = port {
        parse_port(port)?;
    }
    Ok(after_authority.split(['?', '#']).next().unwrap_or_default())
}

/// Whether `url` is a `rediss://` (TLS) URL.
fn is_rediss(url: &str) -> bool {
    url.get(..7)
        .is_some_and(|scheme| scheme.eq_ignore_ascii_case("rediss:"))
}

/// The `redis+cluster://` form of a cluster's node URLs.
fn cluster_url(nodes: &[String]) -> String {
    let Some((scheme, first)) = nodes.first().and_then(|node| node.split_once("://")) else {
        return "redis+cluster://".to_owned();
    };
    let credentials = first.rfind('@').map_or("", |at| &first[..=at]);
    let hosts: Vec<&str> = nodes
        .iter()
        .filter_map(|node| node.split_once("://"))
        .map(|(_, rest)| rest.rfind('@').map_or(rest, |at| &rest[at + 1..]))
        .collect();
    format!("{scheme}+cluster://{credentials}{}", hosts.join(","))
}

fn parse_redis(scheme: &str, rest: &str) -> Result<BrokerUrl, String> {
    if UrlParts::split(rest).authority.contains(',') {
        return Err(format!(
            "{scheme}:// names one server; for a Redis Cluster write {scheme}+cluster://HOST:PORT[,HOST:PORT...]"
        ));
    }
    let path = checked_server(
        rest,
        &format!("{scheme}://[USER:PASSWORD@]HOST[:PORT][/DB], e.g. {scheme}://localhost:6379"),
    )?;
    let database = path.trim_start_matches('/');
    if !database.is_empty() && database.parse::<u16>().is_err() {
        return Err(format!(
            "the database `{database}` is not a number; write {scheme}://HOST:PORT/0 or leave it out"
        ));
    }
    Ok(BrokerUrl::Redis {
        url: format!("{scheme}://{rest}"),
    })
}

fn parse_redis_cluster(scheme: &str, rest: &str) -> Result<BrokerUrl, String> {
    let node_scheme = scheme.trim_end_matches("+cluster");
    let UrlParts {
        authority,
        after_authority,
    } = UrlParts::split(rest);
    if !after_authority.is_empty() && after_authority != "/" {
        return Err(format!(
            "{scheme}:// takes only [USER:PASSWORD@]HOST:PORT[,HOST:PORT...], but `{after_authority}` follows it \
             (a cluster has no database number)"
        ));
    }
    let (credentials, hosts) = match authority.rfind('@') {
        Some(at) => (&authority[..=at], &authority[at + 1..]),
        None => ("", authority),
    };
    if hosts.is_empty() {
        return Err(format!(
            "no nodes after {scheme}://; write {scheme}://HOST:PORT[,HOST:PORT...]"
        ));
    }
    let mut nodes = Vec::new();
    for (index, node) in hosts.split(',').enumerate() {
        let node = node.trim();
        if node.is_empty() {
            return Err(format!(
                "node {} of the list is empty; write {scheme}://HOST:PORT[,HOST:PORT...]",
                index + 1
            ));
        }
        let (host, port) =
            split_host_port(node).map_err(|reason| format!("node `{node}`: {reason}"))?;
        check_host(host).map_err(|reason| format!("node `{node}`: {reason}"))?;
        match port {
            Some(port) => parse_port(port).map_err(|reason| format!("node `{node}`: {reason}"))?,
            None => {
                return Err(format!(
                    "node `{node}`: no port; every cluster node needs one, e.g. {host}:6379"
                ));
            }
        };
        nodes.push(format!("{node_scheme}://{credentials}{node}"));
    }
    Ok(BrokerUrl::RedisCluster { nodes })
}

/// The `nats://a:4222,b:4222` form of the servers' URLs (the scheme of
/// the first).
fn nats_url(servers: &[String]) -> String {
    let scheme = servers
        .first()
        .and_then(|server| server.split_once("://"))
        .map_or("nats", |(scheme, _)| scheme);
    let hosts: Vec<&str> = servers
        .iter()
        .map(|server| {
            server
                .split_once("://")
                .map_or(server.as_str(), |(_, host)| host)
        })
        .collect();
    format!("{scheme}://{}", hosts.join(","))
}

/// The port of a NATS server named without one.
const NATS_DEFAULT_PORT: u16 = 4222;

fn parse_nats(scheme: &str, rest: &str) -> Result<BrokerUrl, String> {
    let UrlParts {
        authority,
        after_authority,
    } = UrlParts::split(rest);
    if authority.contains('@') {
        return Err(format!(
            "{scheme}:// takes no credentials; set user and password, token or creds_file \
             in [nats] of the config file"
        ));
    }
    if !after_authority.is_empty() && after_authority != "/" {
        return Err(format!(
            "{scheme}:// takes only a list of HOST[:PORT], but `{after_authority}` follows it; \
             set subjects and timeouts in [nats] of the config file"
        ));
    }
    if authority.is_empty() {
        return Err(format!(
            "no servers after {scheme}://; write {scheme}://HOST[:PORT][,HOST[:PORT]...], \
             e.g. {scheme}://localhost:4222"
        ));
    }
    let mut servers = Vec::new();
    for (index, server) in authority.split(',').enumerate() {
        let server = server.trim();
        if server.is_empty() {
            return Err(format!(
                "server {} of the list is empty; write {scheme}://HOST[:PORT][,HOST[:PORT]...]",
                index + 1
            ));
        }
        let (host, port) =
            split_host_port(server).map_err(|reason| format!("server `{server}`: {reason}"))?;
        check_host(host).map_err(|reason| format!("server `{server}`: {reason}"))?;
        let port = match port {
            Some(port) => {
                parse_port(port).map_err(|reason| format!("server `{server}`: {reason}"))?
            }
            None => NATS_DEFAULT_PORT,
        };
        servers.push(format!("{scheme}://{host}:{port}"));
    }
    Ok(BrokerUrl::Nats { servers })
}

/// A host name, an IPv4 address or a bracketed IPv6 address.
fn check_host(host: &str) -> Result<(), String> {
    if host.is_empty() {
        return Err("no host before the port".to_owned());
    }
    if let Some(inner) = host
        .strip_prefix('[')
        .and_then(|host| host.strip_suffix(']'))
    {
        return inner
            .parse::<std::net::Ipv6Addr>()
            .map(drop)
            .map_err(|_| format!("`{host}` is not an IPv6 address"));
    }
    if has_name_characters_only(host) {
        Ok(())
    } else {
        Err(format!(
            "`{host}` is not a host name (letters, digits, `-`, `.`) or IP address"
        ))
    }
}
