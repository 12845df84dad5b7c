//! Extractors whose rejections are problems, like every other error.

use axum::extract::{FromRequestParts, Path};
use axum::http::request::Parts;

use crate::http::problem::Problem;

/// The one path parameter of a route (`{id}`, `{name}`), decoded.
///
/// # Why not `Path<String>`
///
/// Its rejection is plain text. A segment that does not decode (`%FF` is
/// not UTF-8) cannot name a run or an agent, so it is the 404 problem every
/// such route documents.
#[derive(Debug, Clone)]
pub struct Segment(pub String);

impl<S: Send + Sync> FromRequestParts<S> for Segment {
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Segment, Problem> {
        match Path::<String>::from_request_parts(parts, state).await {
            Ok(Path(segment)) => Ok(Segment(segment)),
            Err(e) => Err(Problem::not_found(format!(
                "{} names nothing here: {}",
                parts.uri.path(),
                e.body_text()
            ))),
        }
    }
}

/// The two path parameters of a route (`{id}` and `{intent_id}`), decoded;
/// a rejection is the 404 problem, as for [`Segment`].
#[derive(Debug, Clone)]
pub struct Segments(pub String, pub String);

impl<S: Send + Sync> FromRequestParts<S> for Segments {
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Segments, Problem> {
        match Path::<(String, String)>::from_request_parts(parts, state).await {
            Ok(Path((first, second))) => Ok(Segments(first, second)),
            Err(e) => Err(Problem::not_found(format!(
                "{} names nothing here: {}",
                parts.uri.path(),
                e.body_text()
            ))),
        }
    }
}
