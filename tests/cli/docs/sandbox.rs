//! Where the docs' examples run, and the stand-ins they run against.
//!
//! Each example runs in a directory of its own that looks like the repository: a copy of
//! `plans/` (examples write beside the plans: outputs, recorded cassettes) and links to
//! everything else at the top level (`prompts/`, `corpus/`, `tests/`, …). `pagantic` on its
//! `PATH` is the binary under test, through a shim that starts a `pagantic serve` line, checks
//! that it listens and stops it with SIGTERM (its exit status is the line's): an example that
//! starts a server would otherwise never end. The environment makes every run answer its model
//! calls from a call cache filled from the recorded cassettes (`PAGANTIC_CACHE_ONLY=1`, see
//! docs/environment.md), so examples that use the embedded model run in milliseconds, in both
//! builds, and a call the recording lacks fails as `CACHE_MISS`; pip is never run.
//!
//! What stands in for what cannot be reached here is said once, in [`STAND_INS`]: the address
//! 8080 becomes a free port, and the trace collectors the docs name (Phoenix, Tempo, Langfuse)
//! become a collector inside the test that keeps the spans it is sent.
//!
//! `PAGANTIC_DOCS_RECORD=1 cargo test --locked --test cli docs::examples` records instead: the
//! examples ask the real models (pulled with `pagantic models pull`), sharing one cache, and the
//! calls they made are written to [`RECORDING`].

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

use crate::root;

/// The recorded answers of the docs' examples, beside the cassette the test files' examples
/// replay (`plans/classify.cassette.jsonl`, whose entries it does not repeat).
pub const RECORDING: &str = "tests/docs/examples.cassette.jsonl";

/// The cassettes the examples' call cache is filled from.
const CASSETTES: [&str; 2] = ["plans/classify.cassette.jsonl", RECORDING];

/// Set to record the examples' calls anew with the real models.
const RECORD_VAR: &str = "PAGANTIC_DOCS_RECORD";

/// Text of the docs replaced before an example runs, and why: `{port}` is a free loopback port
/// for the example's server, `{collector}` the address of the trace collector in the test.
pub const STAND_INS: [(&str, &str, &str); 6] = [
    (
        "127.0.0.1:8080",
        "127.0.0.1:{port}",
        "port 8080 may be taken",
    ),
    (
        "localhost:8080",
        "127.0.0.1:{port}",
        "port 8080 may be taken",
    ),
    ("http://127.0.0.1:6006", "{collector}", "Arize Phoenix"),
    (
        "http://tempo.internal:4318",
        "{collector}",
        "Jaeger or Tempo",
    ),
    (
        "https://cloud.langfuse.com/api/public/otel",
        "{collector}",
        "Langfuse",
    ),
    (
        "/path/to/plans/",
        "plans/",
        "a path on the reader's machine",
    ),
];

/// Variables an example reads that a reader would have set.
const READER_ENV: [(&str, &str); 2] = [
    ("LANGFUSE_PUBLIC_KEY", "pk-lf-docs-test"),
    ("LANGFUSE_SECRET_KEY", "sk-lf-docs-test"),
];

/// How long one example may take when replaying, and when recording (asking the real models).
const REPLAY_LIMIT: Duration = Duration::from_secs(300);
const RECORD_LIMIT: Duration = Duration::from_secs(3600);

/// The shim: `pagantic serve` (over HTTP) started, seen to listen and stopped; anything else is
/// the binary itself. At most 60 s to listen; the server is stopped by its PID however it ends.
const SHIM: &str = r#"#!/usr/bin/env bash
real='@REAL@'
if [ "${1-}" != serve ] || [[ " $* " == *" --mcp-stdio "* ]]; then exec "$real" "$@"; fi
log="$(mktemp)"
"$real" "$@" 2>"$log" &
pid=$!
trap 'kill -KILL "$pid" 2>/dev/null; rm -f "$log"' EXIT
for _ in $(seq 600); do
  grep -q 'listening on http://' "$log" && break
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.1
done
listening=0
grep -q 'listening on http://' "$log" && listening=1 && kill -TERM "$pid"
wait "$pid"
status=$?
cat "$log" >&2
if [ "$listening" = 0 ] && [ "$status" = 0 ]; then status=1; fi
exit "$status"
"#;

