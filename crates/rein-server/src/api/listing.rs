//! `GET /v1/runs`: the caller's runs, newest first, a page at a time.
//!
//! # Why a cursor, not an offset
//!
//! Runs are created while a client pages. An offset shifts under every
//! insert (a run listed twice, another skipped); a cursor names the last
//! run seen by its (creation time, id), so each page starts exactly after
//! it ([`rein_store::RunStore::list_runs_page`]) and every run that existed
//! when the listing began is listed once.
//!
//! # Parameters
//!
//! | parameter | meaning | range |
//! | --- | --- | --- |
//! | `status` | `queued`, `running` or an outcome name | one name |
//! | `agent` | the agent's name in the config | 1 or more characters |
//! | `created_after`, `created_before` | creation time, Unix **milliseconds**, both ends exclusive | 0 to [`MAX_CREATED_MS`] |
//! | `limit` | runs per page | 1 to [`MAX_LIMIT`], default [`DEFAULT_LIMIT`] |
//! | `cursor` | `next_cursor` of the previous page, unchanged | opaque |
//!
//! Times are milliseconds, as every `*_ms` field the API answers, so a
//! client filters by the very numbers it reads. A parameter out of range,
//! unknown, or given twice is a 400 problem naming it in `parameter`:
//! silently clamping a `limit` or ignoring a misspelt `stauts` would answer
//! a question the client did not ask.

use std::sync::Arc;

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use rein_store::{RunCursor, RunFilter, RunRecord, RunStatus, Timestamp};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::http::auth::Tenant;
use crate::http::problem::Problem;
use crate::http::query::invalid;
use crate::http::state::AppState;

/// Runs per page when `limit` is not given.
pub const DEFAULT_LIMIT: usize = 50;

/// The most runs one page may ask for.
///
/// NOTE: the `maximum` of [`ListQuery::limit`] repeats it.
pub const MAX_LIMIT: usize = 500;

/// The latest creation time a filter may name: 9999-12-31T23:59:59.999Z in
/// Unix milliseconds, exactly representable in every JSON number (the
/// document's bound must be, or a client could be told a value is valid
/// that the server refuses).
///
/// NOTE: the `maximum` of [`ListQuery::created_after`] and
/// [`ListQuery::created_before`] repeats it.
pub const MAX_CREATED_MS: u64 = 253_402_300_799_999;

/// A run's status, as a filter names it.
#[derive(Debug, Clone, Copy, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum StatusName {
    /// Created, not yet picked up.
    Queued,
    /// A worker is executing it.
    Running,
    /// Ended: every action completed.
    Succeeded,
    /// Ended: some actions completed, some did not.
    PartialSuccess,
    /// Ended: nothing of the task was achieved.
    Failed,
    /// Ended: a budget ran out.
    BudgetExhausted,
    /// Ended: cancelled.
    Cancelled,
    /// Ended: handed to a human.
    HandedOff,
}

/// The query of `GET /v1/runs`, as the document describes it. The handler
/// reads the pairs itself ([`parse`]), to name the parameter of a 400.
///
/// NOTE: [`parse`] must accept exactly what these attributes describe
/// (`crates/rein-cli/tests/api_fuzz.rs` fuzzes one against the other).
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ListQuery {
    /// Only runs with this status.
    #[param(inline)]
    pub status: Option<StatusName>,
    /// Only runs of this agent (its name in the config).
    #[param(min_length = 1)]
    pub agent: Option<String>,
    /// Only runs created after this time (exclusive), Unix milliseconds.
    #[param(minimum = 0, maximum = 253_402_300_799_999_f64)]
    pub created_after: Option<u64>,
    /// Only runs created before this time (exclusive), Unix milliseconds.
    #[param(minimum = 0, maximum = 253_402_300_799_999_f64)]
    pub created_before: Option<u64>,
    /// Runs per page, from 1 to 500 (default 50).
    #[param(minimum = 1, maximum = 500)]
    pub limit: Option<u32>,
    /// The `next_cursor` of the previous page, unchanged.
    #[param(min_length = 1, pattern = "^[A-Za-z0-9_-]+$")]
    pub cursor: Option<String>,
}

/// One run of a listing: what a table of runs shows. The run itself
/// (`GET /v1/runs/{id}`) adds its report and children.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct RunSummary {
    /// The run.
    pub run_id: String,
    /// Its tenant (the caller's).
    pub tenant: String,
    /// Its agent.
    pub agent: String,
    /// `queued`, `running`, or its outcome.
    pub status: String,
    /// Its outcome once it ended (`null` before).
    pub outcome: Option<String>,
    /// The parent run, for a child run.
    pub parent_run_id: Option<String>,
    /// Created, Unix milliseconds.
    pub created_at_ms: u64,
    /// Last change, Unix milliseconds.
    pub updated_at_ms: u64,
}

