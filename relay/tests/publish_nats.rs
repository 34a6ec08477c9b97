//! What only the NATS JetStream publisher does, on the real server that
//! `scripts/test.sh` starts: its headers, a duplicate acknowledged as
//! published, no stream for a subject, a full stream that refuses new
//! messages, a message over `max_payload`, a connection that goes silent,
//! subject templates, a client cut off mid-batch that never writes what
//! was still queued for it, a replacement client reaching another listed
//! server, a TLS server trusted through the configured authority, a
//! failed TLS handshake, and logins (a password,
//! a token, a `.creds` file) on a server of the test's own. The cases every
//! publisher shares are in `publishers/`.

mod support;

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::stream::{Config as StreamConfig, DiscardPolicy};
use outbox_relay::OutboundEvent;
use outbox_relay::publish::nats::{
    NatsCredentials, NatsPublisher, NatsPublisherConfig, SubjectTemplate,
};
use outbox_relay::publish::{PublishFailure, Publisher};
use outbox_testkit::nats::{StoredMessage, TestStream, nats_url, require_nats};
use outbox_testkit::{TcpProxy, unique_name};

fn publisher(server: &str, subjects: &[(&str, &str)]) -> NatsPublisher {
    let mut config = NatsPublisherConfig::new(vec![server.to_owned()]);
    config.ack_timeout = Duration::from_secs(2);
    config.connect_timeout = Duration::from_secs(2);
    for (topic, template) in subjects {
        config.subjects.insert(
            (*topic).to_owned(),
            SubjectTemplate::parse(template).expect("template"),
        );
    }
    NatsPublisher::new(config).expect("nats publisher")
}

fn event(topic: &str, aggregate_id: &str, sequence: usize) -> OutboundEvent {
    support::outbound::outbound_event(topic, aggregate_id, sequence)
}

/// A stream of the test's own taking `subjects`, named after the first.
async fn stream(subjects: &[String]) -> TestStream {
    let jetstream = require_nats().await;
    let name = subjects[0].replace(['.', '*', '>'], "_");
    TestStream::create(&jetstream, &name, subjects).await
}

/// The `sequence` of a stored message's payload.
fn sequence_of(message: &StoredMessage) -> u64 {
    let payload: serde_json::Value =
        serde_json::from_slice(&message.payload).expect("payload is JSON");
    payload["sequence"].as_u64().expect("sequence")
}

/// Exactly the headers of the NATS binding: `Nats-Msg-Id`, one
/// `ce-<attribute>` per attribute percent-encoded (a non-ASCII source, a
/// space and a `%` in an extension), `Content-Type`, and the trace context
/// as plain headers too; the payload is the event's bytes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_headers_follow_the_nats_binding() {
    let subject = unique_name("headers");
    let stream = stream(std::slice::from_ref(&subject)).await;
    let publisher = publisher(&nats_url(), &[]);
    let mut sent = event(&subject, "order-1", 0);
    sent.source = "/boutique/café".to_owned();
    sent.headers
        .insert("note".to_owned(), "50% off \"now\"".to_owned());
    assert_eq!(
        publisher.publish(std::slice::from_ref(&sent)).await,
        vec![Ok(())]
    );

    let stored = stream.messages(1, Duration::from_secs(10)).await;
    assert_eq!(stored.len(), 1);
    let id = sent.event_id.to_string();
    let time = stored[0].headers["ce-time"].clone();
    let expected: BTreeMap<String, String> = [
        ("Nats-Msg-Id", id.as_str()),
        ("ce-specversion", "1.0"),
        ("ce-id", id.as_str()),
        ("ce-source", "/boutique/caf%C3%A9"),
        ("ce-type", "order.created"),
        ("ce-time", time.as_str()),
        ("Content-Type", "application/json"),
        ("ce-aggregatetype", "order"),
        ("ce-eventversion", "3"),
        ("ce-partitionkey", "order-1"),
        ("ce-tenant", "acme"),
        ("ce-note", "50%25%20off%20%22now%22"),
        ("ce-traceparent", sent.headers["traceparent"].as_str()),
        ("ce-tracestate", sent.headers["tracestate"].as_str()),
        ("traceparent", sent.headers["traceparent"].as_str()),
        ("tracestate", sent.headers["tracestate"].as_str()),
    ]
    .into_iter()
    .map(|(name, value)| (name.to_owned(), value.to_owned()))
    .collect();
    assert_eq!(stored[0].headers, expected);
    let parsed = chrono::DateTime::parse_from_rfc3339(&time).expect("RFC 3339");
    assert_eq!(parsed.to_utc(), sent.created_at);
    assert_eq!(stored[0].payload, sent.payload.as_bytes());
    assert_eq!(stored[0].subject, subject);
    stream.delete().await;
}

