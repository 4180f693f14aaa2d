//! `pagantic chat`: each line is one turn, earlier turns reach the agent as history, tool calls
//! show on stderr as they happen, a failed turn does not end the conversation, /exit and Ctrl-C at
//! the prompt do, and each turn is saved as soon as it is answered.

use std::io::{BufRead, Write};
use std::process::{Child, Output};
use std::sync::mpsc;
use std::time::Duration;

use crate::spawn;

/// How long a test waits for the chat before it fails: generous, so a starved machine passes
/// and a chat that hangs fails instead of hanging the suite.
const PATIENCE: Duration = Duration::from_secs(60);

/// Waits for `child` to end and takes what it printed, for at most [`PATIENCE`]; a chat still
/// running then is killed and the test fails.
fn finish(child: Child) -> Output {
    crate::finish_within(child, PATIENCE)
}

fn chat(lines: &str) -> (i32, String, String) {
    chat_with(&[], lines)
}

fn chat_with(flags: &[&str], lines: &str) -> (i32, String, String) {
    chat_plan("tests/plans/chat.yaml", flags, lines)
}

fn chat_plan(plan: &str, flags: &[&str], lines: &str) -> (i32, String, String) {
    let mut args = vec!["chat", plan];
    args.extend(flags);
    let mut child = spawn(&args);
    let written = child
        .stdin
        .take()
        .expect("stdin")
        .write_all(lines.as_bytes());
    // A chat that refuses to start (exit 2) may end before it reads a line: the pipe is then
    // closed, and what it said and its exit code are what the test checks.
    if let Err(error) = written {
        assert_eq!(
            error.kind(),
            std::io::ErrorKind::BrokenPipe,
            "write the conversation: {error}"
        );
    }
    let output = finish(child);
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn each_line_is_a_turn_and_earlier_turns_are_remembered() {
    let (code, stdout, stderr) = chat("hello\n\nagain\n/exit\nnever sent\n");
    assert_eq!(code, 0, "{stderr}");
    let answers: Vec<&str> = stdout.lines().collect();
    assert_eq!(
        answers,
        ["0 earlier: hello", "2 earlier: again"],
        "{stderr}"
    );
}

#[test]
fn tool_calls_are_shown_as_they_happen() {
    let (code, stdout, stderr) = chat("please calculate\n");
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stderr.contains("→ calculator {\"expression\":\"6 * 7\"}")
            && stderr.contains("← calculator ok"),
        "{stderr}"
    );
    // The scripted model calls the tool again, is asked for its answer with the result it
    // already has, and echoes that request.
    assert!(
        stdout.starts_with("You already made that call. The last tool result was: {\"result\":42}"),
        "{stdout}"
    );
}

#[test]
fn a_plan_without_an_agent_step_is_refused() {
    let run = crate::pagantic(&["chat", "plans/quickstart.yaml"]);
    assert_eq!(run.code, 2);
    assert!(run.stderr.contains("no `agent` step"), "{}", run.stderr);
}

fn json_lines(path: &std::path::Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .expect("the file")
        .lines()
        .map(|line| serde_json::from_str(line).expect("a JSON line"))
        .collect()
}

