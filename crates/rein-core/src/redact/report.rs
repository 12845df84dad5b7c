//! The pass every run report takes when it is derived: [`report`].
//!
//! # Why one pass at the sink
//!
//! A report's prose is assembled from many texts: why the run stopped
//! ([`End`](crate::report::End): a panic payload, a store error), why its
//! settlement handed it off, each failure's reason, each compensation's
//! note. Some pass a funnel on their way (a [`Failure`](crate::Failure)'s
//! message), others are `format!`ed from an error on the spot. Redacting
//! the finished report, field by field, in
//! [`derive`](crate::report::derive) — the one function that builds
//! reports — covers every text, including ones added later.
//!
//! Prose (summary, recommendation, reasons, notes, the basis) is redacted
//! like any text: known secrets, URL queries and userinfo. Data a program
//! reads back — the results of completed actions and of the handoff
//! timeline, the model's answer, the task — loses only known secrets, so a
//! presigned URL the run produced survives.

use serde_json::Value;

use crate::outcome::RunReport;

use super::Redactor;
use super::process::process;

/// Fields whose values are data, not prose (see the module docs).
const DATA_FIELDS: &[&str] = &["result", "answer", "input"];

/// Redacts `report` in place; see the module docs.
pub(crate) fn report(report: &mut RunReport) {
    let Ok(mut doc) = serde_json::to_value(&*report) else {
        return;
    };
    walk(&process(), &mut doc, false);
    if let Ok(clean) = serde_json::from_value(doc) {
        *report = clean;
    }
}

fn walk(redactor: &Redactor, value: &mut Value, data: bool) {
    if data {
        redactor.redact_known_json(value);
        return;
    }
    match value {
        Value::Object(map) => {
            // `{"kind": "answer", "detail": …}`: the basis of a run that
            // answered holds the answer.
            let answer = map.get("kind").and_then(Value::as_str) == Some("answer");
            for (key, v) in map.iter_mut() {
                let data = DATA_FIELDS.contains(&key.as_str()) || (answer && key == "detail");
                walk(redactor, v, data);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|v| walk(redactor, v, false)),
        other => {
            redactor.redact_json(other);
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use crate::call::{CallResult, Planned};
    use crate::report::{End, RunFacts, Settled, derive};
    use crate::{IntentId, RunId, ToolClass};

    use super::super::{Secrets, register};

    const CANARY: &str = "report-canary-5e1f";

    fn facts(end: End, settled: Settled, result: serde_json::Value) -> RunFacts {
        RunFacts {
            run_id: RunId::new("r-redact").unwrap(),
            agent: "a".into(),
            input: "task".into(),
            end,
            settled,
            outcome: None,
            calls: vec![CallResult {
                planned: Planned {
                    intent_id: IntentId::new("i-1").unwrap(),
                    call_id: "c-1".into(),
                    tool: "lookup".into(),
                    args: json!({}),
                    step: 1,
                    position: 0,
                    salvaged: false,
                },
                class: ToolClass::Read,
                outcome: Ok(result),
                ledger: None,
                attempts: 1,
            }],
            consumed: Default::default(),
            elapsed_ms: 1,
            steps: 1,
            models: Vec::new(),
            compensations: Vec::new(),
            resume: None,
            in_flight: Vec::new(),
            strategies_not_tried: Vec::new(),
            notes: Vec::new(),
            hint: Default::default(),
            owners: Default::default(),
        }
    }

    #[test]
    fn derive_redacts_the_end_the_hand_off_reason_and_results_but_keeps_presigned_urls() {
        let mut secrets = Secrets::new();
        secrets.insert(CANARY).unwrap();
        register(&secrets);
        let presigned = "https://bucket.example/f?X-Amz-Signature=abc123";
        let report = derive(
            &facts(
                End::Internal(format!("panicked: key {CANARY} at http://h/x?token=t")),
                Settled::HandedOff(format!("the store said {CANARY}")),
                json!({"echo": CANARY, "download": presigned}),
            ),
            &[],
        );
        let text = serde_json::to_string(&report).unwrap();
        assert!(!text.contains(CANARY), "{text}");
        assert!(!text.contains("token=t"), "{text}");
        assert_eq!(report.completed[0].result["download"], presigned);
        assert_eq!(report.completed[0].result["echo"], "[redacted]");
        let Some(basis) = &report.basis else {
            panic!("a derived report has its basis")
        };
        assert_eq!(
            basis.end,
            End::Internal("panicked: key [redacted] at http://h/x?[redacted]".into())
        );
        assert_eq!(
            basis.settled,
            Settled::HandedOff("the store said [redacted]".into())
        );
    }
}
