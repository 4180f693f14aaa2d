//! What a step's templates see: the run's inputs, vars and globals, the outputs of the upstream
//! steps it reads, and `input` (its predecessors' outputs); and the run's own result, rendered
//! from the `output` template over every step once they are done.

use serde_json::{Map, Value, json};

use super::pipeline::Pipeline;
use super::record::StepRecord;
use crate::core::Failure;

/// What the template context of every step of a run shares: inputs, vars and the run's globals,
/// in the order a step's context has them, `steps` holding its place. Built once per run; a
/// step's context is a copy with its own upstream steps put in.
pub(super) struct RunScope {
    base: Map<String, Value>,
    /// Whether a global named `steps` took the place of the steps (it then stays).
    steps_from_globals: bool,
}

impl RunScope {
    pub(super) fn new(pipeline: &Pipeline, inputs: &Value, globals: Map<String, Value>) -> Self {
        let steps_from_globals = globals.contains_key("steps");
        let mut base = Map::new();
        base.insert("inputs".into(), inputs.clone());
        base.insert("vars".into(), pipeline.vars.clone());
        base.insert("steps".into(), Value::Object(Map::new()));
        base.extend(globals);
        RunScope {
            base,
            steps_from_globals,
        }
    }

    /// The template context of a step: inputs, vars, its upstream steps, the run's globals, and
    /// `input` when it has predecessors (one predecessor: its output; several: an object of
    /// their outputs by name).
    pub(super) fn for_step(
        &self,
        pipeline: &Pipeline,
        index: usize,
        records: &[StepRecord],
    ) -> Value {
        let step = &pipeline.steps[index];
        let mut scope = self.base.clone();
        if !self.steps_from_globals {
            let mut steps = Map::new();
            for &u in &step.reads {
                steps.insert(records[u].name.clone(), step_view(&records[u]));
            }
            scope.insert("steps".into(), Value::Object(steps));
        }
        match step.needs.as_slice() {
            [] => {}
            [only] => {
                scope.insert(
                    "input".into(),
                    records[*only].output.clone().unwrap_or(Value::Null),
                );
            }
            many => {
                let joined: Map<String, Value> = many
                    .iter()
                    .map(|&n| {
                        (
                            records[n].name.clone(),
                            records[n].output.clone().unwrap_or(Value::Null),
                        )
                    })
                    .collect();
                scope.insert("input".into(), Value::Object(joined));
            }
        }
        Value::Object(scope)
    }

    /// The context of the plan's `output` template: what every step sees, with every step's
    /// result and no `input` (the roots of [`crate::prompt::roots::OUTPUT`]).
    fn for_output(&self, records: &[StepRecord]) -> Value {
        let mut scope = self.base.clone();
        if !self.steps_from_globals {
            let steps: Map<String, Value> = records
                .iter()
                .map(|r| (r.name.clone(), step_view(r)))
                .collect();
            scope.insert("steps".into(), Value::Object(steps));
        }
        Value::Object(scope)
    }
}

/// What templates see of a finished step: its output, usage, and error (null unless it failed
/// and the run went on past it).
fn step_view(record: &StepRecord) -> Value {
    json!({
        "output": record.output.clone().unwrap_or(Value::Null),
        "usage": record.usage,
        "error": record.error,
    })
}

/// The run's result: the output template rendered over every step, or the last step's output.
pub(super) fn final_output(
    pipeline: &Pipeline,
    scope: &RunScope,
    records: &[StepRecord],
) -> Result<Value, Failure> {
    match &pipeline.output {
        Some(template) => pipeline
            .templates
            .render_str(template, &scope.for_output(records))
            .map(Value::String),
        None => Ok(records
            .last()
            .and_then(|r| r.output.clone())
            .unwrap_or(Value::Null)),
    }
}