/// The same event published twice: the stream stores it once (its id is
/// `Nats-Msg-Id`), and the acknowledgement marked duplicate counts as
/// published.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_duplicate_is_published_and_stored_once() {
    let subject = unique_name("duplicate");
    let stream = stream(std::slice::from_ref(&subject)).await;
    let publisher = publisher(&nats_url(), &[]);
    let sent = event(&subject, "order-1", 0);
    assert_eq!(
        publisher.publish(std::slice::from_ref(&sent)).await,
        vec![Ok(())]
    );
    let again = vec![sent.clone(), sent];
    assert_eq!(publisher.publish(&again).await, vec![Ok(()), Ok(())]);
    assert_eq!(stream.message_count().await, 1);
    stream.delete().await;
}

/// No stream takes the subject: JetStream answers "no responders", a
/// rejection naming the subject; the client stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_stream_for_the_subject_is_a_rejection_naming_it() {
    require_nats().await;
    let subject = unique_name("nowhere");
    let publisher = publisher(&nats_url(), &[]);
    let outcomes = publisher.publish(&[event(&subject, "order-1", 0)]).await;
    match &outcomes[0] {
        Err(PublishFailure::Rejected(message)) => assert_eq!(
            message,
            &format!("no JetStream stream takes subject `{subject}`")
        ),
        other => panic!("expected a rejection, got {other:?}"),
    }
    assert!(Publisher::is_connected(&publisher));
    assert_eq!(Publisher::client_rebuilds(&publisher), 0);
}

/// A stream at its `max_messages` with `discard: new` refuses the next
/// message: a rejection with JetStream's reason; the ones it took are
/// published.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_stream_that_discards_new_messages_rejects_the_event() {
    let jetstream = require_nats().await;
    let subject = unique_name("full");
    let stream = TestStream::create_with(
        &jetstream,
        StreamConfig {
            name: subject.clone(),
            subjects: vec![subject.clone()],
            max_messages: 2,
            discard: DiscardPolicy::New,
            ..StreamConfig::default()
        },
    )
    .await;
    let publisher = publisher(&nats_url(), &[]);
    let events: Vec<OutboundEvent> = (0..3)
        .map(|sequence| event(&subject, &format!("order-{sequence}"), sequence))
        .collect();
    let outcomes = publisher.publish(&events).await;
    assert_eq!((&outcomes[0], &outcomes[1]), (&Ok(()), &Ok(())));
    match &outcomes[2] {
        Err(PublishFailure::Rejected(message)) => {
            assert!(message.contains(&subject), "{message}");
            assert!(message.contains("maximum messages"), "{message}");
        }
        other => panic!("expected a rejection, got {other:?}"),
    }
    assert!(Publisher::is_connected(&publisher));
    assert_eq!(stream.message_count().await, 2);
    stream.delete().await;
}

