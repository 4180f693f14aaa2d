//! Voting over N candidate answers: majority, unanimity, similarity and
//! per-field majority, each with a confidence between 0 and 1.
//!
//! Text answers are compared after light normalisation (trimmed, lower-cased, trailing
//! punctuation dropped) so "Positive." and "positive" count as one answer; JSON answers are
//! compared by value. The winner is returned in its original form.

use indexmap::IndexMap;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use crate::core::{Failure, FailureCode, text};

/// How candidates are combined into one answer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum VotingMethod {
    /// The most frequent answer wins (ties: the first seen); confidence is its share.
    #[default]
    Majority,
    /// Every candidate must agree, else the step fails naming the one that differs.
    Unanimity,
    /// The candidate most similar to all the others wins.
    Similarity,
    /// Per-field majority over JSON objects.
    FieldMajority,
}

/// The result of a vote.
#[derive(Debug, Clone, PartialEq)]
pub struct Vote {
    pub value: Value,
    /// The candidate (an index into those voted on) whose answer is the value; None when the
    /// value was assembled from several (`field_majority` with no candidate equal to it).
    pub winner: Option<usize>,
    pub confidence: f64,
    /// How the vote went (counts per answer, similarity scores, or counts per field).
    pub votes: Value,
}

/// Votes over `candidates` (at least one).
pub fn vote(method: VotingMethod, candidates: &[Value]) -> Result<Vote, Failure> {
    if candidates.is_empty() {
        return Err(Failure::new(
            FailureCode::OrchestrationNoConsensus,
            "no candidates to vote on",
        ));
    }
    match method {
        VotingMethod::Majority => Ok(majority(candidates)),
        VotingMethod::Unanimity => unanimity(candidates),
        VotingMethod::Similarity => Ok(similarity(candidates)),
        VotingMethod::FieldMajority => field_majority(candidates),
    }
}

/// The comparison key of an answer.
fn key(value: &Value) -> String {
    match value {
        Value::String(s) => s
            .trim()
            .trim_end_matches(['.', '!', '?', ',', ';', ':'])
            .trim()
            .to_lowercase(),
        other => other.to_string(),
    }
}

/// Groups equal answers in first-seen order: key → (first index, count).
fn tally(candidates: &[Value]) -> IndexMap<String, (usize, usize)> {
    let mut groups: IndexMap<String, (usize, usize)> = IndexMap::new();
    for (i, candidate) in candidates.iter().enumerate() {
        groups.entry(key(candidate)).or_insert((i, 0)).1 += 1;
    }
    groups
}

fn majority(candidates: &[Value]) -> Vote {
    let groups = tally(candidates);
    // Ties go to the answer seen first: `max_by_key` keeps the last maximum, so scan in reverse.
    let (first, count) = groups
        .values()
        .rev()
        .max_by_key(|(_, count)| *count)
        .copied()
        .unwrap_or((0, 0));
    let votes: Vec<Value> = groups
        .values()
        .map(|(i, n)| json!({ "value": candidates[*i], "count": n }))
        .collect();
    Vote {
        value: candidates[first].clone(),
        winner: Some(first),
        confidence: count as f64 / candidates.len() as f64,
        votes: Value::Array(votes),
    }
}

fn unanimity(candidates: &[Value]) -> Result<Vote, Failure> {
    let first = key(&candidates[0]);
    if let Some((i, differing)) = candidates.iter().enumerate().find(|(_, c)| key(c) != first) {
        return Err(Failure::new(
            FailureCode::OrchestrationNoConsensus,
            format!(
                "no unanimity: candidate {} answered {} but candidate 1 answered {}",
                i + 1,
                short(differing),
                short(&candidates[0])
            ),
        ));
    }
    Ok(Vote {
        value: candidates[0].clone(),
        winner: Some(0),
        confidence: 1.0,
        votes: json!([{ "value": candidates[0], "count": candidates.len() }]),
    })
}

fn short(value: &Value) -> String {
    let text = value.to_string();
    if text.chars().count() > 80 {
        format!("{}…", text.chars().take(80).collect::<String>())
    } else {
        text
    }
}

/// Word-set Jaccard similarity of two answers (1 when both are empty).
fn jaccard(a: &Value, b: &Value) -> f64 {
    let words =
        |v: &Value| -> std::collections::BTreeSet<String> { text::words(&key(v)).collect() };
    let (a, b) = (words(a), words(b));
    let union = a.union(&b).count();
    if union == 0 {
        1.0
    } else {
        a.intersection(&b).count() as f64 / union as f64
    }
}

fn similarity(candidates: &[Value]) -> Vote {
    let n = candidates.len();
    if n == 1 {
        return Vote {
            value: candidates[0].clone(),
            winner: Some(0),
            confidence: 1.0,
            votes: json!([1.0]),
        };
    }
    let scores: Vec<f64> = (0..n)
        .map(|i| {
            (0..n)
                .filter(|&j| j != i)
                .map(|j| jaccard(&candidates[i], &candidates[j]))
                .sum::<f64>()
                / (n - 1) as f64
        })
        .collect();
    let best = scores
        .iter()
        .enumerate()
        .rev()
        .max_by(|a, b| a.1.total_cmp(b.1))
        .map_or(0, |(i, _)| i);
    Vote {
        value: candidates[best].clone(),
        winner: Some(best),
        confidence: scores[best],
        votes: json!(scores),
    }
}

