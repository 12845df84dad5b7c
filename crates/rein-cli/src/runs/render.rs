//! Tables and lines a human reads: columns as wide as their widest cell,
//! times in UTC to the second, durations with their units.

use std::fmt::Write as _;
use std::time::{Duration, UNIX_EPOCH};

use rein_core::{Event, LedgerRecord, Timestamp};
use rein_server::api::listing::RunSummary;

use super::source::RunDetail;

/// A table: a header and rows of cells, each column padded to its widest
/// cell, two spaces apart; the last column is not padded.
pub fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let mut line = |cells: &mut dyn Iterator<Item = &str>| {
        let cells: Vec<&str> = cells.collect();
        let last = cells.len().saturating_sub(1);
        let mut text = String::new();
        for (n, (cell, width)) in cells.iter().zip(&widths).enumerate() {
            if n == last {
                text.push_str(cell);
            } else {
                let _ = write!(text, "{cell:<width$}  ");
            }
        }
        out.push_str(text.trim_end());
        out.push('\n');
    };
    line(&mut header.iter().copied());
    for row in rows {
        line(&mut row.iter().map(String::as_str));
    }
    out
}

/// A time in UTC to the second: `2026-12-01 11:40:24`.
pub fn time(ms: u64) -> String {
    let at = UNIX_EPOCH + Duration::from_millis(ms);
    humantime::format_rfc3339_seconds(at)
        .to_string()
        .replacen('T', " ", 1)
        .trim_end_matches('Z')
        .to_owned()
}

/// A time in UTC to the millisecond: `11:40:24.123`.
pub fn clock(ms: u64) -> String {
    let at = UNIX_EPOCH + Duration::from_millis(ms);
    let text = humantime::format_rfc3339_millis(at).to_string();
    // `YYYY-MM-DDTHH:MM:SS.mmmZ`: the time of day.
    text.get(11..23).unwrap_or(&text).to_owned()
}

/// A duration as the report and the timeline write one (`450 ms`,
/// `12.3 s`, `5m 3s`, `2h 1m`).
pub fn duration(ms: u64) -> String {
    crate::limits::human(Duration::from_millis(ms))
}

/// How long a run has lasted: until its last change once it ended, until
/// `now_ms` while it is in flight (`running 5m 3s`).
fn lasted(run: &RunSummary, now_ms: u64) -> String {
    if run.outcome.is_some() {
        duration(run.updated_at_ms.saturating_sub(run.created_at_ms))
    } else {
        format!(
            "{} so far",
            duration(now_ms.saturating_sub(run.created_at_ms))
        )
    }
}

/// The listing's table.
pub fn runs(runs: &[RunSummary], now_ms: u64) -> String {
    let rows: Vec<Vec<String>> = runs
        .iter()
        .map(|run| {
            vec![
                run.run_id.clone(),
                run.tenant.clone(),
                run.agent.clone(),
                run.status.clone(),
                time(run.created_at_ms),
                lasted(run, now_ms),
            ]
        })
        .collect();
    table(
        &[
            "RUN",
            "TENANT",
            "AGENT",
            "STATUS",
            "CREATED (UTC)",
            "DURATION",
        ],
        &rows,
    )
}

/// The widths of `rein runs list --follow`'s columns but the last: fixed,
/// since its rows are printed one at a time (a run id is 36 characters).
const FOLLOW_WIDTHS: [usize; 5] = [36, 12, 16, 16, 19];

/// One line of `--follow`'s columns, each padded to its width.
fn follow_line(cells: [&str; 6]) -> String {
    let mut text = String::new();
    for (cell, width) in cells.iter().zip(FOLLOW_WIDTHS) {
        let _ = write!(text, "{cell:<width$}  ");
    }
    text.push_str(cells[5]);
    format!("{}\n", text.trim_end())
}

/// The header of `rein runs list --follow`.
pub fn follow_header() -> String {
    follow_line([
        "RUN",
        "TENANT",
        "AGENT",
        "STATUS",
        "CREATED (UTC)",
        "CHANGED (UTC)",
    ])
}

/// One run of `rein runs list --follow`: as it is now, on a line of its own.
pub fn follow_row(run: &RunSummary) -> String {
    follow_line([
        &run.run_id,
        &run.tenant,
        &run.agent,
        &run.status,
        &time(run.created_at_ms),
        &time(run.updated_at_ms),
    ])
}

