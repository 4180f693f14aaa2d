//! A batch's output lines, and the one writer every line goes through.
//!
//! A line is one JSON object: a row's run ([`RunLine`]), a row that could not run because its
//! inputs do not fit the plan or it could not be read ([`UnboundLine`]), or a reduce's group
//! ([`GroupLine`]). Each is a typed struct serialised straight from the row and the run record it
//! borrows, its keys in a fixed order users read and diff; `--resume`, `batch merge` and `diff`
//! read them back by `row`, `status` and `transient`. [`Lines`] writes them as they end, or
//! (`--ordered`) in the order their rows started.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::{Map, Value};

use super::group::spill::Group;
use super::input::Row;
use super::output::Sink;
use crate::core::{Cost, Failure, FailureCode, TokenUsage};
use crate::inference::Pacing;
use crate::orchestrate::{RunRecord, RunStatus, StepStatus};

/// One output line, of whichever shape.
#[derive(Serialize)]
#[serde(untagged)]
pub enum Line<'a> {
    Run(RunLine<'a>),
    Unbound(UnboundLine<'a>),
    Group(GroupLine<'a>),
}

impl Line<'_> {
    /// The row (or group) id the line is written under.
    fn id(&self) -> &str {
        match self {
            Line::Run(line) => line.row,
            Line::Unbound(line) => line.row,
            Line::Group(line) => line.row,
        }
    }

    /// The line's JSON text, without its newline. Strings, numbers and JSON values always
    /// serialise; were one not to, the batch stops with the row named rather than write a line
    /// that is not one.
    fn text(&self) -> Result<String, Failure> {
        serde_json::to_string(self).map_err(|error| {
            Failure::new(
                FailureCode::ConfigFileError,
                format!(
                    "could not write the output line of row `{}`: {error}",
                    self.id()
                ),
            )
        })
    }
}

/// A row's run: the row, its status, output or error, usage, cost, what it waited for rate
/// limits (when it did), its trace (when traces are exported) and timings per step.
#[derive(Serialize)]
pub struct RunLine<'a> {
    row: &'a str,
    index: usize,
    input: &'a Map<String, Value>,
    run_id: &'a str,
    status: &'static str,
    output: Option<&'a Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<&'a Failure>,
    /// Whether the failure may pass: a resume runs the row again.
    #[serde(skip_serializing_if = "Option::is_none")]
    transient: Option<bool>,
    usage: &'a TokenUsage,
    cost: Option<Cost>,
    duration_ms: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    rate_limit: Option<&'a Pacing>,
    #[serde(skip_serializing_if = "Option::is_none")]
    trace_id: Option<&'a str>,
    steps: Vec<StepLine<'a>>,
}

impl<'a> RunLine<'a> {
    pub fn of(row: &'a Row, record: &'a RunRecord) -> Line<'a> {
        Line::Run(RunLine {
            row: &row.id,
            index: row.index,
            input: &row.data,
            run_id: &record.run_id,
            status: status_name(record.status),
            output: record.output.as_ref(),
            error: record.error.as_ref(),
            transient: record.error.as_ref().map(Failure::transient),
            usage: &record.usage,
            cost: record.cost,
            duration_ms: record.duration_ms,
            rate_limit: (!record.rate_limit.is_none()).then_some(&record.rate_limit),
            trace_id: record.trace_id.as_deref(),
            steps: steps_of(record),
        })
    }
}

/// A row that did not run: unreadable, a repeated id, or inputs that do not fit the plan.
#[derive(Serialize)]
pub struct UnboundLine<'a> {
    row: &'a str,
    index: usize,
    status: &'static str,
    input: &'a Map<String, Value>,
    error: &'a Failure,
}

impl<'a> UnboundLine<'a> {
    pub fn of(row: &'a Row, failure: &'a Failure) -> Line<'a> {
        Line::Unbound(UnboundLine {
            row: &row.id,
            index: row.index,
            status: status_name(RunStatus::Error),
            input: &row.data,
            error: failure,
        })
    }
}

/// A reduce's group: its id (the key's canonical text), key, row count, status, output or error,
/// and what all its runs spent; `run_id`, `duration_ms` and `steps` are its last run's (absent
/// when it failed before a run).
#[derive(Serialize)]
pub struct GroupLine<'a> {
    row: &'a str,
    group: Option<&'a Value>,
    rows: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    run_id: Option<&'a str>,
    status: &'static str,
    output: Option<&'a Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<&'a Failure>,
    #[serde(skip_serializing_if = "Option::is_none")]
    transient: Option<bool>,
    usage: &'a TokenUsage,
    cost: Option<Cost>,
    model_calls: u64,
    runs: u64,
    fold_levels: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    duration_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    steps: Option<Vec<StepLine<'a>>>,
}

