//! Checkpoints: [`Checkpoint`], the whole state of a run after a step, and
//! [`CheckpointDelta`], what one step adds to it.
//!
//! # Why a step appends instead of rewriting
//!
//! A run's transcript and its call results only grow. When every step
//! wrote them whole, step `n` wrote `O(n)` bytes and a run of `n` steps
//! `O(n²)`: a 400-step run rewrote its first tool result 400 times. A step
//! now writes a [`CheckpointDelta`] holding only what it added (its
//! messages, its calls, its progress items) and replacing only what is
//! small (the budget consumed, the model's position), so both the bytes
//! written and the work of a step are `O(step size)`, however long the run.
//!
//! The latest checkpoint is rebuilt when it is read (a resume, a report):
//! the latest whole [`Checkpoint`] written for the run (the *base*; none
//! for a run that only ever appended) with every delta after it applied in
//! step order ([`Checkpoint::apply`]). Reading is `O(run length)`, once per
//! resume, instead of writing `O(run length)` once per step.
//!
//! # Why not a delta plus periodic compaction
//!
//! A compaction every `k` steps writes the whole state `n / k` times, so a
//! run still writes `O(n² / k)` bytes: quadratic with a smaller constant,
//! and a latency spike on every `k`-th step. Appending keeps each step's
//! cost flat. Whole checkpoints stay a valid base for the two cases that
//! need one: checkpoints written before deltas existed (a run interrupted
//! under an older rein and resumed by this one continues by appending to
//! its last whole checkpoint), and a writer that wants to compact.
//!
//! # How a delta applies
//!
//! The store does not know the engine's shape of `messages` and `state`;
//! it knows only that the transcript is a JSON array, and that `state` is a
//! JSON object whose members are either lists that grow or values that are
//! replaced. [`Checkpoint::apply`] is that one rule:
//!
//! | checkpoint field | delta field | applied as |
//! | --- | --- | --- |
//! | `messages` (array) | `messages` | appended |
//! | `completed_intents` | `completed_intents` | appended |
//! | `state.<name>` (array) | `appended.<name>` | appended (created when absent) |
//! | `state.<name>` | `state.<name>` | replaced |
//! | `step`, `consumed`, `elapsed_ms`, `at_ms` | the same | replaced |

use rein_core::Timestamp;
use std::collections::BTreeMap;

use rein_core::deadline::Usage;
use rein_core::{IntentId, RunId};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::error::StoreError;

/// The state of a run after a step, from which a resume continues.
///
/// Written whole, one per (run, step): writing the same step again
/// replaces it. This is also what [`RunStore::latest_checkpoint`] returns,
/// rebuilt from the latest whole checkpoint and the [`CheckpointDelta`]s
/// after it (see [`CheckpointDelta`]).
///
/// # Why it holds what it holds
///
/// A resume must neither repeat a completed step (invariant 8) nor forget
/// what it consumed (invariant 2): so the transcript, the intents already
/// completed, and the budget consumed so far. `messages` and `state` are
/// opaque to the store; the engine owns their shape.
///
/// [`RunStore::latest_checkpoint`]: crate::RunStore::latest_checkpoint
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Checkpoint {
    /// The run.
    pub run_id: RunId,
    /// The step it follows.
    pub step: u32,
    /// The transcript as the engine keeps it.
    pub messages: Value,
    /// Intents that completed and must not run again.
    pub completed_intents: Vec<IntentId>,
    /// Budget consumed so far.
    pub consumed: Usage,
    /// Wall-clock time consumed so far, in milliseconds.
    pub elapsed_ms: u64,
    /// Engine-opaque extras (loop-guard state, breaker snapshots, ...).
    pub state: Value,
    /// When written, ms since the Unix epoch.
    pub at_ms: Timestamp,
}

