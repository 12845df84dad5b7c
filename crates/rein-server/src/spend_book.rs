//! Spend that no limit reads at once, written behind ([`SpendBook`]).
//!
//! # Why behind
//!
//! A gateway call of a key without a budget, whose tenant has none either,
//! is charged for the record only: nothing refuses the key's next call by
//! it. Writing that charge before the answer cost every such call a store
//! commit on its path (a fifth of the instructions `rein serve` spent per
//! answered chat completion, and the commit's wait in its latency). The
//! book sums it per tenant, key, model and day in memory and writes it in
//! one commit: every [`FLUSH_EVERY`], as soon as it holds [`FLUSH_AT`]
//! rows, before this process reads spend (`/v1/stats`, the dashboard), and
//! when the server stops.
//!
//! A budgeted key's spend is never written behind: its next call, on any
//! process, must see it ([`crate::key_budget`]).
//!
//! # What it costs
//!
//! A process killed without its stop (SIGKILL, a crash) loses at most the
//! last [`FLUSH_EVERY`] of unbudgeted keys' spend; another process reading
//! spend sees this one's up to [`FLUSH_EVERY`] late. A write the store
//! refuses is kept and offered again at the next flush.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use rein_core::TenantId;
use rein_store::{SpendDelta, Store};
use tokio::sync::Notify;

/// How long spend may wait in the book.
pub const FLUSH_EVERY: Duration = Duration::from_secs(1);

/// The rows that make the book write at once: a burst over many keys and
/// models is not held in memory for the rest of [`FLUSH_EVERY`].
pub const FLUSH_AT: usize = 1024;

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
        }
    }

    /// The rows waiting to be written.
    pub fn rows(&self) -> usize {
        self.pending
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    /// Adds `deltas` to the book; never waits for the store.
    pub fn charge(&self, deltas: impl IntoIterator<Item = SpendDelta>) {
        let rows = {
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
                amount.tokens = amount.tokens.saturating_add(delta.tokens);
                amount.cost_micros = amount.cost_micros.saturating_add(delta.cost_micros);
            }
            pending.len()
        };
        if rows >= FLUSH_AT {
            self.full.notify_one();
        }
    }

    /// Writes what the book holds in one commit. When the store refuses,
    /// the spend goes back into the book for the next flush; the error is
    /// returned for a caller that must say so (the server's last flush).
    ///
    /// # Errors
    ///
    /// The store's, when it did not take the spend.
    pub async fn flush(&self) -> Result<(), rein_store::StoreError> {
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
        match self.store.add_spend(&deltas).await {
            Ok(()) => Ok(()),
            Err(e) => {
                self.charge(deltas);
                Err(e)
            }
        }
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
    pub async fn flush_forever(&self) {
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
            }
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
            cost_micros: tokens * 2,
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
        flusher.abort();
    }
}