/// A connection that stops answering fails the batch as unavailable after
/// `ack_timeout`, never as rejected; the next publish opens a new client
/// and delivers, counted as a rebuild.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_that_goes_silent_is_replaced_after_the_ack_timeout() {
    let subject = unique_name("silent");
    let stream = stream(std::slice::from_ref(&subject)).await;
    let proxy = TcpProxy::in_front_of(&nats_url()).await;
    let publisher = publisher(&proxy.route(&nats_url()), &[]);
    assert_eq!(
        publisher.publish(&[event(&subject, "order-1", 0)]).await,
        vec![Ok(())]
    );
    proxy.stall_connections();
    let outcomes = publisher
        .publish(&[event(&subject, "order-1", 1), event(&subject, "order-2", 2)])
        .await;
    assert!(
        outcomes
            .iter()
            .all(|outcome| matches!(outcome, Err(PublishFailure::Unavailable(_)))),
        "{outcomes:?}"
    );
    assert!(
        !Publisher::is_connected(&publisher),
        "the silent client is dropped"
    );
    let outcomes = publisher
        .publish(&[event(&subject, "order-1", 1), event(&subject, "order-2", 2)])
        .await;
    assert_eq!(outcomes, vec![Ok(()), Ok(())]);
    assert_eq!(Publisher::client_rebuilds(&publisher), 1);
    assert_eq!(stream.message_count().await, 3);
    stream.delete().await;
}

/// The servers listed are one pool: with the second unreachable, the
/// client connects through the first; once the first is cut off, its
/// replacement connects through the second, and every event is stored
/// once and in order. The event that met the cut-off client is
/// unavailable, never rejected.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replacement_client_connects_through_another_listed_server() {
    let subject = unique_name("failover");
    let stream = stream(std::slice::from_ref(&subject)).await;
    let first = TcpProxy::in_front_of(&nats_url()).await;
    let second = TcpProxy::in_front_of(&nats_url()).await;
    let mut config =
        NatsPublisherConfig::new(vec![first.route(&nats_url()), second.route(&nats_url())]);
    config.ack_timeout = Duration::from_secs(2);
    config.connect_timeout = Duration::from_secs(2);
    let publisher = NatsPublisher::new(config).expect("nats publisher");

    second.sever();
    assert_eq!(
        publisher
            .publish(&[event(&subject, "order-1", 0), event(&subject, "order-2", 1)])
            .await,
        vec![Ok(()), Ok(())],
        "published through the first server"
    );
    second.restore();
    first.sever();

    let mut sequence = 2;
    let mut unavailable = 0;
    while sequence < 6 {
        let outcome = publisher
            .publish(&[event(&subject, "order-1", sequence)])
            .await;
        match outcome.as_slice() {
            [Ok(())] => sequence += 1,
            [Err(PublishFailure::Unavailable(_))] => {
                unavailable += 1;
                assert!(unavailable <= 5, "no server reached: {outcome:?}");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            other => panic!("event {sequence}: {other:?}"),
        }
    }
    assert!(
        first.cut_connections() + first.refused_connections() > 0,
        "the first server's connection was cut"
    );
    assert!(
        Publisher::client_rebuilds(&publisher) >= 1,
        "the cut-off client was replaced"
    );
    let stored: Vec<u64> = stream
        .messages(6, Duration::from_secs(10))
        .await
        .iter()
        .map(sequence_of)
        .collect();
    assert_eq!(stored, vec![0, 1, 2, 3, 4, 5], "each event once, in order");
    stream.delete().await;
}

/// `[nats.subjects."<topic>"]` templates fill in the topic, the aggregate
/// type and id and the event type; a topic without one goes to the
/// subject named after it; an event whose values make no subject is
/// rejected and holds its aggregate's later events.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subject_templates_name_each_event_s_subject() {
    let topic = unique_name("templated");
    let plain = unique_name("plain");
    let stream = stream(&[format!("{topic}.>"), plain.clone()]).await;
    let publisher = publisher(
        &nats_url(),
        &[(
            topic.as_str(),
            "{topic}.{aggregate_type}.{aggregate_id}.{event_type}",
        )],
    );
    let mut events = vec![
        event(&topic, "order-1", 0),
        event(&topic, "order-2", 1),
        event(&plain, "order-3", 2),
        event(&topic, "bad id", 3),
        event(&topic, "bad id", 4),
    ];
    events[1].aggregate_type = "invoice".to_owned();
    let outcomes = publisher.publish(&events).await;
    assert_eq!(&outcomes[..3], &[Ok(()), Ok(()), Ok(())]);
    assert!(
        matches!(&outcomes[3], Err(PublishFailure::Rejected(message)) if message.contains("whitespace")),
        "{:?}",
        outcomes[3]
    );
    assert!(
        matches!(&outcomes[4], Err(PublishFailure::Held(_))),
        "{:?}",
        outcomes[4]
    );
    let subjects: Vec<String> = stream
        .messages(3, Duration::from_secs(10))
        .await
        .into_iter()
        .map(|message| message.subject)
        .collect();
    assert_eq!(
        subjects,
        vec![
            format!("{topic}.order.order-1.order.created"),
            format!("{topic}.invoice.order-2.order.updated"),
            plain,
        ]
    );
    stream.delete().await;
}

