//! `type: infer` — one call to a language model with a templated prompt.

use std::sync::Arc;

use crate::constraint::gbnf_to_lark;
use crate::core::Failure;
use crate::inference::Grammar;
use crate::orchestrate::StepHandler;
use crate::orchestrate::steps::Infer;
use schemars::JsonSchema;
use serde::Deserialize;

use super::{
    BuildContext, ModelCall, OutputKind, References, SchemaSource, StepCommon, StepConfig,
};

/// Call a language model with a prompt and return its text (plus usage).
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct InferStep {
    #[serde(flatten)]
    pub common: StepCommon,
    #[serde(flatten)]
    pub call: ModelCall,
    /// Constrain decoding so the text matches a regex, a grammar or a JSON Schema.
    #[serde(default)]
    pub constraint: Option<Constraint>,
}

/// A decoder constraint: exactly one of the forms below.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Constraint {
    /// The output must match this regular expression.
    Regex(String),
    /// The output must match this Lark grammar.
    Lark(String),
    /// The output must match this GBNF grammar (llama.cpp's format).
    Gbnf(String),
    /// The output must be JSON valid against this schema (inline, or a file path).
    JsonSchema(SchemaSource),
}

impl StepConfig for InferStep {
    fn output(&self) -> OutputKind {
        OutputKind::Text
    }

    fn references<'a>(&'a self, refs: &mut References<'a>) {
        self.call.references(refs);
        match &self.constraint {
            Some(Constraint::Regex(regex)) => refs
                .regexes
                .push((vec!["constraint".into(), "regex".into()], regex)),
            Some(Constraint::JsonSchema(schema)) => {
                refs.schema(&["constraint", "json_schema"], schema)
            }
            Some(Constraint::Gbnf(grammar)) => refs
                .gbnf
                .push((vec!["constraint".into(), "gbnf".into()], grammar)),
            Some(Constraint::Lark(grammar)) => refs
                .lark
                .push((vec!["constraint".into(), "lark".into()], grammar)),
            None => {}
        }
        if let Some(constraint) = &self.constraint {
            let kind = match constraint {
                Constraint::Regex(_) => Some("regex"),
                Constraint::Lark(_) => Some("lark"),
                Constraint::Gbnf(_) => Some("gbnf"),
                Constraint::JsonSchema(_) => None,
            };
            if let Some(kind) = kind {
                refs.grammar = Some((vec!["constraint".into(), kind.into()], &self.call.model));
            }
        }
    }

    fn build(&self, context: &mut dyn BuildContext) -> Result<Arc<dyn StepHandler>, Failure> {
        let (json_schema, grammar) = match &self.constraint {
            None => (None, None),
            Some(Constraint::JsonSchema(schema)) => (Some(context.schema(schema)?), None),
            Some(Constraint::Regex(r)) => (None, Some(Grammar::Regex(r.clone()))),
            Some(Constraint::Lark(l)) => (None, Some(Grammar::Lark(l.clone()))),
            Some(Constraint::Gbnf(g)) => (None, Some(Grammar::Lark(gbnf_to_lark(g)?))),
        };
        Ok(Arc::new(Infer {
            engine: context.engine(&self.call.model)?,
            prompt: self.call.prompt(),
            sampling: self.call.sampling(),
            json_schema,
            grammar,
            stream: context.stream(),
        }))
    }
}
