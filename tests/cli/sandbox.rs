//! Tool sandboxes through the binary: a command tool reaches only what its `requires` grant —
//! without `network` no connection to a listener on the host's loopback, without `filesystem` no
//! file read outside its working directory and none written outside its temporary directory —
//! and nothing it starts outlives the call, `setsid` included. What is enforced is shown by
//! `pagantic tools`, in the `tool_start` event and in the record, and `require_sandbox: true`
//! refuses a tool this machine cannot contain.
//!
//! Each enforcement test first asks `pagantic tools` whether this machine enforces the limit:
//! where it does not (an old kernel, user namespaces disabled), the test checks that the limit
//! is reported as not enforced, with its reason, instead.

use std::io::ErrorKind;
use std::net::TcpListener;
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::{Run, events_in, pagantic_in, pagantic_with};

/// A plan whose one step calls tool `probe` (declared by `tool`, YAML) with `args` (YAML).
fn workspace(tool: &str, args: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    let plan = format!(
        "version: 1\nname: sandboxed\ninputs:\n  value: {{ type: string, default: \"\" }}\ntools:\n  probe:\n    kind: command\n    description: A probe.\n{tool}\nsteps:\n  - name: call\n    type: tool\n    tool: probe\n    args: {args}\noutput: \"{{{{ steps.call.output }}}}\"\n"
    );
    std::fs::create_dir(dir.path().join("work")).expect("working dir");
    std::fs::write(dir.path().join("plan.yaml"), plan).expect("plan");
    dir
}

/// `pagantic tools plan.yaml --format json`'s line for `probe`.
fn tool_line(dir: &Path) -> Value {
    let run = pagantic_in(dir, &["tools", "plan.yaml", "--format", "json"]);
    assert_eq!(run.code, 0, "{run:?}");
    run.stdout_json_lines()
        .into_iter()
        .find(|line| line["name"] == "probe")
        .expect("a line for the tool")
}

/// Runs the plan with `value`; the run, its record and its `tool_start` event.
fn run(dir: &Path, value: &str) -> (Run, Value, Value) {
    run_with(dir, value, &[])
}

/// Runs the plan with `value` and the sandboxes switched off (`PAGANTIC_SANDBOX=off`): what the
/// same tool does uncontained.
fn run_unsandboxed(dir: &Path, value: &str) -> (Run, Value, Value) {
    run_with(dir, value, &[("PAGANTIC_SANDBOX", "off")])
}

fn run_with(dir: &Path, value: &str, env: &[(&str, &str)]) -> (Run, Value, Value) {
    let input = format!("value={value}");
    let run = pagantic_with(
        dir,
        &[
            "run",
            "plan.yaml",
            "-i",
            &input,
            "--format",
            "json",
            "--events",
            "events.jsonl",
        ],
        env,
    );
    let record = serde_json::from_str(&run.stdout).unwrap_or(Value::Null);
    let start = events_in(&dir.join("events.jsonl"))
        .into_iter()
        .find(|event| event["kind"] == "tool_start")
        .expect("a tool_start event");
    (run, record, start)
}

/// Whether `limit` is enforced here, from `pagantic tools`; when it is not, that it says why.
fn enforced(dir: &Path, limit: &str) -> bool {
    let sandbox = tool_line(dir)["sandbox"].clone();
    match sandbox[limit].as_str() {
        Some("enforced") => true,
        Some("not_enforced") => {
            let why = sandbox["why_not"][limit].as_str().unwrap_or_default();
            assert!(!why.is_empty(), "{sandbox}");
            eprintln!("{limit} is not enforced on this machine: {why}");
            false
        }
        other => panic!("{limit}: {other:?} in {sandbox}"),
    }
}

