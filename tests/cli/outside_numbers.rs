//! Numbers from outside — a cache row's counts and times — read saturating: rows that claim
//! 2^64 tokens or were last used at `i64::MIN` are still answers, and their sums (the run's usage,
//! the tokens the cache saved) stop at the largest count, never failing the run.

use crate::pagantic_in;

const PLAN: &str = r#"version: 1
name: counted
inputs:
  text: { type: string }
models:
  echo: { kind: scripted, echo: true }
steps:
  - { name: answer, type: infer, model: echo, template: "say {{ inputs.text }}" }
  - { name: again, type: infer, model: echo, template: "again: {{ steps.answer.output }}" }
"#;

#[test]
fn a_cache_row_with_absurd_numbers_is_still_an_answer() {
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::write(dir.path().join("plan.yaml"), PLAN).expect("plan");
    let args = [
        "run",
        "plan.yaml",
        "-i",
        "text=hi",
        "--cache",
        "cache",
        "--format",
        "json",
    ];
    let first = pagantic_in(dir.path(), &args);
    assert_eq!(first.code, 0, "{}", first.stderr);
    let database =
        rusqlite::Connection::open(dir.path().join("cache/cache.db")).expect("the cache");
    let rows: Vec<(Vec<u8>, String)> = database
        .prepare("SELECT key, value FROM entries")
        .and_then(|mut rows| {
            rows.query_map([], |row| Ok((row.get(0)?, row.get(1)?)))?
                .collect()
        })
        .expect("the cached answers");
    assert_eq!(rows.len(), 2, "one answer per step");
    for (key, value) in rows {
        let mut stored: serde_json::Value = serde_json::from_str(&value).expect("JSON");
        stored["usage"]["prompt_tokens"] = serde_json::json!("PROMPT");
        let poisoned = stored
            .to_string()
            .replace("\"PROMPT\"", "18446744073709551616");
        database
            .execute(
                "UPDATE entries SET value = ?1, used_at = ?2 WHERE key = ?3",
                rusqlite::params![poisoned, i64::MIN, key],
            )
            .expect("updated");
    }
    drop(database);
    let second = pagantic_in(dir.path(), &args);
    assert_eq!(second.code, 0, "{}", second.stderr);
    let record: serde_json::Value = serde_json::from_str(&second.stdout).expect("a record");
    assert_eq!(record["output"], "again: say hi");
    assert_eq!(record["cache"]["hits"], 2, "{record}");
    for sum in [
        &record["usage"]["prompt_tokens"],
        &record["cache"]["tokens_saved"],
    ] {
        assert_eq!(*sum, serde_json::json!(u64::MAX), "{record}");
    }
    // The run's saved tokens went into the cache's run log; a third run saves as many again,
    // and their sum, read back by `cache stats`, saturates too.
    let third = pagantic_in(dir.path(), &args);
    assert_eq!(third.code, 0, "{}", third.stderr);
    let stats = pagantic_in(dir.path(), &["cache", "stats", "--cache", "cache"]);
    assert_eq!(stats.code, 0, "{}", stats.stderr);
}