#[test]
fn a_saved_conversation_continues_where_it_stopped_under_the_same_session() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let transcript = dir.path().join("chat.jsonl");
    let events = dir.path().join("events.jsonl");
    let (t, e) = (
        transcript.display().to_string(),
        events.display().to_string(),
    );
    let (code, stdout, stderr) = chat_with(&["--save", &t, "--events", &e], "hello\nagain\n");
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(stdout, "0 earlier: hello\n2 earlier: again\n");
    let saved = json_lines(&transcript);
    let turns: Vec<(&str, &str)> = saved
        .iter()
        .map(|l| {
            (
                l["role"].as_str().unwrap_or(""),
                l["content"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert_eq!(
        turns,
        [
            ("user", "hello"),
            ("assistant", "0 earlier: hello"),
            ("user", "again"),
            ("assistant", "2 earlier: again"),
        ]
    );
    let session = saved[0]["session"].clone();
    assert!(session.is_string());
    assert!(saved.iter().all(|l| l["session"] == session));
    let logged = json_lines(&events);
    assert!(!logged.is_empty());
    assert!(
        logged.iter().all(|e| e["session"] == session),
        "every event carries the session id"
    );

    let (code, stdout, stderr) = chat_with(&["--load", &t, "--save", &t], "third\n");
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(
        stdout, "4 earlier: third\n",
        "the loaded turns are the history"
    );
    let saved = json_lines(&transcript);
    assert_eq!(saved.len(), 6, "the new turn is appended, nothing repeated");
    assert!(saved.iter().all(|l| l["session"] == session));
}

#[test]
fn a_transcript_that_is_not_one_is_refused_with_its_line() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let transcript = dir.path().join("chat.jsonl");
    std::fs::write(
        &transcript,
        "{\"session\":\"s\",\"role\":\"user\",\"content\":\"hi\"}\n{\"role\":\"assistant\"}\n",
    )
    .expect("written");
    let t = transcript.display().to_string();
    let (code, stdout, stderr) = chat_with(&["--load", &t], "hello\n");
    assert_eq!(code, 2, "{stderr}");
    assert!(stdout.is_empty());
    assert!(stderr.contains(&format!("{t}:2:")), "{stderr}");
}

#[test]
fn message_input_names_the_input_each_line_goes_to() {
    let plan = "tests/plans/chat-persona.yaml";
    let (code, stdout, stderr) = chat_plan(plan, &["--message-input", "message"], "ahoy\n");
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(stdout, "pirate hears: ahoy\n");
    // Without it, the line goes to the first string input (`persona`) and `message` is missing:
    // no turn could run, so the chat refuses to start (exit 2), as `run` would.
    let (code, stdout, stderr) = chat_plan(plan, &[], "ahoy\nagain\n");
    assert_eq!(code, 2, "{stderr}");
    assert!(stdout.is_empty(), "{stdout}");
    let missing = "error[CONFIG_INVALID_INPUT]: missing input `message`: give it with -i message=…";
    assert_eq!(stderr.lines().collect::<Vec<_>>(), [missing]);
    let (code, _, stderr) = chat_plan(plan, &["--message-input", "nope"], "ahoy\n");
    assert_eq!(code, 2);
    assert!(stderr.contains("no input `nope`"), "{stderr}");
}

#[test]
fn a_long_chat_is_trimmed_to_memory_and_keeps_the_system_prompt_and_the_message() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let events = dir.path().join("events.jsonl");
    let e = events.display().to_string();
    let (code, stdout, stderr) = chat_with(&["--events", &e], "a\nb\nc\nd\ne\n");
    assert_eq!(code, 0, "{stderr}");
    // The agent is given the whole history (the template counts it)...
    assert_eq!(
        stdout,
        "0 earlier: a\n2 earlier: b\n4 earlier: c\n6 earlier: d\n8 earlier: e\n"
    );
    // ...and sends at most `memory: 4` of it, besides the system prompt and the message.
    let sent: Vec<u64> = json_lines(&events)
        .iter()
        .filter(|e| e["kind"] == "inference")
        .map(|e| e["data"]["messages"].as_u64().expect("a message count"))
        .collect();
    assert_eq!(sent, [2, 4, 6, 6, 6]);
}

#[test]
fn escape_sequences_in_answers_are_shown_not_obeyed() {
    let (code, stdout, stderr) = chat("\u{1b}]0;owned\u{7}\u{1b}[2Jhi\r\n");
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(
        stdout, "0 earlier: \\u{1b}]0;owned\\u{7}\\u{1b}[2Jhi\n",
        "{stderr}"
    );
}

#[test]
fn a_device_or_fifo_is_refused_as_a_transcript_at_once() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let fifo = dir.path().join("chat.jsonl");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .expect("mkfifo runs");
    assert!(made.success());
    for path in ["/dev/zero".to_string(), fifo.display().to_string()] {
        let (code, stdout, stderr) = chat_with(&["--load", &path], "hello\n");
        assert_eq!(code, 2, "{path}: {stderr}");
        assert!(stdout.is_empty(), "{stdout}");
        assert!(
            stderr.contains(&format!("{path}:0: cannot read it: not a regular file")),
            "{stderr}"
        );
    }
}

