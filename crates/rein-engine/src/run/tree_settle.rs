//! Settling an agent tree with its root: a root that fails after its
//! children changed the world undoes their effects too, in one reverse
//! order across the whole tree.
//!
//! # Why
//!
//! A child run's effects are the effects of the parent's call that started
//! it. A child that succeeded keeps its effects (its own run ended well),
//! so when its root later fails and compensates, leaving the child's writes
//! standing would undo only half of the task. Each effect stays in the
//! ledger of the run that caused it (its idempotency key, its compensation
//! binding and its claim belong there), and the root's settlement reads the
//! ledgers of every descendant and undoes them within their own runs.
//!
//! # Order
//!
//! An effect's place in the tree is its path: the (step, ordinal) of the
//! call in each ancestor that led to it, then its own. A child's effects
//! happened inside the parent's call that started it, so they sort between
//! the parent's earlier and later effects; reverse path order is reverse
//! execution order (calls of one step were concurrent: any order of those
//! is a true reverse order).

use std::collections::{HashMap, HashSet};

use rein_core::outcome::CompensationResult;
use rein_core::{IntentId, LedgerRecord, LedgerStatus, Outcome, RunId, ToolClass};
use rein_store::{RunRecord, StepCommit, StoreError};

use super::binding::{AgentBinding, ToolTarget};
use super::emitter::{Correlation, Emitter, unix_ms};
use super::{CancellationToken, Engine, Lineage, RunCtx, claim_id};

/// Where an effect sits in the tree's execution order.
pub(super) type Path = Vec<(u32, u32)>;

/// A run below the root, as its settlement sees it.
pub(super) struct Member {
    /// The run.
    pub(super) record: RunRecord,
    /// Its agent, bound afresh; `None` when this process cannot bind it.
    pub(super) binding: Option<AgentBinding>,
    /// The path of the parent's call that started it.
    pub(super) path: Path,
    /// Its ledger when the settlement began.
    pub(super) ledger: Vec<LedgerRecord>,
    /// (step, ordinal) of each of its planned intents.
    order: HashMap<IntentId, (u32, u32)>,
}

/// One effect of the tree: whose ledger holds it and where it sits.
pub(super) struct Item {
    /// The member whose ledger holds it; `None` for the root.
    pub(super) member: Option<usize>,
    /// The record.
    pub(super) record: LedgerRecord,
    /// Its path in the tree.
    pub(super) path: Path,
}

/// Whether `record` is the call of an `agent` tool: its effects are its
/// child's, settled in the child's own ledger.
pub(super) fn starts_a_child(agent: &AgentBinding, record: &LedgerRecord) -> bool {
    agent
        .tools
        .get(&record.tool)
        .is_some_and(|t| matches!(t.target, ToolTarget::Agent(_)))
}

/// Whether a record's effect may stand in the world.
pub(super) fn is_open(record: &LedgerRecord) -> bool {
    matches!(
        record.status,
        LedgerStatus::Succeeded | LedgerStatus::Pending
    )
}

/// The id of the child run that the call `intent` started.
pub(super) fn child_of(intent: &IntentId) -> Option<RunId> {
    RunId::new(format!("{intent}-child")).ok()
}

impl Member {
    /// Its run's context, when this process holds it.
    fn binding(&self) -> Option<&AgentBinding> {
        self.binding.as_ref()
    }
}

/// The root's and its members' records that settlement must consider,
/// each with its path, excluding calls that started children.
pub(super) fn items(
    root: &RunCtx<'_>,
    root_ledger: &[LedgerRecord],
    root_order: &HashMap<IntentId, (u32, u32)>,
    members: &[Member],
) -> Vec<Item> {
    let place = |order: &HashMap<IntentId, (u32, u32)>, r: &LedgerRecord| {
        order
            .get(&r.intent_id)
            .copied()
            .unwrap_or((r.step, u32::MAX))
    };
    let mut items: Vec<Item> = root_ledger
        .iter()
        .filter(|r| !starts_a_child(root.agent, r))
        .map(|r| Item {
            member: None,
            record: r.clone(),
            path: vec![place(root_order, r)],
        })
        .collect();
    for (i, m) in members.iter().enumerate() {
        for r in &m.ledger {
            if m.binding().is_some_and(|b| starts_a_child(b, r)) {
                continue;
            }
            let mut path = m.path.clone();
            path.push(place(&m.order, r));
            items.push(Item {
                member: Some(i),
                record: r.clone(),
                path,
            });
        }
    }
    items
}

