//! Which steps of a run wait for which, which are done, and what feedback checks have said: the
//! executor's view of the step graph as the run goes. A failed check with `feedback` sends the
//! run back: its target, the steps between and the check start over, the target's earlier
//! answer and what was wrong with it added to its messages.

use serde_json::Value;

use super::emit::Events;
use super::events::EventData;
use super::pipeline::{Feedback, Pipeline};
use super::record::{Lifecycle, StepRecord};
use crate::core::{Failure, Message};

/// Which steps wait for which, which are done, and what feedback checks have given: the
/// executor's view of the graph as the run goes (a check's feedback starts part of it over).
pub(super) struct Schedule {
    /// Per step, the steps that must be done before it starts: its `needs`, and for a step
    /// downstream of a feedback target but outside the loop, the check (so it reads the
    /// target's answer only once the check has passed it).
    waits_for: Vec<Vec<usize>>,
    /// The reverse of `waits_for`.
    pub(super) releases: Vec<Vec<usize>>,
    /// Whether the step is done in a way that lets the steps waiting for it start (it
    /// succeeded, was skipped, or failed under `on_error: continue`).
    pub(super) done: Vec<bool>,
    /// Per step, the feedback messages it runs with (its earlier answers and what was wrong).
    pub(super) feedback: Vec<Vec<Message>>,
    /// Per step, how many times it has failed (for a check: how many checks it has made).
    pub(super) failures: Vec<u32>,
}

impl Schedule {
    pub(super) fn new(pipeline: &Pipeline) -> Self {
        let count = pipeline.steps.len();
        let mut waits_for: Vec<Vec<usize>> =
            pipeline.steps.iter().map(|s| s.needs.clone()).collect();
        for (check, step) in pipeline.steps.iter().enumerate() {
            let Some(feedback) = step.feedback else {
                continue;
            };
            for (index, other) in pipeline.steps.iter().enumerate() {
                let beside_the_loop = other.upstream.contains(&feedback.step)
                    && index != check
                    && !step.upstream.contains(&index)
                    && !other.upstream.contains(&check);
                if beside_the_loop {
                    waits_for[index].push(check);
                }
            }
        }
        let mut releases = vec![Vec::new(); count];
        for (index, waits) in waits_for.iter().enumerate() {
            for &first in waits {
                releases[first].push(index);
            }
        }
        Schedule {
            waits_for,
            releases,
            done: vec![false; count],
            feedback: vec![Vec::new(); count],
            failures: vec![0; count],
        }
    }

    pub(super) fn can_start(&self, index: usize) -> bool {
        self.waits_for[index].iter().all(|&w| self.done[w])
    }

    /// A failed check sends the run back to its feedback target: VALIDATE, then EXECUTE again;
    /// the target's earlier answer and what was wrong with it join its feedback messages, and
    /// every step of the loop (the target, the steps between, the check) starts over, its run so
    /// far kept in the record as an earlier run.
    pub(super) fn send_back(
        &mut self,
        pipeline: &Pipeline,
        events: &Events,
        check: usize,
        back: Feedback,
        error: &Failure,
        records: &mut [StepRecord],
    ) {
        let target = back.step;
        events.lifecycle(Lifecycle::Validate);
        events.emit(
            Some(&pipeline.steps[check].name),
            events.new_span(),
            Some(events.run_span()),
            EventData::StepFeedback {
                to: pipeline.steps[target].name.clone(),
                next_attempt: self.failures[check] + 1,
                max_attempts: back.max_attempts,
                code: error.code,
            },
        );
        events.lifecycle(Lifecycle::Execute);
        if let Some(answer) = &records[target].output {
            let text = match answer {
                Value::String(text) => text.clone(),
                other => other.to_string(),
            };
            self.feedback[target].push(Message::assistant(text));
        }
        self.feedback[target].push(Message::user(format!(
            "Your answer did not pass the checks: {}. Answer again, and fix this.",
            error.message
        )));
        let in_loop = |i: usize| {
            i == target
                || i == check
                || (pipeline.steps[i].upstream.contains(&target)
                    && pipeline.steps[check].upstream.contains(&i))
        };
        for index in (0..records.len()).filter(|&i| in_loop(i)) {
            records[index].start_over();
            self.done[index] = false;
        }
    }
}
