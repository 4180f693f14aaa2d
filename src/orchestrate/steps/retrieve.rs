//! `retrieve`: the best passages of a corpus for a query, by lexical search or, with a
//! bi-encoder, by embedding similarity.

use std::sync::Arc;

use super::{blocking, candidates_output};
use crate::context::{Corpus, LexicalScorer};
use crate::core::{Candidate, Failure};
use crate::orchestrate::pipeline::{Rendered, StepContext, StepFuture, StepHandler};
use crate::rerank::BiEncoder;

/// Searches a loaded corpus; the output is a list of `{content, source, score, metadata}`.
pub struct Retrieve {
    pub corpus: Arc<Corpus>,
    pub query: String,
    pub limit: usize,
    pub scorer: LexicalScorer,
    /// Dense retrieval: cosine similarity of embeddings instead of `scorer`.
    pub dense: Option<Arc<BiEncoder>>,
}

impl StepHandler for Retrieve {
    fn run<'a>(&'a self, ctx: &'a StepContext) -> StepFuture<'a> {
        Box::pin(async move {
            let query = ctx.render(&self.query)?;
            let found = match &self.dense {
                None => self.corpus.search(&query, self.limit, self.scorer),
                Some(encoder) => {
                    let (encoder, corpus, limit) =
                        (Arc::clone(encoder), Arc::clone(&self.corpus), self.limit);
                    blocking(move || dense_search(&encoder, &corpus, &query, limit)).await?
                }
            };
            candidates_output(found)
        })
    }

    fn render(&self, ctx: &StepContext) -> Result<Rendered, Failure> {
        ctx.render(&self.query).map(Rendered::Text)
    }
}

/// The `limit` passages most similar to `query`; each passage is embedded once per run.
fn dense_search(
    encoder: &BiEncoder,
    corpus: &Corpus,
    query: &str,
    limit: usize,
) -> Result<Vec<Candidate>, Failure> {
    let passages: Vec<&str> = corpus
        .passages()
        .iter()
        .map(|p| p.content.as_str())
        .collect();
    let scores = encoder.score_cached(query, &passages)?;
    Ok(corpus.best(scores.into_iter().enumerate(), limit))
}
