//! `examples/echo_worker.rs` built as a binary: integration tests get a binary's path from
//! Cargo (`CARGO_BIN_EXE_muster-echo-worker`) but not an example's, and the crash tests must
//! start, SIGTERM and SIGKILL a real worker process. One source, so the tests prove the example.

#[path = "../../examples/echo_worker.rs"]
mod echo_worker;

fn main() -> std::process::ExitCode {
    echo_worker::main()
}
