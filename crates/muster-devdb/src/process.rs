//! The processes around a cluster in local runs (`cargo xtask`, the benchmark lab): a titled
//! step, `psql`, a free port, a child process that is stopped on every way out, and waiting
//! for a server's HTTP port to answer 200.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream, ToSocketAddrs};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use crate::{DevDbError, HOST, find_bin};

/// Prints `==> text` after a blank line: the title of a step in a task's output.
pub fn banner(text: &str) {
    println!("\n==> {text}");
}

/// Prints a banner, runs `cmd` and fails unless it succeeds.
pub fn step(title: &str, cmd: &mut Command) -> Result<(), DevDbError> {
    banner(title);
    let status = cmd
        .status()
        .map_err(|e| DevDbError::io(format!("could not run `{title}`"), e))?;
    if !status.success() {
        return Err(DevDbError::Step {
            title: title.to_owned(),
            status: status.to_string(),
        });
    }
    Ok(())
}

/// Runs one SQL statement with psql.
pub fn psql(url: &str, sql: &str) -> Result<(), DevDbError> {
    run_psql(url, sql, &[]).map(drop)
}

/// The answer of one SQL query with psql: its rows unaligned, fields separated by tabs, no
/// headers (`-tA -F '\t'`), without the closing line break.
pub fn psql_query(url: &str, sql: &str) -> Result<String, DevDbError> {
    run_psql(url, sql, &["-t", "-A", "-F", "\t"])
}

fn run_psql(url: &str, sql: &str, format: &[&str]) -> Result<String, DevDbError> {
    let psql = find_bin("psql").ok_or_else(|| DevDbError::BinaryNotFound("psql".into()))?;
    let output = Command::new(&psql)
        .args(["-X", "-q"])
        .args(format)
        .args(["-v", "ON_ERROR_STOP=1", "-d", url, "-c", sql])
        .stdin(Stdio::null())
        .output()
        .map_err(|e| DevDbError::io(format!("could not run {}", psql.display()), e))?;
    if !output.status.success() {
        return Err(DevDbError::Psql {
            sql: sql.to_owned(),
            status: output.status.to_string(),
            stderr: String::from_utf8_lossy(&output.stderr).trim().to_owned(),
        });
    }
    Ok(String::from_utf8_lossy(&output.stdout)
        .trim_end_matches(['\n', '\r'])
        .to_owned())
}

/// A port on 127.0.0.1 that was free a moment ago.
pub fn free_port() -> Result<u16, DevDbError> {
    let listener = TcpListener::bind((HOST, 0))
        .map_err(|e| DevDbError::io("binding 127.0.0.1:0 to find a free port", e))?;
    listener
        .local_addr()
        .map(|addr| addr.port())
        .map_err(|e| DevDbError::io("reading the free port", e))
}

/// A child process that is stopped when dropped: SIGKILLed ([`Proc::new`]), or sent SIGTERM
/// and SIGKILLed only after a grace period ([`Proc::with_grace`]).
#[derive(Debug)]
pub struct Proc {
    child: Child,
    grace_on_drop: Duration,
}

impl Proc {
    /// A process SIGKILLed when dropped while still running.
    pub fn new(child: Child) -> Proc {
        Proc::with_grace(child, Duration::ZERO)
    }

    /// A process sent SIGTERM when dropped while still running, and SIGKILLed after `grace`.
    pub fn with_grace(child: Child, grace: Duration) -> Proc {
        Proc {
            child,
            grace_on_drop: grace,
        }
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The exit status once the process has exited.
    pub fn exited(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// SIGKILL, and reap it.
    pub fn sigkill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM, then SIGKILL after `grace`; the exit status when it exited by itself.
    pub fn terminate(&mut self, grace: Duration) -> Option<ExitStatus> {
        if let Some(status) = self.exited() {
            return Some(status);
        }
        if grace.is_zero() {
            self.sigkill();
            return None;
        }
        let _ = Command::new("kill")
            .args(["-TERM", &self.pid().to_string()])
            .status();
        let until = Instant::now() + grace;
        while Instant::now() < until {
            if let Some(status) = self.exited() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        self.sigkill();
        None
    }

    /// Stops it as a drop would (see [`Proc::with_grace`]).
    pub fn stop(&mut self) {
        self.terminate(self.grace_on_drop);
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A `GET` a server is polled with until it answers 200 (see [`wait_for_200`]).
#[derive(Debug, Clone, Copy)]
pub struct Probe<'a> {
    /// The request target, e.g. `/healthz`.
    pub path: &'a str,
    /// A bearer token sent as `Authorization`, if the path needs one.
    pub bearer: Option<&'a str>,
    /// How long to keep trying.
    pub within: Duration,
    /// The pause between tries.
    pub every: Duration,
    /// How long one try waits for the answer.
    pub read_timeout: Duration,
}

impl Probe<'_> {
    /// `GET /healthz`, for 30 s, every `every`.
    pub fn healthz(every: Duration) -> Probe<'static> {
        Probe {
            path: "/healthz",
            bearer: None,
            within: Duration::from_secs(30),
            every,
            read_timeout: Duration::from_secs(2),
        }
    }

    /// Whether one `GET` to `addr` (`host:port`) answers `HTTP/1.1 200`.
    pub fn answers_200(&self, addr: &str) -> bool {
        self.status(addr) == Some(200)
    }

    /// The status code of one `GET` to `addr` (`host:port`), or `None` when no whole status
    /// line came back: no connection within [`Self::read_timeout`], or no answer within it.
    pub fn status(&self, addr: &str) -> Option<u16> {
        let target = addr.to_socket_addrs().ok()?.next()?;
        let mut s = TcpStream::connect_timeout(&target, self.read_timeout).ok()?;
        let _ = s.set_read_timeout(Some(self.read_timeout));
        let auth = self
            .bearer
            .map(|token| format!("Authorization: Bearer {token}\r\n"))
            .unwrap_or_default();
        let request = format!(
            "GET {} HTTP/1.1\r\nHost: x\r\n{auth}Connection: close\r\n\r\n",
            self.path
        );
        s.write_all(request.as_bytes()).ok()?;
        let mut answer = String::new();
        let _ = s.read_to_string(&mut answer);
        let code = answer.strip_prefix("HTTP/1.1 ")?.get(..3)?;
        code.parse().ok()
    }
}

/// Polls `addr` (`host:port`) with `probe` until it answers 200, counting from `started`:
/// the time from `started` to that answer. Fails as soon as `server` exits.
pub fn wait_for_200(
    addr: &str,
    probe: &Probe<'_>,
    server: &mut Proc,
    started: Instant,
) -> Result<Duration, DevDbError> {
    let until = started + probe.within;
    while Instant::now() < until {
        if let Some(status) = server.exited() {
            return Err(DevDbError::ExitedEarly {
                status: status.to_string(),
            });
        }
        if probe.answers_200(addr) {
            return Ok(started.elapsed());
        }
        std::thread::sleep(probe.every);
    }
    Err(DevDbError::NoAnswer {
        request: format!("GET {}", probe.path),
        seconds: probe.within.as_secs(),
    })
}