/// The ordering hazard of a client that reconnects by itself: a large
/// batch of one aggregate is handed over while the connection is stalled,
/// so its first messages sit in the socket and the client's write buffer
/// and the rest wait in the client's queue. The connection is then cut
/// and the server is unreachable for a while, then back. async-nats would
/// reconnect and write the queued messages, which the stream would store
/// while the ones before them were lost. The publisher's client never
/// connects again: every message not stored before the cut fails, and
/// what the stream holds of the aggregate is a gapless start of the
/// batch. Sent again, the rest follows in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_cut_off_mid_batch_never_writes_what_was_queued_for_it() {
    let subject = unique_name("cut-off");
    let stream = stream(std::slice::from_ref(&subject)).await;
    let proxy = TcpProxy::in_front_of(&nats_url()).await;
    let mut config = NatsPublisherConfig::new(vec![proxy.route(&nats_url())]);
    config.ack_timeout = Duration::from_secs(5);
    config.connect_timeout = Duration::from_secs(2);
    let publisher = Arc::new(NatsPublisher::new(config).expect("nats publisher"));
    let warm_up = event(&subject, "order-a", 0);
    assert_eq!(
        publisher.publish(std::slice::from_ref(&warm_up)).await,
        vec![Ok(())]
    );

    // 32 KiB each: far more than the socket buffers and the client's
    // 64 KiB write buffer hold.
    let padding = "x".repeat(32 << 10);
    let batch: Vec<OutboundEvent> = (1..=600)
        .map(|sequence| {
            let mut event = event(&subject, "order-a", sequence);
            event.payload = format!(r#"{{"sequence":{sequence},"padding":"{padding}"}}"#).into();
            event
        })
        .collect();
    proxy.stall_connections();
    let sent = Arc::clone(&publisher).send(batch.clone()).await;
    assert!(sent.in_order_in_flight, "handed over whole");
    tokio::time::sleep(Duration::from_millis(500)).await;
    proxy.sever();
    tokio::time::sleep(Duration::from_secs(1)).await;
    proxy.restore();
    // Time for a client that reconnects to do so and write its queue.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let outcomes = sent.acknowledgements.await;
    let failed = outcomes.iter().filter(|outcome| outcome.is_err()).count();
    assert!(failed > 0, "the cut lost nothing: the test proves nothing");
    for outcome in &outcomes {
        assert!(
            matches!(outcome, Ok(()) | Err(PublishFailure::Unavailable(_))),
            "{outcome:?}"
        );
    }

    let stored: Vec<u64> = stream
        .messages(0, Duration::ZERO)
        .await
        .iter()
        .map(sequence_of)
        .collect();
    if let Some((position, sequence)) = stored
        .iter()
        .enumerate()
        .find(|(position, sequence)| u64::try_from(*position).ok() != Some(**sequence))
    {
        panic!(
            "the stream holds event {sequence} of the aggregate at position {position}, \
             without the ones before it ({} stored)",
            stored.len()
        );
    }
    let first_failed = outcomes
        .iter()
        .position(Result::is_err)
        .expect("some failed");
    assert!(
        outcomes[first_failed..].iter().all(Result::is_err),
        "a message acknowledged after one that failed"
    );

    // As the relay does: send again from the first that failed.
    let again = &batch[first_failed..];
    let resent = publisher.publish(again).await;
    assert!(resent.iter().all(Result::is_ok), "{resent:?}");
    let mut seen = HashSet::new();
    let mut last = None;
    for message in stream.messages(601, Duration::from_secs(30)).await {
        let id = message.headers["Nats-Msg-Id"].clone();
        let sequence = sequence_of(&message);
        if seen.insert(id) {
            assert!(
                last.is_none_or(|last| last < sequence),
                "{sequence} stored after {last:?}"
            );
            last = Some(sequence);
        }
    }
    assert_eq!(seen.len(), 601, "every event stored once");
    stream.delete().await;
}

