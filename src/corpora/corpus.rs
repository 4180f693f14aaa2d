//! The corpus: passages plus their index, built once, searched many times.

use super::chunk::{self, ChunkOptions};
use super::index::{Index, distinct_words};
use super::{CorpusSource, Document, bm25, keyword, load};
use crate::core::{Candidate, Failure};

/// How [`Corpus::search`] scores a passage against a query. Either way only passages sharing a
/// word with the query score above zero.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum LexicalScorer {
    /// Okapi BM25 (k1 = 1.2, b = 0.75) over the query's distinct words:
    ///
    /// ```text
    /// score = Σ idf(t) · tf · 2.2 / (tf + 1.2 · (0.25 + 0.75 · |D| / avgdl))
    /// idf(t) = ln(1 + (N − n(t) + 0.5) / (n(t) + 0.5))
    /// ```
    ///
    /// where tf is how often word t occurs in passage D, |D| its length in words, avgdl the mean
    /// passage length, N the number of passages and n(t) how many hold t. Positive and
    /// unbounded: rare words and short passages score higher.
    #[default]
    Bm25,
    /// [`keyword_score`](crate::core::text::keyword_score): the share of distinct query words the passage
    /// holds, from 0 to 1.
    Keyword,
}

/// Passages ready to search: documents cut by the chunk options, with an inverted index.
#[derive(Debug, Clone)]
pub struct Corpus {
    passages: Vec<Document>,
    index: Index,
}

impl Corpus {
    /// Reads every document of `source` (see [`CorpusSource`] for the order), chunks them and
    /// indexes the passages.
    ///
    /// Fails with `CONFIG_FILE_ERROR` when a pattern matches no file, a file is unreadable or not
    /// UTF-8, or a JSON Lines row is malformed; the message names the pattern, file or line.
    pub fn load(source: &CorpusSource) -> Result<Corpus, Failure> {
        let documents = load::documents(source)?;
        Ok(Corpus::from_documents(documents, source.chunk.as_ref()))
    }

    /// A corpus of documents already in memory, chunked as `chunk` says (whole when `None`).
    pub fn from_documents(documents: Vec<Document>, chunk: Option<&ChunkOptions>) -> Corpus {
        let passages = chunk::passages(documents, chunk);
        let index = Index::build(passages.iter().map(|passage| passage.content.as_str()));
        Corpus { passages, index }
    }

    /// The number of passages.
    pub fn len(&self) -> usize {
        self.passages.len()
    }

    /// Whether the corpus holds no passage.
    pub fn is_empty(&self) -> bool {
        self.passages.is_empty()
    }

    /// The passages, in corpus order.
    pub fn passages(&self) -> &[Document] {
        &self.passages
    }

