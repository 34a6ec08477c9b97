//! The rules of a [`RelayConfig`]: ranges of single fields and the
//! relations between fields (the publish timeout against the lease, the
//! clients' own timeouts against the publish timeout, ...).

use std::time::Duration;

use super::RelayConfig;
use super::diagnostics::Problem;
use super::duration::format_duration;
#[cfg(feature = "kafka")]
use crate::publish::kafka::check_client_option;

/// The smallest `max_batch_bytes`: 64 KiB.
const MIN_BATCH_BYTES: u64 = 64 << 10;
/// The largest `max_batch_bytes`: 4 GiB.
const MAX_BATCH_BYTES: u64 = 4 << 30;

impl RelayConfig {
    /// Checks ranges and the relations between fields; the first problem
    /// found is returned.
    pub(super) fn check(&self) -> Result<(), Problem> {
        if let Some(batch_size) = self.batch_size {
            check_range(&["batch_size"], batch_size, 1, 10_000)?;
        }
        if !(MIN_BATCH_BYTES..=MAX_BATCH_BYTES).contains(&self.max_batch_bytes) {
            return Err(Problem::new(
                &["max_batch_bytes"],
                format!(
                    "{} bytes is out of range; use 64KiB ({MIN_BATCH_BYTES}) to 4GiB ({MAX_BATCH_BYTES})",
                    self.max_batch_bytes
                ),
            ));
        }
        if self.lease_duration < Duration::from_secs(2) {
            return Err(Problem::new(
                &["lease_duration"],
                format!(
                    "{} is too short; use at least 2s, since the lease is renewed every third of it",
                    format_duration(self.lease_duration)
                ),
            ));
        }
        check_positive(&["publish_timeout"], self.publish_timeout)?;
        if self.publish_timeout >= self.lease_duration / 2 {
            return Err(Problem::new(
                &["publish_timeout"],
                format!(
                    "{} must be less than half of lease_duration ({} / 2 = {}), leaving the other \
                     half for marking the batch and renewing the lease: a batch still publishing \
                     when its lease runs out is taken over and published again by another \
                     instance; lower publish_timeout or raise lease_duration",
                    format_duration(self.publish_timeout),
                    format_duration(self.lease_duration),
                    format_duration(self.lease_duration / 2)
                ),
            )
            .related_to(&["lease_duration"]));
        }
        check_positive(&["poll_interval_min"], self.poll_interval_min)?;
        check_not_below(
            (&["poll_interval_min"], self.poll_interval_min),
            (&["poll_interval_max"], self.poll_interval_max),
            "the idle poll backs off from poll_interval_min up to poll_interval_max",
        )?;
        check_positive(&["shutdown_timeout"], self.shutdown_timeout)?;
        if let Err(error) = crate::source::SlotName::parse(&self.slot) {
            return Err(Problem::new(&["slot"], error.to_string()));
        }
        if let Some(handover_after) = self.handover_after
            && handover_after < self.lease_duration
        {
            return Err(Problem::new(
                &["handover_after"],
                format!(
                    "{} is shorter than lease_duration ({}); a relay would hand its partitions \
                     over before one lease has passed, on a broker hiccup",
                    format_duration(handover_after),
                    format_duration(self.lease_duration)
                ),
            )
            .related_to(&["lease_duration"]));
        }
        if let Some(instance_id) = &self.instance_id {
            check_instance_id(instance_id)?;
        }
        self.check_retry()?;
        self.check_retention()?;
        self.check_kafka()?;
        self.check_amqp()?;
        self.check_redis()?;
        self.check_nats()?;
        if self
            .ui
            .token_file
            .as_ref()
            .is_some_and(|path| path.as_os_str().is_empty())
        {
            return Err(Problem::new(
                &["ui", "token_file"],
                "is empty; name a file of NAME=SECRET lines, or leave token_file out".to_owned(),
            ));
        }
        Ok(())
    }

    fn check_retry(&self) -> Result<(), Problem> {
        let retry = &self.retry;
        check_positive(&["retry", "base_delay"], retry.base_delay)?;
        check_not_below(
            (&["retry", "base_delay"], retry.base_delay),
            (&["retry", "max_delay"], retry.max_delay),
            "the backoff grows from base_delay up to max_delay",
        )?;
        if retry.max_attempts == 0 {
            return Err(Problem::new(
                &["retry", "max_attempts"],
                "0 is out of range; use at least 1 (the first attempt counts)".to_owned(),
            ));
        }
        Ok(())
    }

