//! Which of the values a config holds are secrets; the rule is in the
//! module docs of [`super`].

use std::ops::Range;

use base64::Engine as _;

/// A value a config holds that is a secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    /// The value.
    pub value: String,
    /// Whether an operator must hear about it when it is too short to be
    /// redacted (a credential by name), or it is dropped silently (found
    /// by its place in a URL, or derived from another secret).
    pub warn_if_short: bool,
}

impl Candidate {
    fn named(value: impl Into<String>) -> Candidate {
        Candidate {
            value: value.into(),
            warn_if_short: true,
        }
    }

    fn placed(value: impl Into<String>) -> Candidate {
        Candidate {
            value: value.into(),
            warn_if_short: false,
        }
    }
}

/// The words that make a header or variable name a credential's.
const CREDENTIAL_WORDS: &[&str] = &[
    "apikey",
    "auth",
    "authorization",
    "bearer",
    "cookie",
    "credential",
    "credentials",
    "jwt",
    "key",
    "pass",
    "passphrase",
    "passwd",
    "password",
    "pwd",
    "secret",
    "session",
    "signature",
    "token",
];

/// Whether a header or environment variable named `name` carries a
/// credential: one of its words (split at `-`, `_`, `.` and lower-to-upper
/// case changes, compared case-insensitively) is `key`, `token`,
/// `secret`, `password`, `auth`, `authorization`, `cookie`, `session`,
/// `signature`, `apikey`, `credential`, `jwt`, … .
///
/// ```
/// # use rein_core::redact::is_credential_name;
/// for name in ["Authorization", "Proxy-Authorization", "cookie", "X-Api-Key",
///              "api-key", "X-Auth-Token", "GITHUB_TOKEN", "DB_PASSWORD", "apiKey"] {
///     assert!(is_credential_name(name), "{name}");
/// }
/// for name in ["Accept", "X-Env", "Content-Type", "X-Request-Id", "HOME", "PATH"] {
///     assert!(!is_credential_name(name), "{name}");
/// }
/// ```
pub fn is_credential_name(name: &str) -> bool {
    words(name).any(|w| CREDENTIAL_WORDS.contains(&w.to_ascii_lowercase().as_str()))
}

/// `values` as a `Debug` printout may show them: each value whose name
/// names a credential ([`is_credential_name`]) replaced by
/// [`REDACTED`](super::REDACTED). For the hand-written `Debug` of targets
/// that carry headers or environment variables.
pub fn shown(
    values: &std::collections::BTreeMap<String, String>,
) -> std::collections::BTreeMap<&str, &str> {
    values
        .iter()
        .map(|(name, value)| {
            let shown = if is_credential_name(name) {
                super::REDACTED
            } else {
                value.as_str()
            };
            (name.as_str(), shown)
        })
        .collect()
}

/// The words of a name: split at separators and at lower-to-upper changes.
fn words(name: &str) -> impl Iterator<Item = &str> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut prev_lower = false;
    for (i, c) in name.char_indices() {
        if !c.is_ascii_alphanumeric() {
            if start < i {
                out.push(&name[start..i]);
            }
            start = i + c.len_utf8();
            prev_lower = false;
            continue;
        }
        if c.is_ascii_uppercase() && prev_lower {
            out.push(&name[start..i]);
            start = i;
        }
        prev_lower = c.is_ascii_lowercase() || c.is_ascii_digit();
    }
    if start < name.len() {
        out.push(&name[start..]);
    }
    out.into_iter()
}

/// The secrets of header `name: value` (see the module's table).
pub fn header_secrets(name: &str, value: &str) -> Vec<Candidate> {
    if !is_credential_name(name) || value.is_empty() {
        return Vec::new();
    }
    let mut out = vec![Candidate::named(value)];
    if let Some((scheme, credential)) = value.split_once(' ')
        && !scheme.is_empty()
        && scheme.chars().all(|c| c.is_ascii_alphabetic())
    {
        let credential = credential.trim();
        if !credential.is_empty() {
            out.push(Candidate::named(credential));
        }
        if scheme.eq_ignore_ascii_case("basic")
            && let Ok(bytes) = base64::engine::general_purpose::STANDARD.decode(credential)
            && let Ok(pair) = String::from_utf8(bytes)
        {
            out.push(Candidate::placed(pair.clone()));
            if let Some((_, password)) = pair.split_once(':') {
                out.push(Candidate::placed(password));
            }
        }
    }
    out
}

