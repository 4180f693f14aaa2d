//! A `kind: openai` model's `rate_limit` against a stub server that enforces one: it accepts at
//! most a given number of requests in any sliding window (refused ones do not count), answers
//! 429 with `Retry-After: 1` beyond that, and counts what it accepted, refused and had in
//! flight at once.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::any;

use crate::engines::serve_on_loopback;
use crate::{Run, events_in, pagantic_in};

/// What the stub has seen.
#[derive(Default)]
struct Tally {
    /// When each accepted request arrived.
    accepted: Vec<Instant>,
    refused: usize,
    in_flight: usize,
    most_in_flight: usize,
}

/// The stub's rule and its tally.
#[derive(Clone)]
struct Window {
    /// Accepted requests allowed in any `span`.
    limit: usize,
    span: Duration,
    /// How long an accepted request takes to answer.
    latency: Duration,
    tally: Arc<Mutex<Tally>>,
}

/// A rate-limited chat-completions server on a loopback port, on a runtime of its own.
struct LimitedServer {
    port: u16,
    tally: Arc<Mutex<Tally>>,
    _runtime: tokio::runtime::Runtime,
}

impl LimitedServer {
    fn start(limit: usize, span: Duration, latency: Duration) -> LimitedServer {
        let window = Window {
            limit,
            span,
            latency,
            tally: Arc::default(),
        };
        let tally = Arc::clone(&window.tally);
        let router = Router::new()
            .fallback(any(answer_within_limit))
            .with_state(window);
        let (port, runtime) = serve_on_loopback(router);
        LimitedServer {
            port,
            tally,
            _runtime: runtime,
        }
    }

    /// (accepted, refused, most in flight at once).
    fn counts(&self) -> (usize, usize, usize) {
        let tally = self.tally.lock().expect("the tally");
        (tally.accepted.len(), tally.refused, tally.most_in_flight)
    }
}

/// Refuses a request beyond the window's limit; answers any other after the latency.
async fn answer_within_limit(State(window): State<Window>) -> Response {
    {
        let mut tally = window.tally.lock().expect("the tally");
        let now = Instant::now();
        let recent = tally
            .accepted
            .iter()
            .filter(|at| now.duration_since(**at) < window.span)
            .count();
        if recent >= window.limit {
            tally.refused += 1;
            return (
                StatusCode::TOO_MANY_REQUESTS,
                [(header::RETRY_AFTER, "1")],
                r#"{"error":{"message":"rate limit exceeded","type":"rate_limit"}}"#,
            )
                .into_response();
        }
        tally.accepted.push(now);
        tally.in_flight += 1;
        tally.most_in_flight = tally.most_in_flight.max(tally.in_flight);
    }
    // The time the server takes to answer, not a synchronisation.
    tokio::time::sleep(window.latency).await;
    window.tally.lock().expect("the tally").in_flight -= 1;
    let reply = serde_json::json!({
        "choices": [{ "index": 0, "message": { "role": "assistant", "content": "ok" } }],
        "usage": { "prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6 }
    });
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        reply.to_string(),
    )
        .into_response()
}

/// Writes a plan calling the stub with `rate_limit` (a YAML flow mapping, or none) and `rows`
/// rows, then runs it as a batch at `-j 8`.
fn batch_against(dir: &Path, port: u16, rate_limit: Option<&str>, rows: usize) -> Run {
    batch_with(dir, port, rate_limit, rows, &[])
}

/// [`batch_against`] with more arguments.
fn batch_with(dir: &Path, port: u16, rate_limit: Option<&str>, rows: usize, more: &[&str]) -> Run {
    let limit = rate_limit.map_or(String::new(), |limit| format!(", rate_limit: {limit}"));
    std::fs::write(
        dir.join("paced.yaml"),
        format!(
            "version: 1\nname: paced\ninputs:\n  text: {{ type: string }}\nmodels:\n  remote: {{ kind: openai, base_url: \"http://127.0.0.1:{port}/v1\", model: served{limit} }}\nsteps:\n  - {{ name: answer, type: infer, model: remote, template: \"{{{{ inputs.text }}}}\", max_tokens: 4 }}\n"
        ),
    )
    .expect("plan written");
    let text: String = (0..rows)
        .map(|i| format!("{{\"id\": \"r{i}\", \"text\": \"row {i}\"}}\n"))
        .collect();
    std::fs::write(dir.join("rows.jsonl"), text).expect("rows written");
    // A dry run writes no output file (its lines go to stdout).
    let out: &[&str] = match more.contains(&"--dry-run") {
        true => &[],
        false => &["--out", "out.jsonl"],
    };
    let args: Vec<&str> = ["run", "paced.yaml", "--batch", "rows.jsonl", "--id", "id"]
        .iter()
        .chain(out)
        .chain(&["-j", "8"])
        .chain(more)
        .copied()
        .collect();
    pagantic_in(dir, &args)
}

