//! The signals that stop a command: SIGTERM (an orchestrator) and SIGINT
//! (Ctrl-C), and the exit status each one ends with.

use anyhow::{Context, Result};
use tokio::signal::unix::{SignalKind, signal};

/// A signal that asks a command to stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// SIGINT: Ctrl-C.
    Interrupt,
    /// SIGTERM: a supervisor or orchestrator.
    Terminate,
}

impl Stop {
    /// The signal's name.
    pub fn name(self) -> &'static str {
        match self {
            Stop::Interrupt => "SIGINT",
            Stop::Terminate => "SIGTERM",
        }
    }

    /// The conventional exit status of a command stopped by this signal:
    /// 128 + its number (130 for SIGINT, 143 for SIGTERM).
    pub fn exit_code(self) -> u8 {
        match self {
            Stop::Interrupt => 130,
            Stop::Terminate => 143,
        }
    }
}

/// Both handlers, installed once.
pub struct Listener {
    interrupt: tokio::signal::unix::Signal,
    terminate: tokio::signal::unix::Signal,
}

impl Listener {
    /// Installs the handlers: from here on the signals no longer kill the
    /// process, they are delivered to [`Listener::next`].
    ///
    /// # Errors
    ///
    /// When a handler cannot be installed.
    pub fn install() -> Result<Listener> {
        Ok(Listener {
            interrupt: signal(SignalKind::interrupt()).context("cannot handle SIGINT")?,
            terminate: signal(SignalKind::terminate()).context("cannot handle SIGTERM")?,
        })
    }

    /// The next signal.
    pub async fn next(&mut self) -> Stop {
        tokio::select! {
            _ = self.interrupt.recv() => Stop::Interrupt,
            _ = self.terminate.recv() => Stop::Terminate,
        }
    }
}
