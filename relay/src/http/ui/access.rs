//! Who may act on the operators' page: named bearer tokens, compared in
//! constant time, and the checks that keep another site's pages from
//! making a browser post to it.

use std::path::Path;

use axum::http::{HeaderMap, header};

use crate::error::Error;

/// The named tokens the operators' page accepts for its actions
/// (`Authorization: Bearer <secret>`); the name is who acted, in the logs.
/// With none, the page is read-only.
///
/// The text forms are those of `--ui-token NAME=SECRET`, of
/// `OUTBOX_UI_TOKEN` (several pairs separated by commas) and of
/// `--ui-token-file` (one pair a line, `#` comments, blank lines
/// ignored).
///
/// ```
/// use outbox_relay::config::UiTokens;
///
/// let mut tokens = UiTokens::default();
/// tokens.add_pairs("alice=s3cret-a, bob=s3cret-b")?;
/// tokens.add_file_text("# operators\ncarol=s3cret-c\n", "tokens.txt")?;
/// assert_eq!(tokens.names(), ["alice", "bob", "carol"]);
/// assert!(tokens.add_pairs("no-secret").is_err());
/// # Ok::<(), outbox_relay::Error>(())
/// ```
#[derive(Clone, Default)]
#[non_exhaustive]
pub struct UiTokens {
    tokens: Vec<(String, String)>,
}

impl std::fmt::Debug for UiTokens {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("UiTokens")
            .field("names", &self.names())
            .finish_non_exhaustive()
    }
}

impl UiTokens {
    /// Add one token `NAME=SECRET`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] unless `pair` is a non-empty name of
    /// letters, digits, `-`, `_`, `.` or `@`, an `=` and a non-empty
    /// secret of at least 8 characters, or when the name or the secret is
    /// taken already. The message never holds the secret.
    pub fn add(&mut self, pair: &str) -> Result<(), Error> {
        let (name, secret) = pair.trim().split_once('=').ok_or_else(|| {
            Error::InvalidArgument(
                "a UI token is NAME=SECRET (e.g. alice=a-long-random-secret); this one has no `=`"
                    .to_owned(),
            )
        })?;
        let (name, secret) = (name.trim(), secret.trim());
        let name_ok = !name.is_empty()
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '@'));
        if !name_ok {
            return Err(Error::InvalidArgument(format!(
                "UI token name `{name}`: use letters, digits, `-`, `_`, `.` or `@`"
            )));
        }
        if secret.chars().count() < 8 {
            return Err(Error::InvalidArgument(format!(
                "UI token `{name}`: the secret must be at least 8 characters"
            )));
        }
        if self.tokens.iter().any(|(taken, _)| taken == name) {
            return Err(Error::InvalidArgument(format!(
                "UI token `{name}` is given twice"
            )));
        }
        if self.tokens.iter().any(|(_, taken)| taken == secret) {
            return Err(Error::InvalidArgument(format!(
                "UI token `{name}` has the secret of another token"
            )));
        }
        self.tokens.push((name.to_owned(), secret.to_owned()));
        Ok(())
    }

    /// Add the tokens of `text`: `NAME=SECRET` pairs separated by commas,
    /// as `OUTBOX_UI_TOKEN` holds them.
    ///
    /// # Errors
    /// As [`UiTokens::add`], for the first bad pair.
    pub fn add_pairs(&mut self, text: &str) -> Result<(), Error> {
        text.split(',')
            .filter(|pair| !pair.trim().is_empty())
            .try_for_each(|pair| self.add(pair))
    }

    /// Add the tokens of a token file's `text`: one `NAME=SECRET` a line;
    /// blank lines and lines starting with `#` are skipped. `path` names
    /// the file in errors.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] naming the file and the line of the
    /// first bad pair.
    pub fn add_file_text(&mut self, text: &str, path: &str) -> Result<(), Error> {
        for (number, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            self.add(line).map_err(|error| {
                Error::InvalidArgument(format!("{path} line {}: {error}", number + 1))
            })?;
        }
        Ok(())
    }

    /// Add the tokens of the file at `path` (see
    /// [`UiTokens::add_file_text`]).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when the file cannot be read or holds a
    /// bad pair.
    pub fn add_file(&mut self, path: impl AsRef<Path>) -> Result<(), Error> {
        let path = path.as_ref();
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|error| {
            Error::InvalidArgument(format!("cannot read the UI token file {shown}: {error}"))
        })?;
        self.add_file_text(&text, &shown)
    }

    /// The tokens' names, in the order given.
    pub fn names(&self) -> Vec<&str> {
        self.tokens.iter().map(|(name, _)| name.as_str()).collect()
    }

    /// Whether no token is configured: the page is read-only.
    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }

    /// The name of the token whose secret is `presented`. Every secret is
    /// compared, each in time that does not depend on where it differs.
    pub(crate) fn holder(&self, presented: &str) -> Option<&str> {
        let mut found = None;
        for (name, secret) in &self.tokens {
            if constant_time_eq(secret.as_bytes(), presented.as_bytes()) {
                found = Some(name.as_str());
            }
        }
        found
    }
}

