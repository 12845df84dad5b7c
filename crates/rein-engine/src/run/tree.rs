//! Agent trees: the registry of live runs, through which a cancellation
//! reaches any of them, and a resumed run's place in its tree.
//!
//! # Why the tree is rebuilt from the store
//!
//! A model that can start agents can fan out without limit, so the tree
//! has a depth, a count of child runs and a token total
//! ([`AgentGraphLimits`](rein_core::registry::AgentGraphLimits); the agent
//! tool that starts children, and refuses them past a bound, is
//! [`crate::tool::agent`]). A crash must not reset those bounds: a resumed
//! run's depth and its tree's use are read back from the store
//! ([`Engine::lineage_of`]).

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, PoisonError};

use rein_core::RunId;

use super::binding::AgentBinding;
use super::{CancellationToken, Engine, EngineError, Lineage, Tree};

/// Resolves an agent's name to a fresh binding (a new provider per run),
/// for the engine to start child runs with.
pub type AgentResolver = Arc<dyn Fn(&str) -> Option<AgentBinding> + Send + Sync>;

/// The cancellation tokens of the runs this engine drives (roots and
/// children alike).
pub(crate) struct LiveRegistry {
    runs: Mutex<HashMap<RunId, CancellationToken>>,
    /// How many runs are live, for whoever waits for them to end (a drain).
    count: tokio::sync::watch::Sender<usize>,
    /// Every run live since [`Engine::note_runs`], once it was called.
    noted: Mutex<Option<std::collections::BTreeSet<RunId>>>,
}

impl Default for LiveRegistry {
    fn default() -> Self {
        LiveRegistry {
            runs: Mutex::default(),
            count: tokio::sync::watch::Sender::new(0),
            noted: Mutex::new(None),
        }
    }
}

/// Keeps a run registered while it is driven.
pub(crate) struct LiveEntry<'a> {
    registry: &'a LiveRegistry,
    run_id: RunId,
}

impl Drop for LiveEntry<'_> {
    fn drop(&mut self) {
        let mut runs = self.registry.lock();
        runs.remove(&self.run_id);
        self.registry.count.send_replace(runs.len());
    }
}

impl LiveRegistry {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<RunId, CancellationToken>> {
        self.runs.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn register(&self, run_id: &RunId, token: &CancellationToken) -> LiveEntry<'_> {
        let mut runs = self.lock();
        runs.insert(run_id.clone(), token.clone());
        self.count.send_replace(runs.len());
        if let Some(noted) = self
            .noted
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_mut()
        {
            noted.insert(run_id.clone());
        }
        drop(runs);
        LiveEntry {
            registry: self,
            run_id: run_id.clone(),
        }
    }
}

impl Engine {
    /// Cancels a run this engine is driving — a root (its children follow)
    /// or a single child (its parent and siblings do not). False when the
    /// run is not driven here.
    pub fn cancel(&self, run_id: &RunId) -> bool {
        match self.shared.live.lock().get(run_id) {
            Some(token) => {
                token.cancel();
                true
            }
            None => false,
        }
    }

    /// Whether this engine is driving `run_id` right now.
    pub fn is_live(&self, run_id: &RunId) -> bool {
        self.shared.live.lock().contains_key(run_id)
    }

    /// The runs this engine is driving right now (roots and children).
    pub fn live_runs(&self) -> Vec<RunId> {
        self.shared.live.lock().keys().cloned().collect()
    }

    /// How many runs this engine drives, as it changes: a drain waits on
    /// it for the last run to end instead of polling.
    pub fn live_count(&self) -> tokio::sync::watch::Receiver<usize> {
        self.shared.live.count.subscribe()
    }

    /// From now on, notes every run this engine drives — those live now
    /// and every one that starts later, however briefly — for
    /// [`Engine::noted_runs`]: a drain's account of what it finished and
    /// what it handed on misses none.
    pub fn note_runs(&self) {
        let runs = self.shared.live.lock();
        let mut noted = self
            .shared
            .live
            .noted
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        noted
            .get_or_insert_with(Default::default)
            .extend(runs.keys().cloned());
    }

    /// The runs noted since [`Engine::note_runs`] (none before it).
    pub fn noted_runs(&self) -> Vec<RunId> {
        self.shared
            .live
            .noted
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .flatten()
            .cloned()
            .collect()
    }

    /// A resumed run's place in its tree, rebuilt from the store: its
    /// depth (by walking up its parents) and what its root's tree already
    /// used (every descendant's runs and tokens), so a crash never resets
    /// the tree's bounds.
    pub(super) async fn lineage_of(&self, run_id: &RunId) -> Result<Lineage, EngineError> {
        let mut depth = 0u32;
        let mut parent = None;
        let mut root = run_id.clone();
        let mut cursor = self.store.get_run(run_id).await?;
        while let Some(record) = cursor {
            let Some(up) = record.parent_run_id.clone() else {
                break;
            };
            if parent.is_none() {
                parent = Some(up.clone());
            }
            depth = depth.saturating_add(1);
            root = up.clone();
            // A cycle cannot be written (ids derive from intents), but a
            // damaged store must not loop forever.
            if depth > 64 {
                break;
            }
            cursor = self.store.get_run(&up).await?;
        }
        // Tokens are counted where they were spent: each run's own model
        // calls (a parent's consumption also carries its finished
        // children's, so reports would count them twice, and an
        // interrupted child has no report yet).
        let root_events = self.store.events(&root, 0).await?;
        let tree = Tree::of_class(super::ctx::class_of(enqueued(&root_events)));
        tree.tokens
            .fetch_add(tokens_in(&root_events), Ordering::AcqRel);
        let mut pending = vec![root];
        while let Some(run) = pending.pop() {
            for child in self.store.children_of(&run).await? {
                tree.runs.fetch_add(1, Ordering::AcqRel);
                tree.tokens
                    .fetch_add(self.own_tokens(&child.run_id).await?, Ordering::AcqRel);
                pending.push(child.run_id);
            }
        }
        Ok(Lineage {
            parent,
            depth,
            tree: Arc::new(tree),
        })
    }

