//! `[webhooks.NAME]`: where rein POSTs the events someone outside acts on.
//!
//! | field | default | range |
//! | --- | --- | --- |
//! | `url` | required | an absolute `http` or `https` URL; redirects are never followed |
//! | `events` | required | one or more of `approval_requested`, `approval_decided`, `handoff_created`, `run_finished`, `breaker_opened` |
//! | `outcomes` | every outcome | `run_finished` only for these outcomes (`succeeded`, `failed`, …); needs `run_finished` in `events` |
//! | `secret_env` | required | the environment variable holding the signing secret; it must be set when rein starts |
//! | `max_age` | [`DEFAULT_MAX_AGE`] | (0, 30 d]: an event not delivered by then is given up |
//! | `timeout` | [`DEFAULT_TIMEOUT`] | (0, 5 min], below `max_age`: how long one POST may take |
//!
//! # Why named tables
//!
//! Every other section names its entries (`[tools.NAME]`), and a name is
//! what the delivery log, `rein webhooks deliveries NAME` and
//! `GET /v1/webhooks/{name}/deliveries` are keyed by: a rename is a new
//! webhook, a reordered file is not.

use std::collections::BTreeSet;
use std::time::Duration;

use schemars::JsonSchema;
use serde::Deserialize;

use crate::outcome::Outcome;
use crate::webhook::{DEFAULT_MAX_AGE, DEFAULT_TIMEOUT, Topic};

/// The longest `max_age`.
pub const MAX_WEBHOOK_AGE: Duration = Duration::from_secs(30 * 86_400);

/// The longest `timeout`.
pub const MAX_WEBHOOK_TIMEOUT: Duration = Duration::from_secs(300);

/// `[webhooks.NAME]` as written.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct WebhookConfig {
    /// Where deliveries are POSTed.
    pub url: Option<String>,
    /// The topics sent.
    pub events: Option<Vec<String>>,
    /// `run_finished` only for these outcomes.
    pub outcomes: Option<Vec<String>>,
    /// The variable holding the signing secret.
    pub secret_env: Option<String>,
    /// How long an event may still be delivered.
    #[serde(with = "crate::config::duration")]
    #[schemars(with = "Option<crate::config::duration::Text>")]
    pub max_age: Option<Duration>,
    /// How long one POST may take.
    #[serde(with = "crate::config::duration")]
    #[schemars(with = "Option<crate::config::duration::Text>")]
    pub timeout: Option<Duration>,
}

/// `[webhooks.NAME]`, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct WebhookSpec {
    /// Its name: the key of its delivery log.
    pub name: String,
    /// Where deliveries are POSTed.
    pub url: String,
    /// The topics sent.
    pub topics: BTreeSet<Topic>,
    /// `run_finished` only for these; `None` for every outcome.
    pub outcomes: Option<Vec<Outcome>>,
    /// The variable holding the signing secret (never the secret itself).
    pub secret_env: String,
    /// How long an event may still be delivered.
    pub max_age: Duration,
    /// How long one POST may take.
    pub timeout: Duration,
}

impl WebhookSpec {
    /// A webhook of `topics` to `url`, signed with the secret in
    /// `secret_env`, with the default `max_age` and `timeout` and every
    /// outcome: what an embedder (or a test) builds without a config file.
    /// The fields are public to change after.
    pub fn new(
        name: impl Into<String>,
        url: impl Into<String>,
        topics: impl IntoIterator<Item = Topic>,
        secret_env: impl Into<String>,
    ) -> WebhookSpec {
        WebhookSpec {
            name: name.into(),
            url: url.into(),
            topics: topics.into_iter().collect(),
            outcomes: None,
            secret_env: secret_env.into(),
            max_age: DEFAULT_MAX_AGE,
            timeout: DEFAULT_TIMEOUT,
        }
    }

