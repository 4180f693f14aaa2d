//! `type: retrieve` — the best-matching passages of a corpus, or of a custom retriever (a tool).

use std::sync::Arc;

use crate::core::Failure;
use crate::corpora::LexicalScorer;
use crate::orchestrate::StepHandler;
use crate::orchestrate::steps::{Retrieve, RetrieveSource};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{
    BuildContext, KeepSpec, ModelRole, OutputKind, References, StepCommon, StepConfig,
    TemplateSource, path,
};
use crate::plan::diagnostic::PlanError;

/// Find the passages that best match a query, from a corpus (`corpus`) or from a custom retriever
/// (`tool`: a vector database, an HTTP search). Output: a list of `{content, source, score,
/// metadata}` candidates, best first.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct RetrieveStep {
    #[serde(flatten)]
    pub common: StepCommon,
    /// The corpus to search, by its name in `corpora:`. Give this or `tool`.
    #[serde(default)]
    pub corpus: Option<String>,
    /// A custom retriever: the tool (by its name in `tools:`) to call with the arguments `{query, limit}` (the rendered query and the step's `limit`). It must return a JSON list, best first, of `{content, source, score?, metadata?}` objects — a command tool prints it on stdout; a missing `score` is 0 and the tool's order is kept. Any other shape fails with TOOL_BAD_OUTPUT, naming the item and field. Give this or `corpus`.
    #[serde(default)]
    pub tool: Option<String>,
    /// The query, a template (e.g. `"{{ inputs.question }}"`).
    pub query: String,
    /// Most candidates to return (default 10).
    #[serde(default)]
    #[schemars(range(min = 1, max = 10000))]
    pub limit: Option<u32>,
    /// Lexical scorer for a `corpus` (default `bm25`); ignored when `model` is set.
    #[serde(default)]
    pub scorer: Option<RetrieveScorer>,
    /// A bi-encoder model (from `models:`, kind onnx) for dense retrieval from a `corpus` instead of a lexical scorer.
    #[serde(default)]
    pub model: Option<String>,
    #[serde(flatten)]
    pub keep: KeepSpec,
}

/// Lexical scorers for retrieval.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RetrieveScorer {
    /// Okapi BM25 over lower-cased word tokens: positive, unbounded.
    #[default]
    Bm25,
    /// The share of query words present in the passage: 0 to 1.
    Keyword,
}

impl StepConfig for RetrieveStep {
    fn output(&self) -> OutputKind {
        OutputKind::Candidates
    }

    fn references<'a>(&'a self, refs: &mut References<'a>) {
        if let Some(corpus) = &self.corpus {
            refs.corpus(&["corpus"], corpus);
        }
        if let Some(tool) = &self.tool {
            refs.tool(path(&["tool"]), tool);
            for (field, given) in [
                ("model", self.model.is_some()),
                ("scorer", self.scorer.is_some()),
            ] {
                if given {
                    refs.problem(
                        &[field],
                        PlanError::RetrieveCorpusOnly {
                            field: field.into(),
                        },
                        "no corpus to search",
                    );
                }
            }
        }
        if self.corpus.is_some() == self.tool.is_some() {
            refs.exclusive(&["corpus", "tool"], self.corpus.is_some());
        }
        refs.template(&["query"], &self.query, TemplateSource::Inline);
        if let Some(model) = &self.model {
            refs.model(&["model"], model, ModelRole::Embedder);
        }
    }

    fn build(&self, context: &mut dyn BuildContext) -> Result<Arc<dyn StepHandler>, Failure> {
        let source = match (&self.tool, &self.corpus) {
            (Some(tool), _) => RetrieveSource::Tool(context.tool(tool)?),
            // `validate` guarantees a corpus when there is no tool.
            (None, corpus) => RetrieveSource::Corpus {
                corpus: context.corpus(corpus.as_deref().unwrap_or_default())?,
                scorer: match self.scorer.unwrap_or_default() {
                    RetrieveScorer::Bm25 => LexicalScorer::Bm25,
                    RetrieveScorer::Keyword => LexicalScorer::Keyword,
                },
                // A dry run has no bi-encoder: the lexical scorer stands in.
                dense: match &self.model {
                    Some(model) => context.embedder(model)?,
                    None => None,
                },
            },
        };
        Ok(Arc::new(Retrieve {
            source,
            query: self.query.clone(),
            keep: self.keep.keep(Some(self.limit.map_or(10, |l| l as usize))),
        }))
    }
}
