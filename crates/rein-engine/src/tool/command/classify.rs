//! How an attempt ended, classified into the error contract.

use std::process::ExitStatus;
use std::time::Duration;

use rein_core::{Category, Effect, Failure};
use rein_store::StoreError;

use super::output::{Captured, shape_stdout, stderr_note};
use super::{CommandTarget, EX_TEMPFAIL, GATE_REFUSED, ToolOutput};
use crate::lease::GroupEnd;
use crate::tool::ErrorBody;

/// How the wait for the program ended.
pub(super) enum Ended {
    Exited(ExitStatus),
    Deadline,
    Cancelled,
    WaitFailed(std::io::Error),
}

pub(super) fn classify(
    target: &CommandTarget,
    ended: Ended,
    limit: Duration,
    end: GroupEnd,
    out: &Captured,
    err: &Captured,
) -> Result<ToolOutput, Failure> {
    let name = target.name.as_str();
    let group = match end {
        GroupEnd::AlreadyGone | GroupEnd::Terminated => "process group ended",
        GroupEnd::Killed => "process group killed",
        GroupEnd::Survived => "process group survived SIGKILL",
    };
    match ended {
        Ended::Exited(status) if status.success() => {
            let (mut result, truncated) = shape_stdout(out, target.max_output_bytes.max(1));
            // Known secrets go, as for HTTP tools (tool::http).
            rein_core::redact::known_json(&mut result);
            Ok(ToolOutput {
                result,
                truncated,
                replayed: false,
            })
        }
        Ended::Exited(status) => Err(exit_failure(name, status, out, err)),
        Ended::Deadline => Err(Failure::new(name, Category::Timeout)
            .with_effect(Effect::MaybeApplied)
            .with_human_message(format!(
                "{name}: killed at its deadline of {limit:?} ({group}); {}",
                stderr_note(err)
            ))),
        Ended::Cancelled => Err(Failure::new(name, Category::Cancelled)
            .with_effect(Effect::MaybeApplied)
            .with_human_message(format!("{name}: cancelled ({group}); {}", stderr_note(err)))),
        Ended::WaitFailed(e) => Err(Failure::new(name, Category::Unknown)
            .with_effect(Effect::MaybeApplied)
            .with_human_message(format!(
                "{name}: cannot wait for the process: {e} ({group})"
            ))),
    }
}

/// A non-zero exit: the program's structured error if it printed one, else
/// the exit code's classification.
fn exit_failure(name: &str, status: ExitStatus, out: &Captured, err: &Captured) -> Failure {
    use std::os::unix::process::ExitStatusExt;
    let how = match (status.code(), status.signal()) {
        (Some(code), _) => format!("exited with code {code}"),
        (None, Some(signal)) => format!("was killed by signal {signal}"),
        (None, None) => "ended abnormally".to_owned(),
    };
    if status.code() == Some(GATE_REFUSED) && out.total == 0 {
        tracing::debug!(
            tool = name,
            "exit code 125: the program may not have started"
        );
    }
    let structured = (!out.truncated())
        .then(|| serde_json::from_slice::<ErrorBody>(&out.kept).ok())
        .flatten();
    if let Some(ErrorBody { error }) = structured {
        let mut f = Failure::new(name, error.category)
            .with_effect(error.effect.unwrap_or(Effect::MaybeApplied));
        if let Some(retryable) = error.retryable {
            f = f.with_retryable(retryable);
        }
        if let Some(ms) = error.retry_after_ms {
            f = f.with_retry_after(Duration::from_millis(ms));
        }
        let message = error.message.unwrap_or_default();
        return f.with_human_message(format!("{name} {how}: {message}; {}", stderr_note(err)));
    }
    let f = if status.code() == Some(EX_TEMPFAIL) {
        Failure::new(name, Category::Transient).with_retryable(true)
    } else {
        Failure::new(name, Category::Unknown).with_retryable(false)
    };
    f.with_effect(Effect::MaybeApplied)
        .with_human_message(format!("{name} {how}; {}", stderr_note(err)))
}

/// A failure before the program started: nothing happened.
pub(super) fn not_started(name: &str, category: Category, why: &str) -> Failure {
    Failure::new(name, category)
        .with_effect(Effect::NotApplied)
        .with_human_message(format!("{name} was not started: {why}"))
}

/// A store failure before the program started: retryable when the store
/// is only briefly unavailable.
pub(super) fn store_failure(name: &str, what: &str, e: &StoreError) -> Failure {
    let category = if e.is_transient() {
        Category::Transient
    } else {
        Category::Unknown
    };
    not_started(name, category, &format!("cannot {what}: {e}"))
}

#[cfg(test)]
mod tests {
    use std::os::unix::process::ExitStatusExt;

    use super::super::output::captured;
    use super::*;

    fn exited(code: i32) -> ExitStatus {
        ExitStatus::from_raw(code << 8)
    }

    #[test]
    fn non_utf8_output_does_not_panic() {
        let out = captured(&[0xff, 0xfe, b'x'], 3);
        let (v, _) = shape_stdout(&out, 10);
        assert!(v["text"].as_str().unwrap().ends_with('x'));
        let f = exit_failure("t", exited(1), &out, &out);
        assert!(f.human_message().contains("stderr:"));
    }

    #[test]
    fn exit_codes_classify_and_tempfail_is_retryable() {
        let none = Captured::default();
        let f = exit_failure("t", exited(2), &none, &none);
        assert_eq!(f.category(), Category::Unknown);
        assert!(!f.retryable());
        assert_eq!(f.effect(), Effect::MaybeApplied);
        let f = exit_failure("t", exited(EX_TEMPFAIL), &none, &none);
        assert_eq!(f.category(), Category::Transient);
        assert!(f.retryable());
        assert_eq!(f.effect(), Effect::MaybeApplied);
        let f = exit_failure("t", ExitStatus::from_raw(9), &none, &none);
        assert!(
            f.human_message().contains("signal 9"),
            "{}",
            f.human_message()
        );
    }

    #[test]
    fn a_structured_error_wins_over_the_exit_code() {
        let body = br#"{"error":{"category":"conflict","effect":"not_applied","message":"order is locked"}}"#;
        let out = captured(body, body.len() as u64);
        let f = exit_failure("t", exited(EX_TEMPFAIL), &out, &Captured::default());
        assert_eq!(f.category(), Category::Conflict);
        assert_eq!(f.effect(), Effect::NotApplied);
        assert!(!f.retryable());
        assert!(f.human_message().contains("order is locked"));
        assert!(!f.model_message().contains("order is locked"));
    }
}
