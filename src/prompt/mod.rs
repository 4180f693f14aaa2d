//! Prompt templates: one minijinja configuration for the whole crate, static analysis of
//! templates (does it parse, which variables does it read) so plans are checked before they run,
//! and rendering at run time.
//!
//! Templates render with strict undefined: a misspelt variable is an error, never an empty string.
//! Prompt files are loaded by name from one directory (the plan's `prompts/`), so `{% include %}`
//! and `{% import %}` work between them.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::{PoisonError, RwLock, RwLockReadGuard};

use minijinja::machinery::{Token, tokenize};
use minijinja::syntax::SyntaxConfig;
use minijinja::{Environment, UndefinedBehavior, Value as TemplateValue};
use serde_json::Value;

use crate::core::{Failure, FailureCode};

pub mod roots;

/// Functions minijinja provides globally; templates may call them without declaring anything.
pub const GLOBAL_FUNCTIONS: &[&str] = &["range", "dict", "debug", "namespace"];

/// A template that does not parse.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TemplateSyntaxError {
    /// What is wrong, in minijinja's words.
    pub message: String,
    /// Byte range of the problem within the template text, when minijinja knows it.
    pub range: Option<Range<usize>>,
}

/// What a template reads from its context.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TemplateInfo {
    /// Dotted paths of the variables read, e.g. `inputs.question`, `steps.answer.output`.
    pub variables: BTreeSet<String>,
    /// Every dotted path written in the template's tags, with the byte range of each prefix:
    /// where a variable is, taken from the template's own tokens (so a word in the text around
    /// the tags is never mistaken for it).
    pub paths: Vec<PathAt>,
}

/// A dotted path in a template's tags (`steps.answer.output`) and where it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathAt {
    pub parts: Vec<String>,
    /// Byte offset of the path's first character in the template.
    pub start: usize,
    /// For each part, the byte offset just past it.
    pub ends: Vec<usize>,
}

impl TemplateInfo {
    /// The byte range of the first place `variable` (a dotted path) is read, if found.
    pub fn locate(&self, variable: &str) -> Option<Range<usize>> {
        let wanted: Vec<&str> = variable.split('.').collect();
        self.paths.iter().find_map(|path| {
            let matches = path.parts.len() >= wanted.len()
                && path.parts.iter().zip(&wanted).all(|(a, b)| a == b);
            matches.then(|| path.start..path.ends[wanted.len() - 1])
        })
    }
}

/// The dotted path of a template that is one `{{ a.b.c }}` and nothing else (whitespace
/// around it aside), read from its tokens; None for any other template.
pub fn single_path(text: &str) -> Option<Vec<String>> {
    let mut parts = Vec::new();
    let mut state = 0; // 0 before `{{`, 1 expecting a name, 2 after a name, 3 after `}}`
    for token in tokenize(text, false, SyntaxConfig::default()) {
        let Ok((token, _)) = token else { return None };
        state = match (state, token) {
            (0 | 3, Token::TemplateData(data)) if data.trim().is_empty() => state,
            (0, Token::VariableStart) => 1,
            (1, Token::Ident(name)) => {
                parts.push(name.to_string());
                2
            }
            (2, Token::Dot) => 1,
            (2, Token::VariableEnd) => 3,
            _ => return None,
        };
    }
    (state == 3).then_some(parts)
}

/// The dotted paths in the tags of `text` (an expression when `in_expr`), from its tokens.
fn dotted_paths(text: &str, in_expr: bool) -> Vec<PathAt> {
    let mut paths: Vec<PathAt> = Vec::new();
    let mut open: Option<PathAt> = None;
    let mut after_dot = false;
    for token in tokenize(text, in_expr, SyntaxConfig::default()) {
        let Ok((token, span)) = token else { break };
        let (start, end) = (span.start_offset as usize, span.end_offset as usize);
        match token {
            Token::Ident(name) if after_dot => {
                if let Some(path) = open.as_mut() {
                    path.parts.push(name.to_string());
                    path.ends.push(end);
                }
                after_dot = false;
            }
            Token::Ident(name) => {
                paths.extend(open.take());
                open = Some(PathAt {
                    parts: vec![name.to_string()],
                    start,
                    ends: vec![end],
                });
            }
            Token::Dot if open.is_some() => after_dot = true,
            _ => {
                paths.extend(open.take());
                after_dot = false;
            }
        }
    }
    paths.extend(open);
    paths
}

