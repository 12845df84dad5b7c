//! `GET /v1/models` and `GET /v1/models/{id}`: the gateway's model
//! bindings, in the shape of the caller's API.
//!
//! # Why
//!
//! Both official SDKs' `models.list()` (and the agent frameworks that call
//! it to check a model exists) must work by base URL. A model here is a
//! `[models.*]` binding: its id is the `model` a client sends, and it is
//! owned by the provider of its primary link. The shape follows the
//! caller ([`Dialect::of_caller`]): OpenAI's `{"object": "list", "data":
//! […]}`, or Anthropic's page (`has_more`, `first_id`, `last_id`) with its
//! `limit`, `after_id` and `before_id`.
//!
//! Bindings are made from the config when the server starts, so their
//! `created` (`created_at`) is the server's start ([`AppState::started_at`]).
//! They are listed by id; an unknown id is the same 404 as a chat naming
//! it, in the caller's error shape.

use std::sync::Arc;

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use rein_core::Timestamp;
use rein_engine::run::ModelBinding;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::dialect::Dialect;
use crate::http::auth::Tenant;
use crate::http::problem::Problem;
use crate::http::query;
use crate::http::state::AppState;

/// The route of the listing.
pub const PATH: &str = "/v1/models";

/// The route of one model.
pub const ONE_PATH: &str = "/v1/models/{id}";

/// Models per Anthropic page when the caller sets no `limit` (Anthropic's
/// default).
pub const DEFAULT_PAGE: usize = 20;

/// The largest Anthropic page (Anthropic's).
pub const MAX_PAGE: usize = 1000;

/// The query of `GET /v1/models`, for its documentation: Anthropic's
/// pagination (an OpenAI caller gets every binding unless it sets
/// `limit`). The handler reads the pairs itself, so that an unknown or
/// repeated parameter is a 400 naming it.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ModelQuery {
    /// At most this many (Anthropic's default 20).
    #[param(minimum = 1, maximum = 1000)]
    pub limit: Option<usize>,
    /// Only the models listed after this id.
    pub after_id: Option<String>,
    /// Only the models listed before this id.
    pub before_id: Option<String>,
}

/// A binding in OpenAI's shape.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct OpenAiModel {
    /// The binding's name: the `model` a client sends.
    pub id: String,
    /// Always `model`.
    pub object: ModelTag,
    /// When the binding was made (the server's start), in Unix seconds.
    pub created: u64,
    /// The provider of its primary link.
    pub owned_by: String,
}

/// The tag of [`OpenAiModel`].
#[derive(Debug, Clone, Copy, Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum ModelTag {
    /// A model.
    Model,
}

/// The tag of [`OpenAiModelList`].
#[derive(Debug, Clone, Copy, Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum ListTag {
    /// A list.
    List,
}

/// The bindings in OpenAI's shape.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct OpenAiModelList {
    /// Always `list`.
    pub object: ListTag,
    /// The bindings, by id.
    pub data: Vec<OpenAiModel>,
}

/// A binding in Anthropic's shape.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct AnthropicModel {
    /// Always `model`.
    #[serde(rename = "type")]
    pub kind: ModelTag,
    /// The binding's name: the `model` a client sends.
    pub id: String,
    /// The binding and what its primary link calls (`chat (openai/gpt-4o)`).
    pub display_name: String,
    /// When the binding was made (the server's start), RFC 3339 in UTC.
    pub created_at: String,
}

/// A page of bindings in Anthropic's shape.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct AnthropicModelList {
    /// The page, by id.
    pub data: Vec<AnthropicModel>,
    /// Whether more are listed past the page (after it, or before it for
    /// `before_id`).
    pub has_more: bool,
    /// The page's first id.
    pub first_id: Option<String>,
    /// The page's last id.
    pub last_id: Option<String>,
}

/// The listing, in the caller's shape.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(untagged)]
pub enum ModelList {
    /// To an OpenAI caller.
    OpenAi(OpenAiModelList),
    /// To an Anthropic caller.
    Anthropic(AnthropicModelList),
}

/// One binding, in the caller's shape.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(untagged)]
pub enum Model {
    /// To an OpenAI caller.
    OpenAi(OpenAiModel),
    /// To an Anthropic caller.
    Anthropic(AnthropicModel),
}

