//! Cross-replica wake-ups: one dedicated connection per replica LISTENs on [`CHANNEL`] and
//! NOTIFYs the kinds this replica made leasable, so a lease request waiting on any replica is
//! woken by work committed on any other.
//!
//! The NOTIFY is sent after the producing transaction committed (the application notifies
//! [`WorkSignal`] only then), from this connection, not inside the producing transaction: the
//! commit path pays nothing, and notifications that pile up while one is in flight go out
//! together as one. A replica ignores its own notifications (same backend pid). While the
//! connection is down, waiters fall back to the lease use case's periodic re-check; after a
//! reconnect every kind is woken once, for whatever was announced meanwhile.

use std::sync::Arc;
use std::sync::atomic::{AtomicI32, AtomicU32, Ordering};
use std::time::Duration;

use futures_util::StreamExt;
use muster_app::signal::WorkSignal;
use muster_domain::Kind;
use tokio::sync::{Notify, oneshot};
use tokio_postgres::AsyncMessage;

use crate::PgError;
use crate::pool::hosts::HostBook;
use crate::pool::{PoolSettings, pg_config};

/// The notification channel: its payload is the kinds, comma-separated.
pub const CHANNEL: &str = "muster_work";

/// `LISTEN` on [`CHANNEL`] (a channel is a name, not a parameter: the test below keeps the two
/// the same).
const LISTEN: &str = include_str!("wake/sql/listen.sql");
/// Sends a notification: `$1` the channel, `$2` the payload.
const NOTIFY: &str = include_str!("wake/sql/notify.sql");
/// Asked of an idle connection to find out whether it is still there.
const PROBE: &str = include_str!("wake/sql/probe.sql");

/// The bridge connection's `application_name` (in `pg_stat_activity`).
pub const APPLICATION_NAME: &str = "muster-wake";

/// How long a NOTIFY (or the LISTEN, or the probe) may go unanswered before the connection
/// is taken for dead.
const NOTIFY_TIMEOUT: Duration = Duration::from_secs(5);

/// How often the connection is asked `SELECT 1` (bounded by [`NOTIFY_TIMEOUT`]).
const IDLE_PROBE: Duration = Duration::from_secs(10);

/// First wait before reconnecting; doubled up to [`RECONNECT_MAX`].
const RECONNECT_MIN: Duration = Duration::from_millis(250);
const RECONNECT_MAX: Duration = Duration::from_secs(5);

/// Passes wake-ups between this replica's [`WorkSignal`] and the other replicas'.
pub struct WakeBridge {
    /// The pool's URL read the pool's way, TLS included.
    target: crate::tls::DbTarget,
    /// Its hosts, tried as the pool tries them (the one that last answered read-write first).
    hosts: Arc<HostBook>,
    signal: WorkSignal,
}

impl WakeBridge {
    pub fn new(url: &str, settings: &PoolSettings, signal: WorkSignal) -> Result<Self, PgError> {
        let mut target = pg_config(url, settings)?;
        target.config.application_name(APPLICATION_NAME);
        let hosts = Arc::new(HostBook::new(&target.config, settings.connect_timeout));
        Ok(WakeBridge {
            target,
            hosts,
            signal,
        })
    }

    /// Listens and announces until dropped, reconnecting with backoff when the connection fails.
    pub async fn run(self) {
        let mut backoff = RECONNECT_MIN;
        loop {
            let e = self.session(&mut backoff).await;
            tracing::warn!(error = %e, retry_in_ms = backoff.as_millis() as u64,
                "cross-replica wake-ups interrupted; lease requests fall back to their re-check");
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(RECONNECT_MAX);
        }
    }

    /// One connection's life: answers why it ended.
    async fn session(&self, backoff: &mut Duration) -> String {
        let (client, mut connection, host) = match self.hosts.open(&self.target.tls).await {
            Ok(c) => c,
            Err(e) => return e.to_string(),
        };
        // The connection is driven by a task of its own (a query's answer needs it polled);
        // its notifications come here. It is aborted when the session ends: a connection
        // whose server went silent would otherwise wait for an answer for good.
        let heard = Arc::new(Heard::default());
        let (end_tx, ended) = oneshot::channel::<String>();
        let task = tokio::spawn({
            let heard = heard.clone();
            async move {
                let mut messages = futures_util::stream::poll_fn(|cx| connection.poll_message(cx));
                let reason = loop {
                    match messages.next().await {
                        Some(Ok(AsyncMessage::Notification(n))) => {
                            heard.add(n.process_id(), n.payload());
                        }
                        Some(Ok(_)) => {}
                        Some(Err(e)) => break e.to_string(),
                        None => break "the connection closed".to_owned(),
                    }
                };
                let _ = end_tx.send(reason);
            }
        });
        let (reason, silent) = self.listen(&client, &heard, ended, backoff).await;
        if silent {
            self.hosts.went_silent(host);
        }
        task.abort();
        reason
    }

