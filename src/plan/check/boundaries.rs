//! The typed step boundaries: each step type declares what it passes on ([`OutputKind`]) and
//! what it takes ([`Accepts`]), and a step connected to an input no run could give it — a rerank
//! step after a template, a tool's text, several steps at once, or nothing — is refused here,
//! with both steps located, instead of failing at run time. A connection that may work (JSON
//! whose shape only the run shows, a tool kind that does not say what it returns) is allowed
//! and checked at run time.

use super::*;
use crate::plan::steps::{Accepts, OutputKind};

/// What arrives as a step's `input`, as far as the plan says.
enum Arrives {
    /// Nothing comes before the step: its input is null.
    Nothing,
    /// Several steps' outputs, as a mapping by step name.
    Several,
    /// The output of step `from` (past any steps that pass their input on unchanged).
    Output { from: usize, kind: OutputKind },
}

impl Checker<'_> {
    /// Refuses step `index` when what arrives as its input can never be what it takes.
    pub(super) fn step_boundary(&mut self, index: usize) {
        let step = &self.plan.steps[index];
        if step.accepts() == Accepts::Anything {
            return;
        }
        let arrives = self.arrives(index);
        let gives = match &arrives {
            Arrives::Nothing => "is null: no step comes before it".to_string(),
            Arrives::Several => {
                "is a mapping of several steps' outputs (it has more than one `needs`)".to_string()
            }
            Arrives::Output { from, kind } => match never_candidates(kind) {
                Some(what) => format!("from step `{}` is {what}", self.step_name(*from)),
                None => return,
            },
        };
        let here = self.span(&step_path(index, &path(&["type"])));
        let mut diagnostic = Diagnostic::at(
            PlanError::StepBoundary {
                step: step.common().name.clone(),
                accepts: "a list of candidates".into(),
                gives,
            },
            self.source,
            here,
            "takes a list of candidates",
        );
        if let Arrives::Several = arrives {
            let needs = self.key_span(&step_path(index, &path(&["needs"])));
            diagnostic = diagnostic.with_label(needs, "more than one step");
        }
        if let Arrives::Output { from, kind } = &arrives {
            let there = self.span(&step_path(*from, &path(&["type"])));
            let what = never_candidates(kind).unwrap_or_default();
            diagnostic = diagnostic.with_label(there, format!("gives {what}"));
        }
        self.out.push(diagnostic);
    }

    /// What arrives as step `index`'s input: the one step before it (followed past steps that
    /// pass their input on), several, or none.
    fn arrives(&self, index: usize) -> Arrives {
        let mut at = index;
        // Each hop goes to an earlier step in a valid plan; the bound stops a cycle.
        for _ in 0..=self.plan.steps.len() {
            let count = match &self.plan.steps[at].common().needs {
                Some(needs) => needs.len(),
                None => usize::from(at > 0),
            };
            let upstream = self.graph.predecessors(at);
            let from = match (count, upstream.as_slice()) {
                (0, _) => return Arrives::Nothing,
                (1, [only]) => *only,
                (1, _) => {
                    return Arrives::Output {
                        from: at,
                        kind: OutputKind::Unknown,
                    };
                }
                _ => return Arrives::Several,
            };
            let kind = match self.plan.steps[from].output() {
                OutputKind::Input => {
                    at = from;
                    continue;
                }
                OutputKind::OfTool(tool) => self
                    .plan
                    .tools
                    .get(&tool)
                    .map_or(OutputKind::Unknown, |spec| spec.kind().output()),
                kind => kind,
            };
            return Arrives::Output { from, kind };
        }
        Arrives::Output {
            from: at,
            kind: OutputKind::Unknown,
        }
    }
}

/// What an output of this kind is, when it can never be a list of candidates.
fn never_candidates(kind: &OutputKind) -> Option<String> {
    match kind {
        OutputKind::Text => Some("text".into()),
        OutputKind::Json(Some(json_type)) if json_type != "array" => {
            Some(format!("JSON of type `{json_type}`"))
        }
        OutputKind::Json(_)
        | OutputKind::Candidates
        | OutputKind::Input
        | OutputKind::OfTool(_)
        | OutputKind::Unknown => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_output_that_may_be_a_list_can_feed_candidates() {
        let json = |t: Option<&str>| OutputKind::Json(t.map(String::from));
        assert_eq!(never_candidates(&OutputKind::Text).as_deref(), Some("text"));
        assert_eq!(
            never_candidates(&json(Some("object"))).as_deref(),
            Some("JSON of type `object`")
        );
        for may in [
            json(Some("array")),
            json(None),
            OutputKind::Candidates,
            OutputKind::Unknown,
        ] {
            assert_eq!(never_candidates(&may), None, "{may:?}");
        }
    }
}
