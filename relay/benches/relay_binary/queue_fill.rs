//! How long a RabbitMQ queue takes to hold a number of messages: its count,
//! read with a passive `queue.declare` every 20 ms, from a moment the
//! caller chose (a publisher's process start).

use std::time::{Duration, Instant};

use lapin::options::QueueDeclareOptions;
use lapin::types::FieldTable;
use lapin::{Channel, Connection, ConnectionProperties};

/// Between two readings of the queue's count.
const READ_EVERY: Duration = Duration::from_millis(20);

/// When the queue was first seen holding a message, and holding them all,
/// from the start.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Fill {
    pub(crate) first_seen: Duration,
    pub(crate) all: Duration,
    /// Messages in the queue at the first reading that saw any.
    pub(crate) first_count: u64,
}

impl Fill {
    /// `messages` / the time until all were in the queue.
    pub(crate) fn drain_rate(&self, messages: u64) -> f64 {
        messages as f64 / self.all.as_secs_f64()
    }

    /// (`messages` − 1) / the time from the first message seen to the last.
    pub(crate) fn rate_from_first(&self, messages: u64) -> f64 {
        messages.saturating_sub(1) as f64 / (self.all - self.first_seen).as_secs_f64().max(1e-9)
    }
}

/// A connection that reads one queue's count.
pub(crate) struct QueueWatch {
    connection: Connection,
    channel: Channel,
    queue: String,
}

impl QueueWatch {
    pub(crate) async fn connect(amqp_url: &str, queue: &str) -> QueueWatch {
        let connection = Connection::connect(amqp_url, ConnectionProperties::default())
            .await
            .expect("connect to RabbitMQ to read the queue's count");
        let channel = connection
            .create_channel()
            .await
            .expect("a channel to read the queue's count");
        QueueWatch {
            connection,
            channel,
            queue: queue.to_owned(),
        }
    }

    /// Messages in the queue now.
    async fn count(&self) -> u64 {
        let queue = self
            .channel
            .queue_declare(
                self.queue.as_str().into(),
                QueueDeclareOptions {
                    passive: true,
                    ..Default::default()
                },
                FieldTable::default(),
            )
            .await
            .unwrap_or_else(|error| panic!("passive declare of {}: {error}", self.queue));
        u64::from(queue.message_count())
    }

    /// Read the count until the queue holds `messages`, from `started`;
    /// panics after `limit`.
    pub(crate) async fn until(self, messages: u64, started: Instant, limit: Duration) -> Fill {
        let mut first = None;
        loop {
            let count = self.count().await;
            let now = started.elapsed();
            if count > 0 && first.is_none() {
                first = Some((now, count));
            }
            if count >= messages {
                let (first_seen, first_count) = first.unwrap_or((now, count));
                let _ = self.connection.close(200, "bye".into()).await;
                return Fill {
                    first_seen,
                    all: now,
                    first_count,
                };
            }
            assert!(
                now < limit,
                "queue {} holds {count} of {messages} messages after {limit:?}",
                self.queue
            );
            tokio::time::sleep(READ_EVERY).await;
        }
    }
}