/// What every example shares: the shim, and the call cache filled from the recordings.
pub struct Harness {
    dir: tempfile::TempDir,
    /// Recording with the real models instead of replaying.
    pub recording: bool,
}

impl Harness {
    pub fn new() -> Harness {
        let dir = tempfile::tempdir().expect("temp dir");
        let shim = dir.path().join("bin/pagantic");
        std::fs::create_dir_all(shim.parent().expect("bin/")).expect("bin/");
        std::fs::write(
            &shim,
            SHIM.replace("@REAL@", env!("CARGO_BIN_EXE_pagantic")),
        )
        .expect("the shim");
        set_executable(&shim);
        let real = dir.path().join("real/pagantic");
        std::fs::create_dir_all(real.parent().expect("real/")).expect("real/");
        std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_pagantic"), &real).expect("linked");
        let recording = std::env::var_os(RECORD_VAR).is_some_and(|v| !v.is_empty());
        let harness = Harness { dir, recording };
        let seeds: Vec<&str> = if recording {
            vec![CASSETTES[0]]
        } else {
            CASSETTES.to_vec()
        };
        let seeds: Vec<PathBuf> = seeds.iter().map(|file| root().join(file)).collect();
        let output = crate::output_of(
            crate::command(&harness.seed_cache())
                .args(["cache", "import"])
                .args(&seeds),
        );
        assert!(
            output.status.success(),
            "the examples' cache is filled from {seeds:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        harness
    }

    /// How long one example may take.
    pub fn limit(&self) -> Duration {
        if self.recording {
            RECORD_LIMIT
        } else {
            REPLAY_LIMIT
        }
    }

    /// The call cache filled from the recordings (the one every example shares, when recording).
    fn seed_cache(&self) -> PathBuf {
        self.dir.path().join("cache")
    }

    /// A directory laid out like the repository, with a call cache of its own (a copy of the
    /// filled one; the filled one itself when recording).
    pub fn sandbox(&self) -> Sandbox {
        let dir = tempfile::tempdir().expect("temp dir");
        for entry in std::fs::read_dir(root()).expect("the repository") {
            let entry = entry.expect("entry");
            let name = entry.file_name();
            if [".git", "target", "plans"].contains(&name.to_string_lossy().as_ref()) {
                continue;
            }
            std::os::unix::fs::symlink(entry.path(), dir.path().join(&name)).expect("linked");
        }
        copy_tree(&root().join("plans"), &dir.path().join("plans"));
        let cache = if self.recording {
            self.seed_cache()
        } else {
            let cache = dir.path().join(".pagantic-docs-cache");
            copy_tree(&self.seed_cache(), &cache);
            cache
        };
        Sandbox {
            dir,
            cache,
            port: free_port(),
        }
    }

    /// A command run by bash in `dir` with the examples' environment; `real` puts the binary
    /// itself first on `PATH` instead of the shim (for a server an example talks to).
    pub fn command(&self, cache: &Path, dir: &Path, real: bool) -> Command {
        let bin = self.dir.path().join(if real { "real" } else { "bin" });
        let path = std::env::var_os("PATH").unwrap_or_default();
        let mut paths = vec![bin];
        paths.extend(std::env::split_paths(&path));
        // The binary's usual test environment (sealed: colours off, none of the reader's trace
        // or model settings), given to bash, whose example scripts run it.
        let mut bash = crate::runner_like(&crate::command(cache), "bash");
        bash.args(["-e", "-o", "pipefail", "-c"])
            .env("PATH", std::env::join_paths(paths).expect("a PATH"))
            .envs(READER_ENV)
            .current_dir(dir)
            .process_group(0);
        if !self.recording {
            bash.env("PAGANTIC_CACHE_ONLY", "1")
                // No model is ever pulled: pip cannot be found.
                .env("PAGANTIC_PYTHON", "pagantic-docs-test-has-no-python");
        }
        bash
    }

    /// Writes every entry the examples' shared cache holds and the committed cassettes do not
    /// to [`RECORDING`] (recording only).
    pub fn write_recording(&self) {
        let db = pagantic::cache::Database::open(&self.seed_cache().join("cache.db"), |_| {})
            .expect("the examples' cache");
        let seeded: std::collections::BTreeSet<_> =
            pagantic::cache::read_cassette(&root().join(CASSETTES[0]))
                .expect("the test files' cassette")
                .into_iter()
                .map(|entry| entry.key)
                .collect();
        let entries: Vec<_> = db
            .entries()
            .expect("the entries")
            .into_iter()
            .filter(|entry| !seeded.contains(&entry.key))
            .collect();
        let written = pagantic::cache::write_cassette(&root().join(RECORDING), entries)
            .expect("the recording is written");
        println!("recorded {written} entries in {RECORDING}");
    }
}

fn set_executable(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
}

/// One example's directory, cache and port.
pub struct Sandbox {
    pub dir: tempfile::TempDir,
    pub cache: PathBuf,
    pub port: u16,
}

impl Sandbox {
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// `text` with the stand-ins in place; which stand-ins were used.
    pub fn stand_in(&self, text: &str, collector: &str) -> (String, Vec<&'static str>) {
        let mut text = text.to_string();
        let mut used = Vec::new();
        for (written, instead, why) in STAND_INS {
            if text.contains(written) {
                let instead = instead
                    .replace("{port}", &self.port.to_string())
                    .replace("{collector}", collector);
                text = text.replace(written, &instead);
                used.push(why);
            }
        }
        (text, used)
    }
}

/// A loopback port free now (the example's server binds it a moment later).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a free port")
        .port()
}

