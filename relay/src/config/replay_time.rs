//! [`ReplayTime`] as the command line writes it: an RFC 3339 time or a
//! duration ago in the units of the configuration file.

use chrono::{DateTime, Utc};

use super::duration::parse_duration;
use crate::error::Error;
use crate::operator::ReplayTime;

impl ReplayTime {
    /// Parse `text`, the value of `flag`: an RFC 3339 time
    /// (`2026-11-30T10:00:00Z`, `2026-11-30T11:00:00+01:00`) or a duration
    /// ago in the units of the configuration file (`90s`, `30m`, `2h`, `7d`).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] naming `flag` and the value.
    pub fn parse(flag: &str, text: &str) -> Result<ReplayTime, Error> {
        let trimmed = text.trim();
        if let Ok(time) = DateTime::parse_from_rfc3339(trimmed) {
            return Ok(ReplayTime::At(time.with_timezone(&Utc)));
        }
        // A date-like value is a malformed time, not a malformed duration.
        let looks_like_a_date = trimmed.len() >= 5
            && trimmed.as_bytes()[..4].iter().all(u8::is_ascii_digit)
            && trimmed.as_bytes()[4] == b'-';
        if looks_like_a_date {
            let reason = DateTime::parse_from_rfc3339(trimmed)
                .err()
                .map(|error| error.to_string())
                .unwrap_or_default();
            return Err(Error::InvalidArgument(format!(
                "invalid {flag} `{text}`: not an RFC 3339 time ({reason}); write e.g. 2026-11-30T10:00:00Z"
            )));
        }
        parse_duration(trimmed).map(ReplayTime::Ago).map_err(|reason| {
            Error::InvalidArgument(format!(
                "invalid {flag} `{text}`: expected an RFC 3339 time (e.g. 2026-11-30T10:00:00Z) or a duration ago (e.g. 2h, 30m): {reason}"
            ))
        })
    }
}