impl Engine {
    /// Every run below `root`, with its ledger, its path and its binding.
    pub(super) async fn descendants(&self, root: &RunId) -> Result<Vec<Member>, StoreError> {
        let mut members = Vec::new();
        let mut pending: Vec<(RunId, Path)> = vec![(root.clone(), Vec::new())];
        let mut seen: HashSet<RunId> = HashSet::from([root.clone()]);
        while let Some((run, prefix)) = pending.pop() {
            let children = self.store.children_of(&run).await?;
            if children.is_empty() {
                continue;
            }
            let order = self.intent_order(&run).await?;
            for child in children {
                // Ids derive from intents, so a cycle cannot be written; a
                // damaged store must still not loop.
                if !seen.insert(child.run_id.clone()) {
                    continue;
                }
                let mut path = prefix.clone();
                let started_by = child
                    .run_id
                    .as_str()
                    .strip_suffix("-child")
                    .and_then(|intent| order.iter().find(|(id, _)| id.as_str() == intent))
                    .map_or((u32::MAX, u32::MAX), |(_, place)| *place);
                path.push(started_by);
                let ledger = self.store.ledger(&child.run_id).await?;
                let binding = self.agents.as_ref().and_then(|bind| bind(&child.agent));
                let own_order = self.intent_order(&child.run_id).await?;
                pending.push((child.run_id.clone(), path.clone()));
                members.push(Member {
                    record: child,
                    binding,
                    path,
                    ledger,
                    order: own_order,
                });
            }
        }
        Ok(members)
    }

    /// (step, ordinal) of each intent `run` planned.
    pub(super) async fn intent_order(
        &self,
        run: &RunId,
    ) -> Result<HashMap<IntentId, (u32, u32)>, StoreError> {
        Ok(self
            .store
            .intents(run)
            .await?
            .into_iter()
            .map(|(step, intent)| (intent.intent_id, (step, intent.ordinal)))
            .collect())
    }

