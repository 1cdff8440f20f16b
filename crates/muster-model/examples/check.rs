//! Checks one configuration of the lease model and prints what it found, for exploring bounds
//! beyond the test's (`docs/lease-model.md`):
//!
//! ```text
//! cargo run --release -p muster-model --example check -- ITEMS WORKERS MAX_TIME MAX_LEASES [THREADS]
//! ```

use std::process::ExitCode;
use std::time::Instant;

use muster_model::{Config, LeaseModel};
use stateright::{Checker, Expectation, Model};

fn main() -> ExitCode {
    let args: Result<Vec<u8>, _> = std::env::args().skip(1).map(|a| a.parse()).collect();
    let (config, threads) = match args.as_deref() {
        Ok([items, workers, max_time, max_leases, rest @ ..]) if rest.len() <= 1 => (
            Config {
                items: *items,
                workers: *workers,
                max_time: *max_time,
                max_leases: *max_leases,
                ..Config::default()
            },
            rest.first().copied().unwrap_or(1),
        ),
        _ => {
            eprintln!("usage: check ITEMS WORKERS MAX_TIME MAX_LEASES [THREADS]");
            return ExitCode::from(2);
        }
    };
    let started = Instant::now();
    let checker = LeaseModel::new(config)
        .checker()
        .threads(usize::from(threads))
        .spawn_bfs()
        .join();
    println!(
        "{config:?}\n{} unique states ({} generated, depth {}) in {:.2?}",
        checker.unique_state_count(),
        checker.state_count(),
        checker.max_depth(),
        started.elapsed()
    );
    let mut ok = true;
    for p in checker.model().properties() {
        let found = checker.discovery(p.name);
        let verdict = match (&p.expectation, &found) {
            (Expectation::Sometimes, Some(_)) => "reached",
            (Expectation::Sometimes, None) => "not reached",
            (_, None) => "holds",
            (_, Some(_)) => {
                ok = false;
                "VIOLATED"
            }
        };
        println!("  {verdict:>11}  {}", p.name);
        if let (Expectation::Always, Some(path)) = (&p.expectation, found) {
            println!("{path}");
        }
    }
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
