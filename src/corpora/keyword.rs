//! Keyword scoring from the index: the share of distinct query words a passage holds (the same
//! score as [`crate::core::text::keyword_score`], which `rerank` uses, computed from postings
//! instead of the text). Simpler than BM25 and bounded, so a threshold such as "at least half the
//! words" means the same on every corpus.

use std::collections::BTreeMap;

use super::index::Index;

/// [`keyword_score`](crate::core::text::keyword_score) of every passage holding at least one of `terms` (distinct words), from the
/// index rather than the text.
pub(super) fn scores(index: &Index, terms: &[String]) -> BTreeMap<usize, f64> {
    let mut found: BTreeMap<usize, usize> = BTreeMap::new();
    for term in terms {
        for posting in index.postings(term) {
            *found.entry(posting.passage).or_default() += 1;
        }
    }
    found
        .into_iter()
        .map(|(passage, count)| (passage, count as f64 / terms.len() as f64))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::text::keyword_score;
    use crate::corpora::index::distinct_words;

    const CASES: &[(&str, &str, f64)] = &[
        ("", "anything", 0.0),
        ("!!", "anything", 0.0),
        ("cat", "", 0.0),
        ("cat dog", "a cat", 0.5),
        ("cat dog", "dog and cat", 1.0),
        // Repeating a query word does not count it twice.
        ("cat cat dog", "cat", 0.5),
        // Case and punctuation do not matter; frequency in the passage neither.
        ("Cat, DOG?", "cat cat cat — dog!", 1.0),
        // Whole words only.
        ("cat", "category", 0.0),
        ("café crème brûlée", "Crème brûlée", 2.0 / 3.0),
    ];

    #[test]
    fn scores_are_the_share_of_query_words_present() {
        for (query, passage, expected) in CASES {
            let score = keyword_score(query, passage);
            assert!(
                (score - expected).abs() < 1e-12,
                "{query:?} in {passage:?}: {score}"
            );
        }
    }

    #[test]
    fn index_scores_agree_with_keyword_score() {
        let passages: Vec<&str> = CASES.iter().map(|(_, passage, _)| *passage).collect();
        let index = Index::build(passages.iter().copied());
        for (query, _, _) in CASES {
            let from_index = scores(&index, &distinct_words(query));
            for (i, passage) in passages.iter().enumerate() {
                let direct = keyword_score(query, passage);
                let indexed = from_index.get(&i).copied().unwrap_or(0.0);
                assert!(
                    (direct - indexed).abs() < 1e-12,
                    "{query:?} in {passage:?}: {direct} vs {indexed}"
                );
            }
        }
    }
}
