//! The process's secrets: [`register`] teaches them; [`text`], [`known`],
//! [`json`], [`known_json`], [`truncated`], [`tail`] and [`cut`] redact
//! with them. Why a global: see the module docs of [`super`].

use std::borrow::Cow;
use std::sync::{Arc, RwLock};

use serde_json::Value;

use super::{Redactor, Secrets, scrub_urls};

/// The registered secrets and the redactor built from them.
struct Process {
    secrets: Secrets,
    redactor: Arc<Redactor>,
}

static PROCESS: RwLock<Option<Process>> = RwLock::new(None);

/// Teaches the process `secrets`: from now on every funnel redacts them
/// (with every secret registered before). Registering what is already
/// known takes only a read lock, so a caller may register on every use
/// (a tool's headers at each call) without contention.
pub fn register(secrets: &Secrets) {
    if secrets.is_empty() {
        return;
    }
    {
        let guard = PROCESS.read().unwrap_or_else(|p| p.into_inner());
        if guard.as_ref().is_some_and(|p| p.secrets.covers(secrets)) {
            return;
        }
    }
    let mut guard = PROCESS.write().unwrap_or_else(|p| p.into_inner());
    let mut all = guard
        .as_ref()
        .map_or_else(Secrets::new, |p| p.secrets.clone());
    all.extend(secrets);
    let redactor = Arc::new(Redactor::new(&all));
    *guard = Some(Process {
        secrets: all,
        redactor,
    });
}

/// The process's redactor (URL queries and userinfo only, before any
/// secret is registered).
pub fn process() -> Arc<Redactor> {
    PROCESS
        .read()
        .unwrap_or_else(|p| p.into_inner())
        .as_ref()
        .map(|p| p.redactor.clone())
        .unwrap_or_default()
}

/// `text` without the process's secrets, URL queries or userinfo
/// ([`Redactor::redact`]): for prose.
pub fn text(text: &str) -> Cow<'_, str> {
    match PROCESS.read().unwrap_or_else(|p| p.into_inner()).as_ref() {
        Some(p) => match p.redactor.redact(text) {
            Cow::Borrowed(_) => Cow::Borrowed(text),
            Cow::Owned(clean) => Cow::Owned(clean),
        },
        None => scrub_urls(text),
    }
}

/// `text` without the process's secrets ([`Redactor::redact_known`]): for
/// data a program reads back.
pub fn known(text: &str) -> Cow<'_, str> {
    match PROCESS.read().unwrap_or_else(|p| p.into_inner()).as_ref() {
        Some(p) => match p.redactor.redact_known(text) {
            Cow::Borrowed(_) => Cow::Borrowed(text),
            Cow::Owned(clean) => Cow::Owned(clean),
        },
        None => Cow::Borrowed(text),
    }
}

/// Redacts every string, key and number of `value` in place
/// ([`Redactor::redact_json`]); whether anything was redacted.
pub fn json(value: &mut Value) -> bool {
    process().redact_json(value)
}

/// Whether [`json`] would change `value`'s JSON form
/// ([`super::would_change`]), found without building it.
pub fn json_changes(value: &impl serde::Serialize) -> bool {
    super::would_change(&process(), value)
}

/// Redacts every string of `value` in place, leaving keys and numbers
/// ([`Redactor::redact_json_strings`]).
pub fn json_strings(value: &mut Value) {
    process().redact_json_strings(value);
}

/// Redacts the process's secrets from every string, key and number of
/// `value` in place, leaving URL queries and userinfo
/// ([`Redactor::redact_known_json`]): for tool results.
pub fn known_json(value: &mut Value) {
    process().redact_known_json(value);
}

/// At most `max` characters of the start of `text`, redacted, then cut
/// ([`Redactor::head`]). Every truncation of outside text uses this (or
/// [`tail`]): cutting first would leave part of a secret across the cut.
pub fn truncated(text: &str, max: usize) -> String {
    process().head(text, max)
}

/// At most `max` characters of the end of `text`, redacted, then cut
/// ([`Redactor::tail`]).
pub fn tail(text: &str, max: usize) -> String {
    process().tail(text, max)
}

/// `text`, cut before it reached rein, redacted including a fragment of a
/// secret at a cut edge ([`Redactor::redact_cut`]).
pub fn cut(text: &str, cut_start: bool, cut_end: bool) -> String {
    process().redact_cut(text, cut_start, cut_end)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registered_secrets_are_redacted_process_wide() {
        let mut secrets = Secrets::new();
        secrets.insert("process-canary-77").unwrap();
        register(&secrets);
        assert_eq!(text("x process-canary-77 y"), "x [redacted] y");
        assert_eq!(known("x process-canary-77 ?a=b"), "x [redacted] ?a=b");
        let mut v = serde_json::json!(["process-canary-77"]);
        json(&mut v);
        assert_eq!(v, serde_json::json!(["[redacted]"]));
        assert_eq!(truncated("key process-canary-77", 10), "key ");
    }

    #[test]
    fn registering_grows_the_set_and_never_forgets() {
        let mut first = Secrets::new();
        first.insert("grow-canary-one").unwrap();
        register(&first);
        let mut second = Secrets::new();
        second.insert("grow-canary-two").unwrap();
        register(&second);
        register(&first);
        assert_eq!(
            text("grow-canary-one grow-canary-two"),
            "[redacted] [redacted]"
        );
    }
}
