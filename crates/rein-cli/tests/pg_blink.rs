//! Issue 31's "Done when": a cluster whose database blinks. Three `rein
//! serve` processes on one PostgreSQL database, a few hundred queued and
//! sync runs (each reads an order, moves its delivery with an idempotent
//! write, sends an irreversible email, and compensates the move when the
//! run fails; 10% of tool calls faulted), and while they run every rein
//! connection is terminated several times (`pg_terminate_backend`) and
//! once the database refuses connections for a few seconds (`ALTER
//! DATABASE … ALLOW_CONNECTIONS false`, its sessions cut, then allowed
//! again).
//!
//! Afterwards: every run reached an outcome; none `failed` because of the
//! store; once the nodes wrote the marks they held (`/readyz`
//! `held_ledger_marks` back at 0) no terminal run holds a `pending`
//! record, handed off or not; the ledger agrees with the order desk's own
//! log (nothing applied that no record declares, nothing `failed` that was
//! applied, nothing `succeeded` or `compensated` that was not) and with the
//! run's events (each record's last `ledger_recorded` states its status,
//! and none states a settled status twice); no effect is duplicated; every
//! submission key is resolved; no node exited. Every submission carries an
//! `Idempotency-Key`, and one refused (503, 409) or cut off is sent again
//! with it, as a client would.
//!
//! The cuts are timed off the load's progress (after a tenth, two tenths,
//! … of the runs reached an outcome, read from the database on the test's
//! own connection), so they fall among runs in flight however fast the
//! machine is.
//!
//! `REIN_BLINK_RUNS` sets the number of runs (300 by default; every
//! fourth is sync); `REIN_LOAD_KEEP=1` keeps the nodes' logs. Like `pg_restart.rs` it uses a PostgreSQL server of
//! its own ([`PrivatePostgres`]): without the binaries it skips with a
//! message, except under `CI=true`, where it fails.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use tokio_postgres::{Client, NoTls};

#[path = "load/mod.rs"]
mod load;

#[path = "common/postgres.rs"]
mod private_postgres;
use private_postgres::PrivatePostgres;

/// The test's own connections say so, and are never cut.
const APPLICATION: &str = "pg_blink";
/// The database the nodes share.
const DATABASE: &str = "rein";
/// How long the database refuses connections.
const REFUSAL: Duration = Duration::from_secs(4);

/// One fault, and the share of runs (in tenths) that reached an outcome
/// before it.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Cut {
    /// Every rein session terminated.
    Terminate,
    /// Connections refused for [`REFUSAL`], every session terminated at
    /// its start.
    Refuse,
}

const PLAN: [(usize, Cut); 7] = [
    (1, Cut::Terminate),
    (2, Cut::Terminate),
    (3, Cut::Terminate),
    (4, Cut::Refuse),
    (5, Cut::Terminate),
    (6, Cut::Terminate),
    (7, Cut::Terminate),
];

/// What one cut did.
#[derive(Debug)]
struct Done {
    cut: Cut,
    /// Runs with an outcome when it began.
    after: i64,
    /// rein sessions terminated.
    terminated: i64,
    /// For a refusal: what a new connection to the database was told
    /// while it lasted.
    refused_with: Option<String>,
}

async fn connect(postgres: &PrivatePostgres, database: &str) -> Result<Client> {
    let url = format!("{}?application_name={APPLICATION}", postgres.url(database));
    let (client, connection) = tokio_postgres::connect(&url, NoTls)
        .await
        .with_context(|| format!("cannot connect to {database}"))?;
    tokio::spawn(connection);
    Ok(client)
}

/// Terminates every session on the nodes' database but the test's own;
/// how many.
async fn terminate(admin: &Client) -> Result<i64> {
    let row = admin
        .query_one(
            "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity \
             WHERE datname = $1 AND pid <> pg_backend_pid() AND application_name <> $2",
            &[&DATABASE, &APPLICATION],
        )
        .await?;
    Ok(row.get(0))
}

/// Runs with an outcome, as the database holds them.
async fn ended(watch: &Client) -> Result<i64> {
    let row = watch
        .query_one(
            "SELECT count(*) FROM runs WHERE status NOT IN ('queued', 'running')",
            &[],
        )
        .await?;
    Ok(row.get(0))
}

