//! What model calls cost: the price a plan declares for a language model, and the cost of a
//! call's token usage at that price.
//!
//! A cost is counted in billionths of the price's unit (whatever currency the plan's prices are
//! in), as an integer, so that the sums over a step, a run and a batch are exact and print as
//! `0.0003`, not `0.00030000000000000003`. A model without a price has no cost — `None`, written as
//! null — which is not the same as costing 0.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize, Serializer};

use super::TokenUsage;

/// Billionths of a unit in one unit.
const NANOS: f64 = 1e9;

/// What a model charges, per million tokens, in one currency of your choice (the same for every
/// price in the plan and for the policy's `max_cost`).
#[derive(Debug, Clone, Copy, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Price {
    /// Price of one million prompt (input) tokens, e.g. `0.15`.
    #[schemars(range(min = 0.0))]
    pub prompt_per_million: f64,
    /// Price of one million completion (output) tokens, e.g. `0.6`.
    #[schemars(range(min = 0.0))]
    pub completion_per_million: f64,
}

impl Price {
    /// What `usage` costs at this price.
    pub fn cost(&self, usage: TokenUsage) -> Cost {
        let per_token = |per_million: f64| per_million / 1e6;
        let amount = usage.prompt_tokens as f64 * per_token(self.prompt_per_million)
            + usage.completion_tokens as f64 * per_token(self.completion_per_million);
        Cost::from_amount(amount)
    }
}

/// An amount spent on model calls, exact to a billionth of the price's unit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Cost {
    nanos: u64,
}

impl Cost {
    /// The cost closest to `amount` (a negative or non-finite amount is 0).
    pub fn from_amount(amount: f64) -> Cost {
        let nanos = (amount * NANOS).round();
        Cost {
            nanos: if nanos.is_finite() && nanos > 0.0 {
                nanos as u64
            } else {
                0
            },
        }
    }

    /// The amount, in the price's unit.
    pub fn amount(self) -> f64 {
        self.nanos as f64 / NANOS
    }

    /// The sum of two costs where either may be unknown (an unpriced model): unknown only when
    /// both are.
    pub fn sum(a: Option<Cost>, b: Option<Cost>) -> Option<Cost> {
        match (a, b) {
            (None, None) => None,
            (a, b) => Some(a.unwrap_or_default() + b.unwrap_or_default()),
        }
    }
}

impl std::ops::Add for Cost {
    type Output = Cost;
    fn add(self, other: Cost) -> Cost {
        Cost {
            nanos: self.nanos.saturating_add(other.nanos),
        }
    }
}

impl std::fmt::Display for Cost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.amount())
    }
}

impl Serialize for Cost {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_f64(self.amount())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINI: Price = Price {
        prompt_per_million: 0.15,
        completion_per_million: 0.6,
    };

    fn usage(prompt_tokens: u64, completion_tokens: u64) -> TokenUsage {
        TokenUsage {
            prompt_tokens,
            completion_tokens,
            reasoning_tokens: None,
        }
    }

    #[test]
    fn a_call_costs_its_tokens_at_the_price_per_million() {
        // 1000 × 0.15 / 1e6 + 500 × 0.6 / 1e6 = 0.00015 + 0.0003
        assert_eq!(MINI.cost(usage(1000, 500)).amount(), 0.00045);
        assert_eq!(MINI.cost(usage(0, 0)), Cost::default());
    }

    #[test]
    fn sums_are_exact_and_unknown_only_when_nothing_was_priced() {
        let call = MINI.cost(usage(1000, 0));
        let mut total = None;
        for _ in 0..3 {
            total = Cost::sum(total, Some(call));
        }
        assert_eq!(total.map(Cost::amount), Some(0.00045));
        assert_eq!(
            serde_json::to_string(&total).expect("json"),
            "0.00045",
            "no binary-fraction noise"
        );
        assert_eq!(Cost::sum(None, None), None);
        assert_eq!(Cost::sum(None, Some(call)), Some(call));
        assert_eq!(Cost::from_amount(-1.0), Cost::default());
    }
}
