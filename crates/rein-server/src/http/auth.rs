//! API keys mapped to tenants, presented as `Authorization: Bearer <key>`
//! or, as Anthropic's SDKs send them, `x-api-key: <key>`.
//!
//! # Why hashed, constant-time
//!
//! Config holds only SHA-256 digests, so a leaked config file leaks no key;
//! the presented key is hashed and compared over all 32 bytes without an
//! early exit, so response timing says nothing about how close a guess was.

use std::sync::Arc;

use axum::extract::FromRequestParts;
use axum::http::StatusCode;
use axum::http::header::AUTHORIZATION;
use axum::http::request::Parts;
use rein_core::TenantId;
use rein_core::registry::{MetricsAccess, ServerSpec};

use crate::http::access::TenantSlot;
use crate::http::problem::{Challenge, Problem};
use crate::http::state::AppState;

/// The header Anthropic's SDKs send the key in; `Authorization` wins when
/// both are sent.
pub const API_KEY_HEADER: &str = "x-api-key";

/// The tenant a request acts for.
#[derive(Debug, Clone)]
pub struct Tenant(pub TenantId);

/// Why a request was not authenticated; what the log says, never the key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum AuthFailure {
    /// Neither an `Authorization` nor an `x-api-key` header.
    Missing,
    /// An `Authorization` header of another scheme than `Bearer`, or empty.
    NotBearer,
    /// An empty `x-api-key`.
    EmptyApiKey,
    /// A bearer key that no `[[server.api_keys]]` entry has the digest of.
    UnknownKey,
}

impl AuthFailure {
    /// The reason, for the log.
    pub fn as_str(self) -> &'static str {
        match self {
            AuthFailure::Missing => "no Authorization or x-api-key header",
            AuthFailure::EmptyApiKey => "x-api-key is empty",
            AuthFailure::NotBearer => "Authorization is not a bearer key",
            AuthFailure::UnknownKey => "the bearer key matches no configured key",
        }
    }

    /// The 401 answered.
    pub fn problem(self) -> Problem {
        match self {
            AuthFailure::Missing | AuthFailure::NotBearer | AuthFailure::EmptyApiKey => {
                Problem::unauthorized(
                    "send an API key as `Authorization: Bearer <key>` (or `x-api-key: <key>`)",
                    Challenge::Missing,
                )
            }
            AuthFailure::UnknownKey => {
                Problem::unauthorized("the API key is not valid", Challenge::InvalidToken)
            }
        }
    }
}

/// The tenant of the key in `headers` (`Authorization: Bearer`, else
/// `x-api-key`), among `keys`.
///
/// # Errors
///
/// Why there is none.
pub fn tenant_of(
    settings: &rein_core::registry::ServerSpec,
    headers: &axum::http::HeaderMap,
) -> Result<TenantId, AuthFailure> {
    key_of(settings, headers).map(|key| key.tenant.clone())
}

/// The configured key `headers` present.
fn key_of<'s>(
    settings: &'s rein_core::registry::ServerSpec,
    headers: &axum::http::HeaderMap,
) -> Result<&'s rein_core::registry::ApiKeySpec, AuthFailure> {
    let presented = presented_key(headers)?;
    settings
        .tenant_for(presented)
        .ok_or(AuthFailure::UnknownKey)
}

/// The key a request presents: its bearer key, or its `x-api-key` when it
/// sends no `Authorization`.
fn presented_key(headers: &axum::http::HeaderMap) -> Result<&str, AuthFailure> {
    let Some(value) = headers.get(AUTHORIZATION) else {
        let value = headers.get(API_KEY_HEADER).ok_or(AuthFailure::Missing)?;
        return value
            .to_str()
            .ok()
            .map(str::trim)
            .filter(|k| !k.is_empty())
            .ok_or(AuthFailure::EmptyApiKey);
    };
    value
        .to_str()
        .ok()
        .and_then(|v| {
            // The scheme is case-insensitive (RFC 9110).
            let (scheme, key) = v.split_once(' ')?;
            scheme.eq_ignore_ascii_case("bearer").then_some(key)
        })
        .map(str::trim)
        .filter(|k| !k.is_empty())
        .ok_or(AuthFailure::NotBearer)
}

