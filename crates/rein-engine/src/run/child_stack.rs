//! A run polled on a stack of its own once its thread's runs low.
//!
//! # Why
//!
//! A parent run awaits its child inside the agent tool's call, so one poll
//! of an agent tree is one call chain through every level, and the stack
//! it takes grows with the tree's depth: about 600 KiB a level in a debug
//! build and 70–100 KiB in a release one (a tree three deep overflowed a
//! 1.8 MB thread in debug and a 200 KB one in release). A tokio worker's
//! thread has 2 MiB, and `agent_graph.max_depth` has no upper bound, so a
//! tree some 20 levels deep (3 in debug) overflowed it. An overflow is not
//! a panic that a run's boundary can catch: it aborts the process, with
//! every run in it.
//!
//! Spawning each child as a task of its own would give it a fresh stack,
//! but a child borrows its parent's engine and argument validator, which
//! are not `'static`, and a dropped parent must drop its child with it. So
//! the child's future stays where it is and its polls go through
//! [`OnEnoughStack`]: with less than [`RED_ZONE`] of the stack left, a poll
//! runs on a fresh segment of [`SEGMENT`] bytes (the `stacker` crate,
//! rustc's own guard against deep recursion); otherwise in place, for the
//! cost of reading the stack pointer. Any depth then fits in memory. A
//! root run is polled the same way ([`Engine::run`], [`Engine::resume`]):
//! an embedder's thread may have less stack than one level takes.
//!
//! [`Engine::run`]: super::Engine::run
//! [`Engine::resume`]: super::Engine::resume

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

/// The stack a poll must find left to run in place: more than one level
/// of a tree takes in a debug build.
pub(crate) const RED_ZONE: usize = 1024 * 1024;

/// The size of a fresh segment: several levels of a debug build each.
pub(crate) const SEGMENT: usize = 4 * 1024 * 1024;

/// Polls a run's future, on a fresh stack segment when the thread's is
/// running low.
pub(crate) struct OnEnoughStack<F>(Pin<Box<F>>);

impl<F: Future> OnEnoughStack<F> {
    pub(crate) fn new(run: F) -> Self {
        OnEnoughStack(Box::pin(run))
    }
}

impl<F: Future> Future for OnEnoughStack<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let run = self.0.as_mut();
        stacker::maybe_grow(RED_ZONE, SEGMENT, move || run.poll(cx))
    }
}
