//! What a run has learned and tried: the loop guard's progress inputs, and
//! their state digest kept up to date as they grow.
//!
//! # Why incremental
//!
//! The no-progress rule needs the state digest after every step. Built
//! from scratch it hashes every fact the run ever obtained (each one a
//! tool's whole result) on every step: `O(run length)` per step. Here each
//! fact and each tool is hashed once, when it is first seen, into a
//! [`StateDigestBuilder`] that lives as long as the run; a step hashes only
//! what it added. The digest is the same as [`StateDigest::of`] over the
//! whole sets (a property test says so), so a resumed run, which rebuilds
//! the builder from its checkpoint ([`Progress::from_parts`]), continues
//! with the digests it would have had.
//!
//! What is left per step is [`StateDigestBuilder::finish`]: one SHA-256
//! over the 32-byte item hashes, about 13 KB for a 400-step run, against
//! the facts themselves before.

use std::collections::BTreeSet;

use rein_core::loop_guard::{Action, StateDigest, StateDigestBuilder};
use serde_json::Value;

/// The facts a run obtained and the tools it attempted, with their digest.
///
/// The digest covers the facts and the tools attempted, by name (rephrasing
/// a query of the same tool is not progress); the run keeps no todo list.
#[derive(Debug, Clone, Default)]
pub(super) struct Progress {
    facts: BTreeSet<String>,
    tools_tried: BTreeSet<String>,
    digest: StateDigestBuilder,
}

impl Progress {
    /// A run that has learned and tried nothing yet.
    pub(super) fn new() -> Progress {
        Progress::default()
    }

    /// A restored run's progress: `facts` and `tools_tried` as checkpointed,
    /// hashed once.
    pub(super) fn from_parts(facts: BTreeSet<String>, tools_tried: BTreeSet<String>) -> Progress {
        let mut digest = StateDigestBuilder::new();
        for fact in &facts {
            digest.fact(fact);
        }
        for tool in &tools_tried {
            digest.action(tool_action(tool));
        }
        Progress {
            facts,
            tools_tried,
            digest,
        }
    }

    /// Records `fact`; whether it is new (only a new fact is hashed).
    pub(super) fn learn(&mut self, fact: &str) -> bool {
        if self.facts.contains(fact) {
            return false;
        }
        self.digest.fact(fact);
        self.facts.insert(fact.to_owned())
    }

    /// Records an attempt of `tool`; whether it is the tool's first.
    pub(super) fn try_tool(&mut self, tool: &str) -> bool {
        if self.tools_tried.contains(tool) {
            return false;
        }
        self.digest.action(tool_action(tool));
        self.tools_tried.insert(tool.to_owned())
    }

    /// The state digest of everything recorded so far.
    pub(super) fn digest(&self) -> StateDigest {
        self.digest.finish()
    }

    /// The facts obtained.
    #[cfg(test)]
    pub(super) fn facts(&self) -> &BTreeSet<String> {
        &self.facts
    }

    /// The tools attempted, by name.
    #[cfg(test)]
    pub(super) fn tools_tried(&self) -> &BTreeSet<String> {
        &self.tools_tried
    }
}

/// A tool attempted, as the digest sees it: by name, arguments left out.
fn tool_action(tool: &str) -> Action<'_> {
    Action::new(tool, &Value::Null)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use proptest::prelude::*;

    use super::*;

    /// The digest as the loop computed it before it was incremental: every
    /// fact and every tool, hashed again.
    fn from_scratch(facts: &BTreeSet<String>, tools: &BTreeSet<String>) -> StateDigest {
        StateDigest::of(
            facts.iter().map(String::as_str),
            std::iter::empty::<&str>(),
            tools.iter().map(|t| tool_action(t)),
        )
    }

    /// A step's additions: facts and tools from small alphabets, so that
    /// steps repeat what earlier steps (and the same step) added.
    fn steps() -> impl Strategy<Value = Vec<(Vec<String>, Vec<String>)>> {
        let fact = "[a-e]{0,3}";
        let tool = prop::sample::select(vec!["get_order", "update_order", "send_email"]);
        prop::collection::vec(
            (
                prop::collection::vec(fact, 0..5),
                prop::collection::vec(tool.prop_map(str::to_owned), 0..3),
            ),
            0..30,
        )
    }

    proptest! {
        /// After every step the incremental digest equals the digest of the
        /// whole sets, and a progress rebuilt from them (a resume) carries
        /// on with the same digests.
        #[test]
        fn the_incremental_digest_equals_the_one_from_scratch_after_every_step(
            steps in steps(),
            resume_at in 0usize..30,
        ) {
            let mut progress = Progress::new();
            let (mut facts, mut tools) = (BTreeSet::new(), BTreeSet::new());
            for (i, (step_facts, step_tools)) in steps.into_iter().enumerate() {
                if i == resume_at {
                    progress = Progress::from_parts(facts.clone(), tools.clone());
                }
                for fact in step_facts {
                    prop_assert_eq!(progress.learn(&fact), !facts.contains(&fact));
                    facts.insert(fact);
                }
                for tool in step_tools {
                    prop_assert_eq!(progress.try_tool(&tool), !tools.contains(&tool));
                    tools.insert(tool);
                }
                prop_assert_eq!(progress.digest(), from_scratch(&facts, &tools));
                prop_assert_eq!(progress.facts(), &facts);
                prop_assert_eq!(progress.tools_tried(), &tools);
            }
        }
    }

    #[test]
    fn a_repeated_fact_or_tool_is_not_new_and_leaves_the_digest_alone() {
        let mut progress = Progress::new();
        assert!(progress.learn("get_order|{}|open"));
        assert!(progress.try_tool("get_order"));
        let digest = progress.digest();
        assert!(!progress.learn("get_order|{}|open"));
        assert!(!progress.try_tool("get_order"));
        assert_eq!(progress.digest(), digest);
        assert!(progress.learn("get_order|{}|shipped"));
        assert_ne!(progress.digest(), digest, "a new fact is progress");
    }
}