fn field_majority(candidates: &[Value]) -> Result<Vote, Failure> {
    let objects: Vec<Map<String, Value>> = candidates
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let parsed = match c {
                Value::String(s) => serde_json::from_str(s).ok(),
                other => Some(other.clone()),
            };
            match parsed {
                Some(Value::Object(map)) => Ok(map),
                _ => Err(Failure::new(
                    FailureCode::ConstraintJsonInvalid,
                    format!(
                        "field_majority needs JSON objects, but candidate {} is {}",
                        i + 1,
                        short(c)
                    ),
                )),
            }
        })
        .collect::<Result<_, _>>()?;
    let mut fields: IndexMap<String, Vec<Value>> = IndexMap::new();
    for object in &objects {
        for (field, value) in object {
            fields.entry(field.clone()).or_default().push(value.clone());
        }
    }
    let mut value = Map::new();
    let mut votes = Map::new();
    let mut confidence_sum = 0.0;
    for (field, values) in &fields {
        let vote = majority(values);
        // A field missing from some candidates counts against its confidence.
        let share = vote.confidence * values.len() as f64 / objects.len() as f64;
        confidence_sum += share;
        value.insert(field.clone(), vote.value);
        votes.insert(field.clone(), vote.votes);
    }
    let confidence = if fields.is_empty() {
        1.0
    } else {
        confidence_sum / fields.len() as f64
    };
    let winner = objects.iter().position(|object| *object == value);
    Ok(Vote {
        value: Value::Object(value),
        winner,
        confidence,
        votes: Value::Object(votes),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(list: &[&str]) -> Vec<Value> {
        list.iter().map(|s| json!(s)).collect()
    }

    #[test]
    fn majority_picks_the_most_frequent_with_its_share() {
        let vote = vote(VotingMethod::Majority, &strings(&["a", "b", "a"])).expect("vote");
        assert_eq!(vote.value, json!("a"));
        assert_eq!(vote.winner, Some(0));
        assert!((vote.confidence - 2.0 / 3.0).abs() < 1e-9);
        assert_eq!(
            vote.votes,
            json!([{ "value": "a", "count": 2 }, { "value": "b", "count": 1 }])
        );
    }

    #[test]
    fn majority_ties_go_to_the_first_seen_and_text_is_normalised() {
        let vote = vote(
            VotingMethod::Majority,
            &strings(&["Negative", "positive.", "negative!", "Positive"]),
        )
        .expect("vote");
        assert_eq!(vote.value, json!("Negative"));
        assert_eq!(vote.confidence, 0.5);
    }

    #[test]
    fn unanimity_names_the_differing_candidate() {
        let failure = vote(VotingMethod::Unanimity, &strings(&["yes", "yes", "no"]))
            .expect_err("no unanimity");
        assert_eq!(failure.code, FailureCode::OrchestrationNoConsensus);
        assert_eq!(
            failure.message,
            "no unanimity: candidate 3 answered \"no\" but candidate 1 answered \"yes\""
        );
        assert_eq!(
            vote(VotingMethod::Unanimity, &strings(&["Yes", "yes."]))
                .expect("agree")
                .confidence,
            1.0
        );
    }

    #[test]
    fn similarity_picks_the_answer_closest_to_the_others() {
        let vote = vote(
            VotingMethod::Similarity,
            &strings(&[
                "the capital is Paris",
                "Paris is the capital",
                "it is Lyon I think",
                "capital Paris",
            ]),
        )
        .expect("vote");
        assert_eq!(vote.value, json!("the capital is Paris"));
        assert!(vote.confidence > 0.4 && vote.confidence <= 1.0);
    }

    #[test]
    fn field_majority_votes_per_field_over_objects_or_json_text() {
        let candidates = vec![
            json!({ "label": "bug", "priority": 1 }),
            json!(r#"{"label": "bug", "priority": 2}"#),
            json!({ "label": "feature", "priority": 2 }),
        ];
        let vote = vote(VotingMethod::FieldMajority, &candidates).expect("vote");
        assert_eq!(vote.value, json!({ "label": "bug", "priority": 2 }));
        assert_eq!(
            vote.winner,
            Some(1),
            "the candidate equal to the assembled answer"
        );
        assert!((vote.confidence - 2.0 / 3.0).abs() < 1e-9);
        let tied = vec![
            json!({ "label": "bug", "priority": 1 }),
            json!({ "label": "feature", "priority": 2 }),
        ];
        let assembled = super::vote(VotingMethod::FieldMajority, &tied).expect("vote");
        assert_eq!(assembled.winner, Some(0), "ties go to the first seen");
        let none_equal = vec![
            json!({ "label": "bug", "priority": 1 }),
            json!({ "label": "feature", "priority": 2 }),
            json!({ "label": "bug", "priority": 3, "extra": true }),
            json!({ "label": "other", "priority": 2 }),
        ];
        let assembled = super::vote(VotingMethod::FieldMajority, &none_equal).expect("vote");
        assert_eq!(
            assembled.value,
            json!({ "label": "bug", "priority": 2, "extra": true })
        );
        assert_eq!(assembled.winner, None, "assembled from several candidates");
        let failure = super::vote(VotingMethod::FieldMajority, &strings(&["not json"]))
            .expect_err("objects only");
        assert_eq!(failure.code, FailureCode::ConstraintJsonInvalid);
    }

    #[test]
    fn no_candidates_is_no_consensus() {
        assert_eq!(
            vote(VotingMethod::Majority, &[]).map_err(|f| f.code),
            Err(FailureCode::OrchestrationNoConsensus)
        );
    }
}
