//! The client options that would weaken what the Kafka publisher
//! guarantees (`docs/guarantees.md`): an acknowledged event is on every
//! in-sync replica (`acks=all`), librdkafka's retries neither duplicate nor
//! reorder records (the idempotent producer), and the events of one
//! aggregate go to one partition, in order (a partitioner that follows the
//! key).
//!
//! [`KafkaPublisher::new`](super::KafkaPublisher::new) refuses them
//! whoever builds it, and the relay's configuration refuses them in
//! `[kafka.options]`, with the line and column. Overrides that librdkafka
//! itself refuses under idempotence are left to it: `max.in.flight` above
//! 5, `retries` 0, `queuing.strategy` other than `fifo` and
//! `queue.buffering.backpressure.threshold` above 1 fail the creation of
//! the producer.

/// Checks one librdkafka option against the guarantee.
///
/// # Errors
/// Why `name = value` would weaken the guarantee, naming the value and
/// what the publisher requires instead.
pub(crate) fn check_client_option(name: &str, value: &str) -> Result<(), String> {
    // librdkafka takes a topic property with a `topic.` prefix too.
    let property = name.strip_prefix("topic.").unwrap_or(name);
    match property {
        "enable.idempotence" if !value.eq_ignore_ascii_case("true") => Err(format!(
            "\"{value}\" would turn the idempotent producer off; the relay requires it, so that \
             producer retries neither duplicate nor reorder events; remove the setting"
        )),
        "acks" | "request.required.acks"
            if !(value.eq_ignore_ascii_case("all") || value == "-1") =>
        {
            Err(format!(
                "\"{value}\" would weaken acknowledgements; the relay requires acks=all, so that \
                 an acknowledged event cannot be lost; remove the setting"
            ))
        }
        "partitioner" if value == "random" => Err(format!(
            "\"{value}\" ignores the key, so the events of one aggregate would be spread over \
             partitions and lose their order; the relay requires a partitioner that follows the \
             key (murmur2_random by default, or murmur2, consistent, consistent_random, fnv1a, \
             fnv1a_random)"
        )),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_that_keep_the_guarantee_pass() {
        for (name, value) in [
            ("acks", "all"),
            ("acks", "ALL"),
            ("request.required.acks", "-1"),
            ("topic.acks", "all"),
            ("enable.idempotence", "true"),
            ("enable.idempotence", "True"),
            ("partitioner", "murmur2"),
            ("partitioner", "consistent_random"),
            ("max.in.flight.requests.per.connection", "5"),
            ("linger.ms", "5"),
            ("compression.type", "zstd"),
        ] {
            assert_eq!(check_client_option(name, value), Ok(()), "{name} = {value}");
        }
    }

    #[test]
    fn options_that_weaken_it_are_refused_with_the_reason() {
        for (name, value, reason) in [
            ("acks", "1", "acks=all"),
            ("acks", "0", "acks=all"),
            ("request.required.acks", "1", "acks=all"),
            ("topic.acks", "0", "acks=all"),
            ("topic.request.required.acks", "1", "acks=all"),
            ("enable.idempotence", "false", "idempotent producer off"),
            ("enable.idempotence", "0", "idempotent producer off"),
            ("partitioner", "random", "lose their order"),
            ("topic.partitioner", "random", "lose their order"),
        ] {
            let refusal = check_client_option(name, value).expect_err(name);
            assert!(refusal.contains(reason), "{name} = {value}: {refusal}");
            assert!(refusal.contains(&format!("\"{value}\"")), "{refusal}");
        }
    }
}
