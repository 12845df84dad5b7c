//! Redaction: the secrets rein holds never leave it in clear.
//!
//! # What counts as a secret
//!
//! rein knows every secret it holds, because it put each one there:
//!
//! - provider keys (the value of a provider's `api_key_env`);
//! - values interpolated from the environment (`${VAR}`) into tool
//!   headers, tool URLs and provider base URLs — except a variable that
//!   supplies only a URL's origin (`http://127.0.0.1:8080`): that says
//!   *where*, not *who*, and errors naming the host stay useful;
//! - the SHA-256 digests of `[[server.api_keys]]`.
//!
//! Besides those values, every **URL query string** and **userinfo** is a
//! secret by shape (`?api_key=…`, `https://user:pass@host`): tokens travel
//! there, and rein cannot know which parameter is one.
//!
//! A secret is replaced by [`REDACTED`]; a query by `?[redacted]`; userinfo
//! by `[redacted]@`. The rest of the text stays, so an upstream's error body
//! is still useful to a human.
//!
//! # Short values
//!
//! A value shorter than [`MIN_SECRET_CHARS`] (8) characters is not
//! redacted: replacing every `a` or `test` in every text would ruin the
//! text and protect nothing (a secret that short is guessable anyway).
//! [`Secrets::insert`] refuses it with [`SecretTooShort`], and `rein check`
//! prints a warning naming the field, so an operator learns it.
//!
//! # Where redaction happens, and why there
//!
//! External text becomes rein text in a few places, and each has one type
//! or one function every such text goes through; redaction sits inside it,
//! so a new caller cannot forget it:
//!
//! | funnel | what passes through it |
//! | --- | --- |
//! | [`Failure::with_human_message`](crate::Failure::with_human_message) | every tool, provider and transport error: HTTP bodies, reqwest errors naming URLs, command stderr; from it, reports, ledger rows, gateway errors |
//! | [`ConfigProblem::new`](crate::registry::ConfigProblem::new) | everything `rein check` (and a refused start) prints |
//! | the engine's event emitter | every event, before the live observer, metrics and the store see it |
//! | the server's problem rendering | every HTTP error body |
//! | the CLI's log writer | every log line, whatever crate wrote it |
//!
//! Failures and config problems are redacted where they are made, at the
//! source, because they are the only carriers of raw outside text into the
//! run's records; events, problem bodies and logs are redacted at the sink
//! as a net for text rein formats itself from other errors (a store error,
//! a bind error).
//!
//! # Why process-wide
//!
//! The secrets are a property of the process — its environment and the
//! config it loaded — just as the log subscriber is. The sinks above have
//! no handle to thread a redactor through (a `Problem` renders itself, a
//! `Failure` is built in a hundred places, a log line by any crate), and
//! threading one would be exactly the scattered calls that get forgotten.
//! So loading a config [`register`]s its secrets, once, and [`text`] and
//! [`json`] read them. The set only grows: nothing ever un-redacts, and a
//! test process that loads many configs redacts the union. The pure
//! [`Redactor`] is what they use, and what unit tests drive directly.

use std::borrow::Cow;
use std::sync::{Arc, RwLock};

use serde_json::Value;

/// What a secret is replaced by.
pub const REDACTED: &str = "[redacted]";

/// The shortest value redacted, in characters; see the module docs.
pub const MIN_SECRET_CHARS: usize = 8;

/// A value too short to redact without ruining every text it appears in.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "is {chars} characters long; values shorter than {MIN_SECRET_CHARS} are not redacted \
     from errors, reports and logs"
)]
pub struct SecretTooShort {
    /// The value's length in characters.
    pub chars: usize,
}

/// The secret values a process holds, as written.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Secrets {
    values: Vec<String>,
}

impl Secrets {
    /// No secrets.
    pub fn new() -> Secrets {
        Secrets::default()
    }

    /// Adds `value`. An empty value is ignored (it holds nothing).
    ///
    /// # Errors
    ///
    /// [`SecretTooShort`] for a value of fewer than [`MIN_SECRET_CHARS`]
    /// characters; it is not added.
    pub fn insert(&mut self, value: &str) -> Result<(), SecretTooShort> {
        let chars = value.chars().count();
        if chars == 0 {
            return Ok(());
        }
        if chars < MIN_SECRET_CHARS {
            return Err(SecretTooShort { chars });
        }
        if !self.values.iter().any(|v| v == value) {
            self.values.push(value.to_owned());
        }
        Ok(())
    }