/// The secrets of a command's environment variable `name=value`.
pub fn env_secrets(name: &str, value: &str) -> Vec<Candidate> {
    if is_credential_name(name) && !value.is_empty() {
        vec![Candidate::named(value)]
    } else {
        Vec::new()
    }
}

/// The secrets of `url`, whose bytes in `from_env` came from `${VAR}`s
/// (see the module's table).
///
/// ```
/// # use rein_core::redact::url_secrets;
/// let url = "http://localhost:8080/bot123456789abc/send";
/// let values = |url: &str, ranges: &[std::ops::Range<usize>]| -> Vec<String> {
///     url_secrets(url, ranges).into_iter().map(|c| c.value).collect()
/// };
/// // HOST and PORT say where; the path token is a credential.
/// assert_eq!(values(url, &[7..16, 17..21, 25..37]), ["123456789abc"]);
/// ```
pub fn url_secrets(url: &str, from_env: &[Range<usize>]) -> Vec<Candidate> {
    let mut out = Vec::new();
    let Some(parts) = Parts::of(url) else {
        // Not a URL rein can read: every value in it is a secret.
        for r in from_env {
            if let Some(v) = url.get(r.clone()) {
                out.push(Candidate::placed(v));
            }
        }
        return out;
    };
    if let Some(userinfo) = parts.userinfo.clone().and_then(|r| url.get(r)) {
        out.extend(userinfo_secrets(userinfo));
    }
    for r in from_env {
        let start = r.start;
        let path = intersect(r, &parts.path);
        let rest = parts.rest.as_ref().map(|q| intersect(r, q));
        if let Some(path) = path.and_then(|p| url.get(p)) {
            if start >= parts.path.start {
                out.push(Candidate::placed(path));
            } else {
                out.extend(
                    path.split('/')
                        .filter(|s| looks_like_token(s))
                        .map(Candidate::placed),
                );
            }
        }
        if let Some(rest) = rest.flatten().and_then(|q| url.get(q)) {
            let starts_inside = parts.rest.as_ref().is_some_and(|q| start > q.start);
            if starts_inside {
                out.push(Candidate::placed(rest));
            } else {
                for pair in rest.trim_start_matches(['?', '#']).split('&') {
                    let value = pair.split_once('=').map_or(pair, |(_, v)| v);
                    out.push(Candidate::placed(value));
                }
            }
        }
    }
    out.retain(|c| c.value.chars().count() >= super::MIN_SECRET_CHARS);
    out
}

/// The secrets of `user[:password]` as written in a URL (percent-encoded):
/// as written, the password, and the `Basic` credential a client builds
/// from the decoded pair.
fn userinfo_secrets(userinfo: &str) -> Vec<Candidate> {
    let mut out = vec![Candidate::placed(userinfo)];
    let (user, password) = userinfo.split_once(':').unwrap_or((userinfo, ""));
    if !password.is_empty() {
        out.push(Candidate::placed(password));
        let decoded = percent_decode(password);
        if decoded != password {
            out.push(Candidate::placed(decoded));
        }
    }
    let pair = format!("{}:{}", percent_decode(user), percent_decode(password));
    out.push(Candidate::placed(
        base64::engine::general_purpose::STANDARD.encode(&pair),
    ));
    out.push(Candidate::placed(pair));
    out
}

