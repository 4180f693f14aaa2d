//! `type: retrieve` — the best-matching passages of a corpus.

use std::sync::Arc;

use crate::context::LexicalScorer;
use crate::core::Failure;
use crate::orchestrate::StepHandler;
use crate::orchestrate::steps::Retrieve;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{BuildContext, ModelRole, References, StepCommon, StepConfig, TemplateSource};

/// Find the passages of a corpus that best match a query. Output: a list of
/// `{content, source, score, metadata}` candidates, best first.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct RetrieveStep {
    #[serde(flatten)]
    pub common: StepCommon,
    /// The corpus to search, by its name in `corpora:`.
    pub corpus: String,
    /// The query, a template (e.g. `"{{ inputs.question }}"`).
    pub query: String,
    /// Most candidates to return (default 10).
    #[serde(default)]
    #[schemars(range(min = 1, max = 10000))]
    pub limit: Option<u32>,
    /// Lexical scorer (default `bm25`); ignored when `model` is set.
    #[serde(default)]
    pub scorer: RetrieveScorer,
    /// A bi-encoder model (from `models:`, kind onnx) for dense retrieval instead of a lexical scorer.
    #[serde(default)]
    pub model: Option<String>,
}

/// Lexical scorers for retrieval.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RetrieveScorer {
    /// Okapi BM25 over lower-cased word tokens.
    #[default]
    Bm25,
    /// The share of query words present in the passage.
    Keyword,
}

impl StepConfig for RetrieveStep {
    fn references<'a>(&'a self, refs: &mut References<'a>) {
        refs.corpus(&["corpus"], &self.corpus);
        refs.template(&["query"], &self.query, TemplateSource::Inline);
        if let Some(model) = &self.model {
            refs.model(&["model"], model, ModelRole::Embedder);
        }
    }

    fn build(&self, context: &mut dyn BuildContext) -> Result<Arc<dyn StepHandler>, Failure> {
        // A dry run has no bi-encoder: the lexical scorer stands in.
        let dense = match &self.model {
            Some(model) => context.embedder(model)?,
            None => None,
        };
        Ok(Arc::new(Retrieve {
            dense,
            corpus: context.corpus(&self.corpus)?,
            query: self.query.clone(),
            limit: self.limit.map_or(10, |l| l as usize),
            scorer: match self.scorer {
                RetrieveScorer::Bm25 => LexicalScorer::Bm25,
                RetrieveScorer::Keyword => LexicalScorer::Keyword,
            },
        }))
    }
}
