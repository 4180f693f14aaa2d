//! The inverted index, built once per corpus: for every word, the passages holding it and how
//! often, plus each passage's length in words. Searching walks only the postings of the query's
//! words, so its cost grows with how often those words occur, not with the size of the corpus.

use std::collections::{HashMap, HashSet};

use crate::core::text::words;

/// One passage holding a word.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Posting {
    /// The passage's position in the corpus.
    pub(super) passage: usize,
    /// How many times the word occurs in it (at least one).
    pub(super) count: usize,
}

/// Word → postings, in corpus order; lengths of passages in words.
///
/// The map is only ever looked up, never iterated, so its order cannot leak into results.
#[derive(Debug, Clone, Default)]
pub(super) struct Index {
    postings: HashMap<String, Vec<Posting>>,
    lengths: Vec<usize>,
    total_length: usize,
}

impl Index {
    /// Indexes passages in order; the n-th text is passage n.
    pub(super) fn build<'a>(passages: impl IntoIterator<Item = &'a str>) -> Index {
        let mut index = Index::default();
        for (passage, text) in passages.into_iter().enumerate() {
            let mut counts: HashMap<String, usize> = HashMap::new();
            let mut length = 0;
            for word in words(text) {
                *counts.entry(word).or_default() += 1;
                length += 1;
            }
            for (word, count) in counts {
                index
                    .postings
                    .entry(word)
                    .or_default()
                    .push(Posting { passage, count });
            }
            index.lengths.push(length);
            index.total_length += length;
        }
        index
    }

    /// The passages holding `word` (already lower-cased by the tokeniser), in corpus order.
    pub(super) fn postings(&self, word: &str) -> &[Posting] {
        self.postings.get(word).map_or(&[], Vec::as_slice)
    }

    /// How many passages are indexed.
    pub(super) fn passages(&self) -> usize {
        self.lengths.len()
    }

    /// The length of a passage in words; zero for an unknown passage.
    pub(super) fn length(&self, passage: usize) -> usize {
        self.lengths.get(passage).copied().unwrap_or(0)
    }

    /// The mean passage length in words; zero for an empty index.
    pub(super) fn average_length(&self) -> f64 {
        if self.lengths.is_empty() {
            0.0
        } else {
            self.total_length as f64 / self.lengths.len() as f64
        }
    }
}

/// The distinct words of a query, in the order they first appear.
pub(super) fn distinct_words(text: &str) -> Vec<String> {
    let mut seen = HashSet::new();
    words(text)
        .filter(|word| seen.insert(word.clone()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn postings_list_passages_in_order_with_counts() {
        let index = Index::build(["Cat cat dog", "", "the dog, the CAT"]);
        let cases: &[(&str, &[(usize, usize)])] = &[
            ("cat", &[(0, 2), (2, 1)]),
            ("dog", &[(0, 1), (2, 1)]),
            ("the", &[(2, 2)]),
            ("Cat", &[]),
            ("bird", &[]),
        ];
        for (word, expected) in cases {
            let found: Vec<(usize, usize)> = index
                .postings(word)
                .iter()
                .map(|p| (p.passage, p.count))
                .collect();
            assert_eq!(found, *expected, "{word}");
        }
        assert_eq!(index.passages(), 3);
        assert_eq!(
            [
                index.length(0),
                index.length(1),
                index.length(2),
                index.length(9)
            ],
            [3, 0, 4, 0]
        );
        assert!((index.average_length() - 7.0 / 3.0).abs() < 1e-12);
        assert_eq!(Index::build([]).average_length(), 0.0);
    }

    #[test]
    fn distinct_words_keep_first_appearance() {
        let cases: &[(&str, &[&str])] = &[("", &[]), ("?!", &[]), ("b a B c a", &["b", "a", "c"])];
        for (text, expected) in cases {
            assert_eq!(distinct_words(text), *expected, "{text:?}");
        }
    }
}
