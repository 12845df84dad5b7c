//! The crash matrix: the real `rein` process is aborted at every crash
//! point for every tool class, then resumed by a new process; the order
//! desk's own side-effect log must show that nothing was lost or done
//! twice, every ledger record must end settled, and compensation must run
//! in reverse order.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use rein_store::StoreExt;
use rein_store::Timestamp;
use std::collections::BTreeMap;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use rein_testkit::order_desk::{
    EffectKind, Fault, OrderDesk, RESTORE_DELIVERY_TIME, SEND_EMAIL, UPDATE_DELIVERY_TIME,
};
use serde_json::Value;

fn example_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples/order-desk")
}

async fn rein(args: Vec<String>, env: Vec<(&'static str, String)>) -> Output {
    tokio::task::spawn_blocking(move || {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_rein"));
        cmd.args(&args).env_remove("REIN_CRASH_AT");
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd.output().expect("the rein binary runs")
    })
    .await
    .unwrap()
}

/// A config directory: the example config with a given model script.
fn config_with_script(dir: &Path, script: &str) -> PathBuf {
    let config = dir.join("rein.toml");
    std::fs::copy(example_dir().join("rein.toml"), &config).unwrap();
    std::fs::write(dir.join("demo.script.json"), script).unwrap();
    config
}

const COMPENSATION_SCRIPT: &str = r#"{"turns": [
  {"tool_calls": [{"name": "update_delivery_time", "arguments": {"order_id": "A-1001", "delivery_date": "2026-02-01T10:00:00Z"}}]},
  {"tool_calls": [{"name": "update_delivery_time", "arguments": {"order_id": "A-1002", "delivery_date": "2026-02-02T10:00:00Z"}}]},
  {"tool_calls": [{"name": "update_delivery_time", "arguments": {"order_id": "A-1003", "delivery_date": "2026-02-03T10:00:00Z"}}]},
  {"text": "The third order cannot be moved."}
]}"#;

struct Case {
    point: &'static str,
    n: u32,
    class: &'static str,
    compensation: bool,
}

struct Observed {
    crashed: bool,
    outcome: String,
    ledger: Vec<(String, String)>,
}

