//! Files and flags that lie or never end: a cassette with a count past SQLite's integers, a cache
//! "database" whose `entries` is an endless recursive view, batch parts that are cut, huge,
//! endless or without a record, side files of a reduce left by another input, a dry run asked to
//! write an output, and a policy whose verdict every command must give alike.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::{Run, pagantic, path_arg as s, scratch};

/// A cassette entry whose `tokens` is 2^64-1 (a server's word, recorded as it was) is imported:
/// stored as the largest count the cache holds, not a refusal of the whole cassette.
#[test]
fn a_cassette_count_past_sqlite_s_integers_is_imported_saturated() {
    let cassette = scratch("huge.cassette.jsonl");
    let key = "a".repeat(64);
    let answer = json!({ "text": "hi", "usage": { "prompt_tokens": 1, "completion_tokens": 1 }, "prompt_ms": 1.0, "completion_ms": 1.0 });
    std::fs::write(
        &cassette,
        format!(
            "{{\"pagantic_cassette\":1,\"entries\":1}}\n{{\"key\":\"{key}\",\"kind\":\"call\",\"tokens\":18446744073709551615,\"duration_ms\":1.0,\"value\":{answer}}}\n"
        ),
    )
    .expect("cassette");
    let cache = scratch("cache");
    let run = pagantic(&["cache", "import", s(&cassette), "--cache", s(&cache)]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(run.stdout.contains("1 added"), "{}", run.stdout);
    let stats = pagantic(&["cache", "stats", "--cache", s(&cache), "--format", "json"]);
    assert_eq!(stats.code, 0, "{}", stats.stderr);
}

/// `cache merge` of a "database" whose `entries` is an endless recursive view is refused before
/// anything is stored (it reads only plain tables), and the target is left as it was.
#[test]
fn cache_merge_refuses_an_endless_view() {
    let other = scratch("other");
    std::fs::create_dir_all(&other).expect("directory");
    let connection = rusqlite::Connection::open(other.join("cache.db")).expect("a database");
    connection
        .execute_batch(
            "PRAGMA user_version = 1;
             CREATE VIEW entries (key, kind, value, tokens, duration_ms) AS
               WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n)
               SELECT randomblob(32), 'call', hex(randomblob(64)), i, 1.0 FROM n;",
        )
        .expect("the view");
    drop(connection);
    let mine = scratch("mine");
    let run = pagantic(&["cache", "merge", s(&other), "--cache", s(&mine)]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(run.stderr.contains("not a table"), "{}", run.stderr);
    let stats = pagantic(&["cache", "stats", "--cache", s(&mine), "--format", "json"]);
    let stats: Value = serde_json::from_str(&stats.stdout).expect("stats");
    assert_eq!(stats["kinds"], json!([]), "nothing stored: {stats}");
}
