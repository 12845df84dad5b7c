//! What to do after a failure, by its category: one table for reports.
//!
//! # Why one table
//!
//! A report's `recoverable` and `recommendation` are what an operator acts
//! on. Advice written separately on each path drifted: a run whose model
//! answered 401 was reported "recoverable: yes, retry once the model
//! provider is available", which no retry can make true. The advice
//! follows the failure's [`Category`] here, once:
//!
//! | category | recoverable | the advice |
//! | --- | --- | --- |
//! | `transient`, `timeout`, `overloaded` | yes | retry later |
//! | `rate_limited` | yes | retry after the time the target stated |
//! | `circuit_open` | yes | retry once the circuit admits calls again |
//! | `budget_exhausted` | yes | retry with a larger budget |
//! | `cancelled` | yes | submit again if still wanted |
//! | `unauthorized` | no | fix the key in the env var the provider reads |
//! | `forbidden` | no | give the key access, or use another |
//! | `invalid_arguments` | no | change the request (model name, `max_output_tokens`, options; a tool's input) |
//! | `not_found`, `conflict` | no | fix the name or the input |
//! | `content_blocked` | no | rephrase the task |
//! | `context_overflow` | no | shorten the input or add a larger-context fallback |
//! | `unknown` | yes | retry once, then read the run's events |

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::failure::Category;

/// What failed: the run's model, or one of its tools.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Subject<'a> {
    /// The model provider the run's turns go to.
    Model,
    /// The tool of this name.
    Tool(&'a str),
}

/// What the failure said besides its category, for advice that names what
/// to fix. Kept in a report's basis, so a report derived again says the
/// same.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FailureHint {
    /// The environment variable the failing provider reads its key from
    /// (its name, never the value).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_env: Option<String>,
    /// How long the target asked to wait (`Retry-After`), in milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after_ms: Option<u64>,
}

impl FailureHint {
    /// Whether it says nothing.
    pub fn is_empty(&self) -> bool {
        self.key_env.is_none() && self.retry_after_ms.is_none()
    }
}

/// Whether a failure can be recovered from by trying again, and how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Advice {
    /// Whether running the task again (or resuming it) can succeed without
    /// anyone changing anything but time or budget.
    pub recoverable: bool,
    /// What to do, for a human.
    pub recommendation: String,
}

fn wait(ms: u64) -> String {
    humantime_serde::re::humantime::format_duration(Duration::from_millis(ms)).to_string()
}