/// A message larger than the server's `max_payload` (1 MiB by default) is
/// not sent: a rejection naming the subject; the event after it of
/// another aggregate is published, and the client stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_larger_than_the_server_takes_is_rejected() {
    let subject = unique_name("oversized");
    let stream = stream(std::slice::from_ref(&subject)).await;
    let publisher = publisher(&nats_url(), &[]);
    let mut oversized = event(&subject, "order-1", 0);
    oversized.payload = format!(r#"{{"padding":"{}"}}"#, "x".repeat(2 << 20)).into();
    let outcomes = publisher
        .publish(&[oversized, event(&subject, "order-2", 1)])
        .await;
    match &outcomes[0] {
        Err(PublishFailure::Rejected(message)) => {
            assert!(message.contains(&subject), "{message}");
            assert!(
                message.contains("larger than the server takes"),
                "{message}"
            );
        }
        other => panic!("expected a rejection, got {other:?}"),
    }
    assert_eq!(outcomes[1], Ok(()));
    assert!(Publisher::is_connected(&publisher));
    assert_eq!(stream.message_count().await, 1);
    stream.delete().await;
}

/// `tls://` against the plain port: the TLS handshake fails, and the
/// events are unavailable (no attempt spent, no panic).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_handshake_failure_is_unavailable() {
    require_nats().await;
    let url = nats_url().replacen("nats://", "tls://", 1);
    let publisher = publisher(&url, &[]);
    let outcomes = publisher.publish(&[event("orders", "order-1", 0)]).await;
    assert!(
        matches!(&outcomes[0], Err(PublishFailure::Unavailable(_))),
        "{outcomes:?}"
    );
    assert!(!Publisher::is_connected(&publisher));
}

/// A server that requires TLS, its certificate signed by an authority of
/// the test's own: with `tls_ca_file` naming that authority, `tls://`
/// reaches it and the events are stored; without it, the system's roots
/// do not trust the server, and the events are unavailable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_server_is_trusted_through_the_configured_authority() {
    let certificates = TestCertificates::make();
    let cert = certificates.path("server.pem");
    let key = certificates.path("server.key");
    let server = PrivateNats::start(&[
        "--tls",
        "--tlscert",
        cert.to_str().expect("a UTF-8 path"),
        "--tlskey",
        key.to_str().expect("a UTF-8 path"),
    ])
    .await;
    let url = server.url().replacen("nats://", "tls://", 1);
    let authority = certificates.path("ca.pem");

    let mut config = NatsPublisherConfig::new(vec![url.clone()]);
    config.tls_ca_file = Some(authority.clone());
    config.ack_timeout = Duration::from_secs(2);
    config.connect_timeout = Duration::from_secs(2);
    let trusting = NatsPublisher::new(config).expect("nats publisher");
    // The first connection installs the relay's TLS provider, which the
    // test's own client below uses too.
    trusting.connect().await.expect("connected over TLS");
    let client = async_nats::ConnectOptions::new()
        .add_root_certificates(authority)
        .require_tls(true)
        .connect(url.as_str())
        .await
        .expect("the test's client connects over TLS");
    let jetstream = async_nats::jetstream::new(client);
    let subject = unique_name("tls");
    let stream = TestStream::create(&jetstream, &subject, std::slice::from_ref(&subject)).await;
    assert_eq!(
        trusting
            .publish(&[event(&subject, "order-1", 0), event(&subject, "order-2", 1)])
            .await,
        vec![Ok(()), Ok(())]
    );
    assert_eq!(stream.message_count().await, 2);

    let untrusting = publisher(&url, &[]);
    let outcomes = untrusting.publish(&[event(&subject, "order-1", 2)]).await;
    assert!(
        matches!(&outcomes[0], Err(PublishFailure::Unavailable(_))),
        "{outcomes:?}"
    );
    assert_eq!(stream.message_count().await, 2);
    stream.delete().await;
    drop(server);
}

