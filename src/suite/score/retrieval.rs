//! What the retrieval metrics share when scored: the sources of the first `k` candidates of the
//! subject's output, how a source matches an expected name, and how the result is reported.

use serde_json::Value;

use super::{Scored, Subject, shown};
use crate::plan::suite::assertions::Ranking;

/// A metric of the first k candidates' sources (`top`) against the relevant names (`wanted`).
pub(super) type Metric = fn(top: &[String], wanted: &[String]) -> f64;

/// Scores `metric` over the first `k` candidates of the subject's output.
pub(super) fn score_ranking(ranking: &Ranking, subject: &Subject<'_>, metric: Metric) -> Scored {
    let wanted = ranking.sources.names();
    let sources = candidate_sources(subject);
    let k = ranking.k.map_or(sources.len(), |k| k as usize);
    let top = &sources[..k.min(sources.len())];
    let expected = format!("{} in the top {k}", wanted.join(", "));
    let got = if top.is_empty() {
        "no candidates".to_string()
    } else {
        top.iter()
            .map(|s| short_source(s))
            .collect::<Vec<_>>()
            .join(", ")
    };
    Scored::metric(metric(top, &wanted), expected, got)
}

/// Whether `source` is one of `wanted`.
pub(super) fn relevant(source: &str, wanted: &[String]) -> bool {
    wanted.iter().any(|name| source_matches(source, name))
}

/// A candidate's source matches an expected name when equal, or when it ends with `/name`.
pub(super) fn source_matches(source: &str, wanted: &str) -> bool {
    source == wanted || source.ends_with(&format!("/{wanted}"))
}

/// The `source` of every candidate in the subject's output, in rank order.
fn candidate_sources(subject: &Subject<'_>) -> Vec<String> {
    subject
        .output
        .and_then(Value::as_array)
        .map(|items| {
            items
                .iter()
                .map(|c| c.get("source").map(shown).unwrap_or_default())
                .collect()
        })
        .unwrap_or_default()
}

/// The last path component of a source, for short reports.
fn short_source(source: &str) -> &str {
    source.rsplit('/').next().unwrap_or(source)
}
