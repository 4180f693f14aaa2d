//! Running a program from an argv: never through a shell, in its own process group that dies as a
//! whole, with a cleared environment, a timeout and capped output.
//!
//! The process group is what makes the timeout real: killing only the direct child would leave
//! whatever it started (`make` → compilers, a script → its pipeline) running and holding the
//! output pipes open. The group is killed with `SIGKILL` when the timeout expires, when the
//! returned future is dropped (cancellation), and also as soon as the program itself exits, so
//! a call never leaves background processes behind. A process that moves itself to another group
//! or session (`setsid`, a daemon) escapes the group; the call's [`Sandbox`] contains it (a PID
//! namespace whose init is in the group) where this machine allows.

use std::io;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use serde_json::json;
use tokio::io::{AsyncRead, AsyncReadExt};

use super::sandbox::{self, Sandbox};
use crate::core::{Failure, FailureCode};

/// Variables passed to every program whatever `env_allow` says: without `PATH`, a program that
/// runs others (`git`, `make`, a script) could not find them, and it reveals nothing secret.
const ALWAYS_PASSED: &[&str] = &["PATH"];

/// How many characters of stderr a failure quotes (its end, where the error usually is).
const STDERR_TAIL_CHARS: usize = 500;

/// Bytes read from a pipe at a time.
const READ_CHUNK: usize = 8192;

/// A command tool call with its argv already rendered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandSpec {
    /// The program (`argv[0]`, looked up on `PATH` unless it contains a `/`) and its arguments,
    /// each passed as one argument exactly as written: no shell, no splitting, no globbing.
    pub argv: Vec<String>,
    /// Longest the program may run before it and everything it started are killed.
    pub timeout: Duration,
    /// Most bytes kept of stdout, and separately of stderr; the rest is read and dropped.
    pub max_output_bytes: usize,
    /// Directory the program runs in; `None` keeps ours. It must exist.
    pub working_dir: Option<PathBuf>,
    /// Names of environment variables passed through from ours; every other variable is
    /// cleared, except `PATH`, which is always passed.
    pub env_allow: Vec<String>,
    /// What the program may reach, and how that is enforced.
    pub sandbox: Sandbox,
}

/// What a command that succeeded printed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandOutput {
    /// Standard output, at most `max_output_bytes`, invalid UTF-8 replaced by `U+FFFD`.
    pub stdout: String,
    /// Standard error, capped and decoded like `stdout`.
    pub stderr: String,
    /// The exit code; always `Some(0)` here, since any other exit is a failure.
    pub exit_code: Option<i32>,
    /// Whether stdout or stderr was cut at `max_output_bytes`.
    pub truncated: bool,
    /// Time from start to exit.
    pub duration: Duration,
}

