//! Word tokenisation and the keyword score, shared by retrieval (`context`) and reranking
//! (`rerank`) so both agree on what a word is and what a keyword match is worth.

use std::collections::HashSet;

/// Lower-cased runs of alphanumeric characters.
pub fn words(text: &str) -> impl Iterator<Item = String> + '_ {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
}

/// The share of the query's distinct words that occur in the passage: 0 (none) to 1 (all).
pub fn keyword_score(query: &str, passage: &str) -> f64 {
    let wanted: HashSet<String> = words(query).collect();
    if wanted.is_empty() {
        return 0.0;
    }
    let present: HashSet<String> = words(passage).collect();
    let hits = wanted.iter().filter(|w| present.contains(*w)).count();
    hits as f64 / wanted.len() as f64
}

#[cfg(test)]
mod tests {
    use super::{keyword_score, words};

    #[test]
    fn keyword_score_is_the_share_of_query_words_present() {
        assert_eq!(
            keyword_score("capital of France", "Paris is the capital of France"),
            1.0
        );
        assert_eq!(
            keyword_score("capital of Spain", "Paris is the capital of France"),
            2.0 / 3.0
        );
        assert_eq!(keyword_score("", "anything"), 0.0);
        assert_eq!(keyword_score("the the the", "the end"), 1.0);
    }

    #[test]
    fn splits_on_non_alphanumerics_and_lowercases() {
        let found: Vec<String> = words("Hello, World! It's 2026—café").collect();
        assert_eq!(found, ["hello", "world", "it", "s", "2026", "café"]);
    }
}
