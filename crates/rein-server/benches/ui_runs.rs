//! The dashboard's runs page over a store of 10,000 runs (issue 38): the
//! server time of one page, and what a first load transfers.
//!
//! ```text
//! cargo bench -p rein-server --bench ui_runs [-- --runs N] [--requests N] [--rounds N]
//! ```
//!
//! A SQLite store is filled with `--runs` (10,000) runs of two agents, nine
//! in ten finished with a report (outcome, cost, steps, duration), one in
//! ten still running; then the router `rein serve` runs answers requests
//! in-process (`tower::ServiceExt::oneshot`: the whole stack of layers and
//! the handler, no socket), one at a time. Each round times `--requests`
//! (200) requests of each page in turn, interleaved, so a change of the
//! machine's load hits them alike:
//!
//! | page | what it reads |
//! | --- | --- |
//! | `GET /healthz` | nothing: the baseline, the layers' own cost |
//! | `GET /v1/runs` | the API's first page of 50, as JSON |
//! | `GET /ui/runs` | the dashboard's first page of 50, as HTML |
//! | `GET /ui/runs?agent=mover&status=succeeded` | a filtered page |
//! | `GET /ui/runs?cursor=…` | the second page, by the listing's cursor |
//!
//! The report gives each page's median of the rounds' medians, the
//! slowest round's, and its ratio to the baseline, then the bytes of a first load: the
//! runs page and the assets it links (stylesheet, script, icon). The goal
//! is a median of at most 50 ms and a first load of at most 200 KB.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::{Body, to_bytes};
use axum::http::{Request, StatusCode, header};
use rein_core::deadline::{Cost, Usage};
use rein_core::{Outcome, RunId, RunReport, TenantId};
use rein_engine::config::CompiledSchemas;
use rein_server::AppState;
use rein_store::{NewRun, RunStatus, Store, StoreExt as _, Timestamp};
use rein_store_sqlite::SqliteStore;
use tower::ServiceExt as _;

struct Settings {
    runs: usize,
    requests: usize,
    rounds: usize,
}

fn parse() -> Settings {
    let mut settings = Settings {
        runs: 10_000,
        requests: 200,
        rounds: 3,
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = || {
            args.next()
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("{arg} needs a number"))
        };
        match arg.as_str() {
            "--runs" => settings.runs = value(),
            "--requests" => settings.requests = value(),
            "--rounds" => settings.rounds = value(),
            // What `cargo bench` passes along.
            "--bench" => {}
            other => panic!("unknown argument {other}"),
        }
    }
    settings
}

const CONFIG: &str = r#"
[providers.replay]
kind = "scripted"
script = "script.json"

[agents.order_desk]
provider = "replay"
model = "gpt-4o-mini"
system_prompt = "You are the order desk."
tools = []

[agents.mover]
provider = "replay"
model = "gpt-4o-mini"
system_prompt = "Move orders."
tools = []
"#;

fn report(outcome: Outcome, n: u64) -> RunReport {
    RunReport {
        outcome,
        completed: Vec::new(),
        incomplete: Vec::new(),
        recoverable: false,
        recommendation: String::new(),
        summary: "Order moved to Friday; the buyer was told.".to_owned(),
        answer: Some("Order 42 now arrives on Friday.".to_owned()),
        consumed: Usage {
            steps: 3,
            tokens: 1_000 + n % 500,
            cost: Cost::from_micros(2_000 + n % 900),
        },
        elapsed_ms: 1_500 + n % 4_000,
        steps: 3,
        models: Vec::new(),
        compensations: Vec::new(),
        handoff: None,
        resume: None,
        basis: None,
        notes: Vec::new(),
    }
}

/// A store of `runs` runs, the newest a second apart.
async fn filled(dir: &std::path::Path, runs: usize) -> Arc<dyn Store> {
    let store: Arc<dyn Store> = Arc::new(SqliteStore::open(dir.join("rein.db")).unwrap());
    let tenant = TenantId::new("default").unwrap();
    let start = 1_790_000_000_000_u64;
    for n in 0..runs {
        let run_id = RunId::new(format!("run-{n:06}")).unwrap();
        let agent = if n % 3 == 0 { "mover" } else { "order_desk" };
        store
            .create_run(NewRun {
                run_id: run_id.clone(),
                tenant: tenant.clone(),
                agent: agent.to_owned(),
                input: format!("Move order A-{n} to Friday and tell the buyer."),
                parent_run_id: None,
                budget: serde_json::json!({"max_steps": 10}),
                created_at_ms: Timestamp::from_millis(start + n as u64 * 1_000),
                trace_parent: None,
            })
            .await
            .unwrap();
        if n % 10 == 9 {
            continue;
        }
        let outcome = match n % 7 {
            0 => Outcome::Failed,
            1 => Outcome::PartialSuccess,
            _ => Outcome::Succeeded,
        };
        store
            .set_run_status(
                &run_id,
                RunStatus::Finished(outcome),
                Some(report(outcome, n as u64)),
                Timestamp::from_millis(start + n as u64 * 1_000 + 1_500),
            )
            .await
            .unwrap();
    }
    store
}

