//! `rein runs list --follow`: the listing kept live — the newest runs
//! first, then a line for each new run and each status change, as it
//! happens, until Ctrl-C (or SIGTERM), or until the server stops answering.
//!
//! # Why polling with a cursor, from a server too
//!
//! The API has a live stream of one run's events, not of every run of a
//! tenant. The follower reads what every client already may: the
//! tenant-scoped `GET /v1/runs` with `created_after` as its cursor (the
//! newest creation time seen: runs created since), plus the run itself
//! (`GET /v1/runs/{id}`) for each run still in flight, every
//! [`FOLLOW_POLL`]. No server change, the API's tenant scoping as it is,
//! and nothing a buffering proxy can hold back; the cost is one listing
//! and one read per run in flight per poll, which a CLI's view of a
//! queue bears. A store file is read the same way (SQLite has no
//! notifications); a PostgreSQL store also wakes the follower at once
//! on its notifications ([`Store::notifications`]: a run's commit), the
//! poll staying as the floor a dropped notification falls back to.
//!
//! # What is followed
//!
//! The newest `--limit` runs when it starts, and every run created after
//! the newest of them. `--status` shows a run when it has (or enters) that
//! status; `--agent`, `--tenant` and `--since` narrow which runs are
//! followed at all.
//!
//! [`Store::notifications`]: rein_store::RunStore::notifications

use std::collections::HashMap;

use anyhow::Result;
use rein_server::api::listing::RunSummary;
use rein_store::{RunFilter, RunStatus, Timestamp};

use super::render;
use super::source::Source;
use super::{FOLLOW_POLL, MAX_LIST_LIMIT};
use crate::signal::Listener;

/// The runs followed: each with its last status seen.
struct Followed {
    /// Every run seen that is in flight, or was created at or after
    /// `newest_ms - 1` (a run created in that millisecond may still be
    /// listed again: the cursor's bound is strict).
    runs: HashMap<String, RunSummary>,
    /// The newest creation time seen.
    newest_ms: u64,
    /// Which runs are followed (without `--status`).
    filter: RunFilter,
    /// Which are shown (`--status`).
    status: Option<RunStatus>,
}

impl Followed {
    fn shows(&self, run: &RunSummary) -> bool {
        self.status.is_none_or(|s| s.as_str() == run.status)
    }

    /// Takes `run` in: `true` when it is new or its status changed.
    fn take(&mut self, run: RunSummary) -> bool {
        self.newest_ms = self.newest_ms.max(run.created_at_ms);
        let changed = self
            .runs
            .get(&run.run_id)
            .is_none_or(|seen| seen.status != run.status);
        if changed {
            self.runs.insert(run.run_id.clone(), run);
        }
        changed
    }

    /// Forgets finished runs the listing's cursor cannot bring back.
    fn prune(&mut self) {
        let floor = self.newest_ms.saturating_sub(1);
        self.runs
            .retain(|_, run| run.outcome.is_none() || run.created_at_ms >= floor);
    }
}

/// Follows the runs `filter` selects (see the module docs); prints each
/// shown run as a table row, or with `as_json` as one JSON object per
/// line.
///
/// # Errors
///
/// When the source cannot be read at the start, or refuses a later read
/// (a server that answers an error). A server that stops answering ends
/// the follow, as the end of its stream, with a note.
pub async fn follow(source: &Source, filter: RunFilter, limit: usize, as_json: bool) -> Result<()> {
    // Installed first: a Ctrl-C from here on ends the follow cleanly.
    let mut signals = Listener::install()?;
    let mut notifications = source.notifications();
    let status = filter.status;
    let mut tracked = filter.clone();
    tracked.status = None;
    let mut followed = Followed {
        runs: HashMap::new(),
        newest_ms: 0,
        filter: tracked,
        status,
    };
    let first = source.list(&followed.filter, None, limit).await?;
    if !as_json {
        print!("{}", render::follow_header());
    }
    // Oldest first: the lines that follow are newer still.
    for run in first.runs.into_iter().rev() {
        if followed.take(run.clone()) && followed.shows(&run) {
            print_run(&run, as_json)?;
        }
    }
    loop {
        tokio::select! {
            stop = signals.next() => {
                tracing::debug!("{}: following ends", stop.name());
                return Ok(());
            }
            () = wake(&mut notifications) => {}
        }
        let changes = match poll(source, &mut followed).await {
            Ok(changes) => changes,
            Err(e) if source.is_gone(&e) => {
                crate::log::note(crate::log::Level::Info, &format!("following ends: {e:#}"));
                return Ok(());
            }
            Err(e) => return Err(e),
        };
        for run in changes {
            print_run(&run, as_json)?;
        }
    }
}

