//! Which Logbook host a new connection goes to, and how long it may take to get there.
//!
//! A multi-host URL with `target_session_attrs=read-write` names a primary and its standbys.
//! tokio-postgres alone tries the hosts in URL order, each within the connect timeout, which
//! after a failover spends that timeout on the dead primary for every new connection, and
//! bounds only the TCP connect: a host that accepts the connection and never answers the
//! startup (a frozen primary) holds the attempt for good. Here, instead:
//!
//! - the host that last answered read-write is tried first;
//! - a host that just failed (a connect that failed or timed out, or a connection to it that
//!   stopped answering) is *suspect* for [`SUSPECT_FOR`]: tried after the others, within
//!   [`SUSPECT_CONNECT`] instead of the connect timeout;
//! - every attempt is bounded as a whole (TCP connect, TLS, startup, the read-write check);
//! - a host that let a round trip or a connect go unanswered has its other pooled connections
//!   closed at once: they lead to the same silent server, and a request on one would wait out
//!   its own deadline (a read outside a transaction would wait for TCP's limits).
//!
//! A connection knows its host through its task: the adapter discards a connection (aborting
//! its task) only when it stopped answering (`logbook/tx.rs`), so a task aborted while the
//! connection was still open marks its host. (Dropping the pool aborts every task as well:
//! that marks hosts of a pool that is gone, which nothing reads.)
//!
//! With a single host there is nothing to choose: it is always tried, within the connect
//! timeout.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use deadpool_postgres::Connect;
use futures_util::future::BoxFuture;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_postgres::config::Host;
use tokio_postgres::{Client, Config};

use crate::tls::MakeRustls;

/// A connection to Logbook as the driver makes it with the URL's TLS.
pub(crate) type Connection = tokio_postgres::Connection<
    tokio_postgres::Socket,
    <MakeRustls as tokio_postgres::tls::MakeTlsConnect<tokio_postgres::Socket>>::Stream,
>;

/// How long a host that failed stays suspect (tried last, within [`SUSPECT_CONNECT`]).
pub const SUSPECT_FOR: Duration = Duration::from_secs(10);

/// The connect budget of a suspect host while another host remains: a live server on the
/// same network accepts, authenticates and answers the read-write check in milliseconds.
pub const SUSPECT_CONNECT: Duration = Duration::from_millis(500);

/// What is remembered about the hosts of one URL, shared by every connection of a pool.
pub(crate) struct HostBook {
    /// One configuration per host, in URL order, each with every setting of the URL.
    hosts: Vec<Config>,
    /// The whole-attempt budget of a host that is not suspect.
    connect_timeout: Duration,
    state: Mutex<State>,
    /// Per host: bumped when the host stops answering; its connections end on a bump.
    silences: Vec<watch::Sender<u64>>,
}

#[derive(Debug, Default)]
struct State {
    /// The host that last answered read-write (or, without `target_session_attrs`, at all).
    preferred: Option<usize>,
    /// Per host: suspect until then.
    suspect_until: Vec<Option<Instant>>,
}

/// Why a host is marked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Failure {
    /// It answered with a refusal (connection refused, an error): tried last for a while.
    Refused,
    /// It let a connect or a round trip go unanswered: also its open connections are closed.
    Silent,
}

impl HostBook {
    pub(crate) fn new(all: &Config, connect_timeout: Duration) -> HostBook {
        let n = all.get_hosts().len().max(all.get_hostaddrs().len());
        let hosts: Vec<Config> = if n <= 1 {
            vec![all.clone()]
        } else {
            (0..n).map(|i| one_host(all, i)).collect()
        };
        let silences = hosts.iter().map(|_| watch::Sender::new(0)).collect();
        HostBook {
            state: Mutex::new(State {
                preferred: None,
                suspect_until: vec![None; hosts.len()],
            }),
            hosts,
            connect_timeout,
            silences,
        }
    }

    /// The hosts in the order to try them now, each with its budget: the preferred host
    /// first, then URL order, suspect hosts last (within [`SUSPECT_CONNECT`]).
    pub(crate) fn order(&self, now: Instant) -> Vec<(usize, Duration)> {
        let state = self.state.lock().expect("host book lock");
        let multi = self.hosts.len() > 1;
        let mut order: Vec<(bool, bool, usize)> = (0..self.hosts.len())
            .map(|i| {
                let suspect = multi && state.suspect_until[i].is_some_and(|until| now < until);
                (suspect, state.preferred != Some(i), i)
            })
            .collect();
        order.sort_unstable();
        order
            .into_iter()
            .map(|(suspect, _, i)| {
                let budget = if suspect {
                    SUSPECT_CONNECT.min(self.connect_timeout)
                } else {
                    self.connect_timeout
                };
                (i, budget)
            })
            .collect()
    }

    fn answered(&self, host: usize) {
        let mut state = self.state.lock().expect("host book lock");
        state.preferred = Some(host);
        state.suspect_until[host] = None;
    }

    fn failed(&self, host: usize, how: Failure) {
        {
            let mut state = self.state.lock().expect("host book lock");
            state.suspect_until[host] = Some(Instant::now() + SUSPECT_FOR);
        }
        if how == Failure::Silent {
            self.silences[host].send_modify(|n| *n += 1);
        }
    }

    /// Marks `host` as having stopped answering: tried last for a while, its connections
    /// closed.
    pub(crate) fn went_silent(&self, host: usize) {
        self.failed(host, Failure::Silent);
    }