/// What one step adds to its run's checkpoint: the checkpoint of step
/// `step` is the one of step `step - 1` with this applied
/// ([`Checkpoint::apply`]).
///
/// # Contract
///
/// A delta of step `s` is stored only when the run's latest checkpoint
/// (whole or rebuilt) is of step `s - 1` (`0`: none yet), or when it
/// replaces the delta of the latest step itself (an engine re-running the
/// tail of a step after a crash); anything else is refused with
/// [`StoreError::Invalid`], since applying it to another step's state
/// would rebuild a checkpoint nobody wrote.
///
/// The first delta of a run that has no whole checkpoint holds the whole
/// of what the run started with (its first messages, every `state` member
/// a resume requires): it applies to [`Checkpoint::empty`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckpointDelta {
    /// The run.
    pub run_id: RunId,
    /// The step it follows.
    pub step: u32,
    /// Messages the step added to the transcript, in order.
    pub messages: Vec<Value>,
    /// Intents the step completed.
    pub completed_intents: Vec<IntentId>,
    /// Items the step added to the lists of the checkpoint's `state`, by
    /// member name (a member absent from `state` starts as an empty list).
    pub appended: BTreeMap<String, Vec<Value>>,
    /// Members of the checkpoint's `state` the step replaced.
    pub state: Map<String, Value>,
    /// Budget consumed so far (the run's total, not the step's).
    pub consumed: Usage,
    /// Wall-clock time consumed so far, in milliseconds (the run's total).
    pub elapsed_ms: u64,
    /// When written, ms since the Unix epoch.
    pub at_ms: Timestamp,
}

impl Checkpoint {
    /// The checkpoint of a run before its first step: nothing in it. The
    /// base of a run that only ever appended.
    pub fn empty(run_id: RunId) -> Checkpoint {
        Checkpoint {
            run_id,
            step: 0,
            messages: Value::Array(Vec::new()),
            completed_intents: Vec::new(),
            consumed: Usage::default(),
            elapsed_ms: 0,
            state: Value::Object(Map::new()),
            at_ms: Timestamp::from_millis(0),
        }
    }