/// The environment every template is compiled in: strict undefined, JSON-friendly filters.
pub fn environment() -> Environment<'static> {
    let mut env = Environment::new();
    env.set_undefined_behavior(UndefinedBehavior::Strict);
    env
}

/// Most inline templates one [`Templates`] keeps compiled; texts beyond it are compiled on each
/// render, so a caller rendering ever-new texts cannot grow memory without bound.
const MAX_COMPILED_INLINE: usize = 1024;

/// Renders templates for one plan: inline text, prompt files from its `prompts/` directory, and
/// expressions (`when:`, validation `expr`).
///
/// An inline text is compiled once, on its first render, and kept: a batch renders the same
/// few templates for every row.
pub struct Templates {
    compiled: RwLock<Compiled>,
}

/// The environment and the inline texts compiled into it.
struct Compiled {
    env: Environment<'static>,
    /// The name each inline text was added under: `/inline/N`, a name the prompt-file loader
    /// never serves (it refuses absolute names), without an extension (so nothing is
    /// auto-escaped, as for a template rendered from a string).
    inline: HashMap<String, String>,
}

impl Templates {
    /// Templates whose prompt files are read from `prompts_dir` (none when it is `None`).
    pub fn new(prompts_dir: Option<PathBuf>) -> Self {
        let mut env = environment();
        if let Some(dir) = prompts_dir {
            env.set_loader(move |name: &str| {
                let Some(path) = prompt_path(&dir, name) else {
                    return Ok(None);
                };
                match crate::core::file::read_bounded(&path, crate::core::file::TEXT_LIMIT) {
                    Ok(text) => Ok(Some(text)),
                    Err(e) if e.is_not_found() => Ok(None),
                    Err(e) => Err(minijinja::Error::new(
                        minijinja::ErrorKind::InvalidOperation,
                        format!("cannot read prompt file {name}: {}", e.reason()),
                    )),
                }
            });
        }
        Templates {
            compiled: RwLock::new(Compiled {
                env,
                inline: HashMap::new(),
            }),
        }
    }

    fn read(&self) -> RwLockReadGuard<'_, Compiled> {
        // Rendering never panics while holding the lock; if something did, what it guarded is
        // still a usable environment.
        self.compiled.read().unwrap_or_else(PoisonError::into_inner)
    }

    /// Renders inline template text.
    pub fn render_str(&self, text: &str, context: &Value) -> Result<String, Failure> {
        let failure = |e: minijinja::Error| render_failure("template", &e);
        {
            let compiled = self.read();
            match compiled.inline.get(text) {
                Some(name) => {
                    let template = compiled.env.get_template(name).map_err(failure)?;
                    return template.render(template_value(context)).map_err(failure);
                }
                None if compiled.inline.len() >= MAX_COMPILED_INLINE => {
                    return compiled
                        .env
                        .render_str(text, template_value(context))
                        .map_err(failure);
                }
                None => {}
            }
        }
        {
            let mut compiled = self
                .compiled
                .write()
                .unwrap_or_else(PoisonError::into_inner);
            if !compiled.inline.contains_key(text) {
                let name = format!("/inline/{}", compiled.inline.len());
                compiled
                    .env
                    .add_template_owned(name.clone(), text.to_string())
                    .map_err(failure)?;
                compiled.inline.insert(text.to_string(), name);
            }
        }
        self.render_str(text, context)
    }

    /// Renders the prompt file `name`.
    pub fn render_file(&self, name: &str, context: &Value) -> Result<String, Failure> {
        let compiled = self.read();
        let template = compiled
            .env
            .get_template(name)
            .map_err(|e| render_failure(name, &e))?;
        template
            .render(template_value(context))
            .map_err(|e| render_failure(name, &e))
    }

    /// Evaluates an expression to a JSON value (an undefined result is an error).
    pub fn evaluate(&self, expression: &str, context: &Value) -> Result<Value, Failure> {
        let value = self.eval(expression, context)?;
        if value.is_undefined() {
            return Err(Failure::new(
                FailureCode::ConfigTemplateError,
                format!("cannot render expression: `{expression}` is undefined"),
            ));
        }
        serde_json::to_value(&value).map_err(|e| {
            Failure::new(
                FailureCode::ConfigTemplateError,
                format!("cannot render expression: {e}"),
            )
        })
    }

    /// Evaluates an expression and tells whether the result is true (minijinja truthiness).
    pub fn is_true(&self, expression: &str, context: &Value) -> Result<bool, Failure> {
        Ok(self.eval(expression, context)?.is_true())
    }

    fn eval(&self, expression: &str, context: &Value) -> Result<TemplateValue, Failure> {
        let compiled = self.read();
        let expression = compiled
            .env
            .compile_expression(expression)
            .map_err(|e| render_failure("expression", &e))?;
        expression
            .eval(template_value(context))
            .map_err(|e| render_failure("expression", &e))
    }
}

