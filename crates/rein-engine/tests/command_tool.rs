//! The command tool adapter and the lease reaper with real processes, a
//! real SQLite file and a real crash (issue 4, item 6).
//!
//! Waiting for the OS (a pid file to appear, a lease to be stored) polls
//! with a hard upper bound; nothing sleeps to synchronize.
#![cfg(unix)]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use rein_core::Timestamp;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use rein_core::idempotency::IdempotencyKey;
use rein_core::{AttemptId, Category, Effect, Failure, IntentId, RunId, TenantId};
use rein_engine::lease::{Reaper, Reclamation, SkipReason};
use rein_engine::tool_command::{CommandTarget, CommandToolAdapter};
use rein_engine::tool_http::{Attempt, ToolOutput};
use rein_store::{
    Intercept, Intercepted, Lease, LeaseChange, LeaseKind, NewRun, RunStore, Store, StoreError,
    StoreExt,
};
use rein_store_sqlite::SqliteStore;
use serde_json::{Value, json};

/// The env var that turns `crash_helper_holds_a_command_lease` into the
/// crashing process: the SQLite file it leases in.
const HELPER_DB_ENV: &str = "REIN_TEST_CRASH_HELPER_DB";
/// Where the helper makes its temporary directories.
const HELPER_TMP_ENV: &str = "REIN_TEST_CRASH_HELPER_TMP";
const HELPER_RUN: &str = "crash-run";

/// Hangs after recording its own pid and its background child's pid in
/// the leased temporary directory (written then renamed, so a reader never
/// sees half a file).
const HANG_WITH_GRANDCHILD: &str = "sleep 300 & \
     printf '%s %s\\n' $$ $! > \"$REIN_TEMP_DIR/pids.tmp\"; \
     mv \"$REIN_TEMP_DIR/pids.tmp\" \"$REIN_TEMP_DIR/pids\"; \
     sleep 300; wait";

