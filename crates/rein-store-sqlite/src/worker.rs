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
//!   callers ──reads─► [queue] ──► reader: op ─► reply        (own connection)
//! ```
//!
//! # Reads on their own connection
//!
//! A file store also opens a second, query-only connection on a thread of
//! its own, and every read goes there. In WAL mode a reader never waits
//! for the writer: it sees the last committed state as the statement
//! starts. Sharing the writer's thread, every read queued behind whatever
//! batch was committing — under a flood of step commits a status poll, the
//! queue workers' fair pick and a run's `get_run` each waited for a commit
//! they had no part in (measured on the pick of a quiet tenant's run
//! behind a noisy one's backlog: p50 1.95 ms per read against 0.44 ms
//! idle). Read-your-writes holds: a write's caller is answered after its
//! `COMMIT`, so any read it issues next starts after it.
//!
//! # Checkpoints on their own connection
//!
//! SQLite's automatic checkpoint runs inside the `COMMIT` that takes the
//! WAL past 1000 frames: it copies them into the database file and syncs
//! it, on the committing connection. Here that is the writer, so every
//! caller of that batch, and every write queued behind it, waited for a
//! copy and an fsync of about 4 MiB (on this project's CI disk, 21 ms for
//! 4 MiB written with `dsync` against 0.24 ms for one 4 KiB page): the
//! store's worst write latency, once every few hundred runs, and the tail
//! of a quiet tenant's queue wait behind a noisy backlog. As SQLite's
//! documentation suggests for such a writer, a file store turns the
//! automatic checkpoint off on the writer and runs it on a thread and
//! connection of its own:
//!
//! ```text
//!   writer: COMMIT ─► WAL ≥ CHECKPOINT_FRAMES? ─► signal ─► checkpointer:
//!                                                  PRAGMA wal_checkpoint(PASSIVE)
//! ```
//!
//! A passive checkpoint waits for no reader or writer, so the writer keeps
//! committing while it runs; durability is unchanged (a commit is as
//! durable as `synchronous` makes it before any checkpoint). The writer
//! learns the WAL's size from SQLite's WAL hook after each commit. Should
//! the checkpointer fall behind a writer that outpaces the disk, the WAL
//! would grow without bound: past [`WAL_CAP_FRAMES`] the writer waits for
//! the running checkpoint and checkpoints itself, as SQLite would have.

use std::cell::Cell;
use std::ffi::c_int;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, Condvar, Mutex, PoisonError, mpsc};
use std::thread;

use rusqlite::Connection;
use rusqlite::hooks::Wal;
use tokio::sync::oneshot;

use super::codec::SqlResult;
use rein_store::StoreError;

/// The most jobs one group commit takes from the queue.
pub const MAX_BATCH: usize = 256;

/// WAL frames (pages) after a commit from which the writer asks the
/// checkpointer for a checkpoint: SQLite's own automatic threshold.
pub const CHECKPOINT_FRAMES: c_int = 1000;

/// WAL frames after a commit from which the writer checkpoints itself,
/// after the checkpointer's running checkpoint (see the module docs):
/// about 64 MiB of 4 KiB pages.
pub const WAL_CAP_FRAMES: c_int = 16 * CHECKPOINT_FRAMES;

thread_local! {
    /// The WAL's frames after the last commit on this thread: set by
    /// [`note_wal_frames`], which SQLite calls on the committing thread, so
    /// each store's writer thread sees its own connection's.
    static WAL_FRAMES: Cell<c_int> = const { Cell::new(0) };
}

/// The writer's WAL hook: records the WAL's size. Registering it replaces
/// SQLite's automatic checkpoint on that connection.
fn note_wal_frames(_wal: &Wal, frames: c_int) -> rusqlite::Result<()> {
    WAL_FRAMES.set(frames);
    Ok(())
}

/// What the writer holds of the checkpointer: the signal, and the count
/// of checkpoints done, whose lock the checkpointer holds while it
/// checkpoints.
struct Checkpoints {
    wanted: mpsc::SyncSender<()>,
    done: Arc<(Mutex<u64>, Condvar)>,
}

impl Checkpoints {
    /// Starts the checkpointer thread on `conn`; it stops once the writer
    /// drops its [`Checkpoints`].
    fn start(conn: Connection) -> Result<Checkpoints, StoreError> {
        let (wanted, signals) = mpsc::sync_channel::<()>(1);
        let done = Arc::new((Mutex::new(0), Condvar::new()));
        let counted = done.clone();
        thread::Builder::new()
            .name("rein-sqlite-checkpoint".to_owned())
            .spawn(move || {
                while signals.recv().is_ok() {
                    let (count, changed) = &*counted;
                    let mut count = count.lock().unwrap_or_else(PoisonError::into_inner);
                    checkpoint(&conn);
                    *count += 1;
                    changed.notify_all();
                }
            })
            .map_err(|error| {
                StoreError::Backend(format!(
                    "cannot start the sqlite checkpoint thread: {error}"
                ))
            })?;
        Ok(Checkpoints { wanted, done })
    }