    /// Adds every secret of `other`.
    pub fn extend(&mut self, other: &Secrets) {
        for value in &other.values {
            if !self.values.contains(value) {
                self.values.push(value.clone());
            }
        }
    }

    /// How many values there are.
    pub fn len(&self) -> usize {
        self.values.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }
}

/// Whether an interpolated `value` is only a URL origin
/// (`scheme://host[:port]`, nothing after), which is not a secret.
pub fn is_origin(value: &str) -> bool {
    let Some((scheme, rest)) = value.split_once("://") else {
        return false;
    };
    !scheme.is_empty()
        && scheme
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
        && !rest.is_empty()
        && !rest
            .trim_end_matches('/')
            .contains(['/', '?', '#', '@', ' '])
}

/// Replaces known secrets and URL queries and userinfo in text.
///
/// ```
/// # use rein_core::redact::{Redactor, Secrets};
/// let mut secrets = Secrets::new();
/// secrets.insert("sk-canary-0001")?;
/// let redactor = Redactor::new(&secrets);
/// assert_eq!(
///     redactor.redact("bad key sk-canary-0001 for https://u:p@api.example/v1?key=1 (x)"),
///     "bad key [redacted] for https://[redacted]@api.example/v1?[redacted] (x)"
/// );
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Default)]
pub struct Redactor {
    /// Every form a secret may take in text, longest first so that a
    /// secret containing another is replaced whole.
    needles: Vec<String>,
}

impl Redactor {
    /// A redactor for `secrets` (and, always, URL queries and userinfo).
    pub fn new(secrets: &Secrets) -> Redactor {
        let mut needles = Vec::new();
        for value in &secrets.values {
            for form in forms(value) {
                if !needles.contains(&form) {
                    needles.push(form);
                }
            }
        }
        needles.sort_by_key(|n: &String| std::cmp::Reverse(n.len()));
        Redactor { needles }
    }

    /// `text` without secrets; borrowed when there was nothing to redact.
    pub fn redact<'a>(&self, text: &'a str) -> Cow<'a, str> {
        let mut out: Cow<'a, str> = Cow::Borrowed(text);
        for needle in &self.needles {
            if out.contains(needle.as_str()) {
                out = Cow::Owned(out.replace(needle.as_str(), REDACTED));
            }
        }
        match scrub_urls(&out) {
            Cow::Borrowed(_) => out,
            Cow::Owned(scrubbed) => Cow::Owned(scrubbed),
        }
    }

    /// Redacts every string (and object key) in `value`, in place.
    pub fn redact_json(&self, value: &mut Value) {
        match value {
            Value::String(s) => {
                if let Cow::Owned(clean) = self.redact(s) {
                    *s = clean;
                }
            }
            Value::Array(items) => items.iter_mut().for_each(|v| self.redact_json(v)),
            Value::Object(map) => {
                let dirty: Vec<String> = map
                    .keys()
                    .filter(|k| matches!(self.redact(k), Cow::Owned(_)))
                    .cloned()
                    .collect();
                for key in dirty {
                    if let Some(v) = map.remove(&key) {
                        map.insert(self.redact(&key).into_owned(), v);
                    }
                }
                map.values_mut().for_each(|v| self.redact_json(v));
            }
            Value::Null | Value::Bool(_) | Value::Number(_) => {}
        }
    }
}

/// The forms `value` may take in text: as is, JSON-escaped (in a JSON log
/// line or body) and percent-encoded (in a URL).
fn forms(value: &str) -> Vec<String> {
    let mut out = vec![value.to_owned()];
    let escaped = serde_json::to_string(value).unwrap_or_default();
    let escaped = escaped
        .strip_prefix('"')
        .and_then(|s| s.strip_suffix('"'))
        .unwrap_or(value);
    if escaped != value {
        out.push(escaped.to_owned());
    }
    let encoded = percent_encode(value);
    if encoded != value {
        out.push(encoded);
    }
    out
}

