//! Local-model speed: prefill and decode tokens per second, and the aggregate throughput of 8
//! requests sent concurrently and one after another, for the embedded model on mistral.rs — the pagantic side of
//! `benches/inference.sh` (which runs llama.cpp on the same file and threads beside it).
//!
//!     cargo run --locked --example local_speed -- [GGUF_PATH [MAX_BATCH]]
//!
//! Without a path it uses the cached embedded model (derived Q8_0 file); MAX_BATCH is the most
//! sequences mistral.rs decodes together (default 1, one request at a time with the prefix cache
//! on, as plans run it; above 1 mistral.rs 0.8.1's batched decoding corrupts answers, so larger
//! values are for speed comparisons only). Prints one JSON object.

use std::sync::Arc;
use std::time::Instant;

use pagantic::core::Message;
use pagantic::inference::{Engine, LocalConfig, LocalEngine, LocalSettings, Request};
use pagantic::model_store;

/// The prompt for prefill: 670 tokens by the model's tokenizer (`prefill_tokens` in the output),
/// the same text the llama.cpp side uses.
fn long_prompt() -> String {
    let paragraph = "pagantic is a declarative pipeline runner for LLM work. People describe a pipeline once, \
        in a YAML plan file: retrieve passages, rerank them with a cross-encoder, infer with a local model, \
        force schema-valid JSON, vote across several answers, run an agent's tool loop, and validate. ";
    format!(
        "{}\nSummarise the text above in one word.",
        paragraph.repeat(10)
    )
}

fn request(prompt: &str, max_tokens: u32) -> Request {
    Request {
        messages: vec![Message::user(prompt)],
        max_tokens: Some(max_tokens),
        temperature: Some(0.0),
        ..Request::default()
    }
}

async fn timed(
    engine: &LocalEngine,
    prompt: &str,
    max_tokens: u32,
) -> Result<(pagantic::inference::Response, f64), Box<dyn std::error::Error>> {
    let started = Instant::now();
    let response = engine.infer(request(prompt, max_tokens)).await?;
    Ok((response, started.elapsed().as_secs_f64()))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let max_batch = match std::env::args().nth(2) {
        Some(n) => n.parse()?,
        None => 1,
    };
    let path = match std::env::args().nth(1) {
        Some(path) => path.into(),
        None => model_store::cached_file(&model_store::DEFAULT_LLM)
            .ok_or("the embedded model is not pulled: run `pagantic models pull`")?,
    };
    let started = Instant::now();
    let engine = Arc::new(
        LocalEngine::load(&LocalConfig {
            path: path.clone(),
            settings: LocalSettings {
                max_batch,
                context_length: None,
                decoder_constraints: true,
            },
        })
        .await?,
    );
    let load_s = started.elapsed().as_secs_f64();

    // Warm-up, then prefill: a long prompt, one generated token, timed by the wall clock (the
    // llama.cpp side times the same way).
    engine.infer(request("Hello", 4)).await?;
    let (prefill, prefill_s) = timed(&engine, &long_prompt(), 1).await?;
    let prefill_tps = prefill.usage.prompt_tokens as f64 / prefill_s;

    // Decode: 128 tokens after a short prompt, minus the prompt's share measured apart.
    // The short prompt is sent once first, so that the prompt-only run and the timed decode both
    // find it in the prefix cache (when it is on) and the subtraction compares like with like.
    let short = "Write a long story about a lighthouse keeper.";
    timed(&engine, short, 1).await?;
    let (_, prompt_only_s) = timed(&engine, short, 1).await?;
    let (decode, decode_s) = timed(&engine, short, 128).await?;
    let decode_tps = decode.usage.completion_tokens.saturating_sub(1).max(1) as f64
        / (decode_s - prompt_only_s).max(1e-9);

    // 8 concurrent requests of 64 tokens each: aggregate generated tokens per wall second.
    let wall = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for i in 8..16 {
        let engine = Arc::clone(&engine);
        tasks.spawn(async move {
            engine
                .infer(request(
                    &format!("Write Python function number {i}: a linked list with comments."),
                    64,
                ))
                .await
        });
    }
    let mut concurrent_tokens = 0;
    while let Some(done) = tasks.join_next().await {
        concurrent_tokens += done??.usage.completion_tokens;
    }
    let concurrent_tps = concurrent_tokens as f64 / wall.elapsed().as_secs_f64();

    // 8 such requests one after another: the llama.cpp side's prompts and pattern. Their numbers
    // differ from the concurrent ones': mistral.rs 0.8.1 prefills a prompt it has already
    // answered in full again, slower than one that only shares a prefix (0.6 s against 0.2 s
    // here), so repeating the same prompts would measure that instead.
    let wall = Instant::now();
    let mut generated = 0;
    for i in 0..8 {
        let story = request(
            &format!("Write Python function number {i}: a linked list with comments."),
            64,
        );
        generated += engine.infer(story).await?.usage.completion_tokens;
    }
    let sequential_tps = generated as f64 / wall.elapsed().as_secs_f64();

    println!(
        "{}",
        serde_json::json!({
            "engine": "pagantic (mistral.rs 0.8.1, F32 activations)",
            "model": path.display().to_string(),
            "max_batch": max_batch,
            "load_s": load_s,
            "prefill_tokens": prefill.usage.prompt_tokens,
            "prefill_tok_per_s": prefill_tps,
            "decode_tokens": decode.usage.completion_tokens,
            "decode_tok_per_s": decode_tps,
            "concurrent_8_tokens": concurrent_tokens,
            "concurrent_8_tok_per_s": concurrent_tps,
            "sequential_8_tok_per_s": sequential_tps,
        })
    );
    Ok(())
}