/// An authority and a server certificate for `127.0.0.1` signed by it,
/// made with `openssl` in a directory of their own, removed when dropped.
struct TestCertificates {
    directory: std::path::PathBuf,
}

impl TestCertificates {
    fn make() -> TestCertificates {
        let directory = std::env::temp_dir().join(unique_name("nats-tls"));
        std::fs::create_dir_all(&directory).expect("a certificate directory");
        std::fs::write(
            directory.join("server.ext"),
            "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n",
        )
        .expect("the extensions file");
        let openssl = |arguments: &[&str]| {
            let output = std::process::Command::new("openssl")
                .args(arguments)
                .current_dir(&directory)
                .output()
                .expect("openssl runs (apt-get install openssl)");
            assert!(
                output.status.success(),
                "openssl {arguments:?}: {}",
                String::from_utf8_lossy(&output.stderr)
            );
        };
        let ec = [
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
        ];
        openssl(
            &[
                &["req", "-x509"][..],
                &ec,
                &["-keyout", "ca.key", "-out", "ca.pem"],
            ]
            .concat()
            .into_iter()
            .chain(["-days", "2", "-subj", "/CN=outbox test authority"])
            .collect::<Vec<_>>(),
        );
        openssl(
            &[
                &["req"][..],
                &ec,
                &["-keyout", "server.key", "-out", "server.csr"],
            ]
            .concat()
            .into_iter()
            .chain(["-subj", "/CN=127.0.0.1"])
            .collect::<Vec<_>>(),
        );
        openssl(&[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            "server.pem",
            "-days",
            "2",
            "-extfile",
            "server.ext",
        ]);
        TestCertificates { directory }
    }

    fn path(&self, name: &str) -> std::path::PathBuf {
        self.directory.join(name)
    }
}

impl Drop for TestCertificates {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.directory);
    }
}

/// A `nats-server` with JetStream of one test's own, on a free loopback
/// port, with its store in a directory of its own; stopped (by its process
/// id) and removed when dropped.
struct PrivateNats {
    child: std::process::Child,
    port: u16,
    store: std::path::PathBuf,
}

impl PrivateNats {
    /// Start it with `arguments` (its login settings) and wait until it
    /// answers.
    async fn start(arguments: &[&str]) -> PrivateNats {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|listener| listener.local_addr())
            .expect("a free port")
            .port();
        let store = std::env::temp_dir().join(unique_name("nats-store"));
        std::fs::create_dir_all(&store).expect("a store directory");
        let log = store.join("server.log");
        let child = std::process::Command::new("nats-server")
            .args(["-js", "-a", "127.0.0.1", "-p", &port.to_string(), "-sd"])
            .arg(&store)
            .args(arguments)
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(&log).expect("a log file"))
            .spawn()
            .expect("nats-server runs (apt-get install nats-server)");
        let server = PrivateNats { child, port, store };
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_err()
        {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the private nats-server did not start: {}",
                std::fs::read_to_string(&log).unwrap_or_default()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        server
    }

    fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }
}

impl Drop for PrivateNats {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.store);
    }
}

