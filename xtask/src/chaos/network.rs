//! The faults of `cargo xtask chaos --network` (hosts of their own, see `lab.rs`): a replica
//! cut from Logbook's primary with every packet dropped, the fleet cut from one replica, a
//! one-way partition that hides commits' outcomes from the replica that sent them, and the
//! primary's death or freeze with its synchronous standby promoted. While a fault lasts this task probes
//! the replica it hurts with a Logbook read (`GET /v1/items`, as the operator) and measures
//! when it first answers 503, how long an answer took at most, and how soon after the repair
//! it answers 200 again; `muster-sim check` judges the figures against the probe's limits.

use std::fs;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use muster_devdb::Probe;
use rand::rngs::StdRng;
use serde_json::{Value, json};

use super::Fault;
use super::lab::Host;
use super::run::{Run, Site};

/// A read that needs Logbook: 200 while the replica reaches it, 503 `E_UNAVAILABLE` otherwise.
const PROBE_PATH: &str = "/v1/items?state=queued&limit=1";

/// Longer than the server's request timeout (45 s): a probe without an answer within it found
/// a request that hung.
const PROBE_TIMEOUT: Duration = Duration::from_secs(50);

/// How long after a repair every probed replica must answer 200 again.
const RECOVERY_LIMIT: Duration = Duration::from_secs(90);

/// What the probes saw during one fault and after its repair.
#[derive(Debug, Clone, Default)]
pub(super) struct NetFigures {
    /// The replicas probed (`m0`, `m1`).
    pub(super) probed: String,
    /// From the fault to the first 503 of the probed replica.
    pub(super) unavailable_after_ms: Option<f64>,
    /// The longest any probe waited for its answer during the fault.
    pub(super) longest_answer_ms: f64,
    /// Probes during the fault: answered 200, answered 503.
    pub(super) answered_200: u32,
    pub(super) answered_503: u32,
    /// From the repair (heal, promotion) until every probed replica answered 200.
    pub(super) ready_after_ms: Option<f64>,
}

impl NetFigures {
    /// The figures and the limits they are held to, as `muster-sim check --faults` reads them.
    pub(super) fn to_json(&self) -> Value {
        json!({"probed": self.probed, "unavailable_after_ms": self.unavailable_after_ms,
               "longest_answer_ms": self.longest_answer_ms,
               "answered_200": self.answered_200, "answered_503": self.answered_503,
               "ready_after_ms": self.ready_after_ms,
               "timeout_ms": ms(PROBE_TIMEOUT), "ready_within_ms": ms(RECOVERY_LIMIT)})
    }
}

impl Fault {
    /// How long the fault holds before its repair (the run's deadline allows for it).
    pub(super) fn held(self) -> Duration {
        match self {
            // Longer than the pool's dead-link limit (TCP_USER_TIMEOUT, 8 s): the replica
            // must find the dead connections by itself before the link heals.
            Fault::CutFromLogbook | Fault::OneWay | Fault::LostCommits => Duration::from_secs(12),
            Fault::CutFleet => Duration::from_secs(6),
            // The promotion and the replicas' reconnection.
            Fault::Failover | Fault::FrozenPrimary => Duration::from_secs(20),
            _ => Duration::from_secs(3),
        }
    }
}

