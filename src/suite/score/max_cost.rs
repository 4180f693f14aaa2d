//! Scoring `max_cost`: the run's (or step's) model calls cost at most the amount; calls of
//! unpriced models cost nothing.

use super::{Score, Scored, Scoring};
use crate::plan::suite::assertions::MaxCostAssertion;

impl Score for MaxCostAssertion {
    async fn score(&self, on: &Scoring<'_>) -> Scored {
        let cost = on.subject.cost;
        Scored::check(
            cost.unwrap_or(0.0) <= self.value,
            format!("≤ {}", self.value),
            cost.map_or("unpriced".into(), |c| c.to_string()),
        )
    }
}
