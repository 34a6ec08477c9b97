//! The NATS side of the tests: the real server with JetStream
//! (`OUTBOX_TEST_NATS_URL`, default `nats://127.0.0.1:4222`), streams of
//! each test's own, read back in stream order, and a consumer that collects
//! what arrived.
//!
//! A server that does not answer fails the test naming it and
//! `scripts/test.sh --services-only`; nothing is skipped. Nothing here
//! touches a stream a test did not make.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use async_nats::jetstream::{self, stream};

use crate::received::{Collected, Received};
use crate::services::START_SERVICES;

/// Default server; `OUTBOX_TEST_NATS_URL` overrides it.
pub const DEFAULT_NATS_URL: &str = "nats://127.0.0.1:4222";

/// The NATS URL of the tests, unchecked.
pub fn nats_url() -> String {
    std::env::var("OUTBOX_TEST_NATS_URL").unwrap_or_else(|_| DEFAULT_NATS_URL.to_owned())
}

/// A JetStream context on the test server, for the test's own requests.
///
/// # Panics
/// When NATS does not answer, or answers without JetStream, within 10 s;
/// the message names it and how to start it.
pub async fn require_nats() -> jetstream::Context {
    let url = nats_url();
    let connecting = async {
        let client = async_nats::ConnectOptions::new()
            .max_reconnects(Some(1))
            .connect(url.as_str())
            .await
            .map_err(|error| error.to_string())?;
        // The account's JetStream info, read as text: its shape varies
        // between server versions.
        let answer = client
            .request("$JS.API.INFO", bytes::Bytes::new())
            .await
            .map_err(|error| format!("no JetStream: {error}"))?;
        let text = String::from_utf8_lossy(&answer.payload);
        if text.contains("\"error\"") {
            return Err(format!("no JetStream: {text}"));
        }
        Ok::<_, String>(jetstream::new(client))
    };
    match tokio::time::timeout(Duration::from_secs(10), connecting).await {
        Ok(Ok(jetstream)) => jetstream,
        Ok(Err(error)) => panic!(
            "NATS is not reachable at {url} ({error}); {START_SERVICES} or point \
             OUTBOX_TEST_NATS_URL at one"
        ),
        Err(_) => panic!(
            "NATS did not answer at {url} within 10 s; {START_SERVICES} or point \
             OUTBOX_TEST_NATS_URL at one"
        ),
    }
}

/// One message as read back from a stream.
#[derive(Debug, Clone)]
pub struct StoredMessage {
    /// Its subject.
    pub subject: String,
    /// Its sequence in the stream.
    pub sequence: u64,
    /// Its headers, each by name with its first value.
    pub headers: BTreeMap<String, String>,
    /// Its payload.
    pub payload: Vec<u8>,
}

impl From<jetstream::message::StreamMessage> for StoredMessage {
    fn from(message: jetstream::message::StreamMessage) -> Self {
        StoredMessage {
            subject: message.subject.to_string(),
            sequence: message.sequence,
            headers: message
                .headers
                .iter()
                .filter_map(|(name, values)| {
                    Some((name.to_string(), values.first()?.as_str().to_owned()))
                })
                .collect(),
            payload: message.payload.to_vec(),
        }
    }
}

/// A stream a test made, on the test server.
pub struct TestStream {
    jetstream: jetstream::Context,
    name: String,
}

impl TestStream {
    /// A stream named `name` taking `subjects` (patterns such as
    /// `outbox-test-x-....>`), with the server's defaults otherwise.
    ///
    /// # Panics
    /// When the stream cannot be made.
    pub async fn create(jetstream: &jetstream::Context, name: &str, subjects: &[String]) -> Self {
        Self::create_with(
            jetstream,
            stream::Config {
                name: name.to_owned(),
                subjects: subjects.to_vec(),
                ..stream::Config::default()
            },
        )
        .await
    }

    /// A stream made with `config` (limits, a discard policy, a duplicate
    /// window).
    ///
    /// # Panics
    /// When the stream cannot be made.
    pub async fn create_with(jetstream: &jetstream::Context, config: stream::Config) -> Self {
        let name = config.name.clone();
        jetstream
            .create_stream(config)
            .await
            .unwrap_or_else(|error| panic!("creating stream {name}: {error}"));
        TestStream {
            jetstream: jetstream.clone(),
            name,
        }
    }

    /// The stream `name` another part of the test made, to read it back
    /// (not checked here: its reads panic when it does not exist).
    pub fn existing(jetstream: &jetstream::Context, name: &str) -> Self {
        TestStream {
            jetstream: jetstream.clone(),
            name: name.to_owned(),
        }
    }