fn percent_encode(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for byte in value.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'.' | b'~') {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// Characters that end a URL in running text: whitespace, quotes, angle
/// brackets, a closing parenthesis (reqwest writes `for url (…)`) and a
/// backslash (an escaped quote in JSON text).
fn ends_url(c: char) -> bool {
    c.is_whitespace() || matches!(c, '"' | '\'' | '<' | '>' | '`' | ')' | '\\')
}

/// `text` with the query string and userinfo of every URL replaced.
///
/// A URL is a token with `://`; a query is also recognised without a
/// scheme when `?` is followed by `name=` inside a token (`/tools/x?key=…`
/// in a log line). Already-redacted parts are left as they are, so
/// redacting twice changes nothing.
pub fn scrub_urls(text: &str) -> Cow<'_, str> {
    if !text.contains('?') && !text.contains('@') {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len());
    let mut changed = false;
    let mut rest = text;
    while !rest.is_empty() {
        let token_end = rest.find(ends_url).unwrap_or(rest.len());
        if token_end == 0 {
            let c = rest.chars().next().unwrap_or(' ');
            out.push(c);
            rest = &rest[c.len_utf8()..];
            continue;
        }
        let token = &rest[..token_end];
        match scrub_token(token) {
            Some(clean) => {
                out.push_str(&clean);
                changed = true;
            }
            None => out.push_str(token),
        }
        rest = &rest[token_end..];
    }
    if changed {
        Cow::Owned(out)
    } else {
        Cow::Borrowed(text)
    }
}

/// One token scrubbed, or `None` when it holds nothing to scrub.
fn scrub_token(token: &str) -> Option<String> {
    let mut out = String::with_capacity(token.len());
    let has_scheme = token.contains("://");
    let tail = match token.find("://") {
        Some(at) => {
            let after = &token[at + 3..];
            let authority_end = after.find(['/', '?', '#']).unwrap_or(after.len());
            let authority = &after[..authority_end];
            out.push_str(&token[..at + 3]);
            match authority.rfind('@') {
                Some(user_end) => {
                    out.push_str(REDACTED);
                    out.push_str(&authority[user_end..]);
                }
                None => out.push_str(authority),
            }
            &after[authority_end..]
        }
        None => token,
    };
    match tail.find('?') {
        Some(q)
            if !tail[q + 1..].is_empty() && (has_scheme || starts_with_param(&tail[q + 1..])) =>
        {
            out.push_str(&tail[..=q]);
            out.push_str(REDACTED);
        }
        _ => out.push_str(tail),
    }
    (out != token).then_some(out)
}

/// Whether `query` starts `name=`.
fn starts_with_param(query: &str) -> bool {
    let name_len = query
        .find(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '[' | ']')))
        .unwrap_or(query.len());
    name_len > 0 && query[name_len..].starts_with('=')
}

/// The process's secrets; see "Why process-wide" above.
static PROCESS: RwLock<Option<Arc<Redactor>>> = RwLock::new(None);
/// What [`PROCESS`] was built from, so that [`register`] only grows it.
static REGISTERED: RwLock<Secrets> = RwLock::new(Secrets { values: Vec::new() });

/// Teaches the process `secrets`: from now on [`text`] and [`json`]
/// redact them (with every secret registered before).
pub fn register(secrets: &Secrets) {
    if secrets.is_empty() {
        return;
    }
    let mut all = REGISTERED.write().unwrap_or_else(|p| p.into_inner());
    let before = all.len();
    all.extend(secrets);
    if all.len() == before {
        return;
    }
    let redactor = Arc::new(Redactor::new(&all));
    *PROCESS.write().unwrap_or_else(|p| p.into_inner()) = Some(redactor);
}

/// The process's redactor (URL queries and userinfo only, before any
/// secret is registered).
pub fn process() -> Arc<Redactor> {
    PROCESS
        .read()
        .unwrap_or_else(|p| p.into_inner())
        .clone()
        .unwrap_or_default()
}

/// `text` without the process's secrets, URL queries or userinfo.
pub fn text(text: &str) -> Cow<'_, str> {
    let guard = PROCESS.read().unwrap_or_else(|p| p.into_inner());
    match guard.as_deref() {
        Some(redactor) => match redactor.redact(text) {
            Cow::Borrowed(_) => Cow::Borrowed(text),
            Cow::Owned(clean) => Cow::Owned(clean),
        },
        None => scrub_urls(text),
    }
}

