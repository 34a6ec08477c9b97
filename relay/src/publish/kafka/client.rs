//! The librdkafka clients of a [`KafkaPublisher`]: the producer, built
//! anew when its state is broken, the admin client that creates topics,
//! and the connection state they report.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, PoisonError};

use rdkafka::admin::AdminClient;
use rdkafka::client::{ClientContext, DefaultClientContext};
use rdkafka::config::{ClientConfig, RDKafkaLogLevel};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{FutureProducer, Producer};
use rdkafka::statistics::Statistics;

use super::KafkaPublisher;

/// The librdkafka client context: forwards librdkafka's logs and errors to
/// `tracing` and keeps the connection state for
/// [`Publisher::is_connected`](crate::publish::Publisher::is_connected).
pub(super) struct RelayContext {
    connected: Arc<AtomicBool>,
}

impl ClientContext for RelayContext {
    fn log(&self, level: RDKafkaLogLevel, facility: &str, message: &str) {
        outbox::broker::kafka::forward_log!(level, facility, message);
    }

    fn stats(&self, statistics: Statistics) {
        // Only ever raises the flag: a broker may close an idle connection
        // without anything being wrong. Losing every broker is reported
        // through `error` (AllBrokersDown).
        if statistics
            .brokers
            .values()
            .any(|broker| broker.state == "UP")
        {
            self.connected.store(true, Ordering::Relaxed);
        }
    }

    fn error(&self, error: KafkaError, reason: &str) {
        if error.rdkafka_error_code() == Some(RDKafkaErrorCode::AllBrokersDown) {
            self.connected.store(false, Ordering::Relaxed);
        }
        tracing::warn!(%error, reason, "kafka client error");
    }
}

/// The producer, with the context that reports its connection state.
pub(super) type RelayProducer = FutureProducer<RelayContext>;

/// The producer in use, and which of the publisher's producers it is
/// (counting from 1): a send on a newer one waits until the sends on the
/// replaced one are settled (`publish/send_order.rs`).
#[derive(Clone)]
pub(super) struct CurrentProducer {
    pub(super) producer: RelayProducer,
    pub(super) generation: u64,
}

/// A producer for `config` that reports its connection state to
/// `connected`. Fails on a setting librdkafka does not accept.
pub(super) fn create_producer(
    config: &ClientConfig,
    connected: &Arc<AtomicBool>,
) -> Result<RelayProducer, crate::error::Error> {
    let context = RelayContext {
        connected: Arc::clone(connected),
    };
    config
        .create_with_context(context)
        .map_err(crate::error::Error::kafka)
}

impl KafkaPublisher {
    /// Put the current producer into librdkafka's fatal error state, as a
    /// fenced or out-of-sequence idempotent producer would be, through
    /// librdkafka's own test hook (`rd_kafka_test_fatal_error`). Meant for
    /// fault-injection tests of the recovery path: the next publish fails
    /// as unavailable and replaces the producer. Only with the `test-util`
    /// feature.
    ///
    /// # Errors
    /// [`crate::error::Error::Config`] when `reason` contains a NUL byte, and
    /// [`crate::error::Error::Kafka`] when the producer is already in a fatal
    /// error state.
    #[cfg(feature = "test-util")]
    pub fn inject_fatal_error(&self, reason: &str) -> Result<(), crate::error::Error> {
        let reason = std::ffi::CString::new(reason).map_err(|_| crate::error::Error::Config {
            path: "inject_fatal_error".to_owned(),
            reason: "the reason contains a NUL byte".to_owned(),
        })?;
        let producer = self.producer();
        // SAFETY: the client pointer is valid while `producer` is held, and
        // librdkafka copies `reason` before returning.
        let code = unsafe {
            rdkafka::bindings::rd_kafka_test_fatal_error(
                producer.client().native_ptr(),
                rdkafka::types::RDKafkaRespErr::RD_KAFKA_RESP_ERR_OUT_OF_ORDER_SEQUENCE_NUMBER,
                reason.as_ptr(),
            )
        };
        match RDKafkaErrorCode::from(code) {
            RDKafkaErrorCode::NoError => Ok(()),
            other => Err(crate::error::Error::kafka(KafkaError::MessageProduction(
                other,
            ))),
        }
    }

    /// Fetch the cluster metadata once: succeeds when a broker answers
    /// within `metadata_timeout`, and updates
    /// [`Publisher::is_connected`](crate::publish::Publisher::is_connected).
    ///
    /// # Errors
    /// [`crate::error::Error::Kafka`] when no broker answers in time.
    pub async fn check_connection(&self) -> Result<(), crate::error::Error> {
        let producer = self.producer();
        let timeout = self.config.metadata_timeout;
        let result = self
            .tasks
            .spawn_blocking(move || producer.client().fetch_metadata(None, timeout))
            .await
            .map_err(|error| crate::error::Error::Io(std::io::Error::other(error)))?;
        match result {
            Ok(_) => {
                self.connected.store(true, Ordering::Relaxed);
                Ok(())
            }
            Err(error) => {
                self.connected.store(false, Ordering::Relaxed);
                Err(crate::error::Error::kafka(error))
            }
        }
    }

    /// The current producer (a cheap handle on it).
    pub(super) fn producer(&self) -> RelayProducer {
        self.current_producer().producer
    }

    /// The current producer and which one it is.
    pub(super) fn current_producer(&self) -> CurrentProducer {
        self.producer
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Replace the producer by a fresh one (new producer id, empty
    /// queues). The old one is dropped off the async threads: dropping
    /// purges its queues and may wait for librdkafka's threads.
    pub(super) fn recreate_producer(&self, reason: &str) -> Result<(), crate::error::Error> {
        match create_producer(&self.producer_config, &self.connected) {
            Ok(producer) => {
                let old = {
                    let mut current = self
                        .producer
                        .write()
                        .unwrap_or_else(PoisonError::into_inner);
                    let generation = current.generation + 1;
                    std::mem::replace(
                        &mut *current,
                        CurrentProducer {
                            producer,
                            generation,
                        },
                    )
                };
                self.broken.store(false, Ordering::Relaxed);
                self.rebuilds.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(reason, "replaced the kafka producer with a new one");
                drop(self.tasks.spawn_blocking(move || drop(old)));
                Ok(())
            }
            Err(error) => {
                tracing::error!(reason, %error, "creating a new kafka producer failed");
                Err(error)
            }
        }
    }

    /// After a batch: replace the producer when librdkafka reports a fatal
    /// error or the broker said its state is broken.
    pub(super) fn replace_broken_producer(&self, producer: &RelayProducer) {
        let reason = match producer.client().fatal_error() {
            Some((code, reason)) => Some(format!("fatal error {code}: {reason}")),
            None if self.broken.load(Ordering::Relaxed) => {
                Some("the broker no longer accepts its producer id or sequence".to_owned())
            }
            None => None,
        };
        if let Some(reason) = reason {
            // A failure is logged; the next batch tries again.
            let _ = self.recreate_producer(&reason);
        }
    }

    /// The admin client, created on first use.
    pub(super) fn admin(&self) -> Result<Arc<AdminClient<DefaultClientContext>>, KafkaError> {
        let mut admin = self.admin.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(client) = admin.as_ref() {
            return Ok(Arc::clone(client));
        }
        let client: Arc<AdminClient<DefaultClientContext>> =
            Arc::new(self.config.admin_config().create()?);
        *admin = Some(Arc::clone(&client));
        Ok(client)
    }
}