    /// The passages sharing a word with `query`, best first; equal scores keep corpus order.
    /// Passages scoring zero are left out, so there may be none. Lazy: a caller that takes the
    /// first few copies only those. The cost grows with the postings of the query's words, not
    /// the corpus size.
    pub fn search(
        &self,
        query: &str,
        scorer: LexicalScorer,
    ) -> impl Iterator<Item = Candidate> + '_ {
        let terms = distinct_words(query);
        let scores = match scorer {
            LexicalScorer::Bm25 => bm25::scores(&self.index, &terms),
            LexicalScorer::Keyword => keyword::scores(&self.index, &terms),
        };
        self.best(scores.into_iter().filter(|(_, score)| *score > 0.0))
    }

    /// `scores` (passage index, score) as candidates, best first; equal scores keep corpus
    /// order. For scores computed outside the index (dense retrieval). Lazy, like
    /// [`Corpus::search`].
    pub fn best(
        &self,
        scores: impl IntoIterator<Item = (usize, f64)>,
    ) -> impl Iterator<Item = Candidate> + '_ {
        // By passage index; the stable sort keeps that order among equal scores.
        let mut ranked: Vec<(usize, f64)> = scores.into_iter().collect();
        ranked.sort_by_key(|(passage, _)| *passage);
        ranked.sort_by(|a, b| b.1.total_cmp(&a.1));
        ranked.into_iter().filter_map(|(passage, score)| {
            let passage = self.passages.get(passage)?;
            Some(Candidate {
                content: passage.content.clone(),
                source: passage.source.clone(),
                score,
                metadata: passage.metadata.clone(),
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::*;
    use crate::core::text::keyword_score;
    use crate::corpora::load::tests::TempDir;
    use crate::corpora::{ChunkBy, JsonlOptions};

    fn corpus(texts: &[&str]) -> Corpus {
        let documents = texts
            .iter()
            .enumerate()
            .map(|(i, text)| Document::new(*text, format!("d{i}")))
            .collect();
        Corpus::from_documents(documents, None)
    }

    /// The `limit` best passages for `query`.
    fn search(corpus: &Corpus, query: &str, limit: usize, scorer: LexicalScorer) -> Vec<Candidate> {
        corpus.search(query, scorer).take(limit).collect()
    }

    fn sources(candidates: &[Candidate]) -> Vec<&str> {
        candidates.iter().map(|c| c.source.as_str()).collect()
    }

    #[test]
    fn search_ranks_limits_and_drops_non_matches() {
        let corpus = corpus(&[
            "the cat sat on the mat",
            "nothing relevant",
            "the zebra grazed",
            "the cat chased the zebra",
        ]);
        let cases: &[(&str, usize, LexicalScorer, &[&str])] = &[
            ("zebra cat", 10, LexicalScorer::Bm25, &["d3", "d2", "d0"]),
            ("zebra cat", 1, LexicalScorer::Bm25, &["d3"]),
            ("zebra cat", 0, LexicalScorer::Bm25, &[]),
            ("ZEBRA?", 10, LexicalScorer::Bm25, &["d2", "d3"]),
            ("unicorn", 10, LexicalScorer::Bm25, &[]),
            ("", 10, LexicalScorer::Bm25, &[]),
            // Keyword: d3 holds both words; d0 and d2 one each, tied, in corpus order.
            ("zebra cat", 10, LexicalScorer::Keyword, &["d3", "d0", "d2"]),
            ("unicorn", 10, LexicalScorer::Keyword, &[]),
        ];
        for (query, limit, scorer, expected) in cases {
            let found = search(&corpus, query, *limit, *scorer);
            assert_eq!(sources(&found), *expected, "{query:?} {limit} {scorer:?}");
            assert!(found.windows(2).all(|w| w[0].score >= w[1].score));
            assert!(found.iter().all(|c| c.score > 0.0));
        }
    }

    #[test]
    fn ties_keep_corpus_order() {
        let corpus = corpus(&["same words", "other", "same words", "words same"]);
        for scorer in [LexicalScorer::Bm25, LexicalScorer::Keyword] {
            let found = search(&corpus, "same words", 10, scorer);
            assert_eq!(sources(&found), ["d0", "d2", "d3"], "{scorer:?}");
            assert_eq!(found[0].score, found[2].score);
        }
    }

    #[test]
    fn keyword_search_gives_keyword_scores() {
        let texts = ["alpha beta", "beta gamma delta", "gamma"];
        let corpus = corpus(&texts);
        let query = "beta gamma epsilon";
        for candidate in corpus.search(query, LexicalScorer::Keyword) {
            let text = corpus.passages()[candidate.source[1..].parse::<usize>().expect("index")]
                .content
                .clone();
            assert_eq!(candidate.score, keyword_score(query, &text));
        }
    }

    #[test]
    fn candidates_carry_passage_source_and_metadata() {
        let mut document = Document::new("one two three four", "notes.md");
        document.metadata.insert("lang".into(), "en".into());
        let options = ChunkOptions {
            max_chars: 10,
            by: ChunkBy::Size,
        };
        let corpus = Corpus::from_documents(vec![document], Some(&options));
        assert_eq!(corpus.len(), 2);
        assert!(!corpus.is_empty());
        let found = search(&corpus, "four", 5, LexicalScorer::Keyword);
        assert_eq!(
            found,
            [Candidate {
                content: "three four".to_owned(),
                source: "notes.md".to_owned(),
                score: 1.0,
                metadata: [("lang", Value::from("en")), ("chunk", Value::from(1))]
                    .into_iter()
                    .map(|(k, v)| (k.to_owned(), v))
                    .collect(),
            }]
        );
        assert!(Corpus::from_documents(Vec::new(), None).is_empty());
    }

    #[test]
    fn loading_the_same_source_twice_gives_the_same_results() {
        let temp = TempDir::new("corpus");
        temp.write("docs/b.md", "Rust ownership\n\nBorrowing rules in Rust");
        temp.write("docs/a.md", "Ownership in Rust\n\nMoves and copies");
        temp.write("docs/c.md", "Python garbage collection");
        temp.write(
            "rows.jsonl",
            "{\"content\": \"Rust lifetimes\", \"id\": \"row\"}\n",
        );
        let source = CorpusSource {
            base_dir: temp.path(),
            file_patterns: vec!["docs/*.md".to_owned()],
            documents: vec![Document::new("Rust traits", "inline")],
            jsonl: Some(JsonlOptions {
                source_field: Some("id".to_owned()),
                ..JsonlOptions::new("rows.jsonl")
            }),
            chunk: Some(ChunkOptions {
                max_chars: 20,
                by: ChunkBy::Paragraph,
            }),
        };
        let first = Corpus::load(&source).expect("loads");
        let second = Corpus::load(&source).expect("loads again");
        assert_eq!(first.passages(), second.passages());
        let passages: Vec<(&str, &str)> = first
            .passages()
            .iter()
            .map(|p| (p.source.as_str(), p.content.as_str()))
            .collect();
        assert_eq!(
            passages,
            [
                ("docs/a.md", "Ownership in Rust"),
                ("docs/a.md", "Moves and copies"),
                ("docs/b.md", "Rust ownership"),
                ("docs/b.md", "Borrowing rules in"),
                ("docs/b.md", "Rust"),
                ("docs/c.md", "Python garbage"),
                ("docs/c.md", "collection"),
                ("row", "Rust lifetimes"),
                ("inline", "Rust traits"),
            ]
        );
        for scorer in [LexicalScorer::Bm25, LexicalScorer::Keyword] {
            let a = search(&first, "rust ownership", 4, scorer);
            let b = search(&second, "rust ownership", 4, scorer);
            assert_eq!(a, b, "{scorer:?}");
            assert_eq!(a.len(), 4);
        }
    }
}
