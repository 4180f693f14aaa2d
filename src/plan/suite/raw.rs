//! The types of a test file as written (serde + schemars: they generate
//! `schemas/test.schema.json`); `load_suite` checks them into a `Suite`.

use indexmap::IndexMap;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Map, Value};

use super::assertions::Assertion;

/// A test file, as written.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawSuite {
    /// Version of the test-file format; always 1.
    #[schemars(range(min = 1, max = 1))]
    pub version: u32,
    /// The plan under test, relative to this file.
    pub plan: String,
    /// What the suite checks.
    #[serde(default)]
    pub description: Option<String>,
    /// The share of cases that must pass, under every variant, for the suite to pass (default 1: all).
    #[serde(default)]
    #[schemars(range(min = 0.0, max = 1.0))]
    pub min_pass_rate: Option<f64>,
    /// Assertions every case gets, besides its own.
    #[serde(default)]
    pub assert: Vec<Assertion>,
    /// Cases written out: inputs and assertions.
    #[serde(default)]
    pub cases: Vec<RawCase>,
    /// Cases from a file, one per row.
    #[serde(default)]
    pub dataset: Option<RawDataset>,
    /// Versions of the plan to compare: every case runs under every variant. Without any, the plan runs as it is.
    #[serde(default)]
    pub variants: Vec<RawVariant>,
}

/// One case written out in the test file.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawCase {
    /// The case's name, unique in the file (`--filter` selects cases by it).
    #[schemars(length(min = 1))]
    pub name: String,
    /// What the case checks.
    #[serde(default)]
    pub description: Option<String>,
    /// The plan's inputs for this case.
    #[serde(default)]
    pub inputs: Map<String, Value>,
    /// What the run must satisfy.
    #[serde(default)]
    pub assert: Vec<Assertion>,
    /// The weighted score of the assertions the case needs to pass, 0 to 1 (default: every assertion must pass).
    #[serde(default)]
    #[schemars(range(min = 0.0, max = 1.0))]
    pub threshold: Option<f64>,
}

/// Cases from a JSON Lines or CSV file: its columns bind to the plan's inputs and to the
/// expected values the assertions read as `row.<column>`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawDataset {
    /// The file (`.jsonl` or `.csv` with a header), relative to the test file.
    pub file: String,
    /// The column naming each case (default: the row's line or record number).
    #[serde(default)]
    pub id: Option<String>,
    /// The plan's inputs, as templates over `row` (default: each input from the column of its name).
    #[serde(default)]
    pub inputs: Option<Map<String, Value>>,
    /// What each row's run must satisfy; templates read the row as `row`.
    #[serde(default)]
    pub assert: Vec<Assertion>,
    /// The weighted score each row's case needs to pass (default: every assertion must pass).
    #[serde(default)]
    #[schemars(range(min = 0.0, max = 1.0))]
    pub threshold: Option<f64>,
    /// Use at most this many rows.
    #[serde(default)]
    #[schemars(range(min = 1))]
    pub limit: Option<u64>,
}

/// A version of the plan: the plan with some fields set otherwise.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawVariant {
    /// The variant's name, unique in the file (`--variant` runs only it).
    #[schemars(regex(pattern = r"^[A-Za-z_][A-Za-z0-9_.-]*$"))]
    pub name: String,
    /// What the variant changes.
    #[serde(default)]
    pub description: Option<String>,
    /// Fields to set, as `STEP.FIELD: value` (`answer.prompt: answer_v2.j2`, `answer.temperature: 0.7`) or a path from the plan's top (`models.llm.source: other.gguf`, `vars.tone: terse`).
    #[serde(default)]
    pub set: IndexMap<String, Value>,
}
