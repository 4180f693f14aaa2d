//! ONNX scorers through the binary: the tiny committed cross-encoder against its Python
//! reference, the embedded MiniLM ranking a small committed set, and the failures a user can
//! meet (no runtime library, a foreign library, a missing model). The tests that run a model
//! need the ONNX Runtime library (and, for MiniLM, the model) pulled: the README's test command
//! runs `pagantic models pull` first, and so does CI.

use serde_json::Value;

use crate::{pagantic, pagantic_with, root, step};

/// Fails with the fix when the ONNX models have not been pulled.
fn require_onnx_models() {
    let listed = pagantic(&["models", "list"]);
    assert!(
        listed.stdout.contains("onnxruntime-1.31.1")
            && listed.stdout.contains("all-minilm-l6-v2-int8"),
        "these tests need the ONNX Runtime library and the MiniLM model: run `cargo run -- models pull` first\n{}{}",
        listed.stdout,
        listed.stderr
    );
}

/// `tests/onnx/reference.json`: the Python onnxruntime's scores for the tiny models.
fn reference() -> Value {
    serde_json::from_str(
        &std::fs::read_to_string(root().join("tests/onnx/reference.json")).expect("reference"),
    )
    .expect("reference json")
}

#[test]
fn the_tiny_cross_encoder_scores_as_the_python_onnxruntime_did() {
    require_onnx_models();
    let run = pagantic(&[
        "run",
        "--format",
        "json",
        "tests/plans/tiny-cross-encoder.yaml",
    ]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let record: Value = serde_json::from_str(&run.stdout).expect("json record");
    let rerank = step(&record, "rerank");
    let reference = reference();
    // The plan's passages are the first two reference pairs' passages, for their query.
    let pairs = &reference["pairs"].as_array().expect("pairs")[..2];
    for pair in pairs {
        let candidate = rerank["output"]
            .as_array()
            .and_then(|c| c.iter().find(|c| c["content"] == pair["passage"]))
            .unwrap_or_else(|| panic!("{} not in {rerank}", pair["passage"]));
        let (got, want) = (
            candidate["score"].as_f64().expect("score"),
            pair["logit"].as_f64().expect("logit"),
        );
        assert!((got - want).abs() < 1e-4, "{got} vs {want}");
    }
    assert_eq!(rerank["detail"]["scored"], 2);
    assert_eq!(rerank["output"].as_array().map(Vec::len), Some(pairs.len()));
    assert!(
        rerank["detail"]["scorer"]
            .as_str()
            .is_some_and(|s| s.starts_with("cross-encoder:")),
        "{rerank}"
    );
}

#[test]
fn minilm_ranks_the_relevant_passage_first_in_dense_retrieval_and_reranking() {
    require_onnx_models();
    let dir = tempfile::tempdir().expect("temp dir");
    let out = dir.path().join("relevance.jsonl");
    let run = pagantic(&[
        "run",
        "tests/plans/minilm-relevance.yaml",
        "--batch",
        "tests/onnx/relevance-questions.jsonl",
        "--out",
        out.to_str().expect("utf-8 path"),
    ]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let rows = std::fs::read_to_string(&out).expect("output");
    assert_eq!(rows.lines().count(), 3, "{rows}");
    for line in rows.lines() {
        let row: Value = serde_json::from_str(line).expect("row");
        let ranked = row["output"].as_array().expect("candidates");
        assert_eq!(ranked.len(), 6, "{row}");
        assert_eq!(ranked[0]["source"], row["input"]["relevant"], "{row}");
        let best = ranked[0]["score"].as_f64().expect("score");
        let runner_up = ranked[1]["score"].as_f64().expect("score");
        assert!(best > runner_up + 0.1, "a clear margin: {row}");
    }
}

/// How many entries of `kind` the call cache in `cache` holds.
fn entries(cache: &str, kind: &str) -> u64 {
    let stats = pagantic(&["cache", "stats", "--format", "json", "--cache", cache]);
    let stats: Value = serde_json::from_str(&stats.stdout).expect("json stats");
    stats["kinds"]
        .as_array()
        .and_then(|kinds| kinds.iter().find(|k| k["kind"] == kind))
        .and_then(|k| k["entries"].as_u64())
        .unwrap_or(0)
}

/// Cross-encoder scores go to the call cache: a second run of the rerank step over the same
/// passages takes both scores from it (its detail says `cached: 2`, the ranking is the same),
/// while `--no-cache`, or `cache: false` on the model, scores them with the model again.
#[test]
fn cross_encoder_scores_are_kept_in_the_call_cache() {
    require_onnx_models();
    let dir = tempfile::tempdir().expect("temp dir");
    let cache = dir.path().join("cache");
    let cache = cache.to_str().expect("utf-8 path");
    let rerank = |plan: &str, extra: &[&str]| {
        let mut args = vec!["run", "--format", "json", plan];
        args.extend(extra);
        let run = pagantic(&args);
        assert_eq!(run.code, 0, "{}", run.stderr);
        let record: Value = serde_json::from_str(&run.stdout).expect("json record");
        let step = step(&record, "rerank");
        (step["detail"]["cached"].clone(), step["output"].clone())
    };
    let plan = "tests/plans/tiny-cross-encoder.yaml";
    let (cached, first) = rerank(plan, &["--cache", cache]);
    assert_eq!(cached, 0);
    assert_eq!(entries(cache, "score"), 2);
    let (cached, again) = rerank(plan, &["--cache", cache]);
    assert_eq!(cached, 2, "both scores from the cache");
    assert_eq!(again, first);
    assert_eq!(entries(cache, "score"), 2);
    assert_eq!(rerank(plan, &["--cache", cache, "--no-cache"]).0, 0);
    let opted_out = dir.path().join("opted-out.yaml");
    let text = std::fs::read_to_string(root().join(plan))
        .expect("plan")
        .replace(
            "../onnx/",
            &format!("{}/", root().join("tests/onnx").display()),
        )
        .replace("    threads: 1\n", "    threads: 1\n    cache: false\n");
    assert!(text.contains("cache: false"), "{text}");
    std::fs::write(&opted_out, text).expect("written");
    let (cached, output) = rerank(opted_out.to_str().expect("utf-8 path"), &["--cache", cache]);
    assert_eq!((cached, output), (Value::from(0), first));
}

/// Passage embeddings go to the call cache: a run of the dense plan leaves `embedding` entries
/// there, and a second run over the same passages finds them (it adds none; the scorer's unit
/// test shows that found embeddings are not computed again).
#[test]
fn passage_embeddings_are_kept_in_the_call_cache() {
    require_onnx_models();
    let dir = tempfile::tempdir().expect("temp dir");
    let cache = dir.path().join("cache");
    let cache = cache.to_str().expect("utf-8 path");
    let question = "question=How can I continue a batch job that was interrupted?";
    let plan = "tests/plans/minilm-relevance.yaml";
    let embeddings = || entries(cache, "embedding");
    // How many passages the retrieve step embedded, from its run record.
    let embedded = |stdout: &str| -> u64 {
        let record: Value = serde_json::from_str(stdout).expect("a run record");
        record["steps"][0]["detail"]["embedded"]
            .as_u64()
            .expect("a dense retrieve says how many it embedded")
    };
    let json = ["--format", "json", "--cache", cache];
    let first = pagantic(&[&["run", plan, "-i", question][..], &json].concat());
    assert_eq!(first.code, 0, "{}", first.stderr);
    let kept = embeddings();
    assert!(kept >= 6, "the corpus's passages at least: {kept}");
    assert_eq!(embedded(&first.stdout), kept, "every passage embedded once");
    let second = pagantic(&[&["run", plan, "-i", question][..], &json].concat());
    assert_eq!(second.code, 0, "{}", second.stderr);
    assert_eq!(embedded(&second.stdout), 0, "no passage embedded again");
    let output =
        |stdout: &str| serde_json::from_str::<Value>(stdout).expect("record")["output"].clone();
    assert_eq!(output(&second.stdout), output(&first.stdout));
    assert_eq!(embeddings(), kept);
    let none = pagantic(&[
        "run",
        plan,
        "-i",
        question,
        "--format",
        "json",
        "--no-cache",
    ]);
    assert_eq!(
        output(&none.stdout),
        output(&first.stdout),
        "the same ranking without the cache"
    );
}

#[test]
fn a_missing_or_foreign_runtime_library_is_a_clear_failure_not_a_crash() {
    let missing = "/nonexistent/libonnxruntime.so.1.31.1";
    let cases = [
        (missing, "does not exist"),
        ("Cargo.toml", "is not a loadable shared library"),
    ];
    for (library, reason) in cases {
        let run = pagantic_with(
            &root(),
            &["run", "tests/plans/tiny-cross-encoder.yaml"],
            &[("ORT_DYLIB_PATH", library)],
        );
        assert_eq!(run.code, 1, "{library}: {}", run.stderr);
        assert!(
            run.stderr
                .contains("error[INFERENCE_MODEL_UNAVAILABLE]: the ONNX Runtime library")
                && run.stderr.contains(reason),
            "{library}: {}",
            run.stderr
        );
        assert!(run.stderr.contains("models pull") || run.stderr.contains("ORT_DYLIB_PATH"));
        assert!(!run.stderr.contains("panicked"), "{}", run.stderr);
    }
}

#[test]
fn a_missing_onnx_model_file_is_a_clear_failure_and_validate_never_loads_it() {
    let dir = tempfile::tempdir().expect("temp dir");
    let plan = dir.path().join("plan.yaml");
    std::fs::write(
        &plan,
        "version: 1\nname: missing\nmodels:\n  ranker: { kind: onnx, task: cross-encoder, source: nowhere.onnx }\n\
         corpora:\n  docs: { documents: [{ content: a passage }] }\n\
         steps:\n  - { name: retrieve, type: retrieve, corpus: docs, query: passage }\n  - { name: rerank, type: rerank, model: ranker }\n",
    )
    .expect("plan");
    let plan = plan.to_str().expect("utf-8 path");
    let validated = pagantic(&["validate", plan]);
    assert_eq!(validated.code, 0, "{}", validated.stderr);
    let dry = pagantic(&["run", "--dry-run", plan]);
    assert_eq!(
        dry.code, 0,
        "a dry run uses the keyword scorer: {}",
        dry.stderr
    );
    let run = pagantic(&["run", plan]);
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(
        run.stderr
            .contains("error[INFERENCE_MODEL_UNAVAILABLE]: the ONNX model")
            && run.stderr.contains("nowhere.onnx does not exist"),
        "{}",
        run.stderr
    );
    assert!(run.stderr.contains("help:"), "{}", run.stderr);
}

/// A library that says it is ONNX Runtime 1.20 (built here with `cc`, which cargo needs for
/// linking anyway): ort refuses it, and pagantic explains the version it needs.
#[test]
fn an_old_onnx_runtime_is_refused_with_the_version_needed() {
    let dir = tempfile::tempdir().expect("temp dir");
    let source = dir.path().join("fake.c");
    std::fs::write(
        &source,
        "typedef struct { const void* (*get_api)(unsigned); const char* (*version)(void); } Base;\n\
         static const void* get_api(unsigned v) { (void)v; return 0; }\n\
         static const char* version(void) { return \"1.20.0\"; }\n\
         static Base base = { get_api, version };\n\
         const Base* OrtGetApiBase(void) { return &base; }\n",
    )
    .expect("source");
    let library = dir.path().join("libonnxruntime.so.1.20.0");
    let built = std::process::Command::new("cc")
        .args(["-shared", "-fPIC", "-o"])
        .arg(&library)
        .arg(&source)
        .status()
        .expect(
            "this test builds a stand-in library with `cc`: install a C compiler (build-essential)",
        );
    assert!(built.success());
    let run = pagantic_with(
        &root(),
        &["run", "tests/plans/tiny-cross-encoder.yaml"],
        &[("ORT_DYLIB_PATH", library.to_str().expect("utf-8 path"))],
    );
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(
        run.stderr
            .contains("is ONNX Runtime 1.20.0; pagantic needs 1.31 or later"),
        "{}",
        run.stderr
    );
}

/// `source:` may name a directory holding `model.onnx`, with `tokenizer.json` beside it.
#[test]
fn a_model_directory_is_found_by_its_model_onnx_and_tokenizer_json() {
    require_onnx_models();
    let dir = tempfile::tempdir().expect("temp dir");
    let model_dir = dir.path().join("tiny");
    std::fs::create_dir_all(&model_dir).expect("dir");
    for (from, to) in [
        ("tiny-cross-encoder.onnx", "model.onnx"),
        ("tokenizer.json", "tokenizer.json"),
    ] {
        std::fs::copy(root().join("tests/onnx").join(from), model_dir.join(to)).expect("copy");
    }
    let plan = dir.path().join("plan.yaml");
    std::fs::write(
        &plan,
        "version: 1\nname: directory\nmodels:\n  tiny: { kind: onnx, task: cross-encoder, source: tiny, max_length: 24 }\n\
         corpora:\n  docs: { documents: [{ content: the weather is nice today . }] }\n\
         steps:\n  - { name: retrieve, type: retrieve, corpus: docs, query: weather }\n  \
         - { name: rerank, type: rerank, model: tiny, query: how do i resume a batch ? }\n",
    )
    .expect("plan");
    let run = pagantic(&["run", "--format", "json", plan.to_str().expect("utf-8")]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let record: Value = serde_json::from_str(&run.stdout).expect("json record");
    let score = step(&record, "rerank")["output"][0]["score"]
        .as_f64()
        .expect("score");
    // Reference pair 1, through the logistic function (the default).
    let logit = reference()["pairs"][1]["logit"].as_f64().expect("logit");
    assert!(
        (score - 1.0 / (1.0 + (-logit).exp())).abs() < 1e-4,
        "{score}"
    );
}
