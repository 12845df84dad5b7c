//! The numbered, versioned scenario catalog.
//!
//! # Why numbered scenarios with fixed parameters
//!
//! Randomness belongs to the choice of scenario, never to its parameters:
//! every delay, status, attempt number and crash point is fixed by the
//! scenario's id, so any violation reproduces from that id alone (seed 000,
//! "fix the fault scenario, not the random seed"). The catalog is versioned
//! with rein; changing a scenario's parameters bumps [`CATALOG_VERSION`].

mod catalog;
mod ceilings;

use rein_core::FailurePolicy;
use rein_testkit::mock_model::Reply;
use rein_testkit::order_desk::Faults;
use serde::Serialize;
use serde_json::Value;

use crate::invariant::Invariant;
use crate::mechanism::Mechanism;
use crate::proxy::Rule;
use crate::store_fault::StoreFault;

pub use catalog::catalog;

/// The catalog's version: bumped whenever a scenario's parameters or the
/// chaos world change.
pub const CATALOG_VERSION: u32 = 7;

/// Where a scenario injects its faults (seed 000's four layers).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Layer {
    /// Timeouts, resets, truncated bodies and error statuses on the wire.
    Network,
    /// The tool itself: executed but reported failure, conflicts, refusals.
    ToolAdapter,
    /// The model: rate limits, overload, context overflow, broken output.
    ModelGateway,
    /// Process crashes, store outages, checkpoint failures, concurrency.
    Orchestration,
}

impl Layer {
    /// Its name in tables.
    pub fn name(self) -> &'static str {
        match self {
            Layer::Network => "network",
            Layer::ToolAdapter => "tool_adapter",
            Layer::ModelGateway => "model_gateway",
            Layer::Orchestration => "orchestration",
        }
    }
}

/// The model a scenario's runs talk to.
#[derive(Debug, Clone)]
pub enum ModelPlan {
    /// The scripted provider: one entry per model call, in the scripted
    /// provider's file format.
    Script(Vec<Value>),
    /// The OpenAI provider against the testkit's mock model server, behind
    /// the fault proxy; one reply per call.
    Mock(Vec<Reply>),
}

/// A crash of the process driving the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Crash {
    /// The crash point (see `rein_engine::crash`).
    pub point: &'static str,
    /// Which time the point is reached (1-based).
    pub nth: u32,
}

/// A scenario's settings beyond the chaos world's defaults.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Tune {
    /// Step limit.
    pub steps: Option<u32>,
    /// Wall-clock limit in milliseconds.
    pub wall_ms: Option<u64>,
    /// Token limit.
    pub tokens: Option<u64>,
    /// Attempts per call.
    pub max_attempts: Option<u32>,
    /// Retry budget: (ratio, initial tokens).
    pub retry_budget: Option<(f64, u32)>,
    /// Tool breaker: (consecutive failures, break in milliseconds).
    pub breaker: Option<(u32, u64)>,
    /// Concurrency ceiling of the order desk's resource group.
    pub group_limit: Option<u32>,
    /// What a failed run does with its effects.
    pub on_failure: Option<FailurePolicy>,
    /// Loop guard: identical calls allowed.
    pub max_repeats: Option<u32>,
    /// `[agents.NAME.planner] final_turn`: off for scenarios about the
    /// reservation itself, which must reach the ceiling with tools offered.
    pub final_turn: Option<bool>,
    /// Cost limit in micro-dollars.
    pub cost_micros: Option<u64>,
    /// Calls one turn may propose (`max_calls_per_turn`).
    pub fan_out_cap: Option<u32>,
    /// Request bucket of the order desk's resource group: (calls per
    /// second, burst).
    pub group_rate: Option<(f64, u32)>,
    /// The declared p99 of the order desk's read (`get_order`), in
    /// milliseconds, instead of the world's 100 ms: a scenario that makes
    /// its reads slow on purpose raises it, so that their allowance (p99 ×
    /// the default factor 2) covers the injected delay plus rein's own
    /// overhead on a loaded machine. A read cut at its allowance is a
    /// timeout the scenario did not mean, and stays in flight at the proxy
    /// after rein let it go.
    pub read_p99_ms: Option<u64>,
    /// The scenario probes the order desk group's adaptive concurrency
    /// limit: the checker requires the calls in flight at the proxy to
    /// fall under the injected fault and rise back after it
    /// (`invariant/adaptive.rs`).
    pub adaptive_probe: bool,
    /// Token bucket of the agent's model provider: (tokens per minute,
    /// token burst).
    pub provider_tokens: Option<(u64, u64)>,
    /// How long a run offers a refused commit again before it stops at a
    /// safe point (`EngineBuilder::store_patience`), in milliseconds,
    /// instead of the engine's 15 s: an outage scenario outlasts it in a
    /// fraction of a second of real time.
    pub store_patience_ms: Option<u64>,
    /// `send_email` needs a human's approval (`approval = "required"`).
    pub gate_email: bool,
}