impl<'a> GroupLine<'a> {
    /// Group `group`'s line, from its last run's `record` (None when it failed before a run)
    /// and its `error` (the run's, or what kept it from running).
    pub fn of(
        group: &'a Group,
        spent: &'a Spent,
        fold_levels: u32,
        record: Option<&'a RunRecord>,
        error: Option<&'a Failure>,
    ) -> Line<'a> {
        Line::Group(GroupLine {
            row: &group.id,
            group: group.key.as_ref(),
            rows: group.rows,
            run_id: record.map(|r| r.run_id.as_str()),
            status: status_name(record.map_or(RunStatus::Error, |r| r.status)),
            output: record.and_then(|r| r.output.as_ref()),
            error,
            transient: error.map(Failure::transient),
            usage: &spent.usage,
            cost: spent.cost,
            model_calls: spent.model_calls,
            runs: spent.runs,
            fold_levels,
            duration_ms: record.map(|r| r.duration_ms),
            steps: record.map(steps_of),
        })
    }
}

/// What a group's runs spent, chunks an earlier run finished included.
#[derive(Debug, Default)]
pub struct Spent {
    pub usage: TokenUsage,
    pub cost: Option<Cost>,
    pub model_calls: u64,
    pub runs: u64,
}

impl Spent {
    /// Adds one run's spending.
    pub fn add(&mut self, usage: TokenUsage, cost: Option<Cost>, model_calls: u64) {
        self.usage += usage;
        self.cost = Cost::sum(self.cost, cost);
        self.model_calls += model_calls;
        self.runs += 1;
    }
}

/// A step as output lines give it: name, status, duration, usage and cost.
#[derive(Serialize)]
struct StepLine<'a> {
    name: &'a str,
    status: StepStatus,
    duration_ms: f64,
    usage: &'a TokenUsage,
    cost: Option<Cost>,
}

/// A run's status as output lines give it.
fn status_name(status: RunStatus) -> &'static str {
    match status {
        RunStatus::Complete => "ok",
        RunStatus::Error => "error",
        RunStatus::Cancelled => "cancelled",
    }
}

/// A run's steps as output lines give them.
fn steps_of(record: &RunRecord) -> Vec<StepLine<'_>> {
    let steps = record.steps.iter();
    steps
        .map(|step| StepLine {
            name: &step.name,
            status: step.status,
            duration_ms: step.duration_ms,
            usage: &step.usage,
            cost: step.cost,
        })
        .collect()
}

/// Where the lines go: written as their rows end, or (`ordered`) in the order the rows started.
pub struct Lines {
    sink: Sink,
    ordered: bool,
    /// With `ordered`: lines that wait for an earlier one.
    waiting: BTreeMap<usize, String>,
    next_sequence: usize,
    next_to_write: usize,
}

impl Lines {
    pub fn new(sink: Sink, ordered: bool) -> Self {
        Lines {
            sink,
            ordered,
            waiting: BTreeMap::new(),
            next_sequence: 0,
            next_to_write: 0,
        }
    }

    /// The place of the next row (or group) started.
    pub fn sequence(&mut self) -> usize {
        self.next_sequence += 1;
        self.next_sequence - 1
    }