#[test]
fn a_tool_without_network_cannot_reach_a_listener_on_the_hosts_loopback() {
    let listener = TcpListener::bind("127.0.0.1:0").expect("a loopback listener");
    listener.set_nonblocking(true).expect("non-blocking");
    let port = listener.local_addr().expect("address").port().to_string();
    let connect = "    argv: [bash, -c, 'exec 3<>/dev/tcp/127.0.0.1/$0 && echo connected', \"{{ args.port }}\"]\n    side_effects: none";
    let args = "{ port: \"{{ inputs.value }}\" }";
    let isolated = workspace(connect, args);
    if !enforced(isolated.path(), "network") {
        return;
    }

    let (refused, record, start) = run(isolated.path(), &port);
    assert_eq!(refused.code, 1, "{refused:?}");
    assert_eq!(record["steps"][0]["error"]["code"], "TOOL_EXECUTION_FAILED");
    assert_eq!(start["data"]["sandbox"]["network"], "enforced");
    assert_eq!(
        listener.accept().map(|_| ()).map_err(|e| e.kind()),
        Err(ErrorKind::WouldBlock),
        "nothing may have connected"
    );

    // Switched off, the same tool connects: the listener is reachable, the namespace kept it out.
    let (uncontained, record, start) = run_unsandboxed(isolated.path(), &port);
    assert_eq!(uncontained.code, 0, "{uncontained:?}");
    assert_eq!(record["output"], "connected\n");
    assert_eq!(start["data"]["sandbox"]["network"], "not_enforced");
    assert!(listener.accept().is_ok(), "the unsandboxed tool connected");

    // The same tool granted the network connects too.
    let granted = workspace(&format!("{connect}\n    requires: [network]"), args);
    let (connected, record, start) = run(granted.path(), &port);
    assert_eq!(connected.code, 0, "{connected:?}");
    assert_eq!(record["output"], "connected\n");
    assert_eq!(start["data"]["sandbox"]["network"], "granted");
    assert!(listener.accept().is_ok(), "the granted tool connected");
}

#[test]
fn a_tool_without_filesystem_reads_only_its_working_dir_and_writes_only_its_temp_dir() {
    let outside = tempfile::tempdir().expect("a directory outside");
    let secret = outside.path().join("secret.txt");
    std::fs::write(&secret, "s3cret").expect("secret");
    let cat = "    argv: [cat, \"{{ args.path }}\"]\n    working_dir: work\n    side_effects: read";
    let args = "{ path: \"{{ inputs.value }}\" }";
    let dir = workspace(cat, args);
    std::fs::write(dir.path().join("work/notes.txt"), "inside").expect("notes");
    if !enforced(dir.path(), "filesystem") {
        return;
    }

    let (inside, record, _) = run(dir.path(), "notes.txt");
    assert_eq!(inside.code, 0, "{inside:?}");
    assert_eq!(record["output"], "inside");
    let (read, record, start) = run(dir.path(), &secret.display().to_string());
    assert_eq!(read.code, 1, "{read:?}");
    assert!(!read.stdout.contains("s3cret"), "{}", read.stdout);
    let message = record["steps"][0]["error"]["message"]
        .as_str()
        .unwrap_or_default();
    assert!(message.contains("Permission denied"), "{message}");
    assert_eq!(start["data"]["sandbox"]["filesystem"], "enforced");
    let (uncontained, record, _) = run_unsandboxed(dir.path(), &secret.display().to_string());
    assert_eq!(uncontained.code, 0, "{uncontained:?}");
    assert_eq!(
        record["output"], "s3cret",
        "switched off, the secret is read"
    );

    // Writing: refused outside, allowed in its own temporary directory.
    let write = "    argv: [sh, -c, 'echo written > \"${0:-$TMPDIR/scratch}\" && echo ok', \"{{ args.path }}\"]\n    working_dir: work\n    side_effects: write";
    let writer = workspace(write, args);
    let target = outside.path().join("planted.txt");
    let (planted, _, _) = run(writer.path(), &target.display().to_string());
    assert_eq!(planted.code, 1, "{planted:?}");
    assert!(!target.exists(), "nothing may be written outside");
    let (uncontained, _, _) = run_unsandboxed(writer.path(), &target.display().to_string());
    assert_eq!(uncontained.code, 0, "{uncontained:?}");
    assert!(target.exists(), "switched off, the file is planted");
    std::fs::remove_file(&target).expect("removed");
    let (scratch, record, _) = run(writer.path(), "");
    assert_eq!(scratch.code, 0, "{scratch:?}");
    assert_eq!(record["output"], "ok\n");
    let granted = workspace(&format!("{write}\n    requires: [filesystem]"), args);
    let (allowed, _, start) = run(granted.path(), &target.display().to_string());
    assert_eq!(allowed.code, 0, "{allowed:?}");
    assert!(target.exists(), "the granted tool writes where it likes");
    assert_eq!(start["data"]["sandbox"]["filesystem"], "granted");
}