    /// A context in which the root's settlement acts on `member`'s run:
    /// its own claim (so its writes are fenced like any owner's), its
    /// binding, and a cancellation that never fires (undoing must finish).
    pub(super) async fn member_ctx<'x>(
        &'x self,
        root: &RunCtx<'x>,
        member: &'x Member,
    ) -> Result<RunCtx<'x>, String> {
        let Some(agent) = member.binding() else {
            return Err(format!(
                "agent `{}` of child run {} cannot be bound here",
                member.record.agent, member.record.run_id
            ));
        };
        let run_id = member.record.run_id.clone();
        let owner = self
            .claim(&run_id, self.claim_hold(agent))
            .await
            .map_err(|e| format!("child run {run_id} cannot be claimed: {e}"))?;
        Ok(RunCtx {
            run_id: run_id.clone(),
            tenant: member.record.tenant.clone(),
            input: member.record.input.clone(),
            agent,
            store: &self.store,
            emitter: Emitter::new(run_id, self.clock.clone(), None).with_metrics(
                self.shared.metrics.clone(),
                self.shared
                    .metrics
                    .scope(member.record.tenant.as_str(), &agent.name),
            ),
            provider_calls: std::sync::atomic::AtomicU32::new(0),
            last_input_tokens: std::sync::atomic::AtomicU64::new(0),
            model_failures: Default::default(),
            cancel: CancellationToken::new(),
            lost: CancellationToken::new(),
            // A member settled with its root is never handed on.
            interrupt: CancellationToken::new(),
            store_away: std::sync::Mutex::new(None),
            claim_owner: owner,
            settling: std::sync::atomic::AtomicBool::new(true),
            validator: root.validator,
            lineage: Lineage {
                parent: member.record.parent_run_id.clone(),
                depth: u32::try_from(member.path.len()).unwrap_or(u32::MAX),
                tree: root.lineage.tree.clone(),
            },
            child_usage: std::sync::Mutex::new(HashMap::new()),
            models: std::sync::Mutex::new(Vec::new()),
            model_retries: super::ModelRetryUse::default(),
            retries: super::ctx::Retries::default(),
        })
    }

    /// Ends a member's settlement: a run an interruption left `running` is
    /// closed `failed` (its effects were settled with its root), and the
    /// claim is released.
    pub(super) async fn release_member(&self, ctx: &RunCtx<'_>, member: &Member, root: &RunId) {
        if !member.record.status.is_finished() {
            let at_ms = unix_ms(self.clock.system_now());
            let closing = super::close::Closing {
                outcome: Outcome::Failed,
                end: rein_core::report::End::Closed {
                    error_type: Some("settled_with_root".into()),
                    reason: format!(
                        "the run was interrupted, and its root {root} failed: its effects were settled with the root's"
                    ),
                },
                events: Vec::new(),
                expect: None,
            };
            match super::close::closing_commit(self.store.as_ref(), &member.record, closing, at_ms)
                .await
            {
                Ok((mut commit, _)) => {
                    let mut events = ctx.emitter.drain();
                    events.append(&mut commit.events);
                    commit.events = events;
                    if let Err(e) = self.commit(ctx, commit).await {
                        tracing::warn!(run = %ctx.run_id, "cannot close the interrupted child run: {e}");
                    }
                }
                Err(e) => {
                    tracing::warn!(run = %ctx.run_id, "cannot close the interrupted child run: {e}");
                }
            }
        } else {
            let rest = ctx.emitter.drain();
            if !rest.is_empty()
                && let Err(e) = self
                    .commit(
                        ctx,
                        StepCommit {
                            events: rest,
                            ..StepCommit::default()
                        },
                    )
                    .await
            {
                tracing::warn!(run = %ctx.run_id, "cannot record the child's settlement: {e}");
            }
        }
        if let Err(e) = self
            .store
            .release_lease_of(&claim_id(&ctx.run_id), &ctx.claim_owner)
            .await
        {
            tracing::warn!(run = %ctx.run_id, "cannot release the child run's claim: {e}");
        }
    }

    /// Marks each open call that started a child after the tree was
    /// settled: `compensated` when nothing of its child's subtree stands,
    /// `manual` otherwise (the child's records say what a human must do).
    /// Deepest first, so a parent's mark sees its children's.
    pub(super) async fn mark_child_calls(
        &self,
        parties: &[(&RunCtx<'_>, Vec<LedgerRecord>)],
        members: &[Member],
        step: u32,
    ) -> Vec<CompensationResult> {
        let mut calls: Vec<(&RunCtx<'_>, &LedgerRecord, usize)> = Vec::new();
        for (ctx, ledger) in parties {
            let depth = usize::try_from(ctx.lineage.depth).unwrap_or(usize::MAX);
            for r in ledger {
                if is_open(r) && starts_a_child(ctx.agent, r) {
                    calls.push((ctx, r, depth));
                }
            }
        }
        calls.sort_by_key(|(_, _, depth)| std::cmp::Reverse(*depth));
        let mut results = Vec::new();
        for (ctx, record, _) in calls {
            let Some(child) = child_of(&record.intent_id) else {
                continue;
            };
            if record.status == LedgerStatus::Pending {
                // In doubt only as a call: whether it happened is whether
                // its child run exists (its effects are the child's).
                if !self.resolve_child_call(ctx, record, step).await {
                    continue;
                }
            }
            let subtree = subtree(&child, members);
            let mut standing = Vec::new();
            for run in &subtree {
                match self.store.ledger(run).await {
                    Ok(ledger) => standing.extend(
                        ledger
                            .into_iter()
                            .filter(|r| {
                                !matches!(
                                    r.status,
                                    LedgerStatus::Failed | LedgerStatus::Compensated
                                )
                            })
                            .map(|r| format!("{} in {run}", r.tool)),
                    ),
                    Err(e) => standing.push(format!("the ledger of {run} cannot be read: {e}")),
                }
            }
            let (status, note) = if standing.is_empty() {
                (
                    LedgerStatus::Compensated,
                    format!("its child run {child} left no effect standing"),
                )
            } else {
                (
                    LedgerStatus::Manual,
                    format!(
                        "its child run {child} left effects for a human: {}",
                        standing.join(", ")
                    ),
                )
            };
            let c = Correlation {
                step,
                intent_id: Some(record.intent_id.clone()),
                ..Correlation::default()
            };
            self.mark(ctx, &c, &record.intent_id, status, None, &note)
                .await;
            results.push(CompensationResult {
                intent_id: record.intent_id.clone(),
                tool: record.tool.clone(),
                compensation_tool: None,
                status,
                note,
            });
        }
        results
    }
}

impl Engine {
    /// Settles a `pending` record of a call that starts a child: `failed`
    /// when the child run never started (nothing happened), `succeeded`
    /// when it did (its effects are settled in its own ledger). True when
    /// the child started.
    pub(super) async fn resolve_child_call(
        &self,
        ctx: &RunCtx<'_>,
        record: &LedgerRecord,
        step: u32,
    ) -> bool {
        let c = Correlation {
            step,
            intent_id: Some(record.intent_id.clone()),
            ..Correlation::default()
        };
        let started = match child_of(&record.intent_id) {
            Some(child) => matches!(self.store.get_run(&child).await, Ok(Some(_))),
            None => false,
        };
        let (status, note) = if started {
            (
                LedgerStatus::Succeeded,
                "its child run started: its effects are settled in the child's ledger",
            )
        } else {
            (LedgerStatus::Failed, "its child run never started")
        };
        self.mark(ctx, &c, &record.intent_id, status, None, note)
            .await;
        started
    }

    /// Resolves the root's own `pending` child-starting calls before the
    /// settlement decides anything; the ledger as it is afterwards.
    pub(super) async fn resolve_child_calls(
        &self,
        ctx: &RunCtx<'_>,
        ledger: Vec<LedgerRecord>,
        step: u32,
    ) -> Vec<LedgerRecord> {
        let pending: Vec<&LedgerRecord> = ledger
            .iter()
            .filter(|r| r.status == LedgerStatus::Pending && starts_a_child(ctx.agent, r))
            .collect();
        if pending.is_empty() {
            return ledger;
        }
        for record in pending {
            self.resolve_child_call(ctx, record, step).await;
        }
        match self.store.ledger(&ctx.run_id).await {
            Ok(fresh) => fresh,
            Err(_) => ledger,
        }
    }
}

/// `child` and every run below it.
fn subtree(child: &RunId, members: &[Member]) -> Vec<RunId> {
    let mut runs = vec![child.clone()];
    let mut i = 0;
    while i < runs.len() {
        let parent = runs[i].clone();
        runs.extend(
            members
                .iter()
                .filter(|m| m.record.parent_run_id.as_ref() == Some(&parent))
                .map(|m| m.record.run_id.clone()),
        );
        i += 1;
    }
    runs
}

/// Whether an irreversible effect without a compensation stands anywhere
/// in the tree (done, in doubt, or already with a human).
pub(super) fn irreversible_open(root: &RunCtx<'_>, items: &[Item], members: &[Member]) -> bool {
    items.iter().any(|item| {
        let compensable = match item.member {
            None => root.agent.compensations.contains_key(&item.record.tool),
            Some(i) => members[i]
                .binding()
                .is_some_and(|b| b.compensations.contains_key(&item.record.tool)),
        };
        item.record.class == ToolClass::Irreversible
            && !matches!(
                item.record.status,
                LedgerStatus::Failed | LedgerStatus::Compensated
            )
            && !compensable
    })
}
