//! Word tokenisation and the keyword score, shared by retrieval (`corpora`) and reranking
//! (`rerank`) so both agree on what a word is and what a keyword match is worth; and the
//! "did you mean" suggestions every layer's errors use for a name that is not there; and the
//! neutralising of control characters in text (a model's answer, a file's line) bound for a
//! terminal, where an escape sequence would otherwise move the cursor, rewrite the title or
//! hide what was printed.

use std::borrow::Cow;
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

/// `text` safe to print on a terminal: every control character except newline and tab — C0
/// (ESC, CR, BEL, backspace …), DEL, C1 (U+0080–U+009F, CSI among them) — and the bidirectional
/// overrides and isolates (which reorder what is shown) are written as visible `\u{…}` escapes.
/// Text without any is returned as it is, without copying.
pub fn terminal_safe(text: &str) -> Cow<'_, str> {
    if !text.chars().any(is_terminal_unsafe) {
        return Cow::Borrowed(text);
    }
    let mut safe = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if is_terminal_unsafe(c) {
            safe.push_str(&format!("\\u{{{:x}}}", u32::from(c)));
        } else {
            safe.push(c);
        }
    }
    Cow::Owned(safe)
}

/// Whether a terminal would act on `c` rather than show it (newline and tab are shown).
fn is_terminal_unsafe(c: char) -> bool {
    let bidi_control = matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}');
    (c.is_control() && c != '\n' && c != '\t') || bidi_control
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
    fn terminal_safe_text_shows_control_characters_instead_of_obeying_them() {
        assert!(matches!(
            terminal_safe("plain\ttext\nline 2 é"),
            Cow::Borrowed(_)
        ));
        assert_eq!(
            terminal_safe("\u{1b}]0;pwned\u{7}\u{1b}[2Jok\r"),
            "\\u{1b}]0;pwned\\u{7}\\u{1b}[2Jok\\u{d}"
        );
        assert_eq!(terminal_safe("a\u{9b}31mb\u{7f}"), "a\\u{9b}31mb\\u{7f}");
        assert_eq!(terminal_safe("x\u{202e}y"), "x\\u{202e}y");
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
