//! The hosts of `cargo xtask chaos --network`: one network namespace per host (Logbook's
//! primary and its synchronous standby, two Muster replicas, the fleet), each with its own
//! address on a bridge that lives in a namespace of its own, and one veth from this task's
//! namespace to that bridge for the task's own probes and `psql`. Faults are iptables rules
//! inside a host's namespace; a dead host is one whose every packet is dropped and whose
//! processes are SIGKILLed.
//!
//! Everything the lab creates carries its prefix (`mc<pid>`) and is removed by one shell script
//! ([`CLEANUP_SCRIPT`]): run at once when the lab is dropped, and by a watchdog when this task
//! dies without dropping it (SIGKILL, Ctrl-C). Test traffic goes only to the lab's addresses.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use muster_devdb::{SUPERUSER, find_bin, psql, psql_query};

/// The lab's /24: chosen from the private range, refused when the machine already uses it.
const SUBNET: &str = "10.231.7";

/// PostgreSQL's port on both database hosts; Muster's on both replicas.
pub(super) const PG_PORT: u16 = 5432;
pub(super) const MUSTER_PORT: u16 = 8080;

/// Settings of both PostgreSQL servers (the standby keeps them after its promotion). The
/// synchronous standby is named at run time with `ALTER SYSTEM` on the primary only, once the
/// standby streams: a file setting would be copied to the standby and make the promoted server
/// wait for a standby that never comes.
const PG_SETTINGS: &[&str] = &[
    "fsync=on",
    "max_connections=200",
    "wal_level=replica",
    "max_wal_senders=4",
    "hot_standby=on",
    "shared_buffers=64MB",
];

/// Removes the lab: `$1` = pid to wait for (0: at once), `$2` = namespace prefix, `$3` = the
/// task-side veth, `$4` = the lab's directory. Processes left in a namespace are SIGKILLed
/// first (a namespace with processes would outlive `ip netns del`).
const CLEANUP_SCRIPT: &str = r#"trap '' INT HUP TERM
if [ "$1" != 0 ]; then while kill -0 "$1" 2>/dev/null; do sleep 1; done; fi
for ns in $(ip netns list | cut -d' ' -f1); do
  case "$ns" in
    "$2"-*)
      for p in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$p" 2>/dev/null; done
      ip netns del "$ns" 2>/dev/null ;;
  esac
done
ip link del "$3" 2>/dev/null
rm -rf "$4"
exit 0
"#;

/// A host of the lab.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Host {
    Pg1,
    Pg2,
    M0,
    M1,
    Fleet,
}

impl Host {
    const ALL: [Host; 5] = [Host::Pg1, Host::Pg2, Host::M0, Host::M1, Host::Fleet];

    fn name(self) -> &'static str {
        match self {
            Host::Pg1 => "pg1",
            Host::Pg2 => "pg2",
            Host::M0 => "m0",
            Host::M1 => "m1",
            Host::Fleet => "fleet",
        }
    }

    /// The host's address.
    pub(super) fn ip(self) -> String {
        let last = match self {
            Host::Pg1 => 11,
            Host::Pg2 => 12,
            Host::M0 => 21,
            Host::M1 => 22,
            Host::Fleet => 31,
        };
        format!("{SUBNET}.{last}")
    }

    /// The Muster replica host with index `i` (0 or 1).
    pub(super) fn replica(i: usize) -> Host {
        if i == 0 { Host::M0 } else { Host::M1 }
    }
}

/// The running lab.
pub(super) struct Lab {
    prefix: String,
    ctl: String,
    dir: PathBuf,
    logs: PathBuf,
    pg_bin: PathBuf,
    watchdog: Option<Child>,
    /// The database host that takes writes now.
    pub(super) primary: Host,
}