impl RunSummary {
    /// The summary of `record`.
    pub fn of(record: &RunRecord) -> RunSummary {
        RunSummary {
            run_id: record.run_id.to_string(),
            tenant: record.tenant.to_string(),
            agent: record.agent.clone(),
            status: record.status.as_str().to_owned(),
            outcome: record.status.outcome().map(|o| o.as_str().to_owned()),
            parent_run_id: record.parent_run_id.as_ref().map(ToString::to_string),
            created_at_ms: record.created_at_ms.as_millis(),
            updated_at_ms: record.updated_at_ms.as_millis(),
        }
    }
}

/// A page of runs.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct RunList {
    /// The runs, newest (creation time, then id, descending) first.
    pub runs: Vec<RunSummary>,
    /// Pass as `cursor` for the next page; `null` on the last page.
    pub next_cursor: Option<String>,
}

/// A listing request, validated.
#[derive(Debug, Clone, PartialEq)]
pub struct Listing {
    /// What to select (the tenant is set by the handler, never by a
    /// parameter).
    pub filter: RunFilter,
    /// Where the page starts.
    pub cursor: Option<RunCursor>,
    /// Runs per page.
    pub limit: usize,
}

/// The 400 of `parameter`.
/// A time parameter: whole milliseconds from 0 to [`MAX_CREATED_MS`].
fn millis(parameter: &str, value: &str) -> Result<Timestamp, Problem> {
    value
        .parse::<u64>()
        .ok()
        .filter(|ms| *ms <= MAX_CREATED_MS)
        .map(Timestamp::from_millis)
        .ok_or_else(|| {
            invalid(
                parameter,
                format!(
                    "{parameter} must be Unix milliseconds from 0 to {MAX_CREATED_MS}, but it is {value:?}"
                ),
            )
        })
}

/// Reads the query's pairs into a [`Listing`].
///
/// # Errors
///
/// A 400 naming the first parameter that is unknown, repeated, or out of
/// its range.
pub fn parse(pairs: &[(String, String)]) -> Result<Listing, Problem> {
    let mut listing = Listing {
        filter: RunFilter::all(),
        cursor: None,
        limit: DEFAULT_LIMIT,
    };
    crate::http::query::once(pairs)?;
    for (name, value) in pairs {
        match name.as_str() {
            "status" => {
                let status = RunStatus::parse(value).ok_or_else(|| {
                    invalid(
                        "status",
                        format!(
                            "status must be queued, running or an outcome name (succeeded, partial_success, failed, budget_exhausted, cancelled, handed_off), but it is {value:?}"
                        ),
                    )
                })?;
                listing.filter = listing.filter.with_status(status);
            }
            "agent" => {
                if value.is_empty() {
                    return Err(invalid("agent", "agent must not be empty".to_owned()));
                }
                listing.filter = listing.filter.of_agent(value.clone());
            }
            "created_after" => {
                listing.filter = listing.filter.created_after(millis(name, value)?);
            }
            "created_before" => {
                listing.filter = listing.filter.created_before(millis(name, value)?);
            }
            "limit" => listing.limit = crate::http::query::limit(value, MAX_LIMIT)?,
            "cursor" => {
                let cursor = RunCursor::from_token(value).map_err(|_| {
                    invalid(
                        "cursor",
                        "cursor must be the next_cursor of a previous page, unchanged".to_owned(),
                    )
                })?;
                listing.cursor = Some(cursor);
            }
            other => {
                return Err(invalid(
                    other,
                    format!(
                        "unknown parameter {other:?}; expected status, agent, created_after, created_before, limit or cursor"
                    ),
                ));
            }
        }
    }
    Ok(listing)
}