/// Copies the files under `from` to `to` (symbolic links copied as links).
fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("a directory");
    for entry in std::fs::read_dir(from).expect("a directory") {
        let entry = entry.expect("entry");
        let target = to.join(entry.file_name());
        let kind = entry.file_type().expect("a file type");
        if kind.is_dir() {
            copy_tree(&entry.path(), &target);
        } else if kind.is_symlink() {
            let link = std::fs::read_link(entry.path()).expect("a link");
            std::os::unix::fs::symlink(link, target).expect("linked");
        } else {
            std::fs::copy(entry.path(), target).expect("copied");
        }
    }
}

/// Runs `command` (its stdin empty) for at most `limit`; its process group is killed when it
/// overruns.
pub fn run_bounded(command: &mut Command, limit: Duration) -> Result<Output, String> {
    let child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start: {e}"))?;
    let group = Pid::from_raw(i32::try_from(child.id()).expect("a pid"));
    let (sender, ended) = mpsc::channel();
    std::thread::spawn(move || sender.send(child.wait_with_output()));
    match ended.recv_timeout(limit) {
        Ok(output) => output.map_err(|e| e.to_string()),
        Err(_) => {
            let _ = killpg(group, Signal::SIGKILL);
            Err(format!("did not end within {limit:?}"))
        }
    }
}

/// A server an example talks to, stopped (SIGTERM, then SIGKILL) when dropped.
pub struct Server {
    child: Child,
    /// What it printed on stderr until it listened.
    pub news: Vec<String>,
    stopped: bool,
}

impl Server {
    /// Starts `command` (a `pagantic serve` line) and waits until it listens.
    pub fn start(mut command: Command) -> Result<Server, String> {
        let mut child = command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot start the server: {e}"))?;
        let lines = crate::serve::stderr_lines(&mut child);
        let mut server = Server {
            child,
            news: Vec::new(),
            stopped: false,
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        while let Some(left) = deadline.checked_duration_since(Instant::now()) {
            match lines.recv_timeout(left) {
                Ok(line) => {
                    let listening = line.contains("listening on http://");
                    server.news.push(line);
                    if listening {
                        return Ok(server);
                    }
                }
                Err(_) => break,
            }
        }
        Err(format!(
            "the server did not listen:\n{}",
            server.news.join("\n")
        ))
    }

    /// Stops it with SIGTERM and says how it exited (a drain ends within its grace).
    pub fn stop(mut self) -> Result<(), String> {
        self.stopped = true;
        let group = Pid::from_raw(i32::try_from(self.child.id()).expect("a pid"));
        let _ = killpg(group, Signal::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return match status.code() {
                    Some(0) => Ok(()),
                    other => Err(format!("the server exited {other:?} on SIGTERM")),
                };
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = killpg(group, Signal::SIGKILL);
        let _ = self.child.wait();
        Err("the server did not stop within 60 s of SIGTERM".into())
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if !self.stopped {
            let group = Pid::from_raw(i32::try_from(self.child.id()).expect("a pid"));
            let _ = killpg(group, Signal::SIGKILL);
            let _ = self.child.wait();
        }
    }
}

/// The text of an output, stdout then stderr.
pub fn printed(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}
