use muster_model::{Config, LeaseModel};
use stateright::{Checker, Model};
use std::time::Instant;

fn main() {
    let args: Vec<u8> = std::env::args()
        .skip(1)
        .map(|a| a.parse().unwrap())
        .collect();
    let mut c = Config::default();
    if let [items, workers, max_time, max_leases, attempts, threads] = args[..] {
        c.items = items;
        c.workers = workers;
        c.max_time = max_time;
        c.max_leases = max_leases;
        c.max_attempts = attempts.into();
        let t = Instant::now();
        let checker = LeaseModel::new(c)
            .checker()
            .threads(threads.into())
            .spawn_bfs()
            .join();
        println!(
            "{c:?}\nunique {} total {} depth {} in {:?}",
            checker.unique_state_count(),
            checker.state_count(),
            checker.max_depth(),
            t.elapsed()
        );
        for (name, path) in checker.discoveries() {
            println!("found {name}: {} steps", path.into_actions().len());
        }
    }
}