    /// Opens a connection to the first host that takes it, in [`HostBook::order`]: the client,
    /// its connection (to be driven by the caller) and the host's index.
    pub(crate) async fn open(
        &self,
        tls: &MakeRustls,
    ) -> Result<(Client, Connection, usize), tokio_postgres::Error> {
        let mut last = None;
        for (host, budget) in self.order(Instant::now()) {
            let mut config = self.hosts[host].clone();
            config.connect_timeout(budget);
            match tokio::time::timeout(budget, config.connect(tls.clone())).await {
                Ok(Ok((client, connection))) => {
                    self.answered(host);
                    return Ok((client, connection, host));
                }
                Ok(Err(e)) => {
                    // A standby that refuses writes answered: it is alive, just not the one.
                    if !is_read_only_refusal(&e) {
                        self.failed(host, Failure::Refused);
                    }
                    tracing::debug!(host, error = %crate::error::describe(&e), "Logbook host not taken");
                    last = Some(e);
                }
                Err(_) => {
                    self.failed(host, Failure::Silent);
                    tracing::debug!(
                        host,
                        budget_ms = budget.as_millis() as u64,
                        "Logbook host did not answer the connect in time"
                    );
                    // The driver's own "timeout waiting for server" (it has no public
                    // constructor for one): classified unavailable, answered 503.
                    last = Some(tokio_postgres::Error::__private_api_timeout());
                }
            }
        }
        Err(last.unwrap_or_else(tokio_postgres::Error::__private_api_timeout))
    }

    /// Drives `connection` on a task of its own until it ends, or until its host goes silent.
    fn drive(self: &Arc<Self>, host: usize, connection: Connection) -> JoinHandle<()> {
        let mut silence = self.silences[host].subscribe();
        silence.mark_unchanged();
        let mark = AbortMark {
            book: Arc::clone(self),
            host,
            armed: true,
        };
        tokio::spawn(async move {
            // The whole guard moves into the task (not just the field it writes): aborting the
            // task drops it armed.
            let mut mark = mark;
            tokio::select! {
                ended = connection => {
                    if let Err(e) = ended {
                        tracing::debug!(host, error = %e, "Logbook connection ended");
                    }
                }
                _ = silence.changed() => {
                    tracing::debug!(host, "closing a connection to a Logbook host that stopped answering");
                }
            }
            mark.disarm();
        })
    }
}

/// Marks its host silent when its task is aborted with the connection still open: the adapter
/// discarded the connection because it stopped answering.
struct AbortMark {
    book: Arc<HostBook>,
    host: usize,
    armed: bool,
}

impl AbortMark {
    fn disarm(&mut self) {
        self.armed = false;
    }
}

impl Drop for AbortMark {
    fn drop(&mut self) {
        if self.armed {
            self.book.went_silent(self.host);
        }
    }
}

/// The driver's answer when `target_session_attrs=read-write` meets a read-only server.
fn is_read_only_refusal(e: &tokio_postgres::Error) -> bool {
    std::error::Error::source(e)
        .and_then(|s| s.downcast_ref::<std::io::Error>())
        .is_some_and(|io| io.kind() == std::io::ErrorKind::PermissionDenied)
}

/// Host `i` of a multi-host configuration, with every other setting of it.
fn one_host(all: &Config, i: usize) -> Config {
    let mut c = Config::new();
    if let Some(v) = all.get_user() {
        c.user(v);
    }
    if let Some(v) = all.get_password() {
        c.password(v);
    }
    if let Some(v) = all.get_dbname() {
        c.dbname(v);
    }
    if let Some(v) = all.get_options() {
        c.options(v);
    }
    if let Some(v) = all.get_application_name() {
        c.application_name(v);
    }
    c.ssl_mode(all.get_ssl_mode());
    c.ssl_negotiation(all.get_ssl_negotiation());
    match all.get_hosts().get(i) {
        Some(Host::Tcp(h)) => {
            c.host(h);
        }
        Some(Host::Unix(p)) => {
            c.host_path(p);
        }
        None => {}
    }
    if let Some(a) = all.get_hostaddrs().get(i) {
        c.hostaddr(*a);
    }
    // One port for every host, or one per host (libpq's rule).
    match all.get_ports() {
        [one] => {
            c.port(*one);
        }
        ports => {
            if let Some(p) = ports.get(i) {
                c.port(*p);
            }
        }
    }
    if let Some(t) = all.get_connect_timeout() {
        c.connect_timeout(*t);
    }
    if let Some(t) = all.get_tcp_user_timeout() {
        c.tcp_user_timeout(*t);
    }
    c.keepalives(all.get_keepalives());
    c.keepalives_idle(all.get_keepalives_idle());
    if let Some(v) = all.get_keepalives_interval() {
        c.keepalives_interval(v);
    }
    if let Some(v) = all.get_keepalives_retries() {
        c.keepalives_retries(v);
    }
    c.target_session_attrs(all.get_target_session_attrs());
    c.channel_binding(all.get_channel_binding());
    c
}

/// The pool's way to a new connection: [`HostBook::open`] with the URL's TLS, the connection
/// driven by a task that marks its host when it is discarded.
pub(crate) struct OrderedConnect {
    pub(crate) book: Arc<HostBook>,
    pub(crate) tls: MakeRustls,
}

impl Connect for OrderedConnect {
    fn connect(
        &self,
        _all_hosts: &Config,
    ) -> BoxFuture<'_, Result<(Client, JoinHandle<()>), tokio_postgres::Error>> {
        Box::pin(async move {
            let (client, connection, host) = self.book.open(&self.tls).await?;
            Ok((client, self.book.drive(host, connection)))
        })
    }
}

#[cfg(test)]
mod tests;
