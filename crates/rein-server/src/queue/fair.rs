//! Which queued run a worker starts next: deficit round robin between
//! tenants (the governor's [`FairQueue`]), weighted by
//! `server.quotas.weight`, over the runs the store says are claimable.
//!
//! # Why
//!
//! One global FIFO made one tenant's 300 queued runs delay another
//! tenant's single run by all 300. Here each tenant waits in its own lane
//! and the worker serves the lanes in turn: a quiet tenant's run waits for
//! the next free worker, not for the noisy tenant's backlog. A tenant at
//! its `max_running` is passed over (and, as deficit round robin does with
//! a flow that ran empty, banks no credit meanwhile), and so is a tenant
//! the tenant floor holds back ([`crate::queue::floor`]: the last free worker is
//! kept for a tenant with nothing running). Order alone leaves the quiet
//! run waiting for a worker to finish; the floor removes that wait.
//!
//! # Across processes
//!
//! The store decides who runs what: the picked run is started through the
//! engine's claim, and a run another process claimed first is skipped.
//! Each process keeps its own round over the same claimable runs (every
//! tenant's oldest [`PICK_WINDOW`], from [`Store::queue_heads`]), so
//! over any stretch in which two tenants both wait, each process serves
//! them in proportion to their weights to within one quantum and one run;
//! `P` processes together, to within `P` of each. The running cap reads the
//! store's count of every process's runs plus this process's own starts.
//!
//! [`Store::queue_heads`]: rein_store::RunStore::queue_heads

use std::collections::{HashMap, HashSet};
use std::sync::{Mutex, PoisonError};

use rein_core::governor::{Class, FairQueue};
use rein_core::registry::ServerQuotas;
use rein_core::{Instant, RunId, TenantId};
use rein_store::{QueueHead, RunRecord};

use crate::queue::floor::{Seat, TenantFloor};
use crate::queue::quota::{Quotas, Running};

/// How many of each tenant's oldest queued runs a pick looks at: enough
/// for a weight up to this many runs per round.
pub const PICK_WINDOW: usize = 8;

/// What a picked run holds while it is driven: its count against its
/// tenant's `max_running` and its worker of the tenant floor.
#[derive(Debug)]
pub struct Started {
    _running: Running,
    _seat: Seat,
}

/// A process's round between tenants.
#[derive(Debug)]
pub struct FairPick {
    inner: Mutex<Round>,
    /// Serve the oldest run first, whoever's it is (the `fifo_queue`
    /// sabotage of test builds: the FIFO this replaced).
    fifo: bool,
}

#[derive(Debug)]
struct Round {
    queue: FairQueue<RunRecord>,
    known: HashSet<RunId>,
}

impl FairPick {
    /// A round weighing tenants as `quotas` says.
    pub fn new(quotas: &ServerQuotas) -> FairPick {
        FairPick {
            inner: Mutex::new(Round {
                queue: FairQueue::new(quotas.weights(), Default::default()),
                known: HashSet::new(),
            }),
            fifo: rein_engine::crash::sabotaged("fifo_queue"),
        }
    }

