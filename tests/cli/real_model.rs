//! A few short tests on the real embedded model (Qwen2.5-Coder-0.5B on mistral.rs, CPU). They need
//! the model in the cache: the README's test command runs `pagantic models pull` first, and so
//! does CI. Each loads the model once (~6 s) and generates a handful of tokens; the example plans
//! share one load, served by one `pagantic serve`.

use serde_json::{Value, json};

use crate::serve::{Server, post};
use crate::{events_in, pagantic, step};

/// How long a run on the real model may take before the test fails: minutes, as cargo runs a
/// model process per core.
const RUN_PATIENCE: std::time::Duration = std::time::Duration::from_secs(600);

/// Fails with the fix when the model has not been pulled.
fn require_model() {
    let listed = pagantic(&["models", "list"]);
    assert!(
        listed.code == 0 && listed.stdout.contains("qwen2.5-coder-0.5b-instruct"),
        "these tests need the embedded model: run `cargo run -- models pull` first\n{}{}",
        listed.stdout,
        listed.stderr
    );
}

/// `pagantic run --no-stream --format json ARGS…` on the real models; the run must complete.
fn completed_record(args: &[&str]) -> Value {
    completed_run(args).0
}

/// Like [`completed_record`], with what the run printed on stderr.
fn completed_run(args: &[&str]) -> (Value, String) {
    require_model();
    let mut argv = vec!["run", "--no-stream", "--format", "json"];
    argv.extend_from_slice(args);
    let run = pagantic(&argv);
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    let record = serde_json::from_str(&run.stdout).expect("json record");
    (record, run.stderr)
}

/// The stderr of `pagantic run --no-stream PLAN`, which must fail (exit 1).
fn failed_run(plan: &str) -> String {
    require_model();
    let run = pagantic(&["run", "--no-stream", plan]);
    assert_eq!(run.code, 1, "{}", run.stderr);
    run.stderr
}

