//! Retrieval through the binary: a custom retriever (a command tool) feeding `rerank`, duplicates
//! dropped, a character budget, the retrieval score kept, and a retriever printing a bad shape.

use serde_json::Value;

use crate::{events_in, pagantic, step};

/// The sources of a list of candidates, in order.
fn sources(candidates: &Value) -> Vec<&str> {
    candidates
        .as_array()
        .expect("a list of candidates")
        .iter()
        .map(|c| c["source"].as_str().expect("source"))
        .collect()
}

#[test]
fn a_retriever_tool_feeds_rerank_with_distinct_passages_within_the_budget() {
    let dir = tempfile::tempdir().expect("temp dir");
    let events_file = dir.path().join("events.jsonl");
    let run = pagantic(&[
        "run",
        "--format",
        "json",
        "--events",
        events_file.to_str().expect("utf-8"),
        "tests/plans/custom-retriever.yaml",
    ]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let record: Value = serde_json::from_str(&run.stdout).expect("a run record");

    // The tool was asked for the step's `limit` and printed four notes, one of them twice (a
    // mirror): the copy is dropped.
    let call = events_in(&events_file)
        .into_iter()
        .find(|e| e["kind"] == "tool_start")
        .expect("the retriever tool was called");
    assert_eq!(call["data"]["tool"], "search");
    assert_eq!(call["data"]["args"]["limit"], 4);
    assert_eq!(
        call["data"]["args"]["query"],
        "how do I validate every plan in CI"
    );
    let retrieved = &step(&record, "retrieve")["output"];
    assert_eq!(sources(retrieved), ["ci.md", "policy.md", "batch.md"]);
    assert_eq!(retrieved[0]["score"], 0.5);
    assert_eq!(
        retrieved[1]["metadata"]["rank"], 2,
        "metadata passes through"
    );

    // Rerank keeps what fits in 160 characters, cutting the candidate that crosses the budget,
    // and keeps the score each candidate came with.
    let reranked = step(&record, "rerank")["output"]
        .as_array()
        .expect("candidates");
    let chars: usize = reranked
        .iter()
        .map(|c| c["content"].as_str().expect("content").chars().count())
        .sum();
    assert_eq!(chars, 160, "{reranked:?}");
    let last = reranked.last().expect("at least one");
    assert_eq!(last["metadata"]["truncated"], true);
    for candidate in reranked {
        let earlier = retrieved
            .as_array()
            .and_then(|r| r.iter().find(|c| c["source"] == candidate["source"]))
            .expect("reranked from the retrieved ones");
        assert_eq!(candidate["metadata"]["retrieval_score"], earlier["score"]);
    }
}

#[test]
fn a_retriever_tool_printing_a_bad_shape_fails_naming_the_item_and_field() {
    let run = pagantic(&[
        "run",
        "-i",
        "shape=bad",
        "tests/plans/custom-retriever.yaml",
    ]);
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(
        run.stderr.contains(
            "error[TOOL_BAD_OUTPUT]: retriever tool `broken_search` returned a bad item: [1] has the unknown field `text`"
        ),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr
            .contains("help: a retriever tool returns a JSON list"),
        "{}",
        run.stderr
    );
}
