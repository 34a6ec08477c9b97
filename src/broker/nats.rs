//! What the relay and the inbox share about NATS: how a client logs in
//! ([`NatsCredentials`]).
//!
//! ```
//! use outbox::broker::nats::NatsCredentials;
//!
//! let credentials = NatsCredentials::UserPassword {
//!     user: "relay".to_owned(),
//!     password: "s3cret".to_owned(),
//! };
//! // Neither a password nor a token is ever shown.
//! assert_eq!(
//!     format!("{credentials:?}"),
//!     r#"UserPassword { user: "relay", password: "***" }"#
//! );
//! assert_eq!(format!("{:?}", NatsCredentials::Token("t".to_owned())), r#"Token("***")"#);
//! ```

use std::path::PathBuf;

/// How a client logs in to NATS: the relay's `[nats]` settings and the
/// inbox's consumer settings offer the same choices.
#[derive(Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum NatsCredentials {
    /// No credentials.
    #[default]
    None,
    /// A user and its password.
    UserPassword {
        /// The user name.
        user: String,
        /// Its password.
        password: String,
    },
    /// A token.
    Token(String),
    /// A `.creds` file: a user JWT and the nkey seed that signs the
    /// server's nonce.
    CredsFile(PathBuf),
}

/// Never shows a password or a token.
impl std::fmt::Debug for NatsCredentials {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NatsCredentials::None => formatter.write_str("None"),
            NatsCredentials::UserPassword { user, .. } => formatter
                .debug_struct("UserPassword")
                .field("user", user)
                .field("password", &"***")
                .finish(),
            NatsCredentials::Token(_) => formatter.debug_tuple("Token").field(&"***").finish(),
            NatsCredentials::CredsFile(path) => {
                formatter.debug_tuple("CredsFile").field(path).finish()
            }
        }
    }
}