    /// Whether an event of `topic` (and `outcome`, for `run_finished`) is
    /// sent to this webhook.
    pub fn wants(&self, topic: Topic, outcome: Option<Outcome>) -> bool {
        self.topics.contains(&topic)
            && match (&self.outcomes, outcome) {
                (Some(only), Some(outcome)) => only.contains(&outcome),
                _ => true,
            }
    }
}

/// Checks `[webhooks.NAME]`: the spec, or every problem as `(field,
/// message)` (the caller places them in their file).
pub(super) fn check_webhook(
    name: &str,
    c: &WebhookConfig,
) -> Result<WebhookSpec, Vec<(String, String)>> {
    let p = format!("webhooks.{name}");
    let mut problems: Vec<(String, String)> = Vec::new();
    let mut report =
        |field: &str, message: String| problems.push((format!("{p}.{field}"), message));
    let url = match c.url.as_deref().map(str::trim) {
        None => {
            report(
                "url",
                "is required: where events are POSTed, e.g. \"https://hooks.example.com/rein\""
                    .to_owned(),
            );
            None
        }
        Some(url) => match valid_url(url) {
            Ok(()) => Some(url.to_owned()),
            Err(why) => {
                report("url", why);
                None
            }
        },
    };
    let mut topics = BTreeSet::new();
    match &c.events {
        None => report(
            "events",
            "is required: one or more of approval_requested, approval_decided, handoff_created, handoff_decided, run_finished, breaker_opened".to_owned(),
        ),
        Some(events) if events.is_empty() => {
            report("events", "must name at least one event".to_owned());
        }
        Some(events) => {
            for (i, event) in events.iter().enumerate() {
                match Topic::parse(event) {
                    Ok(topic) if !topics.insert(topic) => {
                        report(&format!("events[{i}]"), format!("repeats `{event}`"));
                    }
                    Ok(_) => {}
                    Err(err) => report(&format!("events[{i}]"), err.to_string()),
                }
            }
        }
    }
    let outcomes = match &c.outcomes {
        None => None,
        Some(listed) => {
            if c.events.is_some() && !topics.contains(&Topic::RunFinished) {
                report(
                    "outcomes",
                    "filters run_finished, which `events` does not name: it would have no effect"
                        .to_owned(),
                );
            }
            if listed.is_empty() {
                report(
                    "outcomes",
                    "must name at least one outcome (leave it out for all)".to_owned(),
                );
            }
            let mut set = Vec::new();
            for (i, outcome) in listed.iter().enumerate() {
                match Outcome::parse(outcome) {
                    Some(o) if set.contains(&o) => {
                        report(&format!("outcomes[{i}]"), format!("repeats `{outcome}`"))
                    }
                    Some(o) => set.push(o),
                    None => report(
                        &format!("outcomes[{i}]"),
                        format!(
                            "`{outcome}` is not an outcome; expected succeeded, partial_success, failed, budget_exhausted, cancelled or handed_off"
                        ),
                    ),
                }
            }
            Some(set)
        }
    };
    let secret_env = match c.secret_env.as_deref() {
        None => {
            report(
                "secret_env",
                "is required: the environment variable holding the signing secret".to_owned(),
            );
            None
        }
        Some(var) if !super::check::is_env_name(var) => {
            report(
                "secret_env",
                format!("`{var}` is not an environment variable name"),
            );
            None
        }
        Some(var) => Some(var.to_owned()),
    };
    let max_age = c.max_age.unwrap_or(DEFAULT_MAX_AGE);
    if max_age.is_zero() || max_age > MAX_WEBHOOK_AGE {
        report(
            "max_age",
            format!(
                "must be above 0 and at most {}",
                humantime_serde::re::humantime::format_duration(MAX_WEBHOOK_AGE)
            ),
        );
    }
    let timeout = c.timeout.unwrap_or(DEFAULT_TIMEOUT);
    if timeout.is_zero() || timeout > MAX_WEBHOOK_TIMEOUT {
        report(
            "timeout",
            format!(
                "must be above 0 and at most {}",
                humantime_serde::re::humantime::format_duration(MAX_WEBHOOK_TIMEOUT)
            ),
        );
    } else if timeout >= max_age {
        report(
            "timeout",
            "must be shorter than max_age: no attempt could end before the event is given up"
                .to_owned(),
        );
    }
    match (url, secret_env) {
        (Some(url), Some(secret_env)) if problems.is_empty() => Ok(WebhookSpec {
            name: name.to_owned(),
            url,
            topics,
            outcomes,
            secret_env,
            max_age,
            timeout,
        }),
        _ => Err(problems),
    }
}

