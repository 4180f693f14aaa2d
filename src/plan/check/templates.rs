//! Checks on templates and prompt files: they parse, and read only variables that exist where
//! they run (a declared input, a var, an upstream step, the step's own extras). Each problem is
//! located inside the template, in the plan or in the prompt file.

use std::collections::BTreeSet;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use super::*;

/// A prompt file read once and shared by every step that uses it.
pub(super) struct PromptFile {
    pub(super) source: Source,
    pub(super) parsed: Result<TemplateInfo, TemplateSyntaxError>,
}

/// Where a template's variables may come from.
pub(super) struct Scope {
    /// The step the template belongs to (None for plan-level templates).
    pub(super) step: Option<usize>,
    /// Steps whose outputs are available; None means every step (the plan's `output`).
    pub(super) upstream: Option<BTreeSet<usize>>,
    /// Whether `input` (the upstream output) is defined.
    pub(super) has_input: bool,
    /// Names this template sees besides the usual roots (e.g. `args` for tool argv).
    pub(super) extra: &'static [&'static str],
    /// Which roots the template sees where it runs (a list of [`crate::prompt::roots`]; none in a
    /// tool's argv).
    pub(super) roots: &'static [&'static str],
}

/// Where a template's text lives, for pointing at a variable inside it.
pub(super) enum Site<'t> {
    /// A YAML scalar at this span of the plan, and its value (the template's text).
    Plan(Range<usize>, &'t str),
    /// A prompt file.
    File(Source),
}

/// For every byte of `value`, its byte offset in `written` (the scalar as it stands in the file),
/// matching characters in order and skipping what the value does not have (quotes, a block
/// header, indentation); a folded line break in the source stands for a space in the value.
/// None when the value cannot be followed through the written text.
fn align(value: &str, written: &str) -> Option<Vec<usize>> {
    let mut offsets = Vec::with_capacity(value.len());
    let mut source = written.char_indices().peekable();
    for wanted in value.chars() {
        let position = loop {
            let (position, found) = source.next()?;
            if found == wanted || (wanted == ' ' && found == '\n') {
                break position;
            }
        };
        offsets.extend(std::iter::repeat_n(position, wanted.len_utf8()));
    }
    Some(offsets)
}

/// Prompt files available in `dir` (for "did you mean").
pub(super) fn prompt_names(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|entries| {
            let mut names: Vec<String> = entries
                .filter_map(Result::ok)
                .filter_map(|e| e.file_name().into_string().ok())
                .collect();
            names.sort();
            names
        })
        .unwrap_or_default()
}

/// A path shown without `dir/../` detours.
pub(super) fn pretty_path(path: &Path) -> String {
    let mut parts: Vec<std::path::Component<'_>> = Vec::new();
    for component in path.components() {
        match component {
            std::path::Component::ParentDir
                if parts
                    .last()
                    .is_some_and(|c| matches!(c, std::path::Component::Normal(_))) =>
            {
                parts.pop();
            }
            other => parts.push(other),
        }
    }
    parts.iter().collect::<PathBuf>().display().to_string()
}

