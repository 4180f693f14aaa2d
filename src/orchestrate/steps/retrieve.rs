//! `retrieve`: the best passages for a query — from a corpus, by lexical search or, with a
//! bi-encoder, by embedding similarity; or from a custom retriever, a tool whose output is
//! checked and becomes the candidates. Either way the step passes on what [`Keep`] allows.

use std::sync::Arc;

use serde_json::{Value, json};

use super::{blocking, candidates_output};
use crate::core::{Candidate, Failure};
use crate::corpora::{Corpus, LexicalScorer, external_candidates};
use crate::orchestrate::pipeline::{Rendered, StepContext, StepFuture, StepHandler};
use crate::orchestrate::tools::{ToolAction, ToolRuntime};
use crate::rerank::{BiEncoder, Keep};

/// Where a retrieve step's candidates come from.
pub enum RetrieveSource {
    /// A loaded corpus, searched with `scorer`, or by cosine similarity of embeddings when
    /// `dense` is set.
    Corpus {
        corpus: Arc<Corpus>,
        scorer: LexicalScorer,
        dense: Option<Arc<BiEncoder>>,
    },
    /// A tool called with `{query, limit}`, returning the candidates best first.
    Tool(Arc<ToolRuntime>),
}

/// Retrieves for the rendered query; the output is a list of `{content, source, score,
/// metadata}`, best first.
pub struct Retrieve {
    pub source: RetrieveSource,
    pub query: String,
    /// What is passed on; its `limit` is also what a retriever tool is asked for.
    pub keep: Keep,
}

impl StepHandler for Retrieve {
    fn run<'a>(&'a self, ctx: &'a StepContext) -> StepFuture<'a> {
        Box::pin(async move {
            let query = ctx.render(&self.query)?;
            let keep = self.keep;
            let (found, embedded) = match &self.source {
                RetrieveSource::Corpus {
                    corpus,
                    scorer,
                    dense: None,
                } => (keep.apply(corpus.search(&query, *scorer)), None),
                RetrieveSource::Corpus {
                    corpus,
                    dense: Some(encoder),
                    ..
                } => {
                    let (encoder, corpus) = (Arc::clone(encoder), Arc::clone(corpus));
                    let (found, embedded) =
                        blocking(move || dense_search(&encoder, &corpus, &query, keep)).await?;
                    (found, Some(embedded))
                }
                RetrieveSource::Tool(tool) => {
                    let args = json!({ "query": query, "limit": keep.limit });
                    let call_id = format!("call_{}", ctx.events.new_span());
                    let output = tool.call(&args, &call_id, ctx, ctx.span).await?;
                    (keep.apply(retrieved(tool, &args, &output)?), None)
                }
            };
            let mut output = candidates_output(found)?;
            // Dense retrieval says how many passages the model embedded for this query: none
            // once the run, or the call cache, has them all.
            if let Some(embedded) = embedded {
                output.detail = Some(json!({ "embedded": embedded }));
            }
            Ok(output)
        })
    }

    fn render(&self, ctx: &StepContext) -> Result<Rendered, Failure> {
        ctx.render(&self.query).map(Rendered::Text)
    }
}

/// The candidates a retriever tool returned. Under `--dry-run` a tool with side effects is a
/// stand-in that reports the call; that report becomes one candidate saying what would have
/// been asked, so the steps after it still run.
fn retrieved(tool: &ToolRuntime, args: &Value, output: &Value) -> Result<Vec<Candidate>, Failure> {
    if matches!(tool.action, ToolAction::DryRun) {
        return Ok(vec![Candidate {
            content: format!(
                "(dry run) retriever tool `{}` called with {args}",
                tool.name
            ),
            source: tool.name.clone(),
            score: 0.0,
            metadata: serde_json::Map::new(),
        }]);
    }
    external_candidates(&tool.name, output)
}

/// The passages most similar to `query`, as `keep` allows, and how many passages were embedded
/// for it; each passage is embedded once per run, and not at all when the call cache has it.
fn dense_search(
    encoder: &BiEncoder,
    corpus: &Corpus,
    query: &str,
    keep: Keep,
) -> Result<(Vec<Candidate>, usize), Failure> {
    let passages: Vec<&str> = corpus
        .passages()
        .iter()
        .map(|p| p.content.as_str())
        .collect();
    let scores = encoder.score_cached(query, &passages)?;
    let found = keep.apply(corpus.best(scores.values.into_iter().enumerate()));
    Ok((found, scores.embedded))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::FailureCode;
    use crate::orchestrate::tools::SideEffects;

    fn tool(action: ToolAction) -> ToolRuntime {
        ToolRuntime::new(
            "search".into(),
            "Search.".into(),
            Value::Null,
            SideEffects::External,
            true,
            action,
        )
        .expect("a tool")
    }

    #[test]
    fn a_dry_run_stand_in_becomes_one_candidate_saying_what_would_be_asked() {
        let args = json!({ "query": "aero", "limit": 3 });
        let report = json!({ "dry_run": true, "tool": "search", "args": args });
        let found = retrieved(&tool(ToolAction::DryRun), &args, &report).expect("a stand-in");
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].source, "search");
        assert!(
            found[0].content.contains("\"query\":\"aero\""),
            "{}",
            found[0].content
        );
        // The same report from a real tool is a bad shape.
        let real = tool(ToolAction::Builtin(crate::tool::Builtin::CurrentTime));
        let failure = retrieved(&real, &args, &report).expect_err("not a list");
        assert_eq!(failure.code, FailureCode::ToolBadOutput);
    }
}
