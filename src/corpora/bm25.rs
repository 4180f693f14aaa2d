//! Okapi BM25: the default lexical score.
//!
//! For a query Q (its distinct words) and a passage D:
//!
//! ```text
//! score(D, Q) = Σ over words t of Q found in D:
//!               idf(t) · tf(t, D) · (k1 + 1) / (tf(t, D) + k1 · (1 − b + b · |D| / avgdl))
//! idf(t)      = ln(1 + (N − n(t) + 0.5) / (n(t) + 0.5))
//! ```
//!
//! with k1 = 1.2 and b = 0.75; tf(t, D) is how often t occurs in D, |D| the length of D in words,
//! avgdl the mean passage length, N the number of passages and n(t) how many hold t. A rare word
//! weighs more than a common one; repeating a word helps with diminishing returns; a long passage
//! needs more occurrences than a short one for the same score. Scores are positive and unbounded:
//! compare them within one search, not across corpora.

use std::collections::BTreeMap;

use super::index::Index;

/// Term-frequency saturation: how quickly repeating a word stops helping.
const K1: f64 = 1.2;
/// Length normalisation: 0 ignores passage length, 1 normalises fully.
const B: f64 = 0.75;

/// The inverse document frequency of a word held by `holding` of `passages` passages; always
/// positive, even for a word every passage holds.
fn idf(passages: usize, holding: usize) -> f64 {
    let (n, h) = (passages as f64, holding as f64);
    (1.0 + (n - h + 0.5) / (h + 0.5)).ln()
}

/// BM25 scores of the passages holding at least one of `terms` (distinct words), by passage.
pub(super) fn scores(index: &Index, terms: &[String]) -> BTreeMap<usize, f64> {
    let average = index.average_length();
    let mut scores = BTreeMap::new();
    for term in terms {
        let postings = index.postings(term);
        if postings.is_empty() {
            continue;
        }
        let idf = idf(index.passages(), postings.len());
        for posting in postings {
            let tf = posting.count as f64;
            let relative_length = if average > 0.0 {
                index.length(posting.passage) as f64 / average
            } else {
                1.0
            };
            let weight = tf * (K1 + 1.0) / (tf + K1 * (1.0 - B + B * relative_length));
            *scores.entry(posting.passage).or_insert(0.0) += idf * weight;
        }
    }
    scores
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::corpora::index::distinct_words;

    fn ranked(passages: &[&str], query: &str) -> Vec<(usize, f64)> {
        let index = Index::build(passages.iter().copied());
        let mut ranked: Vec<(usize, f64)> =
            scores(&index, &distinct_words(query)).into_iter().collect();
        ranked.sort_by(|a, b| b.1.total_cmp(&a.1));
        ranked
    }

    #[test]
    fn idf_is_positive_and_falls_as_a_word_spreads() {
        let values: Vec<f64> = (1..=10).map(|holding| idf(10, holding)).collect();
        assert!(values.iter().all(|v| *v > 0.0), "{values:?}");
        assert!(values.windows(2).all(|w| w[0] > w[1]), "{values:?}");
    }

    #[test]
    fn matches_the_formula_by_hand() {
        // N = 2, avgdl = 3. "cat" is in one passage (n = 1), tf = 2, |D| = 4.
        let index = Index::build(["cat cat sat down", "dog ran"]);
        let idf = (1.0_f64 + (2.0 - 1.0 + 0.5) / (1.0 + 0.5)).ln();
        let expected = idf * 2.0 * 2.2 / (2.0 + 1.2 * (0.25 + 0.75 * 4.0 / 3.0));
        let found = scores(&index, &distinct_words("cat"));
        assert_eq!(found.len(), 1);
        assert!(
            (found[&0] - expected).abs() < 1e-12,
            "{found:?} vs {expected}"
        );
    }

    #[test]
    fn ranking_sanity() {
        // (passages, query, expected order of passage indices)
        let cases: &[(&[&str], &str, &[usize])] = &[
            // The rare word outranks common words, even several of them.
            (
                &["the cat on the mat", "the zebra", "the cat and the dog"],
                "the cat zebra",
                &[1, 0, 2],
            ),
            // Same occurrences, shorter passage first (length normalisation).
            (
                &[
                    "rust is a language with many words around it here",
                    "rust language",
                ],
                "rust",
                &[1, 0],
            ),
            // More occurrences in passages of equal length rank higher.
            (
                &["tea tea tea x", "tea x y z", "coffee x y z"],
                "tea",
                &[0, 1],
            ),
            // Matching more distinct query words wins over one word alone.
            (&["apple", "apple pie", "pie"], "apple pie", &[1, 0, 2]),
            // No word in common: nothing.
            (&["alpha", "beta"], "gamma", &[]),
            (&["alpha"], "", &[]),
        ];
        for (passages, query, expected) in cases {
            let order: Vec<usize> = ranked(passages, query).iter().map(|(i, _)| *i).collect();
            assert_eq!(order, *expected, "{query:?} over {passages:?}");
        }
    }

    #[test]
    fn repeated_occurrences_saturate() {
        let gains: Vec<f64> = (1..=6)
            .map(|n| {
                let text = vec!["w"; n].join(" ");
                let padding = "p ".repeat(6 - n);
                let passage = format!("{text} {padding}");
                ranked(&[&passage, "other"], "w")[0].1
            })
            .collect();
        let steps: Vec<f64> = gains.windows(2).map(|w| w[1] - w[0]).collect();
        assert!(steps.iter().all(|s| *s > 0.0), "{gains:?}");
        assert!(steps.windows(2).all(|s| s[1] < s[0]), "{steps:?}");
        assert!(
            gains[5] < idf(2, 1) * (K1 + 1.0),
            "bounded by idf · (k1 + 1)"
        );
    }
}
