//! Issue 17: TLS to PostgreSQL, on a real server with TLS on.
//!
//! A private PostgreSQL (`common/postgres.rs`) with `ssl=on`, its
//! certificate signed by a CA the test makes with the `openssl` CLI, and a
//! `pg_hba.conf` that admits TCP connections over TLS only (`hostssl`):
//! every connection that succeeds here was encrypted. Checked:
//! - `rein serve` with `[store] url = "…?sslmode=verify-full"` and
//!   `[store] ca_file` serves a run end to end, recorded in that database;
//! - `verify-full` against another CA fails with a certificate error, and
//!   against a host name the certificate does not list fails too, where
//!   `verify-ca` (which checks the chain, not the name) connects;
//! - `require` (and the default, `prefer`) connect without a CA; `require`
//!   given a CA verifies the chain (as libpq does);
//! - `disable` is refused by the server, with its own message;
//! - `rein check` refuses a CA that a URL's `sslmode` would ignore, naming
//!   `store.ca_file`.
//!
//! Without the PostgreSQL binaries or `openssl` the server tests skip with
//! a message, except under `CI=true`, where they fail.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use rein_store::{NewRun, RunStore as _};
use rein_store_postgres::{PostgresOptions, PostgresStore, PostgresUrl};
use rein_testkit::order_desk::OrderDesk;
use serde_json::Value;

mod common;
use common::{Server, example_config};

#[path = "common/postgres.rs"]
mod private_postgres;
use private_postgres::PrivatePostgres;

/// The host name the server's certificate is issued to (with
/// `IP:127.0.0.1`); URLs that name it connect to `hostaddr=127.0.0.1`.
const CERT_HOST: &str = "db.rein.test";

/// The files of a test's PKI, in the server's directory.
struct Pki {
    /// The CA that signed the server's certificate.
    ca: PathBuf,
    /// A CA that signed nothing the server shows.
    other_ca: PathBuf,
}

/// `openssl args…` in `dir`.
fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .current_dir(dir)
        .args(args)
        .output()
        .expect("openssl runs");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A CA, a server certificate it signs (for [`CERT_HOST`] and
/// 127.0.0.1) and its key, and another CA, in `dir`.
fn make_pki(dir: &Path) -> Pki {
    let ca_subject = |name: &str| format!("/CN={name}");
    for (name, subject) in [
        ("ca", ca_subject("rein test CA")),
        ("other-ca", ca_subject("rein other CA")),
    ] {
        openssl(
            dir,
            &[
                "req",
                "-x509",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:prime256v1",
                "-nodes",
                "-days",
                "2",
                "-subj",
                &subject,
                "-addext",
                "basicConstraints=critical,CA:TRUE",
                "-addext",
                "keyUsage=critical,keyCertSign,cRLSign",
                "-keyout",
                &format!("{name}.key"),
                "-out",
                &format!("{name}.pem"),
            ],
        );
    }
    std::fs::write(
        dir.join("server.ext"),
        format!(
            "subjectAltName=DNS:{CERT_HOST},IP:127.0.0.1\nbasicConstraints=critical,CA:FALSE\n\
             keyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n"
        ),
    )
    .unwrap();
    openssl(
        dir,
        &[
            "req",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-subj",
            &format!("/CN={CERT_HOST}"),
            "-keyout",
            "server.key",
            "-out",
            "server.csr",
        ],
    );
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "2",
            "-extfile",
            "server.ext",
            "-out",
            "server.crt",
        ],
    );
    std::fs::set_permissions(
        dir.join("server.key"),
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .unwrap();
    Pki {
        ca: dir.join("ca.pem"),
        other_ca: dir.join("other-ca.pem"),
    }
}

/// A private server with TLS on and plain TCP refused (`hostssl` only),
/// and its PKI; `None` (skip) as [`PrivatePostgres::init`], or without
/// `openssl` outside CI.
async fn tls_only_server(test: &str) -> Option<(PrivatePostgres, Pki)> {
    if Command::new("openssl").arg("version").output().is_err() {
        common::missing_part("the openssl CLI (it makes the test's certificates)");
        return None;
    }
    let mut server = PrivatePostgres::init(test)?;
    let pki_dir = server.dir().join("pki");
    std::fs::create_dir(&pki_dir).unwrap();
    let pki = make_pki(&pki_dir);
    std::fs::write(
        Path::new(&server.data()).join("pg_hba.conf"),
        "local all all trust\nhostssl all all 127.0.0.1/32 trust\n",
    )
    .unwrap();
    server.hand_over(server.dir());
    let options = format!(
        "-c ssl=on -c ssl_cert_file={} -c ssl_key_file={}",
        pki_dir.join("server.crt").display(),
        pki_dir.join("server.key").display()
    );
    server
        .start_now(&options)
        .unwrap_or_else(|e| panic!("{e:#}\n{}", server.log_tail()));
    server.create_database_with("rein", "sslmode=require").await;
    Some((server, pki))
}

