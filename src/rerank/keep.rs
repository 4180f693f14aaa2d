//! What a `retrieve` or `rerank` step passes on once its candidates are ranked: duplicates
//! dropped, at most a number of candidates, at most a number of characters of passage text — so
//! the prompt downstream holds distinct passages and fits the model's context.

use std::collections::HashSet;

use serde_json::Value;

use crate::core::Candidate;

/// The limits applied, best first, to ranked candidates.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Keep {
    /// Most candidates passed on (duplicates dropped before counting).
    pub limit: Option<usize>,
    /// Drop a candidate whose text (whitespace aside) or whose source and `metadata.chunk` an
    /// earlier, better one already has.
    pub dedup: bool,
    /// Most characters of `content`, all candidates together. The candidate that crosses the
    /// budget is cut to what is left (and marked `metadata.truncated: true`); none follow it.
    pub max_chars: Option<usize>,
}

impl Keep {
    /// The candidates to pass on, from `ranked` (best first). Lazy in `ranked`: it stops reading
    /// once the limit or the budget is reached.
    pub fn apply(&self, ranked: impl IntoIterator<Item = Candidate>) -> Vec<Candidate> {
        let full = |kept: &Vec<Candidate>, left: Option<usize>| {
            self.limit.is_some_and(|limit| kept.len() >= limit) || left == Some(0)
        };
        let mut seen = Seen::default();
        let mut left = self.max_chars;
        let mut kept = Vec::new();
        if full(&kept, left) {
            return kept;
        }
        for mut candidate in ranked {
            if self.dedup && !seen.first_time(&candidate) {
                continue;
            }
            if let Some(left) = &mut left {
                let chars = candidate.content.chars().count();
                if chars > *left {
                    candidate.content = candidate.content.chars().take(*left).collect();
                    candidate
                        .metadata
                        .insert("truncated".into(), Value::Bool(true));
                    *left = 0;
                } else {
                    *left -= chars;
                }
            }
            kept.push(candidate);
            if full(&kept, left) {
                break;
            }
        }
        kept
    }
}

/// The passages passed on so far, by text and by place.
#[derive(Default)]
struct Seen {
    /// Contents with runs of whitespace made one space, ends trimmed.
    texts: HashSet<String>,
    /// (source, chunk) of the candidates that carry a `metadata.chunk`.
    chunks: HashSet<(String, String)>,
}

impl Seen {
    /// Whether `candidate` is new (and, if so, remembers it).
    fn first_time(&mut self, candidate: &Candidate) -> bool {
        let text = candidate
            .content
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        let place = candidate
            .metadata
            .get("chunk")
            .map(|chunk| (candidate.source.clone(), chunk.to_string()));
        let new =
            !self.texts.contains(&text) && place.as_ref().is_none_or(|p| !self.chunks.contains(p));
        if new {
            self.texts.insert(text);
            self.chunks.extend(place);
        }
        new
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Map, json};

    use super::*;

    fn candidate(content: &str, source: &str, chunk: Option<u64>) -> Candidate {
        let mut metadata = Map::new();
        if let Some(chunk) = chunk {
            metadata.insert("chunk".into(), json!(chunk));
        }
        Candidate {
            content: content.into(),
            source: source.into(),
            score: 0.0,
            metadata,
        }
    }

    fn contents(kept: &[Candidate]) -> Vec<&str> {
        kept.iter().map(|c| c.content.as_str()).collect()
    }

    #[test]
    fn duplicates_by_text_or_by_source_and_chunk_are_dropped_before_counting() {
        let ranked = vec![
            candidate("Rust  ownership\n", "a.md", Some(0)),
            candidate("Rust ownership", "b.md", None),
            candidate("a later edit of chunk 0", "a.md", Some(0)),
            candidate("same chunk number, other file", "b.md", Some(0)),
            candidate("borrowing", "a.md", Some(1)),
            candidate("lifetimes", "a.md", Some(2)),
        ];
        let keep = Keep {
            limit: Some(3),
            dedup: true,
            max_chars: None,
        };
        assert_eq!(
            contents(&keep.apply(ranked.clone())),
            [
                "Rust  ownership\n",
                "same chunk number, other file",
                "borrowing"
            ]
        );
        let all = Keep {
            dedup: false,
            ..keep
        };
        assert_eq!(all.apply(ranked).len(), 3, "without dedup the first three");
    }

    #[test]
    fn the_budget_cuts_the_candidate_that_crosses_it_and_drops_the_rest() {
        let ranked = vec![
            candidate("ééééé", "a", None),
            candidate("0123456789", "b", None),
            candidate("never reached", "c", None),
        ];
        let keep = Keep {
            limit: None,
            dedup: true,
            max_chars: Some(8),
        };
        let kept = keep.apply(ranked.clone());
        assert_eq!(contents(&kept), ["ééééé", "012"], "characters, not bytes");
        assert_eq!(kept[1].metadata["truncated"], true);
        assert!(!kept[0].metadata.contains_key("truncated"));
        let roomy = Keep {
            max_chars: Some(1000),
            ..keep
        };
        assert_eq!(roomy.apply(ranked).len(), 3);
    }

    #[test]
    fn reading_stops_at_the_limit() {
        let mut read = 0;
        let ranked = (0..1000).map(|i| {
            read += 1;
            candidate(&format!("passage {i}"), "s", None)
        });
        let keep = Keep {
            limit: Some(2),
            dedup: true,
            max_chars: None,
        };
        assert_eq!(keep.apply(ranked).len(), 2);
        assert_eq!(read, 2);
    }
}