    /// Tokens `run`'s own model calls used, from its durable events.
    async fn own_tokens(&self, run: &RunId) -> Result<u64, EngineError> {
        Ok(tokens_in(&self.store.events(run, 0).await?))
    }
}

/// Tokens the model calls among `events` used.
fn tokens_in(events: &[rein_core::Event]) -> u64 {
    events
        .iter()
        .filter_map(|e| match &e.data {
            // An answered call's usage; a failed one's tokens spent.
            rein_core::EventData::ModelCallFinished(f) => Some(f.tokens()),
            _ => None,
        })
        .sum()
}

/// Whether the run of `events` was queued before it started (its
/// `run_started` says so): a resumed tree keeps its root's governor class.
fn enqueued(events: &[rein_core::Event]) -> bool {
    events.iter().any(|e| match &e.data {
        rein_core::EventData::RunStarted(started) => started.enqueued,
        _ => false,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use rein_core::Timestamp;
    use rein_core::event::{
        Flag, ModelAnswered, ModelCallFailed, ModelCallFinished, ModelCallResult,
    };
    use rein_core::model::{FinishReason, TokenUsage};
    use rein_core::{Category, Event, TenantId};
    use rein_store::{NewRun, StepCommit, Store};
    use rein_store_sqlite::SqliteStore;
    use serde_json::json;

    /// A run of `agent` under `parent` whose model calls used `tokens`
    /// (one answered call each), plus a failed call that spent 5.
    async fn run_with_calls(
        store: &Arc<dyn Store>,
        id: &str,
        parent: Option<&str>,
        tokens: &[u64],
    ) {
        let run_id = RunId::new(id).unwrap();
        store
            .create_run(NewRun {
                run_id: run_id.clone(),
                tenant: TenantId::new("t").unwrap(),
                agent: "a".into(),
                input: "x".into(),
                parent_run_id: parent.map(|p| RunId::new(p).unwrap()),
                budget: json!({}),
                created_at_ms: Timestamp::from_millis(1),
                trace_parent: None,
            })
            .await
            .unwrap();
        let event = |ok: bool, used: u64| Event {
            run_id: run_id.clone(),
            seq: 0,
            step: 1,
            intent_id: None,
            attempt_id: None,
            idempotency_key: None,
            at_ms: Timestamp::from_millis(2),
            data: ModelCallFinished {
                provider: "p".into(),
                model: "m".into(),
                attempt: 1,
                cost: None,
                elapsed: None,
                first_event: None,
                result: if ok {
                    ModelCallResult::Answered(ModelAnswered {
                        ok: Flag,
                        usage: TokenUsage {
                            input: used - 1,
                            output: 1,
                        },
                        finish: FinishReason::Stop,
                        tool_calls: Vec::new(),
                    })
                } else {
                    ModelCallResult::Failed(ModelCallFailed {
                        ok: Flag,
                        category: Category::Transient,
                        reason: "cut".into(),
                        tokens_spent: 5,
                        key_env: None,
                    })
                },
            }
            .into(),
        };
        let mut events: Vec<Event> = tokens.iter().map(|t| event(true, *t)).collect();
        events.push(event(false, 0));
        store
            .commit_step(
                &run_id,
                StepCommit {
                    events,
                    ..StepCommit::default()
                },
            )
            .await
            .unwrap();
    }

    #[tokio::test]
    async fn a_resumed_run_rebuilds_its_depth_and_its_trees_use_from_the_store() {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn Store> = Arc::new(SqliteStore::open(dir.path().join("r.db")).unwrap());
        // root ─┬─ a ── a1
        //       └─ b
        run_with_calls(&store, "root", None, &[100, 50]).await;
        run_with_calls(&store, "a", Some("root"), &[20]).await;
        run_with_calls(&store, "a1", Some("a"), &[7, 3]).await;
        run_with_calls(&store, "b", Some("root"), &[]).await;
        let engine = Engine::builder(store).build().unwrap();

        let lineage = engine.lineage_of(&RunId::new("a1").unwrap()).await.unwrap();
        assert_eq!(lineage.depth, 2);
        assert_eq!(lineage.parent, Some(RunId::new("a").unwrap()));
        // Every run's own calls, the root's included; failed calls count
        // what they spent.
        assert_eq!(lineage.tree.tokens.load(Ordering::Acquire), 180 + 4 * 5);
        assert_eq!(lineage.tree.runs.load(Ordering::Acquire), 3, "child runs");

        let root = engine
            .lineage_of(&RunId::new("root").unwrap())
            .await
            .unwrap();
        assert_eq!((root.depth, root.parent), (0, None));
        assert_eq!(
            root.tree.tokens.load(Ordering::Acquire),
            200,
            "the same tree"
        );
    }
}
