//! Integration tests: they drive the real `pagantic` binary, like a user at a terminal would.
//! All of them live in this one test binary (one link step instead of many).
#![expect(
    clippy::expect_used,
    reason = "test helpers should fail loudly when the environment is broken"
)]

mod architecture;
mod batch;
mod chat;
mod cost;
mod diff;
mod docs;
mod engines;
mod evals;
mod graph;
mod invalid_corpus;
mod onnx;
mod patterns;
mod policy;
mod real_model;
mod retrieval;
mod robustness;
mod route;
mod run;
mod schema;
mod serve;
mod session;
mod validate;

use std::path::{Path, PathBuf};
use std::process::Command;

/// What a run of the binary printed, and how it exited.
#[derive(Debug)]
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

/// The repository root (tests run with it as the working directory unless told otherwise).
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Runs `pagantic ARGS…` in `dir`, with colours off.
pub fn pagantic_in(dir: &Path, args: &[&str]) -> Run {
    pagantic_with(dir, args, &[])
}

/// Runs `pagantic ARGS…` in `dir` with extra environment variables, colours off.
pub fn pagantic_with(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Run {
    let output = Command::new(env!("CARGO_BIN_EXE_pagantic"))
        .args(args)
        .current_dir(dir)
        .env("NO_COLOR", "1")
        .envs(env.iter().copied())
        .output()
        .expect("the pagantic binary runs");
    Run {
        code: output.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// Starts `pagantic ARGS…` at the repository root with its stdin, stdout and stderr piped, for
/// tests that talk to it or signal it while it runs.
pub fn spawn(args: &[&str]) -> std::process::Child {
    Command::new(env!("CARGO_BIN_EXE_pagantic"))
        .args(args)
        .current_dir(root())
        .env("NO_COLOR", "1")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("pagantic starts")
}

/// Runs `pagantic ARGS…` at the repository root.
pub fn pagantic(args: &[&str]) -> Run {
    pagantic_in(&root(), args)
}

/// The record of step `name` in a run record (`run --format json`).
pub fn step<'a>(record: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    record["steps"]
        .as_array()
        .and_then(|steps| steps.iter().find(|s| s["name"] == name))
        .unwrap_or_else(|| panic!("no step {name} in {record}"))
}
