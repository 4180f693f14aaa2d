//! Word tokenisation shared by the lexical scorers (BM25 in `context`, keyword in `rerank`), so
//! retrieval and reranking agree on what a word is.

/// Lower-cased runs of alphanumeric characters.
pub fn words(text: &str) -> impl Iterator<Item = String> + '_ {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
}

#[cfg(test)]
mod tests {
    use super::words;

    #[test]
    fn splits_on_non_alphanumerics_and_lowercases() {
        let found: Vec<String> = words("Hello, World! It's 2026—café").collect();
        assert_eq!(found, ["hello", "world", "it", "s", "2026", "café"]);
    }
}
