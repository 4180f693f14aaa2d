//! Integration tests: they drive the real `pagantic` binary, like a user at a terminal would.
//! All of them live in this one test binary (one link step instead of many).
#![expect(
    clippy::expect_used,
    reason = "test helpers should fail loudly when the environment is broken"
)]

mod architecture;
mod batch;
mod cache;
mod cassette;
mod chat;
mod cluster;
mod cost;
mod diff;
mod docs;
mod engines;
mod environment;
mod gate;
mod graph;
mod hostile_files;
mod hostile_servers;
mod invalid_corpus;
#[cfg(not(feature = "local"))]
mod light;
mod lock;
mod mcp;
mod onnx;
mod onramp;
mod openai_compat;
mod outside_numbers;
mod patterns;
mod policy;
mod promises;
mod rate_limit;
#[cfg(feature = "local")]
mod real_model;
mod reduce;
mod retrieval;
mod robustness;
mod route;
mod run;
mod sandbox;
mod schema;
mod semantics;
mod semantics3;
mod semantics4;
mod serve;
mod serve_approve;
mod serve_mcp;
mod serve_names;
mod session;
mod streaming;
mod suite;
mod timeline;
mod tool_cache;
mod tracing;
mod validate;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// What a run of the binary printed, and how it exited.
#[derive(Debug)]
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    /// Standard output read as JSON Lines, one value a line (a line that is not JSON fails the
    /// test).
    pub fn stdout_json_lines(&self) -> Vec<serde_json::Value> {
        self.stdout
            .lines()
            .map(|line| serde_json::from_str(line).expect("a JSON line"))
            .collect()
    }
}

/// The repository root (tests run with it as the working directory unless told otherwise).
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Runs `pagantic ARGS…` in `dir`, with colours off.
pub fn pagantic_in(dir: &Path, args: &[&str]) -> Run {
    pagantic_with(dir, args, &[])
}

