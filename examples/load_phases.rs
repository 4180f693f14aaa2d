//! Where the local engine's load time goes: loads the embedded model (or a GGUF file) in a fresh
//! process several times and splits the best load into phases, by the timestamps of mistral.rs's
//! own log lines — the pagantic side of `benches/inference.sh`'s load figures.
//!
//!     cargo run --locked --example load_phases -- [RUNS [GGUF_PATH]]
//!
//! Each run is a child process of this one with mistral.rs's logging on (the phases are the gaps
//! between its log lines, so they are those of mistral.rs 0.8.1's GGUF loader; a line a later
//! version no longer writes merges its phase into the next). Prints one JSON object: the best
//! load of RUNS (default 3), its phases, and the first request after it.

use std::process::Command;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use pagantic::core::Message;
use pagantic::inference::{Engine, LocalConfig, LocalEngine, LocalSettings, Request};
use pagantic::model_store;

/// Marks a child writes beside mistral.rs's log lines (on the same stdout).
const MARK: &str = "load_phases mark";

/// The phases of a load, each ending at the first line (after the previous phase's end) that
/// contains its text.
const PHASES: &[(&str, &str)] = &[
    (
        "pagantic's checks of the file, model paths",
        "Prompt chunk size is",
    ),
    (
        "GGUF header and metadata (mistral.rs reads it unbuffered)",
        "DType selected is",
    ),
    ("device map", "Device mapping"),
    (
        "tokenizer built from the GGUF metadata",
        "GGUF tokenizer model is",
    ),
    ("chat template from the GGUF metadata", "GGUF chat template"),
    (
        "tensors: read, copy, dequantise token_embd, rotary tables",
        "Using literal chat template",
    ),
    ("llguidance token trie, EOS tokens", "bos_toks ="),
    ("engine thread start", "Beginning dummy run"),
    (
        "warm-up (mistral.rs's one-token dummy run)",
        "Dummy run completed",
    ),
    ("pagantic: tokenizer hooks", "load_phases mark loaded"),
];

/// Seconds since midnight UTC, the clock mistral.rs's log lines show.
fn seconds_of_day_now() -> f64 {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64());
    now % 86_400.0
}

/// The seconds since midnight of a log line starting `2026-11-23T21:52:17.382640Z` (colour codes
/// removed), or of a mark.
fn timestamp(line: &str) -> Option<f64> {
    if let Some(rest) = line.strip_prefix(MARK) {
        return rest.split_whitespace().nth(1)?.parse().ok();
    }
    let time = line.split('T').nth(1)?.split('Z').next()?;
    let mut parts = time.split(':');
    let hours: f64 = parts.next()?.parse().ok()?;
    let minutes: f64 = parts.next()?.parse().ok()?;
    let seconds: f64 = parts.next()?.parse().ok()?;
    Some(hours * 3600.0 + minutes * 60.0 + seconds)
}

fn without_colours(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// What one child's output says.
struct Run {
    /// (phase, seconds) for each phase found.
    phases: Vec<(&'static str, f64)>,
    load: f64,
    first_request: f64,
}

/// Reads one child's output.
fn read_run(output: &str) -> Option<Run> {
    let lines: Vec<String> = output.lines().map(without_colours).collect();
    let time_of = |text: &str, from: usize| {
        lines[from..]
            .iter()
            .position(|l| l.contains(text))
            .and_then(|i| Some((from + i, timestamp(&lines[from + i])?)))
    };
    let (mut at, started) = time_of(&format!("{MARK} start"), 0)?;
    let mut previous = started;
    let mut found = Vec::new();
    for (phase, text) in PHASES {
        if let Some((line, time)) = time_of(text, at) {
            found.push((*phase, (time - previous).rem_euclid(86_400.0)));
            (at, previous) = (line, time);
        }
    }
    let (_, loaded) = time_of(&format!("{MARK} loaded"), 0)?;
    let (_, answered) = time_of(&format!("{MARK} answered"), 0)?;
    Some(Run {
        phases: found,
        load: (loaded - started).rem_euclid(86_400.0),
        first_request: (answered - loaded).rem_euclid(86_400.0),
    })
}

/// The child: load as plans do (one request at a time, prefix cache on), answer one short
/// question, mark each moment on stdout.
async fn child(path: std::path::PathBuf) -> Result<(), Box<dyn std::error::Error>> {
    mistralrs::core::initialize_logging();
    println!("{MARK} start {}", seconds_of_day_now());
    let engine = LocalEngine::load(&LocalConfig {
        path,
        settings: LocalSettings {
            max_batch: 1,
            context_length: None,
            decoder_constraints: true,
        },
    })
    .await?;
    println!("{MARK} loaded {}", seconds_of_day_now());
    engine
        .infer(Request {
            messages: vec![Message::user("What is the capital of France? One word.")],
            max_tokens: Some(2),
            temperature: Some(0.0),
            ..Request::default()
        })
        .await?;
    println!("{MARK} answered {}", seconds_of_day_now());
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let path = match args.get(2) {
        Some(path) => path.into(),
        None => model_store::cached_file(&model_store::DEFAULT_LLM)
            .ok_or("the embedded model is not pulled: run `pagantic models pull`")?,
    };
    if args.get(1).map(String::as_str) == Some("--child") {
        return child(path).await;
    }
    let runs: usize = args.get(1).map_or(Ok(3), |n| n.parse())?;
    let mut best: Option<Run> = None;
    let mut loads = Vec::new();
    for _ in 0..runs {
        let wall = Instant::now();
        let output = Command::new(std::env::current_exe()?)
            .arg("--child")
            .arg(&path)
            .output()?;
        if !output.status.success() {
            return Err(String::from_utf8_lossy(&output.stderr).into_owned().into());
        }
        let stdout = String::from_utf8_lossy(&output.stdout);
        let run = read_run(&stdout).ok_or("the child printed no marks")?;
        loads.push((run.load, wall.elapsed().as_secs_f64()));
        if best.as_ref().is_none_or(|b| run.load < b.load) {
            best = Some(run);
        }
    }
    let best = best.ok_or("no runs")?;
    let phases: Vec<_> = best
        .phases
        .iter()
        .map(|(phase, s)| serde_json::json!({ "phase": phase, "s": s }))
        .collect();
    println!(
        "{}",
        serde_json::json!({
            "model": path.display().to_string(),
            "runs": runs,
            "load_s": best.load,
            "phases": phases,
            "first_request_s": best.first_request,
            "all_runs": loads.iter().map(|(load, process)| serde_json::json!({"load_s": load, "process_s": process})).collect::<Vec<_>>(),
        })
    );
    Ok(())
}
