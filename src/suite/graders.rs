//! What the model-based assertions grade with, built on first use and shared by every case of a
//! suite: the scorer `similar` embeds with (the plan's bi-encoder, else the embedded MiniLM) and
//! the judge pipelines `judge` runs.
//!
//! A judge is a one-step plan pagantic writes itself: a `structured` step on the named model of
//! the plan under test, whose answer is held to the schema `{pass, score, reason}` — so it gets
//! the structured step's decoder constraint, repair and retries — loaded, checked and built like
//! any plan, and run in the test's session.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};

use crate::core::{Failure, FailureCode};
use crate::orchestrate::{Pipeline, Resources, RunRequest, RunStatus, Runner};
use crate::plan::Plan;
use crate::plan::build::BuildOptions;
use crate::rerank::{KeywordScorer, Scorer};

/// A judge's answer.
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    pub pass: bool,
    pub score: f64,
    pub reason: String,
}

/// See the module docs.
pub struct Graders {
    /// What judges run with (the test's session's runner), the plan their models are declared
    /// in, and what the session's builds share; None in unit tests (keyword similarity, no
    /// judges).
    context: Option<(Runner, Plan, Resources)>,
    options: BuildOptions,
    similarity: Mutex<HashMap<Option<String>, Arc<dyn Scorer>>>,
    judges: Mutex<HashMap<String, Arc<Pipeline>>>,
}

/// What the judge is asked; it sees the rubric, the case's inputs and the answer.
const JUDGE_PROMPT: &str = "You grade an answer against a rubric. Read the rubric, the question \
(the inputs), and the answer. Answer in JSON: `pass` (true when the answer meets the rubric), \
`score` (0 to 1: how well it meets it) and `reason` (one short sentence).\n\nRubric: {{ \
inputs.rubric }}\n\nInputs: {{ inputs.input }}\n\nAnswer: {{ inputs.output }}";

impl Graders {
    pub fn new(runner: Runner, plan: &Plan, resources: Resources, options: BuildOptions) -> Self {
        Graders {
            context: Some((runner, plan.clone(), resources)),
            options,
            similarity: Mutex::new(HashMap::new()),
            judges: Mutex::new(HashMap::new()),
        }
    }

    /// Graders with no session or plan: keyword similarity, and judges that fail.
    pub fn none() -> Graders {
        Graders {
            context: None,
            options: BuildOptions {
                dry_run: true,
                ..BuildOptions::default()
            },
            similarity: Mutex::new(HashMap::new()),
            judges: Mutex::new(HashMap::new()),
        }
    }

    /// The scorer for `similar` with `model` (None: the embedded MiniLM).
    pub fn similarity(&self, model: Option<&str>) -> Result<Arc<dyn Scorer>, Failure> {
        let key = model.map(str::to_string);
        let mut built = self.similarity.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(scorer) = built.get(&key) {
            return Ok(Arc::clone(scorer));
        }
        let scorer = match &self.context {
            Some((_, plan, resources)) => {
                plan.build_similarity(model, resources, self.options.clone())?
            }
            None => Arc::new(KeywordScorer),
        };
        built.insert(key, Arc::clone(&scorer));
        Ok(scorer)
    }

    /// Grades `output` against `rubric` with the plan's model `model`.
    pub async fn judge(
        &self,
        model: &str,
        rubric: &str,
        output: &str,
        input: &Value,
    ) -> Result<Verdict, Failure> {
        let Some((runner, plan, resources)) = &self.context else {
            return Err(Failure::new(
                FailureCode::ConfigNoEngine,
                "no judge model in this context",
            ));
        };
        let pipeline = self.judge_pipeline(plan, resources, model)?;
        let inputs = json!({ "rubric": rubric, "output": output, "input": input.to_string() });
        let record = runner.run(&pipeline, inputs, RunRequest::default()).await;
        if record.status != RunStatus::Complete {
            return Err(record.error.unwrap_or_else(|| {
                Failure::new(
                    FailureCode::InferenceEngineError,
                    "the judge did not answer",
                )
            }));
        }
        let answer = record.output.unwrap_or(Value::Null);
        let answer = match answer {
            Value::String(text) => serde_json::from_str(&text).unwrap_or(Value::Null),
            other => other,
        };
        Ok(Verdict {
            pass: answer["pass"].as_bool().unwrap_or(false),
            score: answer["score"].as_f64().unwrap_or(0.0).clamp(0.0, 1.0),
            reason: answer["reason"].as_str().unwrap_or_default().to_string(),
        })
    }

    fn judge_pipeline(
        &self,
        plan: &Plan,
        resources: &Resources,
        model: &str,
    ) -> Result<Arc<Pipeline>, Failure> {
        let mut judges = self.judges.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(pipeline) = judges.get(model) {
            return Ok(Arc::clone(pipeline));
        }
        let declared = crate::plan::yaml::parse(&plan.source.text)
            .ok()
            .and_then(|root| root.to_json().pointer(&format!("/models/{model}")).cloned())
            .ok_or_else(|| {
                Failure::new(
                    FailureCode::ConfigNoEngine,
                    format!("model `{model}` is not declared in {}", plan.path.display()),
                )
            })?;
        let judge = json!({
            "version": 1,
            "name": format!("judge-{model}"),
            "inputs": {
                "rubric": { "type": "string" },
                "output": { "type": "string" },
                "input": { "type": "string", "default": "" }
            },
            "models": { "judge": declared },
            "steps": [{
                "name": "judge",
                "type": "structured",
                "model": "judge",
                "template": JUDGE_PROMPT,
                "schema": {
                    "type": "object",
                    "properties": {
                        "pass": { "type": "boolean" },
                        "score": { "type": "number", "minimum": 0, "maximum": 1 },
                        "reason": { "type": "string" }
                    },
                    "required": ["pass", "score", "reason"],
                    "additionalProperties": false
                },
                "max_tokens": 160,
                "temperature": 0
            }]
        });
        // Named as if beside the plan, so the model's relative paths resolve as they do there.
        let path = plan
            .dir()
            .join(format!("judge of {}", file_name(&plan.path)));
        let loaded = crate::plan::load_plan_text(&path, judge.to_string()).map_err(|problems| {
            Failure::new(
                FailureCode::ConfigInvalidInput,
                format!(
                    "the judge on model `{model}` is not a valid plan: {}",
                    problems
                        .iter()
                        .map(ToString::to_string)
                        .collect::<Vec<_>>()
                        .join("; ")
                ),
            )
        })?;
        let pipeline = Arc::new(loaded.build(resources, self.options.clone())?);
        judges.insert(model.to_string(), Arc::clone(&pipeline));
        Ok(pipeline)
    }
}

fn file_name(path: &Path) -> String {
    path.file_name()
        .map_or_else(String::new, |n| n.to_string_lossy().into_owned())
}