/// Redacts every string of `value` in place, with the process's secrets.
pub fn json(value: &mut Value) {
    process().redact_json(value);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn redactor(values: &[&str]) -> Redactor {
        let mut secrets = Secrets::new();
        for v in values {
            secrets.insert(v).unwrap();
        }
        Redactor::new(&secrets)
    }

    #[test]
    fn known_secret_is_replaced_wherever_it_appears() {
        let r = redactor(&["sk-canary-1234"]);
        assert_eq!(
            r.redact("401: Incorrect API key provided: Bearer sk-canary-1234."),
            "401: Incorrect API key provided: Bearer [redacted]."
        );
        assert_eq!(
            r.redact("sk-canary-1234sk-canary-1234"),
            "[redacted][redacted]"
        );
    }

    #[test]
    fn text_without_secrets_is_borrowed_unchanged() {
        let r = redactor(&["sk-canary-1234"]);
        assert!(matches!(r.redact("all is well? yes"), Cow::Borrowed(_)));
        assert!(matches!(
            r.redact("mail me at ops@example.com"),
            Cow::Borrowed(_)
        ));
    }

    #[test]
    fn short_values_are_refused_and_empty_ones_ignored() {
        let mut secrets = Secrets::new();
        assert_eq!(secrets.insert("abc"), Err(SecretTooShort { chars: 3 }));
        assert_eq!(secrets.insert(""), Ok(()));
        assert!(secrets.is_empty());
        assert_eq!(secrets.insert("12345678"), Ok(()));
        assert_eq!(secrets.len(), 1);
    }

    #[test]
    fn longer_secret_containing_a_shorter_one_is_replaced_whole() {
        let r = redactor(&["canary-12", "canary-12-and-more"]);
        assert_eq!(r.redact("x canary-12-and-more y"), "x [redacted] y");
    }

    #[test]
    fn json_escaped_and_percent_encoded_forms_are_replaced() {
        let r = redactor(&["pa\"ss word/1"]);
        assert_eq!(
            r.redact(r#"{"k":"pa\"ss word/1"}"#),
            r#"{"k":"[redacted]"}"#
        );
        assert_eq!(r.redact("t=pa%22ss%20word%2F1&x"), "t=[redacted]&x");
    }

    #[test]
    fn url_query_and_userinfo_are_scrubbed() {
        assert_eq!(
            scrub_urls(
                "error sending request for url (http://127.0.0.1:9/x?api_key=abc&b=2): refused"
            ),
            "error sending request for url (http://127.0.0.1:9/x?[redacted]): refused"
        );
        assert_eq!(
            scrub_urls("postgres://admin:hunter2@db:5432/rein"),
            "postgres://[redacted]@db:5432/rein"
        );
        assert_eq!(
            scrub_urls("GET /v1/runs?token=abc 200"),
            "GET /v1/runs?[redacted] 200"
        );
    }

    #[test]
    fn questions_and_emails_are_not_urls() {
        for text in [
            "is it down? yes",
            "what?x",
            "mail ops@example.com",
            "http://host/path?",
        ] {
            assert_eq!(scrub_urls(text), text, "{text}");
        }
    }

    #[test]
    fn redacting_twice_changes_nothing() {
        let r = redactor(&["sk-canary-1234"]);
        for text in [
            "a https://u:p@h/x?q=1 b sk-canary-1234",
            "GET /x?y=2",
            "http://h/?[redacted]",
        ] {
            let once = r.redact(text).into_owned();
            assert_eq!(r.redact(&once), once, "{text}");
        }
    }

    #[test]
    fn json_strings_and_keys_are_redacted() {
        let r = redactor(&["sk-canary-1234"]);
        let mut v = serde_json::json!({
            "error": {"message": "key sk-canary-1234"},
            "sk-canary-1234": 1,
            "list": ["http://h/x?k=v", 3],
        });
        r.redact_json(&mut v);
        assert_eq!(
            v,
            serde_json::json!({
                "error": {"message": "key [redacted]"},
                "[redacted]": 1,
                "list": ["http://h/x?[redacted]", 3],
            })
        );
    }

    #[test]
    fn origins_are_not_secrets_but_paths_and_queries_are() {
        assert!(is_origin("http://127.0.0.1:8080"));
        assert!(is_origin("https://api.example.com/"));
        assert!(!is_origin("https://api.example.com/bot123456789"));
        assert!(!is_origin("https://u:p@api.example.com"));
        assert!(!is_origin("sk-live-123456"));
    }

    #[test]
    fn registered_secrets_are_redacted_process_wide() {
        let mut secrets = Secrets::new();
        secrets.insert("process-canary-77").unwrap();
        register(&secrets);
        assert_eq!(text("x process-canary-77 y"), "x [redacted] y");
        let mut v = serde_json::json!(["process-canary-77"]);
        json(&mut v);
        assert_eq!(v, serde_json::json!(["[redacted]"]));
    }
}
