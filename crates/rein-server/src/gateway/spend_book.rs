//! Spend that no limit reads at once, written behind ([`SpendBook`]).
//!
//! # Why behind
//!
//! A gateway call of a key without a budget, whose tenant has none either,
//! is charged for the record only: nothing refuses the key's next call by
//! it. Writing that charge before the answer cost every such call a store
//! commit on its path (the store's threads were 7% of the instructions
//! `rein serve` spent per answered chat completion, and the call waited
//! for the commit). The
//! book sums it per tenant, key, model and day in memory and writes it in
//! one commit: every [`FLUSH_EVERY`], as soon as it holds [`FLUSH_AT`]
//! rows, before this process reads spend (`/v1/stats`, the dashboard), and
//! when the server stops.
//!
//! A budgeted key's spend is never written behind: its next call, on any
//! process, must see it ([`crate::gateway::key_budget`]).
//!
//! # What it costs
//!
//! A process killed without its stop (SIGKILL, a crash) loses at most the
//! last [`FLUSH_EVERY`] of unbudgeted keys' spend; another process reading
//! spend sees this one's up to [`FLUSH_EVERY`] late. What the store
//! refuses is handled as [`SpendBook::flush`] says.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use rein_core::TenantId;
use rein_store::{SpendDelta, Store, StoreError};
use tokio::sync::Notify;

/// How long spend may wait in the book.
pub const FLUSH_EVERY: Duration = Duration::from_secs(1);

/// The rows that make the book write at once: a burst over many keys and
/// models is not held in memory for the rest of [`FLUSH_EVERY`].
pub const FLUSH_AT: usize = 1024;

/// The largest amount a row holds: the store keeps amounts as signed
/// 64-bit integers.
const MAX_AMOUNT: u64 = i64::MAX.unsigned_abs();

/// What one row of spend is summed under.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Row {
    tenant: TenantId,
    key: String,
    model: String,
    day: u32,
}

/// What a row holds.
#[derive(Debug, Clone, Copy, Default)]
struct Amount {
    tokens: u64,
    cost_micros: u64,
}

/// Spend of unbudgeted keys, summed in memory and written behind.
pub struct SpendBook {
    store: std::sync::Arc<dyn Store>,
    pending: Mutex<HashMap<Row, Amount>>,
    /// Told when the book reached [`FLUSH_AT`] rows.
    full: Notify,
    /// One flush at a time: a flush that returns has seen every earlier
    /// one land (a read after it sees what was charged before it).
    flushing: tokio::sync::Mutex<()>,
    /// Set by [`SpendBook::flush_forever`] ([`SpendBook::is_flushed`]).
    flusher: AtomicBool,
}

impl std::fmt::Debug for SpendBook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SpendBook")
            .field("rows", &self.rows())
            .finish_non_exhaustive()
    }
}

impl SpendBook {
    /// An empty book writing to `store`.
    pub fn new(store: std::sync::Arc<dyn Store>) -> SpendBook {
        SpendBook {
            store,
            pending: Mutex::default(),
            full: Notify::new(),
            flushing: tokio::sync::Mutex::new(()),
            flusher: AtomicBool::new(false),
        }
    }