/// Runs a command and returns its output when it exits with code 0.
///
/// Failures: `TOOL_TIMEOUT` when it runs past `spec.timeout`; `TOOL_EXECUTION_FAILED` when it
/// exits non-zero or is killed by a signal (the message quotes the end of stderr), or cannot be
/// started (not retryable when the program is missing or not executable);
/// `TOOL_INVALID_ARGUMENTS` for an empty argv or an argument with a NUL byte;
/// `CONFIG_FILE_ERROR` when the working directory does not exist.
///
/// Dropping the returned future kills the program's process group.
pub async fn run_command(spec: &CommandSpec) -> Result<CommandOutput, Failure> {
    let Some(program) = spec.argv.first() else {
        return Err(Failure::new(
            FailureCode::ToolInvalidArguments,
            "the command's argv is empty: there is no program to run",
        ));
    };
    if let Some(dir) = &spec.working_dir {
        check_working_dir(program, dir).await?;
    }
    let sandbox::Prepared {
        mut command,
        temp: _temp,
    } = spec.sandbox.prepare(
        &spec.argv,
        spec.working_dir.as_deref(),
        passed_env(&spec.env_allow),
    )?;
    command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());

    let started = Instant::now();
    let mut child = command
        .spawn()
        .map_err(|error| spawn_failure(program, &error))?;
    let mut group = GroupKiller::new(child.id());
    let stdout = child.stdout.take();
    let stderr = child.stderr.take();
    let finished = async {
        let status = async {
            let status = child.wait().await;
            // The program is done: whatever it left running must not hold the pipes open.
            group.kill();
            status
        };
        tokio::join!(
            status,
            read_capped(stdout, spec.max_output_bytes),
            read_capped(stderr, spec.max_output_bytes),
        )
    };
    let outcome = tokio::time::timeout(spec.timeout, finished).await;
    let Ok((status, stdout, stderr)) = outcome else {
        group.kill();
        return Err(Failure::new(
            FailureCode::ToolTimeout,
            format!(
                "`{program}` ran past its {:?} timeout; it and every process it started were killed",
                spec.timeout
            ),
        ));
    };

    let status = status.map_err(|error| io_failure(program, "wait for", &error))?;
    let stdout = stdout.map_err(|error| io_failure(program, "read the output of", &error))?;
    let stderr = stderr.map_err(|error| io_failure(program, "read the output of", &error))?;
    let output = CommandOutput {
        truncated: stdout.truncated || stderr.truncated,
        stdout: stdout.text,
        stderr: stderr.text,
        exit_code: status.code(),
        duration: started.elapsed(),
    };
    if status.success() {
        Ok(output)
    } else if status.code() == Some(i32::from(sandbox::launcher::SETUP_FAILED))
        && output.stderr.starts_with(sandbox::launcher::NAME)
    {
        Err(sandbox::setup_failure(program, &output.stderr))
    } else {
        Err(exit_failure(program, status, &output.stderr))
    }
}

/// The regular files a rendered `argv` names, resolved against `dir` (where the program runs) and
/// canonical: each element that is a path to one, or whose value after the first `=` is
/// (`--input=notes.txt`). What a program reads beyond the files its arguments name is unknown.
pub fn files_named(argv: &[String], dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = argv
        .iter()
        .flat_map(|arg| {
            [
                Some(arg.as_str()),
                arg.split_once('=').map(|(_, value)| value),
            ]
        })
        .flatten()
        .filter(|name| !name.is_empty())
        .filter_map(|name| dir.join(name).canonicalize().ok())
        .filter(|path| path.is_file())
        .collect();
    files.sort();
    files.dedup();
    files
}

/// Kills a process group with `SIGKILL`, once: explicitly, or when dropped.
pub(super) struct GroupKiller(Option<Pid>);

impl GroupKiller {
    /// The group led by the child with this pid (`process_group(0)` makes its id the pid).
    pub(super) fn new(pid: Option<u32>) -> Self {
        GroupKiller(
            pid.and_then(|pid| i32::try_from(pid).ok())
                .map(Pid::from_raw),
        )
    }

    /// Lets the group go: it is no longer killed, not even when this is dropped.
    pub(super) fn let_go(&mut self) {
        self.0 = None;
    }

    pub(super) fn kill(&mut self) {
        if let Some(group) = self.0.take() {
            // ESRCH (every member already gone) is the usual error and means nothing is left to
            // kill; EPERM cannot happen for a group we created.
            let _ = killpg(group, Signal::SIGKILL);
        }
    }
}