/// Base64url without padding, as JWTs and NATS signatures are written.
fn base64url(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut text = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let word = chunk.iter().enumerate().fold(0u32, |word, (index, byte)| {
            word | (u32::from(*byte) << (16 - 8 * index))
        });
        for index in 0..=chunk.len() {
            let digit = (word >> (18 - 6 * index)) & 0x3f;
            text.push(char::from(ALPHABET[digit as usize]));
        }
    }
    text
}

/// A JWT of `claims` (the `nats` part of a NATS JWT) for `subject`, signed
/// by `issuer`.
fn nats_jwt(issuer: &nkeys::KeyPair, subject: &str, name: &str, nats: serde_json::Value) -> String {
    let header = base64url(br#"{"typ":"JWT","alg":"ed25519-nkey"}"#);
    let claims = serde_json::json!({
        "jti": unique_name("jti").replace('-', ""),
        "iat": chrono::Utc::now().timestamp(),
        "iss": issuer.public_key(),
        "name": name,
        "sub": subject,
        "nats": nats,
    });
    let claims = base64url(claims.to_string().as_bytes());
    let signed = format!("{header}.{claims}");
    let signature = issuer.sign(signed.as_bytes()).expect("signed");
    format!("{signed}.{}", base64url(&signature))
}

/// A server in operator mode (an operator, one account with JetStream and
/// the system account, preloaded): the client logs in with a `.creds` file (the user's JWT and
/// its seed signing the server's nonce), and so does its replacement.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_and_its_replacement_log_in_with_a_creds_file() {
    let operator = nkeys::KeyPair::new_operator();
    let account = nkeys::KeyPair::new_account();
    let system = nkeys::KeyPair::new_account();
    let user = nkeys::KeyPair::new_user();
    let operator_jwt = nats_jwt(
        &operator,
        &operator.public_key(),
        "outbox-test",
        serde_json::json!({"type": "operator", "version": 2}),
    );
    let unlimited = serde_json::json!({
        "subs": -1, "data": -1, "payload": -1, "imports": -1, "exports": -1,
        "wildcards": true, "conn": -1, "leaf": -1,
        "mem_storage": -1, "disk_storage": -1, "streams": -1, "consumer": -1,
    });
    let account_jwt = nats_jwt(
        &operator,
        &account.public_key(),
        "relay-account",
        serde_json::json!({"limits": unlimited, "type": "account", "version": 2}),
    );
    let system_jwt = nats_jwt(
        &operator,
        &system.public_key(),
        "SYS",
        serde_json::json!({"type": "account", "version": 2}),
    );
    let user_jwt = nats_jwt(
        &account,
        &user.public_key(),
        "relay",
        serde_json::json!({
            "pub": {}, "sub": {}, "subs": -1, "data": -1, "payload": -1,
            "type": "user", "version": 2,
        }),
    );
    let directory = std::env::temp_dir().join(unique_name("nats-creds"));
    std::fs::create_dir_all(&directory).expect("a directory");
    let settings = directory.join("server.conf");
    std::fs::write(
        &settings,
        format!(
            "operator: {operator_jwt}\nsystem_account: {system}\nresolver: MEMORY\n\
             resolver_preload: {{\n  {account}: {account_jwt}\n  {system}: {system_jwt}\n}}\n",
            account = account.public_key(),
            system = system.public_key(),
        ),
    )
    .expect("server settings");
    let creds = directory.join("relay.creds");
    std::fs::write(
        &creds,
        format!(
            "-----BEGIN NATS USER JWT-----\n{user_jwt}\n------END NATS USER JWT------\n\n\
             ************************* IMPORTANT *************************\n\
             NKEY Seed printed below can be used to sign and prove identity.\n\n\
             -----BEGIN USER NKEY SEED-----\n{}\n------END USER NKEY SEED------\n",
            user.seed().expect("a seed")
        ),
    )
    .expect("creds file");

    let settings_path = settings.to_str().expect("UTF-8 path").to_owned();
    let server = PrivateNats::start(&["-c", &settings_path]).await;
    let own = async_nats::ConnectOptions::with_credentials_file(&creds)
        .await
        .expect("the test's own creds")
        .connect(server.url().as_str())
        .await
        .expect("the test's own login");
    let subject = unique_name("creds");
    let stream = TestStream::create(
        &async_nats::jetstream::new(own),
        &subject,
        std::slice::from_ref(&subject),
    )
    .await;
    let proxy = TcpProxy::in_front_of(&server.url()).await;
    let mut config = NatsPublisherConfig::new(vec![proxy.route(&server.url())]);
    config.credentials = NatsCredentials::CredsFile(creds.clone());
    config.ack_timeout = Duration::from_secs(2);
    config.connect_timeout = Duration::from_secs(2);
    let publisher = NatsPublisher::new(config).expect("nats publisher");
    assert_eq!(
        publisher.publish(&[event(&subject, "order-1", 0)]).await,
        vec![Ok(())]
    );
    proxy.drop_connections();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        publisher.publish(&[event(&subject, "order-1", 1)]).await,
        vec![Ok(())]
    );
    assert_eq!(Publisher::client_rebuilds(&publisher), 1);
    assert_eq!(stream.message_count().await, 2);
    stream.delete().await;
    drop(server);
    let _ = std::fs::remove_dir_all(&directory);
}

