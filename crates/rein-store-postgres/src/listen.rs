//! The `LISTEN` connection: PostgreSQL notifications turned into
//! [`Notification`]s for every receiver of this process.
//!
//! # Why one dedicated connection
//!
//! A pooled connection goes back to the pool between calls, and `LISTEN`
//! lasts as long as its session: the listener holds a connection of its
//! own, outside the pool, for the life of the store. When it breaks (the
//! server restarted, the network dropped) it reconnects with a growing
//! pause and then sends [`Notification::Resync`], since whatever was
//! notified meanwhile is lost: receivers read the store again.
//!
//! | channel | payload | notification |
//! | --- | --- | --- |
//! | [`CANCEL_CHANNEL`] | run id | [`Notification::CancelRequested`] |
//! | [`EVENTS_CHANNEL`] | run id | [`Notification::RunChanged`] |
//! | [`HEALTH_CHANNEL`] | breaker arm | [`Notification::HealthChanged`] |

use std::time::Duration;

use rein_core::RunId;
use rein_store::Notification;
use tokio::sync::{broadcast, mpsc};
use tokio_postgres::AsyncMessage;

use crate::tls::Connector;

use crate::ops::cancel::CANCEL_CHANNEL;
use crate::ops::commit::EVENTS_CHANNEL;
use crate::ops::shared::HEALTH_CHANNEL;

/// How many notifications a receiver may fall behind by before it is told
/// to resync (`broadcast` lag).
const CAPACITY: usize = 1024;

/// The first pause before reconnecting, doubled up to [`MAX_PAUSE`].
const FIRST_PAUSE: Duration = Duration::from_millis(100);

/// The longest pause between two reconnection attempts.
const MAX_PAUSE: Duration = Duration::from_secs(5);

/// The running listener; stops when dropped (the last clone of the store
/// went away) or closed.
pub(crate) struct Listener {
    sender: broadcast::Sender<Notification>,
    task: tokio::task::JoinHandle<()>,
}

impl Listener {
    /// Starts listening on the runtime of `runtime`.
    pub(crate) fn spawn(
        config: tokio_postgres::Config,
        tls: Connector,
        runtime: &tokio::runtime::Handle,
    ) -> Self {
        let (sender, _) = broadcast::channel(CAPACITY);
        let task = runtime.spawn(listen_forever(config, tls, sender.clone()));
        Listener { sender, task }
    }

    /// A new receiver, from now on.
    pub(crate) fn subscribe(&self) -> broadcast::Receiver<Notification> {
        self.sender.subscribe()
    }

    /// Stops listening.
    pub(crate) fn stop(&self) {
        self.task.abort();
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// What a notification on `channel` with `payload` means, if anything.
fn decode(channel: &str, payload: &str) -> Option<Notification> {
    match channel {
        CANCEL_CHANNEL => RunId::new(payload).ok().map(Notification::CancelRequested),
        EVENTS_CHANNEL => RunId::new(payload).ok().map(Notification::RunChanged),
        HEALTH_CHANNEL if !payload.is_empty() => {
            Some(Notification::HealthChanged(payload.to_owned()))
        }
        _ => None,
    }
}

async fn listen_forever(
    config: tokio_postgres::Config,
    tls: Connector,
    sender: broadcast::Sender<Notification>,
) {
    let mut pause = FIRST_PAUSE;
    loop {
        match listen_once(&config, &tls, &sender).await {
            // It listened, then broke: start again from the first pause.
            Ok(()) => {
                tracing::warn!("postgres listener connection lost; reconnecting");
                pause = FIRST_PAUSE;
            }
            Err(e) => {
                tracing::warn!(
                    retry_in_ms = pause.as_millis() as u64,
                    "postgres listener cannot connect: {e}"
                );
            }
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(MAX_PAUSE);
    }
}

/// One session: connects, listens, forwards until the connection ends.
async fn listen_once(
    config: &tokio_postgres::Config,
    tls: &Connector,
    sender: &broadcast::Sender<Notification>,
) -> Result<(), tokio_postgres::Error> {
    let (client, mut connection) = config.connect(tls.clone()).await?;
    // The connection must be polled for the client's queries to run, and
    // its notifications arrive on it: one task drives it and hands them
    // over.
    let (tx, mut rx) = mpsc::unbounded_channel();
    let driver = tokio::spawn(async move {
        loop {
            match std::future::poll_fn(|cx| connection.poll_message(cx)).await {
                Some(Ok(AsyncMessage::Notification(n))) => {
                    if tx
                        .send((n.channel().to_owned(), n.payload().to_owned()))
                        .is_err()
                    {
                        return;
                    }
                }
                Some(Ok(_)) => {}
                Some(Err(e)) => {
                    tracing::debug!("postgres listener connection: {e}");
                    return;
                }
                None => return,
            }
        }
    });
    let listening = client
        .batch_execute(&format!(
            "LISTEN {CANCEL_CHANNEL}; LISTEN {EVENTS_CHANNEL}; LISTEN {HEALTH_CHANNEL}"
        ))
        .await;
    if let Err(e) = listening {
        driver.abort();
        return Err(e);
    }
    // Anything notified before this session is lost: read again.
    let _ = sender.send(Notification::Resync);
    while let Some((channel, payload)) = rx.recv().await {
        if let Some(notification) = decode(&channel, &payload) {
            // No receiver is not an error: nobody waits right now.
            let _ = sender.send(notification);
        }
    }
    drop(client);
    driver.abort();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cancel_payloads_name_the_run_and_others_are_ignored() {
        assert_eq!(
            decode(CANCEL_CHANNEL, "r-1"),
            Some(Notification::CancelRequested(
                RunId::new("r-1").unwrap_or_else(|_| unreachable!())
            ))
        );
        assert_eq!(
            decode(EVENTS_CHANNEL, "r-1"),
            Some(Notification::RunChanged(
                RunId::new("r-1").unwrap_or_else(|_| unreachable!())
            ))
        );
        assert_eq!(
            decode(HEALTH_CHANNEL, "provider.primary"),
            Some(Notification::HealthChanged("provider.primary".to_owned()))
        );
        assert_eq!(decode(HEALTH_CHANNEL, ""), None);
        assert_eq!(decode("other", "r-1"), None);
        assert_eq!(decode(CANCEL_CHANNEL, ""), None);
    }
}
