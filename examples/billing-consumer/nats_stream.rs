//! The JetStream stream the billing consumer reads on NATS. The relay
//! never creates streams (an operator decides their limits and storage),
//! so the example makes the one it needs, as it declares its queue on
//! RabbitMQ.

use async_nats::jetstream::{self, stream};

/// Make the stream `name`, taking `subject` and its dead letters, unless a
/// stream of that name exists.
///
/// # Errors
/// When NATS cannot be reached, or refuses the stream (another stream
/// already takes the subject, say); the message names the stream.
pub async fn ensure_stream(
    nats_url: &str,
    name: &str,
    subject: &str,
) -> Result<(), Box<dyn std::error::Error>> {
    let client = async_nats::connect(nats_url)
        .await
        .map_err(|error| format!("cannot connect to NATS at {nats_url}: {error}"))?;
    let jetstream = jetstream::new(client);
    let config = stream::Config {
        name: name.to_owned(),
        subjects: vec![subject.to_owned(), format!("{subject}.dlq")],
        ..stream::Config::default()
    };
    jetstream
        .get_or_create_stream(config)
        .await
        .map_err(|error| format!("cannot create the JetStream stream {name}: {error}"))?;
    Ok(())
}