/// `url` as a page may show it: without its userinfo and query
/// ([`scrub_urls`](super::scrub_urls)), and each path segment that looks
/// like a token (a webhook's secret, a `/bot<token>/`) replaced by
/// [`REDACTED`](super::REDACTED). For a URL written in a config, whose
/// literal parts were never registered as secrets.
///
/// ```
/// # use rein_core::redact::shown_url;
/// assert_eq!(
///     shown_url("https://u:p4ss@hooks.example.com/services/T0001/B0002/aB3dE5gH7jK9mN1pQ3sT5vW7?x=1"),
///     "https://[redacted]@hooks.example.com/services/T0001/B0002/[redacted]?[redacted]",
/// );
/// assert_eq!(shown_url("http://127.0.0.1:8080/tools/get_order"), "http://127.0.0.1:8080/tools/get_order");
/// ```
pub fn shown_url(url: &str) -> String {
    let scrubbed = super::scrub_urls(url);
    let Some(parts) = Parts::of(&scrubbed) else {
        return scrubbed.into_owned();
    };
    let Some(path) = scrubbed.get(parts.path.clone()) else {
        return scrubbed.into_owned();
    };
    let shown: Vec<&str> = path
        .split('/')
        .map(|segment| {
            if looks_like_token(segment) {
                super::REDACTED
            } else {
                segment
            }
        })
        .collect();
    format!(
        "{}{}{}",
        &scrubbed[..parts.path.start],
        shown.join("/"),
        &scrubbed[parts.path.end..]
    )
}

/// Whether a path segment looks like a token rather than a name: 20 or
/// more characters, letters and digits both, and mixed case or 32 or more
/// long (`gpt-4o-mini-2024-07-18` and `v1` do not; a webhook secret or a
/// 40-character hex token does).
fn looks_like_token(segment: &str) -> bool {
    let len = segment.chars().count();
    let has_digit = segment.chars().any(|c| c.is_ascii_digit());
    let has_lower = segment.chars().any(|c| c.is_ascii_lowercase());
    let has_upper = segment.chars().any(|c| c.is_ascii_uppercase());
    len >= 20 && has_digit && (has_lower || has_upper) && ((has_lower && has_upper) || len >= 32)
}

/// The parts of a URL, as byte ranges.
struct Parts {
    userinfo: Option<Range<usize>>,
    path: Range<usize>,
    /// The query and fragment, from their `?` or `#`.
    rest: Option<Range<usize>>,
}

impl Parts {
    fn of(url: &str) -> Option<Parts> {
        let scheme_end = url.find("://")?;
        let authority_start = scheme_end + 3;
        let after = &url[authority_start..];
        let authority_end = authority_start + after.find(['/', '?', '#']).unwrap_or(after.len());
        let userinfo = url[authority_start..authority_end]
            .rfind('@')
            .map(|at| authority_start..authority_start + at);
        let tail = &url[authority_end..];
        let path_end = authority_end + tail.find(['?', '#']).unwrap_or(tail.len());
        Some(Parts {
            userinfo,
            path: authority_end..path_end,
            rest: (path_end < url.len()).then_some(path_end..url.len()),
        })
    }
}

