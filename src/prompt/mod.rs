//! Prompt templates: one minijinja configuration for the whole crate, and static analysis of
//! templates (does it parse, which variables does it read) so plans are checked before they run.
//!
//! Templates render with strict undefined: a misspelt variable is an error, never an empty string.

use std::collections::BTreeSet;
use std::ops::Range;

use minijinja::{Environment, UndefinedBehavior};

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
}

/// The environment every template is compiled in: strict undefined, JSON-friendly filters.
pub fn environment() -> Environment<'static> {
    let mut env = Environment::new();
    env.set_undefined_behavior(UndefinedBehavior::Strict);
    env
}

/// Parses a template and lists the variables it reads.
pub fn analyze_template(text: &str) -> Result<TemplateInfo, TemplateSyntaxError> {
    let env = environment();
    let template = env.template_from_str(text).map_err(syntax_error)?;
    Ok(TemplateInfo {
        variables: template.undeclared_variables(true).into_iter().collect(),
    })
}

/// Parses an expression (as in `when:`) and lists the variables it reads.
pub fn analyze_expression(text: &str) -> Result<TemplateInfo, TemplateSyntaxError> {
    let env = environment();
    let expression = env.compile_expression(text).map_err(syntax_error)?;
    Ok(TemplateInfo {
        variables: expression.undeclared_variables(true).into_iter().collect(),
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

    fn vars(list: &[&str]) -> BTreeSet<String> {
        list.iter().map(|s| s.to_string()).collect()
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
    fn syntax_errors_carry_a_range() {
        let error = analyze_template("hello {{ name ").expect_err("unclosed");
        assert!(!error.message.is_empty());
        assert!(error.range.is_some());
    }
}