async fn run_case(case: &Case) -> Observed {
    let desk = OrderDesk::start().await.unwrap();
    if case.compensation {
        desk.push_fault(
            UPDATE_DELIVERY_TIME,
            Fault::Delay(std::time::Duration::ZERO),
        )
        .unwrap();
        desk.push_fault(
            UPDATE_DELIVERY_TIME,
            Fault::Delay(std::time::Duration::ZERO),
        )
        .unwrap();
        desk.push_fault(UPDATE_DELIVERY_TIME, Fault::status(409))
            .unwrap();
    }
    let dir = tempfile::tempdir().unwrap();
    let script = if case.compensation {
        COMPENSATION_SCRIPT.to_owned()
    } else {
        std::fs::read_to_string(example_dir().join("demo.script.json")).unwrap()
    };
    let config = config_with_script(dir.path(), &script);
    let db = dir.path().join("rein.db");
    let run_id = format!("crash-{}-{}", case.point, case.n);
    let env = vec![
        ("ORDER_DESK_URL", desk.base_url().to_owned()),
        ("MOCK_MODEL_URL", "http://127.0.0.1:9".to_owned()),
    ];
    let common = |cmd: &str| -> Vec<String> {
        let mut v = vec![cmd.to_owned()];
        if cmd == "resume" {
            v.push(run_id.clone());
        }
        v.extend([
            "--config".into(),
            config.display().to_string(),
            "--data".into(),
            db.display().to_string(),
            "--json".into(),
        ]);
        v
    };
    let mut args = common("run");
    args.extend([
        "--agent".into(),
        "order_desk".into(),
        "--input".into(),
        "Move A-1001 and tell the buyer.".into(),
        "--run-id".into(),
        run_id.clone(),
    ]);
    let mut crash_env = env.clone();
    crash_env.push(("REIN_CRASH_AT", format!("{}:{}", case.point, case.n)));
    let first = rein(args, crash_env).await;
    let crashed = first.status.signal() == Some(6);
    assert!(
        crashed,
        "{}:{} did not abort: {:?}\n{}",
        case.point,
        case.n,
        first.status,
        String::from_utf8_lossy(&first.stderr)
    );

    let second = rein(common("resume"), env).await;
    assert!(
        matches!(second.status.code(), Some(0 | 1)),
        "resume failed: {:?}\n{}",
        second.status,
        String::from_utf8_lossy(&second.stderr)
    );
    let doc: Value = serde_json::from_slice(&second.stdout).unwrap();
    let outcome = doc["report"]["outcome"].as_str().unwrap().to_owned();
    let ledger: Vec<(String, String)> = doc["ledger"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["tool"].as_str().unwrap().to_owned(),
                r["status"].as_str().unwrap().to_owned(),
            )
        })
        .collect();

    // The tool service's own log is the ground truth.
    let effects = desk.side_effects();
    let mut per_key: BTreeMap<(String, String), usize> = BTreeMap::new();
    for e in effects.iter().filter(|e| e.effect == EffectKind::Applied) {
        if let Some(key) = &e.idempotency_key {
            *per_key.entry((e.tool.clone(), key.clone())).or_default() += 1;
        }
    }
    assert!(
        per_key.values().all(|&n| n == 1),
        "an idempotency key applied twice: {per_key:?}"
    );
    assert!(
        desk.applied_count(SEND_EMAIL) <= 1,
        "an irreversible action ran twice"
    );
    assert!(
        ledger.iter().all(|(_, status)| status != "pending"),
        "a ledger record was left pending: {ledger:?}"
    );
    // Intents are reused across the processes: every intent of the resumed
    // step appears in the first process's plan.
    let reused = doc["report"]["resume"]["reused_intents"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let events = doc["events"].as_array().unwrap();
    for intent in &reused {
        assert!(
            events.iter().any(|e| e["kind"] == "plan_created"
                && e["data"]["intents"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|i| i["intent_id"] == *intent)),
            "resumed intent {intent} was not planned before the crash"
        );
    }
    // What the resumed process did in the interrupted step, it did under
    // the intent ids planned before the crash (read from its own events,
    // not from the marker).
    let resumed_at = events
        .iter()
        .position(|e| e["kind"] == "run_resumed")
        .expect("the resume is recorded");
    let interrupted = doc["report"]["resume"]["continued_from_step"]
        .as_u64()
        .unwrap()
        + 1;
    let planned_before: Vec<&Value> = events[..resumed_at]
        .iter()
        .filter(|e| e["kind"] == "plan_created" && e["step"] == interrupted)
        .flat_map(|e| {
            e["data"]["intents"]
                .as_array()
                .unwrap()
                .iter()
                .map(|i| &i["intent_id"])
        })
        .collect();
    let mut replayed = 0;
    for e in &events[resumed_at..] {
        if e["step"] == interrupted
            && matches!(
                e["kind"].as_str(),
                Some("tool_call_started" | "tool_call_finished")
            )
        {
            replayed += 1;
            assert!(
                planned_before.contains(&&e["intent_id"]),
                "{}:{} replayed under a new intent id: {e}",
                case.point,
                case.n
            );
        }
    }
    if matches!(
        case.point,
        "before_pending" | "after_pending" | "after_call"
    ) {
        assert!(replayed > 0, "{}:{} replayed nothing", case.point, case.n);
    }
    if outcome == "handed_off" {
        // The package a human needs is retrievable by run id.
        let shown = rein(
            vec![
                "handoff".into(),
                run_id.clone(),
                "--data".into(),
                db.display().to_string(),
            ],
            vec![],
        )
        .await;
        assert_eq!(
            shown.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&shown.stderr)
        );
        let text = String::from_utf8_lossy(&shown.stdout);
        assert!(text.contains("awaiting your decision"), "{text}");
        assert!(text.contains("send_email [manual]"), "{text}");
    }
    if !case.compensation && outcome == "succeeded" {
        // Nothing lost: the resumed run completed every effect exactly once.
        assert_eq!(desk.applied_count(UPDATE_DELIVERY_TIME), 1);
        assert_eq!(desk.applied_count(SEND_EMAIL), 1);
        // Budgets are not reset by a crash: every token the model served is
        // charged exactly once (the demo script's turns total 2 567).
        assert_eq!(
            doc["report"]["consumed"]["tokens"], 2567,
            "{}:{} token accounting across the crash",
            case.point, case.n
        );
    }
    if case.compensation {
        let order: Vec<(String, String)> = effects
            .iter()
            .filter(|e| e.effect == EffectKind::Applied)
            .map(|e| {
                (
                    e.tool.clone(),
                    e.args["order_id"].as_str().unwrap().to_owned(),
                )
            })
            .collect();
        assert_eq!(
            order,
            vec![
                (UPDATE_DELIVERY_TIME.to_owned(), "A-1001".to_owned()),
                (UPDATE_DELIVERY_TIME.to_owned(), "A-1002".to_owned()),
                (RESTORE_DELIVERY_TIME.to_owned(), "A-1002".to_owned()),
                (RESTORE_DELIVERY_TIME.to_owned(), "A-1001".to_owned()),
            ],
            "strict reverse order across the crash"
        );
    }
    Observed {
        crashed,
        outcome,
        ledger,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_matrix_never_loses_or_duplicates_an_effect() {
    let cases = [
        Case {
            point: "before_pending",
            n: 1,
            class: "idempotent_write",
            compensation: false,
        },
        Case {
            point: "before_pending",
            n: 2,
            class: "irreversible",
            compensation: false,
        },
        Case {
            point: "after_pending",
            n: 1,
            class: "idempotent_write",
            compensation: false,
        },
        Case {
            point: "after_pending",
            n: 2,
            class: "irreversible",
            compensation: false,
        },
        Case {
            point: "after_call",
            n: 1,
            class: "read",
            compensation: false,
        },
        Case {
            point: "after_call",
            n: 2,
            class: "idempotent_write",
            compensation: false,
        },
        Case {
            point: "after_call",
            n: 3,
            class: "irreversible",
            compensation: false,
        },
        Case {
            point: "during_checkpoint",
            n: 1,
            class: "read",
            compensation: false,
        },
        Case {
            point: "during_checkpoint",
            n: 2,
            class: "idempotent_write",
            compensation: false,
        },
        Case {
            point: "during_checkpoint",
            n: 3,
            class: "irreversible",
            compensation: false,
        },
        Case {
            point: "mid_compensation",
            n: 1,
            class: "idempotent_write",
            compensation: true,
        },
        Case {
            point: "mid_compensation",
            n: 2,
            class: "idempotent_write",
            compensation: true,
        },
    ];
    let mut table = String::from("point × class → outcome after resume (ledger)\n");
    for case in &cases {
        let seen = run_case(case).await;
        let ledger: Vec<String> = seen
            .ledger
            .iter()
            .map(|(t, s)| format!("{t}={s}"))
            .collect();
        table.push_str(&format!(
            "{:<18} {:<17} crashed={} → {} [{}]\n",
            case.point,
            case.class,
            seen.crashed,
            seen.outcome,
            ledger.join(", ")
        ));
    }
    println!("{table}");
}

/// Without a resume, the reconciler settles what a crashed process left in
/// doubt, from the tool's own state.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconcile_decides_records_left_in_doubt_by_a_crash() {
    let cases = [
        ("after_pending", 1, "update_delivery_time", "failed"),
        ("after_call", 2, "update_delivery_time", "succeeded"),
        ("after_call", 3, "send_email", "manual"),
    ];
    for (point, n, tool, expected) in cases {
        let desk = OrderDesk::start().await.unwrap();
        let dir = tempfile::tempdir().unwrap();
        let script = std::fs::read_to_string(example_dir().join("demo.script.json")).unwrap();
        let config = config_with_script(dir.path(), &script);
        let db = dir.path().join("rein.db");
        let env = vec![
            ("ORDER_DESK_URL", desk.base_url().to_owned()),
            ("MOCK_MODEL_URL", "http://127.0.0.1:9".to_owned()),
        ];
        let mut crash_env = env.clone();
        crash_env.push(("REIN_CRASH_AT", format!("{point}:{n}")));
        let crashed = rein(
            vec![
                "run".into(),
                "--config".into(),
                config.display().to_string(),
                "--data".into(),
                db.display().to_string(),
                "--agent".into(),
                "order_desk".into(),
                "--input".into(),
                "x".into(),
                "--run-id".into(),
                "r1".into(),
            ],
            crash_env,
        )
        .await;
        assert_eq!(crashed.status.signal(), Some(6));
        let out = rein(
            vec![
                "reconcile".into(),
                "--once".into(),
                "--pending-timeout".into(),
                "0s".into(),
                "--config".into(),
                config.display().to_string(),
                "--data".into(),
                db.display().to_string(),
                "--json".into(),
            ],
            env,
        )
        .await;
        let report: Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|_| panic!("{}", String::from_utf8_lossy(&out.stderr)));
        let decided: Vec<(String, String)> = report["fixed"]
            .as_array()
            .unwrap()
            .iter()
            .chain(report["handed_off"].as_array().unwrap())
            .map(|r| {
                (
                    r["tool"].as_str().unwrap().to_owned(),
                    r["to"].as_str().unwrap().to_owned(),
                )
            })
            .collect();
        assert_eq!(
            decided,
            vec![(tool.to_owned(), expected.to_owned())],
            "{point}:{n}"
        );
        assert_eq!(
            out.status.code(),
            Some(if expected == "manual" { 1 } else { 0 })
        );
        // The tool was never called again by the reconciler.
        assert!(desk.applied_count(SEND_EMAIL) <= 1);
        assert!(desk.applied_count(UPDATE_DELIVERY_TIME) <= 1);
    }
}

