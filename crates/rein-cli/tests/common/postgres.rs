//! A PostgreSQL server of one test alone (`pg_restart.rs` restarts it,
//! `pg_tls.rs` turns TLS on in it): the machine's server is shared by every
//! other test, and neither a restart nor a TLS-only `pg_hba.conf` may
//! reach theirs.
//!
//! `initdb` into a temporary directory, `pg_ctl start` on a free port, the
//! binaries found at run time under `/usr/lib/postgresql/*/bin` (or
//! `REIN_PG_BIN`). initdb refuses to run as root, so as root the directory
//! is handed to the `postgres` user and the binaries run through
//! `runuser -u postgres`. Without the binaries a test skips with a
//! message, except under `CI=true`, where it fails.
//!
//! Included by `#[path]` from the tests that use it (not from `common`,
//! which every process test includes).
#![allow(dead_code)]

use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, ensure};

/// A PostgreSQL server of this test alone; stopped (and its directory
/// removed) on drop.
pub struct PrivatePostgres {
    bin: PathBuf,
    /// Holds `data/`, `sock/` and `server.log`; owned by the user the
    /// server runs as.
    dir: tempfile::TempDir,
    port: u16,
    /// `runuser -u postgres --` when this process is root.
    as_postgres: bool,
    /// Settings (`-c name=value …`) added to every start.
    options: String,
    /// Whether `pg_ctl start` ran (a stop on drop is then owed).
    started: bool,
}

impl PrivatePostgres {
    /// The newest `/usr/lib/postgresql/*/bin` holding `initdb` and
    /// `pg_ctl`, or `REIN_PG_BIN`.
    fn binaries() -> Option<PathBuf> {
        if let Some(bin) = std::env::var_os("REIN_PG_BIN") {
            return Some(PathBuf::from(bin));
        }
        let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
            .ok()?
            .filter_map(Result::ok)
            .filter_map(|entry| {
                let version = entry.file_name().to_str()?.parse::<u32>().ok()?;
                let bin = entry.path().join("bin");
                (bin.join("initdb").is_file() && bin.join("pg_ctl").is_file())
                    .then_some((version, bin))
            })
            .collect();
        found.sort();
        found.pop().map(|(_, bin)| bin)
    }

    /// Initializes and starts a server; `None` (skip) without binaries
    /// outside CI, where `test` (what needs it) names the failure.
    pub fn start(test: &str) -> Option<PrivatePostgres> {
        let mut server = PrivatePostgres::init(test)?;
        server.pg_ctl("start").unwrap();
        server.started = true;
        Some(server)
    }

    /// Initializes a server without starting it (its configuration may be
    /// changed first, then [`PrivatePostgres::start_now`]); `None` as
    /// [`PrivatePostgres::start`].
    pub fn init(test: &str) -> Option<PrivatePostgres> {
        let Some(bin) = PrivatePostgres::binaries() else {
            let why = "no PostgreSQL binaries under /usr/lib/postgresql/*/bin (set REIN_PG_BIN)";
            if std::env::var("CI").is_ok_and(|ci| ci == "true") {
                panic!("{why}: CI must run {test}");
            }
            eprintln!("skipped: {why}");
            return None;
        };
        let as_postgres = std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0);
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("sock")).unwrap();
        // A port nobody listens on now (the server binds it a moment later).
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let server = PrivatePostgres {
            bin,
            dir,
            port,
            as_postgres,
            options: String::new(),
            started: false,
        };
        server.hand_over(server.dir.path());
        server
            .run(
                "initdb",
                &[
                    "-D",
                    &server.data(),
                    "-A",
                    "trust",
                    "-U",
                    "root",
                    "--no-sync",
                ],
            )
            .unwrap();
        Some(server)
    }

    /// Starts a server made by [`PrivatePostgres::init`], with `options`
    /// (`-c name=value …`) on every start from now on.
    pub fn start_now(&mut self, options: &str) -> Result<()> {
        self.options = options.to_owned();
        self.pg_ctl("start")?;
        self.started = true;
        Ok(())
    }

    /// The directory the server's files are in (a test's certificates go
    /// there too).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The data directory (`pg_hba.conf` is in it).
    pub fn data(&self) -> String {
        self.dir.path().join("data").display().to_string()
    }

    /// Gives `path` (recursively) to the user the server runs as, so it
    /// may read what the test wrote there.
    pub fn hand_over(&self, path: &Path) {
        if self.as_postgres {
            let owned = Command::new("chown")
                .args(["-R", "postgres"])
                .arg(path)
                .status()
                .unwrap();
            assert!(owned.success(), "chown {} to postgres", path.display());
        }
    }

    /// `tool args…` as the server's user.
    fn run(&self, tool: &str, args: &[&str]) -> Result<()> {
        let program = self.bin.join(tool);
        let mut command = if self.as_postgres {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(&program);
            c
        } else {
            Command::new(&program)
        };
        let out = command
            .args(args)
            .output()
            .with_context(|| format!("cannot run {}", program.display()))?;
        ensure!(
            out.status.success(),
            "{tool} {args:?}: {}\n{}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(())
    }

    /// `pg_ctl ACTION`, waiting until it is done. `fsync` is off: the
    /// test restarts the server cleanly (a fast shutdown still writes a
    /// checkpoint), it never loses the machine, and a loaded CI machine
    /// spends its time on rein rather than on flushes.
    pub fn pg_ctl(&self, action: &str) -> Result<()> {
        let options = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200 {}",
            self.port,
            self.dir.path().join("sock").display(),
            self.options,
        );
        let log = self.dir.path().join("server.log").display().to_string();
        let data = self.data();
        let mut args = vec!["-D", data.as_str(), "-w", "-t", "60", "-l", log.as_str()];
        if action != "start" {
            args.extend(["-m", "fast"]);
        }
        args.extend(["-o", options.as_str(), action]);
        self.run("pg_ctl", &args)
    }

    /// The server's port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The server's URL for `database`.
    pub fn url(&self, database: &str) -> String {
        format!("postgres://root@127.0.0.1:{}/{database}", self.port)
    }

    /// Creates `database`, connecting with `query` (`sslmode=require` on
    /// a TLS-only server, or empty) as rein would.
    pub async fn create_database_with(&self, database: &str, query: &str) {
        let url = match query {
            "" => self.url("postgres"),
            query => format!("{}?{query}", self.url("postgres")),
        };
        let tls = rein_store_postgres::PostgresUrl::parse(&url)
            .unwrap()
            .connector(None)
            .unwrap();
        let (client, connection) = tokio_postgres::connect(&url, tls).await.unwrap();
        tokio::spawn(connection);
        client
            .batch_execute(&format!("CREATE DATABASE {database}"))
            .await
            .unwrap();
    }

    /// Creates `database`.
    pub async fn create_database(&self, database: &str) {
        self.create_database_with(database, "").await;
    }

    pub fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }
}

impl Drop for PrivatePostgres {
    fn drop(&mut self) {
        if !self.started {
            return;
        }
        if let Err(e) = self.pg_ctl("stop") {
            eprintln!("cannot stop the private PostgreSQL: {e:#}");
        }
    }
}