/// The gateway's model bindings.
#[utoipa::path(
    get, path = "/v1/models", tag = "gateway",
    params(ModelQuery),
    responses(
        (status = 200, description = "The bindings by id: OpenAI's list, or Anthropic's page to a caller that sends `anthropic-version` or `x-api-key`", body = ModelList),
        (status = 400, description = "a parameter unknown, repeated or out of range", body = Problem),
        (status = 401, description = "missing or invalid API key", body = Problem),
    ),
    security(("bearer" = []), ("api_key" = []))
)]
pub async fn list_models(
    State(state): State<Arc<AppState>>,
    Tenant(_tenant): Tenant,
    headers: HeaderMap,
    query: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> Result<Json<ModelList>, Problem> {
    let Query(pairs) = query.map_err(|e| Problem::bad_request(format!("invalid query: {e}")))?;
    let page = parse(&pairs)?;
    let created = state.started_at;
    // A BTreeMap's keys: sorted.
    let names: Vec<&str> = state.models.keys().map(String::as_str).collect();
    let bindings = |names: Vec<&str>| -> Vec<&ModelBinding> {
        names
            .into_iter()
            .filter_map(|name| state.models.get(name))
            .collect()
    };
    Ok(Json(match Dialect::of_caller(&headers) {
        Dialect::OpenAi => {
            let (page, _) = page.of(&names, None);
            ModelList::OpenAi(OpenAiModelList {
                object: ListTag::List,
                data: bindings(page)
                    .into_iter()
                    .map(|b| openai(b, created))
                    .collect(),
            })
        }
        Dialect::Anthropic => {
            let (page, has_more) = page.of(&names, Some(DEFAULT_PAGE));
            let data: Vec<AnthropicModel> = bindings(page)
                .into_iter()
                .map(|b| anthropic(b, created))
                .collect();
            ModelList::Anthropic(AnthropicModelList {
                has_more,
                first_id: data.first().map(|m| m.id.clone()),
                last_id: data.last().map(|m| m.id.clone()),
                data,
            })
        }
    }))
}

/// One of the gateway's model bindings.
#[utoipa::path(
    get, path = "/v1/models/{id}", tag = "gateway",
    params(("id" = String, Path, description = "The binding's name")),
    responses(
        (status = 200, description = "The binding: in OpenAI's shape, or Anthropic's to a caller that sends `anthropic-version` or `x-api-key`", body = Model),
        (status = 401, description = "missing or invalid API key", body = Problem),
        (status = 404, description = "no such binding (the known ones are listed)", body = Problem),
    ),
    security(("bearer" = []), ("api_key" = []))
)]
pub async fn get_model(
    State(state): State<Arc<AppState>>,
    Tenant(_tenant): Tenant,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<Json<Model>, Problem> {
    let Some(binding) = state.models.get(&id) else {
        return Err(super::unknown_binding(&state, &id));
    };
    let created = state.started_at;
    Ok(Json(match Dialect::of_caller(&headers) {
        Dialect::OpenAi => Model::OpenAi(openai(binding, created)),
        Dialect::Anthropic => Model::Anthropic(anthropic(binding, created)),
    }))
}

/// A page asked for: Anthropic's `limit`, `after_id`, `before_id`.
#[derive(Debug, Default, PartialEq, Eq)]
struct Page {
    limit: Option<usize>,
    after_id: Option<String>,
    before_id: Option<String>,
}

impl Page {
    /// The page of `names` (sorted), at most `limit` (else `default`, else
    /// all), and whether more are listed past it: after it, or before it
    /// when only `before_id` is set (the page then ends just before that
    /// id).
    fn of<'a>(&self, names: &[&'a str], default: Option<usize>) -> (Vec<&'a str>, bool) {
        let within: Vec<&str> = names
            .iter()
            .copied()
            .filter(|name| self.after_id.as_deref().is_none_or(|after| *name > after))
            .filter(|name| {
                self.before_id
                    .as_deref()
                    .is_none_or(|before| *name < before)
            })
            .collect();
        let Some(limit) = self.limit.or(default) else {
            return (within, false);
        };
        let more = within.len() > limit;
        let page = if self.before_id.is_some() && self.after_id.is_none() {
            within[within.len().saturating_sub(limit)..].to_vec()
        } else {
            within.into_iter().take(limit).collect()
        };
        (page, more)
    }
}

fn parse(pairs: &[(String, String)]) -> Result<Page, Problem> {
    query::once(pairs)?;
    let mut page = Page::default();
    for (name, value) in pairs {
        match name.as_str() {
            "limit" => page.limit = Some(query::limit(value, MAX_PAGE)?),
            "after_id" => page.after_id = Some(value.clone()),
            "before_id" => page.before_id = Some(value.clone()),
            other => return Err(query::unknown(other, "limit, after_id or before_id")),
        }
    }
    Ok(page)
}