/// The advice for a failure of `category` of `subject`.
pub fn advise(category: Category, subject: Subject<'_>, hint: &FailureHint) -> Advice {
    let target = match subject {
        Subject::Model => "the model provider".to_owned(),
        Subject::Tool(tool) => tool.to_owned(),
    };
    let key = match (&hint.key_env, subject) {
        (Some(env), _) => format!("the key in env var {env}"),
        (None, Subject::Model) => "the provider's key (its api_key_env)".to_owned(),
        (None, Subject::Tool(tool)) => format!("rein's credentials for {tool}"),
    };
    let (recoverable, recommendation) = match (category, subject) {
        (Category::Transient | Category::Timeout | Category::Overloaded, Subject::Model) => (
            true,
            "retry later, once the model provider answers again".to_owned(),
        ),
        (Category::RateLimited, _) => (
            true,
            match hint.retry_after_ms {
                Some(ms) => format!("retry {target} after {}, as it asked", wait(ms)),
                None => format!("retry {target} later, once its rate limit admits calls again"),
            },
        ),
        (Category::Overloaded | Category::CircuitOpen, Subject::Tool(tool)) => (
            true,
            format!("retry {tool} later, when the target accepts calls again"),
        ),
        (Category::CircuitOpen, Subject::Model) => (
            true,
            "retry later, once the model provider's circuit admits calls again".to_owned(),
        ),
        (Category::BudgetExhausted, Subject::Model) => {
            (true, "retry with a larger budget".to_owned())
        }
        (Category::BudgetExhausted, Subject::Tool(tool)) => (
            true,
            format!("{tool} was not started for lack of budget; retry with a larger budget"),
        ),
        (Category::Cancelled, _) => (
            true,
            "submit the task again if it is still wanted".to_owned(),
        ),
        (Category::Unauthorized, _) => (false, format!("fix {key}: {target} rejected it")),
        (Category::Forbidden, _) => (
            false,
            format!("{key} is not allowed to use {target}: give it access, or use another key"),
        ),
        (Category::InvalidArguments, Subject::Model) => (
            false,
            "the model provider refused the request as invalid: check the model's name, its max_output_tokens and the request options in the config; retrying unchanged will fail again".to_owned(),
        ),
        (Category::NotFound, Subject::Model) => (
            false,
            "the model provider does not know the model: fix the model's name in the config"
                .to_owned(),
        ),
        (Category::InvalidArguments | Category::NotFound | Category::Conflict, Subject::Tool(tool)) => (
            false,
            format!("review the input for {tool}; retrying unchanged will fail again"),
        ),
        (Category::Conflict, Subject::Model) => (
            false,
            "the model provider refused the request as conflicting: change the request; retrying unchanged will fail again".to_owned(),
        ),
        (Category::ContentBlocked, _) => (
            false,
            format!("a content filter of {target} refused it: rephrase the task"),
        ),
        (Category::ContextOverflow, _) => (
            false,
            "the prompt does not fit the model's context window: shorten the input or add a larger-context model (context_fallbacks)".to_owned(),
        ),
        (Category::Transient | Category::Timeout, Subject::Tool(tool)) => {
            (true, format!("retry {tool}"))
        }
        (Category::Unknown, _) => (
            true,
            format!("retry {target} once; if it fails again, read the run's events"),
        ),
    };
    Advice {
        recoverable,
        recommendation,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model(category: Category) -> Advice {
        advise(category, Subject::Model, &FailureHint::default())
    }

    #[test]
    fn every_category_has_advice_for_the_model_and_for_a_tool() {
        for category in Category::ALL {
            for subject in [Subject::Model, Subject::Tool("send_email")] {
                let advice = advise(category, subject, &FailureHint::default());
                assert!(!advice.recommendation.is_empty(), "{category}");
            }
        }
    }

    #[test]
    fn credentials_are_not_recoverable_and_name_the_env_var() {
        let hint = FailureHint {
            key_env: Some("OPENAI_API_KEY".into()),
            retry_after_ms: None,
        };
        let advice = advise(Category::Unauthorized, Subject::Model, &hint);
        assert!(!advice.recoverable);
        assert!(
            advice
                .recommendation
                .contains("fix the key in env var OPENAI_API_KEY"),
            "{}",
            advice.recommendation
        );
        let advice = advise(Category::Forbidden, Subject::Model, &hint);
        assert!(!advice.recoverable);
        assert!(advice.recommendation.contains("OPENAI_API_KEY"));
        let tool = advise(
            Category::Unauthorized,
            Subject::Tool("crm"),
            &FailureHint::default(),
        );
        assert!(
            tool.recommendation
                .contains("fix rein's credentials for crm")
        );
    }

    #[test]
    fn an_invalid_request_is_not_recoverable_and_says_what_to_change() {
        let advice = model(Category::InvalidArguments);
        assert!(!advice.recoverable);
        assert!(advice.recommendation.contains("max_output_tokens"));
        let tool = advise(
            Category::InvalidArguments,
            Subject::Tool("update"),
            &FailureHint::default(),
        );
        assert!(!tool.recoverable);
        assert!(tool.recommendation.contains("review the input for update"));
    }

    #[test]
    fn a_rate_limit_is_recoverable_after_the_stated_time() {
        let hint = FailureHint {
            key_env: None,
            retry_after_ms: Some(90_000),
        };
        let advice = advise(Category::RateLimited, Subject::Model, &hint);
        assert!(advice.recoverable);
        assert!(
            advice.recommendation.contains("after 1m 30s"),
            "{}",
            advice.recommendation
        );
        assert!(
            model(Category::RateLimited)
                .recommendation
                .contains("later")
        );
    }

    #[test]
    fn passing_faults_are_recoverable_later() {
        for category in [Category::Transient, Category::Timeout, Category::Overloaded] {
            let advice = model(category);
            assert!(advice.recoverable, "{category}");
            assert!(advice.recommendation.contains("retry later"), "{category}");
        }
        assert!(model(Category::CircuitOpen).recoverable);
        assert!(
            model(Category::CircuitOpen)
                .recommendation
                .contains("circuit")
        );
    }

    #[test]
    fn a_budget_is_recoverable_with_a_larger_one() {
        let advice = model(Category::BudgetExhausted);
        assert!(advice.recoverable);
        assert!(advice.recommendation.contains("larger budget"));
    }

    #[test]
    fn what_only_a_change_of_input_fixes_is_not_recoverable() {
        for category in [
            Category::NotFound,
            Category::Conflict,
            Category::ContentBlocked,
            Category::ContextOverflow,
        ] {
            assert!(!model(category).recoverable, "{category}");
        }
        assert!(
            model(Category::ContextOverflow)
                .recommendation
                .contains("context_fallbacks")
        );
        assert!(
            model(Category::ContentBlocked)
                .recommendation
                .contains("rephrase")
        );
        assert!(
            model(Category::NotFound)
                .recommendation
                .contains("model's name")
        );
    }

    #[test]
    fn cancellation_and_the_unknown_may_be_tried_again() {
        assert!(model(Category::Cancelled).recoverable);
        assert!(
            model(Category::Cancelled)
                .recommendation
                .contains("submit the task again")
        );
        let unknown = model(Category::Unknown);
        assert!(unknown.recoverable);
        assert!(unknown.recommendation.contains("read the run's events"));
    }
}