/// [`batch_against`] without a `rate_limit`, writing its summary: the run, the summary and the
/// output lines.
fn unpaced_batch(
    dir: &Path,
    port: u16,
    rows: usize,
) -> (Run, serde_json::Value, Vec<serde_json::Value>) {
    let summary = dir.join("summary.json");
    let run = batch_with(
        dir,
        port,
        None,
        rows,
        &["--summary", summary.to_str().expect("utf-8 path")],
    );
    let summary = serde_json::from_str(&std::fs::read_to_string(&summary).expect("the summary"))
        .expect("JSON");
    let lines = std::fs::read_to_string(dir.join("out.jsonl")).expect("the output");
    let lines = lines
        .lines()
        .map(|line| serde_json::from_str(line).expect("a JSON line"))
        .collect();
    (run, summary, lines)
}

/// At `-j 8`, 12 rows against a server that accepts 2 requests a second (plus a burst of 2) all
/// succeed without one refusal when the model is paced at 120 a minute, and the pace shows in
/// the time taken: 2 at once, then one each half second.
#[test]
fn a_paced_batch_stays_within_the_server_s_limit() {
    let server = LimitedServer::start(6, Duration::from_secs(2), Duration::from_millis(50));
    let dir = tempfile::tempdir().expect("temp dir");
    let started = Instant::now();
    let run = batch_against(
        dir.path(),
        server.port,
        Some("{ requests_per_minute: 120 }"),
        12,
    );
    let took = started.elapsed();
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(run.stderr.contains("12 rows ok"), "{}", run.stderr);
    let (accepted, refused, _) = server.counts();
    assert_eq!((accepted, refused), (12, 0), "{}", run.stderr);
    assert!(
        took >= Duration::from_millis(4500),
        "paced, yet took {took:?}"
    );
}

/// The same batch without a `rate_limit` runs into the server's limit: the stub refuses.
#[test]
fn an_unpaced_batch_is_refused_by_the_same_server() {
    let server = LimitedServer::start(6, Duration::from_secs(2), Duration::from_millis(50));
    let dir = tempfile::tempdir().expect("temp dir");
    let run = batch_against(dir.path(), server.port, None, 12);
    let (_, refused, _) = server.counts();
    assert!(refused > 0, "no 429 without pacing\n{}", run.stderr);
}

/// `max_in_flight` bounds the requests waiting for an answer at once, across the batch's rows.
#[test]
fn max_in_flight_bounds_the_requests_at_once() {
    let server = LimitedServer::start(1000, Duration::from_secs(60), Duration::from_millis(300));
    let dir = tempfile::tempdir().expect("temp dir");
    let run = batch_against(dir.path(), server.port, Some("{ max_in_flight: 2 }"), 8);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let (accepted, refused, most_in_flight) = server.counts();
    assert_eq!(
        (accepted, refused, most_in_flight),
        (8, 0, 2),
        "{}",
        run.stderr
    );
}

/// `--dry-run` says how long the real batch takes at least at the model's `rate_limit`: 90
/// calls at 60 a minute, a minute and a half; nothing reaches the server.
#[test]
fn a_dry_run_estimates_the_paced_duration() {
    let server = LimitedServer::start(1000, Duration::from_secs(60), Duration::ZERO);
    let dir = tempfile::tempdir().expect("temp dir");
    let run = batch_with(
        dir.path(),
        server.port,
        Some("{ requests_per_minute: 60 }"),
        90,
        &["--dry-run"],
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stderr
            .contains("at model `remote`'s rate_limit, 90 model calls")
            && run.stderr.contains("take at least 1:30"),
        "{}",
        run.stderr
    );
    assert_eq!(server.counts().0, 0, "a dry run calls no model");
}

/// Without a `rate_limit`, 8 rows at `-j 8` against a server that takes 4 requests a second:
/// the refused rows wait out its `Retry-After` and the spacing its 429s impose, every row
/// succeeds, and the batch summary counts the 429s and the time waited.
#[test]
fn the_summary_counts_the_429s_and_the_time_waited() {
    let server = LimitedServer::start(4, Duration::from_secs(1), Duration::ZERO);
    let dir = tempfile::tempdir().expect("temp dir");
    let (run, summary, lines) = unpaced_batch(dir.path(), server.port, 8);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let (accepted, refused, _) = server.counts();
    assert_eq!(accepted, 8);
    assert!(refused > 0, "the stub refused some: {}", run.stderr);
    assert_eq!(summary["rate_limited"], refused as u64, "{summary}");
    let refused_rows: u64 = lines
        .iter()
        .filter_map(|line| line["rate_limit"]["refused"].as_u64())
        .sum();
    assert_eq!(
        refused_rows, refused as u64,
        "each row's line counts its own 429s"
    );
    assert!(
        summary["rate_limit_wait_ms"]
            .as_f64()
            .is_some_and(|ms| ms > 0.0),
        "{summary}"
    );
    assert!(run.stderr.contains("rate limits: "), "{}", run.stderr);
}

