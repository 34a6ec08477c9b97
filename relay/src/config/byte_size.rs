//! Sizes as the configuration writes them: `"32MiB"`, `"512KiB"`, or a
//! whole number of bytes.

use super::duration::split_digits;

/// Units a size may carry, with their factor. Decimal units (`KB`, `MB`,
/// `GB`) are powers of 1000, binary ones (`KiB`, `MiB`, `GiB`) of 1024.
const UNITS: &[(&str, u64)] = &[
    ("B", 1),
    ("KB", 1_000),
    ("MB", 1_000_000),
    ("GB", 1_000_000_000),
    ("KiB", 1 << 10),
    ("MiB", 1 << 20),
    ("GiB", 1 << 30),
];

/// Parses a size such as `"32MiB"`, `"512 KiB"`, `"1GB"` or `"65536"` (bytes):
/// a whole number, optionally followed by one unit (`B`, `KB`, `MB`, `GB`,
/// `KiB`, `MiB`, `GiB`).
///
/// # Errors
///
/// A sentence naming what is wrong and the accepted units.
///
/// # Examples
///
/// ```
/// use outbox_relay::config::parse_byte_size;
///
/// assert_eq!(parse_byte_size("32MiB"), Ok(32 * 1024 * 1024));
/// assert_eq!(parse_byte_size("1 KB"), Ok(1000));
/// assert_eq!(parse_byte_size("4096"), Ok(4096));
/// assert!(parse_byte_size("32 megabytes").is_err());
/// ```
pub fn parse_byte_size(text: &str) -> Result<u64, String> {
    const NAMES: &str = "units: B, KB, MB, GB, KiB, MiB, GiB";
    let trimmed = text.trim();
    let Some((digits, after_number)) = split_digits(trimmed) else {
        return Err(format!(
            "\"{trimmed}\" is not a size; write a whole number and a unit, e.g. \"32MiB\" ({NAMES})"
        ));
    };
    let number: u64 = digits
        .parse()
        .map_err(|_| format!("\"{trimmed}\" is too large a size"))?;
    let unit = after_number.trim_start();
    let factor = if unit.is_empty() {
        1
    } else {
        UNITS
            .iter()
            .find(|(name, _)| *name == unit)
            .map(|(_, factor)| *factor)
            .ok_or_else(|| format!("\"{trimmed}\" has an unknown unit \"{unit}\" ({NAMES})"))?
    };
    number
        .checked_mul(factor)
        .ok_or_else(|| format!("\"{trimmed}\" is too large a size"))
}

#[cfg(test)]
mod tests {
    use super::parse_byte_size;

    #[test]
    fn reads_every_unit() {
        assert_eq!(parse_byte_size("7B"), Ok(7));
        assert_eq!(parse_byte_size("2KB"), Ok(2_000));
        assert_eq!(parse_byte_size("2MB"), Ok(2_000_000));
        assert_eq!(parse_byte_size("2GB"), Ok(2_000_000_000));
        assert_eq!(parse_byte_size("2KiB"), Ok(2_048));
        assert_eq!(parse_byte_size("2MiB"), Ok(2 * 1_048_576));
        assert_eq!(parse_byte_size(" 2 GiB "), Ok(2 * 1_073_741_824));
    }

    #[test]
    fn names_what_is_wrong() {
        let unit = parse_byte_size("32mb").expect_err("lowercase unit");
        assert!(unit.contains("unknown unit \"mb\""), "{unit}");
        let empty = parse_byte_size("").expect_err("empty");
        assert!(empty.contains("not a size"), "{empty}");
        let negative = parse_byte_size("-1MiB").expect_err("negative");
        assert!(negative.contains("not a size"), "{negative}");
        let huge = parse_byte_size("99999999999GiB").expect_err("overflow");
        assert!(huge.contains("too large"), "{huge}");
    }
}