/// One run, field by field, then its report. `resume` is the command
/// that continues it from where it was read (`None` when it was read from
/// a server, which takes its own runs over).
pub fn run(detail: &RunDetail, now_ms: u64, resume: Option<&str>) -> String {
    let run = &detail.summary;
    let mut out = String::new();
    let _ = writeln!(out, "run       {}", run.run_id);
    let _ = writeln!(out, "tenant    {}", run.tenant);
    let _ = writeln!(out, "agent     {}", run.agent);
    let _ = writeln!(out, "status    {}", run.status);
    let _ = writeln!(out, "created   {} UTC", time(run.created_at_ms));
    let _ = writeln!(out, "updated   {} UTC", time(run.updated_at_ms));
    let _ = writeln!(out, "duration  {}", lasted(run, now_ms));
    if let Some(parent) = &run.parent_run_id {
        let _ = writeln!(out, "parent    {parent}");
    }
    if !detail.children.is_empty() {
        let _ = writeln!(out, "children  {}", detail.children.join(", "));
    }
    if let Some(contract) = &detail.contract {
        let _ = writeln!(out, "contract  {contract}");
    }
    match &detail.report {
        Some(report) => {
            out.push('\n');
            out.push_str(&crate::timeline::report(report, detail.limits.as_ref()));
        }
        None if run.outcome.is_none() => match resume {
            Some(resume) => {
                let _ = writeln!(
                    out,
                    "\nno report yet: the run has not ended (if its process died, `{resume}` continues it)"
                );
            }
            None => {
                let _ = writeln!(
                    out,
                    "\nno report yet: the run has not ended (if its process died, the server takes it over)"
                );
            }
        },
        None => {}
    }
    out
}

/// One line per event: its time, the offset since the run's first event,
/// its step and kind, and its data as stored.
pub fn events(events: &[Event], started: Timestamp) -> String {
    let rows: Vec<Vec<String>> = events
        .iter()
        .map(|event| {
            vec![
                event.seq.to_string(),
                clock(event.at_ms.as_millis()),
                format!(
                    "+{}",
                    duration(event.at_ms.as_millis().saturating_sub(started.as_millis()))
                ),
                event.step.to_string(),
                event.kind().as_str().to_owned(),
                // As stored: the payload's JSON form, keys sorted.
                event
                    .data
                    .to_value()
                    .map_or_else(|e| format!("(unwritable: {e})"), |v| v.to_string()),
            ]
        })
        .collect();
    table(
        &["SEQ", "TIME (UTC)", "SINCE START", "STEP", "KIND", "DATA"],
        &rows,
    )
}

/// The ledger's table, in execution order.
pub fn ledger(records: &[LedgerRecord]) -> String {
    let rows: Vec<Vec<String>> = records
        .iter()
        .map(|record| {
            vec![
                record.seq.to_string(),
                record.step.to_string(),
                record.tool.clone(),
                record.class.as_str().to_owned(),
                record.status.as_str().to_owned(),
                record.attempts.to_string(),
                time(record.updated_at_ms.as_millis()),
                record
                    .idempotency_key
                    .as_ref()
                    .map_or_else(|| "-".to_owned(), ToString::to_string),
            ]
        })
        .collect();
    table(
        &[
            "SEQ",
            "STEP",
            "TOOL",
            "CLASS",
            "STATUS",
            "ATTEMPTS",
            "UPDATED (UTC)",
            "IDEMPOTENCY KEY",
        ],
        &rows,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_fit_their_widest_cell() {
        let text = table(
            &["A", "LONGER", "C"],
            &[
                vec!["wide-cell".into(), "x".into(), "last".into()],
                vec!["y".into(), "z".into(), "tail".into()],
            ],
        );
        assert_eq!(
            text,
            "A          LONGER  C\nwide-cell  x       last\ny          z       tail\n"
        );
    }

    #[test]
    fn times_are_utc_and_durations_carry_units() {
        assert_eq!(time(1_764_589_224_123), "2025-12-01 11:40:24");
        assert_eq!(clock(1_764_589_224_123), "11:40:24.123");
        // As the report and the timeline write them.
        assert_eq!(duration(450), "450 ms");
        assert_eq!(duration(12_345), "12.3 s");
        assert_eq!(duration(303_999), "5m 3s");
        assert_eq!(duration(7_267_000), "2h 1m");
    }
}
