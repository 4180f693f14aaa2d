//! `validate` and `run --dry-run` must agree: a plan that passes every check builds and runs on
//! stand-in models without a configuration failure, because whatever is the plan's fault is
//! found by the checks. This test breaks the example plans in `plans/` thousands of ways (seeded,
//! so a failure reproduces) — lines deleted, duplicated, swapped or re-indented, values and names
//! replaced — and checks that no mutant panics the loader, and that every mutant the checks accept
//! runs on `--dry-run` without a `CONFIG_*` failure.

use std::path::{Path, PathBuf};

use serde_json::{Map, Value, json};

use super::build::BuildOptions;
use super::load::load_bytes;
use super::schema::DocumentKind;
use crate::core::FailureCategory;
use crate::orchestrate::inputs::{InputSpec, InputType};
use crate::orchestrate::{RunRequest, Runner};

/// Mutants in all, spread over the example plans.
const MUTANTS: usize = 2400;
const SEED: u64 = 0x5eed_2026;

/// A small deterministic generator (splitmix64): the same mutants on every run and machine.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

/// Values a mutation may put in place of a scalar.
const VALUES: &[&str] = &[
    "0",
    "-1",
    "1",
    "3",
    "0.5",
    "99999999999",
    "\"\"",
    "null",
    "true",
    "x",
    "[]",
    "{}",
    "[a]",
    "1s",
    "500ms",
    "llm",
    "answer",
    "retrieve",
    "\"{{ input }}\"",
    "\"{{ inputs.question }}\"",
    "\"{{ steps.answer.output }}\"",
    "\"{{ nope }}\"",
    "\"{% if %}\"",
    "template",
    "infer",
    "rerank",
    "structured",
    "field_majority",
    "[retrieve]",
    "{ regex: \"(yes|no)\" }",
];

/// Lines a mutation may insert after a step's `- name:` line (indented to match).
const STEP_LINES: &[&str] = &[
    "needs: []",
    "when: \"inputs.question\"",
    "timeout: 1s",
    "retry: { max_attempts: 2 }",
    "voting: { method: field_majority }",
    "constraint: { lark: 'start: \"a\"' }",
];

/// One mutation of `text`.
fn mutate(text: &str, rng: &mut Rng) -> String {
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    if lines.is_empty() {
        return text.to_string();
    }
    let at = rng.below(lines.len());
    match rng.below(9) {
        7 => {
            // Delete a whole list item (a step, a rule, a tool…): the line and what it holds.
            let indent = |line: &str| line.len() - line.trim_start().len();
            if let Some(start) = (0..=at)
                .rev()
                .find(|&i| lines[i].trim_start().starts_with("- "))
            {
                let depth = indent(&lines[start]);
                let end = (start + 1..lines.len())
                    .find(|&i| !lines[i].trim().is_empty() && indent(&lines[i]) <= depth)
                    .unwrap_or(lines.len());
                lines.drain(start..end);
            }
        }
        8 => {
            // A new field for a step.
            if let Some(step) = (0..=at)
                .rev()
                .find(|&i| lines[i].trim_start().starts_with("- name:"))
            {
                let indent = lines[step].len() - lines[step].trim_start().len() + 2;
                let line = format!("{}{}", " ".repeat(indent), rng.pick(STEP_LINES));
                lines.insert(step + 1, line);
            }
        }
        0 => {
            lines.remove(at);
        }
        1 => {
            let copy = lines[at].clone();
            lines.insert(at, copy);
        }
        2 => {
            let other = rng.below(lines.len());
            lines.swap(at, other);
        }
        3 => {
            let line = &lines[at];
            lines[at] = if rng.below(2) == 0 {
                format!("  {line}")
            } else {
                line.strip_prefix("  ").unwrap_or(line).to_string()
            };
        }
        4 | 5 => {
            // Replace the value after the first `: ` with another one.
            if let Some(colon) = lines[at].find(": ") {
                let key = &lines[at][..colon + 2];
                lines[at] = format!("{key}{}", rng.pick(VALUES));
            }
        }
        _ => {
            // Rename one word to another word of the file: a reference now points elsewhere.
            let words: Vec<&str> = text
                .split(|c: char| !(c.is_alphanumeric() || c == '_'))
                .filter(|w| w.len() > 2)
                .collect();
            if !words.is_empty() {
                let from = *rng.pick(&words);
                let to = *rng.pick(&words);
                lines[at] = lines[at].replacen(from, to, 1);
            }
        }
    }
    let mut out = lines.join("\n");
    out.push('\n');
    out
}

