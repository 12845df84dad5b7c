//! Sign-in sessions: an opaque random id in an `HttpOnly` cookie, mapped in
//! this process's memory to who signed in and the session's CSRF token.
//!
//! # Why an opaque id, in memory
//!
//! The cookie never holds the API key, nor anything derived from it: a
//! stolen cookie jar or a proxy log leaks a session that ends with the
//! process, not a key that opens the API. Sessions are per process, like
//! the breakers: behind a load balancer, pin the dashboard to one server,
//! or sign in again after a restart.
//!
//! The map is keyed by the SHA-256 of the id, so a lookup's timing says
//! nothing about how close a guessed id was.
//!
//! | setting | value | why |
//! | --- | --- | --- |
//! | [`IDLE`] | 12 h | a shift's work without signing in again |
//! | [`SIGN_IN_IDLE`] | 1 h | a sign-in form left open |
//! | [`MAX_SESSIONS`] | 10,000 | memory bound: the oldest sign-in forms go first |

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use axum::http::{HeaderMap, header};
use sha2::{Digest, Sha256};

use crate::http::auth::Caller;

/// The session cookie's name.
pub(crate) const COOKIE: &str = "rein_session";

/// A signed-in session unused this long ends.
pub(crate) const IDLE: Duration = Duration::from_secs(12 * 3600);

/// A sign-in form's session (nobody signed in yet) unused this long ends.
pub(crate) const SIGN_IN_IDLE: Duration = Duration::from_secs(3600);

/// The most sessions one process keeps.
pub(crate) const MAX_SESSIONS: usize = 10_000;

/// Why a session could not be opened.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub(crate) enum SessionError {
    /// The operating system's random source failed.
    #[error("the operating system's random source failed: {0}")]
    Random(String),
}

/// One session.
#[derive(Debug, Clone)]
pub(crate) struct Session {
    /// Who signed in; `None` for the session of a sign-in form.
    pub(crate) who: Option<Caller>,
    /// The token every form of this session carries.
    pub(crate) csrf: String,
}

#[derive(Debug)]
struct Entry {
    session: Session,
    last_seen: Instant,
}

impl Entry {
    fn expired(&self, now: Instant) -> bool {
        let idle = if self.session.who.is_some() {
            IDLE
        } else {
            SIGN_IN_IDLE
        };
        now.saturating_duration_since(self.last_seen) > idle
    }
}

/// The sessions of this process.
#[derive(Debug, Default)]
pub(crate) struct Sessions {
    entries: Mutex<HashMap<[u8; 32], Entry>>,
}

/// 32 random bytes from the operating system, as 64 hex digits.
pub(crate) fn random_token() -> Result<String, SessionError> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|e| SessionError::Random(e.to_string()))?;
    Ok(hex(&bytes))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn digest(id: &str) -> [u8; 32] {
    Sha256::digest(id.as_bytes()).into()
}

impl Sessions {
    /// Opens a session for `who` at `now`: its id (for the cookie) and the
    /// session.
    ///
    /// # Errors
    ///
    /// When the random source fails.
    pub(crate) fn open(
        &self,
        who: Option<Caller>,
        now: Instant,
    ) -> Result<(String, Session), SessionError> {
        let id = random_token()?;
        let session = Session {
            who,
            csrf: random_token()?,
        };
        let mut entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        if entries.len() >= MAX_SESSIONS {
            entries.retain(|_, e| !e.expired(now));
        }
        if entries.len() >= MAX_SESSIONS {
            // Sign-in forms first, then the longest unused.
            let oldest = entries
                .iter()
                .min_by_key(|(_, e)| (e.session.who.is_some(), e.last_seen))
                .map(|(k, _)| *k);
            if let Some(oldest) = oldest {
                entries.remove(&oldest);
            }
        }
        entries.insert(
            digest(&id),
            Entry {
                session: session.clone(),
                last_seen: now,
            },
        );
        Ok((id, session))
    }