fn openai(binding: &ModelBinding, created: Timestamp) -> OpenAiModel {
    OpenAiModel {
        id: binding.name.clone(),
        object: ModelTag::Model,
        created: created.as_millis() / 1000,
        owned_by: binding.primary.provider.name().to_owned(),
    }
}

fn anthropic(binding: &ModelBinding, created: Timestamp) -> AnthropicModel {
    AnthropicModel {
        kind: ModelTag::Model,
        id: binding.name.clone(),
        display_name: format!(
            "{} ({}/{})",
            binding.name,
            binding.primary.provider.name(),
            binding.primary.model
        ),
        created_at: rfc3339(created),
    }
}

/// `at` as RFC 3339 in UTC, to the second (`2026-12-06T02:11:09Z`).
fn rfc3339(at: Timestamp) -> String {
    let secs = at.as_millis() / 1000;
    let (days, rest) = (secs / 86_400, secs % 86_400);
    let (year, month, day) = civil(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60
    )
}

/// The proleptic Gregorian date `days` after 1970-01-01 (Howard Hinnant's
/// `civil_from_days`, for days on or after the epoch).
fn civil(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    (year, month, day)
}

/// The OpenAPI document's errors of the models routes are problems to an
/// OpenAI caller and [`AnthropicError`](super::anthropic::AnthropicError)s
/// in `application/json` to an Anthropic one: both are documented, the
/// refusals every operation may answer included (added by the document's
/// other modifiers, which run first).
pub struct TwoErrorShapes;

impl utoipa::Modify for TwoErrorShapes {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use super::anthropic::{Documented, document_error_shape};
        for path in [PATH, ONE_PATH] {
            if let Some(get) = openapi
                .paths
                .paths
                .get_mut(path)
                .and_then(|item| item.get.as_mut())
            {
                document_error_shape(get, Documented::Beside);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_dates_are_the_calendar_s() {
        assert_eq!(rfc3339(Timestamp::UNIX_EPOCH), "1970-01-01T00:00:00Z");
        // 2000-02-29 (a leap day of a century year) and the day after.
        assert_eq!(
            rfc3339(Timestamp::from_millis(951_782_400_000)),
            "2000-02-29T00:00:00Z"
        );
        assert_eq!(
            rfc3339(Timestamp::from_millis(951_868_799_999)),
            "2000-02-29T23:59:59Z"
        );
        assert_eq!(
            rfc3339(Timestamp::from_millis(1_796_523_069_000)),
            "2026-12-06T02:11:09Z"
        );
    }

    fn pairs(query: &[(&str, &str)]) -> Vec<(String, String)> {
        query
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn unknown_repeated_and_out_of_range_parameters_are_refused() {
        assert_eq!(parse(&[]).unwrap(), Page::default());
        for bad in [
            vec![("limit", "0")],
            vec![("limit", "1001")],
            vec![("limit", "x")],
            vec![("after_id", "a"), ("after_id", "b")],
            vec![("order", "asc")],
        ] {
            let problem = parse(&pairs(&bad)).unwrap_err();
            assert_eq!(problem.status, 400, "{bad:?}");
        }
    }

    #[test]
    fn pages_follow_anthropic_s_cursors() {
        let names = ["a", "b", "c", "d", "e"];
        let page = |q: &[(&str, &str)], default| parse(&pairs(q)).unwrap().of(&names, default);
        assert_eq!(page(&[], None), (names.to_vec(), false));
        assert_eq!(page(&[], Some(20)), (names.to_vec(), false));
        assert_eq!(page(&[("limit", "2")], None), (vec!["a", "b"], true));
        assert_eq!(
            page(&[("limit", "2"), ("after_id", "b")], None),
            (vec!["c", "d"], true)
        );
        assert_eq!(
            page(&[("limit", "2"), ("after_id", "c")], None),
            (vec!["d", "e"], false)
        );
        assert_eq!(
            page(&[("limit", "2"), ("before_id", "e")], None),
            (vec!["c", "d"], true)
        );
        assert_eq!(
            page(&[("limit", "2"), ("before_id", "c")], None),
            (vec!["a", "b"], false)
        );
        assert_eq!(
            page(&[("after_id", "a"), ("before_id", "d")], None),
            (vec!["b", "c"], false)
        );
        // An id no binding has still says where the page starts.
        assert_eq!(
            page(&[("after_id", "bb")], None),
            (vec!["c", "d", "e"], false)
        );
    }
}
