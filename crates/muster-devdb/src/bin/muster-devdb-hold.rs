//! Starts a throwaway cluster and holds it until killed: the owner process that the reaper test
//! kills with SIGKILL. Writes `<postmaster pid> <cluster dir>` to the file named by its argument.

use std::path::PathBuf;
use std::time::Duration;

use muster_devdb::TempCluster;

fn main() {
    let report = PathBuf::from(
        std::env::args_os()
            .nth(1)
            .expect("usage: muster-devdb-hold REPORT_FILE"),
    );
    let cluster = TempCluster::start().expect("cluster starts");
    let pid =
        std::fs::read_to_string(cluster.data_dir().join("postmaster.pid")).expect("postmaster.pid");
    let base = cluster
        .data_dir()
        .parent()
        .expect("data dir has a parent")
        .to_owned();
    let line = format!(
        "{} {}\n",
        pid.lines().next().unwrap_or_default(),
        base.display()
    );
    let partial = report.with_extension("partial");
    std::fs::write(&partial, line).expect("write the report");
    std::fs::rename(&partial, &report).expect("publish the report");
    loop {
        std::thread::sleep(Duration::from_secs(60));
    }
}