    fn check_retention(&self) -> Result<(), Problem> {
        check_positive(&["retention", "interval"], self.retention.interval)?;
        check_range(
            &["retention", "batch_size"],
            self.retention.batch_size,
            1,
            100_000,
        )
    }

    fn check_kafka(&self) -> Result<(), Problem> {
        let kafka = &self.kafka;
        self.check_client_timeout(
            &["kafka", "message_timeout"],
            kafka.message_timeout,
            "the producer reports a failed delivery",
        )?;
        for (name, value) in [
            ("new_topic_partitions", kafka.new_topic_partitions),
            (
                "new_topic_replication_factor",
                kafka.new_topic_replication_factor,
            ),
        ] {
            if value < 1 {
                return Err(Problem::new(
                    &["kafka", name],
                    format!("{value} is out of range; use at least 1"),
                ));
            }
        }
        // A build without Kafka reads `[kafka]` but never uses it.
        #[cfg(feature = "kafka")]
        for (name, value) in &kafka.options {
            check_kafka_option(name, value)?;
        }
        Ok(())
    }

    fn check_amqp(&self) -> Result<(), Problem> {
        let amqp = &self.amqp;
        check_positive(&["amqp", "connect_timeout"], amqp.connect_timeout)?;
        self.check_client_timeout(
            &["amqp", "confirm_timeout"],
            amqp.confirm_timeout,
            "a missing confirm is reported",
        )
    }

    fn check_redis(&self) -> Result<(), Problem> {
        let redis = &self.redis;
        check_positive(&["redis", "connect_timeout"], redis.connect_timeout)?;
        self.check_client_timeout(
            &["redis", "response_timeout"],
            redis.response_timeout,
            "a missing reply is reported",
        )?;
        for (topic, stream) in &redis.streams {
            if let Some((field, reason)) = stream.problem() {
                // A missing field is placed at the stream's key.
                return Err(Problem::new(&["redis", "streams", topic, field], reason)
                    .related_to(&["redis", "streams", topic, "key"]));
            }
        }
        Ok(())
    }

    fn check_nats(&self) -> Result<(), Problem> {
        let nats = &self.nats;
        check_positive(&["nats", "connect_timeout"], nats.connect_timeout)?;
        self.check_client_timeout(
            &["nats", "ack_timeout"],
            nats.ack_timeout,
            "a missing acknowledgement is reported",
        )?;
        if let Some((field, reason)) = nats.credentials_problem() {
            return Err(Problem::new(&["nats", field], reason));
        }
        for (topic, subject) in &nats.subjects {
            if let Err(reason) = subject.subject_template() {
                return Err(Problem::new(
                    &["nats", "subjects", topic, "subject"],
                    reason,
                ));
            }
        }
        Ok(())
    }

    /// A broker client's own timeout: more than zero and less than
    /// `publish_timeout`, so that `what_happens` before the batch stops
    /// waiting for it.
    fn check_client_timeout(
        &self,
        field: &[&str],
        timeout: Duration,
        what_happens: &str,
    ) -> Result<(), Problem> {
        check_positive(field, timeout)?;
        if timeout >= self.publish_timeout {
            return Err(Problem::new(
                field,
                format!(
                    "{} must be less than publish_timeout ({}), so that {what_happens} before \
                     the batch stops waiting for it",
                    format_duration(timeout),
                    format_duration(self.publish_timeout)
                ),
            )
            .related_to(&["publish_timeout"]));
        }
        Ok(())
    }
}

/// An instance id must be a printable, non-empty name of at most 200
/// characters.
fn check_instance_id(instance_id: &str) -> Result<(), Problem> {
    let reason = if instance_id.trim().is_empty() {
        "is empty; remove it to let the relay make one up, or give a name"
    } else if instance_id.chars().count() > 200 {
        "is longer than 200 characters"
    } else if instance_id.chars().any(char::is_control) {
        "contains control characters"
    } else {
        return Ok(());
    };
    Err(Problem::new(&["instance_id"], reason.to_owned()))
}

