//! Rules: which requests get which fault, and how often.

use serde::{Deserialize, Serialize};

/// One fault plan entry: the requests it applies to, the fault, and the
/// window of matching requests in which it fires.
///
/// # Why
///
/// Chaos scenarios are about *which* call breaks: "the second attempt of
/// the update times out", "the first three reads are rate limited". A rule
/// counts the requests its [`Match`] selects and fires for matching
/// requests number `skip + 1 ..= skip + times` (every later one when
/// `times` is `None`), so such plans are data, not code.
///
/// # Evaluation
///
/// Rules are evaluated in order. Each rule whose matcher selects the
/// request counts it; the first one that also fires wins and evaluation
/// stops there, so rules after the winner neither see nor count it. A rule
/// that matches but does not fire (still skipping, or used up) counts the
/// request and lets the next rule decide.
///
/// # Defaults
///
/// [`Rule::new`] and a deserialized rule without those keys: `skip` 0,
/// `times` 1. An explicit `"times": null` means every later request.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Rule {
    /// The requests this rule counts.
    pub matcher: Match,
    /// What happens to a request the rule fires for.
    pub injection: Injection,
    /// How many matching requests pass untouched before the rule fires.
    #[serde(default)]
    pub skip: u32,
    /// How many matching requests it fires for after the skipped ones;
    /// `None` for all of them.
    #[serde(default = "default_times")]
    pub times: Option<u32>,
}

fn default_times() -> Option<u32> {
    Some(1)
}

impl Rule {
    /// A rule firing once, for the first request `matcher` selects.
    pub fn new(matcher: Match, injection: Injection) -> Rule {
        Rule {
            matcher,
            injection,
            skip: 0,
            times: default_times(),
        }
    }

    /// Lets the first `n` matching requests through before firing.
    pub fn skip(mut self, n: u32) -> Rule {
        self.skip = n;
        self
    }

    /// Fires for `n` matching requests (after the skipped ones).
    pub fn times(mut self, n: u32) -> Rule {
        self.times = Some(n);
        self
    }

    /// Fires for every matching request after the skipped ones.
    pub fn always(mut self) -> Rule {
        self.times = None;
        self
    }

    /// Whether the rule fires for the matching request numbered `seen`
    /// (1-based, counting this one).
    fn fires_at(&self, seen: u64) -> bool {
        let skip = u64::from(self.skip);
        seen > skip
            && match self.times {
                None => true,
                Some(times) => seen <= skip + u64::from(times),
            }
    }
}

/// Which requests a [`Rule`] counts: every field set must agree, unset
/// fields match anything.
///
/// # Why
///
/// rein calls tools at `/tools/{name}` and marks each attempt of a call
/// with `Rein-Attempt`, so a scenario can aim at a tool, a route, or one
/// attempt of a call without knowing ports or bodies.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct Match {
    /// The HTTP method, compared without regard to case.
    pub method: Option<String>,
    /// A prefix of the request target (path and query, as received).
    pub path_prefix: Option<String>,
    /// The tool, as [`tool_of`](super::tool_of) names it: `get_order`, or
    /// `get_order/status` for the status lookup.
    pub tool: Option<String>,
    /// The value of the request's `Rein-Attempt` header (1 for the first
    /// attempt of a call); a request without a numeric one never matches.
    pub attempt: Option<u32>,
}

impl Match {
    /// Matches every request.
    pub fn any() -> Match {
        Match::default()
    }

    /// Matches calls of one tool (`name`, or `name/status` for its status
    /// lookup).
    pub fn tool(name: &str) -> Match {
        Match {
            tool: Some(name.to_owned()),
            ..Match::default()
        }
    }

    /// Matches request targets starting with `prefix`.
    pub fn path(prefix: &str) -> Match {
        Match {
            path_prefix: Some(prefix.to_owned()),
            ..Match::default()
        }
    }

    /// Narrows the matcher to requests whose `Rein-Attempt` is `n`.
    pub fn attempt(mut self, n: u32) -> Match {
        self.attempt = Some(n);
        self
    }

    /// Whether the request described by `facts` is selected.
    pub(crate) fn matches(&self, facts: &RequestFacts<'_>) -> bool {
        let method = self
            .method
            .as_deref()
            .is_none_or(|m| m.eq_ignore_ascii_case(facts.method));
        let path = self
            .path_prefix
            .as_deref()
            .is_none_or(|p| facts.target.starts_with(p));
        let tool = self.tool.as_deref().is_none_or(|t| facts.tool == Some(t));
        let attempt = self.attempt.is_none_or(|a| facts.attempt == Some(a));
        method && path && tool && attempt
    }
}

