//! Which wire format a gateway caller reads: the shape of an answer on a
//! path both formats share (`/v1/models`) and of a 404 or 405 on a path no
//! route has.
//!
//! # Why
//!
//! An SDK pointed at `rein serve` only raises a readable error, or lists
//! models at all, when the body is in its own API's shape: OpenAI's SDKs
//! read `{"error": {…}}`, Anthropic's `{"type": "error", "error": {…}}`.
//! The path alone says which on `/v1/chat/completions`, `/v1/responses`
//! and `/v1/messages`; elsewhere under `/v1/` the request's headers do:
//! Anthropic's SDKs always send `anthropic-version` and send their key as
//! `x-api-key`, OpenAI's send neither. rein's own routes (the runs API) keep problem+json.

use axum::http::HeaderMap;

use crate::http::auth::API_KEY_HEADER;
use crate::http::problem::{ANTHROPIC_ROUTES, OPENAI_ROUTES};

/// The header every Anthropic SDK request carries.
pub const ANTHROPIC_VERSION: &str = "anthropic-version";

/// The first path segments under `/v1/` of rein's own API, whose answers
/// are problem+json whoever calls.
///
/// NOTE: `crate::router` routes these; a new rein route under `/v1/` whose
/// first segment is not here answers its unknown paths in a wire format's
/// shape.
const REIN_SEGMENTS: [&str; 6] = [
    "agents",
    "runs",
    "approvals",
    "webhooks",
    "breakers",
    "stats",
];

/// A wire format of the gateway.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// OpenAI's: problem+json with OpenAI's `error` member.
    OpenAi,
    /// Anthropic's: `{"type": "error", "error": {…}}`.
    Anthropic,
}

impl Dialect {
    /// The dialect of a request to `path` with `headers`; `None` for rein's
    /// own routes and paths outside `/v1/`.
    pub fn of(path: &str, headers: &HeaderMap) -> Option<Dialect> {
        if OPENAI_ROUTES.contains(&path) {
            return Some(Dialect::OpenAi);
        }
        if ANTHROPIC_ROUTES.contains(&path) {
            return Some(Dialect::Anthropic);
        }
        let rest = path.strip_prefix("/v1/")?;
        let first = rest.split('/').next().unwrap_or_default();
        if REIN_SEGMENTS.contains(&first) {
            return None;
        }
        Some(Dialect::of_caller(headers))
    }

    /// The dialect of a caller on a path both formats serve: Anthropic's
    /// when it sends `anthropic-version` or its key as `x-api-key`.
    pub fn of_caller(headers: &HeaderMap) -> Dialect {
        if headers.contains_key(ANTHROPIC_VERSION) || headers.contains_key(API_KEY_HEADER) {
            Dialect::Anthropic
        } else {
            Dialect::OpenAi
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn anthropic() -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(ANTHROPIC_VERSION, HeaderValue::from_static("2023-06-01"));
        headers
    }

    #[test]
    fn the_path_decides_on_a_format_s_own_route() {
        let none = HeaderMap::new();
        assert_eq!(
            Dialect::of("/v1/chat/completions", &anthropic()),
            Some(Dialect::OpenAi)
        );
        assert_eq!(
            Dialect::of("/v1/responses", &anthropic()),
            Some(Dialect::OpenAi)
        );
        assert_eq!(Dialect::of("/v1/messages", &none), Some(Dialect::Anthropic));
    }

    #[test]
    fn the_headers_decide_elsewhere_under_v1() {
        let none = HeaderMap::new();
        let mut keyed = HeaderMap::new();
        keyed.insert(API_KEY_HEADER, HeaderValue::from_static("k"));
        assert_eq!(Dialect::of("/v1/models", &none), Some(Dialect::OpenAi));
        assert_eq!(
            Dialect::of("/v1/models/x", &keyed),
            Some(Dialect::Anthropic)
        );
        assert_eq!(
            Dialect::of("/v1/messages/count_tokens", &anthropic()),
            Some(Dialect::Anthropic)
        );
        assert_eq!(Dialect::of("/v1/embeddings", &none), Some(Dialect::OpenAi));
        assert_eq!(Dialect::of("/v1/runsx", &none), Some(Dialect::OpenAi));
    }

    #[test]
    fn rein_s_own_routes_and_paths_outside_v1_have_none() {
        for path in [
            "/v1/runs",
            "/v1/runs/r-1/nope",
            "/v1/agents/a/runs",
            "/v1/stats",
            "/healthz",
            "/nope",
            "/v1",
        ] {
            assert_eq!(Dialect::of(path, &anthropic()), None, "{path}");
        }
    }
}