/// What a scenario does.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The model.
    pub model: ModelPlan,
    /// Rules of the proxy in front of the order desk.
    pub tool_rules: Vec<Rule>,
    /// Rules of the proxy in front of the mock model.
    pub model_rules: Vec<Rule>,
    /// Faults the order desk injects into its own answers.
    pub desk_faults: Faults,
    /// Storage faults.
    pub store_faults: Vec<StoreFault>,
    /// A crash of the driving process (resumed in-process afterwards).
    pub crash: Option<Crash>,
    /// Settings.
    pub tune: Tune,
    /// Runs, one after another on one engine (breakers remember), or all
    /// at once when `concurrent`.
    pub runs: u32,
    /// Whether the runs start together.
    pub concurrent: bool,
    /// Pause between sequential runs, in milliseconds: lets a sustained
    /// scenario span the breaker's break and its recovery.
    pub pause_ms: u64,
    /// The tenant of each run, round robin.
    pub tenants: Vec<&'static str>,
    /// Runs the ledger reconciler once after the runs ended.
    pub reconcile: bool,
    /// Submits the run through `rein serve` (in-process, behind a fault
    /// proxy) instead of calling the engine: the submission layer's faults.
    pub submission: Option<Submission>,
    /// Rules of the proxy in front of the server.
    pub server_rules: Vec<Rule>,
    /// The agent of the world the runs use, when not the plan's default
    /// (`chaos` for a script, `chaos_live` for the mock model): the
    /// model-chain agents `chaos_stream`, `chaos_fallback`, `chaos_context`.
    pub agent: Option<&'static str>,
    /// The replies of the second mock model server (the `backup`
    /// provider), one per call; `None` starts no backup server.
    pub backup: Option<Vec<Reply>>,
    /// Whether the mock model servers count usage from each request and
    /// stop answers at `max_tokens`, as a provider does, instead of
    /// reporting the script's usage.
    pub metered: bool,
    /// Whether the mock model servers hold a 429's `Retry-After` for every
    /// request ([`Plan::enforced_retry_after`]).
    pub enforce_retry_after: bool,
    /// What the human decides on each call the run pauses for, and the
    /// crash, if any, of the process that continues it after the decision
    /// ([`Plan::decide`]).
    pub approval: Option<Approval>,
}

/// A human's part in an approval scenario: the decision on every call the
/// run waits for, and where the process that continues the run after it
/// aborts, if it does (it is then resumed once more, as an operator would).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Approval {
    /// The decision.
    pub decide: Decide,
    /// The crash of the continuing process.
    pub then_crash: Option<Crash>,
}

/// What the human decides.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Decide {
    /// Approve: the call is sent, once, with the arguments approved.
    Approve,
    /// Reject: it is never sent.
    Reject,
    /// Nobody decides: the window closes, the sweep records `expired`.
    Expire,
}

/// A run submitted over HTTP by a client that retries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Submission {
    /// `queued` instead of `sync`.
    pub queued: bool,
    /// Attempts the client makes at most.
    pub tries: u32,
    /// The client's own timeout per attempt, in milliseconds.
    pub timeout_ms: u64,
}

impl Plan {
    /// A scripted run.
    pub fn script(turns: Vec<Value>) -> Plan {
        Plan::with_model(ModelPlan::Script(turns))
    }

    /// A run against the mock model server.
    pub fn mock(replies: Vec<Reply>) -> Plan {
        Plan::with_model(ModelPlan::Mock(replies))
    }

    fn with_model(model: ModelPlan) -> Plan {
        Plan {
            model,
            tool_rules: Vec::new(),
            model_rules: Vec::new(),
            desk_faults: Faults::none(),
            store_faults: Vec::new(),
            crash: None,
            tune: Tune::default(),
            runs: 1,
            concurrent: false,
            pause_ms: 0,
            tenants: vec!["default"],
            reconcile: true,
            submission: None,
            server_rules: Vec::new(),
            agent: None,
            backup: None,
            metered: false,
            enforce_retry_after: false,
            approval: None,
        }
    }

    /// `send_email` needs approval, and the human answers with `decide`;
    /// the process that continues the run after the decision aborts at
    /// `then_crash`, when given.
    pub fn decide(mut self, decide: Decide, then_crash: Option<Crash>) -> Plan {
        self.tune.gate_email = true;
        self.approval = Some(Approval { decide, then_crash });
        self
    }