    /// After a commit that left `frames` in the WAL.
    fn after_commit(&self, conn: &Connection, frames: c_int) {
        if frames >= WAL_CAP_FRAMES {
            // After the running one, if any: that is the back-pressure.
            let _count = self.done.0.lock().unwrap_or_else(PoisonError::into_inner);
            checkpoint(conn);
        } else if frames >= CHECKPOINT_FRAMES {
            // One signal pending is enough: the checkpoint it starts
            // copies every frame committed by then.
            let _ = self.wanted.try_send(());
        }
    }
}

/// Copies what it can of the WAL into the database file without waiting
/// for readers or writers; a failure is logged (the next commit past the
/// threshold asks again).
fn checkpoint(conn: &Connection) {
    if let Err(error) = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(())) {
        tracing::warn!("sqlite checkpoint failed: {error}");
    }
}

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
    /// The reader thread's queue, when the store has one; else reads go to
    /// the writer's thread.
    reads: Option<mpsc::Sender<ReadJob>>,
}

impl Worker {
    /// Starts the thread that owns `conn`; with `reader`, reads go to a
    /// thread of their own on it, and with `checkpointer`, checkpoints
    /// (else SQLite's automatic checkpoint runs in the writer's commits).
    ///
    /// # Errors
    ///
    /// [`StoreError::Backend`] when a thread cannot be spawned.
    pub fn start(
        conn: Connection,
        reader: Option<Connection>,
        checkpointer: Option<Connection>,
    ) -> Result<Worker, StoreError> {
        let checkpoints = checkpointer.map(Checkpoints::start).transpose()?;
        Worker::serving(conn, reader, checkpoints)
    }