/// Runs `pagantic ARGS…` in `dir` with extra environment variables, colours off, and a call
/// cache of its own (see [`command`]) that is deleted afterwards.
pub fn pagantic_with(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Run {
    let cache = fresh_cache_dir();
    let output = output_of(
        command(&cache)
            .args(args)
            .current_dir(dir)
            .envs(env.iter().copied()),
    );
    let _ = std::fs::remove_dir_all(&cache);
    Run {
        code: output.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// The `pagantic` binary with colours off and its call cache in `cache`. Every invocation of
/// the suite gets an empty cache of its own (from [`fresh_cache_dir`]) unless a test is about
/// the cache and shares one on purpose (its own `PAGANTIC_CACHE_DIR` or `--cache`): scripted
/// plans must not answer each other's calls, or the user's cache answer them.
///
/// The command starts from a sealed environment (see [`sealed`]), so every machine runs the
/// same thing whatever the developer's shell or the CI job exports.
pub fn command(cache: &Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_pagantic"));
    sealed(&mut command).env("PAGANTIC_CACHE_DIR", cache);
    command
}

/// The variables a command the suite starts takes from the suite's own environment: where
/// programs are found, the home and temporary directories, and `PAGANTIC_HOME` (the tests use
/// the models the README's `models pull` stored there).
const PASSED_ENV: [&str; 4] = ["PATH", "HOME", "TMPDIR", "PAGANTIC_HOME"];

/// `command` with an empty environment but [`PASSED_ENV`] and `NO_COLOR=1`; a test adds its
/// own variables after. Nothing else reaches it: not a developer's `OTEL_*` exporter or sampler
/// (which would send the suite's traces to a real collector, or switch them off), `TRACEPARENT`,
/// `GITHUB_STEP_SUMMARY` (every `pagantic test` would append to a CI job's summary), `RUST_LOG`,
/// proxies, an ONNX Runtime library, a hub address, an offline switch or a Python for pulls.
pub fn sealed(command: &mut Command) -> &mut Command {
    command.env_clear().env("NO_COLOR", "1");
    for name in PASSED_ENV {
        if let Some(value) = std::env::var_os(name) {
            command.env(name, value);
        }
    }
    command
}

/// `program` (a shell, `script`) for running the binary with the environment of `binary`, a
/// command from [`command`]: sealed, so the variables it sets are its whole environment (one
/// it removed after sealing, such as `NO_COLOR`, is simply not there).
pub fn runner_like(binary: &Command, program: &str) -> Command {
    let mut runner = Command::new(program);
    runner.env_clear();
    for (name, value) in binary.get_envs() {
        if let Some(value) = value {
            runner.env(name, value);
        }
    }
    runner
}

/// An address that refuses every connection, for a server that is not there: port 1 (tcpmux)
/// is in the range only a privileged process may bind and nothing listens on it, so no other
/// test or program can take it between a test choosing it and the run connecting, as it could
/// a port freed by a dropped listener.
pub const REFUSING_ADDRESS: &str = "127.0.0.1:1";

/// How long one command a test runs may take before the test fails: generous, so a starved
/// machine (or a real model on its CPU) passes, and bounded, so a command that hangs fails its
/// test instead of hanging `cargo test`.
pub const RUN_LIMIT: Duration = Duration::from_secs(600);

/// Waits for `child` to end and takes what it printed (what was piped), for at most `limit`; a
/// child still running then is killed and the test fails.
pub fn finish_within(child: Child, limit: Duration) -> Output {
    let pid = nix::unistd::Pid::from_raw(i32::try_from(child.id()).expect("a pid fits in i32"));
    let (sender, ended) = std::sync::mpsc::channel();
    std::thread::spawn(move || sender.send(child.wait_with_output()));
    match ended.recv_timeout(limit) {
        Ok(output) => output.expect("the command ends"),
        Err(_) => {
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
            panic!("the command did not end within {limit:?}");
        }
    }
}

/// What `command` printed and how it exited, as [`Command::output`] gives it (stdin empty),
/// within [`RUN_LIMIT`].
pub fn output_of(command: &mut Command) -> Output {
    let child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the command starts");
    finish_within(child, RUN_LIMIT)
}

/// Sends `signal` to a running child (no `kill` binary needed).
pub fn send_signal(child: &std::process::Child, signal: nix::sys::signal::Signal) {
    let pid = nix::unistd::Pid::from_raw(i32::try_from(child.id()).expect("a pid fits in i32"));
    nix::sys::signal::kill(pid, signal).expect("the signal is sent");
}

/// A call-cache directory no other invocation uses (not created: the cache creates it when a
/// model is first called), under the test target's scratch directory. The first call removes
/// the directories earlier test processes left (those of servers and spawned runs, which are not
/// removed when they end), so they do not pile up; a concurrent `cargo test`'s are kept.
pub fn fresh_cache_dir() -> PathBuf {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    static SWEPT: std::sync::Once = std::sync::Once::new();
    let caches = Path::new(env!("CARGO_TARGET_TMPDIR")).join("call-caches");
    SWEPT.call_once(|| {
        for entry in std::fs::read_dir(&caches).into_iter().flatten().flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let pid = name.split('-').next().unwrap_or_default();
            let alive = !pid.is_empty() && Path::new("/proc").join(pid).exists();
            if !alive {
                let _ = std::fs::remove_dir_all(entry.path());
            }
        }
    });
    caches.join(format!(
        "{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ))
}

/// Every event of the finished run whose `--events` file is `path`, in order.
pub fn events_in(path: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .expect("the events file")
        .lines()
        .map(|line| serde_json::from_str(line).expect("a JSON event per line"))
        .collect()
}

/// Starts `pagantic ARGS…` at the repository root with its stdin, stdout and stderr piped, for
/// tests that talk to it or signal it while it runs.
pub fn spawn(args: &[&str]) -> std::process::Child {
    command(&fresh_cache_dir())
        .args(args)
        .current_dir(root())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("pagantic starts")
}

thread_local! {
    /// Each test runs on a thread of its own, so its files live in a directory of their own,
    /// removed when the test (its thread) ends.
    static SCRATCH: tempfile::TempDir = tempfile::tempdir().expect("temp dir");
}

/// A path named `name` in this test's own directory.
pub fn scratch(name: &str) -> PathBuf {
    SCRATCH.with(|dir| dir.path().join(name))
}

/// A test path as the argument text a command takes.
pub fn path_arg(path: &Path) -> &str {
    path.to_str().expect("utf-8")
}

/// Runs `pagantic ARGS…` at the repository root.
pub fn pagantic(args: &[&str]) -> Run {
    pagantic_in(&root(), args)
}

/// The record of step `name` in a run record (`run --format json`).
pub fn step<'a>(record: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    record["steps"]
        .as_array()
        .and_then(|steps| steps.iter().find(|s| s["name"] == name))
        .unwrap_or_else(|| panic!("no step {name} in {record}"))
}