/// Refuses librdkafka settings that the relay owns, and those that would
/// weaken the Kafka publisher's guarantee (see
/// [`check_client_option`]).
#[cfg(feature = "kafka")]
fn check_kafka_option(name: &str, value: &str) -> Result<(), Problem> {
    let field = ["kafka", "options", name];
    let reason = match name {
        "bootstrap.servers" | "metadata.broker.list" => {
            "is set from --broker (kafka://HOST:PORT,...); remove it here".to_owned()
        }
        "message.timeout.ms" | "delivery.timeout.ms" => {
            "is set from [kafka] message_timeout; remove it here".to_owned()
        }
        _ => match check_client_option(name, value) {
            Ok(()) => return Ok(()),
            Err(reason) => reason,
        },
    };
    Err(Problem::new(&field, reason))
}

/// A duration that must be more than zero.
fn check_positive(field: &[&str], value: Duration) -> Result<(), Problem> {
    if value.is_zero() {
        return Err(Problem::new(field, "must be more than 0s".to_owned()));
    }
    Ok(())
}

/// The upper end of a range of durations, which must not be less than
/// the lower end; `range` says what the range is for.
fn check_not_below(
    (lower_field, lower): (&[&str], Duration),
    (upper_field, upper): (&[&str], Duration),
    range: &str,
) -> Result<(), Problem> {
    if upper < lower {
        return Err(Problem::new(
            upper_field,
            format!(
                "{} is less than {} ({}); {range}",
                format_duration(upper),
                lower_field.join("."),
                format_duration(lower)
            ),
        )
        .related_to(lower_field));
    }
    Ok(())
}

/// A count that must lie in `min..=max`.
fn check_range(field: &[&str], value: u32, min: u32, max: u32) -> Result<(), Problem> {
    if !(min..=max).contains(&value) {
        return Err(Problem::new(
            field,
            format!("{value} is out of range; use {min} to {max}"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg(feature = "kafka")]
    fn kafka_options_that_weaken_the_publisher_guarantee_are_refused_with_their_line() {
        for (option, expected) in [
            (
                "partitioner = \"random\"",
                "kafka.options.partitioner: \"random\" ignores the key",
            ),
            (
                "\"topic.acks\" = 1",
                "kafka.options.\"topic.acks\": \"1\" would weaken acknowledgements",
            ),
        ] {
            let text = format!("[kafka.options]\n{option}\n");
            let error = RelayConfig::from_toml_str(&text, "relay.toml")
                .expect_err("the option must be refused")
                .to_string();
            assert!(error.contains(expected), "{error}");
            assert!(error.contains("(line 2, column 1)"), "{error}");
        }
        RelayConfig::from_toml_str("[kafka.options]\npartitioner = \"murmur2\"\n", "relay.toml")
            .expect("a partitioner that follows the key is accepted");
    }

    #[test]
    fn max_batch_bytes_takes_a_size_or_bytes_and_names_a_bad_one() {
        let sized = RelayConfig::from_toml_str("max_batch_bytes = \"8MiB\"\n", "relay.toml")
            .expect("a size with a unit");
        assert_eq!(sized.max_batch_bytes, 8 << 20);
        let bytes = RelayConfig::from_toml_str("max_batch_bytes = 1048576\n", "relay.toml")
            .expect("a number of bytes");
        assert_eq!(bytes.max_batch_bytes, 1 << 20);
        assert_eq!(
            RelayConfig::default().max_batch_bytes,
            crate::source::DEFAULT_MAX_BATCH_BYTES
        );
        for (text, expected) in [
            ("max_batch_bytes = \"32 megs\"\n", "unknown unit \"megs\""),
            ("max_batch_bytes = -5\n", "-5 is negative"),
            (
                "max_batch_bytes = \"1KiB\"\n",
                "1024 bytes is out of range; use 64KiB",
            ),
            ("max_batch_bytes = \"5GiB\"\n", "is out of range"),
        ] {
            let error = RelayConfig::from_toml_str(text, "relay.toml")
                .expect_err("the size must be refused")
                .to_string();
            assert!(error.contains("max_batch_bytes"), "{error}");
            assert!(error.contains(expected), "{error}");
        }
    }
}