fn intersect(a: &Range<usize>, b: &Range<usize>) -> Option<Range<usize>> {
    let r = a.start.max(b.start)..a.end.min(b.end);
    (r.start < r.end).then_some(r)
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && let Some(hex) = text.get(i + 1..i + 3)
            && let Ok(b) = u8::from_str_radix(hex, 16)
        {
            out.push(b);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The values `url_secrets` finds when each `${…}` of `template` is
    /// replaced by its value.
    fn found(template: &str, vars: &[(&str, &str)]) -> Vec<String> {
        let mut url = String::new();
        let mut ranges = Vec::new();
        let mut rest = template;
        while let Some(at) = rest.find("${") {
            url.push_str(&rest[..at]);
            let end = rest[at..].find('}').unwrap() + at;
            let name = &rest[at + 2..end];
            let value = vars.iter().find(|(n, _)| *n == name).unwrap().1;
            ranges.push(url.len()..url.len() + value.len());
            url.push_str(value);
            rest = &rest[end + 1..];
        }
        url.push_str(rest);
        url_secrets(&url, &ranges)
            .into_iter()
            .map(|c| c.value)
            .collect()
    }

    #[test]
    fn hosts_ports_origins_and_base_urls_are_not_secrets() {
        let none: Vec<String> = Vec::new();
        assert_eq!(
            found(
                "http://${HOST}:${PORT}/x",
                &[("HOST", "localhost"), ("PORT", "8080")]
            ),
            none
        );
        assert_eq!(found("http://${HOST}/x", &[("HOST", "127.0.0.1")]), none);
        assert_eq!(
            found("${ORIGIN}/tools/x", &[("ORIGIN", "http://127.0.0.1:8080")]),
            none
        );
        assert_eq!(
            found("${BASE}/chat", &[("BASE", "https://api.openai.com/v1")]),
            none
        );
        assert_eq!(
            found(
                "${BASE}/x",
                &[(
                    "BASE",
                    "https://x.example/openai/deployments/gpt-4o-mini-2024-07-18"
                )]
            ),
            none
        );
    }

    #[test]
    fn path_and_query_values_and_token_segments_are_secrets() {
        assert_eq!(
            found(
                "http://h/bot${TOKEN}/send",
                &[("TOKEN", "123456:AAHdqTcvCH1vGWJx")]
            ),
            ["123456:AAHdqTcvCH1vGWJx"]
        );
        assert_eq!(
            found("http://h/x?key=${KEY}", &[("KEY", "query-secret-1")]),
            ["query-secret-1"]
        );
        assert_eq!(
            found(
                "${HOOK}",
                &[(
                    "HOOK",
                    "https://hooks.example/services/T0/B0/aB3dE5gH7jK9mN1pQ3sT5vW7"
                )]
            ),
            ["aB3dE5gH7jK9mN1pQ3sT5vW7"]
        );
        assert_eq!(
            found("${BASE}", &[("BASE", "https://h/x?sig=abcdefgh123&a=1")]),
            ["abcdefgh123"]
        );
        // Too short to be a credential: skipped, no warning.
        assert!(found("http://h/${V}/x", &[("V", "v1")]).is_empty());
    }

    #[test]
    fn userinfo_is_secret_with_its_basic_credential() {
        let values: Vec<String> = url_secrets("https://ops:s3cr%40t-pass@db:5432/x", &[])
            .into_iter()
            .map(|c| c.value)
            .collect();
        assert!(values.contains(&"ops:s3cr%40t-pass".to_owned()));
        assert!(values.contains(&"s3cr%40t-pass".to_owned()));
        assert!(values.contains(&"s3cr@t-pass".to_owned()));
        assert!(values.contains(&"ops:s3cr@t-pass".to_owned()));
        let basic = base64::engine::general_purpose::STANDARD.encode("ops:s3cr@t-pass");
        assert!(values.contains(&basic), "{values:?}");
    }

    #[test]
    fn only_credential_headers_hold_secrets() {
        assert!(header_secrets("Accept", "application/json").is_empty());
        assert!(header_secrets("X-Env", "production").is_empty());
        let values: Vec<String> = header_secrets("authorization", "Bearer tok-123456789")
            .into_iter()
            .map(|c| c.value)
            .collect();
        assert_eq!(values, ["Bearer tok-123456789", "tok-123456789"]);
        let basic = base64::engine::general_purpose::STANDARD.encode("ops:hunter22");
        let values: Vec<String> = header_secrets("Authorization", &format!("Basic {basic}"))
            .into_iter()
            .map(|c| c.value)
            .collect();
        assert_eq!(
            values,
            [
                format!("Basic {basic}"),
                basic,
                "ops:hunter22".into(),
                "hunter22".into()
            ]
        );
        assert_eq!(header_secrets("X-Api-Token", "abc").len(), 1);
    }

    #[test]
    fn credential_env_names_hold_secrets() {
        assert_eq!(env_secrets("GITHUB_TOKEN", "ghp_x").len(), 1);
        assert!(env_secrets("RUST_LOG", "debug").is_empty());
    }
}
