//! Secrets in messages: the values a message built from a server's reply must never show — an
//! API key, a header value read from the environment, the user name and password in a URL — and
//! the one way every engine and tool masks them, whatever its kind.
//!
//! A server may echo what it was sent (a 401 page listing the request's headers, an error that
//! quotes the URL), and what it says reaches stderr, run records, event files, `pagantic tools`
//! and `serve`'s answers to any client. So whoever holds a secret keeps it in a [`Secrets`] and
//! passes every failure and notice it builds from a reply through [`Secrets::failure`] or
//! [`Secrets::redact`] before it leaves: each value is masked where it appears, as written and
//! in the forms an HTTP client sends it (a bearer token's word, a URL's credentials as `Basic`
//! authorisation), and the credentials of any URL in the text are masked whether or not they
//! were known.

use std::fmt;

use serde_json::Value;

use super::Failure;

/// What stands where a secret was.
pub const REDACTED: &str = "<redacted>";

/// Values shorter than this are not looked for: masking every `ab` would garble a message
/// without hiding anything worth hiding.
const SHORTEST_SECRET: usize = 4;

/// The secret values one engine or tool holds.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Secrets {
    /// Longest first, so a value is masked before a part of it.
    values: Vec<String>,
}

/// Shows how many values it holds, never a value.
impl fmt::Debug for Secrets {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Secrets({} values)", self.values.len())
    }
}

impl Secrets {
    /// No secrets.
    pub fn new() -> Self {
        Secrets::default()
    }

    /// With `value` (an API key, a header's value) and, for a value of several words (`Bearer
    /// KEY`), its last word.
    pub fn with(mut self, value: &str) -> Self {
        self.keep(value);
        if let Some(last) = value.split_whitespace().last() {
            self.keep(last);
        }
        self
    }

    /// With the credentials of `url`, when it has some: the user name and password as written
    /// and percent-decoded, and the `Basic` value an HTTP client sends for them.
    pub fn with_url(mut self, url: &str) -> Self {
        let Some((user, password)) = credentials(url) else {
            return self;
        };
        let decode = |text: &str| {
            percent_encoding::percent_decode_str(text)
                .decode_utf8_lossy()
                .into_owned()
        };
        for part in [user, password] {
            self.keep(part);
            self.keep(&decode(part));
        }
        let pair = format!("{}:{}", decode(user), decode(password));
        self.keep(&base64(pair.as_bytes()));
        self.keep(&pair);
        self
    }

    fn keep(&mut self, value: &str) {
        if value.chars().count() < SHORTEST_SECRET || self.values.iter().any(|v| v == value) {
            return;
        }
        self.values.push(value.to_string());
        self.values
            .sort_by_key(|value| std::cmp::Reverse(value.len()));
    }

    /// `text` with every secret value, and the credentials of every URL in it, masked.
    pub fn redact(&self, text: &str) -> String {
        let mut redacted = without_credentials(text);
        for value in &self.values {
            if redacted.contains(value.as_str()) {
                redacted = redacted.replace(value.as_str(), REDACTED);
            }
        }
        redacted
    }

    /// `failure` with its message, help and details redacted.
    pub fn failure(&self, mut failure: Failure) -> Failure {
        failure.message = self.redact(&failure.message);
        failure.help = failure.help.map(|help| self.redact(&help));
        if let Some(details) = failure.details.as_mut() {
            self.redact_value(details);
        }
        failure
    }

    /// Redacts every string in `value`, keys included.
    fn redact_value(&self, value: &mut Value) {
        match value {
            Value::String(text) => *text = self.redact(text),
            Value::Array(items) => items.iter_mut().for_each(|item| self.redact_value(item)),
            Value::Object(map) => {
                let entries = std::mem::take(map);
                for (key, mut item) in entries {
                    self.redact_value(&mut item);
                    map.insert(self.redact(&key), item);
                }
            }
            Value::Null | Value::Bool(_) | Value::Number(_) => {}
        }
    }
}

/// Where the authority of a URL ends, in the text after its `scheme://`.
fn authority_end(after_scheme: &str) -> usize {
    after_scheme
        .find(|c: char| {
            matches!(c, '/' | '?' | '#' | '"' | '\'' | '<' | '>' | '`') || c.is_whitespace()
        })
        .unwrap_or(after_scheme.len())
}

/// The user name and password of `url` (`scheme://USER:PASSWORD@host…`), as written.
fn credentials(url: &str) -> Option<(&str, &str)> {
    let after = &url[url.find("://")? + 3..];
    let authority = &after[..authority_end(after)];
    let userinfo = &authority[..authority.rfind('@')?];
    Some(userinfo.split_once(':').unwrap_or((userinfo, "")))
}

/// `text` with the credentials of every URL in it (`scheme://USER:PASSWORD@host…`) masked:
/// `scheme://<redacted>@host…`.
pub fn without_credentials(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("://") {
        let (before, after) = rest.split_at(at + 3);
        out.push_str(before);
        let authority = &after[..authority_end(after)];
        match authority.rfind('@') {
            Some(credentials_end) => {
                out.push_str(REDACTED);
                out.push_str(&authority[credentials_end..]);
            }
            None => out.push_str(authority),
        }
        rest = &after[authority.len()..];
    }
    out.push_str(rest);
    out
}

/// Standard base64 with padding (RFC 4648), as HTTP's `Basic` credentials are written.
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for (i, shift) in [18, 12, 6, 0].into_iter().enumerate() {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[((n >> shift) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::FailureCode;

    #[test]
    fn base64_is_what_http_basic_authorisation_sends() {
        assert_eq!(base64(b"user:pass"), "dXNlcjpwYXNz");
        assert_eq!(base64(b"a"), "YQ==");
        assert_eq!(base64(b"ab"), "YWI=");
        assert_eq!(base64(b""), "");
    }

    #[test]
    fn the_credentials_of_any_url_are_masked() {
        assert_eq!(
            without_credentials("see http://alice:s3cret@host:8/v1/x and https://h/p"),
            "see http://<redacted>@host:8/v1/x and https://h/p"
        );
        assert_eq!(
            without_credentials("\"https://tok@api\""),
            "\"https://<redacted>@api\""
        );
        assert_eq!(without_credentials("no url here: a@b"), "no url here: a@b");
    }

    #[test]
    fn every_form_of_a_secret_is_masked_in_a_failure() {
        let secrets = Secrets::new()
            .with("Bearer header-secret-1")
            .with("sk-api-key")
            .with("ab")
            .with_url("http://alice:p%40ss@127.0.0.1:9/v1");
        let failure = Failure::new(
            FailureCode::ToolServerFailed,
            "401: you sent authorization: Bearer header-secret-1, key sk-api-key, \
             Basic YWxpY2U6cEBzcw== to http://alice:p%40ss@127.0.0.1:9/v1 (ab)",
        )
        .with_help("p@ss is wrong")
        .with_details(serde_json::json!({ "echo": ["header-secret-1"], "sk-api-key": 1 }));
        let redacted = secrets.failure(failure);
        for secret in [
            "header-secret-1",
            "sk-api-key",
            "YWxpY2U6cEBzcw==",
            "alice",
            "p@ss",
        ] {
            let shown = serde_json::to_string(&redacted).expect("json");
            assert!(!shown.contains(secret), "{secret} in {shown}");
        }
        assert!(redacted.message.contains("(ab)"), "too short to look for");
        assert!(
            redacted
                .message
                .contains("http://<redacted>@127.0.0.1:9/v1"),
            "{}",
            redacted.message
        );
        assert_eq!(format!("{secrets:?}"), "Secrets(8 values)");
    }
}