    /// Makes the mock model servers count usage as a provider does.
    pub fn metered(mut self) -> Plan {
        self.metered = true;
        self
    }

    /// The mock model servers hold a scripted 429's `Retry-After` for the
    /// whole account, as a provider does: a request within it is answered
    /// 429 again and counted (`Evidence::model_hammered`).
    pub fn enforced_retry_after(mut self) -> Plan {
        self.enforce_retry_after = true;
        self
    }

    /// Adds a rule to the tool proxy.
    pub fn tool_rule(mut self, rule: Rule) -> Plan {
        self.tool_rules.push(rule);
        self
    }

    /// Adds a rule to the model proxy.
    pub fn model_rule(mut self, rule: Rule) -> Plan {
        self.model_rules.push(rule);
        self
    }

    /// Sets the desk's own faults.
    pub fn desk(mut self, faults: Faults) -> Plan {
        self.desk_faults = faults;
        self
    }

    /// Adds a storage fault.
    pub fn store(mut self, fault: StoreFault) -> Plan {
        self.store_faults.push(fault);
        self
    }

    /// Crashes the driving process at `point` the `nth` time.
    pub fn crash(mut self, point: &'static str, nth: u32) -> Plan {
        self.crash = Some(Crash { point, nth });
        self
    }

    /// Changes settings.
    pub fn tune(mut self, f: impl FnOnce(&mut Tune)) -> Plan {
        f(&mut self.tune);
        self
    }

    /// Runs `n` runs one after another.
    pub fn runs(mut self, n: u32) -> Plan {
        self.runs = n;
        self
    }

    /// Submits through `rein serve`, with an `Idempotency-Key`, retrying.
    pub fn submit(mut self, submission: Submission) -> Plan {
        self.submission = Some(submission);
        self
    }

    /// Adds a rule to the proxy in front of the server.
    pub fn server_rule(mut self, rule: Rule) -> Plan {
        self.server_rules.push(rule);
        self
    }

    /// Runs the world's agent `name` instead of the plan's default.
    pub fn agent(mut self, name: &'static str) -> Plan {
        self.agent = Some(name);
        self
    }

    /// Starts the backup mock model server with `replies`.
    pub fn backup(mut self, replies: Vec<Reply>) -> Plan {
        self.backup = Some(replies);
        self
    }

    /// Waits `ms` between sequential runs.
    pub fn every(mut self, ms: u64) -> Plan {
        self.pause_ms = ms;
        self
    }

    /// Runs `n` runs at once, over `tenants` round robin.
    pub fn concurrent(mut self, n: u32, tenants: Vec<&'static str>) -> Plan {
        self.runs = n;
        self.concurrent = true;
        self.tenants = tenants;
        self
    }
}

/// One scenario of the catalog.
#[derive(Debug, Clone)]
pub struct Scenario {
    /// Its number; `C` + three digits in tables.
    pub id: u32,
    /// Where it injects.
    pub layer: Layer,
    /// A short name.
    pub name: &'static str,
    /// What it injects and what must hold.
    pub description: &'static str,
    /// Sustained-failure scenarios that CI skips unless asked.
    pub long: bool,
    /// The invariants its faults put at risk. Every scenario is checked
    /// against all thirteen; these say what it is *for*.
    pub risks: Vec<Invariant>,
    /// Mechanisms it must activate: one that does not is a finding.
    pub expects: Vec<Mechanism>,
    /// What it does.
    pub plan: Plan,
}

impl Scenario {
    /// A scenario.
    pub fn new(
        id: u32,
        layer: Layer,
        name: &'static str,
        description: &'static str,
        plan: Plan,
    ) -> Scenario {
        Scenario {
            id,
            layer,
            name,
            description,
            long: false,
            risks: Vec::new(),
            expects: Vec::new(),
            plan,
        }
    }

    /// The invariants its faults put at risk.
    pub fn risks(mut self, invariants: impl IntoIterator<Item = Invariant>) -> Scenario {
        self.risks.extend(invariants);
        self
    }

    /// The mechanisms it must activate.
    pub fn expects(mut self, mechanisms: impl IntoIterator<Item = Mechanism>) -> Scenario {
        self.expects.extend(mechanisms);
        self
    }

    /// Marks it sustained (skipped unless `--include-long`).
    pub fn long(mut self) -> Scenario {
        self.long = true;
        self
    }

    /// Its label, e.g. `C007`.
    pub fn label(&self) -> String {
        format!("C{:03}", self.id)
    }

    /// Whether it crashes a process (and so needs the `rein` binary).
    pub fn crashes(&self) -> bool {
        self.plan.crash.is_some() || self.plan.approval.is_some_and(|a| a.then_crash.is_some())
    }
}
