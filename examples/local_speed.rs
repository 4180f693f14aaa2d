//! Local-model speed: prefill and decode tokens per second, and the aggregate throughput of 8
//! concurrent requests, for the embedded model on mistral.rs — the pagantic side of
//! `benches/inference.sh` (which runs llama.cpp on the same file and threads beside it).
//!
//!     cargo run --locked --example local_speed -- [GGUF_PATH]
//!
//! Without a path it uses the cached embedded model (derived Q8_0 file). Prints one JSON object.

use std::sync::Arc;
use std::time::Instant;

use pagantic::core::Message;
use pagantic::inference::{Engine, LocalConfig, LocalEngine, Request, store};

/// A ~500-token prompt for prefill (the same text the llama.cpp side uses).
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

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = match std::env::args().nth(1) {
        Some(path) => path.into(),
        None => store::cached_file(&store::DEFAULT_LLM)
            .ok_or("the embedded model is not pulled: run `pagantic models pull`")?,
    };
    let started = Instant::now();
    let engine = Arc::new(
        LocalEngine::load(&LocalConfig {
            path: path.clone(),
            max_batch: 8,
        })
        .await?,
    );
    let load_s = started.elapsed().as_secs_f64();

    // Warm-up, then prefill: a long prompt, one generated token.
    engine.infer(request("Hello", 4)).await?;
    let prefill = engine.infer(request(&long_prompt(), 1)).await?;
    let prefill_tps =
        prefill.usage.prompt_tokens as f64 / prefill.timings.prompt.as_secs_f64().max(1e-9);

    // Decode: a short prompt, 128 tokens.
    let decode = engine
        .infer(request(
            "Write a long story about a lighthouse keeper.",
            128,
        ))
        .await?;
    let decode_tps =
        decode.usage.completion_tokens as f64 / decode.timings.completion.as_secs_f64().max(1e-9);

    // 8 concurrent requests of 64 tokens each: aggregate generated tokens per wall second.
    let wall = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..8 {
        let engine = Arc::clone(&engine);
        tasks.spawn(async move {
            engine
                .infer(request(&format!("Write story number {i} about a fox."), 64))
                .await
        });
    }
    let mut generated = 0;
    while let Some(done) = tasks.join_next().await {
        generated += done??.usage.completion_tokens;
    }
    let concurrent_tps = generated as f64 / wall.elapsed().as_secs_f64();

    println!(
        "{}",
        serde_json::json!({
            "engine": "pagantic (mistral.rs 0.8.1, F32 activations)",
            "model": path.display().to_string(),
            "load_s": load_s,
            "prefill_tokens": prefill.usage.prompt_tokens,
            "prefill_tok_per_s": prefill_tps,
            "decode_tokens": decode.usage.completion_tokens,
            "decode_tok_per_s": decode_tps,
            "concurrent_8_tok_per_s": concurrent_tps,
        })
    );
    Ok(())
}