/// On a server that wants a user and password (then one that wants a
/// token), the client logs in with them, and so does the client that
/// replaces it after its connection was cut (the cut client's own
/// reconnect is refused by the publisher, not by the server); wrong
/// credentials leave the events unavailable, naming the refusal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_and_its_replacement_log_in_with_a_password_or_a_token() {
    let logins = [
        (
            vec!["--user", "relay", "--pass", "s3cret"],
            NatsCredentials::UserPassword {
                user: "relay".to_owned(),
                password: "s3cret".to_owned(),
            },
            NatsCredentials::UserPassword {
                user: "relay".to_owned(),
                password: "hunter2".to_owned(),
            },
            async_nats::ConnectOptions::with_user_and_password(
                "relay".to_owned(),
                "s3cret".to_owned(),
            ),
        ),
        (
            vec!["--auth", "t0ken"],
            NatsCredentials::Token("t0ken".to_owned()),
            NatsCredentials::Token("hunter2".to_owned()),
            async_nats::ConnectOptions::with_token("t0ken".to_owned()),
        ),
    ];
    for (arguments, credentials, wrong, own_login) in logins {
        let server = PrivateNats::start(&arguments).await;
        let own = own_login
            .connect(server.url().as_str())
            .await
            .expect("the test's own login");
        let subject = unique_name("login");
        let stream = TestStream::create(
            &async_nats::jetstream::new(own),
            &subject,
            std::slice::from_ref(&subject),
        )
        .await;
        let proxy = TcpProxy::in_front_of(&server.url()).await;
        let publisher_with = |credentials: NatsCredentials| {
            let mut config = NatsPublisherConfig::new(vec![proxy.route(&server.url())]);
            config.credentials = credentials;
            config.ack_timeout = Duration::from_secs(2);
            config.connect_timeout = Duration::from_secs(2);
            NatsPublisher::new(config).expect("nats publisher")
        };
        let publisher = publisher_with(credentials);
        assert_eq!(
            publisher.publish(&[event(&subject, "order-1", 0)]).await,
            vec![Ok(())]
        );
        proxy.drop_connections();
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert!(
            !Publisher::is_connected(&publisher),
            "the cut client is gone for good"
        );
        assert_eq!(
            publisher.publish(&[event(&subject, "order-1", 1)]).await,
            vec![Ok(())]
        );
        assert_eq!(Publisher::client_rebuilds(&publisher), 1);
        assert_eq!(stream.message_count().await, 2);

        let refused = publisher_with(wrong)
            .publish(&[event(&subject, "order-2", 2)])
            .await;
        match &refused[0] {
            Err(PublishFailure::Unavailable(message)) => {
                assert!(message.contains("authorization"), "{message}");
                assert!(!message.contains("hunter2"), "{message}");
            }
            other => panic!("expected unavailable, got {other:?}"),
        }
        stream.delete().await;
    }
}
