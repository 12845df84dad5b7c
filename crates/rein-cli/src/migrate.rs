//! `rein migrate`: applies (or, with `--check`, checks) the schema
//! migrations of the run store `--data` names, SQLite or PostgreSQL.
//!
//! # Why a command of its own
//!
//! Every node migrates at start, under a lock, so a store is never left
//! half-migrated. But with several nodes on one database an operator wants
//! the change made once, on purpose, before the new release starts, and a
//! deploy script wants to know whether one is pending: `rein migrate
//! --check` exits 1 then, 0 when the store is current.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use clap::Args;
use rein_store_postgres::PostgresStore;
use rein_store_sqlite::SqliteStore;

use crate::store::{Data, block_on, shown};

/// Arguments of `rein migrate`.
#[derive(Debug, Args)]
#[command(after_help = "\
Examples:
  rein migrate                                                  # rein-data/rein.db
  rein migrate --check --data postgres://rein@db.internal/rein  # exit 1 while migrations are pending
  rein migrate --data postgres://rein@db.internal/rein --json   # once, before the new release starts")]
pub struct MigrateArgs {
    /// The run store: a SQLite file, or a PostgreSQL database
    /// (`postgres://user[:password]@host[:port]/db`).
    #[arg(long, visible_alias = "db", default_value = "rein-data/rein.db")]
    data: PathBuf,
    /// Only check: exit 0 when the store is at this rein's schema, 1 when
    /// migrations are pending; change nothing.
    #[arg(long)]
    check: bool,
    /// Print the result as JSON.
    #[arg(long)]
    json: bool,
}

/// Where a store's schema stands.
struct State {
    found: u32,
    supported: u32,
}

/// Runs `rein migrate`.
pub fn run(args: MigrateArgs) -> Result<ExitCode> {
    let data = Data::parse(&args.data)?;
    let store = shown(&args.data);
    // Checking reads; it never creates the file it was asked about.
    if let (true, Data::Sqlite(path)) = (args.check, &data) {
        if !path.exists() {
            bail!(
                "no run store at {store}: `rein migrate --data {store}` creates one at schema version {}",
                rein_store_sqlite::SCHEMA_VERSION
            );
        }
    }
    let before = state(&data).with_context(|| format!("cannot read the schema of {store}"))?;
    if before.found > before.supported {
        bail!(
            "{store} is at schema version {}, newer than this rein's {}: upgrade rein",
            before.found,
            before.supported
        );
    }
    let pending = before.supported - before.found;
    if !args.check && pending > 0 {
        // Opening migrates, in one transaction, under the store's lock.
        crate::store::open(&args.data)?;
    }
    let after = if args.check {
        before.found
    } else {
        before.supported
    };
    if args.json {
        let doc = serde_json::json!({
            "store": store,
            "found": before.found,
            "supported": before.supported,
            "applied": if args.check { 0 } else { pending },
            "pending": if args.check { pending } else { 0 },
        });
        println!("{doc}");
    } else if args.check && pending > 0 {
        println!(
            "{store}: schema version {}, {} pending (this rein writes {}); run `rein migrate`",
            before.found,
            rein_core::plural::count(pending, "migration"),
            before.supported
        );
    } else if args.check || pending == 0 {
        println!("{store}: schema version {after}, up to date");
    } else {
        println!(
            "{store}: migrated from schema version {} to {after} ({pending} applied)",
            before.found
        );
    }
    Ok(if args.check && pending > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

fn state(data: &Data) -> Result<State> {
    match data {
        Data::Sqlite(path) => Ok(State {
            found: SqliteStore::schema_version(path)?,
            supported: rein_store_sqlite::SCHEMA_VERSION,
        }),
        Data::Postgres(url) => {
            let state = block_on(PostgresStore::schema_state(url))??;
            Ok(State {
                found: state.found,
                supported: state.supported,
            })
        }
    }
}