/// Authenticates the request of `parts` against the configured keys: the
/// tenant (recorded for the access line), or the 401, logged with its
/// reason and peer (never the presented key).
///
/// # Errors
///
/// The 401 problem, with its `WWW-Authenticate` challenge.
pub fn authenticate(parts: &Parts, state: &AppState) -> Result<TenantId, Problem> {
    match tenant_of(&state.settings, &parts.headers) {
        Ok(tenant) => {
            if let Some(slot) = parts.extensions.get::<TenantSlot>() {
                slot.set(&tenant);
            }
            Ok(tenant)
        }
        Err(failure) => {
            tracing::warn!(
                reason = failure.as_str(),
                peer = %crate::http::access::peer(&parts.extensions),
                method = %parts.method,
                route = %crate::http::access::route(&parts.extensions),
                request_id = %crate::http::access::request_id(&parts.extensions),
                "authentication failed"
            );
            Err(failure.problem())
        }
    }
}

/// Whether the request of `parts` may read `/metrics`, per
/// `server.metrics` and `server.metrics_tenants`: with keys configured and
/// `/metrics` protected, only the key of a listed tenant may (the counters
/// are the whole process's, labelled by tool, provider and model).
///
/// # Errors
///
/// 401 without a valid key; 403 for a key whose tenant is not listed,
/// naming the setting that admits it.
pub fn authorize_metrics(parts: &Parts, state: &AppState) -> Result<(), Problem> {
    let settings = &state.settings;
    if settings.api_keys.is_empty() || settings.metrics == MetricsAccess::Open {
        return Ok(());
    }
    let tenant = authenticate(parts, state)?;
    operator(settings, &tenant, "/metrics")
}

/// Whether `tenant` is an operator, who may read what is the whole
/// process's rather than a tenant's (the counters of `/metrics`, the
/// configuration): a tenant `server.metrics_tenants` lists, or anyone
/// without keys (loopback only). `server.metrics = "open"` opens
/// `/metrics` ([`authorize_metrics`]), never the configuration: it names
/// every tenant and key, which no tenant's key may read. `what` names what
/// was asked for in the refusal.
///
/// # Errors
///
/// 403 for a tenant not listed, naming the setting that admits it.
pub fn operator(settings: &ServerSpec, tenant: &TenantId, what: &str) -> Result<(), Problem> {
    if settings.api_keys.is_empty() || settings.metrics_tenants.contains(tenant) {
        return Ok(());
    }
    let detail = if settings.metrics_tenants.is_empty() {
        format!(
            "no tenant may read {what} (it is the whole process's): list the operator's tenant in server.metrics_tenants, e.g. [\"{tenant}\"]{}",
            if what == "/metrics" {
                ", or set server.metrics = \"open\""
            } else {
                " (with server.metrics = \"protected\", the default)"
            }
        )
    } else {
        let listed: Vec<&str> = settings
            .metrics_tenants
            .iter()
            .map(TenantId::as_str)
            .collect();
        format!(
            "tenant `{tenant}` may not read {what}: server.metrics_tenants lists {}",
            listed.join(", ")
        )
    };
    Err(Problem::new(
        StatusCode::FORBIDDEN,
        "metrics-forbidden",
        "Forbidden",
        detail,
    ))
}

/// Who a request acts as: its tenant, and the label of its API key
/// (`None` in the keyless loopback mode), which is what a decision it
/// records names as its author.
#[derive(Debug, Clone)]
pub struct Caller {
    /// The tenant.
    pub tenant: TenantId,
    /// The key's `name`, or `sha256:` and the first digits of its digest.
    pub key: Option<String>,
    /// The key's budget (`[server.api_keys.budget]`), with its key.
    pub budget: Option<rein_core::registry::KeyBudget>,
}

impl Caller {
    /// Who a human decision (an approval, a handoff decision) is recorded
    /// as: the key's name, whatever the body says (a body cannot name
    /// someone else); without keys (the loopback mode) the body's `by`,
    /// else `operator`.
    pub fn decider(&self, by: Option<String>) -> String {
        match (&self.key, by) {
            (Some(key), _) => key.clone(),
            (None, Some(by)) => by,
            (None, None) => "operator".to_owned(),
        }
    }
}

