//! [`ClientError`]: an error of a broker's client library, kept opaque.

use std::error::Error;
use std::fmt;

/// An error of a broker's client library (librdkafka through `rdkafka`,
/// `lapin` for AMQP), as the relay's and the inbox's error enums carry it.
///
/// It reads as the client's error: its message and its `source()` chain
/// are the client's. The client's type stays out of the enums' public
/// fields, so that upgrading a client is not a breaking change of their
/// errors. [`ClientError::downcast_ref`] reaches the client's error when a
/// program needs it.
///
/// ```
/// use outbox::broker::ClientError;
///
/// let error = ClientError::new(std::io::Error::other("connection refused"));
/// assert_eq!(error.to_string(), "connection refused");
/// assert!(error.downcast_ref::<std::io::Error>().is_some());
/// ```
#[derive(Debug)]
pub struct ClientError(Box<dyn Error + Send + Sync + 'static>);

impl ClientError {
    /// Wrap the client's `error`.
    pub fn new(error: impl Error + Send + Sync + 'static) -> Self {
        ClientError(Box::new(error))
    }

    /// The client's error, if it is an `E`.
    pub fn downcast_ref<E: Error + 'static>(&self) -> Option<&E> {
        self.0.downcast_ref::<E>()
    }
}

impl fmt::Display for ClientError {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, formatter)
    }
}

impl Error for ClientError {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        self.0.source()
    }
}