    /// The next run to start from `heads` (the store's, just read), in
    /// fair order among tenants below their `max_running` that `floor`
    /// admits, counted as running in `counts` and seated in `floor` (both
    /// taken before the lock is let go, so two workers of this process
    /// never overshoot the cap nor take the floor).
    pub fn next(
        &self,
        heads: &[QueueHead],
        config: &ServerQuotas,
        counts: &Quotas,
        floor: &TenantFloor,
        now: Instant,
    ) -> Option<(RunRecord, Started)> {
        let mut round = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        let Round { queue, known } = &mut *round;
        let claimable: HashSet<&RunId> = heads
            .iter()
            .flat_map(|b| b.oldest.iter().map(|r| &r.run_id))
            .collect();
        // Runs no longer queued (started here or elsewhere) leave the round.
        while let Some(gone) = queue.remove(|r| !claimable.contains(&r.run_id)) {
            known.remove(&gone.run_id);
        }
        for run in heads.iter().flat_map(|b| &b.oldest) {
            if known.insert(run.run_id.clone()) {
                queue.enqueue(run.clone(), &run.tenant, Class::Batch, 1, now);
            }
        }
        let running: HashMap<&TenantId, u64> =
            heads.iter().map(|b| (&b.tenant, b.running)).collect();
        let open = |tenant: &TenantId| {
            let store = running.get(tenant).copied().unwrap_or(0);
            counts.may_start(config.of(tenant), tenant, store) && floor.admits(tenant)
        };
        let run = if self.fifo {
            // The oldest, whoever's; a tenant at its cap blocks the line.
            let oldest = queue
                .iter()
                .min_by(|a, b| {
                    (a.created_at_ms, a.run_id.as_str()).cmp(&(b.created_at_ms, b.run_id.as_str()))
                })
                .filter(|r| open(&r.tenant))
                .map(|r| r.run_id.clone())?;
            queue.remove(|r| r.run_id == oldest)?
        } else {
            queue.dequeue_where(now, |r| open(&r.tenant))?.item
        };
        known.remove(&run.run_id);
        let store = running.get(&run.tenant).copied().unwrap_or(0);
        let counted = counts.start_quietly(config.of(&run.tenant), &run.tenant, store)?;
        let seat = floor.seat(&run.tenant)?;
        Some((
            run,
            Started {
                _running: counted,
                _seat: seat,
            },
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rein_store::Timestamp;

    /// Keys for the tenants the tests name in overrides (a tenant no key
    /// acts for is refused).
    const KEYS: &str = concat!(
        "[[server.api_keys]]\ntenant = \"gold\"\nsha256 = \"",
        "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"\n",
        "[[server.api_keys]]\ntenant = \"base\"\nsha256 = \"",
        "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb\"\n",
    );

    fn config(text: &str) -> ServerQuotas {
        let file: rein_core::registry::ConfigFile =
            toml::from_str(&format!("{KEYS}[server.quotas]\n{text}")).unwrap();
        rein_core::registry::check(
            &[rein_core::registry::ConfigSource::new("rein.toml", file)],
            &|_| Vec::new(),
        )
        .unwrap()
        .server()
        .quotas
        .clone()
    }

    /// Worker loops enough that the floor holds no test's tenant back.
    const LOOPS: usize = 64;

    fn run(tenant: &str, n: u64) -> RunRecord {
        RunRecord {
            run_id: RunId::new(format!("{tenant}-{n:04}")).unwrap(),
            tenant: TenantId::new(tenant).unwrap(),
            agent: "a".into(),
            status: rein_store::RunStatus::Queued,
            input: String::new(),
            parent_run_id: None,
            budget: serde_json::Value::Null,
            report: None,
            created_at_ms: Timestamp::from_millis(n),
            updated_at_ms: Timestamp::from_millis(n),
            ledger_revision: 0,
            trace_parent: None,
            first_span: None,
        }
    }

    /// A store holding `queued` runs per tenant, created at the given
    /// times, and `running` runs per tenant.
    struct Store {
        queued: Vec<RunRecord>,
        running: HashMap<String, u64>,
    }

    impl Store {
        fn heads(&self) -> Vec<QueueHead> {
            let mut tenants: Vec<&TenantId> = self.queued.iter().map(|r| &r.tenant).collect();
            tenants.sort();
            tenants.dedup();
            tenants
                .into_iter()
                .map(|t| {
                    let mine: Vec<RunRecord> = self
                        .queued
                        .iter()
                        .filter(|r| &r.tenant == t)
                        .cloned()
                        .collect();
                    QueueHead::new(
                        t.clone(),
                        self.running.get(t.as_str()).copied().unwrap_or(0),
                        mine.into_iter().take(PICK_WINDOW).collect(),
                    )
                })
                .collect()
        }

        fn take(&mut self, id: &RunId) {
            self.queued.retain(|r| &r.run_id != id);
        }
    }

    #[test]
    fn a_quiet_tenants_run_is_next_whatever_the_noisy_backlog() {
        let config = config("");
        let counts = Quotas::default();
        let pick = FairPick::new(&config);
        let floor = TenantFloor::new(LOOPS);
        let mut store = Store {
            queued: (0..300).map(|n| run("noisy", n)).collect(),
            running: HashMap::new(),
        };
        store.queued.push(run("quiet", 1000));
        let mut order = Vec::new();
        for _ in 0..4 {
            let (next, _running) = pick
                .next(&store.heads(), &config, &counts, &floor, Instant::ORIGIN)
                .unwrap();
            store.take(&next.run_id);
            order.push(next.tenant.to_string());
        }
        assert_eq!(order, ["noisy", "quiet", "noisy", "noisy"]);
    }

    #[test]
    fn weights_divide_the_picks() {
        let config = config("[server.quotas.tenants.gold]\nweight = 3.0\n");
        let counts = Quotas::default();
        let pick = FairPick::new(&config);
        let floor = TenantFloor::new(LOOPS);
        let mut store = Store {
            queued: (0..100)
                .flat_map(|n| [run("gold", n), run("base", n)])
                .collect(),
            running: HashMap::new(),
        };
        let mut gold = 0;
        for _ in 0..40 {
            let (next, _running) = pick
                .next(&store.heads(), &config, &counts, &floor, Instant::ORIGIN)
                .unwrap();
            store.take(&next.run_id);
            gold += usize::from(next.tenant.as_str() == "gold");
        }
        assert_eq!(gold, 30, "3 of every 4 picks");
    }

    #[test]
    fn a_tenant_at_max_running_is_passed_over() {
        let config = config("max_running = 2\n");
        let counts = Quotas::default();
        let pick = FairPick::new(&config);
        let floor = TenantFloor::new(LOOPS);
        let mut store = Store {
            queued: (0..10).map(|n| run("noisy", n)).collect(),
            running: HashMap::from([("noisy".to_owned(), 1)]),
        };
        // One more may start (one runs elsewhere), then none: the store
        // counts the one started here once it runs.
        let (first, held) = pick
            .next(&store.heads(), &config, &counts, &floor, Instant::ORIGIN)
            .unwrap();
        store.take(&first.run_id);
        store.running.insert("noisy".to_owned(), 2);
        assert!(
            pick.next(&store.heads(), &config, &counts, &floor, Instant::ORIGIN)
                .is_none(),
            "2 running in the store = max_running"
        );
        // Before the store shows it, this process's own count holds.
        let _second_here = counts
            .start_quietly(config.of(&first.tenant), &first.tenant, 0)
            .unwrap();
        store.running.insert("noisy".to_owned(), 0);
        assert!(
            pick.next(&store.heads(), &config, &counts, &floor, Instant::ORIGIN)
                .is_none(),
            "2 started here = max_running"
        );
        store.queued.push(run("quiet", 50));
        let (next, _q) = pick
            .next(&store.heads(), &config, &counts, &floor, Instant::ORIGIN)
            .unwrap();
        assert_eq!(next.tenant.as_str(), "quiet");
        drop((held, _second_here));
        store.running.clear();
        let (again, _n) = pick
            .next(&store.heads(), &config, &counts, &floor, Instant::ORIGIN)
            .unwrap();
        assert_eq!(again.tenant.as_str(), "noisy", "free again once a run ends");
    }

    #[test]
    fn the_floor_keeps_the_last_worker_for_a_tenant_with_nothing_running() {
        let config = config("");
        let counts = Quotas::default();
        let pick = FairPick::new(&config);
        // Two shared workers and the floor.
        let floor = TenantFloor::new(crate::queue::floor::loops(2));
        let mut store = Store {
            queued: (0..300).map(|n| run("noisy", n)).collect(),
            running: HashMap::new(),
        };
        let mut held = Vec::new();
        for _ in 0..2 {
            let (next, started) = pick
                .next(&store.heads(), &config, &counts, &floor, Instant::ORIGIN)
                .unwrap();
            store.take(&next.run_id);
            held.push(started);
        }
        assert!(
            pick.next(&store.heads(), &config, &counts, &floor, Instant::ORIGIN)
                .is_none(),
            "noisy holds the shared tier: the floor stays free"
        );
        store.queued.push(run("quiet", 1000));
        let (next, quiet) = pick
            .next(&store.heads(), &config, &counts, &floor, Instant::ORIGIN)
            .unwrap();
        assert_eq!(next.tenant.as_str(), "quiet");
        // A noisy run ends: the worker it frees is the floor now (quiet's
        // run holds the other), kept for the next tenant with nothing
        // running.
        held.pop();
        assert!(
            pick.next(&store.heads(), &config, &counts, &floor, Instant::ORIGIN)
                .is_none()
        );
        // Quiet's run ends: noisy has its shared workers back.
        drop(quiet);
        let (next, _noisy) = pick
            .next(&store.heads(), &config, &counts, &floor, Instant::ORIGIN)
            .unwrap();
        assert_eq!(next.tenant.as_str(), "noisy");
    }

    #[test]
    fn a_run_claimed_elsewhere_leaves_the_round() {
        let config = config("");
        let counts = Quotas::default();
        let pick = FairPick::new(&config);
        let floor = TenantFloor::new(LOOPS);
        let mut store = Store {
            queued: vec![run("a", 1), run("a", 2)],
            running: HashMap::new(),
        };
        assert!(
            pick.next(&store.heads(), &config, &counts, &floor, Instant::ORIGIN)
                .is_some()
        );
        // Another process took a-0002 meanwhile (a-0001 was ours).
        store.queued.clear();
        assert!(
            pick.next(&store.heads(), &config, &counts, &floor, Instant::ORIGIN)
                .is_none()
        );
        assert!(pick.inner.lock().unwrap().known.is_empty());
    }
}