    /// Writes the line of the row started at `sequence` now, or (ordered) once every earlier
    /// line is written.
    pub fn write(&mut self, sequence: usize, line: &Line<'_>) -> Result<(), Failure> {
        let text = line.text()?;
        if !self.ordered {
            return self.sink.write_line(text);
        }
        self.waiting.insert(sequence, text);
        while let Some(text) = self.waiting.remove(&self.next_to_write) {
            self.sink.write_line(text)?;
            self.next_to_write += 1;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::orchestrate::StepRecord;
    use serde_json::json;
    use std::time::Duration;

    fn row() -> Row {
        Row {
            index: 3,
            id: "r3".into(),
            data: Map::from_iter([("text".to_string(), json!("hi"))]),
        }
    }

    /// A record of a run with one step `ask`, which waited for its model's pace and was traced.
    fn record(status: RunStatus, error: Option<Failure>) -> RunRecord {
        let mut step = StepRecord::not_run("ask", "infer");
        step.status = StepStatus::Failed;
        step.duration_ms = 1.5;
        let mut record = RunRecord::empty("run-1", status);
        record.trace_id = Some("4bf92f3577b34da6a3ce929d0e0e4736".into());
        record.steps = vec![step];
        record.model_calls = 1;
        record.rate_limit = Pacing {
            waited: Duration::from_millis(250),
            rate_limited: 2,
        };
        record.duration_ms = 2.5;
        record.error = error;
        record
    }

    fn text(line: &Line<'_>) -> String {
        line.text().expect("a line")
    }

    /// A row's run, failed: its error and whether it may pass, its rate-limit wait and its
    /// trace, each only when it has them.
    #[test]
    fn a_run_line_names_the_row_then_the_run_in_a_fixed_order() {
        let row = row();
        let failed = record(
            RunStatus::Error,
            Some(Failure::new(FailureCode::InferenceTimeout, "too slow")),
        );
        assert_eq!(
            text(&RunLine::of(&row, &failed)),
            r#"{"row":"r3","index":3,"input":{"text":"hi"},"run_id":"run-1","status":"error","output":null,"error":{"code":"INFERENCE_TIMEOUT","category":"inference","message":"too slow","retryable":true},"transient":true,"usage":{"prompt_tokens":0,"completion_tokens":0},"cost":null,"duration_ms":2.5,"rate_limit":{"waited_ms":250,"refused":2},"trace_id":"4bf92f3577b34da6a3ce929d0e0e4736","steps":[{"name":"ask","status":"failed","duration_ms":1.5,"usage":{"prompt_tokens":0,"completion_tokens":0},"cost":null}]}"#
        );
        let mut ok = record(RunStatus::Complete, None);
        ok.output = Some(json!({ "label": "good" }));
        ok.trace_id = None;
        ok.rate_limit = Pacing::default();
        assert_eq!(
            text(&RunLine::of(&row, &ok)),
            r#"{"row":"r3","index":3,"input":{"text":"hi"},"run_id":"run-1","status":"ok","output":{"label":"good"},"usage":{"prompt_tokens":0,"completion_tokens":0},"cost":null,"duration_ms":2.5,"steps":[{"name":"ask","status":"failed","duration_ms":1.5,"usage":{"prompt_tokens":0,"completion_tokens":0},"cost":null}]}"#
        );
    }

    /// A row that did not run: its status before its input, its error, and no run.
    #[test]
    fn an_unbound_row_line_has_its_error_and_no_run() {
        let row = row();
        let failure = Failure::new(FailureCode::ConfigInvalidInput, "missing input `q`");
        assert_eq!(
            text(&UnboundLine::of(&row, &failure)),
            r#"{"row":"r3","index":3,"status":"error","input":{"text":"hi"},"error":{"code":"CONFIG_INVALID_INPUT","category":"configuration","message":"missing input `q`","retryable":false}}"#
        );
    }

    /// A group: its key and row count, what all its runs spent, and its last run's id, timings
    /// and steps — none of those when it failed before a run.
    #[test]
    fn a_group_line_gives_the_key_the_totals_and_the_last_run() {
        let group = Group {
            key: Some(json!("a")),
            id: "\"a\"".into(),
            rows: 7,
        };
        let mut spent = Spent::default();
        spent.add(
            TokenUsage {
                prompt_tokens: 10,
                completion_tokens: 2,
                reasoning_tokens: None,
            },
            None,
            1,
        );
        spent.add(TokenUsage::default(), None, 1);
        let mut last = record(RunStatus::Complete, None);
        last.output = Some(json!("a: 7 rows"));
        assert_eq!(
            text(&GroupLine::of(&group, &spent, 2, Some(&last), None)),
            r#"{"row":"\"a\"","group":"a","rows":7,"run_id":"run-1","status":"ok","output":"a: 7 rows","usage":{"prompt_tokens":10,"completion_tokens":2},"cost":null,"model_calls":2,"runs":2,"fold_levels":2,"duration_ms":2.5,"steps":[{"name":"ask","status":"failed","duration_ms":1.5,"usage":{"prompt_tokens":0,"completion_tokens":0},"cost":null}]}"#
        );
        let keyless = Group {
            key: None,
            id: "null".into(),
            rows: 1,
        };
        let failure = Failure::new(FailureCode::ConfigInvalidInput, "rows do not fit");
        assert_eq!(
            text(&GroupLine::of(
                &keyless,
                &Spent::default(),
                1,
                None,
                Some(&failure)
            )),
            r#"{"row":"null","group":null,"rows":1,"status":"error","output":null,"error":{"code":"CONFIG_INVALID_INPUT","category":"configuration","message":"rows do not fit","retryable":false},"transient":false,"usage":{"prompt_tokens":0,"completion_tokens":0},"cost":null,"model_calls":0,"runs":0,"fold_levels":1}"#
        );
    }

    #[test]
    fn ordered_lines_wait_for_the_rows_started_before_them() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("out.jsonl");
        let file = std::fs::File::create(&path).expect("created");
        let mut lines = Lines::new(
            Sink::File {
                path: path.clone(),
                file,
            },
            true,
        );
        let rows: Vec<Row> = (0..3)
            .map(|index| Row {
                index,
                id: index.to_string(),
                data: Map::new(),
            })
            .collect();
        let failure = Failure::new(FailureCode::ConfigInvalidInput, "no");
        let sequences: Vec<usize> = rows.iter().map(|_| lines.sequence()).collect();
        for at in [2, 0, 1] {
            lines
                .write(sequences[at], &UnboundLine::of(&rows[at], &failure))
                .expect("written");
        }
        let written = std::fs::read_to_string(&path).expect("read");
        let ids: Vec<Value> = written
            .lines()
            .map(|line| serde_json::from_str::<Value>(line).expect("JSON")["row"].clone())
            .collect();
        assert_eq!(ids, [json!("0"), json!("1"), json!("2")]);
    }
}
