//! `pagantic chat`: each line is one turn, earlier turns reach the agent as history, tool calls
//! show on stderr as they happen, a failed turn does not end the conversation, /exit does.

use std::io::Write;

use crate::spawn;

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
    let output = child.wait_with_output().expect("pagantic ends");
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
    // the turn fails, the conversation does not.
    let (code, stdout, stderr) = chat_plan(plan, &[], "ahoy\n");
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.is_empty(), "{stdout}");
    assert!(stderr.contains("message"), "{stderr}");
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
