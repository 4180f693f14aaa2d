//! An agent's answer streams as it is written — in `chat`, in `run --stream`, in serve's
//! server-sent events — on scripted models, whose streamed answers arrive word by word. A native
//! round's text is shown as it comes and never withdrawn, and a round that turns into a tool call
//! is shown as the call; a round whose tool call is read from its text (`tool_calls: prompt`) is
//! shown only once it is known to be the final answer.

use std::io::Write;
use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};

use crate::serve::{Server, sse_events};
use crate::{command, fresh_cache_dir, root};

const NATIVE: &str = "tests/plans/streaming/native.yaml";
const PROMPT: &str = "tests/plans/streaming/prompt.yaml";

/// The native agent's first round: what it says before it calls the calculator.
const SAID_BEFORE_THE_CALL: &str = "Let me add that.";
/// The native agent's answer.
const NATIVE_ANSWER: &str = "The sum is four, as the calculator says.";

/// How long a chat may take before the test fails.
const PATIENCE: Duration = Duration::from_secs(60);

/// What `chat PLAN` printed on stdout and stderr together, in the order it printed them, for
/// `line` typed; and its exit code.
fn chat_interleaved(plan: &str, line: &str) -> (i32, String) {
    let dir = tempfile::tempdir().expect("a temp dir");
    let both = dir.path().join("output.txt");
    let file = std::fs::File::create(&both).expect("an output file");
    let mut child = command(&fresh_cache_dir())
        .args(["chat", plan])
        .current_dir(root())
        .stdin(Stdio::piped())
        .stdout(file.try_clone().expect("a second handle"))
        .stderr(file)
        .spawn()
        .expect("pagantic starts");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(format!("{line}\n").as_bytes())
        .expect("a line typed");
    let output = crate::finish_within(child, PATIENCE);
    let printed = std::fs::read_to_string(&both).expect("the output");
    (output.status.code().unwrap_or(-1), printed)
}

/// Where `needle` is in `haystack`; the test fails when it is not there.
fn at(haystack: &str, needle: &str) -> usize {
    haystack
        .find(needle)
        .unwrap_or_else(|| panic!("no {needle:?} in:\n{haystack}"))
}

/// The native agent's first round is shown as it is written, before its tool call runs (so
/// before the step ends), on a line of its own; then the call; then the answer.
#[test]
fn chat_shows_a_native_round_as_it_comes_then_its_tool_call_then_the_answer() {
    let (code, printed) = chat_interleaved(NATIVE, "what is 2 + 2?");
    assert_eq!(code, 0, "{printed}");
    let said = at(&printed, &format!("{SAID_BEFORE_THE_CALL}\n"));
    let call = at(&printed, "  → calculator {\"expression\":\"2 + 2\"}\n");
    let result = at(&printed, "  ← calculator ok (");
    let answer = at(&printed, &format!("{NATIVE_ANSWER}\n"));
    assert!(said < call && call < result && result < answer, "{printed}");
    assert_eq!(
        printed.matches(NATIVE_ANSWER).count(),
        1,
        "a streamed answer is not printed again: {printed}"
    );
}

/// In prompt mode a round's text is the JSON of a call or of an answer: the call is shown as the
/// call, and only the final answer, once read, reaches stdout.
#[test]
fn chat_shows_a_prompt_mode_round_once_it_is_known_to_be_final() {
    let (code, printed) = chat_interleaved(PROMPT, "what is 2 + 2?");
    assert_eq!(code, 0, "{printed}");
    let call = at(&printed, "  → calculator {\"expression\":\"2 + 2\"}\n");
    let answer = at(&printed, "The sum is four.\n");
    assert!(call < answer, "{printed}");
    assert!(!printed.contains("\"tool\""), "{printed}");
    assert!(!printed.contains("\"final\""), "{printed}");
}

/// `run --stream` prints every round's text as it comes, each on a line of its own (the final
/// answer last); without it, only the answer, once.
#[test]
fn run_streams_an_agents_rounds_only_when_asked() {
    let streamed = crate::pagantic(&["run", "-q", "--stream", NATIVE, "-i", "message=2 + 2?"]);
    assert_eq!(streamed.code, 0, "{}", streamed.stderr);
    assert_eq!(
        streamed.stdout,
        format!("{SAID_BEFORE_THE_CALL}\n{NATIVE_ANSWER}\n")
    );
    let whole = crate::pagantic(&["run", "-q", "--no-stream", NATIVE, "-i", "message=2 + 2?"]);
    assert_eq!(whole.code, 0, "{}", whole.stderr);
    assert_eq!(whole.stdout, format!("{NATIVE_ANSWER}\n"));
    let prompt = crate::pagantic(&["run", "-q", "--stream", PROMPT, "-i", "message=2 + 2?"]);
    assert_eq!(prompt.code, 0, "{}", prompt.stderr);
    assert_eq!(prompt.stdout, "The sum is four.\n");
}

/// The `token` events' texts between two positions of `events`.
fn tokens_between(events: &[(String, Value)], from: usize, to: usize) -> Vec<&str> {
    events[from..to]
        .iter()
        .filter(|(kind, _)| kind == "token")
        .filter_map(|(_, data)| data["text"].as_str())
        .collect()
}

/// Where the first event of `kind` is (and, for a step's events, of step `reply`).
fn position(events: &[(String, Value)], kind: &str) -> usize {
    events
        .iter()
        .position(|(k, data)| k == kind && (data["step"].is_null() || data["step"] == "reply"))
        .unwrap_or_else(|| panic!("no {kind} in {events:?}"))
}

/// Serve's stream of an agent plan: a native round's words as `token` events before its tool
/// call starts, the answer's words after the call and before the step ends; in prompt mode only
/// the final answer, in one piece, after the call.
#[tokio::test]
async fn served_agent_runs_stream_their_text_as_token_events() {
    let server = Server::start(&[NATIVE, PROMPT], &[]);
    let events = stream_run(&server, "native").await;
    let (call, ended) = (
        position(&events, "tool_start"),
        position(&events, "step_end"),
    );
    assert_eq!(
        tokens_between(&events, 0, call),
        ["Let", " me", " add", " that."]
    );
    let answer = tokens_between(&events, call, ended);
    assert!(answer.len() > 1, "word by word: {answer:?}");
    assert_eq!(answer.concat(), NATIVE_ANSWER);
    assert!(tokens_between(&events, ended, events.len()).is_empty());
    let (last, record) = events.last().expect("events");
    assert_eq!(
        (last.as_str(), &record["output"]),
        ("record", &json!(NATIVE_ANSWER))
    );

    let events = stream_run(&server, "prompt").await;
    let (call, ended) = (position(&events, "tool_end"), position(&events, "step_end"));
    assert!(tokens_between(&events, 0, call).is_empty(), "{events:?}");
    assert_eq!(tokens_between(&events, call, ended), ["The sum is four."]);
}

/// The server-sent events of a streamed run of `plan`.
async fn stream_run(server: &Server, plan: &str) -> Vec<(String, Value)> {
    let response = crate::serve::client()
        .post(server.url(&format!("/v1/plans/{plan}/runs?stream=true")))
        .json(&json!({ "message": "what is 2 + 2?" }))
        .send()
        .await
        .expect("an answer");
    sse_events(&response.text().await.expect("the stream"))
}
