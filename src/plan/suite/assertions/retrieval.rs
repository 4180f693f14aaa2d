//! What the retrieval metrics (`hit_at_k`, `recall_at_k`, `mrr`) share: the candidates they look
//! at and the sources that should have been found among them.

use schemars::JsonSchema;
use serde::Deserialize;

/// Which of a `retrieve` or `rerank` step's candidates a retrieval metric looks at, and the
/// sources that should be among them.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
pub struct Ranking {
    /// Look at the first `k` candidates (default: all of them).
    #[serde(default)]
    #[schemars(range(min = 1, max = 10000))]
    pub k: Option<u32>,
    /// The relevant sources: a candidate is relevant when its `source` is one of them, or ends with `/` and one of them (`batch.md` matches `../corpus/docs/batch.md`).
    pub sources: Sources,
}

/// One source or a list of them (a template may render to a list).
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum Sources {
    List(Vec<String>),
    One(String),
}

impl Sources {
    /// The sources, as a list.
    pub fn names(&self) -> Vec<String> {
        match self {
            Sources::List(names) => names.clone(),
            Sources::One(name) => vec![name.clone()],
        }
    }
}
