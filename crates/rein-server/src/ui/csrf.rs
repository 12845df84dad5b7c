//! What every form POST of the dashboard must show before it changes
//! anything: the session's CSRF token, and that the browser sent it from
//! this server's own pages.
//!
//! # Why both
//!
//! `SameSite=Strict` already keeps other sites' pages from sending the
//! session cookie, and [`crate::http::exposure`] refuses foreign origins. The
//! token does not rely on the browser honouring either (an old browser, a
//! same-site subdomain); the origin check also refuses an origin that
//! `[server.cors]` lists for the API, which may read the API but has no
//! business posting the dashboard's forms.

use axum::http::{HeaderMap, header};
use rein_core::registry::{Authority, Origin};

/// Why a POST was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Forgery {
    /// No token, or not the session's.
    Token,
    /// `Sec-Fetch-Site` other than `same-origin`, or an `Origin` that is
    /// not this server's.
    CrossOrigin,
}

impl Forgery {
    /// What the refusal page says.
    pub(crate) fn detail(self) -> &'static str {
        match self {
            Forgery::Token => {
                "the form's security token is missing or out of date: reload the page and try again"
            }
            Forgery::CrossOrigin => {
                "the form was not sent from this dashboard's own pages: nothing was changed"
            }
        }
    }
}

/// Whether `sent` is `expected`, compared without an early exit.
pub(crate) fn token_matches(expected: &str, sent: Option<&str>) -> bool {
    let Some(sent) = sent else { return false };
    if expected.is_empty() || sent.len() != expected.len() {
        return false;
    }
    expected
        .bytes()
        .zip(sent.bytes())
        .fold(0u8, |acc, (a, b)| acc | (a ^ b))
        == 0
}

/// Whether a browser sent the request from this server's pages: a present
/// `Sec-Fetch-Site` must be `same-origin`, and a present `Origin` must be
/// the `Host`'s. A client that is no browser sends neither; the token is
/// its check.
pub(crate) fn same_origin(headers: &HeaderMap) -> Result<(), Forgery> {
    if let Some(site) = headers.get("sec-fetch-site")
        && site.as_bytes() != b"same-origin"
    {
        return Err(Forgery::CrossOrigin);
    }
    let Some(origin) = headers.get(header::ORIGIN) else {
        return Ok(());
    };
    let origin = origin
        .to_str()
        .ok()
        .and_then(Origin::parse)
        .ok_or(Forgery::CrossOrigin)?;
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .and_then(Authority::parse)
        .ok_or(Forgery::CrossOrigin)?;
    if origin.is_same_as(&host) {
        Ok(())
    } else {
        Err(Forgery::CrossOrigin)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, v.parse().unwrap());
        }
        h
    }

    #[test]
    fn only_the_sessions_token_passes() {
        assert!(token_matches("abcd", Some("abcd")));
        assert!(!token_matches("abcd", Some("abce")));
        assert!(!token_matches("abcd", Some("abc")));
        assert!(!token_matches("abcd", None));
        assert!(!token_matches("", Some("")));
    }

    #[test]
    fn a_post_from_another_origin_or_site_is_refused() {
        let host = ("host", "127.0.0.1:8787");
        assert_eq!(same_origin(&headers(&[host])), Ok(()));
        assert_eq!(
            same_origin(&headers(&[
                host,
                ("origin", "http://127.0.0.1:8787"),
                ("sec-fetch-site", "same-origin")
            ])),
            Ok(())
        );
        for bad in [
            vec![host, ("origin", "http://evil.example")],
            vec![host, ("origin", "null")],
            vec![host, ("sec-fetch-site", "cross-site")],
            vec![host, ("sec-fetch-site", "same-site")],
            vec![("origin", "http://127.0.0.1:8787")],
        ] {
            assert_eq!(
                same_origin(&headers(&bad)),
                Err(Forgery::CrossOrigin),
                "{bad:?}"
            );
        }
    }
}