/// The caller's runs, newest first, filtered and a page at a time.
#[utoipa::path(
    get, path = "/v1/runs", tag = "runs",
    params(ListQuery),
    responses((status = 200, description = "A page of the caller's runs, newest first", body = RunList),
              (status = 400, description = "a parameter unknown, repeated or out of range (`parameter` names it), or a cursor this server did not give", body = Problem),
              (status = 401, description = "missing or invalid API key", body = Problem)),
    security(("bearer" = []))
)]
pub async fn list_runs(
    State(state): State<Arc<AppState>>,
    Tenant(tenant): Tenant,
    query: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> Result<Json<RunList>, Problem> {
    let Query(pairs) = query.map_err(|e| Problem::bad_request(format!("invalid query: {e}")))?;
    let listing = parse(&pairs)?;
    // The caller's tenant, whatever the query: another tenant's run is
    // never listed, as it is never shown.
    let filter = listing.filter.of_tenant(tenant);
    let page = state
        .store
        .list_runs_page(&filter, listing.cursor.as_ref(), listing.limit)
        .await?;
    Ok(Json(RunList {
        runs: page.runs.iter().map(RunSummary::of).collect(),
        next_cursor: page.next.as_ref().map(RunCursor::to_token),
    }))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn pairs(query: &[(&str, &str)]) -> Vec<(String, String)> {
        query
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn parameter_of(query: &[(&str, &str)]) -> String {
        let problem = parse(&pairs(query)).unwrap_err();
        assert_eq!(problem.status, 400, "{query:?}");
        problem.extra.unwrap()["parameter"]
            .as_str()
            .unwrap()
            .to_owned()
    }

    #[test]
    fn valid_parameters_make_the_filter_and_the_page() {
        let cursor = RunCursor {
            created_at_ms: Timestamp::from_millis(5),
            run_id: rein_core::RunId::new("r-1").unwrap(),
        };
        let listing = parse(&pairs(&[
            ("status", "partial_success"),
            ("agent", "order_desk"),
            ("created_after", "0"),
            ("created_before", "253402300799999"),
            ("limit", "500"),
            ("cursor", &cursor.to_token()),
        ]))
        .unwrap();
        assert_eq!(
            listing,
            Listing {
                filter: RunFilter::all()
                    .with_status(RunStatus::Finished(rein_core::Outcome::PartialSuccess))
                    .of_agent("order_desk")
                    .created_after(Timestamp::from_millis(0))
                    .created_before(Timestamp::from_millis(MAX_CREATED_MS)),
                cursor: Some(cursor),
                limit: 500,
            }
        );
        assert_eq!(parse(&[]).unwrap().limit, DEFAULT_LIMIT);
    }

    #[test]
    fn every_invalid_parameter_is_named() {
        for (query, parameter) in [
            (vec![("limit", "0")], "limit"),
            (vec![("limit", "501")], "limit"),
            (vec![("limit", "ten")], "limit"),
            (vec![("status", "paused")], "status"),
            (vec![("agent", "")], "agent"),
            (vec![("created_after", "-1")], "created_after"),
            (
                vec![("created_before", "253402300800000")],
                "created_before",
            ),
            (
                vec![("created_after", "2026-01-01T00:00:00Z")],
                "created_after",
            ),
            (vec![("cursor", "bm9wZQ")], "cursor"),
            (vec![("stauts", "running")], "stauts"),
            (vec![("limit", "1"), ("limit", "2")], "limit"),
        ] {
            assert_eq!(parameter_of(&query), parameter, "{query:?}");
        }
    }

    /// The document's schema of the listing's `parameter`.
    fn documented(parameter: &str) -> serde_json::Value {
        let doc = serde_json::to_value(crate::openapi_document()).unwrap();
        doc["paths"]["/v1/runs"]["get"]["parameters"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == parameter)
            .unwrap()["schema"]
            .clone()
    }

    #[test]
    fn the_document_states_exactly_the_ranges_parse_accepts() {
        let statuses: Vec<String> = documented("status")["enum"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap().to_owned())
            .collect();
        let outcomes = [
            "succeeded",
            "partial_success",
            "failed",
            "budget_exhausted",
            "cancelled",
            "handed_off",
        ];
        let mut every = vec!["queued".to_owned(), "running".to_owned()];
        every.extend(outcomes.iter().map(|o| (*o).to_owned()));
        assert_eq!(statuses, every, "every run status, and only those");
        for status in &statuses {
            assert!(parse(&pairs(&[("status", status)])).is_ok(), "{status}");
        }
        let limit = documented("limit");
        assert_eq!(
            (limit["minimum"].as_u64(), limit["maximum"].as_u64()),
            (Some(1), Some(MAX_LIMIT as u64))
        );
        for bound in ["created_after", "created_before"] {
            let schema = documented(bound);
            assert_eq!(schema["minimum"].as_f64(), Some(0.0), "{bound}");
            assert_eq!(
                schema["maximum"].as_f64(),
                Some(MAX_CREATED_MS as f64),
                "{bound}"
            );
            assert_eq!(
                schema["maximum"].as_f64().map(|m| m as u64),
                Some(MAX_CREATED_MS)
            );
        }
        assert_eq!(documented("agent")["minLength"], 1);
        assert_eq!(documented("cursor")["pattern"], "^[A-Za-z0-9_-]+$");
    }
}