#[test]
fn the_quickstart_plan_answers_paris() {
    require_model();
    let run = pagantic(&["run", "--no-stream", "plans/quickstart.yaml"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    // Greedy decoding on another CPU's SIMD path may word it differently; the city stays.
    assert!(
        run.stdout.to_lowercase().contains("paris"),
        "answer: {}\n{}",
        run.stdout,
        run.stderr
    );
}

#[test]
fn decoder_constraints_hold_on_the_local_model() {
    let (record, stderr) = completed_run(&["tests/plans/constraints-local.yaml"]);
    assert_eq!(
        stderr.matches("loading ").count(),
        1,
        "two models differing only in decoder_constraints share one load: {stderr}"
    );
    let yes_no = step(&record, "yes_no");
    let answer = yes_no["output"].as_str().unwrap_or_default();
    assert!(answer == "yes" || answer == "no", "regex: {answer:?}");
    // The answer ends where the grammar does, not at max_tokens.
    let tokens = yes_no["usage"]["completion_tokens"].as_u64();
    assert!(tokens.is_some_and(|t| t < 16), "{tokens:?}");
    let colour = step(&record, "colour")["output"]
        .as_str()
        .unwrap_or_default();
    assert!(
        ["colour: blue", "colour: white", "colour: red"].contains(&colour),
        "gbnf: {colour:?}"
    );
    let verdict = step(&record, "verdict")["output"]
        .as_str()
        .unwrap_or_default();
    assert!(
        ["verdict: yes", "verdict: no"].contains(&verdict),
        "lark: {verdict:?}"
    );
    let review = step(&record, "review");
    assert_eq!(review["detail"]["constrained"], true);
    assert_eq!(review["detail"]["retries"], 0);
    let sentiment = review["output"]["sentiment"].as_str().unwrap_or_default();
    assert!(
        ["positive", "negative", "neutral"].contains(&sentiment),
        "{review}"
    );
    let rating = review["output"]["rating"].as_i64().unwrap_or_default();
    assert!((1..=5).contains(&rating), "{review}");

    // Without decoder constraints the schema is checked after decoding, and still holds.
    let unguided = step(&record, "unguided_review");
    assert_eq!(unguided["detail"]["constrained"], false, "{unguided}");
    let sentiment = unguided["output"]["sentiment"].as_str().unwrap_or_default();
    assert!(
        ["positive", "negative", "neutral"].contains(&sentiment),
        "{unguided}"
    );
    let rating = unguided["output"]["rating"].as_i64().unwrap_or_default();
    assert!((1..=5).contains(&rating), "{unguided}");
}

#[test]
fn the_local_model_routes_a_catalog_question_in_two_calls() {
    let dir = tempfile::tempdir().expect("temp dir");
    let events_file = dir.path().join("route-local.jsonl");
    let record = completed_record(&[
        "--events",
        events_file.to_str().unwrap_or_default(),
        "tests/plans/storefront-local.yaml",
    ]);
    let detail = &record["steps"][0]["detail"];
    let mode = detail["route"]["mode"].as_str().unwrap_or_default();
    assert!(
        ["single", "parallel", "sequential"].contains(&mode),
        "{detail}"
    );
    let results = detail["results"].as_array().cloned().unwrap_or_default();
    assert!(!results.is_empty(), "{detail}");
    for result in &results {
        assert!(
            ["search", "reviews"].contains(&result["agent"].as_str().unwrap_or_default()),
            "{detail}"
        );
    }
    assert!(
        record["output"]
            .as_str()
            .is_some_and(|answer| !answer.trim().is_empty()),
        "{record}"
    );
    let events = events_in(&events_file);
    let calls: Vec<&Value> = events
        .iter()
        .filter(|event| event["kind"] == "inference")
        .collect();
    assert_eq!(calls.len(), 2, "exactly two model calls");
    // The model's load is reported apart from the first call, and kept out of its rate.
    let loads: Vec<&Value> = events
        .iter()
        .filter(|event| event["kind"] == "model_load")
        .collect();
    assert_eq!(loads.len(), 1, "one load: {loads:?}");
    let first = &calls[0]["data"];
    assert!(
        first["model_load_ms"].as_u64().is_some_and(|ms| ms > 0),
        "{first}"
    );
    assert!(calls[1]["data"].get("model_load_ms").is_none());
    let (own_ms, tokens) = (
        first["duration_ms"].as_f64().unwrap_or_default(),
        first["usage"]["completion_tokens"]
            .as_f64()
            .unwrap_or_default(),
    );
    let rate = first["tokens_per_second"].as_f64().unwrap_or_default();
    assert!((rate * own_ms / 1000.0 - tokens).abs() < 1e-6, "{first}");
}

#[test]
fn a_prompt_longer_than_context_length_is_refused_before_decoding() {
    let stderr = failed_run("tests/plans/context-local.yaml");
    assert!(
        stderr.contains("INFERENCE_CONTEXT_EXCEEDED") && stderr.contains("context_length of 256"),
        "{stderr}"
    );
}

/// The agent, classify and RAG example plans, served by one `pagantic serve` and run through its
/// HTTP API: one process, so the LLM is loaded once for the three (and the server is tried on the
/// real models), each record checked as a `run` of the plan would be.
#[tokio::test]
async fn the_example_plans_share_one_loaded_model_through_serve() {
    require_model();
    let mut server = Server::start(
        &["plans/agent.yaml", "plans/classify.yaml", "plans/rag.yaml"],
        &[],
    );
    // Bounded, so a server that stops answering fails the test instead of hanging it.
    let run = async |plan: &str, inputs: Value| {
        let path = format!("/v1/plans/{plan}/runs");
        let request = post(&server, &path, &inputs);
        let (status, record) = tokio::time::timeout(RUN_PATIENCE, request)
            .await
            .unwrap_or_else(|_| panic!("{plan} did not answer within {RUN_PATIENCE:?}"));
        assert_eq!(status, reqwest::StatusCode::OK, "{plan}: {record}");
        record
    };
    the_agent_called_the_calculator(&run("research-agent", json!({})).await);
    let review = "The battery died after two days and support never answered. Avoid.";
    the_review_was_extracted_and_voted_on(
        &run("classify-review", json!({ "review": review })).await,
    );
    let question = "How do I resume a batch?";
    the_rag_answer_was_reranked_by_minilm(
        &run("support-answer", json!({ "question": question })).await,
    );
    server.terminate();
    server.wait_for_line(|l| l.contains("stopped"));
    let loads = server
        .seen()
        .iter()
        .filter(|l| l.contains("loading "))
        .count();
    assert_eq!(loads, 1, "one load for three plans: {:#?}", server.seen());
}

/// The agent plan's answer has the product, and the calculator was called.
fn the_agent_called_the_calculator(record: &Value) {
    assert!(
        record["output"].as_str().is_some_and(|answer| {
            // Grouped as the model likes: 7,006,652 or 7 006 652.
            let digits: String = answer
                .chars()
                .filter(|c| !matches!(c, ',' | ' ' | '\u{202f}'))
                .collect();
            digits.contains("7006652")
        }),
        "{record}"
    );
    let calls = record["steps"][0]["detail"]["tool_calls"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(
        calls
            .iter()
            .any(|c| c["tool"] == "calculator" && c["ok"] == true),
        "{record}"
    );
}

/// The classify plan extracted constrained JSON and three candidates voted "negative".
fn the_review_was_extracted_and_voted_on(record: &Value) {
    let extract = &record["steps"][0];
    assert_eq!(extract["output"]["sentiment"], "negative", "{extract}");
    assert_eq!(extract["detail"]["constrained"], true);
    let vote = &record["steps"][1]["output"];
    assert_eq!(vote["candidates"].as_array().map(Vec::len), Some(3));
    assert!(
        vote["value"]
            .as_str()
            .is_some_and(|v| v.to_lowercase().contains("negative")),
        "{vote}"
    );
}

/// rag.yaml retrieved from corpus/docs, reranked with the embedded MiniLM on ONNX Runtime and
/// answered with the local LLM; the record shows every candidate's rerank score.
fn the_rag_answer_was_reranked_by_minilm(record: &Value) {
    assert_eq!(record["status"], "complete", "{record}");
    let rerank = step(record, "rerank");
    assert!(
        rerank["detail"]["scorer"] == "bi-encoder:all-minilm-l6-v2-int8",
        "{rerank}"
    );
    let candidates = rerank["output"].as_array().expect("candidates");
    assert_eq!(
        candidates[0]["source"], "../corpus/docs/batch.md",
        "{rerank}"
    );
    assert!(
        candidates
            .iter()
            .all(|c| c["score"].as_f64().is_some_and(|s| s >= 0.1)),
        "every kept candidate has its cosine score, at least min_score: {rerank}"
    );
}

#[test]
fn batch_rows_sharing_a_prompt_prefix_get_the_answers_they_get_alone() {
    require_model();
    let questions = [
        ("screen", "How long does a screen repair take?"),
        ("delivery", "Is delivery free for a 20 euro cable?"),
        ("warranty", "What is the warranty on a refurbished phone?"),
    ];
    let dir = tempfile::tempdir().expect("temp dir");
    let (rows, out) = (dir.path().join("rows.jsonl"), dir.path().join("out.jsonl"));
    let text: String = questions
        .iter()
        .map(|(id, question)| format!("{}\n", json!({ "id": id, "question": question })))
        .collect();
    std::fs::write(&rows, text).expect("rows written");
    let plan = "tests/plans/shared-prefix-local.yaml";
    let path = |p: &std::path::Path| p.to_str().expect("utf-8").to_string();
    let (rows, out) = (path(&rows), path(&out));
    // All rows at once: each after the first finds the instructions in the prefix cache.
    let run = pagantic(&[
        "run", plan, "--batch", &rows, "--out", &out, "--id", "id", "-j", "3",
    ]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let batched: Vec<Value> = std::fs::read_to_string(&out)
        .expect("output")
        .lines()
        .map(|line| serde_json::from_str(line).expect("json line"))
        .collect();
    assert_eq!(batched.len(), questions.len());
    for (id, question) in questions {
        // Alone: a process of its own, so an empty prefix cache.
        let input = format!("question={question}");
        let alone = completed_record(&[plan, "-i", &input]);
        let row = batched
            .iter()
            .find(|line| line["row"].as_str() == Some(id))
            .unwrap_or_else(|| panic!("no row {id} in {batched:?}"));
        assert_eq!(row["output"], alone["output"], "{question}");
    }
}

/// Ctrl-C while the model loads cancels the run at once (exit 75, CANCELLED), without waiting
/// for the load to finish or answering.
#[test]
fn a_signal_during_the_model_load_cancels_the_run() {
    require_model();
    let dir = tempfile::tempdir().expect("temp dir");
    let events_file = dir.path().join("events.jsonl");
    let mut child = crate::spawn(&[
        "run",
        "--no-stream",
        "--no-cache",
        "--events",
        events_file.to_str().expect("utf-8 path"),
        "plans/quickstart.yaml",
    ]);
    let stderr = std::io::BufReader::new(child.stderr.take().expect("stderr"));
    let (sender, lines) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufRead::lines(stderr).map_while(Result::ok) {
            let _ = sender.send(line);
        }
    });
    let deadline = std::time::Instant::now() + crate::RUN_LIMIT;
    let loading = std::iter::from_fn(|| {
        lines
            .recv_timeout(deadline.saturating_duration_since(std::time::Instant::now()))
            .ok()
    })
    .find(|line| line.contains("loading "))
    .expect("the load starts");
    crate::send_signal(&child, nix::sys::signal::Signal::SIGINT);
    let output = crate::finish_within(child, crate::RUN_LIMIT);
    let said: Vec<String> = lines.iter().collect();
    assert_eq!(output.status.code(), Some(75), "{loading}\n{said:#?}");
    assert!(
        said.iter()
            .any(|l| l == "error[CANCELLED_SIGNAL]: the run was cancelled"),
        "{said:#?}"
    );
    assert!(output.stdout.is_empty(), "no answer");
    let events = events_in(&events_file);
    let ends: Vec<&Value> = events
        .iter()
        .filter(|e| e["kind"] == "step_end")
        .map(|e| &e["data"]["status"])
        .collect();
    assert_eq!(ends, ["cancelled"]);
    assert_eq!(
        events.last().map(|e| &e["data"]["state"]),
        Some(&json!("CANCELLED"))
    );
}