/// Carries out [`PLAN`] as the runs reach their outcomes; stops at the
/// end of the plan or when `stop` fires.
async fn blink(
    postgres: Arc<PrivatePostgres>,
    runs: usize,
    stop: tokio::sync::watch::Receiver<bool>,
) -> Result<Vec<Done>> {
    // `postgres` (a superuser session on another database) cuts and
    // refuses; a session on the nodes' database watches the progress, and
    // is spared by the cuts (it is not rein's).
    let admin = connect(&postgres, "postgres").await?;
    let watch = connect(&postgres, DATABASE).await?;
    let mut done = Vec::new();
    for (tenths, cut) in PLAN {
        let threshold = i64::try_from(runs * tenths / 10).unwrap_or(i64::MAX);
        let after = loop {
            if *stop.borrow() {
                return Ok(done);
            }
            // Until the first node made the schema, no run has ended.
            let now = ended(&watch).await.unwrap_or(0);
            if now >= threshold {
                break now;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        match cut {
            Cut::Terminate => {
                let terminated = terminate(&admin).await?;
                done.push(Done {
                    cut,
                    after,
                    terminated,
                    refused_with: None,
                });
            }
            Cut::Refuse => {
                admin
                    .batch_execute(&format!(
                        "ALTER DATABASE {DATABASE} WITH ALLOW_CONNECTIONS false"
                    ))
                    .await?;
                let refused = async {
                    let terminated = terminate(&admin).await?;
                    // Pacing only: how long the database stays away.
                    tokio::time::sleep(REFUSAL / 2).await;
                    let refused_with =
                        match tokio_postgres::connect(&postgres.url(DATABASE), NoTls).await {
                            Ok(_) => "a connection was accepted".to_owned(),
                            Err(e) => e
                                .as_db_error()
                                .map_or_else(|| e.to_string(), |db| db.message().to_owned()),
                        };
                    // Whatever reconnected meanwhile is cut too.
                    let again = terminate(&admin).await?;
                    tokio::time::sleep(REFUSAL / 2).await;
                    Ok::<_, anyhow::Error>((terminated + again, refused_with))
                }
                .await;
                // Allowed again whatever happened in between.
                admin
                    .batch_execute(&format!(
                        "ALTER DATABASE {DATABASE} WITH ALLOW_CONNECTIONS true"
                    ))
                    .await?;
                let (terminated, refused_with) = refused?;
                done.push(Done {
                    cut,
                    after,
                    terminated,
                    refused_with: Some(refused_with),
                });
            }
        }
        // Pacing only: the nodes reconnect between two cuts.
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    Ok(done)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_nodes_ride_out_a_blinking_database() {
    let Some(postgres) = PrivatePostgres::start("the database blink test") else {
        return;
    };
    let postgres = Arc::new(postgres);
    postgres.create_database(DATABASE).await;
    let runs: usize = std::env::var("REIN_BLINK_RUNS")
        .ok()
        .map(|n| n.parse().expect("REIN_BLINK_RUNS is a number of runs"))
        .unwrap_or(300);
    let config = load::LoadConfig {
        runs,
        servers: 3,
        workers: 3,
        client_concurrency: 8,
        timeout: Duration::from_secs(600),
        postgres: Some(postgres.url(DATABASE)),
        idempotency_keys: true,
        sync_every: NonZeroUsize::new(4),
        ..load::LoadConfig::default()
    };
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let blinking = tokio::spawn(blink(Arc::clone(&postgres), runs, stopped));
    let report = load::run(config).await;
    // The cuts may all be made already.
    let _ = stop.send(true);
    let cuts = blinking.await.unwrap();
    let report =
        report.unwrap_or_else(|e| panic!("{e:#}\nPostgreSQL's log:\n{}", postgres.log_tail()));
    println!("{report}");
    let cuts = cuts.unwrap_or_else(|e| panic!("the cuts: {e:#}\n{report}"));
    for done in &cuts {
        println!(
            "  cut:         {:?} once {} runs had an outcome: {} rein sessions terminated{}",
            done.cut,
            done.after,
            done.terminated,
            done.refused_with
                .as_ref()
                .map(|r| format!("; a new connection was told: {r}"))
                .unwrap_or_default()
        );
    }

    // The faults happened, among runs in flight.
    assert_eq!(
        cuts.len(),
        PLAN.len(),
        "every cut was made: {cuts:?}\n{report}"
    );
    assert!(
        cuts.iter().all(|d| d.terminated > 0),
        "every cut terminated rein sessions: {cuts:?}"
    );
    let refusal = cuts.iter().find(|d| d.cut == Cut::Refuse).unwrap();
    assert!(
        refusal
            .refused_with
            .as_deref()
            .is_some_and(|r| r.contains("not currently accepting connections")),
        "the database refused connections: {refusal:?}"
    );
    assert!(
        report
            .servers
            .iter()
            .map(|s| s.commits_offered_again)
            .sum::<usize>()
            > 0,
        "the nodes saw the store refuse commits: {report}"
    );

    // Every run reached an outcome, none lost.
    assert_eq!(report.accepted, runs, "{report}");
    assert_eq!(report.lost, 0, "{report}");
    assert_eq!(report.stored_runs, runs, "{report}");
    // None failed because of the store.
    assert_eq!(report.store_failed_runs, 0, "{report}");
    // No terminal run holds a pending record, once the held marks are
    // written; handed off or not.
    assert_eq!(report.held_marks_left, 0, "{report}");
    assert_eq!(report.pending_effects, 0, "{report}");
    assert_eq!(report.handed_off_in_doubt, 0, "{report}");
    // The ledger agrees with the desk's log and with the events.
    assert_eq!(report.unledgered_effects, 0, "{report}");
    assert_eq!(report.failed_but_applied, 0, "{report}");
    assert_eq!(report.happened_not_applied, 0, "{report}");
    assert_eq!(report.events_disagree, 0, "{report}");
    assert_eq!(report.repeated_statements, 0, "{report}");
    // No effect duplicated, no run driven twice.
    assert_eq!(report.duplicated(), 0, "{report}");
    assert!(
        report.servers.iter().all(|s| s.exited.is_none()),
        "no node exited on its own: {report}"
    );
    assert!(report.is_clean(), "{report}");
    ensure_sync_answers(&report).unwrap();
    // Every submission key resolved: a key left `in_progress` after its
    // run ended answers nothing true about it.
    assert_eq!(report.unresolved_keys, 0, "{report}");
}

/// Every sync submission was answered with its run's outcome (200) or
/// handed on (202) for the store, never for anything else.
fn ensure_sync_answers(report: &load::LoadReport) -> Result<()> {
    let sync: usize = report.sync_answers.values().sum();
    ensure!(sync > 0, "sync runs were submitted: {report}");
    for reason in report.handed_on_reasons.keys() {
        ensure!(
            reason.contains("run store stayed unavailable"),
            "a sync run was handed on for another reason: {reason}\n{report}"
        );
    }
    Ok(())
}