impl Lab {
    /// Creates the hosts and their links, starts the primary and its synchronous standby and
    /// waits until the standby confirms commits. `tag` makes the names unique within this task;
    /// PostgreSQL's logs are copied to `logs` when the lab is dropped.
    pub(super) fn start(tag: usize, logs: &Path) -> Result<Lab> {
        if run(Command::new("id").arg("-u"))?.trim() != "0" {
            bail!("chaos --network creates network namespaces: it must run as root");
        }
        for tool in ["ip", "iptables", "runuser"] {
            if !Command::new("sh")
                .args(["-c", &format!("command -v {tool}")])
                .stdout(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
            {
                bail!("chaos --network needs `{tool}` (Debian: iproute2, iptables, util-linux)");
            }
        }
        let in_use = run(Command::new("ip").args(["-o", "addr"]))?;
        if in_use.contains(&format!(" {SUBNET}.")) {
            bail!(
                "{SUBNET}.0/24 is already in use on this machine (`ip -o addr`); the lab needs it"
            );
        }
        let initdb = find_bin("initdb").context("initdb not found")?;
        let pg_bin = initdb.parent().context("initdb's directory")?.to_owned();
        let prefix = format!("mc{}{tag}", std::process::id());
        let dir = std::env::temp_dir().join(format!("muster-{prefix}"));
        let mut lab = Lab {
            ctl: format!("{prefix}c"),
            prefix,
            dir,
            logs: logs.to_owned(),
            pg_bin,
            watchdog: None,
            primary: Host::Pg1,
        };
        lab.watchdog = Some(
            Command::new("/bin/sh")
                .args(["-c", CLEANUP_SCRIPT, "muster-netlab-reaper"])
                .arg(std::process::id().to_string())
                .args([&lab.prefix, &lab.ctl])
                .arg(&lab.dir)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .context("spawn the lab's watchdog")?,
        );
        fs::create_dir_all(&lab.dir)?;
        fs::set_permissions(&lab.dir, fs::Permissions::from_mode(0o755))?;
        lab.wire()?;
        lab.start_databases()?;
        Ok(lab)
    }

    fn ns(&self, host: Host) -> String {
        format!("{}-{}", self.prefix, host.name())
    }

    /// The bridge and one veth per host, plus this task's own veth (`.1`).
    fn wire(&self) -> Result<()> {
        let sw = format!("{}-sw", self.prefix);
        ip(&["netns", "add", &sw])?;
        ip(&["-n", &sw, "link", "add", "br0", "type", "bridge"])?;
        ip(&["-n", &sw, "link", "set", "br0", "up"])?;
        let attach = |port: &str| ip(&["-n", &sw, "link", "set", port, "master", "br0", "up"]);
        for host in Host::ALL {
            let ns = self.ns(host);
            let port = format!("p-{}", host.name());
            ip(&["netns", "add", &ns])?;
            ip(&[
                "link", "add", "eth0", "netns", &ns, "type", "veth", "peer", "name", &port,
                "netns", &sw,
            ])?;
            attach(&port)?;
            ip(&[
                "-n",
                &ns,
                "addr",
                "add",
                &format!("{}/24", host.ip()),
                "dev",
                "eth0",
            ])?;
            ip(&["-n", &ns, "link", "set", "eth0", "up"])?;
            ip(&["-n", &ns, "link", "set", "lo", "up"])?;
        }
        ip(&[
            "link", "add", &self.ctl, "type", "veth", "peer", "name", "p-ctl", "netns", &sw,
        ])?;
        attach("p-ctl")?;
        ip(&["addr", "add", &format!("{SUBNET}.1/24"), "dev", &self.ctl])?;
        ip(&["link", "set", &self.ctl, "up"])?;
        Ok(())
    }

    /// `program` run on `host` (`ip netns exec`, which execs it: the pid is the program's).
    pub(super) fn command(&self, host: Host, program: &Path) -> Command {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.ns(host)]).arg(program);
        cmd
    }

    /// A PostgreSQL program run on `host` as the `postgres` account.
    fn pg(&self, host: Host, program: &str) -> Command {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.ns(host)])
            .args(["runuser", "-u", "postgres", "--"])
            .arg(find_bin(program).unwrap_or_else(|| self.pg_bin.join(program)))
            .current_dir(&self.dir)
            .stdin(Stdio::null());
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with("PG") {
                cmd.env_remove(key);
            }
        }
        cmd
    }

    fn data_dir(&self, host: Host) -> PathBuf {
        self.dir.join(host.name()).join("data")
    }

    fn log_path(&self, host: Host) -> PathBuf {
        self.dir.join(host.name()).join("server.log")
    }

    fn pg_ctl_start(&self, host: Host) -> Result<()> {
        let mut options = format!(
            "-c listen_addresses={} -c port={PG_PORT} -c unix_socket_directories={}",
            host.ip(),
            self.dir.join(host.name()).display()
        );
        for s in PG_SETTINGS {
            options.push_str(" -c ");
            options.push_str(s);
        }
        run(self
            .pg(host, "pg_ctl")
            .arg("-D")
            .arg(self.data_dir(host))
            .arg("-l")
            .arg(self.log_path(host))
            .args(["-w", "-t", "60", "-o", &options, "start"]))
        .with_context(|| format!("start PostgreSQL on {}", host.name()))?;
        Ok(())
    }

    /// The primary (initdb, trust for the lab's subnet), a standby from `pg_basebackup`, and
    /// the standby named synchronous once it streams.
    fn start_databases(&self) -> Result<()> {
        for host in [Host::Pg1, Host::Pg2] {
            let home = self.dir.join(host.name());
            fs::create_dir_all(&home)?;
            run(Command::new("chown").args(["postgres:postgres"]).arg(&home))?;
        }
        run(self
            .pg(Host::Pg1, "initdb")
            .arg("-D")
            .arg(self.data_dir(Host::Pg1))
            .args(["-U", SUPERUSER, "--auth=trust", "-E", "UTF8", "--no-sync"]))
        .context("initdb")?;
        let hba = self.data_dir(Host::Pg1).join("pg_hba.conf");
        let mut rules = fs::read_to_string(&hba)?;
        rules.push_str(&format!(
            "host all all {SUBNET}.0/24 trust\nhost replication all {SUBNET}.0/24 trust\n"
        ));
        fs::write(&hba, rules)?;
        self.pg_ctl_start(Host::Pg1)?;
        run(self
            .pg(Host::Pg2, "pg_basebackup")
            .args(["-h", &Host::Pg1.ip(), "-p", &PG_PORT.to_string()])
            .args(["-U", SUPERUSER, "-R", "-X", "stream", "-c", "fast", "-D"])
            .arg(self.data_dir(Host::Pg2)))
        .context("pg_basebackup of the standby")?;
        self.pg_ctl_start(Host::Pg2)?;
        let primary = self.superuser_url(Host::Pg1, "postgres");
        wait_until(Duration::from_secs(30), "the standby streams", || {
            psql_query(
                &primary,
                "select count(*) from pg_stat_replication where state = 'streaming'",
            )
            .is_ok_and(|n| n == "1")
        })?;
        psql(&primary, "alter system set synchronous_standby_names = '*'")?;
        psql(&primary, "select pg_reload_conf()")?;
        wait_until(
            Duration::from_secs(30),
            "the standby is synchronous",
            || {
                psql_query(&primary, "select sync_state from pg_stat_replication")
                    .is_ok_and(|s| s == "sync")
            },
        )?;
        Ok(())
    }

    /// A superuser URL of one database host, for this task (`psql`, `muster migrate`).
    pub(super) fn superuser_url(&self, host: Host, database: &str) -> String {
        format!(
            "postgresql://{SUPERUSER}@{}:{PG_PORT}/{database}?connect_timeout=3",
            host.ip()
        )
    }

    /// The URL Muster is configured with: both hosts, the one that takes writes wins.
    pub(super) fn muster_url(&self, role: &str, database: &str) -> String {
        format!(
            "postgresql://{role}@{}:{PG_PORT},{}:{PG_PORT}/{database}?target_session_attrs=read-write&sslmode=disable",
            Host::Pg1.ip(),
            Host::Pg2.ip()
        )
    }

    /// Appends iptables rules on `host` (e.g. `["-A", "INPUT", "-s", ip, "-j", "DROP"]`).
    pub(super) fn iptables(&self, host: Host, rules: &[&[&str]]) -> Result<()> {
        for rule in rules {
            run(Command::new("ip")
                .args(["netns", "exec", &self.ns(host), "iptables", "-w"])
                .args(*rule))
            .with_context(|| format!("iptables {} on {}", rule.join(" "), host.name()))?;
        }
        Ok(())
    }

    /// Drops every packet between `host` and `peer`, both ways: connections hang, none fails.
    pub(super) fn cut(&self, host: Host, peer: Host) -> Result<()> {
        let peer = peer.ip();
        self.iptables(
            host,
            &[
                &["-A", "INPUT", "-s", &peer, "-j", "DROP"],
                &["-A", "OUTPUT", "-d", &peer, "-j", "DROP"],
            ],
        )
    }

    /// Drops what `host` receives from `peer`; what it sends still arrives.
    pub(super) fn cut_incoming(&self, host: Host, peer: Host) -> Result<()> {
        self.iptables(host, &[&["-A", "INPUT", "-s", &peer.ip(), "-j", "DROP"]])
    }

    /// Drops what `host` receives from `peer` over TCP that contains `text` (e.g. `COMMIT`, the
    /// tag of a COMMIT's CommandComplete): that answer and every retransmission of it.
    pub(super) fn drop_answers(&self, host: Host, peer: Host, text: &str) -> Result<()> {
        self.iptables(
            host,
            &[&[
                "-A",
                "INPUT",
                "-s",
                &peer.ip(),
                "-p",
                "tcp",
                "-m",
                "string",
                "--algo",
                "bm",
                "--string",
                text,
                "-j",
                "DROP",
            ]],
        )
    }

    /// Removes every rule on `host`.
    pub(super) fn heal(&self, host: Host) -> Result<()> {
        self.iptables(host, &[&["-F", "INPUT"], &["-F", "OUTPUT"]])
    }

    /// The host dies: every packet on its link dropped, then its processes SIGKILLed.
    pub(super) fn kill_host(&self, host: Host) -> Result<()> {
        self.iptables(
            host,
            &[
                &["-A", "INPUT", "-i", "eth0", "-j", "DROP"],
                &["-A", "OUTPUT", "-o", "eth0", "-j", "DROP"],
            ],
        )?;
        let pids = run(Command::new("ip").args(["netns", "pids", &self.ns(host)]))?;
        for pid in pids.split_whitespace() {
            let _ = Command::new("kill").args(["-KILL", pid]).status();
        }
        Ok(())
    }

    /// The host freezes: its processes are SIGSTOPped (they stay stopped; the lab's cleanup
    /// SIGKILLs them). The link stays up and the kernel still completes TCP handshakes and
    /// acknowledges every packet, so neither keep-alives nor `TCP_USER_TIMEOUT` find it: only
    /// the client's own deadlines do.
    pub(super) fn freeze_host(&self, host: Host) -> Result<()> {
        let pids = run(Command::new("ip").args(["netns", "pids", &self.ns(host)]))?;
        for pid in pids.split_whitespace() {
            let _ = Command::new("kill").args(["-STOP", pid]).status();
        }
        Ok(())
    }

    /// Promotes the standby (`pg_ctl promote`, as the operators' tools do) and waits until it
    /// takes writes.
    pub(super) fn promote(&mut self, host: Host) -> Result<()> {
        run(self
            .pg(host, "pg_ctl")
            .arg("-D")
            .arg(self.data_dir(host))
            .args(["-w", "-t", "60", "promote"]))
        .with_context(|| format!("promote {}", host.name()))?;
        self.primary = host;
        Ok(())
    }

    fn clean_up(&mut self) {
        for host in [Host::Pg1, Host::Pg2] {
            let _ = fs::copy(
                self.log_path(host),
                self.logs.join(format!("postgres-{}.log", host.name())),
            );
        }
        let _ = Command::new("/bin/sh")
            .args(["-c", CLEANUP_SCRIPT, "muster-netlab-cleanup", "0"])
            .args([&self.prefix, &self.ctl])
            .arg(&self.dir)
            .stdin(Stdio::null())
            .status();
        if let Some(mut watchdog) = self.watchdog.take() {
            let _ = watchdog.kill();
            let _ = watchdog.wait();
        }
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        self.clean_up();
    }
}

fn ip(args: &[&str]) -> Result<()> {
    run(Command::new("ip").args(args)).map(drop)
}

/// Runs `cmd`; its stdout, or an error with its stderr.
fn run(cmd: &mut Command) -> Result<String> {
    let out: Output = cmd
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("run {cmd:?}"))?;
    if !out.status.success() {
        bail!(
            "{cmd:?} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn wait_until(within: Duration, what: &str, mut ok: impl FnMut() -> bool) -> Result<()> {
    let until = Instant::now() + within;
    while Instant::now() < until {
        if ok() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    bail!("{what}: not within {} s", within.as_secs())
}