/// Two processes never drive one run: a resume is refused while a live
/// process holds the run's claim, and taken over once that process is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_driven_by_a_live_process_cannot_be_resumed() {
    use rein_store::{Lease, LeaseKind};
    use rein_store_sqlite::SqliteStore;
    let desk = OrderDesk::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let script = std::fs::read_to_string(example_dir().join("demo.script.json")).unwrap();
    let config = config_with_script(dir.path(), &script);
    let db = dir.path().join("rein.db");
    let env = vec![
        ("ORDER_DESK_URL", desk.base_url().to_owned()),
        ("MOCK_MODEL_URL", "http://127.0.0.1:9".to_owned()),
    ];
    let mut crash_env = env.clone();
    crash_env.push(("REIN_CRASH_AT", "after_pending:1".to_owned()));
    let crashed = rein(
        vec![
            "run".into(),
            "--config".into(),
            config.display().to_string(),
            "--data".into(),
            db.display().to_string(),
            "--agent".into(),
            "order_desk".into(),
            "--input".into(),
            "x".into(),
            "--run-id".into(),
            "r1".into(),
        ],
        crash_env,
    )
    .await;
    assert_eq!(crashed.status.signal(), Some(6));
    // This test process takes the dead process's place as the run's driver.
    let store = SqliteStore::open(&db).unwrap();
    let run_id = rein_core::RunId::new("r1").unwrap();
    let dead = store.leases_of_run(&run_id).await.unwrap();
    assert_eq!(
        dead.len(),
        1,
        "the crashed process's claim is still recorded"
    );
    store.release_lease(&dead[0].lease_id).await.unwrap();
    store
        .acquire_lease(Lease {
            lease_id: "run:r1".into(),
            run_id: run_id.clone(),
            intent_id: None,
            kind: LeaseKind::Run,
            pgid: None,
            path: None,
            owner: rein_engine::lease::Owner::current().to_string(),
            acquired_at_ms: Timestamp::from_millis(0),
            expires_at_ms: Timestamp::from_millis(u64::MAX / 2),
        })
        .await
        .unwrap();
    let resume = |env: Vec<(&'static str, String)>| {
        rein(
            vec![
                "resume".into(),
                "r1".into(),
                "--config".into(),
                config.display().to_string(),
                "--data".into(),
                db.display().to_string(),
                "--json".into(),
            ],
            env,
        )
    };
    let refused = resume(env.clone()).await;
    assert_eq!(refused.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("driven by a live process"));
    assert_eq!(
        desk.request_count(UPDATE_DELIVERY_TIME),
        0,
        "nothing was replayed"
    );
    // Once the claim is released, the resume proceeds.
    store.release_lease("run:r1").await.unwrap();
    let resumed = resume(env).await;
    assert_eq!(
        resumed.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&resumed.stderr)
    );
    assert_eq!(desk.applied_count(UPDATE_DELIVERY_TIME), 1);
}