impl FromRequestParts<Arc<AppState>> for Caller {
    type Rejection = Problem;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &Arc<AppState>,
    ) -> Result<Caller, Problem> {
        let Tenant(tenant) = Tenant::from_request_parts(parts, state).await?;
        let spec = if state.settings.api_keys.is_empty() {
            None
        } else {
            key_of(&state.settings, &parts.headers).ok()
        };
        Ok(Caller {
            tenant,
            key: spec.map(rein_core::registry::ApiKeySpec::label),
            budget: spec.map(|spec| spec.budget),
        })
    }
}

impl FromRequestParts<Arc<AppState>> for Tenant {
    type Rejection = Problem;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &Arc<AppState>,
    ) -> Result<Tenant, Problem> {
        if state.settings.api_keys.is_empty() {
            // The open loopback mode (refused at start on any other
            // address): every request acts for the default tenant.
            let tenant = TenantId::new(rein_core::registry::KEYLESS_TENANT)
                .map_err(|e| Problem::internal(e.to_string()))?;
            if let Some(slot) = parts.extensions.get::<TenantSlot>() {
                slot.set(&tenant);
            }
            return Ok(Tenant(tenant));
        }
        authenticate(parts, state).map(Tenant)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> rein_core::registry::ServerSpec {
        // sha256("test")
        let text = "[[server.api_keys]]\ntenant = \"acme\"\nsha256 = \"9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08\"\n";
        let file: rein_core::registry::ConfigFile = toml::from_str(text).unwrap();
        rein_core::registry::check(
            &[rein_core::registry::ConfigSource::new("rein.toml", file)],
            &|_| Vec::new(),
        )
        .unwrap()
        .server()
        .clone()
    }

    fn with(authorization: Option<&str>) -> axum::http::HeaderMap {
        let mut headers = axum::http::HeaderMap::new();
        if let Some(value) = authorization {
            headers.insert(AUTHORIZATION, value.parse().unwrap());
        }
        headers
    }

    fn with_api_key(key: &str) -> axum::http::HeaderMap {
        let mut headers = axum::http::HeaderMap::new();
        headers.insert(API_KEY_HEADER, key.parse().unwrap());
        headers
    }

    #[test]
    fn an_x_api_key_is_a_key_and_authorization_wins_over_it() {
        let settings = settings();
        assert_eq!(
            tenant_of(&settings, &with_api_key("test"))
                .unwrap()
                .as_str(),
            "acme"
        );
        assert_eq!(
            tenant_of(&settings, &with_api_key("nope")).unwrap_err(),
            AuthFailure::UnknownKey
        );
        assert_eq!(
            tenant_of(&settings, &with_api_key(" ")).unwrap_err(),
            AuthFailure::EmptyApiKey
        );
        let mut both = with(Some("Bearer nope"));
        both.insert(API_KEY_HEADER, "test".parse().unwrap());
        assert_eq!(
            tenant_of(&settings, &both).unwrap_err(),
            AuthFailure::UnknownKey
        );
    }

    #[test]
    fn keys_are_told_apart_and_each_failure_has_its_challenge() {
        let settings = settings();
        assert_eq!(
            tenant_of(&settings, &with(Some("bearer test")))
                .unwrap()
                .as_str(),
            "acme"
        );
        for (authorization, failure, challenge) in [
            (None, AuthFailure::Missing, Challenge::Missing),
            (
                Some("Basic dGVzdA=="),
                AuthFailure::NotBearer,
                Challenge::Missing,
            ),
            (Some("Bearer  "), AuthFailure::NotBearer, Challenge::Missing),
            (
                Some("Bearer nope"),
                AuthFailure::UnknownKey,
                Challenge::InvalidToken,
            ),
        ] {
            assert_eq!(
                tenant_of(&settings, &with(authorization)).unwrap_err(),
                failure,
                "{authorization:?}"
            );
            assert_eq!(failure.problem().challenge, Some(challenge));
            assert_eq!(failure.problem().status, 401);
        }
    }
}
