//! A bounded HTTP load generator for `benches/serve.sh`: sends REQUESTS POSTs of BODY to URL,
//! CONCURRENCY at a time (each worker one keep-alive connection), and prints one JSON object:
//! requests, errors (transport errors and non-2xx answers), seconds, requests/s, p50 and p99
//! latency in milliseconds.
//!
//!     cargo run --locked --example serve_load -- URL BODY REQUESTS CONCURRENCY

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [url, body, requests, concurrency] = args.as_slice() else {
        return Err("usage: serve_load URL BODY REQUESTS CONCURRENCY".into());
    };
    let requests: usize = requests.parse()?;
    let concurrency: usize = concurrency.parse()?;
    let next = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let mut workers = tokio::task::JoinSet::new();
    for _ in 0..concurrency {
        let client = reqwest::Client::builder()
            .pool_max_idle_per_host(1)
            .build()?;
        let (url, body, next) = (url.clone(), body.clone(), Arc::clone(&next));
        workers.spawn(async move {
            let mut latencies = Vec::new();
            let mut errors = 0usize;
            while next.fetch_add(1, Ordering::Relaxed) < requests {
                let sent = Instant::now();
                let answer = client
                    .post(&url)
                    .header("content-type", "application/json")
                    .body(body.clone())
                    .send()
                    .await;
                let ok = match answer {
                    Ok(response) => {
                        let success = response.status().is_success();
                        success && response.bytes().await.is_ok()
                    }
                    Err(_) => false,
                };
                latencies.push(sent.elapsed().as_secs_f64() * 1000.0);
                errors += usize::from(!ok);
            }
            (latencies, errors)
        });
    }
    let mut latencies = Vec::with_capacity(requests);
    let mut errors = 0;
    while let Some(joined) = workers.join_next().await {
        let (mine, my_errors) = joined?;
        latencies.extend(mine);
        errors += my_errors;
    }
    let seconds = started.elapsed().as_secs_f64();
    latencies.sort_by(f64::total_cmp);
    let percentile = |p: f64| {
        let index = ((latencies.len() as f64 - 1.0) * p).round() as usize;
        latencies.get(index).copied().unwrap_or(0.0)
    };
    println!(
        "{{\"requests\": {}, \"errors\": {errors}, \"seconds\": {seconds:.3}, \"requests_per_s\": {:.0}, \"p50_ms\": {:.2}, \"p99_ms\": {:.2}}}",
        latencies.len(),
        latencies.len() as f64 / seconds,
        percentile(0.50),
        percentile(0.99)
    );
    Ok(())
}
