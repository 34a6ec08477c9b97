//! `[nats]`: the NATS JetStream publisher's settings: credentials,
//! timeouts and the subject of each topic.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use super::deserialize;
use crate::publish::SubjectTemplate;

/// `[nats]`: the NATS JetStream publisher (used with `--broker nats://...`
/// or `tls://...`). An event is published to the subject named by its
/// `topic`, unless `[nats.subjects."<topic>"]` names another; a JetStream
/// stream must take that subject.
///
/// At most one way of logging in: `user` with `password`, `token`, or
/// `creds_file` (a `.creds` file with a user JWT and its nkey seed).
/// `Debug` never shows the password, the token or the file's contents.
#[derive(Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct NatsConfig {
    /// The user name; with `password`. Default: none.
    pub user: Option<String>,

    /// The password of `user`. Default: none.
    pub password: Option<String>,

    /// A token. Default: none.
    pub token: Option<String>,

    /// A `.creds` file: the user JWT, and the nkey seed that signs the
    /// server's nonce. Read as the relay connects. Default: none.
    pub creds_file: Option<PathBuf>,

    /// PEM certificates of the authorities the servers' TLS certificates
    /// must chain to, instead of the system's roots; setting it requires
    /// TLS, also on `nats://` URLs. Default: none (`tls://` trusts the
    /// system's roots, or the bundle `SSL_CERT_FILE` names).
    pub tls_ca_file: Option<PathBuf>,

    /// How long a publish waits for the stream's acknowledgement. More than
    /// zero and less than `publish_timeout`. Default `"5s"`.
    #[serde(deserialize_with = "deserialize::duration")]
    pub ack_timeout: Duration,

    /// How long connecting may take. More than zero. Default `"5s"`.
    #[serde(deserialize_with = "deserialize::duration")]
    pub connect_timeout: Duration,

    /// Subjects per topic: `[nats.subjects."orders"]` with `subject = "..."`.
    /// Default: none (each topic's events go to the subject named after it).
    pub subjects: BTreeMap<String, NatsSubjectConfig>,
}

impl Default for NatsConfig {
    fn default() -> Self {
        NatsConfig {
            user: None,
            password: None,
            token: None,
            creds_file: None,
            tls_ca_file: None,
            ack_timeout: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(5),
            subjects: BTreeMap::new(),
        }
    }
}

impl std::fmt::Debug for NatsConfig {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let masked = |secret: &Option<String>| secret.as_ref().map(|_| "***");
        formatter
            .debug_struct("NatsConfig")
            .field("user", &self.user)
            .field("password", &masked(&self.password))
            .field("token", &masked(&self.token))
            .field("creds_file", &self.creds_file)
            .field("tls_ca_file", &self.tls_ca_file)
            .field("ack_timeout", &self.ack_timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("subjects", &self.subjects)
            .finish()
    }
}

impl NatsConfig {
    /// What is wrong with the credentials, if anything: the field to name
    /// and why.
    pub(super) fn credentials_problem(&self) -> Option<(&'static str, String)> {
        match (&self.user, &self.password) {
            (Some(_), None) => {
                return Some(("password", "user is set without its password".to_owned()));
            }
            (None, Some(_)) => {
                return Some(("user", "password is set without a user".to_owned()));
            }
            _ => {}
        }
        let ways = [
            self.user.is_some(),
            self.token.is_some(),
            self.creds_file.is_some(),
        ];
        if ways.iter().filter(|set| **set).count() > 1 {
            let field = if self.creds_file.is_some() {
                "creds_file"
            } else {
                "token"
            };
            return Some((
                field,
                "set one way of logging in: user and password, token, or creds_file".to_owned(),
            ));
        }
        None
    }
}

/// `[nats.subjects."<topic>"]`: the subject of one topic's events.
///
/// ```
/// use outbox_relay::config::RelayConfig;
///
/// let config = RelayConfig::from_toml_str(
///     r#"
///     [nats.subjects."orders"]
///     subject = "events.{aggregate_type}.{event_type}"
///     "#,
///     "relay.toml",
/// )
/// .unwrap();
/// assert_eq!(
///     config.nats.subjects["orders"].subject.as_deref(),
///     Some("events.{aggregate_type}.{event_type}")
/// );
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct NatsSubjectConfig {
    /// The subject, a template with `{topic}`, `{event_type}`,
    /// `{aggregate_type}` and `{aggregate_id}`. Default `"{topic}"`.
    pub subject: Option<String>,
}

impl NatsSubjectConfig {
    /// The subject template, parsed; `{topic}` when none is set.
    ///
    /// # Errors
    /// What is wrong with the template.
    pub fn subject_template(&self) -> Result<SubjectTemplate, String> {
        match &self.subject {
            Some(template) => SubjectTemplate::parse(template),
            None => Ok(SubjectTemplate::default()),
        }
    }
}
