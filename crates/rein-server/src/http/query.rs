//! Query strings read by hand: every listing answers an unknown, repeated
//! or out-of-range parameter with a 400 naming it in `parameter`, in the
//! same words, rather than clamping or ignoring what the client asked.

use serde_json::json;

use crate::http::problem::Problem;

/// The 400 of `parameter`, saying `detail`.
pub fn invalid(parameter: &str, detail: String) -> Problem {
    Problem::bad_request(detail).with(json!({ "parameter": parameter }))
}

/// Refuses the first parameter given more than once.
///
/// # Errors
///
/// Its 400.
pub fn once(pairs: &[(String, String)]) -> Result<(), Problem> {
    let mut seen: Vec<&str> = Vec::with_capacity(pairs.len());
    for (name, _) in pairs {
        if seen.contains(&name.as_str()) {
            return Err(invalid(name, format!("{name} may be given once")));
        }
        seen.push(name);
    }
    Ok(())
}

/// A `limit` from 1 to `max`.
///
/// # Errors
///
/// Its 400.
pub fn limit(value: &str, max: usize) -> Result<usize, Problem> {
    value
        .parse::<usize>()
        .ok()
        .filter(|n| (1..=max).contains(n))
        .ok_or_else(|| {
            invalid(
                "limit",
                format!("limit must be from 1 to {max}, but it is {value:?}"),
            )
        })
}

/// The 400 of an unknown parameter, naming those `known`.
pub fn unknown(name: &str, known: &str) -> Problem {
    invalid(
        name,
        format!("unknown parameter {name:?}; expected {known}"),
    )
}
