//! What `/proc` tells of a process on this machine: its memory (`VmHWM`, `VmRSS`) and the CPU
//! time it has used. The scenarios read the server's this way (its pid given), the feed-load
//! scenario also its own (`self`).

use std::fmt::Display;

use anyhow::{Context, Result};

use crate::results::Memory;

/// `(VmHWM, VmRSS)` of a process in MiB.
pub(crate) fn memory(pid: u32) -> Result<Memory> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("read /proc/{pid}/status"))?;
    let mib = |name: &str| {
        status_kib(&status, name)
            .map(|kib| kib / 1024.0)
            .with_context(|| format!("no {name} in /proc/{pid}/status"))
    };
    Ok(Memory {
        hwm_mib: mib("VmHWM:")?,
        rss_mib: mib("VmRSS:")?,
    })
}

/// `VmRSS` of a process in MiB to one decimal, `None` without a pid or when it cannot be read.
pub(crate) fn rss_mib(pid: Option<u32>) -> Option<f64> {
    let rss = memory(pid?).ok()?.rss_mib;
    Some((rss * 10.0).round() / 10.0)
}

/// The KiB of the field `name` (e.g. `VmRSS:`) of a `/proc/<pid>/status` text.
fn status_kib(status: &str, name: &str) -> Option<f64> {
    let line = status.lines().find(|l| l.starts_with(name))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// CPU seconds (user + system) the process `pid` (a number, or `self`) has used.
pub(crate) fn cpu_seconds(pid: impl Display, ticks_per_s: f64) -> Result<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .with_context(|| format!("read /proc/{pid}/stat"))?;
    let ticks = cpu_ticks(&stat).with_context(|| format!("malformed /proc/{pid}/stat"))?;
    Ok(ticks as f64 / ticks_per_s)
}

/// utime + stime (fields 14 and 15) of a `/proc/<pid>/stat` line. The command name in field 2
/// may hold spaces and parentheses, so the fields are counted after its last `)`.
fn cpu_ticks(stat: &str) -> Option<u64> {
    let (_, rest) = stat.rsplit_once(')')?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // `rest` starts at field 3 (state): utime is field 14, index 11 here.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}

/// Clock ticks per second (`getconf CLK_TCK`; 100, Linux's, when that cannot be asked).
pub(crate) fn ticks_per_second() -> f64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
        .unwrap_or(100.0)
}

#[cfg(test)]
mod tests {
    use super::{cpu_ticks, status_kib};

    #[test]
    fn cpu_ticks_add_user_and_system_time_after_a_command_name_with_spaces() {
        let stat = "4242 (tokio rt) worker) S 1 4242 4242 0 -1 4194560 1200 0 0 0 \
                    731 212 0 0 20 0 3 0 100 0 0";
        assert_eq!(cpu_ticks(stat), Some(943));
    }

    #[test]
    fn a_truncated_stat_line_has_no_cpu_ticks() {
        assert_eq!(cpu_ticks("4242 (muster) S 1 4242"), None);
    }

    #[test]
    fn status_fields_are_read_in_kib() {
        let status = "Name:\tmuster\nVmHWM:\t   15564 kB\nVmRSS:\t   15360 kB\n";
        assert_eq!(status_kib(status, "VmRSS:"), Some(15_360.0));
        assert_eq!(status_kib(status, "VmSwap:"), None);
    }

    #[test]
    fn this_process_has_memory_and_cpu_time() {
        let me = super::memory(std::process::id()).expect("our own /proc/<pid>/status");
        assert!(me.hwm_mib >= me.rss_mib && me.rss_mib > 0.0, "{me:?}");
        let cpu = super::cpu_seconds("self", super::ticks_per_second()).expect("/proc/self/stat");
        assert!(cpu >= 0.0);
    }
}