/// The fault done to one request.
///
/// # Why
///
/// Each variant is one way the network or a service fails that rein must
/// survive, and they differ in the one thing that matters for correctness:
/// whether the upstream *applied* the call. The `…BeforeForward`, `Status`
/// and (when the client leaves first) `Delay` faults never reach it; the
/// others forward first, so the side effect happened but the client cannot
/// tell.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Injection {
    /// Waits `ms`, then forwards and relays normally: a slow network on
    /// the way in. A client that hangs up meanwhile is never forwarded.
    Delay {
        /// Milliseconds to wait before forwarding.
        ms: u64,
    },
    /// Hold the request `ms`, then forward it even if the client gave up
    /// meanwhile: the network delivers a request its sender abandoned, and
    /// the effect lands late. The case a retry with the same key must make
    /// harmless.
    LateDelivery {
        /// How long the request is held.
        ms: u64,
    },
    /// Forwards (the upstream applies), waits `ms`, then relays: a
    /// time-to-first-byte stall after the work is done.
    StallFirstByte {
        /// Milliseconds between the upstream's answer and the first byte
        /// to the client.
        ms: u64,
    },
    /// Forwards, sends the status line and headers of a chunked answer,
    /// then nothing for `ms` (or until the client hangs up), then closes
    /// without finishing the body: a stream that went silent.
    IdleStream {
        /// Milliseconds of silence before the proxy gives up.
        ms: u64,
    },
    /// Never forwards; resets the connection (RST) without writing a byte.
    ResetBeforeForward,
    /// Forwards (the upstream applies), then resets without writing a
    /// byte: the lost response.
    ResetAfterForward,
    /// Forwards; sends the status, the headers with the upstream's real
    /// `Content-Length`, then only the first `min(keep, len - 1)` body
    /// bytes, then closes. An empty upstream body cannot be cut and is
    /// relayed whole.
    TruncateBody {
        /// How many body bytes to send at most.
        keep: usize,
    },
    /// Never forwards; answers `code` with `body` or the default JSON
    /// error body, and `Retry-After` when `retry_after_s` is set.
    Status {
        /// The status code to answer.
        code: u16,
        /// Seconds for a `Retry-After` header.
        retry_after_s: Option<u64>,
        /// The body; `None` for the default JSON error body.
        body: Option<String>,
    },
    /// Forwards (the upstream applies), discards its answer, and answers
    /// `code` with `body` or the default body: "it failed" when it did not.
    ExecutedThenStatus {
        /// The status code to answer.
        code: u16,
        /// The body; `None` for the default JSON error body.
        body: Option<String>,
    },
}

impl Injection {
    /// The snake-case name of the variant, as in its serialized `kind`.
    pub fn name(&self) -> &'static str {
        // NOTE: must agree with the serde `kind` tags (rename_all snake_case).
        match self {
            Injection::Delay { .. } => "delay",
            Injection::LateDelivery { .. } => "late_delivery",
            Injection::StallFirstByte { .. } => "stall_first_byte",
            Injection::IdleStream { .. } => "idle_stream",
            Injection::ResetBeforeForward => "reset_before_forward",
            Injection::ResetAfterForward => "reset_after_forward",
            Injection::TruncateBody { .. } => "truncate_body",
            Injection::Status { .. } => "status",
            Injection::ExecutedThenStatus { .. } => "executed_then_status",
        }
    }
}

/// What the rules look at in a request.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RequestFacts<'a> {
    pub(crate) method: &'a str,
    pub(crate) target: &'a str,
    pub(crate) tool: Option<&'a str>,
    pub(crate) attempt: Option<u32>,
}

/// The rules with their counts of matching requests.
#[derive(Debug, Default)]
pub(crate) struct RuleBook {
    entries: Vec<Entry>,
}

#[derive(Debug)]
struct Entry {
    rule: Rule,
    seen: u64,
}

impl RuleBook {
    /// Appends a rule with a fresh count.
    pub(crate) fn add(&mut self, rule: Rule) {
        self.entries.push(Entry { rule, seen: 0 });
    }

    /// Replaces every rule; counts start afresh.
    pub(crate) fn set(&mut self, rules: Vec<Rule>) {
        self.entries = rules
            .into_iter()
            .map(|rule| Entry { rule, seen: 0 })
            .collect();
    }

