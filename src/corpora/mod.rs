//! Layer 2: corpora and lexical retrieval — the data behind `retrieve` steps — and the
//! candidates a custom retriever (a tool) returns in a corpus's place.
//!
//! A corpus is built once, before any step runs: its documents are read (glob patterns of text
//! files, a JSON Lines file, documents written inline), cut into passages ([`ChunkOptions`]) and
//! indexed. A search then walks only the postings of the query's words and returns
//! [`Candidate`](crate::core::Candidate)s, best first.
//!
//! This module owns its own plain configuration types ([`CorpusSource`], [`ChunkOptions`],
//! [`JsonlOptions`]): the plan layer converts the YAML it parsed into them, so nothing here knows
//! about plan files. Words are those of [`crate::core::text::words`], the tokeniser rerankers use
//! too, so retrieval and reranking agree on what a word is.
//!
//! | file | owns |
//! | --- | --- |
//! | `document.rs` | [`Document`], the unit read and the shape of every passage |
//! | `load.rs` | [`CorpusSource`]: reading files by glob, in a deterministic order |
//! | `jsonl.rs` | [`JsonlOptions`]: one document per JSON Lines row |
//! | `chunk.rs` | [`ChunkOptions`]: cutting documents into passages |
//! | `index.rs` | the inverted index (word → postings) built once per corpus |
//! | `bm25.rs` | Okapi BM25 scoring over the index |
//! | `keyword.rs` | keyword scores from the index (the share of query words a passage holds) |
//! | `corpus.rs` | [`Corpus`]: load, search |
//! | `external.rs` | [`external_candidates`]: a retriever tool's output, checked, as candidates |

mod bm25;
mod chunk;
mod corpus;
mod document;
mod external;
mod index;
mod jsonl;
mod keyword;
mod load;

pub use chunk::{ChunkBy, ChunkOptions};
pub use corpus::{Corpus, LexicalScorer};
pub use document::Document;
pub use external::external_candidates;
pub use jsonl::JsonlOptions;

pub use load::{CorpusSource, matches as matching_files};