/// `value` as templates see it: the same value minijinja makes of it through serde (numbers
/// keep their kind, objects become maps), built directly — a template context is converted on
/// every render, and this is several times cheaper than going through a serializer.
fn template_value(value: &Value) -> TemplateValue {
    match value {
        Value::Null => TemplateValue::from(()),
        Value::Bool(b) => TemplateValue::from(*b),
        Value::Number(n) => match (n.as_u64(), n.as_i64()) {
            (Some(u), _) => TemplateValue::from(u),
            (None, Some(i)) => TemplateValue::from(i),
            (None, None) => TemplateValue::from(n.as_f64().unwrap_or(f64::NAN)),
        },
        Value::String(s) => TemplateValue::from(s.as_str()),
        Value::Array(items) => {
            let mut seq = Vec::with_capacity(items.len());
            for item in items {
                seq.push(template_value(item));
            }
            TemplateValue::from(seq)
        }
        Value::Object(map) => {
            // A map built by inserts, not by collecting (which sorts a staging vector): this
            // crate is built unoptimised in dev builds, and the short loop is the cheaper there.
            let mut entries = BTreeMap::new();
            for (key, value) in map {
                entries.insert(TemplateValue::from(key.as_str()), template_value(value));
            }
            TemplateValue::from(entries)
        }
    }
}

fn render_failure(what: &str, error: &minijinja::Error) -> Failure {
    let detail = error
        .detail()
        .map_or_else(|| error.kind().to_string(), str::to_string);
    Failure::new(FailureCode::ConfigTemplateError, format!("cannot render {what}: {detail}"))
        .with_help("`pagantic validate` checks templates statically; `pagantic render` shows what a step would send")
}

/// Where the prompt loader finds the template `name` in `dir`; None for a name it refuses (one
/// that would leave the directory).
pub fn prompt_path(dir: &Path, name: &str) -> Option<PathBuf> {
    (!name.contains("..") && !name.starts_with('/')).then(|| dir.join(name))
}

/// The names of the templates `text` includes, imports or extends by a literal name: `{% include
/// "part.j2" %}` (every name of a list, or of either side of an `if`), `{% import "m.j2" as m
/// %}`, `{% from "m.j2" import x %}`, `{% extends "base.j2" %}`. A name computed while rendering
/// cannot be known before.
pub fn referenced_templates(text: &str) -> Vec<String> {
    let mut names = Vec::new();
    let (mut block_starts, mut loads) = (false, false);
    for token in tokenize(text, false, SyntaxConfig::default()) {
        let Ok((token, _)) = token else { break };
        match token {
            Token::BlockStart => (block_starts, loads) = (true, false),
            Token::Ident(word) if block_starts => {
                block_starts = false;
                loads = matches!(word, "include" | "import" | "from" | "extends");
            }
            Token::Str(name) if loads => names.push(name.to_string()),
            Token::String(name) if loads => names.push(name.to_string()),
            Token::BlockEnd => loads = false,
            _ => block_starts = false,
        }
    }
    names
}

/// The files of the prompt templates `names` (in `dir`) and of every template they reach by a
/// literal name, transitively, each once: what their rendering reads. A file that cannot be read
/// is listed too (and reaches nothing), so that one appearing later shows as a change.
pub fn reached_prompt_files(dir: &Path, names: Vec<String>) -> Vec<PathBuf> {
    let mut seen = BTreeSet::new();
    let mut files = Vec::new();
    let mut queue = names;
    while let Some(name) = queue.pop() {
        if !seen.insert(name.clone()) {
            continue;
        }
        let Some(path) = prompt_path(dir, &name) else {
            continue;
        };
        if let Ok(text) = crate::core::file::read_bounded(&path, crate::core::file::TEXT_LIMIT) {
            queue.extend(referenced_templates(&text));
        }
        files.push(path);
    }
    files
}