/// A call refused until its retries are spent still books its waits and 429s: against a server
/// that refuses everything, the row fails retryably (exit 75), its line carries the 429s its
/// call was answered, and the summary, which adds up the rows' records, counts the same.
#[test]
fn a_call_that_fails_in_the_end_still_counts_its_429s_and_waits() {
    let server = LimitedServer::start(0, Duration::from_secs(1), Duration::ZERO);
    let dir = tempfile::tempdir().expect("temp dir");
    let (run, summary, lines) = unpaced_batch(dir.path(), server.port, 1);
    assert_eq!(run.code, 75, "{}", run.stderr);
    let (accepted, refused, _) = server.counts();
    assert_eq!(accepted, 0);
    assert!(refused > 1, "the call was tried again: {refused}");
    let [line] = &lines[..] else {
        panic!("one line: {lines:?}")
    };
    assert_eq!(line["error"]["code"], "INFERENCE_RATE_LIMITED", "{line}");
    assert_eq!(line["rate_limit"]["refused"], refused as u64, "{line}");
    assert_eq!(summary["rate_limited"], refused as u64, "{summary}");
    assert!(
        summary["rate_limit_wait_ms"]
            .as_f64()
            .is_some_and(|ms| ms > 0.0),
        "{summary}"
    );
}

/// Runs a plan of two calls in turn (the second fed by the first) against the stub, once, its
/// model declared with `more` fields: the run record and the events.
fn two_calls_against(
    dir: &Path,
    port: u16,
    more: &str,
) -> (serde_json::Value, Vec<serde_json::Value>) {
    std::fs::write(
        dir.join("twice.yaml"),
        format!(
            "version: 1\nname: twice\ninputs:\n  text: {{ type: string }}\nmodels:\n  remote: {{ kind: openai, base_url: \"http://127.0.0.1:{port}/v1\", model: served{more} }}\nsteps:\n  - {{ name: first, type: infer, model: remote, template: \"{{{{ inputs.text }}}}\", max_tokens: 4 }}\n  - {{ name: second, type: infer, model: remote, template: \"again {{{{ steps.first.output }}}}\", max_tokens: 4 }}\n"
        ),
    )
    .expect("plan written");
    let events = dir.join("events.jsonl");
    let events_arg = events.to_str().expect("utf-8 path");
    let args = ["run", "twice.yaml", "-i", "text=hello", "--format", "json"];
    let run = pagantic_in(dir, &[&args[..], &["--events", events_arg]].concat());
    assert_eq!(run.code, 0, "{}", run.stderr);
    let record = serde_json::from_str(&run.stdout).expect("the run record");
    (record, events_in(&events))
}

/// A run's record carries what its calls waited for the model's pace and the 429s they were
/// answered: against a server taking one request a second, the second call is refused once and
/// waits out the second; a server with room to spare leaves `rate_limit` out of the record. The
/// call that waited says so in its event, and its `duration_ms` is its own time without the wait.
#[test]
fn the_run_record_counts_its_waits_and_429s() {
    let server = LimitedServer::start(1, Duration::from_secs(1), Duration::ZERO);
    let dir = tempfile::tempdir().expect("temp dir");
    let (record, events) = two_calls_against(dir.path(), server.port, "");
    let calls: Vec<&serde_json::Value> = events
        .iter()
        .filter(|e| e["kind"] == "inference")
        .map(|e| &e["data"])
        .collect();
    assert_eq!(calls.len(), 2, "{events:?}");
    assert!(
        calls[0].get("rate_limit_wait_ms").is_none(),
        "{:?}",
        calls[0]
    );
    let waited = calls[1]["rate_limit_wait_ms"].as_u64().expect("a wait");
    assert!(waited >= 900, "{:?}", calls[1]);
    let own = calls[1]["duration_ms"].as_f64().expect("a duration");
    assert!(own < waited as f64, "{:?}", calls[1]);
    let (accepted, refused, _) = server.counts();
    assert_eq!(accepted, 2, "{record}");
    assert_eq!(record["rate_limit"]["refused"], refused as u64, "{record}");
    assert!(refused >= 1, "{record}");
    assert!(
        record["rate_limit"]["waited_ms"]
            .as_u64()
            .is_some_and(|ms| ms >= 900),
        "{record}"
    );

    let roomy = LimitedServer::start(1000, Duration::from_secs(60), Duration::ZERO);
    let (record, _) = two_calls_against(dir.path(), roomy.port, "");
    assert!(record.get("rate_limit").is_none(), "{record}");
}

/// An `openai` model's declared `context_window` is reported with each of its calls, as a
/// local model's is; undeclared, the events leave it out.
#[test]
fn a_declared_context_window_reaches_the_inference_events() {
    let server = LimitedServer::start(1000, Duration::from_secs(60), Duration::ZERO);
    let dir = tempfile::tempdir().expect("temp dir");
    let windows = |more: &str| -> Vec<serde_json::Value> {
        let (_, events) = two_calls_against(dir.path(), server.port, more);
        events
            .iter()
            .filter(|event| event["kind"] == "inference")
            .map(|event| event["data"]["context_window"].clone())
            .collect()
    };
    assert_eq!(
        windows(", context_window: 8192"),
        [serde_json::json!(8192), serde_json::json!(8192)]
    );
    assert_eq!(
        windows(""),
        [serde_json::Value::Null, serde_json::Value::Null]
    );
}