/// Waits one poll, or less when the store announces a change.
async fn wake(
    notifications: &mut Option<tokio::sync::broadcast::Receiver<rein_store::Notification>>,
) {
    match notifications {
        Some(receiver) => {
            tokio::select! {
                received = receiver.recv() => {
                    if let Err(tokio::sync::broadcast::error::RecvError::Closed) = received {
                        // The store stopped announcing: the poll alone.
                        *notifications = None;
                    }
                }
                () = tokio::time::sleep(FOLLOW_POLL) => {}
            }
        }
        None => tokio::time::sleep(FOLLOW_POLL).await,
    }
}

/// The runs to show since the last poll: new runs, then runs whose status
/// changed, each once.
async fn poll(source: &Source, followed: &mut Followed) -> Result<Vec<RunSummary>> {
    let mut shown = Vec::new();
    // New runs, every page of them, oldest first.
    let mut since = followed.filter.clone();
    let floor = Timestamp::from_millis(followed.newest_ms.saturating_sub(1));
    since.created_after_ms = Some(since.created_after_ms.map_or(floor, |ms| ms.max(floor)));
    let mut fresh = Vec::new();
    let mut cursor = None;
    loop {
        let page = source
            .list(&since, cursor.as_deref(), MAX_LIST_LIMIT)
            .await?;
        fresh.extend(page.runs);
        match page.next_cursor {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    let mut listed = std::collections::HashSet::new();
    for run in fresh.into_iter().rev() {
        listed.insert(run.run_id.clone());
        if followed.take(run.clone()) && followed.shows(&run) {
            shown.push(run);
        }
    }
    // Runs in flight the listing did not bring: read each again.
    let in_flight: Vec<RunSummary> = followed
        .runs
        .values()
        .filter(|run| run.outcome.is_none() && !listed.contains(&run.run_id))
        .cloned()
        .collect();
    for seen in in_flight {
        let mut now = source.summary(&seen.run_id).await?;
        // A server shows the run without its tenant: the listing's stays.
        now.tenant = seen.tenant.clone();
        if followed.take(now.clone()) && followed.shows(&now) {
            shown.push(now);
        }
    }
    followed.prune();
    Ok(shown)
}

fn print_run(run: &RunSummary, as_json: bool) -> Result<()> {
    if as_json {
        println!("{}", serde_json::to_string(run)?);
    } else {
        print!("{}", render::follow_row(run));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary(id: &str, status: &str, created_at_ms: u64) -> RunSummary {
        RunSummary {
            run_id: id.to_owned(),
            tenant: "t".to_owned(),
            agent: "a".to_owned(),
            status: status.to_owned(),
            outcome: RunStatus::parse(status)
                .and_then(RunStatus::outcome)
                .map(|o| o.as_str().to_owned()),
            parent_run_id: None,
            created_at_ms,
            updated_at_ms: created_at_ms,
        }
    }

    fn followed(status: Option<RunStatus>) -> Followed {
        Followed {
            runs: HashMap::new(),
            newest_ms: 0,
            filter: RunFilter::all(),
            status,
        }
    }

    #[test]
    fn a_run_is_shown_when_new_and_when_its_status_changes_only() {
        let mut f = followed(None);
        assert!(f.take(summary("r1", "queued", 10)));
        assert!(!f.take(summary("r1", "queued", 10)), "no change, no line");
        assert!(f.take(summary("r1", "running", 10)));
        assert!(f.take(summary("r1", "succeeded", 10)));
        assert_eq!(f.newest_ms, 10);
    }

    #[test]
    fn a_status_filter_shows_runs_entering_it() {
        let f = followed(RunStatus::parse("failed"));
        assert!(!f.shows(&summary("r1", "running", 1)));
        assert!(f.shows(&summary("r1", "failed", 1)));
    }

    #[test]
    fn finished_runs_the_cursor_cannot_list_again_are_forgotten() {
        let mut f = followed(None);
        f.take(summary("old-done", "succeeded", 5));
        f.take(summary("old-running", "running", 5));
        f.take(summary("edge-done", "failed", 99));
        f.take(summary("new", "queued", 100));
        f.prune();
        let mut kept: Vec<&str> = f.runs.keys().map(String::as_str).collect();
        kept.sort_unstable();
        assert_eq!(kept, ["edge-done", "new", "old-running"]);
    }
}