/// A value for every declared input a run must give: the first allowed value, else one of the
/// input's type.
fn sample_inputs(declared: &indexmap::IndexMap<String, InputSpec>) -> Map<String, Value> {
    declared
        .iter()
        .filter(|(_, spec)| spec.default.is_none())
        .map(|(name, spec)| {
            let value = match (&spec.allowed, spec.kind) {
                (Some(allowed), _) if !allowed.is_empty() => allowed[0].clone(),
                (_, InputType::String) => json!("What does pagantic do?"),
                (_, InputType::Number) => json!(1.5),
                (_, InputType::Integer) => json!(2),
                (_, InputType::Boolean) => json!(true),
                (_, InputType::Array) => json!([]),
                (_, InputType::Object) => json!({}),
            };
            (name.clone(), value)
        })
        .collect()
}

fn example_plans() -> Vec<(PathBuf, String)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("plans");
    let mut plans: Vec<(PathBuf, String)> = std::fs::read_dir(&dir)
        .expect("plans/ is readable")
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|path| path.extension().is_some_and(|e| e == "yaml"))
        .map(|path| {
            let text = std::fs::read_to_string(&path).expect("a readable plan");
            (path, text)
        })
        .collect();
    plans.sort();
    plans
}

#[test]
fn validate_and_dry_run_agree_on_mutated_example_plans() {
    let plans = example_plans();
    assert!(plans.len() >= 5, "the example plans are there");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let mut rng = Rng(SEED);
    let (mut accepted, mut disagreements) = (0usize, Vec::new());
    for number in 0..MUTANTS {
        let (path, original) = &plans[number % plans.len()];
        let mut text = mutate(original, &mut rng);
        if rng.below(3) == 0 {
            text = mutate(&text, &mut rng);
        }
        let loaded = std::panic::catch_unwind(|| {
            let loaded = load_bytes(
                &path.display().to_string(),
                text.clone().into_bytes(),
                DocumentKind::Plan,
            )?;
            super::check_loaded(loaded, path, None, &[])
        });
        let Ok(checked) = loaded else {
            panic!(
                "mutant {number} of {} panicked the loader:\n{text}",
                path.display()
            );
        };
        let Ok(plan) = checked else { continue };
        accepted += 1;
        let options = BuildOptions {
            dry_run: true,
            ..BuildOptions::default()
        };
        let failure = match plan.build(&crate::orchestrate::test_resources(), options) {
            Err(failure) => Some(failure),
            Ok(pipeline) => {
                let inputs = pipeline
                    .bind_object(&Value::Object(sample_inputs(&pipeline.inputs)))
                    .expect("sample inputs fit the declarations");
                let runner = Runner::standalone(4);
                let run = runner.run(&pipeline, inputs, RunRequest::default());
                runtime.block_on(run).error
            }
        };
        if let Some(failure) = failure
            && failure.category() == FailureCategory::Configuration
        {
            disagreements.push(format!(
                "mutant {number} of {}: {}: {}\n{text}",
                path.display(),
                failure.code,
                failure.message
            ));
        }
    }
    assert!(
        accepted >= MUTANTS / 20,
        "only {accepted} of {MUTANTS} mutants were valid plans: the mutations test too little"
    );
    assert!(
        disagreements.is_empty(),
        "{} mutants passed the checks but failed on --dry-run with a configuration error; the first:\n{}",
        disagreements.len(),
        disagreements
            .first()
            .map(String::as_str)
            .unwrap_or_default()
    );
}