impl Run<'_> {
    /// Injects a `--network` fault, repairs it, and answers what the probes saw.
    pub(super) fn inject_network(
        &mut self,
        fault: Fault,
        rng: &mut StdRng,
    ) -> Result<Option<NetFigures>> {
        let token = operator_token(&self.sim_tokens)?;
        let probe = Probe {
            path: PROBE_PATH,
            bearer: Some(&token),
            within: PROBE_TIMEOUT,
            every: Duration::from_millis(200),
            read_timeout: PROBE_TIMEOUT,
        };
        let live: Vec<(Host, String)> = self
            .replicas
            .iter()
            .enumerate()
            .filter(|(_, r)| !r.lost)
            .map(|(i, r)| (Host::replica(i), r.addr.clone()))
            .collect();
        let addr_of = |host: Host| {
            live.iter()
                .find(|(h, _)| *h == host)
                .map(|(_, a)| a.clone())
                .with_context(|| format!("{} needs a replica on {host:?}", fault.name()))
        };
        let Site::Net(lab) = &mut self.site else {
            bail!("{} is a fault of the --network suite", fault.name());
        };
        let primary = lab.primary;
        Ok(match fault {
            Fault::CutFromLogbook | Fault::OneWay | Fault::LostCommits => {
                let host = if fault == Fault::CutFromLogbook {
                    Host::M0
                } else {
                    Host::M1
                };
                let addr = addr_of(host)?;
                let cut = Instant::now();
                match fault {
                    Fault::CutFromLogbook => lab.cut(host, primary)?,
                    Fault::OneWay => lab.cut_incoming(host, primary)?,
                    _ => lab.drop_answers(host, primary, "COMMIT")?,
                }
                let mut figures = watch(&probe, &addr, cut, fault.held());
                lab.heal(host)?;
                figures.probed = format!("{host:?}").to_lowercase();
                figures.ready_after_ms = ready_after(&probe, &[addr], Instant::now());
                Some(figures)
            }
            Fault::CutFleet => {
                lab.cut(Host::Fleet, Host::M1)?;
                std::thread::sleep(fault.held());
                lab.heal(Host::Fleet)?;
                None
            }
            Fault::Failover | Fault::FrozenPrimary => {
                if primary != Host::Pg1 {
                    bail!("the lab has one failover: its standby was promoted already");
                }
                if fault == Fault::Failover {
                    lab.kill_host(Host::Pg1)?;
                } else {
                    lab.freeze_host(Host::Pg1)?;
                }
                // The operators' tools notice the death and promote.
                Run::pause(rng, 1_000..2_500);
                lab.promote(Host::Pg2)?;
                let promoted = Instant::now();
                self.url = lab.superuser_url(Host::Pg2, &self.db);
                let addrs: Vec<String> = live.iter().map(|(_, a)| a.clone()).collect();
                Some(NetFigures {
                    probed: live
                        .iter()
                        .map(|(h, _)| format!("{h:?}").to_lowercase())
                        .collect::<Vec<_>>()
                        .join("+"),
                    ready_after_ms: ready_after(&probe, &addrs, promoted),
                    ..NetFigures::default()
                })
            }
            _ => bail!("{} is not a network fault", fault.name()),
        })
    }
}

/// The operator's plain token from the fleet's token file.
fn operator_token(sim_tokens: &Path) -> Result<String> {
    let tokens: Value = serde_json::from_slice(&fs::read(sim_tokens)?)?;
    tokens["operator"]
        .as_str()
        .map(str::to_owned)
        .context("no operator token in the fleet's token file")
}

/// Probes `addr` until `held` has passed since `since`.
fn watch(probe: &Probe<'_>, addr: &str, since: Instant, held: Duration) -> NetFigures {
    let mut f = NetFigures::default();
    while since.elapsed() < held {
        let asked = Instant::now();
        let status = probe.status(addr);
        f.longest_answer_ms = f.longest_answer_ms.max(ms(asked.elapsed()));
        match status {
            Some(200) => f.answered_200 += 1,
            Some(503) => {
                f.answered_503 += 1;
                f.unavailable_after_ms.get_or_insert(ms(since.elapsed()));
            }
            // Anything else (or no answer) is in the servers' logs; the longest answer and the
            // clients' reports judge it.
            _ => {}
        }
        std::thread::sleep(probe.every);
    }
    f
}

/// The time from `since` until every one of `addrs` has answered 200, if within the limit.
fn ready_after(probe: &Probe<'_>, addrs: &[String], since: Instant) -> Option<f64> {
    let mut waiting: Vec<&String> = addrs.iter().collect();
    while since.elapsed() < RECOVERY_LIMIT {
        waiting.retain(|addr| probe.status(addr) != Some(200));
        if waiting.is_empty() {
            return Some(ms(since.elapsed()));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    None
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}
