//! `pagantic chat`: each line is one turn, earlier turns reach the agent as history, tool calls
//! show on stderr as they happen, a failed turn does not end the conversation, /exit does.

use std::io::Write;

use crate::spawn;

fn chat(lines: &str) -> (i32, String, String) {
    let mut child = spawn(&["chat", "tests/plans/chat.yaml"]);
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(lines.as_bytes())
        .expect("write the conversation");
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