    /// The rows waiting to be written.
    pub fn rows(&self) -> usize {
        self.pending
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    /// Whether [`SpendBook::flush_forever`] runs: a server that only
    /// routes (an embedder calling [`crate::router`] without
    /// [`crate::serve`]) has no flusher, and its spend is written before
    /// each answer instead ([`crate::gateway::key_budget`]).
    pub fn is_flushed(&self) -> bool {
        self.flusher.load(Ordering::Acquire)
    }

    /// Adds `deltas` to the book; never waits for the store.
    pub fn charge(&self, deltas: impl IntoIterator<Item = SpendDelta>) {
        if self.add(deltas) >= FLUSH_AT {
            self.full.notify_one();
        }
    }

    /// Adds `deltas` without telling the flusher (spend put back after a
    /// failed write must not wake it at once again); the rows held.
    fn add(&self, deltas: impl IntoIterator<Item = SpendDelta>) -> usize {
        let mut pending = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
        for delta in deltas {
            let amount = pending
                .entry(Row {
                    tenant: delta.tenant,
                    key: delta.key,
                    model: delta.model,
                    day: delta.day,
                })
                .or_default();
            // A row the store can hold: it refuses amounts past i64::MAX,
            // and one refused row would hold back the whole book.
            amount.tokens = amount.tokens.saturating_add(delta.tokens).min(MAX_AMOUNT);
            amount.cost_micros = amount
                .cost_micros
                .saturating_add(delta.cost_micros)
                .min(MAX_AMOUNT);
        }
        pending.len()
    }

    /// Writes what the book holds in one commit.
    ///
    /// What the store did not take is kept for the next flush when the
    /// refusal is transient. A commit in doubt is not offered again (it
    /// may have landed: spend counted twice is worse than a moment's
    /// spend lost, which is logged). Any other refusal is retried row by
    /// row, so one row the store refuses never holds back the others.
    ///
    /// # Errors
    ///
    /// The store's first refusal, when any spend was not written.
    pub async fn flush(&self) -> Result<(), StoreError> {
        let _one = self.flushing.lock().await;
        let deltas: Vec<SpendDelta> =
            std::mem::take(&mut *self.pending.lock().unwrap_or_else(PoisonError::into_inner))
                .into_iter()
                .map(|(row, amount)| SpendDelta {
                    tenant: row.tenant,
                    key: row.key,
                    model: row.model,
                    day: row.day,
                    tokens: amount.tokens,
                    cost_micros: amount.cost_micros,
                })
                .collect();
        if deltas.is_empty() {
            return Ok(());
        }
        let e = match self.store.add_spend(&deltas).await {
            Ok(()) => return Ok(()),
            Err(e) => e,
        };
        if e.is_transient() {
            self.add(deltas);
            return Err(e);
        }
        if matches!(e, StoreError::InDoubt(_)) {
            tracing::error!(
                rows = deltas.len(),
                "the gateway's spend of the last moments may not be recorded: its commit is in doubt: {e}"
            );
            return Err(e);
        }
        for delta in deltas {
            match self.store.add_spend(std::slice::from_ref(&delta)).await {
                Ok(()) => {}
                Err(one) if one.is_transient() => {
                    self.add([delta]);
                }
                Err(one) => tracing::error!(
                    tenant = %delta.tenant,
                    key = %delta.key,
                    model = %delta.model,
                    tokens = delta.tokens,
                    "the store refused a row of gateway spend; it is dropped: {one}"
                ),
            }
        }
        Err(e)
    }

    /// Flushes before this process reads spend, so the read sees every
    /// call answered before it; when the store refuses, the read shows
    /// what is stored (the refusal is logged, the spend kept).
    pub async fn before_read(&self) {
        if let Err(e) = self.flush().await {
            tracing::warn!(
                rows = self.rows(),
                "spend read without the last moments' gateway spend, which the store did not take yet: {e}"
            );
        }
    }

    /// Flushes every [`FLUSH_EVERY`], or at once when the book is full,
    /// until the task is aborted (the server's stop flushes once more).
    /// After a failed flush it waits a whole interval, so a store that is
    /// away is not asked again at every charge.
    pub async fn flush_forever(&self) {
        /// Clears the flag when the task ends (it is aborted with the
        /// server): spend is written before each answer again.
        struct Running<'a>(&'a AtomicBool);
        impl Drop for Running<'_> {
            fn drop(&mut self) {
                self.0.store(false, Ordering::Release);
            }
        }
        self.flusher.store(true, Ordering::Release);
        let _running = Running(&self.flusher);
        loop {
            tokio::select! {
                () = tokio::time::sleep(FLUSH_EVERY) => {}
                () = self.full.notified() => {}
            }
            if let Err(e) = self.flush().await {
                tracing::warn!(
                    rows = self.rows(),
                    "cannot write the gateway's spend yet; it is kept and offered again: {e}"
                );
                tokio::time::sleep(FLUSH_EVERY).await;
            }
        }
    }

    /// The server's last flush, within `until`: what is left after it is
    /// logged as lost (a store that does not answer must not keep the
    /// process from exiting within its grace).
    pub async fn flush_last(&self, until: tokio::time::Instant) {
        match tokio::time::timeout_at(until, self.flush()).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::error!(
                rows = self.rows(),
                "the gateway's spend of the last moments is lost: the store did not take it at stop: {e}"
            ),
            Err(_) => tracing::error!(
                rows = self.rows(),
                "the gateway's spend of the last moments is lost: the store did not answer before the end of the grace"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use rein_store::SpendQuery;
    use rein_store_sqlite::SqliteStore;

    use super::*;

    fn delta(key: &str, model: &str, tokens: u64) -> SpendDelta {
        SpendDelta {
            tenant: TenantId::new("acme").unwrap(),
            key: key.to_owned(),
            model: model.to_owned(),
            day: 20_000,
            tokens,
            cost_micros: tokens.saturating_mul(2),
        }
    }

    async fn stored(store: &dyn Store) -> Vec<(String, String, u64, u64)> {
        let mut rows: Vec<_> = store
            .spend(&SpendQuery {
                tenant: None,
                key: None,
                from_day: 0,
                until_day: u32::MAX,
            })
            .await
            .unwrap()
            .into_iter()
            .map(|r| (r.key, r.model, r.tokens, r.cost_micros))
            .collect();
        rows.sort();
        rows
    }

    #[tokio::test]
    async fn charges_are_summed_per_row_and_written_in_one_flush() {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn Store> =
            Arc::new(SqliteStore::open(dir.path().join("rein.db")).unwrap());
        let book = SpendBook::new(store.clone());
        book.charge([delta("a", "p/m", 10), delta("b", "p/m", 1)]);
        book.charge([delta("a", "p/m", 5), delta("a", "p/n", 7)]);
        assert_eq!(book.rows(), 3);
        assert!(
            stored(store.as_ref()).await.is_empty(),
            "nothing before the flush"
        );
        book.flush().await.unwrap();
        assert_eq!(book.rows(), 0);
        assert_eq!(
            stored(store.as_ref()).await,
            vec![
                ("a".into(), "p/m".into(), 15, 30),
                ("a".into(), "p/n".into(), 7, 14),
                ("b".into(), "p/m".into(), 1, 2),
            ]
        );
        // A second flush adds to what is stored, never replaces it.
        book.charge([delta("a", "p/m", 1)]);
        book.flush().await.unwrap();
        assert_eq!(
            stored(store.as_ref()).await[0],
            ("a".into(), "p/m".into(), 16, 32)
        );
    }

    /// A row the store refuses is dropped (and logged) without holding back
    /// the others, and amounts past what the store holds are capped.
    #[tokio::test]
    async fn a_refused_row_holds_back_no_other_and_amounts_are_capped() {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn Store> =
            Arc::new(SqliteStore::open(dir.path().join("rein.db")).unwrap());
        let book = SpendBook::new(store.clone());
        book.charge([delta("", "p/m", 5), delta("a", "p/m", 2)]);
        book.charge([delta("big", "p/m", u64::MAX), delta("big", "p/m", 1)]);
        assert!(book.flush().await.is_err(), "the empty key is refused");
        assert_eq!(book.rows(), 0, "nothing is offered again");
        assert_eq!(
            stored(store.as_ref()).await,
            vec![
                ("a".into(), "p/m".into(), 2, 4),
                ("big".into(), "p/m".into(), MAX_AMOUNT, MAX_AMOUNT),
            ]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn the_book_writes_by_itself_within_its_interval_and_at_once_when_full() {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn Store> =
            Arc::new(SqliteStore::open(dir.path().join("rein.db")).unwrap());
        let book = Arc::new(SpendBook::new(store.clone()));
        let flusher = tokio::spawn({
            let book = book.clone();
            async move { book.flush_forever().await }
        });
        book.charge([delta("a", "p/m", 3)]);
        // Paused time: the interval passes as soon as every task waits.
        while book.rows() > 0 {
            tokio::time::sleep(FLUSH_EVERY / 4).await;
        }
        // The rows leave the book when its flush begins: wait for that
        // flush to land (flushes run one at a time) before reading.
        book.flush().await.unwrap();
        assert_eq!(stored(store.as_ref()).await.len(), 1);
        // A full book does not wait for the interval: while this task only
        // yields, paused time cannot reach the next tick, so only the
        // notice can empty the book.
        book.charge((0..FLUSH_AT).map(|i| delta(&format!("k{i}"), "p/m", 1)));
        let mut yields = 0;
        while book.rows() > 0 {
            yields += 1;
            assert!(yields < 10_000, "a full book was not written on notice");
            tokio::task::yield_now().await;
        }
        book.flush().await.unwrap();
        assert_eq!(stored(store.as_ref()).await.len(), FLUSH_AT + 1);
        // Without its flusher the book is not used: a server that only
        // routes writes spend before each answer (key_budget::admit).
        assert!(book.is_flushed());
        flusher.abort();
        let _ = flusher.await;
        assert!(!book.is_flushed());
    }
}