/// A strong compensation that failed because its target was down is
/// retried by the reconciler, with its key, in reverse order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconcile_retries_a_failed_strong_compensation() {
    let desk = OrderDesk::start().await.unwrap();
    for fault in [
        Fault::Delay(std::time::Duration::ZERO),
        Fault::Delay(std::time::Duration::ZERO),
        Fault::status(409),
    ] {
        desk.push_fault(UPDATE_DELIVERY_TIME, fault).unwrap();
    }
    let mut faults = desk.faults();
    faults = faults.always(RESTORE_DELIVERY_TIME, Fault::status(503));
    desk.set_faults(faults).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = config_with_script(dir.path(), COMPENSATION_SCRIPT);
    // A short run, so the failing compensation gives up quickly.
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(
        &config,
        text.replacen("wall_clock = \"30s\"", "wall_clock = \"2s\"", 1),
    )
    .unwrap();
    let db = dir.path().join("rein.db");
    let env = vec![
        ("ORDER_DESK_URL", desk.base_url().to_owned()),
        ("MOCK_MODEL_URL", "http://127.0.0.1:9".to_owned()),
    ];
    let run = rein(
        vec![
            "run".into(),
            "--config".into(),
            config.display().to_string(),
            "--data".into(),
            db.display().to_string(),
            "--agent".into(),
            "order_desk".into(),
            "--input".into(),
            "x".into(),
            "--json".into(),
        ],
        env.clone(),
    )
    .await;
    let doc: Value = serde_json::from_slice(&run.stdout).unwrap();
    assert_eq!(doc["report"]["outcome"], "handed_off", "{}", doc["report"]);
    assert_eq!(desk.applied_count(RESTORE_DELIVERY_TIME), 0);
    // The target recovers; the reconciler finishes the job.
    desk.clear_faults();
    let out = rein(
        vec![
            "reconcile".into(),
            "--once".into(),
            "--config".into(),
            config.display().to_string(),
            "--data".into(),
            db.display().to_string(),
            "--json".into(),
        ],
        env,
    )
    .await;
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let fixed: Vec<&str> = report["fixed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["to"].as_str().unwrap())
        .collect();
    assert_eq!(fixed, vec!["compensated", "compensated"], "{report}");
    let restores: Vec<String> = desk
        .applied(RESTORE_DELIVERY_TIME)
        .iter()
        .map(|e| e.args["order_id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(restores, vec!["A-1002", "A-1001"], "reverse order");
}

/// The reconciler concludes effects nobody concluded: one kept past its
/// compensation window, and one the tool itself has no trace of.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconcile_flags_effects_past_their_window_or_contradicted_by_the_tool() {
    let script = std::fs::read_to_string(example_dir().join("demo.script.json")).unwrap();
    let reconcile = |config: PathBuf, db: PathBuf, desk_url: String| async move {
        let out = rein(
            vec![
                "reconcile".into(),
                "--once".into(),
                "--config".into(),
                config.display().to_string(),
                "--data".into(),
                db.display().to_string(),
                "--json".into(),
            ],
            vec![
                ("ORDER_DESK_URL", desk_url),
                ("MOCK_MODEL_URL", "http://127.0.0.1:9".into()),
            ],
        )
        .await;
        let report: Value = serde_json::from_slice(&out.stdout).unwrap();
        report["handed_off"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                (
                    r["tool"].as_str().unwrap().to_owned(),
                    r["reason"].as_str().unwrap().to_owned(),
                )
            })
            .collect::<Vec<_>>()
    };
    let run = |config: PathBuf, db: PathBuf, desk_url: String| async move {
        let out = rein(
            vec![
                "run".into(),
                "--config".into(),
                config.display().to_string(),
                "--data".into(),
                db.display().to_string(),
                "--agent".into(),
                "order_desk".into(),
                "--input".into(),
                "x".into(),
                "--json".into(),
            ],
            vec![
                ("ORDER_DESK_URL", desk_url),
                ("MOCK_MODEL_URL", "http://127.0.0.1:9".into()),
            ],
        )
        .await;
        let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
        doc["report"]["outcome"].as_str().unwrap().to_owned()
    };

    // Past its window: the demo's partial success keeps the update.
    let desk = OrderDesk::start_with(
        rein_testkit::order_desk::OrderDeskConfig::default()
            .with_faults(rein_testkit::order_desk::Faults::demo()),
    )
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = config_with_script(dir.path(), &script);
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(
        &config,
        text.replacen("window = \"24h\"", "window = \"1ms\"", 1),
    )
    .unwrap();
    let db = dir.path().join("rein.db");
    assert_eq!(
        run(config.clone(), db.clone(), desk.base_url().to_owned()).await,
        "partial_success"
    );
    let flagged = reconcile(config, db, desk.base_url().to_owned()).await;
    assert_eq!(flagged.len(), 1, "{flagged:?}");
    assert_eq!(flagged[0].0, UPDATE_DELIVERY_TIME);
    assert!(
        flagged[0].1.contains("past its compensation window"),
        "{flagged:?}"
    );

    // Contradicted: the tool's state was lost (a fresh desk answers now).
    let desk = OrderDesk::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = config_with_script(dir.path(), &script);
    let db = dir.path().join("rein.db");
    assert_eq!(
        run(config.clone(), db.clone(), desk.base_url().to_owned()).await,
        "succeeded"
    );
    let amnesiac = OrderDesk::start().await.unwrap();
    let flagged = reconcile(config, db, amnesiac.base_url().to_owned()).await;
    assert_eq!(flagged.len(), 1, "{flagged:?}");
    assert_eq!(flagged[0].0, UPDATE_DELIVERY_TIME);
    assert!(flagged[0].1.contains("no trace of its key"), "{flagged:?}");
}

