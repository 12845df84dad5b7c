//! URL queries and userinfo: secret by shape ([`scrub_urls`]).

use std::borrow::Cow;

use super::REDACTED;

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

#[cfg(test)]
mod tests {
    use super::*;

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
}