impl Checker<'_> {
    pub(super) fn step_template(
        &mut self,
        at: &[String],
        template: &TemplateRef<'_>,
        scope: &Scope,
    ) {
        match template.source {
            TemplateSource::File => self.prompt_file(at, template.text, scope),
            TemplateSource::Inline | TemplateSource::Expression => {
                self.inline_template(at, template.text, template.source, scope)
            }
        }
    }

    pub(super) fn inline_template(
        &mut self,
        at: &[String],
        text: &str,
        source: TemplateSource,
        scope: &Scope,
    ) {
        let parsed = match source {
            TemplateSource::Expression => prompt::analyze_expression(text),
            TemplateSource::Inline | TemplateSource::File => prompt::analyze_template(text),
        };
        let node_span = self.span(at);
        match parsed {
            Ok(info) => self.variables(&info, scope, &Site::Plan(node_span, text)),
            Err(error) => {
                let span = error
                    .range
                    .as_ref()
                    .and_then(|range| self.inner_span(&node_span, text, range))
                    .unwrap_or(node_span);
                self.emit(
                    PlanError::TemplateSyntax {
                        message: error.message,
                    },
                    span,
                    "here",
                );
            }
        }
    }

    /// Maps a range inside a template's text (a YAML scalar's value) onto the YAML source. The
    /// value is aligned with what was written character by character: indentation of a block
    /// scalar (`|`, `>`), its header and folded line breaks are skipped over, so a position on
    /// the third line of a block is found on the third line of the block. None when the written
    /// text does not hold the value (escapes it cannot follow).
    pub(super) fn inner_span(
        &self,
        node_span: &Range<usize>,
        text: &str,
        range: &Range<usize>,
    ) -> Option<Range<usize>> {
        let written = self.source.text.get(node_span.clone())?;
        let offsets = align(text, written)?;
        let at = |offset: usize| {
            offsets
                .get(offset)
                .copied()
                .unwrap_or_else(|| offsets.last().map_or(0, |last| last + 1))
        };
        let start = node_span.start + at(range.start.min(text.len()));
        let end = if range.end > range.start {
            node_span.start + at(range.end - 1) + 1
        } else {
            start
        };
        Some(start..end.max(start))
    }

    pub(super) fn prompts_dir(&self) -> Option<PathBuf> {
        [
            self.dir.join("prompts"),
            self.dir.join("..").join("prompts"),
        ]
        .into_iter()
        .find(|d| d.is_dir())
    }

    pub(super) fn prompt_file(&mut self, at: &[String], name: &str, scope: &Scope) {
        let file = match self.prompts.get(name) {
            Some(cached) => cached.clone(),
            None => {
                let loaded = self.read_prompt(name);
                if let Some(file) = &loaded
                    && let Err(error) = &file.parsed
                {
                    let span = error.range.clone().unwrap_or(0..0);
                    self.out.push(Diagnostic::at(
                        PlanError::TemplateSyntax {
                            message: error.message.clone(),
                        },
                        &file.source,
                        span,
                        "here",
                    ));
                }
                self.prompts.insert(name.to_string(), loaded.clone());
                loaded
            }
        };
        match file {
            Some(file) => {
                if let Ok(info) = &file.parsed {
                    self.variables(info, scope, &Site::File(file.source.clone()));
                }
            }
            None => {
                let span = self.span(at);
                let looked = match self.prompts_dir() {
                    Some(dir) => format!("looked in {}", dir.display()),
                    None => format!(
                        "no prompts/ directory next to the plan or above it ({})",
                        self.dir.display()
                    ),
                };
                let mut hint = looked;
                if let Some(dir) = self.prompts_dir()
                    && let Some(close) =
                        did_you_mean(name, prompt_names(&dir).iter().map(String::as_str))
                {
                    hint = format!("{close} ({hint})");
                }
                self.emit(
                    PlanError::PromptNotFound { name: name.into() },
                    span,
                    "no such prompt file",
                )
                .hint = Some(hint);
            }
        }
    }

    pub(super) fn read_prompt(&self, name: &str) -> Option<Rc<PromptFile>> {
        let dir = self.prompts_dir()?;
        let path = dir.join(name);
        let text = crate::core::file::read_bounded(&path, crate::core::file::TEXT_LIMIT).ok()?;
        let display = pretty_path(&path);
        let parsed = prompt::analyze_template(&text);
        Some(Rc::new(PromptFile {
            source: Source::new(display, text),
            parsed,
        }))
    }

    pub(super) fn variables(&mut self, info: &TemplateInfo, scope: &Scope, site: &Site<'_>) {
        for variable in &info.variables {
            let parts: Vec<&str> = variable.split('.').collect();
            self.note_read(&parts, scope);
            let problem = self.variable_problem(&parts, scope);
            if let Some((error, hint)) = problem {
                let needle = match &error {
                    PlanError::UnknownVariable { variable } => variable.clone(),
                    _ => "input".to_string(),
                };
                let within = info.locate(&needle);
                let (source, span) = match site {
                    Site::Plan(node, text) => (
                        self.source.clone(),
                        within
                            .and_then(|range| self.inner_span(node, text, &range))
                            .unwrap_or_else(|| node.clone()),
                    ),
                    Site::File(file) => (file.clone(), within.unwrap_or(0..file.text.len().min(1))),
                };
                let mut d = Diagnostic::at(error, &source, span, "not defined here");
                d.hint = hint;
                self.out.push(d);
            }
        }
    }

    /// Records which step a step's template reads, so the executor passes only those.
    pub(super) fn note_read(&mut self, parts: &[&str], scope: &Scope) {
        let Some(step) = scope.step else { return };
        if parts.first() != Some(&"steps") || !scope.roots.contains(&"steps") {
            return;
        }
        match parts.get(1).and_then(|name| {
            self.plan
                .steps
                .iter()
                .position(|s| s.common().name == *name)
        }) {
            Some(read) => {
                if let Some(reads) = &mut self.reads[step] {
                    reads.insert(read);
                }
            }
            None if parts.len() == 1 => self.reads[step] = None,
            None => {}
        }
    }

    /// Why a variable path cannot be read in this scope, if it cannot.
    pub(super) fn variable_problem(
        &self,
        parts: &[&str],
        scope: &Scope,
    ) -> Option<(PlanError, Option<String>)> {
        let head = parts.first().copied().unwrap_or_default();
        let unknown = |shown: &str, hint: String| {
            Some((
                PlanError::UnknownVariable {
                    variable: shown.to_string(),
                },
                Some(hint),
            ))
        };
        if scope.extra.contains(&head) || GLOBAL_FUNCTIONS.contains(&head) {
            return None;
        }
        if !scope.roots.contains(&head) {
            let roots: Vec<&str> = scope.roots.iter().chain(scope.extra).copied().collect();
            return unknown(
                head,
                suggestion(head, "variables here", roots.iter().copied()),
            );
        }
        match (head, parts.get(1)) {
            ("inputs", Some(name)) if !self.plan.inputs.contains_key(*name) => unknown(
                &format!("inputs.{name}"),
                suggestion(name, "inputs", self.plan.inputs.keys().map(String::as_str)),
            ),
            ("vars", Some(name)) if !self.plan.vars.contains_key(*name) => unknown(
                &format!("vars.{name}"),
                suggestion(name, "vars", self.plan.vars.keys().map(String::as_str)),
            ),
            ("steps", Some(name)) => self.step_variable(name, parts.get(2).copied(), scope),
            ("input", _) if !scope.has_input => scope.step.map(|i| {
                (
                    PlanError::NoInput {
                        step: self.step_name(i).to_string(),
                    },
                    None,
                )
            }),
            _ => None,
        }
    }

    pub(super) fn step_variable(
        &self,
        name: &str,
        field: Option<&str>,
        scope: &Scope,
    ) -> Option<(PlanError, Option<String>)> {
        let shown = format!("steps.{name}");
        let Some(index) = self.plan.steps.iter().position(|s| s.common().name == name) else {
            let names = self.plan.steps.iter().map(|s| s.common().name.as_str());
            return Some((
                PlanError::UnknownVariable { variable: shown },
                Some(suggestion(name, "steps", names)),
            ));
        };
        if let (Some(upstream), Some(current)) = (&scope.upstream, scope.step)
            && !upstream.contains(&index)
        {
            let hint = if index == current {
                "a step cannot read its own output".to_string()
            } else {
                format!(
                    "`{name}` is not upstream of `{}`; add it to `needs` so it runs first",
                    self.step_name(current)
                )
            };
            return Some((PlanError::UnknownVariable { variable: shown }, Some(hint)));
        }
        match field {
            Some(field) if !STEP_FIELDS.contains(&field) => Some((
                PlanError::UnknownVariable {
                    variable: format!("steps.{name}.{field}"),
                },
                Some(suggestion(
                    field,
                    "step fields",
                    STEP_FIELDS.iter().copied(),
                )),
            )),
            _ => None,
        }
    }

    pub(super) fn plan_output(&mut self) {
        if let Some(output) = &self.plan.output {
            let scope = Scope {
                step: None,
                upstream: None,
                has_input: false,
                extra: &[],
                roots: roots::OUTPUT,
            };
            self.inline_template(&path(&["output"]), output, TemplateSource::Inline, &scope);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_is_followed_through_quotes_blocks_and_folds() {
        let block = "|\n    Write about\n    {{ topik }}\n";
        let value = "Write about\n{{ topik }}\n";
        let offsets = align(value, block).expect("aligned");
        let at = value.find("topik").expect("in the value");
        assert_eq!(&block[offsets[at]..offsets[at] + 5], "topik");
        let folded = ">\n  one\n  two\n";
        let offsets = align("one two\n", folded).expect("aligned");
        assert_eq!(&folded[offsets[4]..offsets[4] + 3], "two");
        assert_eq!(
            align("a\tb", "\"a\\tb\""),
            None,
            "an escape it cannot follow"
        );
    }

    #[test]
    fn paths_lose_parent_detours() {
        assert_eq!(
            pretty_path(Path::new("plans/../prompts/a.j2")),
            "prompts/a.j2"
        );
    }
}