#[test]
fn saving_replaces_a_symbolic_link_instead_of_writing_through_it() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let victim = dir.path().join("victim.txt");
    std::fs::write(&victim, "keep me\n").expect("victim");
    let transcript = dir.path().join("chat.jsonl");
    std::os::unix::fs::symlink(&victim, &transcript).expect("linked");
    let t = transcript.display().to_string();
    let (code, _, stderr) = chat_with(&["--save", &t], "hello\n");
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(
        std::fs::read_to_string(&victim).expect("victim"),
        "keep me\n"
    );
    assert!(
        std::fs::symlink_metadata(&transcript)
            .expect("meta")
            .is_file()
    );
    assert_eq!(json_lines(&transcript).len(), 2);
}

/// Each turn is saved as soon as it is answered, while the chat waits for the next line; Ctrl-C
/// at the prompt then ends the chat like /exit.
#[test]
fn each_turn_is_saved_at_once_and_ctrl_c_at_the_prompt_ends_the_chat() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let transcript = dir.path().join("chat.jsonl");
    let t = transcript.display().to_string();
    let mut child = spawn(&["chat", "tests/plans/chat.yaml", "--save", &t]);
    let mut stdin = child.stdin.take().expect("stdin");
    writeln!(stdin, "hello").expect("a line typed");
    let stdout = std::io::BufReader::new(child.stdout.take().expect("stdout"));
    let (sender, answers) = mpsc::channel();
    std::thread::spawn(move || {
        for line in stdout.lines() {
            let _ = sender.send(line);
        }
    });
    let answer = answers
        .recv_timeout(PATIENCE)
        .expect("an answer")
        .expect("a line");
    assert_eq!(answer, "0 earlier: hello");
    // At the prompt, stdin still open: the turn reaches the transcript (written after the
    // answer is shown), not only when the chat ends.
    let deadline = std::time::Instant::now() + PATIENCE;
    let saved = loop {
        let saved: Vec<String> = std::fs::read_to_string(&transcript)
            .unwrap_or_default()
            .lines()
            .map(|line| {
                let line: serde_json::Value = serde_json::from_str(line).expect("a JSON line");
                line["content"].as_str().unwrap_or_default().to_string()
            })
            .collect();
        if saved.len() >= 2 || std::time::Instant::now() > deadline {
            break saved;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(saved, ["hello", "0 earlier: hello"]);

    crate::send_signal(&child, nix::sys::signal::Signal::SIGINT);
    let output = finish(child);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    assert!(answers.try_recv().is_err(), "no answer after Ctrl-C");
    drop(stdin);
}

/// An input the plan does not declare is refused before the first turn, as `run` refuses it:
/// exit 2, nothing answered, and the events' lifecycle ends in ERROR.
#[test]
fn an_undeclared_input_ends_the_chat_before_its_first_turn() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let events = dir.path().join("events.jsonl");
    let e = events.display().to_string();
    let (code, stdout, stderr) = chat_with(&["-i", "nope=1", "--events", &e], "hello\n");
    assert_eq!(code, 2, "{stderr}");
    assert!(stdout.is_empty(), "{stdout}");
    assert!(
        stderr.contains("error[CONFIG_INVALID_INPUT]: `nope` is not an input of this plan"),
        "{stderr}"
    );
    let states: Vec<serde_json::Value> = crate::events_in(&events)
        .iter()
        .filter(|e| e["kind"] == "lifecycle")
        .map(|e| e["data"]["state"].clone())
        .collect();
    assert_eq!(states, ["INIT", "PLAN", "PREPARE", "ERROR"]);
}