impl Drop for GroupKiller {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Our variables that the program may see: `PATH` and the allowed ones that are set.
pub(super) fn passed_env(
    allow: &[String],
) -> impl Iterator<Item = (std::ffi::OsString, std::ffi::OsString)> {
    std::env::vars_os().filter(move |(name, _)| {
        name.to_str()
            .is_some_and(|name| ALWAYS_PASSED.contains(&name) || allow.iter().any(|a| a == name))
    })
}

pub(super) async fn check_working_dir(program: &str, dir: &Path) -> Result<(), Failure> {
    let problem = match tokio::fs::metadata(dir).await {
        Ok(metadata) if metadata.is_dir() => return Ok(()),
        Ok(_) => "is not a directory".to_string(),
        Err(error) => format!("cannot be used: {error}"),
    };
    Err(Failure::new(
        FailureCode::ConfigFileError,
        format!(
            "the working directory `{}` of `{program}` {problem}",
            dir.display()
        ),
    )
    .with_help("create the directory or fix the tool's `working_dir`"))
}

pub(super) fn spawn_failure(program: &str, error: &io::Error) -> Failure {
    match error.kind() {
        io::ErrorKind::NotFound => Failure::new(
            FailureCode::ToolExecutionFailed,
            format!("`{program}` was not found"),
        )
        .with_help(format!("is `{program}` installed and on PATH?"))
        .retryable(false),
        io::ErrorKind::PermissionDenied => Failure::new(
            FailureCode::ToolExecutionFailed,
            format!("`{program}` cannot be executed: permission denied"),
        )
        .with_help(format!("is `{program}` an executable file?"))
        .retryable(false),
        io::ErrorKind::InvalidInput => Failure::new(
            FailureCode::ToolInvalidArguments,
            format!("`{program}` cannot be started with these arguments: {error}"),
        ),
        _ => Failure::new(
            FailureCode::ToolExecutionFailed,
            format!("`{program}` could not be started: {error}"),
        ),
    }
}

fn io_failure(program: &str, action: &str, error: &io::Error) -> Failure {
    Failure::new(
        FailureCode::ToolExecutionFailed,
        format!("could not {action} `{program}`: {error}"),
    )
}

fn exit_failure(program: &str, status: ExitStatus, stderr: &str) -> Failure {
    let (how, details) = match (status.code(), status.signal()) {
        (Some(code), _) => (
            format!("exited with code {code}"),
            Some(json!({ "exit_code": code })),
        ),
        (None, Some(signal)) => {
            let name =
                Signal::try_from(signal).map_or_else(|_| signal.to_string(), |s| s.to_string());
            (
                format!("was killed by signal {name}"),
                Some(json!({ "signal": name })),
            )
        }
        (None, None) => ("failed".to_string(), None),
    };
    let stderr = stderr.trim_end();
    let message = if stderr.is_empty() {
        format!("`{program}` {how}")
    } else {
        format!(
            "`{program}` {how}; stderr: {}",
            tail(stderr, STDERR_TAIL_CHARS)
        )
    };
    Failure {
        details: details.map(Box::new),
        ..Failure::new(FailureCode::ToolExecutionFailed, message)
    }
}

/// The last `chars` characters of `text`, with `…` in front when some were cut.
pub(super) fn tail(text: &str, chars: usize) -> String {
    match text.char_indices().rev().nth(chars) {
        Some((cut, c)) => format!("…{}", &text[cut + c.len_utf8()..]),
        None => text.to_string(),
    }
}

/// Output kept from one pipe.
struct Captured {
    text: String,
    truncated: bool,
}

/// Reads a pipe to its end, keeping the first `cap` bytes and dropping the rest, so the program
/// never blocks on a full pipe and memory stays bounded.
async fn read_capped<R: AsyncRead + Unpin>(pipe: Option<R>, cap: usize) -> io::Result<Captured> {
    let mut kept = Vec::new();
    let mut truncated = false;
    if let Some(mut pipe) = pipe {
        let mut chunk = vec![0; READ_CHUNK];
        loop {
            let read = pipe.read(&mut chunk).await?;
            if read == 0 {
                break;
            }
            let room = cap.saturating_sub(kept.len()).min(read);
            kept.extend_from_slice(&chunk[..room]);
            truncated |= room < read;
        }
    }
    Ok(Captured {
        text: decode(kept, truncated),
        truncated,
    })
}

/// Lossy UTF-8, without the replacement character a cut through a character would leave.
fn decode(mut bytes: Vec<u8>, truncated: bool) -> String {
    if truncated {
        // An incomplete character is at most three bytes, led by a non-continuation byte.
        let len = bytes.len();
        if let Some(lead) = (len.saturating_sub(3)..len)
            .rev()
            .find(|&at| bytes[at] & 0b1100_0000 != 0b1000_0000)
            && std::str::from_utf8(&bytes[lead..]).is_err_and(|e| e.error_len().is_none())
        {
            bytes.truncate(lead);
        }
    }
    String::from_utf8_lossy(&bytes).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_files_an_argv_names_are_found_where_the_program_runs() {
        let dir = tempfile::tempdir().expect("dir");
        std::fs::write(dir.path().join("notes.txt"), "a").expect("written");
        std::fs::write(dir.path().join("rows.csv"), "b").expect("written");
        std::fs::create_dir(dir.path().join("sub")).expect("dir");
        let argv: Vec<String> = ["cat", "notes.txt", "--input=rows.csv", "sub", "absent", ""]
            .map(String::from)
            .to_vec();
        let base = dir.path().canonicalize().expect("canonical");
        assert_eq!(
            files_named(&argv, dir.path()),
            [base.join("notes.txt"), base.join("rows.csv")]
        );
    }

    fn spec(argv: &[&str]) -> CommandSpec {
        CommandSpec {
            argv: argv.iter().map(|a| a.to_string()).collect(),
            timeout: Duration::from_secs(5),
            max_output_bytes: 65536,
            working_dir: None,
            env_allow: Vec::new(),
            sandbox: Sandbox::none(),
        }
    }

    /// Whether a process exists and is not a zombie (a container's init may never reap one).
    fn alive(pid: &str) -> bool {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
            let state = stat.rsplit_once(')').map(|(_, rest)| rest.trim_start());
            !state.is_some_and(|s| s.starts_with('Z') || s.starts_with('X'))
        })
    }

    /// How long a test waits for an event before it fails: generous, so a starved machine
    /// passes and a regression fails instead of hanging.
    const PATIENCE: Duration = Duration::from_secs(60);

    /// Polls `ready` every 20 ms until it gives a value, for at most [`PATIENCE`].
    async fn wait_for<T>(what: &str, mut ready: impl FnMut() -> Option<T>) -> T {
        let deadline = tokio::time::Instant::now() + PATIENCE;
        loop {
            if let Some(value) = ready() {
                return value;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{what} after {PATIENCE:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    async fn assert_dies(pid: &str) {
        wait_for(&format!("process {pid} is still running"), || {
            (!alive(pid)).then_some(())
        })
        .await;
    }

    /// A shell that starts `sleep 300` (longer than [`PATIENCE`]) in the background, writes "shell-pid sleep-pid" to a file
    /// and waits: the background sleep is the grandchild that must die with the call.
    fn with_grandchild(pids: &Path, timeout: Duration) -> CommandSpec {
        let mut spec = spec(&[
            "sh",
            "-c",
            r#"sleep 300 & echo $$ $! > "$1"; wait"#,
            "sh",
            &pids.display().to_string(),
        ]);
        spec.timeout = timeout;
        spec
    }

    /// The two pids once the shell has written the whole line (a file it has only truncated
    /// is empty, and a kill between truncating and writing would leave it so).
    async fn read_pids(pids: &Path) -> Vec<String> {
        let read = wait_for(&format!("the shell never wrote {}", pids.display()), || {
            std::fs::read_to_string(pids)
                .ok()
                .filter(|text| text.ends_with('\n'))
        })
        .await;
        let pids: Vec<String> = read.split_whitespace().map(str::to_string).collect();
        assert_eq!(pids.len(), 2, "{read:?}");
        pids
    }

    #[tokio::test]
    async fn arguments_are_passed_literally_never_to_a_shell() {
        for argument in [
            "; rm -rf /",
            "$(echo hi)",
            "`id`",
            "*",
            "a b  c",
            "'quoted' \"double\"",
            "$HOME && echo pwned | cat > x",
            "",
            "ünïcødé ✓",
        ] {
            let output = run_command(&spec(&["printf", "%s", argument]))
                .await
                .unwrap();
            assert_eq!(output.stdout, argument);
            assert_eq!(output.stderr, "");
            assert_eq!(output.exit_code, Some(0));
            assert!(!output.truncated);
        }
    }

    #[tokio::test]
    async fn a_timeout_kills_the_whole_process_group() {
        let dir = tempfile::tempdir().expect("temp dir");
        let pids = dir.path().join("pids");
        // Long enough that the shell has written its pids before the timeout kills it, on a
        // machine as busy as a parallel build; the test waits for them before the timeout.
        let spec = with_grandchild(&pids, Duration::from_secs(5));
        let call = tokio::spawn(async move { run_command(&spec).await });

        let started = read_pids(&pids).await;
        for pid in &started {
            assert!(alive(pid), "process {pid} died before the timeout");
        }
        let failure = call.await.expect("the call ends").unwrap_err();

        assert_eq!(failure.code, FailureCode::ToolTimeout);
        assert!(failure.message.contains("`sh`"), "{}", failure.message);
        assert!(failure.message.contains("5s"), "{}", failure.message);
        assert!(failure.retryable);
        for pid in started {
            assert_dies(&pid).await;
        }
    }

    #[tokio::test]
    async fn dropping_the_call_kills_the_whole_process_group() {
        let dir = tempfile::tempdir().expect("temp dir");
        let pids = dir.path().join("pids");
        let spec = with_grandchild(&pids, PATIENCE);
        let call = tokio::spawn(async move { run_command(&spec).await });

        let started = read_pids(&pids).await;
        for pid in &started {
            assert!(alive(pid), "process {pid} died before the call was dropped");
        }
        assert!(!call.is_finished(), "the call should still be running");
        call.abort();
        assert!(call.await.is_err_and(|e| e.is_cancelled()));

        for pid in started {
            assert_dies(&pid).await;
        }
    }

    #[tokio::test]
    async fn background_processes_die_when_the_program_exits() {
        // Without the group kill, the background sleep would hold stdout open for 30 s and the
        // call would end in a timeout instead.
        let output = run_command(&spec(&["sh", "-c", "sleep 30 & echo $!"]))
            .await
            .unwrap();

        assert_dies(output.stdout.trim()).await;
    }

    #[tokio::test]
    async fn output_is_capped_per_stream_while_the_program_runs_to_the_end() {
        let big_stderr = "head -c 100000 /dev/zero >&2; echo done";
        let cases: &[(&[&str], usize, usize, usize, bool)] = &[
            // argv, cap, stdout bytes, stderr bytes, truncated
            (&["head", "-c", "1000000", "/dev/zero"], 1000, 1000, 0, true),
            (&["sh", "-c", big_stderr], 1000, 5, 1000, true),
            (&["printf", "abc"], 3, 3, 0, false),
            (&["printf", "abc"], 2, 2, 0, true),
            (&["printf", "abc"], 0, 0, 0, true),
        ];
        for &(argv, cap, stdout, stderr, truncated) in cases {
            let mut spec = spec(argv);
            spec.max_output_bytes = cap;
            let output = run_command(&spec).await.unwrap();
            assert_eq!(output.stdout.len(), stdout, "{argv:?}");
            assert_eq!(output.stderr.len(), stderr, "{argv:?}");
            assert_eq!(output.truncated, truncated, "{argv:?}");
        }
    }

    #[test]
    fn decoding_never_leaves_half_a_character() {
        let cases: &[(&[u8], bool, &str)] = &[
            (b"abc", false, "abc"),
            ("aé".as_bytes(), true, "aé"),
            (&"aé".as_bytes()[..2], true, "a"),
            (&"a✓".as_bytes()[..3], true, "a"),
            (&"a😀".as_bytes()[..4], true, "a"),
            (&"a😀".as_bytes()[..2], true, "a"),
            // Invalid bytes that are not a cut character are replaced, not dropped.
            (b"a\xff", true, "a\u{fffd}"),
            (b"a\xffb", false, "a\u{fffd}b"),
            (&"a✓".as_bytes()[..3], false, "a\u{fffd}"),
            (b"", true, ""),
        ];
        for &(bytes, truncated, expected) in cases {
            assert_eq!(decode(bytes.to_vec(), truncated), expected, "{bytes:?}");
        }
    }

    #[tokio::test]
    async fn the_environment_is_cleared_except_path_and_the_allow_list() {
        let ours: Vec<String> = std::env::vars_os()
            .filter_map(|(name, _)| name.into_string().ok())
            .collect();
        let allowed = ["HOME", "PAGANTIC_SURELY_UNSET"];
        for allow in [&allowed[..], &[]] {
            let mut spec = spec(&["env"]);
            spec.env_allow = allow.iter().map(|a| a.to_string()).collect();
            let output = run_command(&spec).await.unwrap();

            let mut seen: Vec<&str> = output
                .stdout
                .lines()
                .filter_map(|line| line.split_once('=').map(|(name, _)| name))
                .collect();
            seen.sort_unstable();
            let mut expected: Vec<&str> = ours
                .iter()
                .map(String::as_str)
                .filter(|name| *name == "PATH" || allow.contains(name))
                .collect();
            expected.sort_unstable();
            assert_eq!(seen, expected, "allow list {allow:?}");
        }
    }

    #[tokio::test]
    async fn the_program_runs_in_the_working_directory() {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut spec = spec(&["pwd"]);
        spec.working_dir = Some(dir.path().to_path_buf());

        let output = run_command(&spec).await.unwrap();

        let expected = dir.path().canonicalize().unwrap();
        assert_eq!(output.stdout.trim_end(), expected.display().to_string());
    }

    #[tokio::test]
    async fn failures_carry_their_code_and_say_what_happened() {
        let manifest = concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml");
        let in_dir = |dir: &str| CommandSpec {
            working_dir: Some(PathBuf::from(dir)),
            ..spec(&["pwd"])
        };
        let cases = [
            // spec, code, retryable, in the message, in the help
            (
                spec(&[]),
                FailureCode::ToolInvalidArguments,
                false,
                "the command's argv is empty",
                "",
            ),
            (
                spec(&["pagantic-no-such-program"]),
                FailureCode::ToolExecutionFailed,
                false,
                "`pagantic-no-such-program` was not found",
                "is `pagantic-no-such-program` installed and on PATH?",
            ),
            (
                spec(&[manifest]),
                FailureCode::ToolExecutionFailed,
                false,
                "cannot be executed: permission denied",
                "an executable file?",
            ),
            (
                spec(&["sh", "-c", "echo starting; echo oops >&2; exit 3"]),
                FailureCode::ToolExecutionFailed,
                true,
                "`sh` exited with code 3; stderr: oops",
                "",
            ),
            (
                spec(&["sh", "-c", "kill -9 $$"]),
                FailureCode::ToolExecutionFailed,
                true,
                "`sh` was killed by signal SIGKILL",
                "",
            ),
            (
                spec(&["printf", "a\0b"]),
                FailureCode::ToolInvalidArguments,
                false,
                "`printf` cannot be started with these arguments",
                "",
            ),
            (
                in_dir("/pagantic/no/such/dir"),
                FailureCode::ConfigFileError,
                false,
                "the working directory `/pagantic/no/such/dir` of `pwd` cannot be used",
                "fix the tool's `working_dir`",
            ),
            (
                in_dir(manifest),
                FailureCode::ConfigFileError,
                false,
                "Cargo.toml` of `pwd` is not a directory",
                "fix the tool's `working_dir`",
            ),
        ];
        for (spec, code, retryable, message, help) in cases {
            let failure = run_command(&spec).await.unwrap_err();
            let argv = &spec.argv;
            assert_eq!(failure.code, code, "{argv:?}: {failure}");
            assert_eq!(failure.retryable, retryable, "{argv:?}");
            assert!(failure.message.contains(message), "{argv:?}: {failure}");
            assert!(
                failure.help.as_deref().unwrap_or_default().contains(help),
                "{argv:?}: {failure:?}"
            );
        }
    }

    #[test]
    fn a_long_stderr_is_quoted_by_its_end() {
        let cases = [
            ("short", 10, "short"),
            ("0123456789", 10, "0123456789"),
            ("0123456789", 3, "…789"),
            ("ééééé", 2, "…éé"),
            ("", 3, ""),
        ];
        for (text, chars, expected) in cases {
            assert_eq!(tail(text, chars), expected);
        }
    }
}