/// Parses a template and lists the variables it reads.
pub fn analyze_template(text: &str) -> Result<TemplateInfo, TemplateSyntaxError> {
    let env = environment();
    let template = env.template_from_str(text).map_err(syntax_error)?;
    Ok(TemplateInfo {
        variables: template.undeclared_variables(true).into_iter().collect(),
        paths: dotted_paths(text, false),
    })
}

/// Parses an expression (as in `when:`) and lists the variables it reads.
pub fn analyze_expression(text: &str) -> Result<TemplateInfo, TemplateSyntaxError> {
    let env = environment();
    let expression = env.compile_expression(text).map_err(syntax_error)?;
    Ok(TemplateInfo {
        variables: expression.undeclared_variables(true).into_iter().collect(),
        paths: dotted_paths(text, true),
    })
}

fn syntax_error(error: minijinja::Error) -> TemplateSyntaxError {
    let message = error
        .detail()
        .map_or_else(|| error.kind().to_string(), str::to_string);
    TemplateSyntaxError {
        message,
        range: error.range(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literal_includes_imports_and_extends_are_found() {
        let text = "{% extends 'base.j2' %}{% import \"macros.j2\" as m %}\
            {% from 'forms.j2' import field %}{%- include ['a.j2', 'b.j2'] ignore missing -%}\
            {% include 'yes.j2' if inputs.x else 'no.j2' %}{% include name %}\
            {{ 'include.j2' }}{% set t = 'set.j2' %} include 'text.j2'";
        assert_eq!(
            referenced_templates(text),
            [
                "base.j2",
                "macros.j2",
                "forms.j2",
                "a.j2",
                "b.j2",
                "yes.j2",
                "no.j2"
            ]
        );
    }

    #[test]
    fn the_files_a_prompt_reaches_are_followed_through_every_level_once() {
        let dir = tempfile::tempdir().expect("temp dir");
        let write = |name: &str, text: &str| {
            std::fs::write(dir.path().join(name), text).expect("written");
        };
        write("main.j2", "{% extends 'base.j2' %}{% include 'part.j2' %}");
        write(
            "base.j2",
            "{% import 'macros.j2' as m %}{% include 'gone.j2' %}",
        );
        write(
            "part.j2",
            "{% include 'main.j2' %}{% include '../outside.j2' %}",
        );
        write("macros.j2", "{% macro x() %}x{% endmacro %}");
        let mut reached = reached_prompt_files(dir.path(), vec!["main.j2".into()]);
        reached.sort();
        let expected: Vec<PathBuf> = ["base.j2", "gone.j2", "macros.j2", "main.j2", "part.j2"]
            .iter()
            .map(|name| dir.path().join(name))
            .collect();
        assert_eq!(reached, expected);
    }

    #[test]
    fn variables_are_located_from_the_tokens_not_the_text() {
        let text =
            "The results:\n{% for r in steps.search.output %}{{ r }}{% endfor %} {{ result }}";
        let info = analyze_template(text).expect("parses");
        let at = info.locate("result").expect("found");
        assert_eq!(&text[at.clone()], "result");
        assert_eq!(at.start, text.rfind("result").expect("in the tag"));
        let search = info.locate("steps.search").expect("found");
        assert_eq!(&text[search], "steps.search");
        assert_eq!(info.locate("nothing"), None);
        let expression = analyze_expression("inputs.strict and vars.mode == 'x'").expect("parses");
        assert_eq!(expression.locate("vars.mode"), Some(18..27));
    }

    fn vars(list: &[&str]) -> BTreeSet<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_template_that_is_one_path_is_told_from_any_other() {
        let parts = |text| single_path(text);
        assert_eq!(
            parts("{{ steps.answer.output }}"),
            Some(vec!["steps".into(), "answer".into(), "output".into()])
        );
        assert_eq!(parts("\n {{x}} \n"), Some(vec!["x".into()]));
        for other in [
            "",
            "x {{ a }}",
            "{{ a }}{{ b }}",
            "{{ a | upper }}",
            "{{ a.b() }}",
            "{% if a %}{{ a }}{% endif %}",
            "{{ a[0] }}",
            "{{ a.}}",
        ] {
            assert_eq!(parts(other), None, "{other:?}");
        }
    }

    #[test]
    fn lists_nested_variables_and_skips_locals() {
        let info = analyze_template(
            "{% set greeting = 'hi' %}{{ greeting }} {{ inputs.question }} \
             {% for c in steps.retrieve.output %}{{ c.content }}{% endfor %}",
        )
        .expect("parses");
        assert_eq!(
            info.variables,
            vars(&["inputs.question", "steps.retrieve.output"])
        );
    }

    #[test]
    fn expressions_are_analysed_too() {
        let info = analyze_expression("inputs.n > 3 and vars.enabled").expect("parses");
        assert_eq!(info.variables, vars(&["inputs.n", "vars.enabled"]));
    }

    #[test]
    fn rendering_is_strict_about_undefined_variables() {
        let templates = Templates::new(None);
        let context = serde_json::json!({ "inputs": { "name": "Ada" } });
        assert_eq!(
            templates
                .render_str("Hi {{ inputs.name }}", &context)
                .as_deref(),
            Ok("Hi Ada")
        );
        let error = templates
            .render_str("Hi {{ inputs.nmae }}", &context)
            .expect_err("undefined");
        assert_eq!(error.code, FailureCode::ConfigTemplateError);
        assert_eq!(
            templates.is_true("inputs.name == 'Ada'", &context),
            Ok(true)
        );
        assert_eq!(
            templates
                .render_str("{{ inputs | tojson }}", &context)
                .as_deref(),
            Ok(r#"{"name": "Ada"}"#)
        );
    }

    #[test]
    fn a_context_is_the_value_minijinja_makes_of_it_through_serde() {
        let context = serde_json::json!({
            "inputs": { "b": [1, -2, 2.5, u64::MAX, true, null], "a": "x\"y" },
            "steps": { "s": { "output": { "z": [], "y": {} } } },
        });
        let direct = template_value(&context);
        let through_serde = TemplateValue::from(minijinja::value::Serde(&context));
        assert_eq!(direct, through_serde);
        assert_eq!(format!("{direct:?}"), format!("{through_serde:?}"));
        let templates = Templates::new(None);
        assert_eq!(
            templates.render_str("{{ inputs | tojson }} {{ steps.s.output | tojson }}", &context),
            Ok(r#"{"a": "x\"y", "b": [1, -2, 2.5, 18446744073709551615, true, null]} {"y": {}, "z": []}"#.into())
        );
    }

    #[test]
    fn an_inline_template_is_compiled_once_and_rendered_like_a_string() {
        let templates = Templates::new(None);
        let text = "<{{ inputs.name }}> page.html";
        for name in ["<b>", "Ada"] {
            let context = serde_json::json!({ "inputs": { "name": name } });
            // Nothing is escaped, whatever the text ends with: inline templates are not files.
            assert_eq!(
                templates.render_str(text, &context),
                Ok(format!("<{name}> page.html"))
            );
        }
        assert_eq!(templates.read().inline.len(), 1);
        let broken = templates.render_str("{{ inputs.name ", &serde_json::json!({}));
        assert_eq!(
            broken.map_err(|e| e.code),
            Err(FailureCode::ConfigTemplateError)
        );
        assert_eq!(templates.read().inline.len(), 1);
    }

    #[test]
    fn prompt_files_load_by_name_and_include_each_other() {
        let scratch = tempfile::tempdir().expect("temp dir");
        let dir = scratch.path().to_path_buf();
        std::fs::write(dir.join("main.j2"), "A{% include 'part.j2' %}C").expect("write");
        std::fs::write(dir.join("part.j2"), "{{ x }}").expect("write");
        let templates = Templates::new(Some(dir.clone()));
        assert_eq!(
            templates
                .render_file("main.j2", &serde_json::json!({ "x": "B" }))
                .as_deref(),
            Ok("ABC")
        );
        assert!(
            templates
                .render_file("../main.j2", &serde_json::json!({}))
                .is_err()
        );
    }

    #[test]
    fn syntax_errors_carry_a_range() {
        let error = analyze_template("hello {{ name ").expect_err("unclosed");
        assert!(!error.message.is_empty());
        assert!(error.range.is_some());
    }
}
