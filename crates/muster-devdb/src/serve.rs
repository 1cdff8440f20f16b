//! The `muster` binary on a throwaway cluster, as the local runs (`cargo xtask`, the benchmark
//! lab) start it: a database migrated by `muster migrate`, the URL `muster serve` connects
//! with (the runtime role), and waiting until the server answers `/healthz`.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::{DevDbError, Probe, Proc, RUNTIME_ROLE, SUPERUSER, TempCluster, step, wait_for_200};

/// `muster migrate` of the database at `url`, with only its warnings logged.
pub fn migrate(muster: &Path, url: &str) -> Result<(), DevDbError> {
    step(
        "muster migrate",
        Command::new(muster)
            .args(["migrate", "--database-url", url, "--log-format", "pretty"])
            .env("RUST_LOG", "warn"),
    )
}

/// Creates database `name` in `cluster`, migrates it with [`migrate`] and gives the runtime
/// role a login; answers the database's URL as the superuser (`serve` connects with
/// [`runtime_url`] of it).
pub fn migrated_database(
    cluster: &TempCluster,
    muster: &Path,
    name: &str,
) -> Result<String, DevDbError> {
    let url = cluster.create_database(name)?;
    migrate(muster, &url)?;
    cluster.login_as(&url, RUNTIME_ROLE)?;
    Ok(url)
}

/// A URL of a throwaway cluster (the superuser's) as the runtime role, for `muster serve`.
pub fn runtime_url(url: &str) -> String {
    url.replacen(
        &format!("://{SUPERUSER}@"),
        &format!("://{RUNTIME_ROLE}@"),
        1,
    )
}

/// Waits for `GET /healthz` of the server on `addr` (`host:port`) to answer 200, for 30 s at
/// most; fails as soon as `server` exits, naming its log.
pub fn wait_healthy(addr: &str, server: &mut Proc, log: &Path) -> Result<(), DevDbError> {
    let probe = Probe::healthz(Duration::from_millis(50));
    match wait_for_200(addr, &probe, server, Instant::now()) {
        Ok(_) => Ok(()),
        Err(error) => Err(DevDbError::Unhealthy {
            addr: addr.to_owned(),
            log: log.display().to_string(),
            source: Box::new(error),
        }),
    }
}
