//! [`mask_password`]: a URL fit for a log line or an error message.

/// Replaces the password of a URL (`scheme://user:PASSWORD@host`) and of a
/// `password=` query parameter with `***`; everything else is kept.
///
/// Errs on the side of masking: when a password holds an unencoded `/`, `?`
/// or `#`, so that the URL's authority seems to have no `@`, everything
/// from the first `:` to the last `@` is masked. Database URLs
/// (`postgres://`, `mysql://`), broker URLs (`amqp://`, `amqps://`) and
/// anything without a password go through unchanged but for the password.
///
/// ```
/// use outbox::mask_password;
///
/// assert_eq!(mask_password("amqp://guest:secret@host:5672/%2f"), "amqp://guest:***@host:5672/%2f");
/// assert_eq!(mask_password("postgres://h/db?user=u&password=pw"), "postgres://h/db?user=u&password=***");
/// assert_eq!(mask_password("sqlite://outbox.db"), "sqlite://outbox.db");
/// ```
pub fn mask_password(url: &str) -> String {
    let Some(scheme_end) = url.find("://") else {
        return mask_query_password(url);
    };
    let (head, rest) = url.split_at(scheme_end + 3);
    let authority = &rest[..rest.find(['/', '?', '#']).unwrap_or(rest.len())];
    let userinfo_end = match authority.rfind('@') {
        Some(at) => Some(at),
        // No `@` in the authority, but one later: the password may hold an
        // unencoded separator. Mask if a `:` comes before the separator.
        None if authority.contains(':') => rest.rfind('@'),
        None => None,
    };
    let masked = match userinfo_end {
        Some(at) => match rest[..at].find(':') {
            Some(colon) => format!("{head}{}:***{}", &rest[..colon], &rest[at..]),
            None => url.to_owned(),
        },
        None => url.to_owned(),
    };
    mask_query_password(&masked)
}

/// Masks the value of any `password=` query parameter.
fn mask_query_password(url: &str) -> String {
    let Some(question) = url.find('?') else {
        return url.to_owned();
    };
    let (before_query, query) = url.split_at(question + 1);
    let pairs: Vec<String> = query
        .split('&')
        .map(|pair| match pair.split_once('=') {
            Some((key, _)) if key.eq_ignore_ascii_case("password") => format!("{key}=***"),
            _ => pair.to_owned(),
        })
        .collect();
    format!("{before_query}{}", pairs.join("&"))
}

#[cfg(test)]
mod tests {
    use super::mask_password;

    #[test]
    fn masks_the_password_of_every_kind_of_url() {
        let cases = [
            ("postgres://u:pw@h/db", "postgres://u:***@h/db"),
            ("postgres://u@h/db", "postgres://u@h/db"),
            ("postgres://h:5432/db", "postgres://h:5432/db"),
            ("postgres://:pw@h", "postgres://:***@h"),
            ("mysql://u:p@ss@h/db", "mysql://u:***@h/db"),
            ("mysql://u:p/ss@h/db", "mysql://u:***@h/db"),
            (
                "postgres://h/db?user=u&password=pw&sslmode=require",
                "postgres://h/db?user=u&password=***&sslmode=require",
            ),
            (
                "amqp://guest:secret@host:5672/%2f",
                "amqp://guest:***@host:5672/%2f",
            ),
            ("amqps://user@host/vh", "amqps://user@host/vh"),
            ("amqp://host:5672", "amqp://host:5672"),
            ("sqlite://outbox.db", "sqlite://outbox.db"),
            ("stdout", "stdout"),
        ];
        for (input, expected) in cases {
            assert_eq!(mask_password(input), expected, "{input}");
        }
    }
}