    /// Counts the request against the rules, in order, and returns the
    /// injection of the first rule that fires.
    pub(crate) fn select(&mut self, facts: &RequestFacts<'_>) -> Option<Injection> {
        for entry in &mut self.entries {
            if !entry.rule.matcher.matches(facts) {
                continue;
            }
            entry.seen = entry.seen.saturating_add(1);
            if entry.rule.fires_at(entry.seen) {
                return Some(entry.rule.injection.clone());
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(tool: Option<&str>, attempt: Option<u32>) -> RequestFacts<'_> {
        RequestFacts {
            method: "POST",
            target: "/tools/x",
            tool,
            attempt,
        }
    }

    fn status(code: u16) -> Injection {
        Injection::Status {
            code,
            retry_after_s: None,
            body: None,
        }
    }

    fn codes(book: &mut RuleBook, tool: &str, n: usize) -> Vec<Option<u16>> {
        (0..n)
            .map(|_| match book.select(&facts(Some(tool), None)) {
                Some(Injection::Status { code, .. }) => Some(code),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn select_with_skip_and_times_fires_inside_window_only() {
        let mut book = RuleBook::default();
        book.add(Rule::new(Match::tool("a"), status(503)).skip(1).times(2));
        assert_eq!(
            codes(&mut book, "a", 5),
            vec![None, Some(503), Some(503), None, None]
        );
    }

    #[test]
    fn select_with_always_fires_for_every_later_request() {
        let mut book = RuleBook::default();
        book.add(Rule::new(Match::any(), status(500)).skip(2).always());
        assert_eq!(
            codes(&mut book, "a", 5),
            vec![None, None, Some(500), Some(500), Some(500)]
        );
    }

    #[test]
    fn select_when_first_rule_skips_counts_it_and_next_rule_wins() {
        let mut book = RuleBook::default();
        book.add(Rule::new(Match::tool("a"), status(500)).skip(1));
        book.add(Rule::new(Match::any(), status(429)).always());
        // Request 1: rule 1 counts and skips, rule 2 fires. Request 2: rule 1
        // fires, so rule 2 does not count it. Request 3: rule 1 is used up.
        assert_eq!(
            codes(&mut book, "a", 3),
            vec![Some(429), Some(500), Some(429)]
        );
    }

    #[test]
    fn select_ignores_requests_the_matcher_rejects() {
        let mut book = RuleBook::default();
        book.add(Rule::new(Match::tool("a"), status(500)).skip(1));
        assert_eq!(codes(&mut book, "b", 3), vec![None, None, None]);
        assert_eq!(codes(&mut book, "a", 2), vec![None, Some(500)]);
    }

    #[test]
    fn match_with_attempt_needs_that_header_value() {
        let m = Match::tool("a").attempt(2);
        assert!(m.matches(&facts(Some("a"), Some(2))));
        assert!(!m.matches(&facts(Some("a"), Some(1))));
        assert!(!m.matches(&facts(Some("a"), None)));
        assert!(!m.matches(&facts(Some("b"), Some(2))));
    }

    #[test]
    fn match_by_method_and_prefix() {
        let m = Match {
            method: Some("post".into()),
            path_prefix: Some("/tools/".into()),
            ..Match::default()
        };
        assert!(m.matches(&facts(None, None)));
        let get = RequestFacts {
            method: "GET",
            ..facts(None, None)
        };
        assert!(!m.matches(&get));
        assert!(!Match::path("/other").matches(&facts(None, None)));
    }

    #[test]
    fn rule_json_defaults_to_once_and_null_times_means_always() {
        let once: Rule = serde_json::from_str(
            r#"{"matcher": {"tool": "a"}, "injection": {"kind": "reset_before_forward"}}"#,
        )
        .unwrap();
        assert_eq!(
            once,
            Rule::new(Match::tool("a"), Injection::ResetBeforeForward)
        );
        let always: Rule = serde_json::from_str(
            r#"{"matcher": {}, "injection": {"kind": "delay", "ms": 5}, "skip": 1, "times": null}"#,
        )
        .unwrap();
        assert_eq!(
            always,
            Rule::new(Match::any(), Injection::Delay { ms: 5 })
                .skip(1)
                .always()
        );
    }

    #[test]
    fn injection_name_agrees_with_serialized_kind() {
        let all = [
            Injection::Delay { ms: 1 },
            Injection::StallFirstByte { ms: 1 },
            Injection::IdleStream { ms: 1 },
            Injection::ResetBeforeForward,
            Injection::ResetAfterForward,
            Injection::TruncateBody { keep: 1 },
            status(500),
            Injection::ExecutedThenStatus {
                code: 500,
                body: None,
            },
        ];
        for injection in all {
            let json = serde_json::to_value(&injection).unwrap();
            assert_eq!(json["kind"], injection.name());
        }
    }
}