/// The server's `rein` database as `host` names it (TCP to 127.0.0.1),
/// with `query`.
fn url(server: &PrivatePostgres, host: &str, query: &str) -> String {
    format!(
        "postgres://root@{host}:{}/rein?hostaddr=127.0.0.1&connect_timeout=20&{query}",
        server.port()
    )
}

/// Connects (and migrates) as rein does: the store, or its error's text.
async fn connect(url: &str, ca_file: Option<&Path>) -> Result<PostgresStore, String> {
    let url = PostgresUrl::parse(url).map_err(|e| e.to_string())?;
    PostgresStore::connect_with(
        &url,
        PostgresOptions {
            max_connections: 2,
            connect_timeout: Duration::from_secs(20),
            ca_file: ca_file.map(Path::to_path_buf),
            ..PostgresOptions::default()
        },
    )
    .await
    .map_err(|e| e.to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_sslmode_connects_or_fails_as_libpq_does_on_a_tls_only_server() {
    let Some((server, pki)) = tls_only_server("the PostgreSQL TLS tests").await else {
        return;
    };
    let ca = pki.ca.display().to_string();
    let other_ca = pki.other_ca.display().to_string();

    // verify-full with the CA: the chain and the name verified; a run
    // created and read back over the session.
    let store = connect(
        &url(
            &server,
            CERT_HOST,
            &format!("sslmode=verify-full&sslrootcert={ca}"),
        ),
        None,
    )
    .await
    .unwrap_or_else(|e| panic!("verify-full with the CA: {e}\n{}", server.log_tail()));
    let run = rein_core::RunId::new("run-tls-1").unwrap();
    store
        .create_run(NewRun {
            run_id: run.clone(),
            tenant: rein_core::TenantId::new("t").unwrap(),
            agent: "a".to_owned(),
            input: "over TLS".to_owned(),
            parent_run_id: None,
            budget: serde_json::json!({}),
            created_at_ms: rein_store::Timestamp::from_millis(1),
            trace_parent: None,
        })
        .await
        .unwrap();
    let stored = store
        .get_run(&run)
        .await
        .unwrap()
        .expect("the run reads back");
    assert_eq!(stored.input, "over TLS");
    store.close();

    // The CA from `[store] ca_file` when the URL names none.
    connect(
        &url(&server, CERT_HOST, "sslmode=verify-full"),
        Some(&pki.ca),
    )
    .await
    .unwrap_or_else(|e| panic!("verify-full with ca_file: {e}"))
    .close();

    // Another CA: the certificate is not trusted.
    let error = connect(
        &url(
            &server,
            CERT_HOST,
            &format!("sslmode=verify-full&sslrootcert={other_ca}"),
        ),
        None,
    )
    .await
    .map(|_| ())
    .unwrap_err();
    assert!(error.contains("TLS handshake"), "{error}");
    assert!(error.contains("certificate"), "{error}");
    assert!(error.contains("UnknownIssuer"), "{error}");
    assert!(error.contains("does not verify"), "{error}");
    assert!(
        !error.contains("other-ca.pem"),
        "the query is not shown: {error}"
    );

    // require with a CA verifies the chain, as libpq does: another CA
    // is refused.
    let error = connect(
        &url(
            &server,
            CERT_HOST,
            &format!("sslmode=require&sslrootcert={other_ca}"),
        ),
        None,
    )
    .await
    .map(|_| ())
    .unwrap_err();
    assert!(error.contains("UnknownIssuer"), "{error}");

    // A host name the certificate does not list: verify-full refuses it,
    // verify-ca (the chain only) connects.
    let error = connect(
        &url(
            &server,
            "other.rein.test",
            &format!("sslmode=verify-full&sslrootcert={ca}"),
        ),
        None,
    )
    .await
    .map(|_| ())
    .unwrap_err();
    assert!(error.contains("certificate"), "{error}");
    assert!(error.contains("certificate not valid for name"), "{error}");
    connect(
        &url(
            &server,
            "other.rein.test",
            &format!("sslmode=verify-ca&sslrootcert={ca}"),
        ),
        None,
    )
    .await
    .unwrap_or_else(|e| panic!("verify-ca ignores the name: {e}"))
    .close();

    // require and prefer: encrypted (the server takes nothing else),
    // the certificate not verified.
    for mode in ["sslmode=require", "sslmode=prefer", ""] {
        let store = connect(&url(&server, "other.rein.test", mode), None)
            .await
            .unwrap_or_else(|e| panic!("{mode:?}: {e}"));
        assert_eq!(store.get_run(&run).await.unwrap().unwrap().run_id, run);
        store.close();
    }

    // disable: plain TCP, which pg_hba.conf refuses.
    let error = connect(&url(&server, CERT_HOST, "sslmode=disable"), None)
        .await
        .map(|_| ())
        .unwrap_err();
    assert!(error.contains("pg_hba.conf"), "{error}");
    assert!(error.contains("no encryption"), "{error}");
    assert!(error.contains("takes only TLS connections"), "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn serve_runs_over_verify_full_with_the_store_tables_ca_file() {
    let Some((server, pki)) = tls_only_server("the PostgreSQL TLS tests").await else {
        return;
    };
    let desk = OrderDesk::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(&pki.ca, dir.path().join("db-ca.pem")).unwrap();
    // The store from `[store]`, its CA relative to the config file.
    let config = example_config(
        dir.path(),
        &format!(
            "[store]\nurl = \"{}\"\nca_file = \"db-ca.pem\"\n",
            url(&server, CERT_HOST, "sslmode=verify-full")
        ),
    );
    let mut command = Command::new(env!("CARGO_BIN_EXE_rein"));
    command
        .env("ORDER_DESK_URL", desk.base_url())
        .env("MOCK_MODEL_URL", "http://127.0.0.1:2")
        .env_remove("REIN_CRASH_AT")
        .args(["serve", "--config"])
        .arg(&config)
        .args(["--listen", "127.0.0.1:0"]);
    let node = Server::spawn_async(command).await;
    // Queued: accepted, then driven by the node's worker (every step
    // commit over the TLS session).
    let client = reqwest::Client::new();
    let accepted = client
        .post(node.url("/v1/agents/order_desk/runs"))
        .header("content-type", "application/json")
        .body(r#"{"input": "Move order A-1001 to 2026-12-24.", "mode": "queued"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(accepted.status(), 202, "{}", node.log_tail());
    let location = accepted.headers()["location"].to_str().unwrap().to_owned();
    let run_id = rein_core::RunId::new(location.rsplit('/').next().unwrap_or_default()).unwrap();
    let mut run = Value::Null;
    for _ in 0..1200 {
        if let Ok(r) = client.get(node.url(&location)).send().await
            && let Ok(view) = r.json::<Value>().await
            && !matches!(view["status"].as_str(), Some("queued" | "running") | None)
        {
            run = view;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(run["status"], "succeeded", "{run}\n{}", node.log_tail());
    node.kill_async().await;

    // Recorded in the database `[store] url` names, over TLS.
    let store = connect(
        &url(&server, CERT_HOST, "sslmode=verify-full"),
        Some(&pki.ca),
    )
    .await
    .unwrap();
    let stored = store
        .get_run(&run_id)
        .await
        .unwrap()
        .expect("the run is stored");
    assert_eq!(stored.status.as_str(), "succeeded");
    store.close();

    // Without the CA the same table is refused at start, by name.
    let config = example_config(
        dir.path(),
        &format!(
            "[store]\nurl = \"{}\"\n",
            url(&server, CERT_HOST, "sslmode=verify-full")
        ),
    );
    let out = Command::new(env!("CARGO_BIN_EXE_rein"))
        .env("ORDER_DESK_URL", desk.base_url())
        .env("MOCK_MODEL_URL", "http://127.0.0.1:2")
        .args(["serve", "--config"])
        .arg(&config)
        .args(["--listen", "127.0.0.1:0"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("sslrootcert=PATH"), "{stderr}");
}

#[test]
fn check_refuses_a_ca_file_the_urls_sslmode_would_ignore() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("ca.pem"),
        "not read: the pairing is refused first\n",
    )
    .unwrap();
    let check = |store: &str| {
        let config = example_config(dir.path(), store);
        let out = Command::new(env!("CARGO_BIN_EXE_rein"))
            .env("ORDER_DESK_URL", "http://127.0.0.1:1")
            .env("MOCK_MODEL_URL", "http://127.0.0.1:2")
            .arg("check")
            .arg(&config)
            .arg("--json")
            .output()
            .unwrap();
        let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
        (out.status.code(), doc)
    };
    let (code, doc) = check(
        "[store]\nurl = \"postgres://rein:pw-kept-secret-4@db/rein?sslmode=prefer\"\nca_file = \"ca.pem\"\n",
    );
    assert_eq!(code, Some(1), "{doc}");
    let problem = &doc["problems"][0];
    assert_eq!(problem["field"], "store.ca_file", "{doc}");
    assert!(
        problem["message"]
            .as_str()
            .unwrap()
            .contains("never verify"),
        "{doc}"
    );
    assert!(!doc.to_string().contains("pw-kept-secret-4"), "{doc}");
    // With a mode that verifies, the CA is read: a file without a
    // certificate is refused, naming it.
    let (code, doc) = check(
        "[store]\nurl = \"postgres://rein@db/rein?sslmode=verify-full\"\nca_file = \"ca.pem\"\n",
    );
    assert_eq!(code, Some(1), "{doc}");
    let problem = &doc["problems"][0];
    assert_eq!(problem["field"], "store.ca_file", "{doc}");
    assert!(
        problem["message"]
            .as_str()
            .unwrap()
            .contains("no PEM certificate"),
        "{doc}"
    );
}
