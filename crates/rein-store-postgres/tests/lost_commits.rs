//! A commit whose answer is lost is settled, never offered twice.
//!
//! A TCP proxy on loopback stands between the store and the machine's
//! PostgreSQL and breaks the connection at the COMMIT of a run's step, as
//! a failover, `pg_terminate_backend` or a proxy dropping its connections
//! does: after the server got it (the commit lands, its answer is lost),
//! or before (nothing lands). The store must say which, on a fresh
//! connection: `Ok` for the first, a transient refusal for the second,
//! and `InDoubt` (never `Unavailable`, which the engine would offer again)
//! when the database cannot be asked.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::time::Duration;

use rein_core::event::PlanCreated;
use rein_core::{Event, EventData, RunId};
use rein_store::conformance::new_run;
use rein_store::{RunStore, StepCommit, StoreError, Timestamp};
use rein_store_postgres::scratch::ScratchDatabase;
use rein_store_postgres::{PostgresOptions, PostgresStore, PostgresUrl};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;

/// The simple-protocol message `COMMIT` (what a transaction's commit
/// sends): `Q`, its length (4 + 7), the text and its NUL.
const COMMIT: &[u8] = b"Q\0\0\0\x0bCOMMIT\0";

/// Where the proxy breaks the next COMMIT.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
enum Cut {
    None = 0,
    /// The server gets the COMMIT; the client's connection is closed
    /// before its answer.
    AfterTheServerGotIt = 1,
    /// The COMMIT never reaches the server; both sides are closed.
    BeforeTheServerGotIt = 2,
}

/// A proxy to `upstream` that breaks the next COMMIT as armed, and
/// refuses new connections while `refusing`.
struct Proxy {
    addr: std::net::SocketAddr,
    cut: Arc<AtomicU8>,
    refusing: Arc<AtomicBool>,
    /// Notified when a cut was made.
    cut_made: Arc<Notify>,
}

impl Proxy {
    async fn start(upstream: String) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let proxy = Proxy {
            addr: listener.local_addr().unwrap(),
            cut: Arc::new(AtomicU8::new(Cut::None as u8)),
            refusing: Arc::new(AtomicBool::new(false)),
            cut_made: Arc::new(Notify::new()),
        };
        let (cut, refusing, cut_made) = (
            proxy.cut.clone(),
            proxy.refusing.clone(),
            proxy.cut_made.clone(),
        );
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                if refusing.load(Ordering::SeqCst) {
                    drop(client);
                    continue;
                }
                let Ok(server) = TcpStream::connect(&upstream).await else {
                    continue;
                };
                tokio::spawn(pipe(client, server, cut.clone(), cut_made.clone()));
            }
        });
        proxy
    }

    fn arm(&self, cut: Cut) {
        self.cut.store(cut as u8, Ordering::SeqCst);
    }
}

/// Copies bytes both ways, breaking at an armed COMMIT.
async fn pipe(client: TcpStream, server: TcpStream, cut: Arc<AtomicU8>, cut_made: Arc<Notify>) {
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    let answers = tokio::spawn(async move {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = match server_read.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            if client_write.write_all(&buf[..n]).await.is_err() {
                return;
            }
        }
    });
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match client_read.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let chunk = &buf[..n];
        let at_commit = chunk.windows(COMMIT.len()).any(|w| w == COMMIT);
        let armed = cut.load(Ordering::SeqCst);
        if at_commit && armed != Cut::None as u8 {
            cut.store(Cut::None as u8, Ordering::SeqCst);
            if armed == Cut::AfterTheServerGotIt as u8 {
                server_write.write_all(chunk).await.unwrap();
                server_write.flush().await.unwrap();
                // The answer goes nowhere: the client's side is closed.
                // The server's side stays open (its backend commits and
                // waits for the next command) until the database is
                // dropped.
                answers.abort();
                let keep = server_write;
                tokio::spawn(async move {
                    let _held = keep;
                    std::future::pending::<()>().await;
                });
            } else {
                answers.abort();
                drop(server_write);
            }
            cut_made.notify_one();
            return;
        }
        if server_write.write_all(chunk).await.is_err() {
            break;
        }
    }
    answers.abort();
}