    /// The live session `id` names, marked used at `now`; an expired one is
    /// removed.
    pub(crate) fn get(&self, id: &str, now: Instant) -> Option<Session> {
        let key = digest(id);
        let mut entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        let entry = entries.get_mut(&key)?;
        if entry.expired(now) {
            entries.remove(&key);
            return None;
        }
        entry.last_seen = now;
        Some(entry.session.clone())
    }

    /// Ends session `id`.
    pub(crate) fn close(&self, id: &str) {
        self.entries
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&digest(id));
    }
}

/// The session id a request's `Cookie` headers carry.
pub(crate) fn cookie(headers: &HeaderMap) -> Option<&str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE)
        .map(|(_, value)| value)
        .filter(|v| !v.is_empty())
}

/// Whether the browser reached this server over TLS: rein serves plain
/// HTTP, so only a TLS-terminating proxy's `X-Forwarded-Proto: https` (or
/// `Forwarded: proto=https`) says so. A forged header can only make the
/// cookie stricter.
pub(crate) fn over_tls(headers: &HeaderMap) -> bool {
    let proto = headers
        .get("x-forwarded-proto")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("https"));
    let forwarded = headers
        .get(header::FORWARDED)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.to_ascii_lowercase().contains("proto=https"));
    proto || forwarded
}

/// The `Set-Cookie` value of session `id`: `HttpOnly` (no script reads
/// it), `SameSite=Strict` (no other site's page sends it), `Path=/ui`
/// (the API never sees it), `Secure` over TLS; no `Max-Age`, so it ends
/// with the browser.
pub(crate) fn set_cookie(id: &str, tls: bool) -> String {
    let secure = if tls { "; Secure" } else { "" };
    format!("{COOKIE}={id}; Path=/ui; HttpOnly; SameSite=Strict{secure}")
}

/// The `Set-Cookie` value that removes the session cookie.
pub(crate) fn clear_cookie(tls: bool) -> String {
    let secure = if tls { "; Secure" } else { "" };
    format!("{COOKIE}=; Path=/ui; HttpOnly; SameSite=Strict; Max-Age=0{secure}")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn caller() -> Caller {
        Caller {
            tenant: rein_core::TenantId::new("acme").unwrap(),
            key: Some("ops".to_owned()),
            budget: None,
        }
    }

    #[test]
    fn a_session_is_found_by_its_id_until_idle_too_long() {
        let sessions = Sessions::default();
        let start = Instant::now();
        let (id, opened) = sessions.open(Some(caller()), start).unwrap();
        assert_eq!(id.len(), 64);
        assert_ne!(id, opened.csrf);
        let found = sessions.get(&id, start + IDLE).unwrap();
        assert_eq!(found.csrf, opened.csrf);
        assert!(sessions.get("nope", start).is_none());
        // Used at `start + IDLE`: idle from there.
        assert!(sessions.get(&id, start + IDLE * 2).is_some());
        assert!(
            sessions
                .get(&id, start + IDLE * 3 + Duration::from_secs(1))
                .is_none()
        );
    }

    #[test]
    fn a_sign_in_form_expires_sooner_and_close_ends_a_session() {
        let sessions = Sessions::default();
        let start = Instant::now();
        let (form, _) = sessions.open(None, start).unwrap();
        assert!(
            sessions
                .get(&form, start + SIGN_IN_IDLE + Duration::from_secs(1))
                .is_none()
        );
        let (id, _) = sessions.open(Some(caller()), start).unwrap();
        sessions.close(&id);
        assert!(sessions.get(&id, start).is_none());
    }

    #[test]
    fn the_cookie_is_read_among_others_and_never_empty() {
        let mut headers = HeaderMap::new();
        headers.insert(
            header::COOKIE,
            "a=1; rein_session=abc; b=2".parse().unwrap(),
        );
        assert_eq!(cookie(&headers), Some("abc"));
        headers.insert(header::COOKIE, "rein_session=".parse().unwrap());
        assert_eq!(cookie(&headers), None);
        assert_eq!(
            set_cookie("abc", true),
            "rein_session=abc; Path=/ui; HttpOnly; SameSite=Strict; Secure"
        );
        assert!(!set_cookie("abc", false).contains("Secure"));
    }
}
