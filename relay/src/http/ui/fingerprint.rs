//! Failure fingerprints: the last error of a dead event with what differs
//! between occurrences of one failure replaced by placeholders, and a
//! stable hash of that text.
//!
//! Replaced, in this order of precedence:
//!
//! - quoted text (`'...'`, `"..."`, `` `...` ``) by `<str>`;
//! - UUIDs (`8-4-4-4-12` hex digits) by `<uuid>`;
//! - `0x` hex numbers, and runs of 8 or more hex digits holding a digit
//!   and a letter (hashes, positions), by `<hex>`;
//! - numbers by `<n>`, a unit after them kept (`250ms` is `<n>ms`), and
//!   other words of hex digits starting with a digit (`16B3748`) by
//!   `<hex>`.
//!
//! The fingerprint is the 64-bit FNV-1a hash of the normalized text, as 16
//! lowercase hex digits: the same error text gives the same fingerprint in
//! every process and every version.

/// The normalized form of an error text.
pub(crate) fn normalize(error: &str) -> String {
    let chars: Vec<char> = error.chars().collect();
    let mut normalized = String::with_capacity(error.len());
    let mut at = 0;
    while at < chars.len() {
        let c = chars[at];
        if matches!(c, '\'' | '"' | '`')
            && let Some(close) = chars[at + 1..].iter().position(|&other| other == c)
        {
            normalized.push_str("<str>");
            at += close + 2;
            continue;
        }
        if c.is_ascii_alphanumeric() || c == '_' {
            let starts_word = at == 0 || !is_word(chars[at - 1]);
            if starts_word && let Some(length) = uuid_at(&chars[at..]) {
                normalized.push_str("<uuid>");
                at += length;
                continue;
            }
            let end = chars[at..]
                .iter()
                .position(|&other| !is_word(other))
                .map_or(chars.len(), |offset| at + offset);
            let word: String = chars[at..end].iter().collect();
            normalized.push_str(&normalize_word(&word));
            at = end;
            continue;
        }
        normalized.push(c);
        at += 1;
    }
    normalized
}

/// The fingerprint of an error text: the FNV-1a hash of its normalized
/// form, 16 hex digits.
pub(crate) fn fingerprint(normalized: &str) -> String {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let hash = normalized.bytes().fold(OFFSET, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(PRIME)
    });
    format!("{hash:016x}")
}

fn is_word(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// The length of the UUID at the start of `chars`, if one is there and no
/// word character follows it.
fn uuid_at(chars: &[char]) -> Option<usize> {
    const GROUPS: [usize; 5] = [8, 4, 4, 4, 12];
    let mut at = 0;
    for (index, group) in GROUPS.iter().enumerate() {
        if index > 0 {
            if chars.get(at) != Some(&'-') {
                return None;
            }
            at += 1;
        }
        let digits = chars.get(at..at + group)?;
        if !digits.iter().all(char::is_ascii_hexdigit) {
            return None;
        }
        at += group;
    }
    match chars.get(at) {
        Some(&next) if is_word(next) => None,
        _ => Some(at),
    }
}

/// One word (letters, digits, `_`) with its varying part replaced.
fn normalize_word(word: &str) -> String {
    let lower = word.to_ascii_lowercase();
    if let Some(digits) = lower.strip_prefix("0x")
        && !digits.is_empty()
        && digits.chars().all(|c| c.is_ascii_hexdigit())
    {
        return "<hex>".to_owned();
    }
    if word.len() >= 8
        && word.chars().all(|c| c.is_ascii_hexdigit())
        && word.chars().any(|c| c.is_ascii_digit())
        && word.chars().any(|c| c.is_ascii_alphabetic())
    {
        return "<hex>".to_owned();
    }
    let digits = word.chars().take_while(char::is_ascii_digit).count();
    if digits == 0 {
        return word.to_owned();
    }
    let rest = &word[digits..];
    if rest.is_empty() || rest.chars().all(|c| c.is_ascii_alphabetic()) {
        return format!("<n>{rest}");
    }
    if word.chars().all(|c| c.is_ascii_hexdigit()) {
        return "<hex>".to_owned();
    }
    word.to_owned()
}

#[cfg(test)]
mod tests {
    use super::{fingerprint, normalize};

    fn of(error: &str) -> String {
        fingerprint(&normalize(error))
    }

    #[test]
    fn errors_that_differ_only_in_values_share_a_fingerprint() {
        let first = "broker rejected event 0190a5b2-7c1d-7e4f-9a3b-1c2d3e4f5a6b on topic orders: \
                     no stream takes subject 'orders.order.42' (code 10077, offset 0x1f3a)";
        let second = "broker rejected event 0190a5b2-8888-7e4f-9a3b-ffffffffffff on topic orders: \
                      no stream takes subject 'orders.order.7' (code 10078, offset 0xbeef)";
        assert_eq!(normalize(first), normalize(second));
        assert_eq!(
            normalize(first),
            "broker rejected event <uuid> on topic orders: no stream takes subject <str> \
             (code <n>, offset <hex>)"
        );
        assert_eq!(of(first), of(second));
        assert_eq!(of(first).len(), 16);
        assert_eq!(
            of("timed out after 250ms at lsn 16B3748"),
            of("timed out after 3000ms at lsn 2A00F10")
        );
    }

    #[test]
    fn different_errors_have_different_fingerprints() {
        assert_ne!(
            of("broker rejected event 0190a5b2-7c1d-7e4f-9a3b-1c2d3e4f5a6b: message too large"),
            of("broker rejected event 0190a5b2-7c1d-7e4f-9a3b-1c2d3e4f5a6b: topic not found")
        );
        assert_ne!(of("timed out after 250ms"), of("timed out after 250s"));
        assert_ne!(of(""), of("connection refused"));
    }

    #[test]
    fn words_keep_their_letters() {
        assert_eq!(normalize("kafka2 utf8 v2"), "kafka2 utf8 v2");
        assert_eq!(normalize("order-42 \"quoted, text\""), "order-<n> <str>");
        assert_eq!(
            normalize("unclosed 'quote 7"),
            "unclosed '<str>".replace("<str>", "quote <n>")
        );
    }

    #[test]
    fn the_fingerprint_is_fixed_for_a_text() {
        // FNV-1a's published value for the empty input: the hash does not
        // depend on the process or the Rust version.
        assert_eq!(fingerprint(""), "cbf29ce484222325");
        assert_eq!(fingerprint("a"), "af63dc4c8601ec8c");
    }
}