/// An absolute `http`/`https` URL with a host and no credentials: a
/// webhook's secret is its signature, never userinfo a log would show.
fn valid_url(url: &str) -> Result<(), String> {
    let rest = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"));
    let Some(rest) = rest else {
        return Err(format!(
            "must be an absolute http or https URL, but it is `{url}`"
        ));
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    if authority.is_empty() || url.contains(char::is_whitespace) {
        return Err(format!(
            "must be an absolute http or https URL with a host, but it is `{url}`"
        ));
    }
    if authority.contains('@') {
        return Err(
            "must not hold credentials (`user:password@`): the signature authenticates rein"
                .to_owned(),
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn checked(toml_text: &str) -> Result<WebhookSpec, Vec<(String, String)>> {
        let c: WebhookConfig =
            toml::from_str(toml_text).map_err(|e| vec![(String::new(), e.to_string())])?;
        check_webhook("ops", &c)
    }

    fn fields(result: Result<WebhookSpec, Vec<(String, String)>>) -> Vec<String> {
        result
            .err()
            .unwrap_or_default()
            .into_iter()
            .map(|(f, _)| f)
            .collect()
    }

    #[test]
    fn a_whole_webhook_checks_with_its_defaults() {
        let spec = checked(
            r#"url = "https://hooks.example.com/rein"
               events = ["run_finished", "approval_requested"]
               secret_env = "HOOK_SECRET""#,
        );
        let Ok(spec) = spec else { panic!("{spec:?}") };
        assert_eq!(spec.max_age, DEFAULT_MAX_AGE);
        assert_eq!(spec.timeout, DEFAULT_TIMEOUT);
        assert!(spec.wants(Topic::RunFinished, Some(Outcome::Failed)));
        assert!(!spec.wants(Topic::BreakerOpened, None));
    }

    #[test]
    fn outcomes_filter_run_finished_only() {
        let spec = checked(
            r#"url = "http://127.0.0.1:9/x"
               events = ["run_finished"]
               outcomes = ["failed", "handed_off"]
               secret_env = "S""#,
        );
        let Ok(spec) = spec else { panic!("{spec:?}") };
        assert!(spec.wants(Topic::RunFinished, Some(Outcome::Failed)));
        assert!(!spec.wants(Topic::RunFinished, Some(Outcome::Succeeded)));
    }

    #[test]
    fn each_wrong_field_is_named() {
        assert_eq!(
            fields(checked(r#"events = ["run_started"]"#)),
            [
                "webhooks.ops.url",
                "webhooks.ops.events[0]",
                "webhooks.ops.secret_env"
            ]
        );
        assert_eq!(
            fields(checked(
                r#"url = "ftp://x" 
                   events = ["approval_decided"]
                   outcomes = ["won"]
                   secret_env = "1BAD"
                   max_age = "40days"
                   timeout = "0s""#
            )),
            [
                "webhooks.ops.url",
                "webhooks.ops.outcomes",
                "webhooks.ops.outcomes[0]",
                "webhooks.ops.secret_env",
                "webhooks.ops.max_age",
                "webhooks.ops.timeout"
            ]
        );
        assert_eq!(
            fields(checked(
                r#"url = "https://u:p@hooks.example.com"
                   events = ["run_finished", "run_finished"]
                   secret_env = "S"
                   max_age = "5s"
                   timeout = "5s""#
            )),
            [
                "webhooks.ops.url",
                "webhooks.ops.events[1]",
                "webhooks.ops.timeout"
            ]
        );
    }
}