    /// Listens and announces on `client` until the connection fails: answers why, and whether
    /// the server stopped answering.
    async fn listen(
        &self,
        client: &tokio_postgres::Client,
        heard: &Heard,
        mut ended: oneshot::Receiver<String>,
        backoff: &mut Duration,
    ) -> (String, bool) {
        let unanswered = || (format!("unanswered for {NOTIFY_TIMEOUT:?}"), true);
        let own_pid: i32 = match tokio::time::timeout(NOTIFY_TIMEOUT, async {
            client.batch_execute(LISTEN).await?;
            client
                .query_one(include_str!("wake/sql/backend_pid.sql"), &[])
                .await
        })
        .await
        {
            Ok(Ok(row)) => row.get(0),
            Ok(Err(e)) => return (e.to_string(), false),
            Err(_) => return unanswered(),
        };
        heard.own_pid.store(own_pid, Ordering::Relaxed);
        *backoff = RECONNECT_MIN;
        tracing::info!("listening for other replicas' work");
        // Work announced while this replica was not listening: look again now.
        for kind in Kind::ALL {
            self.signal.wake_from_peer(kind);
        }
        // An idle LISTEN on a dead socket would otherwise be noticed only by TCP keepalive.
        let mut probe = tokio::time::interval(IDLE_PROBE);
        probe.tick().await;
        loop {
            tokio::select! {
                _ = probe.tick() => {
                    match tokio::time::timeout(NOTIFY_TIMEOUT, client.simple_query(PROBE)).await {
                        Ok(Ok(_)) => {}
                        Ok(Err(e)) => return (e.to_string(), false),
                        Err(_) => return unanswered(),
                    }
                }
                () = heard.arrived.notified() => {
                    for kind in heard.take() {
                        self.signal.wake_from_peer(kind);
                    }
                }
                kinds = self.signal.outbound() => {
                    let payload = kinds.iter().map(|k| k.as_str()).collect::<Vec<_>>().join(",");
                    let sent = tokio::time::timeout(
                        NOTIFY_TIMEOUT,
                        client.execute(NOTIFY, &[&CHANNEL, &payload]),
                    )
                    .await;
                    let failed = match sent {
                        Ok(Ok(_)) => None,
                        Ok(Err(e)) => Some((e.to_string(), false)),
                        Err(_) => Some(unanswered()),
                    };
                    if let Some(reason) = failed {
                        // Announced after the reconnect instead of lost.
                        self.signal.retry_outbound(&kinds);
                        return reason;
                    }
                }
                reason = &mut ended => return (reason.unwrap_or_else(|_| "the connection's task ended".to_owned()), false),
            }
        }
    }
}

/// The kinds other replicas announced and this one has not woken yet: one bit per kind,
/// whatever arrives and however fast (a notification's payload is never kept, so a flood of
/// them — any role that can connect may NOTIFY — holds no memory here).
#[derive(Default)]
struct Heard {
    kinds: AtomicU32,
    /// This session's backend pid once known (its own notifications are not news).
    own_pid: AtomicI32,
    arrived: Notify,
}

impl Heard {
    /// Notes the known kinds of a notification's `payload` sent by backend `pid`.
    fn add(&self, pid: i32, payload: &str) {
        if pid == self.own_pid.load(Ordering::Relaxed) {
            return;
        }
        let bits = payload
            .split(',')
            .filter_map(|k| k.parse::<Kind>().ok())
            .fold(0, |bits, kind| bits | bit(kind));
        if bits != 0 {
            self.kinds.fetch_or(bits, Ordering::AcqRel);
            self.arrived.notify_one();
        }
    }

    /// The kinds noted since the last take, each once.
    fn take(&self) -> Vec<Kind> {
        let bits = self.kinds.swap(0, Ordering::AcqRel);
        Kind::ALL
            .into_iter()
            .filter(|&k| bits & bit(k) != 0)
            .collect()
    }
}

fn bit(kind: Kind) -> u32 {
    let place = Kind::ALL.iter().position(|&k| k == kind).unwrap_or(0);
    1 << place
}

#[cfg(test)]
mod tests {
    use muster_domain::Kind;

    use super::Heard;

    #[test]
    fn a_peers_notification_is_taken_as_each_kind_it_names_once() {
        let heard = Heard::default();
        heard.add(7, "sextant,trawl,sextant,no-such-kind");
        assert_eq!(heard.take(), vec![Kind::Trawl, Kind::Sextant]);
    }

    #[test]
    fn kinds_are_taken_once() {
        let heard = Heard::default();
        heard.add(7, "trawl");
        heard.take();
        assert_eq!(heard.take(), Vec::<Kind>::new());
    }

    #[test]
    fn the_replicas_own_notifications_are_not_news() {
        let heard = Heard::default();
        heard.own_pid.store(7, std::sync::atomic::Ordering::Relaxed);
        heard.add(7, "trawl");
        assert_eq!(heard.take(), Vec::<Kind>::new());
    }

    #[test]
    fn a_flood_of_large_notifications_naming_one_kind_wakes_it_once() {
        let heard = Heard::default();
        let junk = format!("{},trawl", "x".repeat(7_990));
        for pid in 0..10_000 {
            heard.add(100 + pid, &junk);
        }
        assert_eq!(heard.take(), vec![Kind::Trawl]);
    }

    #[test]
    fn the_listen_statement_names_the_channel_notifications_are_sent_on() {
        assert_eq!(super::LISTEN.trim(), format!("LISTEN {}", super::CHANNEL));
    }
}