    /// Applies `delta`, the next step's additions: this becomes the
    /// checkpoint of `delta.step` (see [`CheckpointDelta`] for the
    /// rule).
    ///
    /// # Errors
    ///
    /// [`StoreError::Corrupt`] when `delta` is not of the next step, or
    /// when the checkpoint's `messages` is not an array, its `state` not an
    /// object, or a member `delta` appends to not a list: the stored parts
    /// do not fit together, and rebuilding them anyway would make up a
    /// checkpoint.
    pub fn apply(&mut self, delta: CheckpointDelta) -> Result<(), StoreError> {
        let corrupt = |column: &'static str, reason: String| StoreError::Corrupt {
            table: "checkpoints",
            column,
            reason: format!(
                "{reason}, so the delta of step {} of run {} does not apply",
                delta.step, delta.run_id
            ),
        };
        if delta.step != self.step.saturating_add(1) {
            return Err(corrupt(
                "step",
                format!("the checkpoint it follows is of step {}", self.step),
            ));
        }
        let Value::Array(messages) = &mut self.messages else {
            return Err(corrupt("messages", "the transcript is not an array".into()));
        };
        let Value::Object(state) = &mut self.state else {
            return Err(corrupt("state", "the state is not an object".into()));
        };
        // Checked before anything changes: a refused delta leaves the
        // checkpoint as it was.
        if let Some(name) = delta
            .appended
            .keys()
            .find(|name| state.get(name.as_str()).is_some_and(|v| !v.is_array()))
        {
            return Err(corrupt("state", format!("`state.{name}` is not a list")));
        }
        messages.extend(delta.messages);
        self.completed_intents.extend(delta.completed_intents);
        for (name, items) in delta.appended {
            if let Value::Array(list) = state
                .entry(name)
                .or_insert_with(|| Value::Array(Vec::new()))
            {
                list.extend(items);
            }
        }
        for (name, value) in delta.state {
            state.insert(name, value);
        }
        self.step = delta.step;
        self.consumed = delta.consumed;
        self.elapsed_ms = delta.elapsed_ms;
        self.at_ms = delta.at_ms;
        Ok(())
    }

    /// The checkpoint `base` (or [`Checkpoint::empty`] when `None`) with
    /// `deltas` applied in order; `None` when there is neither.
    ///
    /// # Errors
    ///
    /// See [`Checkpoint::apply`].
    pub fn rebuild(
        run_id: &RunId,
        base: Option<Checkpoint>,
        deltas: impl IntoIterator<Item = CheckpointDelta>,
    ) -> Result<Option<Checkpoint>, StoreError> {
        let mut deltas = deltas.into_iter().peekable();
        if base.is_none() && deltas.peek().is_none() {
            return Ok(None);
        }
        let mut checkpoint = base.unwrap_or_else(|| Checkpoint::empty(run_id.clone()));
        for delta in deltas {
            checkpoint.apply(delta)?;
        }
        Ok(Some(checkpoint))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use serde_json::json;

    fn run() -> RunId {
        RunId::new("r-1").unwrap()
    }

    fn delta(step: u32, message: &str, call: Value, served: u64) -> CheckpointDelta {
        CheckpointDelta {
            run_id: run(),
            step,
            messages: vec![json!(message)],
            completed_intents: vec![IntentId::new(format!("i-{step}")).unwrap()],
            appended: BTreeMap::from([("calls".to_owned(), vec![call])]),
            state: Map::from_iter([("served".to_owned(), json!(served))]),
            consumed: Usage {
                steps: step,
                ..Usage::default()
            },
            elapsed_ms: u64::from(step) * 10,
            at_ms: Timestamp::from_millis(u64::from(step) * 100),
        }
    }

    #[test]
    fn deltas_applied_in_order_append_lists_and_replace_the_rest() {
        let rebuilt = Checkpoint::rebuild(
            &run(),
            None,
            [delta(1, "a", json!(1), 1), delta(2, "b", json!(2), 5)],
        )
        .unwrap()
        .unwrap();
        assert_eq!(rebuilt.step, 2);
        assert_eq!(rebuilt.messages, json!(["a", "b"]));
        assert_eq!(rebuilt.state, json!({"calls": [1, 2], "served": 5}));
        assert_eq!(rebuilt.completed_intents.len(), 2);
        assert_eq!(
            (rebuilt.consumed.steps, rebuilt.elapsed_ms, rebuilt.at_ms),
            (2, 20, Timestamp::from_millis(200))
        );
    }

    #[test]
    fn a_delta_applies_on_top_of_a_whole_checkpoint() {
        let mut base = Checkpoint::empty(run());
        base.step = 4;
        base.messages = json!(["old"]);
        base.state = json!({"calls": [0], "facts": ["f"]});
        let rebuilt = Checkpoint::rebuild(&run(), Some(base), [delta(5, "new", json!(5), 9)])
            .unwrap()
            .unwrap();
        assert_eq!(rebuilt.messages, json!(["old", "new"]));
        assert_eq!(
            rebuilt.state,
            json!({"calls": [0, 5], "facts": ["f"], "served": 9})
        );
    }

    #[test]
    fn nothing_stored_rebuilds_nothing() {
        assert_eq!(Checkpoint::rebuild(&run(), None, []).unwrap(), None);
    }

    #[test]
    fn a_delta_that_skips_a_step_does_not_apply() {
        let mut checkpoint = Checkpoint::empty(run());
        let err = checkpoint.apply(delta(2, "b", json!(2), 1)).unwrap_err();
        assert!(
            matches!(&err, StoreError::Corrupt { column: "step", reason, .. }
                if reason.contains("of step 0") && reason.contains("delta of step 2")),
            "{err}"
        );
        assert_eq!(checkpoint, Checkpoint::empty(run()), "left as it was");
    }

    #[test]
    fn appending_to_a_member_that_is_not_a_list_does_not_apply_and_changes_nothing() {
        let mut checkpoint = Checkpoint::empty(run());
        checkpoint.state = json!({"calls": "not a list"});
        let before = checkpoint.clone();
        let err = checkpoint.apply(delta(1, "a", json!(1), 1)).unwrap_err();
        assert!(
            err.to_string().contains("`state.calls` is not a list"),
            "{err}"
        );
        assert_eq!(checkpoint, before);
        checkpoint.state = json!([]);
        let err = checkpoint.apply(delta(1, "a", json!(1), 1)).unwrap_err();
        assert!(err.to_string().contains("not an object"), "{err}");
    }
}