/// A finished run whose report says it is recoverable can be resumed: a
/// run that ran out of steps before it could notify the buyer continues
/// once its budget is raised, without repeating what it did. The email the
/// target refused (503, not applied) is what the report said to retry: it
/// is sent again under its original intent before the model is asked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recoverable_finished_run_resumes_without_repeating_its_effects() {
    // The demo's update fault, and a 503 for the email: not the demo's 429
    // with an hour's Retry-After, which (rightly) keeps every run off
    // send_email for that hour, the resume included (health memory).
    use rein_testkit::order_desk::{Fault, Faults};
    let faults = Faults::none()
        .then(UPDATE_DELIVERY_TIME, Fault::LoseResponse)
        .then(SEND_EMAIL, Fault::status(503));
    let desk = OrderDesk::start_with(
        rein_testkit::order_desk::OrderDeskConfig::default().with_faults(faults),
    )
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let script = r#"{"turns": [
      {"tool_calls": [{"name": "get_order", "arguments": {"order_id": "A-1001"}}]},
      {"tool_calls": [{"name": "update_delivery_time", "arguments": {"order_id": "A-1001", "delivery_date": "2026-01-08T14:00:00Z"}}]},
      {"tool_calls": [{"name": "send_email", "arguments": {"to": "buyer-a1001@example.com", "subject": "New date", "body": "8 January"}}]},
      {"text": "Updated and notified."}
    ]}"#;
    let config = config_with_script(dir.path(), script);
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(&config, text.replacen("max_steps = 10", "max_steps = 3", 1)).unwrap();
    let db = dir.path().join("rein.db");
    let env = vec![
        ("ORDER_DESK_URL", desk.base_url().to_owned()),
        ("MOCK_MODEL_URL", "http://127.0.0.1:9".to_owned()),
    ];
    let first = rein(
        vec![
            "run".into(),
            "--config".into(),
            config.display().to_string(),
            "--data".into(),
            db.display().to_string(),
            "--agent".into(),
            "order_desk".into(),
            "--input".into(),
            "x".into(),
            "--run-id".into(),
            "r1".into(),
            "--json".into(),
        ],
        env.clone(),
    )
    .await;
    let doc: Value = serde_json::from_slice(&first.stdout).unwrap();
    assert_eq!(
        doc["report"]["outcome"], "budget_exhausted",
        "{}",
        doc["report"]
    );
    assert_eq!(doc["report"]["recoverable"], true);
    assert_eq!(desk.applied_count(SEND_EMAIL), 0);

    // The operator raises the step budget and resumes the same run.
    std::fs::write(&config, text).unwrap();
    let resumed = rein(
        vec![
            "resume".into(),
            "r1".into(),
            "--config".into(),
            config.display().to_string(),
            "--data".into(),
            db.display().to_string(),
            "--json".into(),
        ],
        env,
    )
    .await;
    let doc: Value = serde_json::from_slice(&resumed.stdout)
        .unwrap_or_else(|_| panic!("{}", String::from_utf8_lossy(&resumed.stderr)));
    assert_eq!(doc["report"]["outcome"], "succeeded", "{}", doc["report"]);
    assert_eq!(doc["report"]["resume"]["continued_from_step"], 3);
    assert_eq!(
        doc["report"]["resume"]["retried"].as_array().map(Vec::len),
        Some(1),
        "{}",
        doc["report"]["resume"]
    );
    assert_eq!(
        doc["report"]["steps"], 5,
        "the 3 earlier steps count: budgets are not reset (then the retry and the answer)"
    );
    assert_eq!(
        desk.applied_count(UPDATE_DELIVERY_TIME),
        1,
        "the update was not repeated"
    );
    assert_eq!(desk.applied_count(SEND_EMAIL), 1);
}