fn get(path: &str, cookie: Option<&str>) -> Request<Body> {
    let mut request = Request::get(path).header(header::HOST, "127.0.0.1:8787");
    if let Some(cookie) = cookie {
        request = request.header(header::COOKIE, cookie);
    }
    request.body(Body::empty()).unwrap()
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn slowest(samples: &[Duration]) -> Duration {
    samples.iter().copied().max().unwrap_or_default()
}

fn ms(d: Duration) -> String {
    format!("{:.3} ms", d.as_secs_f64() * 1_000.0)
}

fn main() {
    let settings = parse();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(bench(settings));
}

async fn bench(settings: Settings) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("rein.toml"), CONFIG).unwrap();
    std::fs::write(
        dir.path().join("script.json"),
        r#"{"turns": [{"text": "Done.", "usage": {"input": 1, "output": 1}}]}"#,
    )
    .unwrap();
    let began = Instant::now();
    let store = filled(dir.path(), settings.runs).await;
    eprintln!(
        "filled a SQLite store with {} runs in {:.1} s",
        settings.runs,
        began.elapsed().as_secs_f64()
    );
    let registry = rein_engine::config::load(&dir.path().join("rein.toml")).unwrap();
    let client = rein_engine::run::http_client().unwrap();
    let engine = rein_server::build_engine(&registry, store.clone(), client.clone(), None).unwrap();
    let models = rein_server::bind_models(&registry, &client).unwrap();
    let schemas = CompiledSchemas::compile(&registry).unwrap();
    let state = Arc::new(AppState::new(
        registry, schemas, store, engine, client, models,
    ));
    let router = rein_server::router(state);
    let send = |request: Request<Body>| {
        let router = router.clone();
        async move {
            let answer = router.oneshot(request).await.unwrap();
            let status = answer.status();
            let headers = answer.headers().clone();
            let body = to_bytes(answer.into_body(), 64 << 20).await.unwrap();
            (status, headers, body)
        }
    };

    // Without API keys the dashboard opens a session at once.
    let (status, headers, _) = send(get("/ui/login?next=%2Fui%2Fruns", None)).await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    let cookie = headers[header::SET_COOKIE]
        .to_str()
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_owned();
    let (status, _, first) = send(get("/ui/runs", Some(&cookie))).await;
    assert_eq!(status, StatusCode::OK);
    let first = String::from_utf8(first.to_vec()).unwrap();
    let rows = first.matches("<tr").count().saturating_sub(1);
    assert!(rows >= 50, "a full first page: {rows} rows");
    let cursor = first
        .split("cursor=")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .expect("a next page")
        .to_owned();
    let pages = [
        ("GET /healthz (baseline)", "/healthz".to_owned()),
        ("GET /v1/runs", "/v1/runs".to_owned()),
        ("GET /ui/runs", "/ui/runs".to_owned()),
        (
            "GET /ui/runs?agent=mover&status=succeeded",
            "/ui/runs?agent=mover&status=succeeded".to_owned(),
        ),
        (
            "GET /ui/runs?cursor=… (page 2)",
            format!("/ui/runs?cursor={cursor}"),
        ),
    ];
    let mut medians: Vec<Vec<Duration>> = vec![Vec::new(); pages.len()];
    for round in 0..settings.rounds {
        for (i, (_, path)) in pages.iter().enumerate() {
            let mut samples = Vec::with_capacity(settings.requests);
            for _ in 0..settings.requests {
                let request = get(path, Some(&cookie));
                let began = Instant::now();
                let (status, _, _) = send(request).await;
                samples.push(began.elapsed());
                assert_eq!(status, StatusCode::OK, "{path}");
            }
            medians[i].push(median(samples));
        }
        eprintln!("round {} of {} done", round + 1, settings.rounds);
    }
    let baseline = median(medians[0].clone());
    println!(
        "\nserver time per request, {} runs in the store, {} rounds of {} requests each (the median of the rounds' medians, and the slowest round's):\n",
        settings.runs, settings.rounds, settings.requests
    );
    println!("| page | median | slowest round | × baseline |\n| --- | ---: | ---: | ---: |");
    for (i, (name, _)) in pages.iter().enumerate() {
        let m = median(medians[i].clone());
        println!(
            "| {name} | {} | {} | {:.1} |",
            ms(m),
            ms(slowest(&medians[i])),
            m.as_secs_f64() / baseline.as_secs_f64()
        );
    }
    // A first load: the page, and each asset it links (once: they are
    // cached by version).
    let mut total = first.len();
    println!("\nfirst load of /ui/runs:\n\n| part | bytes |\n| --- | ---: |");
    println!("| the page | {} |", first.len());
    for asset in first
        .split(['"', '\''])
        .filter(|part| part.starts_with("/ui/assets/"))
        .collect::<std::collections::BTreeSet<_>>()
    {
        let (status, _, body) = send(get(asset, Some(&cookie))).await;
        assert_eq!(status, StatusCode::OK, "{asset}");
        total += body.len();
        println!("| {asset} | {} |", body.len());
    }
    println!(
        "| total | {total} ({:.1} KB; goal ≤ 200 KB) |",
        total as f64 / 1_000.0
    );
}
