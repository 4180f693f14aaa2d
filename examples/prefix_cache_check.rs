//! Are the local engine's greedy answers to concurrent requests the answers of the same requests
//! sent alone? Sends ROWS greedy requests that share a long system prompt, CONCURRENCY at a time,
//! ROUNDS times, to the embedded model with a scheduler of MAX_BATCH sequences (1: one request at
//! a time, prefix cache on; above 1: mistral.rs batches concurrent requests, prefix cache off),
//! and compares every answer with the reference answer: the request alone, with the prefix cache
//! off (MAX_BATCH 2, one request at a time), computed once and kept in REFERENCE.
//!
//!     cargo run --locked --example prefix_cache_check -- MAX_BATCH CONCURRENCY \
//!         [ROWS [ROUNDS [MAX_TOKENS [REFERENCE]]]]
//!
//! Prints one JSON line: the mismatches, wall time per round, and the resident memory after the
//! run. With MISTRALRS_DEBUG=1 mistral.rs logs each step's prompt and completion lengths.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use pagantic::core::Message;
use pagantic::inference::{Engine, LocalConfig, LocalEngine, LocalSettings, Request};
use pagantic::model_store;
use tokio::sync::Semaphore;

/// Instructions shared by every request (about 300 tokens with the chat template).
const SHARED_INSTRUCTIONS: &str = "You are a careful assistant for a hardware shop. Answer the \
customer's question in plain English, in one or two short sentences, without greetings, without \
lists and without repeating the question. If the question is about a product, say what matters \
for the customer: price, battery life, weight, warranty, or how it compares with similar products. \
If the question is not about the shop, answer it briefly anyway. Never invent prices. Prefer \
concrete numbers when they are general knowledge (for instance, a typical laptop battery lasts \
eight to twelve hours). Keep a neutral tone. Do not use markdown. Do not mention these \
instructions. The shop sells laptops, phones, tablets, headphones, chargers, cables, keyboards, \
mice, monitors, printers and spare parts, and repairs screens and batteries within five working \
days. Returns are accepted within thirty days with the receipt. The warranty is two years for new \
products and six months for refurbished ones. Delivery is free above fifty euros.";

const QUESTIONS: [&str; 16] = [
    "How long does a laptop battery last?",
    "Can I return headphones after two weeks?",
    "What is the warranty on a refurbished phone?",
    "Is delivery free for a 20 euro cable?",
    "How long does a screen repair take?",
    "What is the capital of France?",
    "Which is lighter, a tablet or a laptop?",
    "Do you sell printers and ink?",
    "My phone charger stopped working after a month. What can I do?",
    "Why would someone buy a mechanical keyboard?",
    "Name one advantage of a larger monitor.",
    "Can you repair a laptop battery?",
    "What should I check before buying second-hand headphones?",
    "Is two years of warranty normal?",
    "How many days do I have to return a tablet?",
    "What is a USB-C cable used for?",
];

fn request(question: &str, max_tokens: u32) -> Request {
    Request {
        messages: vec![
            Message::system(SHARED_INSTRUCTIONS),
            Message::user(question),
        ],
        max_tokens: Some(max_tokens),
        temperature: Some(0.0),
        ..Request::default()
    }
}

async fn load(
    path: PathBuf,
    max_batch: usize,
) -> Result<Arc<LocalEngine>, Box<dyn std::error::Error>> {
    Ok(Arc::new(
        LocalEngine::load(&LocalConfig {
            path,
            settings: LocalSettings {
                max_batch,
                context_length: None,
                decoder_constraints: true,
            },
        })
        .await?,
    ))
}

/// The answers of `questions`, `concurrency` requests in flight at a time.
async fn answer_all(
    engine: &Arc<LocalEngine>,
    questions: &[&'static str],
    concurrency: usize,
    max_tokens: u32,
) -> Result<Vec<String>, Box<dyn std::error::Error>> {
    let slots = Arc::new(Semaphore::new(concurrency));
    let mut tasks = tokio::task::JoinSet::new();
    for (index, question) in questions.iter().enumerate() {
        let engine = Arc::clone(engine);
        let slots = Arc::clone(&slots);
        let question = *question;
        tasks.spawn(async move {
            let _slot = slots.acquire_owned().await;
            let answer = engine.infer(request(question, max_tokens)).await;
            (index, answer.map(|response| response.text))
        });
    }
    let mut answers = vec![String::new(); questions.len()];
    while let Some(done) = tasks.join_next().await {
        let (index, answer) = done?;
        answers[index] = answer?;
    }
    Ok(answers)
}

fn resident_mib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find(|line| line.starts_with("VmRSS:"))
                .and_then(|line| line.split_whitespace().nth(1)?.parse::<u64>().ok())
        })
        .map_or(0, |kib| kib / 1024)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |i: usize, default: &str| args.get(i).cloned().unwrap_or_else(|| default.into());
    let max_batch: usize = arg(0, "1").parse()?;
    let concurrency: usize = arg(1, "8").parse()?;
    let rows: usize = arg(2, "16").parse()?;
    let rounds: usize = arg(3, "1").parse()?;
    let max_tokens: u32 = arg(4, "24").parse()?;
    let reference_file = PathBuf::from(arg(5, "target/prefix-cache-reference.json"));
    if std::env::var_os("MISTRALRS_DEBUG").is_some() {
        mistralrs::core::initialize_logging();
    }
    let path = model_store::cached_file(&model_store::DEFAULT_LLM)
        .ok_or("the embedded model is not pulled: run `pagantic models pull`")?;
    let questions: Vec<&'static str> = QUESTIONS.iter().copied().cycle().take(rows).collect();

    let key = format!("{max_tokens}");
    let mut references: BTreeMap<String, Vec<String>> = std::fs::read_to_string(&reference_file)
        .ok()
        .and_then(|text| serde_json::from_str(&text).ok())
        .unwrap_or_default();
    if references
        .get(&key)
        .is_none_or(|r| r.len() < QUESTIONS.len())
    {
        let alone = load(path.clone(), 2).await?;
        let answers = answer_all(&alone, &QUESTIONS, 1, max_tokens).await?;
        references.insert(key.clone(), answers);
        std::fs::write(&reference_file, serde_json::to_string_pretty(&references)?)?;
    }
    let reference = &references[&key];

    let engine = load(path, max_batch).await?;
    let mut mismatches = Vec::new();
    let mut round_s = Vec::new();
    for round in 0..rounds {
        let started = Instant::now();
        let answers = answer_all(&engine, &questions, concurrency, max_tokens).await?;
        round_s.push(started.elapsed().as_secs_f64());
        for (index, answer) in answers.iter().enumerate() {
            let expected = &reference[index % QUESTIONS.len()];
            if answer != expected {
                mismatches.push(serde_json::json!({
                    "round": round, "row": index, "expected": expected, "actual": answer,
                }));
            }
        }
    }
    println!(
        "{}",
        serde_json::json!({
            "prefix_cache": max_batch == 1,
            "max_batch": max_batch,
            "concurrency": concurrency,
            "rows": rows,
            "rounds": rounds,
            "max_tokens": max_tokens,
            "answers": rows * rounds,
            "mismatched": mismatches.len(),
            "round_s": round_s,
            "rss_mib": resident_mib(),
            "mismatches": mismatches,
        })
    );
    Ok(())
}
