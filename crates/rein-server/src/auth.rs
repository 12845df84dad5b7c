//! Bearer API keys mapped to tenants.
//!
//! # Why hashed, constant-time
//!
//! Config holds only SHA-256 digests, so a leaked config file leaks no key;
//! the presented key is hashed and compared over all 32 bytes without an
//! early exit, so response timing says nothing about how close a guess was.

use std::sync::Arc;

use axum::extract::FromRequestParts;
use axum::http::header::AUTHORIZATION;
use axum::http::request::Parts;
use rein_core::TenantId;

use crate::problem::Problem;
use crate::state::AppState;

/// The tenant a request acts for.
#[derive(Debug, Clone)]
pub struct Tenant(pub TenantId);

impl FromRequestParts<Arc<AppState>> for Tenant {
    type Rejection = Problem;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &Arc<AppState>,
    ) -> Result<Tenant, Problem> {
        let keys = &state.settings.api_keys;
        if keys.is_empty() {
            // The open loopback mode (refused at start on any other
            // address): every request acts for the default tenant.
            return TenantId::new("default")
                .map(Tenant)
                .map_err(|e| Problem::internal(e.to_string()));
        }
        let presented = parts
            .headers
            .get(AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| {
                // The scheme is case-insensitive (RFC 9110).
                let (scheme, key) = v.split_once(' ')?;
                scheme.eq_ignore_ascii_case("bearer").then_some(key)
            })
            .map(str::trim)
            .filter(|k| !k.is_empty())
            .ok_or_else(|| {
                Problem::unauthorized("send an API key as `Authorization: Bearer <key>`")
            })?;
        match state.settings.tenant_for(presented) {
            Some(key) => Ok(Tenant(key.tenant.clone())),
            None => Err(Problem::unauthorized("the API key is not valid")),
        }
    }
}
