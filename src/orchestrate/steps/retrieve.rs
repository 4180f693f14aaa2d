//! `retrieve`: the best passages of a corpus for a query.

use std::sync::Arc;

use super::candidates_output;
use crate::context::{Corpus, LexicalScorer};
use crate::core::Failure;
use crate::orchestrate::pipeline::{Rendered, StepContext, StepFuture, StepHandler};

/// Searches a loaded corpus; the output is a list of `{content, source, score, metadata}`.
pub struct Retrieve {
    pub corpus: Arc<Corpus>,
    pub query: String,
    pub limit: usize,
    pub scorer: LexicalScorer,
}

impl StepHandler for Retrieve {
    fn run<'a>(&'a self, ctx: &'a StepContext) -> StepFuture<'a> {
        Box::pin(async move {
            let query = ctx.render(&self.query)?;
            let found = self.corpus.search(&query, self.limit, self.scorer);
            candidates_output(found)
        })
    }

    fn render(&self, ctx: &StepContext) -> Result<Rendered, Failure> {
        ctx.render(&self.query).map(Rendered::Text)
    }
}