/// A scratch database, a proxy in front of it, and a store through the
/// proxy (with a short connect timeout, so that a refusing proxy answers
/// quickly).
async fn setup(prefix: &str) -> Option<(ScratchDatabase, Proxy, PostgresStore)> {
    let database = ScratchDatabase::create(prefix).await?;
    // Migrate directly, so that the proxy sees only the test's traffic.
    PostgresStore::connect_with(database.url(), PostgresOptions::default())
        .await
        .unwrap()
        .close();
    let text = database.url_text();
    let (scheme_user, rest) = text.split_once('@').unwrap();
    let (host_port, name) = rest.split_once('/').unwrap();
    let proxy = Proxy::start(host_port.to_owned()).await;
    let url = PostgresUrl::parse(&format!(
        "{scheme_user}@{}/{name}?sslmode=disable",
        proxy.addr
    ))
    .unwrap();
    let options = PostgresOptions {
        connect_timeout: Duration::from_secs(1),
        ..PostgresOptions::default()
    };
    let store = PostgresStore::connect_with(&url, options).await.unwrap();
    Some((database, proxy, store))
}

/// A commit of one event for `run_id`.
fn one_event(run_id: &RunId) -> StepCommit {
    StepCommit {
        events: vec![Event {
            run_id: run_id.clone(),
            seq: 0,
            step: 1,
            intent_id: None,
            attempt_id: None,
            idempotency_key: None,
            at_ms: Timestamp::from_millis(1_000),
            data: EventData::from(PlanCreated {
                intents: Vec::new(),
                rejected: 0,
            }),
        }],
        ..StepCommit::default()
    }
}

#[tokio::test]
async fn a_commit_whose_answer_was_lost_is_found_landed_and_stored_once() {
    let Some((database, proxy, store)) = setup("lost_answer").await else {
        return;
    };
    let run = store
        .create_run(new_run("lost", Timestamp::from_millis(1_000)))
        .await
        .unwrap();

    proxy.arm(Cut::AfterTheServerGotIt);
    let committed = store.commit_step(&run.run_id, one_event(&run.run_id)).await;

    assert!(
        proxy.cut.load(Ordering::SeqCst) == Cut::None as u8,
        "the cut was made"
    );
    assert!(committed.is_ok(), "it landed, so it is Ok: {committed:?}");
    let events = store.events(&run.run_id, 0).await.unwrap();
    assert_eq!(events.len(), 1, "stored once: {events:?}");
    store.close();
    database.drop_database().await;
}

#[tokio::test]
async fn a_commit_that_never_reached_the_server_is_transient_and_nothing_landed() {
    let Some((database, proxy, store)) = setup("lost_commit").await else {
        return;
    };
    let run = store
        .create_run(new_run("never", Timestamp::from_millis(1_000)))
        .await
        .unwrap();

    proxy.arm(Cut::BeforeTheServerGotIt);
    let refused = store
        .commit_step(&run.run_id, one_event(&run.run_id))
        .await
        .unwrap_err();

    assert!(refused.is_transient(), "safe to offer again: {refused:?}");
    assert!(store.events(&run.run_id, 0).await.unwrap().is_empty());
    // Offered again, it lands once.
    store
        .commit_step(&run.run_id, one_event(&run.run_id))
        .await
        .unwrap();
    assert_eq!(store.events(&run.run_id, 0).await.unwrap().len(), 1);
    store.close();
    database.drop_database().await;
}

#[tokio::test]
async fn a_lost_answer_the_database_cannot_settle_is_in_doubt_never_transient() {
    let Some((database, proxy, store)) = setup("in_doubt").await else {
        return;
    };
    let run = store
        .create_run(new_run("doubt", Timestamp::from_millis(1_000)))
        .await
        .unwrap();

    proxy.arm(Cut::AfterTheServerGotIt);
    proxy.refusing.store(true, Ordering::SeqCst);
    let cut = proxy.cut_made.notified();
    let refused = store
        .commit_step(&run.run_id, one_event(&run.run_id))
        .await
        .unwrap_err();
    cut.await;

    assert!(
        matches!(refused, StoreError::InDoubt(_)),
        "not offered again: {refused:?}"
    );
    assert!(!refused.is_transient());
    proxy.refusing.store(false, Ordering::SeqCst);
    assert_eq!(
        store.events(&run.run_id, 0).await.unwrap().len(),
        1,
        "it had landed"
    );
    store.close();
    database.drop_database().await;
}
