//! The thread that owns the SQLite connection, and its group commit.
//!
//! # Why a dedicated thread
//!
//! SQLite calls block, and a blocking call on an async runtime's worker
//! stalls every task scheduled there. One thread owns the connection; async
//! callers send it jobs over a channel and await a oneshot reply. This
//! works under any executor (nothing here needs a tokio runtime), and it
//! gives one place where writes queue up — which is what group commit
//! needs.
//!
//! # Group commit
//!
//! The thread takes every job waiting in the queue (up to
//! [`MAX_BATCH`]), runs the reads, then runs all the writes inside one
//! `BEGIN IMMEDIATE … COMMIT`, each in its own savepoint. A write that
//! fails rolls back its savepoint only; the others still commit. Replies
//! are sent after `COMMIT` returns, so no caller is told "stored" before it
//! is. Under load, N concurrent runs share one commit (one fsync with
//! `synchronous = FULL`) instead of N.
//!
//! ```text
//!   callers ──jobs──► [queue] ──► worker: reads ─► BEGIN IMMEDIATE
//!                                          SAVEPOINT job; op; RELEASE   (×N)
//!                                          COMMIT ─► replies
//! ```

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::mpsc;
use std::thread;

use rusqlite::Connection;
use tokio::sync::oneshot;

use super::codec::SqlResult;
use rein_store::StoreError;

/// The most jobs one group commit takes from the queue.
pub const MAX_BATCH: usize = 256;

type ReadJob = Box<dyn FnOnce(&Connection) + Send>;

/// A write that runs inside the batch transaction and replies after commit.
trait WriteJob: Send {
    /// Runs the operation in its own savepoint. `Err` means the transaction
    /// itself is broken (a savepoint could not be made or undone), not that
    /// the operation was refused.
    fn apply(&mut self, conn: &Connection) -> Result<(), StoreError>;

    /// Replies: the operation's result if the batch committed, else the
    /// commit's error.
    fn finish(self: Box<Self>, commit: Result<(), StoreError>);
}

struct Write<T, F> {
    op: Option<F>,
    result: Option<Result<T, StoreError>>,
    reply: oneshot::Sender<Result<T, StoreError>>,
}

impl<T, F> WriteJob for Write<T, F>
where
    T: Send,
    F: FnOnce(&Connection) -> Result<T, StoreError> + Send,
{
    fn apply(&mut self, conn: &Connection) -> Result<(), StoreError> {
        let Some(op) = self.op.take() else {
            return Ok(());
        };
        conn.execute_batch("SAVEPOINT job").sql()?;
        let result = run_guarded(conn, op);
        if result.is_ok() {
            conn.execute_batch("RELEASE job").sql()?;
        } else {
            conn.execute_batch("ROLLBACK TO job; RELEASE job").sql()?;
        }
        self.result = Some(result);
        Ok(())
    }

    fn finish(self: Box<Self>, commit: Result<(), StoreError>) {
        let reply = match (commit, self.result) {
            (_, Some(Err(refused))) => Err(refused),
            (Ok(()), Some(Ok(value))) => Ok(value),
            (Err(error), _) => Err(error),
            (Ok(()), None) => Err(StoreError::Backend(
                "write was not applied before commit; expected every queued write to run"
                    .to_owned(),
            )),
        };
        // A caller that stopped waiting does not need the answer.
        let _ = self.reply.send(reply);
    }
}

enum Job {
    Read(ReadJob),
    Write(Box<dyn WriteJob>),
}

/// Runs `op`, turning a panic into an error so that one bad operation does
/// not take the store's thread down with it.
fn run_guarded<T>(
    conn: &Connection,
    op: impl FnOnce(&Connection) -> Result<T, StoreError>,
) -> Result<T, StoreError> {
    catch_unwind(AssertUnwindSafe(|| op(conn))).unwrap_or_else(|_| {
        Err(StoreError::Backend(
            "store operation panicked; expected it to return an error".to_owned(),
        ))
    })
}

/// The handle callers hold; the thread stops when the last one is dropped.
#[derive(Debug, Clone)]
pub struct Worker {
    jobs: mpsc::Sender<Job>,
}

impl Worker {
    /// Starts the thread that owns `conn`.
    ///
    /// # Errors
    ///
    /// [`StoreError::Backend`] when the thread cannot be spawned.
    pub fn start(conn: Connection) -> Result<Worker, StoreError> {
        let (jobs, queue) = mpsc::channel();
        thread::Builder::new()
            .name("rein-sqlite".to_owned())
            .spawn(move || serve(conn, queue))
            .map_err(|error| {
                StoreError::Backend(format!("cannot start the sqlite thread: {error}"))
            })?;
        Ok(Worker { jobs })
    }

    /// Runs `op` outside any transaction and returns its result.
    pub async fn read<T, F>(&self, op: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T, StoreError> + Send + 'static,
    {
        let (reply, answer) = oneshot::channel();
        let job: ReadJob = Box::new(move |conn| {
            let _ = reply.send(run_guarded(conn, op));
        });
        self.submit(Job::Read(job), answer).await
    }

    /// Runs `op` in the next group commit and returns its result once the
    /// commit is durable.
    pub async fn write<T, F>(&self, op: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T, StoreError> + Send + 'static,
    {
        let (reply, answer) = oneshot::channel();
        let job = Write {
            op: Some(op),
            result: None,
            reply,
        };
        self.submit(Job::Write(Box::new(job)), answer).await
    }

    async fn submit<T>(
        &self,
        job: Job,
        answer: oneshot::Receiver<Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        self.jobs
            .send(job)
            .map_err(|_| StoreError::Backend("the sqlite thread has stopped".to_owned()))?;
        answer.await.map_err(|_| {
            StoreError::Backend("the sqlite thread stopped before answering".to_owned())
        })?
    }
}

fn serve(conn: Connection, queue: mpsc::Receiver<Job>) {
    let mut reads = Vec::new();
    let mut writes = Vec::new();
    while let Ok(first) = queue.recv() {
        let mut next = Some(first);
        let mut taken = 0;
        while let Some(job) = next {
            match job {
                Job::Read(read) => reads.push(read),
                Job::Write(write) => writes.push(write),
            }
            taken += 1;
            next = if taken < MAX_BATCH {
                queue.try_recv().ok()
            } else {
                None
            };
        }
        // Reads first: none of them waits on a write of this batch (its
        // caller would not have been answered yet), and so none can see a
        // write that might still roll back.
        for read in reads.drain(..) {
            read(&conn);
        }
        if !writes.is_empty() {
            commit_batch(&conn, &mut writes);
        }
    }
}

fn commit_batch(conn: &Connection, writes: &mut Vec<Box<dyn WriteJob>>) {
    let outcome = (|| {
        conn.execute_batch("BEGIN IMMEDIATE").sql()?;
        for write in writes.iter_mut() {
            write.apply(conn)?;
        }
        conn.execute_batch("COMMIT").sql()
    })();
    if outcome.is_err() && !conn.is_autocommit() {
        // Best effort: SQLite may already have rolled back (I/O error, disk
        // full), and the callers are told of the first error either way.
        let _ = conn.execute_batch("ROLLBACK");
    }
    for write in writes.drain(..) {
        write.finish(outcome.clone());
    }
}