    /// The stream's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Messages the stream holds now.
    ///
    /// # Panics
    /// When the stream cannot be asked.
    pub async fn message_count(&self) -> u64 {
        let mut stream = self
            .jetstream
            .get_stream(&self.name)
            .await
            .unwrap_or_else(|error| panic!("stream {}: {error}", self.name));
        stream
            .info()
            .await
            .unwrap_or_else(|error| panic!("stream {} info: {error}", self.name))
            .state
            .messages
    }

    /// Every message of the stream in stream order, once it holds at least
    /// `count` or `within` has passed (then with what it holds).
    ///
    /// # Panics
    /// When the stream cannot be read.
    pub async fn messages(&self, count: usize, within: Duration) -> Vec<StoredMessage> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let held = self.message_count().await;
            if held >= count as u64 || tokio::time::Instant::now() >= deadline {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let mut stream = self
            .jetstream
            .get_stream(&self.name)
            .await
            .unwrap_or_else(|error| panic!("stream {}: {error}", self.name));
        let state = stream
            .info()
            .await
            .unwrap_or_else(|error| panic!("stream {} info: {error}", self.name))
            .state
            .clone();
        let mut messages = Vec::new();
        if state.messages == 0 {
            return messages;
        }
        for sequence in state.first_sequence..=state.last_sequence {
            let Ok(message) = stream.get_raw_message(sequence).await else {
                // Deleted (or never stored) at that sequence.
                continue;
            };
            messages.push(StoredMessage::from(message));
        }
        messages
    }

    /// Delete the stream.
    pub async fn delete(self) {
        let _ = self.jetstream.delete_stream(&self.name).await;
    }
}

/// Messages the durable consumer `durable` of `stream` still has to
/// settle: those not yet delivered and those delivered but not
/// acknowledged. 0 when neither the stream nor the consumer exists yet
/// would hide a fault, so both must exist.
///
/// # Panics
/// When the stream or the consumer cannot be asked.
pub async fn consumer_backlog(jetstream: &jetstream::Context, stream: &str, durable: &str) -> u64 {
    let stream_handle = jetstream
        .get_stream(stream)
        .await
        .unwrap_or_else(|error| panic!("stream {stream}: {error}"));
    let mut consumer: jetstream::consumer::PullConsumer = stream_handle
        .get_consumer(durable)
        .await
        .unwrap_or_else(|error| panic!("consumer {durable} of stream {stream}: {error}"));
    let info = consumer
        .info()
        .await
        .unwrap_or_else(|error| panic!("consumer {durable} of stream {stream} info: {error}"));
    info.num_pending + info.num_ack_pending as u64
}

/// A stored message as a [`Received`]: the id from `ce-id`, the aggregate
/// from `ce-partitionkey` (both percent-decoded), the payload; the key is
/// `Nats-Msg-Id` (a message has no key of its own).
pub fn received(message: &StoredMessage) -> Received {
    let header = |name: &str| {
        message
            .headers
            .iter()
            .find(|(header, _)| header.eq_ignore_ascii_case(name))
            .map(|(_, value)| value.clone())
            .unwrap_or_default()
    };
    let decoded = |name: &str| {
        let value = header(name);
        outbox_wire_decode(&value).unwrap_or(value)
    };
    Received {
        ce_id: decoded("ce-id"),
        key: header("Nats-Msg-Id"),
        aggregate_id: decoded("ce-partitionkey"),
        payload: serde_json::from_slice(&message.payload).unwrap_or(serde_json::Value::Null),
        headers: message
            .headers
            .iter()
            .map(|(name, value)| (name.clone(), value.clone()))
            .collect::<HashMap<_, _>>(),
    }
}

/// Percent-decoding of a `ce-` header value (the writer's encoding, see
/// `outbox::wire::percent_decode_header_value`).
fn outbox_wire_decode(value: &str) -> Option<String> {
    let bytes = value.as_bytes();
    let mut decoded = Vec::with_capacity(bytes.len());
    let mut index = 0;
    while index < bytes.len() {
        if bytes[index] == b'%' {
            let hex = value.get(index + 1..index + 3)?;
            decoded.push(u8::from_str_radix(hex, 16).ok()?);
            index += 3;
        } else {
            decoded.push(bytes[index]);
            index += 1;
        }
    }
    String::from_utf8(decoded).ok()
}

/// Follow the stream `name` on the test server in the background,
/// collecting every message in stream order.
pub fn stream_consumer(jetstream: jetstream::Context, name: String) -> Collected {
    let collected = Collected::default();
    let sink = collected.clone();
    tokio::spawn(async move {
        let mut next = 1;
        loop {
            let Ok(mut stream) = jetstream.get_stream(&name).await else {
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            };
            let last = match stream.info().await {
                Ok(info) => info.state.last_sequence,
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    continue;
                }
            };
            while next <= last {
                // Tried again on the next round when it fails.
                let Ok(message) = stream.get_raw_message(next).await else {
                    break;
                };
                sink.push(received(&StoredMessage::from(message)));
                next += 1;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    collected
}