/// The live (not zombie) processes whose command line is exactly `argv`.
fn running(argv: &[&str]) -> Vec<i32> {
    let wanted: Vec<u8> = argv
        .iter()
        .flat_map(|a| [a.as_bytes(), b"\0"].concat())
        .collect();
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c == wanted))
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
                let state = stat.rsplit_once(')').map(|(_, rest)| rest.trim_start());
                !state.is_some_and(|s| s.starts_with('Z') || s.starts_with('X'))
            })
        })
        .collect()
}

/// Stops each process of `pids` (a grandchild the test left behind).
fn kill_all(pids: &[i32]) {
    for pid in pids {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(*pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
}

#[test]
fn a_setsid_grandchild_is_gone_when_the_call_ends() {
    // A unique duration marks the grandchild: `sleep 300.<pid>` is found by its command line.
    // The tool ends only once the grandchild is in a session of its own: the command
    // substitution waits for it to close its end of the pipe, which it does as it becomes sleep.
    let duration = format!("300.{}", std::process::id());
    let detach = "    argv: [sh, -c, 'up=$(setsid sh -c ''echo up; exec sleep \"$0\" </dev/null >/dev/null 2>&1'' \"$0\" &); echo started', \"{{ args.duration }}\"]\n    side_effects: none";
    let dir = workspace(detach, "{ duration: \"{{ inputs.value }}\" }");
    let contained = enforced(dir.path(), "processes");

    let (started, record, start) = run(dir.path(), &duration);
    let left: Vec<i32> = {
        // The namespace's processes are killed as the call ends; give the kernel a moment.
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let left = running(&["sleep", &duration]);
            if left.is_empty() || Instant::now() > deadline {
                break left;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    kill_all(&left);
    assert_eq!(started.code, 0, "{started:?}");
    assert_eq!(record["output"], "started\n");
    if !contained {
        assert_eq!(start["data"]["sandbox"]["processes"], "not_enforced");
        return;
    }
    assert_eq!(start["data"]["sandbox"]["processes"], "enforced");
    assert_eq!(
        left,
        Vec::<i32>::new(),
        "the setsid grandchild outlived the call"
    );

    // Switched off, the grandchild outlives the call: its process group was killed, not it.
    let (uncontained, _, _) = run_unsandboxed(dir.path(), &duration);
    let left = running(&["sleep", &duration]);
    kill_all(&left);
    assert_eq!(uncontained.code, 0, "{uncontained:?}");
    assert_eq!(left.len(), 1, "the unsandboxed grandchild is still running");
}

#[test]
fn tools_and_the_record_show_what_is_enforced_and_a_policy_can_require_it() {
    let echo = "    argv: [echo, hi]\n    side_effects: none\n    requires: [network]";
    let dir = workspace(echo, "{}");
    let text = pagantic_in(dir.path(), &["tools", "plan.yaml"]);
    assert_eq!(text.code, 0, "{text:?}");
    assert!(
        text.stdout
            .contains("  sandbox: network granted, filesystem "),
        "{}",
        text.stdout
    );
    let (ran, record, _) = run(dir.path(), "");
    assert_eq!(ran.code, 0, "{ran:?}");
    let sandbox = &record["steps"][0]["detail"]["sandbox"];
    assert_eq!(sandbox["network"], "granted", "{record}");
    assert_eq!(*sandbox, tool_line(dir.path())["sandbox"]);

    // Switched off, nothing is enforced: `require_sandbox` refuses the plan, nothing runs.
    let strict = "policy: { require_sandbox: true }\n";
    let plan = std::fs::read_to_string(dir.path().join("plan.yaml")).expect("plan");
    std::fs::write(dir.path().join("plan.yaml"), format!("{strict}{plan}")).expect("plan");
    let off = [("PAGANTIC_SANDBOX", "off")];
    let refused = pagantic_with(dir.path(), &["run", "plan.yaml"], &off);
    assert_eq!(refused.code, 2, "{refused:?}");
    assert!(
        refused
            .stderr
            .contains("tool `probe` cannot be sandboxed here: `require_sandbox: true`, and this machine cannot enforce"),
        "{}",
        refused.stderr
    );
    assert!(
        refused
            .stderr
            .contains("switched off (PAGANTIC_SANDBOX=off)")
    );
    let listed = pagantic_with(
        dir.path(),
        &["tools", "plan.yaml", "--format", "json"],
        &off,
    );
    let line = &listed.stdout_json_lines()[0];
    assert_eq!(line["availability"], "refused", "{line}");
    assert_eq!(line["sandbox"]["processes"], "not_enforced");
}