/// Polls `check` until it yields a value, for at most `bound`.
async fn poll<T>(what: &str, bound: Duration, mut check: impl FnMut() -> Option<T>) -> T {
    let until = Instant::now() + bound;
    loop {
        if let Some(found) = check() {
            return found;
        }
        assert!(
            Instant::now() < until,
            "gave up after {bound:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Whether `pid` is still running, read from `/proc` (a zombie is dead:
/// this machine's init may not reap orphans) or, without `/proc`, from a
/// signal-0 probe.
fn running(pid: i32) -> bool {
    if Path::new("/proc/self/stat").exists() {
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            return false;
        };
        let state = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .unwrap_or("X");
        return !matches!(state, "Z" | "X");
    }
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None).is_ok()
}

fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

async fn store_with_run(path: &Path, run: &str) -> (Arc<SqliteStore>, RunId) {
    let store = Arc::new(SqliteStore::open(path).unwrap());
    let run_id = RunId::new(run).unwrap();
    store
        .create_run(NewRun {
            run_id: run_id.clone(),
            tenant: TenantId::new("acme").unwrap(),
            agent: "ops".to_owned(),
            input: "run the report".to_owned(),
            parent_run_id: None,
            budget: json!({}),
            created_at_ms: Timestamp::from_millis(unix_ms()),
            trace_parent: None,
        })
        .await
        .unwrap();
    (store, run_id)
}

fn sh(name: &str, script: &str) -> CommandTarget {
    CommandTarget::new(name, "sh").with_args(["-c", script])
}

/// One attempt of `target` with `limit` as its time limit.
async fn call(
    adapter: &CommandToolAdapter,
    target: &CommandTarget,
    run_id: &RunId,
    args: Value,
    limit: Duration,
    cancelled: impl Future<Output = ()>,
) -> Result<ToolOutput, Failure> {
    let intent = IntentId::new("intent-7").unwrap();
    let attempt_id = AttemptId::new("intent-7/2").unwrap();
    let key = IdempotencyKey::parse("key-123").unwrap();
    let attempt = Attempt {
        run_id,
        intent_id: &intent,
        attempt_id: &attempt_id,
        number: 2,
        key: Some(&key),
        remaining: limit,
        allowance: limit,
    };
    adapter
        .invoke_until(target, &args, &attempt, cancelled)
        .await
}

/// The leased temporary directories under `root`.
fn leased_dirs(root: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(root)
        .map(|entries| {
            entries
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| {
                    p.file_name()
                        .and_then(|n| n.to_str())
                        .is_some_and(|n| n.starts_with("rein-lease-"))
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The two pids a [`HANG_WITH_GRANDCHILD`] command recorded under `root`.
fn recorded_pids(root: &Path) -> Option<(i32, i32)> {
    leased_dirs(root).iter().find_map(|dir| {
        let text = std::fs::read_to_string(dir.join("pids")).ok()?;
        let mut pids = text.split_whitespace().map(|p| p.parse::<i32>().ok());
        Some((pids.next()??, pids.next()??))
    })
}

struct Fixture {
    _dir: tempfile::TempDir,
    tmp: PathBuf,
    store: Arc<SqliteStore>,
    run_id: RunId,
    adapter: CommandToolAdapter,
}

async fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let tmp = dir.path().join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    let (store, run_id) = store_with_run(&dir.path().join("rein.db"), "run-cmd").await;
    let adapter = CommandToolAdapter::new(store.clone())
        .with_temp_root(&tmp)
        .with_kill_grace(Duration::from_millis(500));
    Fixture {
        _dir: dir,
        tmp,
        store,
        run_id,
        adapter,
    }
}

impl Fixture {
    async fn assert_clean(&self) {
        assert_eq!(
            self.store.leases_of_run(&self.run_id).await.unwrap(),
            Vec::new(),
            "every lease is released"
        );
        assert_eq!(
            leased_dirs(&self.tmp),
            Vec::<PathBuf>::new(),
            "temp dirs removed"
        );
    }
}

#[tokio::test]
async fn a_command_that_prints_json_succeeds_with_the_call_in_its_environment() {
    let f = fixture().await;
    let script = r#"input=$(cat)
tmp=false; [ -d "$REIN_TEMP_DIR" ] && [ "$TMPDIR" = "$REIN_TEMP_DIR" ] && tmp=true
printf '{"input": %s, "run": "%s", "intent": "%s", "attempt": %s, "attempt_id": "%s", "key": "%s", "deadline_ms": %s, "tmp": %s, "leaked": "%s", "mode": "%s"}' \
  "$input" "$REIN_RUN_ID" "$REIN_INTENT_ID" "$REIN_ATTEMPT" "$REIN_ATTEMPT_ID" \
  "$REIN_IDEMPOTENCY_KEY" "$REIN_DEADLINE_MS" "$tmp" "${CARGO_PKG_NAME:-unset}" "$MODE""#;
    let target = sh("report", script).with_env("MODE", "fast");
    let out = call(
        &f.adapter,
        &target,
        &f.run_id,
        json!({"order_id": "A-1", "n": 2}),
        Duration::from_secs(10),
        std::future::pending(),
    )
    .await
    .unwrap();
    assert!(!out.truncated);
    assert_eq!(out.result["input"], json!({"order_id": "A-1", "n": 2}));
    assert_eq!(out.result["run"], "run-cmd");
    assert_eq!(out.result["intent"], "intent-7");
    assert_eq!(out.result["attempt"], 2);
    assert_eq!(out.result["attempt_id"], "intent-7/2");
    assert_eq!(out.result["key"], "key-123");
    assert_eq!(out.result["deadline_ms"], 10_000);
    assert_eq!(out.result["tmp"], true, "a leased temp dir, also in TMPDIR");
    assert_eq!(
        out.result["leaked"], "unset",
        "rein's own environment stays out"
    );
    assert_eq!(out.result["mode"], "fast");
    f.assert_clean().await;
}

#[tokio::test]
async fn plain_text_output_is_wrapped_and_empty_output_is_null() {
    let f = fixture().await;
    let never = || std::future::pending();
    let limit = Duration::from_secs(10);
    let text = call(
        &f.adapter,
        &sh("t", "echo hello"),
        &f.run_id,
        json!({}),
        limit,
        never(),
    )
    .await
    .unwrap();
    assert_eq!(text.result, json!({"text": "hello\n"}));
    let empty = call(
        &f.adapter,
        &sh("t", "true"),
        &f.run_id,
        json!({}),
        limit,
        never(),
    )
    .await
    .unwrap();
    assert_eq!(empty.result, Value::Null);
    let binary = call(
        &f.adapter,
        &sh("t", "printf '\\377\\376ok'"),
        &f.run_id,
        json!({}),
        limit,
        never(),
    )
    .await
    .unwrap();
    assert!(binary.result["text"].as_str().unwrap().ends_with("ok"));
    f.assert_clean().await;
}

#[tokio::test]
async fn a_non_zero_exit_is_a_structured_failure() {
    let f = fixture().await;
    let limit = Duration::from_secs(10);
    let failed = call(
        &f.adapter,
        &sh("report", "echo 'secret stack trace' >&2; exit 3"),
        &f.run_id,
        json!({}),
        limit,
        std::future::pending(),
    )
    .await
    .unwrap_err();
    assert_eq!(failed.category(), Category::Unknown);
    assert!(!failed.retryable());
    assert_eq!(failed.effect(), Effect::MaybeApplied);
    assert_eq!(
        failed.attempt_id().map(AttemptId::as_str),
        Some("intent-7/2")
    );
    assert!(failed.human_message().contains("exited with code 3"));
    assert!(failed.human_message().contains("secret stack trace"));
    assert!(
        !failed.model_message().contains("secret"),
        "the model never sees raw error text"
    );

    let tempfail = call(
        &f.adapter,
        &sh("report", "exit 75"),
        &f.run_id,
        json!({}),
        limit,
        std::future::pending(),
    )
    .await
    .unwrap_err();
    assert_eq!(tempfail.category(), Category::Transient);
    assert!(tempfail.retryable());
    assert_eq!(tempfail.effect(), Effect::MaybeApplied);

    let structured = call(
        &f.adapter,
        &sh(
            "report",
            r#"echo '{"error": {"category": "rate_limited", "retryable": true, "retry_after_ms": 1500, "effect": "not_applied", "message": "quota"}}'; exit 1"#,
        ),
        &f.run_id,
        json!({}),
        limit,
        std::future::pending(),
    )
    .await
    .unwrap_err();
    assert_eq!(structured.category(), Category::RateLimited);
    assert!(structured.retryable());
    assert_eq!(structured.retry_after(), Some(Duration::from_millis(1500)));
    assert_eq!(
        structured.effect(),
        Effect::NotApplied,
        "the tool's word wins"
    );
    f.assert_clean().await;
}

#[tokio::test]
async fn a_program_that_cannot_start_is_not_applied_and_leaves_nothing() {
    let f = fixture().await;
    let missing = CommandTarget::new("ghost", "no-such-program-for-rein-tests");
    let failed = call(
        &f.adapter,
        &missing,
        &f.run_id,
        json!({}),
        Duration::from_secs(5),
        std::future::pending(),
    )
    .await
    .unwrap_err();
    assert_eq!(failed.effect(), Effect::NotApplied);
    assert!(!failed.retryable());
    assert!(
        failed.human_message().contains("not found"),
        "{}",
        failed.human_message()
    );

    let no_dir = sh("t", "true").with_working_dir(f.tmp.join("missing-dir"));
    let failed = call(
        &f.adapter,
        &no_dir,
        &f.run_id,
        json!({}),
        Duration::from_secs(5),
        std::future::pending(),
    )
    .await
    .unwrap_err();
    assert_eq!(failed.effect(), Effect::NotApplied);
    f.assert_clean().await;
}

#[tokio::test]
async fn oversized_output_is_truncated_with_a_note() {
    let f = fixture().await;
    let flood = sh(
        "dump",
        "head -c 300000 /dev/zero | tr '\\0' a; head -c 300000 /dev/zero >&2",
    )
    .with_max_output_bytes(1024);
    let out = call(
        &f.adapter,
        &flood,
        &f.run_id,
        json!({}),
        Duration::from_secs(10),
        std::future::pending(),
    )
    .await
    .unwrap();
    assert!(out.truncated);
    assert_eq!(out.result["text"].as_str().unwrap().len(), 1024);
    assert_eq!(out.result["_truncated"]["original_bytes"], 300_000);
    assert_eq!(out.result["_truncated"]["limit_bytes"], 1024);
    assert!(
        out.result["_truncated"]["note"]
            .as_str()
            .unwrap()
            .contains("truncated")
    );

    let failing =
        sh("dump", "head -c 300000 /dev/zero | tr '\\0' e >&2; exit 1").with_max_output_bytes(512);
    let failed = call(
        &f.adapter,
        &failing,
        &f.run_id,
        json!({}),
        Duration::from_secs(10),
        std::future::pending(),
    )
    .await
    .unwrap_err();
    assert!(
        failed
            .human_message()
            .contains("stderr truncated: 512 of 300000 bytes kept"),
        "{}",
        failed.human_message()
    );
    f.assert_clean().await;
}

#[tokio::test]
async fn a_hanging_command_and_its_grandchild_are_killed_as_a_group_at_the_deadline() {
    let f = fixture().await;
    let limit = Duration::from_millis(1500);
    let started = Instant::now();
    let task = {
        let adapter = f.adapter.clone();
        let run_id = f.run_id.clone();
        tokio::spawn(async move {
            let target = sh("hang", HANG_WITH_GRANDCHILD);
            call(
                &adapter,
                &target,
                &run_id,
                json!({}),
                limit,
                std::future::pending(),
            )
            .await
        })
    };
    let (shell, grandchild) = poll("the pid file", Duration::from_secs(10), || {
        recorded_pids(&f.tmp)
    })
    .await;
    assert!(running(shell) && running(grandchild));
    let held = f.store.leases_of_run(&f.run_id).await.unwrap();
    let kinds: Vec<LeaseKind> = held.iter().map(|l| l.kind).collect();
    assert!(kinds.contains(&LeaseKind::ProcessGroup) && kinds.contains(&LeaseKind::TempPath));
    let group = held
        .iter()
        .find(|l| l.kind == LeaseKind::ProcessGroup)
        .unwrap();
    assert_eq!(group.pgid, Some(shell), "the command leads its own group");
    assert_eq!(group.owner, f.adapter.owner());
    assert_eq!(
        group.intent_id.as_ref().map(IntentId::as_str),
        Some("intent-7")
    );

    let failed = task.await.unwrap().unwrap_err();
    let elapsed = started.elapsed();
    assert_eq!(failed.category(), Category::Timeout);
    assert_eq!(failed.effect(), Effect::MaybeApplied);
    // Ended by the deadline's own wait (not by the program, which sleeps
    // 300 s): no wall-clock allowance needed to tell them apart. Real
    // processes cannot run under paused time, so the bound below is the
    // only timing one, and a lower one.
    assert!(
        failed
            .human_message()
            .contains(&format!("killed at its deadline of {limit:?}")),
        "{}",
        failed.human_message()
    );
    assert!(
        elapsed >= limit,
        "killed at, not before, the deadline: {elapsed:?}"
    );
    assert!(!running(shell), "the command ({shell}) is gone");
    assert!(
        !running(grandchild),
        "its grandchild ({grandchild}) is gone"
    );
    f.assert_clean().await;
}

#[tokio::test]
async fn cancellation_kills_the_whole_group() {
    let f = fixture().await;
    let (cancel, cancelled) = tokio::sync::oneshot::channel::<()>();
    let task = {
        let adapter = f.adapter.clone();
        let run_id = f.run_id.clone();
        tokio::spawn(async move {
            let target = sh("hang", HANG_WITH_GRANDCHILD);
            let cancelled = async move {
                let _ = cancelled.await;
            };
            call(
                &adapter,
                &target,
                &run_id,
                json!({}),
                Duration::from_secs(120),
                cancelled,
            )
            .await
        })
    };
    let (shell, grandchild) = poll("the pid file", Duration::from_secs(10), || {
        recorded_pids(&f.tmp)
    })
    .await;
    cancel.send(()).unwrap();
    let failed = tokio::time::timeout(Duration::from_secs(10), task)
        .await
        .expect("cancellation ends the call promptly")
        .unwrap()
        .unwrap_err();
    assert_eq!(failed.category(), Category::Cancelled);
    assert!(!failed.retryable());
    assert_eq!(failed.effect(), Effect::MaybeApplied);
    assert!(!running(shell) && !running(grandchild));
    f.assert_clean().await;
}

#[tokio::test]
async fn processes_left_in_the_background_are_ended_when_the_command_exits() {
    let f = fixture().await;
    let pid_file = f.tmp.join("background.pid");
    // The background sleep keeps stdout open: without ending the group the
    // adapter would wait for it.
    let target = sh(
        "fire_and_forget",
        "sleep 300 & echo $! > \"$PID_FILE\"; echo '{\"ok\": true}'",
    )
    .with_env("PID_FILE", pid_file.to_str().unwrap());
    let out = call(
        &f.adapter,
        &target,
        &f.run_id,
        json!({}),
        Duration::from_secs(60),
        std::future::pending(),
    )
    .await
    .unwrap();
    // The whole stdout arrived, which needs the leftover's copy of the pipe
    // closed: without ending the group the drain would have given up
    // (bounded) with nothing. This, not a wall-clock allowance, shows the
    // adapter did not wait for the leftover.
    assert_eq!(out.result, json!({"ok": true}));
    let background: i32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(
        !running(background),
        "the leftover ({background}) was ended"
    );
    f.assert_clean().await;
}

/// A store that refuses to lease process groups: the start gate must then
/// never let the program run.
struct RefuseGroupLeases;

#[async_trait]
impl Intercept for RefuseGroupLeases {
    async fn change_lease(
        &self,
        inner: &dyn Store,
        change: LeaseChange,
    ) -> Result<Option<Lease>, StoreError> {
        if let LeaseChange::Acquire(lease) = &change
            && lease.kind == LeaseKind::ProcessGroup
        {
            return Err(StoreError::Unavailable("injected: lease table busy".into()));
        }
        inner.change_lease(change).await
    }
}

#[tokio::test]
async fn without_a_durable_group_lease_the_program_never_starts() {
    let f = fixture().await;
    let refusing = CommandToolAdapter::new(Arc::new(Intercepted::new(
        f.store.clone(),
        RefuseGroupLeases,
    )))
    .with_temp_root(&f.tmp);
    let marker = f.tmp.join("ran");
    let target = sh("effect", "touch \"$MARKER\"").with_env("MARKER", marker.to_str().unwrap());
    let failed = call(
        &refusing,
        &target,
        &f.run_id,
        json!({}),
        Duration::from_secs(10),
        std::future::pending(),
    )
    .await
    .unwrap_err();
    assert_eq!(failed.effect(), Effect::NotApplied);
    assert_eq!(
        failed.category(),
        Category::Transient,
        "the store was only busy"
    );
    assert!(failed.retryable());
    assert!(!marker.exists(), "the program never ran");
    f.assert_clean().await;
}

/// Not a test on its own: with [`HELPER_DB_ENV`] set, this is the process
/// that crashes while holding a command lease (see
/// `the_reaper_kills_the_group_left_by_a_crashed_process`).
#[tokio::test]
async fn crash_helper_holds_a_command_lease() {
    let (Some(db), Some(tmp)) = (
        std::env::var_os(HELPER_DB_ENV),
        std::env::var_os(HELPER_TMP_ENV),
    ) else {
        return;
    };
    let (store, run_id) = store_with_run(Path::new(&db), HELPER_RUN).await;
    let adapter = CommandToolAdapter::new(store).with_temp_root(PathBuf::from(tmp));
    let target = sh("hang", HANG_WITH_GRANDCHILD);
    // Killed with SIGKILL by the parent test long before this returns.
    let _ = call(
        &adapter,
        &target,
        &run_id,
        json!({}),
        Duration::from_secs(300),
        std::future::pending(),
    )
    .await;
}

#[tokio::test]
async fn the_reaper_kills_the_group_left_by_a_crashed_process() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("rein.db");
    let tmp = dir.path().join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    let mut helper = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "crash_helper_holds_a_command_lease",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(HELPER_DB_ENV, &db)
        .env(HELPER_TMP_ENV, &tmp)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();

    let (shell, grandchild) = poll("the helper's pid file", Duration::from_secs(30), || {
        recorded_pids(&tmp)
    })
    .await;
    // The helper opened the file first (it creates the run); this handle
    // sees its commits.
    let store = SqliteStore::open(&db).unwrap();
    let run_id = RunId::new(HELPER_RUN).unwrap();
    let leases = store.leases_of_run(&run_id).await.unwrap();
    assert_eq!(leases.len(), 2, "{leases:?}");
    let past_expiry =
        leases.iter().map(|l| l.expires_at_ms).max().unwrap() + Duration::from_millis(1);
    let helper_pid = i32::try_from(helper.id()).unwrap();
    assert!(
        leases
            .iter()
            .all(|l| l.owner.starts_with(&format!("pid:{helper_pid}")))
    );

    // While the owner lives, the reaper leaves its leases alone.
    let reaper = Reaper::new().with_kill_grace(Duration::from_millis(500));
    let early = reaper.reap(&store, past_expiry).await.unwrap();
    assert!(early.reclaimed.is_empty(), "{early:?}");
    assert!(
        early
            .skipped
            .iter()
            .all(|s| s.reason == SkipReason::OwnerAlive),
        "{early:?}"
    );
    assert!(running(shell) && running(grandchild));

    // The crash: no cleanup runs.
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(helper_pid),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    helper.wait().unwrap();
    assert!(
        running(shell) && running(grandchild),
        "the crash left the group running"
    );
    assert_eq!(leased_dirs(&tmp).len(), 1, "and its temp dir");

    // Not expired yet: nothing to do.
    let first_expiry = leases.iter().map(|l| l.expires_at_ms).min().unwrap();
    let not_yet = reaper
        .reap(&store, first_expiry - Duration::from_millis(1))
        .await
        .unwrap();
    assert!(not_yet.reclaimed.is_empty() && not_yet.skipped.is_empty());

    let report = reaper.reap(&store, past_expiry).await.unwrap();
    assert!(report.skipped.is_empty(), "{report:?}");
    assert_eq!(report.reclaimed.len(), 2, "{report:?}");
    match &report.reclaimed[0].action {
        Reclamation::GroupEnded { members, .. } => {
            assert!(
                members.contains(&shell) && members.contains(&grandchild),
                "{members:?}"
            );
        }
        other => panic!("expected the group first, found {other:?}"),
    }
    assert_eq!(report.reclaimed[1].action, Reclamation::PathRemoved);
    assert!(
        !running(shell),
        "the crashed call's command ({shell}) is gone"
    );
    assert!(
        !running(grandchild),
        "its grandchild ({grandchild}) is gone"
    );
    assert_eq!(store.leases_of_run(&run_id).await.unwrap(), Vec::new());
    assert_eq!(leased_dirs(&tmp), Vec::<PathBuf>::new());

    // Reaping again finds nothing.
    let again = reaper
        .reap(&store, Timestamp::from_millis(u64::MAX))
        .await
        .unwrap();
    assert!(again.reclaimed.is_empty() && again.skipped.is_empty());
}

#[tokio::test]
async fn the_reaper_releases_leases_whose_resources_are_already_gone_and_refuses_odd_paths() {
    let f = fixture().await;
    let base = Lease {
        lease_id: "stale-pg".to_owned(),
        run_id: f.run_id.clone(),
        intent_id: None,
        kind: LeaseKind::ProcessGroup,
        // Our own process group holds no member with this lease's marker;
        // a group id nobody uses has no member at all.
        pgid: Some(i32::MAX - 7),
        path: None,
        owner: "pid:999999999@elsewhere".to_owned(),
        acquired_at_ms: Timestamp::from_millis(1),
        expires_at_ms: Timestamp::from_millis(2),
    };
    // This machine and pid namespace (what follows the `@` of this
    // process's id), a pid that runs nothing.
    let me = rein_engine::lease::Owner::current().to_string();
    let local_dead_owner = format!("pid:{}{}", i32::MAX - 3, &me[me.find('@').unwrap()..]);
    let gone_group = Lease {
        owner: local_dead_owner.clone(),
        ..base.clone()
    };
    let foreign = Lease {
        lease_id: "foreign".to_owned(),
        ..base.clone()
    };
    let odd_path = Lease {
        lease_id: "odd-path".to_owned(),
        kind: LeaseKind::TempPath,
        pgid: None,
        path: Some(f.tmp.clone()),
        owner: local_dead_owner.clone(),
        ..base.clone()
    };
    let gone_path = Lease {
        lease_id: "gone-path".to_owned(),
        kind: LeaseKind::TempPath,
        pgid: None,
        path: Some(f.tmp.join("rein-lease-never-made")),
        owner: local_dead_owner.clone(),
        ..base.clone()
    };
    // A live group that never carried the lease's marker: what a reused
    // group id looks like.
    let mut stranger = {
        use std::os::unix::process::CommandExt;
        std::process::Command::new("sleep")
            .arg("300")
            .process_group(0)
            .spawn()
            .unwrap()
    };
    let stranger_pgid = i32::try_from(stranger.id()).unwrap();
    let not_ours = Lease {
        lease_id: "not-ours".to_owned(),
        pgid: Some(stranger_pgid),
        owner: local_dead_owner,
        ..base.clone()
    };
    for lease in [&gone_group, &foreign, &odd_path, &gone_path, &not_ours] {
        f.store.acquire_lease(lease.clone()).await.unwrap();
    }
    let report = Reaper::new()
        .reap(f.store.as_ref(), Timestamp::from_millis(10))
        .await
        .unwrap();
    let reclaimed: Vec<(&str, &Reclamation)> = report
        .reclaimed
        .iter()
        .map(|r| (r.lease.lease_id.as_str(), &r.action))
        .collect();
    assert!(
        reclaimed.contains(&("stale-pg", &Reclamation::GroupAlreadyGone)),
        "{report:?}"
    );
    assert!(
        reclaimed.contains(&("gone-path", &Reclamation::PathAlreadyGone)),
        "{report:?}"
    );
    let skipped: Vec<(&str, &SkipReason)> = report
        .skipped
        .iter()
        .map(|s| (s.lease.lease_id.as_str(), &s.reason))
        .collect();
    assert!(skipped.contains(&(
        "foreign",
        &SkipReason::ForeignHost {
            host: "elsewhere".to_owned()
        }
    )));
    assert!(skipped.contains(&("odd-path", &SkipReason::UnsafePath)));
    assert!(
        f.tmp.exists(),
        "a path not named rein-lease-* is never removed"
    );
    if Path::new("/proc/self/environ").exists() {
        assert!(
            skipped.iter().any(|(id, reason)| *id == "not-ours"
                && matches!(reason, SkipReason::NotOurGroup { .. })),
            "{report:?}"
        );
        assert!(
            running(stranger_pgid),
            "an unmarked group is never signalled"
        );
    }
    stranger.kill().unwrap();
    stranger.wait().unwrap();
    let left: Vec<String> = f
        .store
        .leases_of_run(&f.run_id)
        .await
        .unwrap()
        .into_iter()
        .map(|l| l.lease_id)
        .collect();
    assert!(!left.contains(&"stale-pg".to_owned()) && !left.contains(&"gone-path".to_owned()));
    assert!(left.contains(&"foreign".to_owned()) && left.contains(&"odd-path".to_owned()));
}

/// Before a resume replays or settles anything, the run's leftovers from a
/// dead process are ended even though their leases have not expired yet.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reap_run_ends_a_dead_owners_group_before_its_lease_expires() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("rein.db");
    let tmp = dir.path().join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    let mut helper = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "crash_helper_holds_a_command_lease",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(HELPER_DB_ENV, &db)
        .env(HELPER_TMP_ENV, &tmp)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let (shell, grandchild) = poll("the helper's pid file", Duration::from_secs(30), || {
        recorded_pids(&tmp)
    })
    .await;
    let store = SqliteStore::open(&db).unwrap();
    let run_id = RunId::new(HELPER_RUN).unwrap();
    let reaper = Reaper::new().with_kill_grace(Duration::from_millis(500));
    // While the owner lives, nothing is touched.
    let early = reaper.reap_run(&store, &run_id).await.unwrap();
    assert!(early.reclaimed.is_empty(), "{early:?}");
    let helper_pid = i32::try_from(helper.id()).unwrap();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(helper_pid),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    helper.wait().unwrap();
    assert!(running(shell) && running(grandchild));
    let report = reaper.reap_run(&store, &run_id).await.unwrap();
    assert_eq!(report.reclaimed.len(), 2, "{report:?}");
    assert!(!running(shell) && !running(grandchild), "the group is gone");
    assert_eq!(store.leases_of_run(&run_id).await.unwrap(), Vec::new());
}
