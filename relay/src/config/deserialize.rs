//! The deserializers of the fields TOML cannot describe by itself:
//! durations, socket addresses, librdkafka options and routing keys.

use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;
use std::time::Duration;

use serde::Deserialize;
use serde::de::{self, Deserializer, MapAccess, Visitor};

use super::RoutingKey;
use super::byte_size::parse_byte_size;
use super::duration::parse_duration;

/// `"event_type"`, or any other string as a fixed key.
impl<'de> Deserialize<'de> for RoutingKey {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        Ok(if text == "event_type" {
            RoutingKey::EventType
        } else {
            RoutingKey::Fixed(text)
        })
    }
}

/// A duration string, through [`parse_duration`].
pub(super) fn duration<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
    deserializer.deserialize_str(ParsedStr {
        expecting: "a duration string such as \"30s\" (units: ms, s, m, h, d)",
        parse: parse_duration,
    })
}

/// A size: a whole number of bytes, or a string through
/// [`parse_byte_size`].
pub(super) fn byte_size<'de, D: Deserializer<'de>>(deserializer: D) -> Result<u64, D::Error> {
    struct ByteSizeVisitor;

    impl Visitor<'_> for ByteSizeVisitor {
        type Value = u64;

        fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
            formatter.write_str(
                "a size such as \"32MiB\" (units: B, KB, MB, GB, KiB, MiB, GiB) or a whole number of bytes",
            )
        }

        fn visit_u64<E: de::Error>(self, bytes: u64) -> Result<u64, E> {
            Ok(bytes)
        }

        fn visit_i64<E: de::Error>(self, bytes: i64) -> Result<u64, E> {
            u64::try_from(bytes)
                .map_err(|_| E::custom(format!("{bytes} is negative; sizes are 0 or more")))
        }

        fn visit_str<E: de::Error>(self, text: &str) -> Result<u64, E> {
            parse_byte_size(text).map_err(E::custom)
        }
    }

    deserializer.deserialize_any(ByteSizeVisitor)
}

/// A duration string for a field whose absence means "not set".
pub(super) fn optional_duration<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<Duration>, D::Error> {
    duration(deserializer).map(Some)
}

/// An IP address and port; host names are not resolved.
pub(super) fn socket_addr<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<SocketAddr, D::Error> {
    deserializer.deserialize_str(ParsedStr {
        expecting: "an address string such as \"127.0.0.1:9090\"",
        parse: |text| {
            text.parse().map_err(|_| {
                format!(
                    "\"{text}\" is not an IP address and port; write e.g. \"127.0.0.1:9090\", \
                     \"0.0.0.0:9090\" or \"[::1]:9090\" (host names are not resolved)"
                )
            })
        },
    })
}

/// A string field read by `parse`, whose error is the reason given.
struct ParsedStr<T> {
    /// What the field takes, for serde's "expected ..." message.
    expecting: &'static str,
    parse: fn(&str) -> Result<T, String>,
}

impl<T> Visitor<'_> for ParsedStr<T> {
    type Value = T;

    fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str(self.expecting)
    }

    fn visit_str<E: de::Error>(self, text: &str) -> Result<T, E> {
        (self.parse)(text).map_err(E::custom)
    }
}

/// `[kafka.options]`: every value turned into the text librdkafka takes.
pub(super) fn kafka_options<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<BTreeMap<String, String>, D::Error> {
    struct OptionsVisitor;

    impl<'de> Visitor<'de> for OptionsVisitor {
        type Value = BTreeMap<String, String>;

        fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
            formatter.write_str("a table of librdkafka settings")
        }

        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut options = BTreeMap::new();
            while let Some((name, value)) = map.next_entry::<String, OptionValue>()? {
                options.insert(name, value.0);
            }
            Ok(options)
        }
    }

    deserializer.deserialize_map(OptionsVisitor)
}

/// One librdkafka setting, as the text librdkafka takes.
struct OptionValue(String);

impl<'de> Deserialize<'de> for OptionValue {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct OptionValueVisitor;

        impl Visitor<'_> for OptionValueVisitor {
            type Value = OptionValue;

            fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
                formatter.write_str("a string, integer, float or boolean librdkafka setting")
            }

            fn visit_str<E: de::Error>(self, text: &str) -> Result<OptionValue, E> {
                Ok(OptionValue(text.to_owned()))
            }

            fn visit_i64<E: de::Error>(self, number: i64) -> Result<OptionValue, E> {
                Ok(OptionValue(number.to_string()))
            }

            fn visit_u64<E: de::Error>(self, number: u64) -> Result<OptionValue, E> {
                Ok(OptionValue(number.to_string()))
            }

            fn visit_f64<E: de::Error>(self, number: f64) -> Result<OptionValue, E> {
                Ok(OptionValue(number.to_string()))
            }

            fn visit_bool<E: de::Error>(self, flag: bool) -> Result<OptionValue, E> {
                Ok(OptionValue(flag.to_string()))
            }
        }

        deserializer.deserialize_any(OptionValueVisitor)
    }
}