/// Whether `a` and `b` are equal, in time that depends on their lengths
/// only, not on where they first differ.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    let mut difference = a.len() ^ b.len();
    for index in 0..a.len().max(b.len()) {
        let left = a.get(index).copied().unwrap_or(0);
        let right = b.get(index).copied().unwrap_or(0);
        difference |= usize::from(left ^ right);
    }
    std::hint::black_box(difference) == 0
}

/// The bearer token of `headers`, if any.
pub(crate) fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.trim().split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim())
        .filter(|token| !token.is_empty())
}

/// Why a POST looks cross-site, or `None`: an `Origin` other than the
/// page's own (the request's `Host`), a `Sec-Fetch-Site` other than
/// `same-origin`, or a body not declared `application/json` (which a
/// plain HTML form cannot send).
pub(crate) fn cross_site_refusal(headers: &HeaderMap) -> Option<String> {
    let text = |name: header::HeaderName| {
        headers
            .get(name)
            .map(|value| value.to_str().unwrap_or("<not text>").trim())
    };
    if let Some(origin) = text(header::ORIGIN) {
        let host = text(header::HOST).unwrap_or("");
        let authority = origin
            .strip_prefix("http://")
            .or_else(|| origin.strip_prefix("https://"));
        if host.is_empty()
            || authority.is_none_or(|authority| !authority.eq_ignore_ascii_case(host))
        {
            return Some(format!("origin {origin} is not this page's"));
        }
    }
    if let Some(site) = headers.get("sec-fetch-site") {
        let site = site.to_str().unwrap_or("<not text>").trim();
        if site != "same-origin" {
            return Some(format!("Sec-Fetch-Site is {site}, not same-origin"));
        }
    }
    let content_type = text(header::CONTENT_TYPE).unwrap_or("");
    let media_type = content_type.split(';').next().unwrap_or("").trim();
    if !media_type.eq_ignore_ascii_case("application/json") {
        return Some(format!(
            "Content-Type is `{content_type}`; actions take application/json"
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use axum::http::{HeaderMap, HeaderValue, header};

    use super::{UiTokens, bearer, constant_time_eq, cross_site_refusal};

    #[test]
    fn tokens_are_found_by_their_secret_only() {
        let mut tokens = UiTokens::default();
        tokens
            .add_pairs("alice=secret-alice,bob=secret-bob")
            .expect("two tokens");
        assert_eq!(tokens.holder("secret-bob"), Some("bob"));
        assert_eq!(tokens.holder("secret-bo"), None);
        assert_eq!(tokens.holder("alice"), None);
        assert!(
            tokens.add("carol=secret-bob").is_err(),
            "a secret taken twice"
        );
        assert!(
            tokens.add("alice=another-secret").is_err(),
            "a name taken twice"
        );
        assert!(tokens.add("dave=short").is_err(), "a short secret");
        let error = tokens
            .add("bad name=whatever-secret")
            .expect_err("a bad name");
        assert!(!error.to_string().contains("whatever-secret"), "{error}");
    }

    #[test]
    fn token_files_skip_comments_and_name_bad_lines() {
        let mut tokens = UiTokens::default();
        tokens
            .add_file_text("# who may act\n\nalice=secret-alice\n", "t.txt")
            .expect("a file");
        assert_eq!(tokens.names(), ["alice"]);
        let error = tokens
            .add_file_text("bob=secret-bob\nnot a pair\n", "t.txt")
            .expect_err("line 2");
        assert!(error.to_string().contains("t.txt line 2"), "{error}");
    }

    #[test]
    fn equal_only_when_every_byte_and_the_length_match() {
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"abcd"));
        assert!(!constant_time_eq(b"", b"a"));
    }

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(*name, HeaderValue::from_static(value));
        }
        map
    }

    #[test]
    fn cross_site_posts_are_refused() {
        let json = ("content-type", "application/json");
        let host = ("host", "127.0.0.1:9090");
        assert_eq!(cross_site_refusal(&headers(&[json, host])), None);
        assert_eq!(
            cross_site_refusal(&headers(&[json, host, ("origin", "http://127.0.0.1:9090")])),
            None
        );
        assert!(
            cross_site_refusal(&headers(&[json, host, ("origin", "https://evil.example")]))
                .is_some()
        );
        assert!(cross_site_refusal(&headers(&[json, host, ("origin", "null")])).is_some());
        assert!(
            cross_site_refusal(&headers(&[json, host, ("sec-fetch-site", "cross-site")])).is_some()
        );
        assert!(cross_site_refusal(&headers(&[host, ("content-type", "text/plain")])).is_some());
        assert!(cross_site_refusal(&headers(&[host])).is_some());
        let mut bearer_headers = HeaderMap::new();
        bearer_headers.insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("Bearer abc"),
        );
        assert_eq!(bearer(&bearer_headers), Some("abc"));
    }
}
