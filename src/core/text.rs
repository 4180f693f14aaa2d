//! Word tokenisation and the keyword score, shared by retrieval (`corpora`) and reranking
//! (`rerank`) so both agree on what a word is and what a keyword match is worth; and the
//! "did you mean" suggestions every layer's errors use for a name that is not there.

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

/// "did you mean `x`?" for the closest of `candidates` to `found`, when one is close enough.
pub fn did_you_mean<'a>(
    found: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<String> {
    closest(found, candidates).map(|c| format!("did you mean `{c}`?"))
}

/// The candidate closest to `found`, if similar enough to be a typo: within a small edit distance
/// (one edit per three characters, at least one), or very similar by Jaro-Winkler.
fn closest<'a>(found: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let found_lower = found.to_lowercase();
    let max_edits = (found.chars().count() / 3).max(1);
    candidates
        .into_iter()
        .filter_map(|c| {
            let lower = c.to_lowercase();
            let edits = strsim::damerau_levenshtein(&found_lower, &lower);
            let similarity = strsim::jaro_winkler(&found_lower, &lower);
            (edits <= max_edits || similarity >= 0.85).then_some((edits, -similarity, c))
        })
        .min_by(|a, b| a.0.cmp(&b.0).then(a.1.total_cmp(&b.1)))
        .map(|(_, _, c)| c)
}

/// A help line naming what is available: "did you mean …?" when one is close, else the list.
pub fn suggestion<'a>(
    found: &str,
    what: &str,
    available: impl IntoIterator<Item = &'a str> + Clone,
) -> String {
    if let Some(hint) = did_you_mean(found, available.clone()) {
        return hint;
    }
    let names: Vec<String> = available.into_iter().map(|n| format!("`{n}`")).collect();
    if names.is_empty() {
        format!("no {what} are declared")
    } else {
        format!("declared {what}: {}", names.join(", "))
    }
}

/// At most `max` characters of `text`, with `…` when cut: for quoting user input in messages
/// without repeating all of a huge one.
pub fn excerpt(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_string(),
    }
}

/// A GitHub Actions workflow command's message (`::error …::MESSAGE`): `%`, CR and LF escaped.
pub fn workflow_data(text: &str) -> String {
    text.replace('%', "%25")
        .replace('\r', "%0D")
        .replace('\n', "%0A")
}

/// A GitHub Actions workflow command's property value (`file=…`, `title=…`): also `:` and `,`.
pub fn workflow_property(text: &str) -> String {
    workflow_data(text).replace(':', "%3A").replace(',', "%2C")
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn excerpts_cut_long_text_on_a_character_boundary() {
        assert_eq!(excerpt("short", 10), "short");
        assert_eq!(excerpt("ééééé", 2), "éé…");
        assert_eq!(excerpt(&"x".repeat(10_000_000), 80).chars().count(), 81);
    }

    #[test]
    fn suggestions_prefer_a_close_name_and_otherwise_list() {
        assert_eq!(
            did_you_mean("modle", ["model", "prompt"]),
            Some("did you mean `model`?".into())
        );
        assert_eq!(did_you_mean("zzz", ["model", "prompt"]), None);
        assert_eq!(
            did_you_mean("lm", ["llm", "ranker"]),
            Some("did you mean `llm`?".into())
        );
        assert_eq!(did_you_mean("x", ["llm", "ranker"]), None);
        assert_eq!(
            suggestion("zzz", "models", ["llm", "ranker"]),
            "declared models: `llm`, `ranker`"
        );
        assert_eq!(suggestion("zzz", "models", []), "no models are declared");
    }
}