    fn serving(
        conn: Connection,
        reader: Option<Connection>,
        checkpoints: Option<Checkpoints>,
    ) -> Result<Worker, StoreError> {
        if checkpoints.is_some() {
            conn.wal_hook(Some(note_wal_frames));
        }
        let (jobs, queue) = mpsc::channel();
        thread::Builder::new()
            .name("rein-sqlite".to_owned())
            .spawn(move || serve(conn, queue, checkpoints))
            .map_err(|error| {
                StoreError::Backend(format!("cannot start the sqlite thread: {error}"))
            })?;
        let reads = match reader {
            Some(reader) => {
                let (reads, queue) = mpsc::channel::<ReadJob>();
                thread::Builder::new()
                    .name("rein-sqlite-read".to_owned())
                    .spawn(move || {
                        while let Ok(read) = queue.recv() {
                            read(&reader);
                        }
                    })
                    .map_err(|error| {
                        StoreError::Backend(format!(
                            "cannot start the sqlite reader thread: {error}"
                        ))
                    })?;
                Some(reads)
            }
            None => None,
        };
        Ok(Worker { jobs, reads })
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
        let Some(reads) = &self.reads else {
            return self.submit(Job::Read(job), answer).await;
        };
        reads
            .send(job)
            .map_err(|_| StoreError::Backend("the sqlite reader thread has stopped".to_owned()))?;
        answer.await.map_err(|_| {
            StoreError::Backend("the sqlite reader thread stopped before answering".to_owned())
        })?
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

fn serve(conn: Connection, queue: mpsc::Receiver<Job>, checkpoints: Option<Checkpoints>) {
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
            let frames = WAL_FRAMES.replace(0);
            if let Some(checkpoints) = &checkpoints {
                checkpoints.after_commit(&conn, frames);
            }
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use std::time::Duration;

    /// A generous bound that fails the test instead of hanging it: not a
    /// measurement.
    const PATIENCE: Duration = Duration::from_secs(30);

    fn wal(path: &std::path::Path) -> Connection {
        let conn = Connection::open(path).unwrap();
        conn.query_row("PRAGMA journal_mode = WAL", [], |r| r.get::<_, String>(0))
            .unwrap();
        conn
    }

    /// A worker whose writer is held inside a write until the test lets it
    /// go, and the value a read then sees.
    async fn read_while_a_write_is_held(with_reader: bool, patience: Duration) -> Option<i64> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("w.db");
        let writer = wal(&path);
        writer
            .execute_batch("CREATE TABLE t (v INTEGER); INSERT INTO t VALUES (1);")
            .unwrap();
        let reader = with_reader.then(|| wal(&path));
        let worker = Worker::start(writer, reader, None).unwrap();
        let (entered, inside) = std::sync::mpsc::channel::<()>();
        let (release, released) = std::sync::mpsc::channel::<()>();
        let held = {
            let worker = worker.clone();
            tokio::spawn(async move {
                worker
                    .write(move |conn| {
                        conn.execute("UPDATE t SET v = 2", []).sql()?;
                        let _ = entered.send(());
                        let _ = released.recv();
                        Ok(())
                    })
                    .await
            })
        };
        tokio::task::spawn_blocking(move || inside.recv().unwrap())
            .await
            .unwrap();
        let read = worker.read(|conn| {
            conn.query_row("SELECT v FROM t", [], |r| r.get::<_, i64>(0))
                .sql()
        });
        let seen = tokio::time::timeout(patience, read)
            .await
            .ok()
            .map(|r| r.unwrap());
        release.send(()).unwrap();
        held.await.unwrap().unwrap();
        seen
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_read_does_not_wait_for_the_batch_being_committed() {
        // The last committed value, not the held write's.
        assert_eq!(read_while_a_write_is_held(true, PATIENCE).await, Some(1));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn without_a_reader_a_read_waits_for_the_writer() {
        // The control: the same read on the writer's thread cannot run
        // while the writer is held, however long it is given (a short
        // wait suffices: it never answers before the write is let go).
        assert_eq!(
            read_while_a_write_is_held(false, Duration::from_millis(200)).await,
            None
        );
    }

    /// A worker with a checkpointer on a fresh WAL file `c.db` in `dir`
    /// holding a table `t`; the checkpointer's count of checkpoints done
    /// (whose lock it holds while it checkpoints); the file's path.
    fn checkpointed(
        dir: &std::path::Path,
    ) -> (Worker, Arc<(Mutex<u64>, Condvar)>, std::path::PathBuf) {
        let path = dir.join("c.db");
        let writer = wal(&path);
        writer.execute_batch("CREATE TABLE t (v BLOB);").unwrap();
        let checkpoints = Checkpoints::start(wal(&path)).unwrap();
        let done = checkpoints.done.clone();
        let worker = Worker::serving(writer, None, Some(checkpoints)).unwrap();
        (worker, done, path)
    }

    /// Commits about `n` pages to `t` in one write.
    async fn pages(worker: &Worker, n: c_int) {
        worker
            .write(move |conn| {
                for _ in 0..n {
                    conn.execute("INSERT INTO t VALUES (zeroblob(4000))", [])
                        .sql()?;
                }
                Ok(())
            })
            .await
            .unwrap();
    }

    // Holding the checkpointer's lock across the write is the point: the
    // write runs on the store's thread, which never takes it below the cap.
    #[allow(clippy::await_holding_lock)]
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_commit_past_the_threshold_does_not_wait_for_its_checkpoint() {
        let dir = tempfile::tempdir().unwrap();
        let (worker, done, path) = checkpointed(dir.path());
        let file = || std::fs::metadata(&path).unwrap().len();
        let before = file();
        // Held here, the checkpointer cannot checkpoint.
        let held = done.0.lock().unwrap();
        // About 1,200 pages: past CHECKPOINT_FRAMES, short of the cap.
        pages(&worker, 1200).await;
        // Committed, and nothing copied into the database file: the
        // writer's commit did not checkpoint (SQLite's automatic one
        // would have, inside it).
        assert_eq!(file(), before);
        // Let go, the checkpointer copies the WAL in.
        let count = done.1.wait_while(held, |n| *n == 0).unwrap();
        assert_eq!(*count, 1);
        assert!(file() > before + 4_000_000, "{} bytes", file());
    }

    // As above: the test holds the checkpointer's lock on purpose.
    #[allow(clippy::await_holding_lock)]
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn past_the_cap_the_writer_checkpoints_itself_after_the_running_one() {
        let dir = tempfile::tempdir().unwrap();
        let (worker, done, path) = checkpointed(dir.path());
        let file = || std::fs::metadata(&path).unwrap().len();
        let before = file();
        // A checkpoint "running": the writer must wait for it at the cap.
        let held = done.0.lock().unwrap();
        pages(&worker, WAL_CAP_FRAMES + 500).await;
        // Queued behind the writer, which waits at the cap.
        let next = {
            let worker = worker.clone();
            tokio::spawn(async move {
                worker
                    .write(|conn| conn.execute("INSERT INTO t VALUES (1)", []).sql())
                    .await
            })
        };
        assert_eq!(file(), before, "nothing checkpointed while it is held");
        drop(held);
        next.await.unwrap().unwrap();
        // Answered after the writer's own checkpoint: the WAL is in the
        // file, and the checkpointer never ran (it was never asked).
        assert!(file() > before + 60_000_000, "{} bytes", file());
        assert_eq!(*done.0.lock().unwrap(), 0);
    }
}
