//! What `/readyz` knows besides the store: whether this process can still
//! drive queued work.
//!
//! # Why
//!
//! A queue worker that ended (a panic that escaped a run's boundary) used
//! to leave the process answering "ready" while nothing drove its queue:
//! queued runs waited forever behind a green readiness check. Each worker
//! holds a [`WorkerAlive`] for as long as it loops; one that ends, however
//! it ends, is counted, and the process is no longer ready.

use std::sync::atomic::{AtomicUsize, Ordering};

/// The health of the process's queue workers.
#[derive(Debug, Default)]
pub struct Health {
    alive: AtomicUsize,
    ended: AtomicUsize,
}

impl Health {
    /// Registers a worker that starts; it counts as alive until the guard
    /// is dropped (the worker returned, or unwound from a panic).
    pub fn worker_started(&self) -> WorkerAlive<'_> {
        self.alive.fetch_add(1, Ordering::AcqRel);
        WorkerAlive { health: self }
    }

    /// Workers looping now.
    pub fn workers_alive(&self) -> usize {
        self.alive.load(Ordering::Acquire)
    }

    /// Workers that ended since the process started.
    pub fn workers_ended(&self) -> usize {
        self.ended.load(Ordering::Acquire)
    }
}

/// A live worker; dropping it records that the worker ended.
#[derive(Debug)]
pub struct WorkerAlive<'a> {
    health: &'a Health,
}

impl Drop for WorkerAlive<'_> {
    fn drop(&mut self) {
        self.health.alive.fetch_sub(1, Ordering::AcqRel);
        self.health.ended.fetch_add(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_worker_that_unwinds_is_counted_as_ended() {
        let health = Health::default();
        let alive = health.worker_started();
        assert_eq!((health.workers_alive(), health.workers_ended()), (1, 0));
        let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _held = health.worker_started();
            panic!("a bug outside any run");
        }));
        assert!(unwound.is_err());
        assert_eq!((health.workers_alive(), health.workers_ended()), (1, 1));
        drop(alive);
        assert_eq!((health.workers_alive(), health.workers_ended()), (0, 2));
    }
}
