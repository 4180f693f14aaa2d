//! Reranking speed: pairs per second for the embedded MiniLM bi-encoder on ONNX Runtime — the
//! pagantic side of `benches/rerank.sh` (which runs sentence-transformers and the Python
//! onnxruntime on the same pairs beside it).
//!
//!     cargo run --locked --example rerank_speed -- PAIRS_JSON [THREADS] [BATCH]
//!
//! PAIRS_JSON is written by `benches/peers/rerank_speed.py make`: groups of one query and its
//! passages. Each group is scored as a rerank step scores it (the scorer embeds the query and the
//! passages in batches, mean-pools, takes cosines), after one warm-up group. Needs the model and
//! the runtime pulled (`cargo run -- models pull`). Prints one JSON object.

use std::sync::Arc;
use std::time::Instant;

use pagantic::model_store;
use pagantic::rerank::{BiEncoder, OnnxConfig, OnnxModel, OnnxSource, Scorer};

#[derive(serde::Deserialize)]
struct Pairs {
    groups: Vec<Group>,
}

#[derive(serde::Deserialize)]
struct Group {
    query: String,
    passages: Vec<String>,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let path = args
        .next()
        .ok_or("usage: rerank_speed PAIRS_JSON [THREADS] [BATCH]")?;
    let threads = args.next().map_or(Ok(2), |t| t.parse())?;
    let batch_size = args.next().map_or(Ok(32), |b| b.parse())?;
    let pairs: Pairs = serde_json::from_str(&std::fs::read_to_string(path)?)?;
    if model_store::cached_file(&model_store::DEFAULT_SCORER).is_none() {
        return Err("pull the model first: cargo run -- models pull".into());
    }
    let scorer = BiEncoder::new(OnnxModel::new(
        OnnxConfig {
            source: OnnxSource::Embedded(&model_store::DEFAULT_SCORER),
            batch_size,
            threads,
            max_length: Some(256),
        },
        Arc::new(|line: &str| eprintln!("{line}")),
    ));
    let score = |group: &Group| {
        let passages: Vec<&str> = group.passages.iter().map(String::as_str).collect();
        scorer
            .score(&group.query, &passages)
            .map(|scores| scores.values)
    };
    let warm_up = Instant::now();
    score(&pairs.groups[0])?;
    let first_call = warm_up.elapsed();
    let started = Instant::now();
    let mut scored = 0;
    for group in &pairs.groups {
        scored += score(group)?.len();
    }
    let seconds = started.elapsed().as_secs_f64();
    println!(
        "{}",
        serde_json::json!({
            "pairs": scored,
            "seconds": (seconds * 1000.0).round() / 1000.0,
            "pairs_per_s": (scored as f64 / seconds * 10.0).round() / 10.0,
            "first_call_s_including_load": (first_call.as_secs_f64() * 1000.0).round() / 1000.0,
        })
    );
    Ok(())
}
