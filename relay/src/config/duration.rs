//! Durations as the configuration writes them: `"250ms"`, `"30s"`,
//! `"1m30s"`.

use std::time::Duration;

/// Parses a duration such as `"250ms"`, `"30s"`, `"5m"`, `"2h"`, `"7d"` or
/// `"1m30s"`: whole numbers, each followed by a unit (`ms`, `s`, `m`, `h`,
/// `d`). Fits clap's `value_parser` as it is.
///
/// # Errors
///
/// A sentence naming what is wrong and the accepted units.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    const UNITS: &str = "units: ms, s, m, h, d";
    let trimmed = text.trim();
    if trimmed.is_empty() {
        return Err(format!("empty duration; write e.g. \"30s\" ({UNITS})"));
    }
    if trimmed.starts_with('-') {
        return Err(format!(
            "\"{trimmed}\" is negative; durations are 0 or more"
        ));
    }
    let mut total_millis: u64 = 0;
    let mut rest = trimmed;
    while !rest.is_empty() {
        let Some((digits, after_number)) = split_digits(rest) else {
            return Err(format!(
                "\"{trimmed}\" is not a duration; write a whole number and a unit, e.g. \"30s\" ({UNITS})"
            ));
        };
        let too_long = || format!("\"{trimmed}\" is too long a duration");
        let number: u64 = digits.parse().map_err(|_| too_long())?;
        let after_number = after_number.trim_start();
        let unit_end = after_number
            .find(|character: char| character.is_ascii_digit() || character.is_whitespace())
            .unwrap_or(after_number.len());
        let unit = &after_number[..unit_end];
        let unit_millis: u64 = match unit {
            "ms" => 1,
            "s" => 1_000,
            "m" => 60_000,
            "h" => 3_600_000,
            "d" => 86_400_000,
            "" => {
                return Err(format!(
                    "\"{trimmed}\" has no unit; write e.g. \"{number}s\" ({UNITS})"
                ));
            }
            _ if unit.starts_with(['.', ',']) => {
                return Err(format!(
                    "\"{trimmed}\" has a fraction; use whole numbers of a smaller unit, e.g. \"1500ms\" ({UNITS})"
                ));
            }
            _ => {
                return Err(format!(
                    "unknown unit `{unit}` in \"{trimmed}\"; use ms, s, m, h or d"
                ));
            }
        };
        total_millis = number
            .checked_mul(unit_millis)
            .and_then(|millis| total_millis.checked_add(millis))
            .ok_or_else(too_long)?;
        rest = after_number[unit_end..].trim_start();
    }
    Ok(Duration::from_millis(total_millis))
}

/// `text` cut after its leading ASCII digits, the number of a size or of
/// a duration: `None` when it does not start with a digit.
pub(super) fn split_digits(text: &str) -> Option<(&str, &str)> {
    let digits_end = text
        .find(|character: char| !character.is_ascii_digit())
        .unwrap_or(text.len());
    (digits_end > 0).then(|| text.split_at(digits_end))
}

/// A duration in the largest unit that shows it exactly, e.g. `15s`.
pub(super) fn format_duration(duration: Duration) -> String {
    let millis = duration.as_millis();
    if Duration::from_millis(u64::try_from(millis).unwrap_or(u64::MAX)) != duration {
        return format!("{duration:?}");
    }
    if millis == 0 {
        return "0s".to_owned();
    }
    let units: [(u128, &str); 5] = [
        (86_400_000, "d"),
        (3_600_000, "h"),
        (60_000, "m"),
        (1_000, "s"),
        (1, "ms"),
    ];
    units
        .iter()
        .find(|(unit_millis, _)| millis.is_multiple_of(*unit_millis))
        .map_or_else(
            || format!("{millis}ms"),
            |(unit_millis, unit)| format!("{}{unit}", millis / unit_millis),
        )
}
