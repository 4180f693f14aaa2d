//! What the prefix cache saves on a batch whose rows share a prompt prefix: the 16 labelled
//! reviews (`benches/data/reviews-labelled.jsonl`) classified one constrained greedy call per row,
//! with shared instructions alone and with ~330 tokens of shared few-shot examples after them,
//! the embedded model with the prefix cache on (`max_batch` 1, what plans use) and off (requests
//! one at a time all the same, so only the cache differs). Each repetition loads fresh models, so
//! no cache entry outlives it. Prints one JSON line per repetition and side: wall seconds, the
//! prefill seconds mistral.rs reports (summed over rows), prompt tokens, and the answers; then
//! a summary with the best wall time of each side and whether the answers were identical.
//!
//!     cargo run --locked --example prefix_cache_speed -- [REPETITIONS]
//!
//! `benches/prefix_cache.sh` runs it.

use std::collections::BTreeMap;
use std::time::Instant;

use pagantic::core::Message;
use pagantic::inference::{Engine, Grammar, LocalConfig, LocalEngine, LocalSettings, Request};
use pagantic::model_store;
use serde_json::{Value, json};

const INSTRUCTIONS: &str = "You classify product reviews for a shop. Read the review and answer \
with exactly one word: positive, negative or neutral. positive: the customer is satisfied \
overall, even with small complaints. negative: the customer is dissatisfied overall: the product \
failed, broke, arrived late or damaged, or support did not help. neutral: the review is mixed \
or only describes the product without an opinion. Answer with the label only.";

/// Labelled examples shown before every review in the few-shot variant (none of them is one of
/// the 16 rows).
const EXAMPLES: [(&str, &str); 16] = [
    (
        "The keyboard feels solid and the keys are quiet. Typing all day is a pleasure.",
        "positive",
    ),
    (
        "Stopped charging after ten days. The replacement did the same.",
        "negative",
    ),
    (
        "It is a mouse. It moves the pointer and has two buttons.",
        "neutral",
    ),
    (
        "Great sound for the price, and the case is sturdy enough for travel.",
        "positive",
    ),
    (
        "The package arrived open and the cable inside was missing.",
        "negative",
    ),
    (
        "Delivered on Tuesday as promised. Colour as in the photos.",
        "neutral",
    ),
    (
        "My kids love this tablet and the parental controls are easy to set up.",
        "positive",
    ),
    (
        "The monitor has a dead pixel in the middle and the shop refuses to swap it.",
        "negative",
    ),
    (
        "Battery life is fine, the screen is average, the speakers are a bit weak.",
        "neutral",
    ),
    (
        "Setup took two minutes and the printer has worked flawlessly for a year.",
        "positive",
    ),
    (
        "Support kept me on hold for an hour and then hung up.",
        "negative",
    ),
    ("Weighs 1.2 kg and comes with a USB-C charger.", "neutral"),
    (
        "Sharp camera, fast updates, and the phone survived a drop onto concrete.",
        "positive",
    ),
    (
        "Overheats when gaming and the fan is louder than a hair dryer.",
        "negative",
    ),
    (
        "Some features are nice, some are missing; it does the job for now.",
        "neutral",
    ),
    (
        "Exactly what I needed for my home office, and cheaper than elsewhere.",
        "positive",
    ),
];

fn system_prompt(few_shot: bool) -> String {
    if !few_shot {
        return INSTRUCTIONS.to_string();
    }
    let examples: Vec<String> = EXAMPLES
        .iter()
        .map(|(review, label)| format!("Review: {review}\nLabel: {label}"))
        .collect();
    format!("{INSTRUCTIONS}\n\nExamples:\n\n{}", examples.join("\n\n"))
}

fn request(system: &str, review: &str) -> Request {
    Request {
        messages: vec![
            Message::system(system),
            Message::user(format!("Review: {review}\nLabel:")),
        ],
        grammar: Some(Grammar::Regex("(positive|negative|neutral)".into())),
        max_tokens: Some(4),
        temperature: Some(0.0),
        ..Request::default()
    }
}

/// One pass over the rows, one request at a time.
async fn classify(
    engine: &LocalEngine,
    system: &str,
    rows: &[(String, String)],
) -> Result<Value, Box<dyn std::error::Error>> {
    let started = Instant::now();
    let (mut prefill_s, mut prompt_tokens, mut answers, mut correct) = (0.0, 0, Vec::new(), 0);
    for (review, label) in rows {
        let response = engine.infer(request(system, review)).await?;
        prefill_s += response.timings.prompt.as_secs_f64();
        prompt_tokens += response.usage.prompt_tokens;
        correct += usize::from(response.text.trim() == label);
        answers.push(response.text);
    }
    Ok(json!({
        "wall_s": started.elapsed().as_secs_f64(),
        "prefill_s": prefill_s,
        "prompt_tokens": prompt_tokens,
        "correct": correct,
        "answers": answers,
    }))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let repetitions: usize = match std::env::args().nth(1) {
        Some(n) => n.parse()?,
        None => 3,
    };
    let path = model_store::cached_file(&model_store::DEFAULT_LLM)
        .ok_or("the embedded model is not pulled: run `pagantic models pull`")?;
    let rows: Vec<(String, String)> =
        std::fs::read_to_string("benches/data/reviews-labelled.jsonl")?
            .lines()
            .map(|line| {
                let row: Value = serde_json::from_str(line)?;
                let field = |name: &str| row[name].as_str().unwrap_or_default().to_string();
                Ok((field("text"), field("sentiment")))
            })
            .collect::<Result<_, serde_json::Error>>()?;
    let mut best: BTreeMap<String, f64> = BTreeMap::new();
    let mut answers: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    for repetition in 0..repetitions {
        // Cache off with max_batch 2: mistral.rs gets requests as they come, but they come one
        // at a time here, so both sides decode one sequence at a time.
        for (side, max_batch) in [("prefix cache off", 2), ("prefix cache on", 1)] {
            let engine = LocalEngine::load(&LocalConfig {
                path: path.clone(),
                settings: LocalSettings {
                    max_batch,
                    context_length: None,
                    decoder_constraints: true,
                },
            })
            .await?;
            for (variant, few_shot) in [("instructions", false), ("few-shot", true)] {
                let run = classify(&engine, &system_prompt(few_shot), &rows).await?;
                let key = format!("{variant}, {side}");
                let wall = run["wall_s"].as_f64().unwrap_or(f64::MAX);
                let entry = best.entry(key.clone()).or_insert(wall);
                *entry = entry.min(wall);
                answers
                    .entry(variant.into())
                    .or_default()
                    .push(run["answers"].clone());
                println!(
                    "{}",
                    json!({ "repetition": repetition, "variant": variant, "side": side, "run": run })
                );
            }
        }
    }
    let identical: BTreeMap<&String, bool> = answers
        .iter()
        .map(|(variant, runs)| (variant, runs.windows(2).all(|pair| pair[0] == pair[1])))
        .collect();
    println!(
        "{}",
        json!({ "best_wall_s": best, "identical_answers": identical })
    );
    Ok(())
}
