//! [`SlotName`]: the replication slot the logical source reads, as the
//! configuration names it. Checked in every build, so a relay built without
//! the `logical` feature still refuses a bad `slot` setting the same way.

use crate::error::Error;

/// The default `--slot`.
pub const DEFAULT_SLOT: &str = "outbox_relay";

/// A replication slot's name, checked: 1 to 63 lowercase letters, digits
/// and underscores, as PostgreSQL requires. The publication has the same
/// name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotName(String);

impl SlotName {
    /// Check `name`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] naming what is wrong.
    pub fn parse(name: &str) -> Result<Self, Error> {
        let valid = !name.is_empty()
            && name.len() <= 63
            && name
                .bytes()
                .all(|byte| byte.is_ascii_lowercase() || byte.is_ascii_digit() || byte == b'_');
        if valid {
            Ok(SlotName(name.to_owned()))
        } else {
            Err(Error::InvalidArgument(format!(
                "invalid slot name `{name}`: use 1 to 63 lowercase letters, digits and underscores"
            )))
        }
    }

    /// The slot's name.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The publication's name: the slot's.
    pub fn publication(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for SlotName {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str(&self.0)
    }
}
