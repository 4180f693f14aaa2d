//! What a run spends, kept apart from what it says: a run's [`RunLedger`] (model calls made, what
//! the call cache did, what the calls cost, and the cost limit it is held to) and each step's
//! [`StepLedger`] (its cost, its last vote, the calls the cache answered). A run's ledger also
//! adds up what its calls waited for their models' rate limits.
//!
//! Events only describe; ledgers count. Every model call is booked once, by
//! [`StepLedger::book_call`], into the step's ledger and the run's; the run record and the
//! budget checks read the ledgers, never the events, so an event sink (the events file, a trace
//! exporter) can be added or left out without changing a number. A nested run (a route's plan
//! agent) has a ledger of its own whose bookings also reach its parent's: the parent's cost
//! limit holds over the calls its sub-plans make, as they make them.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::record::{CacheTally, VoteRecord};
use crate::core::{Cost, Failure, FailureCode, TokenUsage};
use crate::inference::{CacheStatus, Pacing};

/// One model call as a ledger books it.
#[derive(Debug, Clone, Copy)]
pub struct Booking {
    pub usage: TokenUsage,
    /// What it cost at the model's declared price; None for an unpriced model or a failed call.
    pub cost: Option<Cost>,
    pub cache: CacheStatus,
    /// What the call waited for its model's pace, and the 429s it was answered.
    pub rate_limit: Pacing,
}

impl Booking {
    /// A call that used `usage`, cost `cost`, went through the cache as `cache`, and waited
    /// `rate_limit` for its model's pace.
    pub fn new(
        usage: TokenUsage,
        cost: Option<Cost>,
        cache: CacheStatus,
        rate_limit: Pacing,
    ) -> Self {
        Booking {
            usage,
            cost,
            cache,
            rate_limit,
        }
    }

    fn answered_from_cache(&self) -> bool {
        matches!(self.cache, CacheStatus::Hit { .. })
    }
}

/// What one run has spent so far; see the module docs.
#[derive(Debug, Default)]
pub struct RunLedger {
    /// Most the run's model calls may cost (the policy's `max_cost`).
    max_cost: Option<Cost>,
    /// Model calls made (the cache's answers are not calls).
    model_calls: AtomicU64,
    cache: Mutex<CacheTally>,
    /// None while no priced model has answered.
    cost: Mutex<Option<Cost>>,
    rate_limit: Mutex<Pacing>,
    /// The run that started this one (a sub-plan's caller): it books every call too.
    parent: Option<Arc<RunLedger>>,
}

impl RunLedger {
    /// The ledger of a run held to `max_cost`, nested in `parent`'s run when it has one.
    pub fn new(max_cost: Option<Cost>, parent: Option<Arc<RunLedger>>) -> Self {
        RunLedger {
            max_cost,
            parent,
            ..RunLedger::default()
        }
    }

    fn book(&self, booking: &Booking) {
        if !booking.answered_from_cache() {
            self.model_calls.fetch_add(1, Ordering::Relaxed);
        }
        if let Ok(mut tally) = self.cache.lock() {
            tally.count(booking.cache, booking.usage.total());
        }
        if let Ok(mut total) = self.cost.lock() {
            *total = Cost::sum(*total, booking.cost);
        }
        if let Ok(mut waited) = self.rate_limit.lock() {
            *waited = waited.and(booking.rate_limit);
        }
        if let Some(parent) = &self.parent {
            parent.book(booking);
        }
    }

    /// Model calls this run has made (every attempt, vote and tool round, its sub-plans'
    /// included), not counting those the call cache answered.
    pub fn model_calls(&self) -> u64 {
        self.model_calls.load(Ordering::Relaxed)
    }

    /// What the call cache did for this run's calls.
    pub fn cache_tally(&self) -> CacheTally {
        self.cache.lock().map(|tally| *tally).unwrap_or_default()
    }

    /// What this run's model calls (its sub-plans' included) waited for their models' pace, and
    /// the 429s they were answered.
    pub fn rate_limit(&self) -> Pacing {
        self.rate_limit
            .lock()
            .map(|waited| *waited)
            .unwrap_or_default()
    }

    /// What this run's model calls have cost; None while no priced model has answered.
    pub fn cost(&self) -> Option<Cost> {
        self.cost.lock().ok().and_then(|cost| *cost)
    }

    /// Fails once this run, or a run it is nested in, has spent more than its `max_cost`.
    pub fn check_budget(&self) -> Result<(), Failure> {
        if let (Some(max), Some(spent)) = (self.max_cost, self.cost())
            && spent > max
        {
            return Err(Failure::new(
                FailureCode::OrchestrationCostExceeded,
                format!("the run's model calls have cost {spent}, over its max_cost of {max}"),
            )
            .with_help("raise the policy's max_cost, lower max_tokens, or use a cheaper model"));
        }
        match &self.parent {
            Some(parent) => parent.check_budget(),
            None => Ok(()),
        }
    }
}

/// What a step accrues besides its output, over all its attempts (and the tasks they spawn):
/// what its model calls cost, and how its last vote went. It outlives a step cancelled or timed
/// out mid-call, so the record still shows what was spent.
#[derive(Debug, Default)]
pub struct StepLedger {
    /// The ledger of the run the step belongs to.
    run: Arc<RunLedger>,
    entries: Mutex<Entries>,
}

#[derive(Debug, Default)]
struct Entries {
    cost: Option<Cost>,
    /// Tokens of the calls booked since the step's record last took them.
    usage: TokenUsage,
    vote: Option<VoteRecord>,
    cached_calls: Vec<String>,
    /// Attempts started, over every run of the step.
    attempts: u32,
}

impl StepLedger {
    /// A ledger for a step of the run that `run` accounts for.
    pub fn new(run: Arc<RunLedger>) -> Self {
        StepLedger {
            run,
            entries: Mutex::default(),
        }
    }

    /// The ledger of the step's run.
    pub fn run(&self) -> &Arc<RunLedger> {
        &self.run
    }

    /// Books one model call, named `call` in the record when the cache answered it, into this
    /// step's ledger and its run's.
    pub fn book_call(&self, call: impl std::fmt::Display, booking: Booking) {
        if let Ok(mut entries) = self.entries.lock() {
            entries.cost = Cost::sum(entries.cost, booking.cost);
            entries.usage += booking.usage;
            if booking.answered_from_cache() {
                entries.cached_calls.push(call.to_string());
            }
        }
        self.run.book(&booking);
    }

    /// Records a call the cache answered that is not a model call (an idempotent tool's), named
    /// `call` in the record.
    pub fn served_from_cache(&self, call: impl std::fmt::Display) {
        if let Ok(mut entries) = self.entries.lock() {
            entries.cached_calls.push(call.to_string());
        }
    }

    /// Adds what a nested run (a route's plan agent) cost and used to this step: its calls are
    /// already in the run's ledger (a nested run's ledger books into its parent's).
    pub fn add_nested(&self, cost: Option<Cost>, usage: TokenUsage) {
        if let Ok(mut entries) = self.entries.lock() {
            entries.cost = Cost::sum(entries.cost, cost);
            entries.usage += usage;
        }
    }

    /// The tokens of every call booked since the last take — answered, failed later, retried
    /// or voted — and starts counting afresh (a step sent back by a check runs again with a
    /// record of its own).
    pub fn take_usage(&self) -> TokenUsage {
        self.entries
            .lock()
            .map(|mut e| std::mem::take(&mut e.usage))
            .unwrap_or_default()
    }

    /// Counts an attempt of the step as it starts (so a step cancelled mid-attempt still shows
    /// how many it made).
    pub fn attempt_started(&self) {
        if let Ok(mut entries) = self.entries.lock() {
            entries.attempts = entries.attempts.saturating_add(1);
        }
    }

    /// The attempts started so far, over every run of the step.
    pub fn attempts(&self) -> u32 {
        self.entries.lock().map_or(0, |e| e.attempts)
    }

    /// Records how a vote went (the last one is kept).
    pub fn vote(&self, vote: VoteRecord) {
        if let Ok(mut entries) = self.entries.lock() {
            entries.vote = Some(vote);
        }
    }

    /// The step's calls the cache answered, in the order they ended.
    pub fn cached_calls(&self) -> Vec<String> {
        self.entries
            .lock()
            .map(|e| e.cached_calls.clone())
            .unwrap_or_default()
    }

    /// What the step's calls cost; None when none was priced.
    pub fn cost(&self) -> Option<Cost> {
        self.entries.lock().ok().and_then(|e| e.cost)
    }

    pub fn last_vote(&self) -> Option<VoteRecord> {
        self.entries.lock().ok().and_then(|e| e.vote.clone())
    }

    /// Fails once the run (or a run it is nested in) is over its cost limit.
    pub fn check_budget(&self) -> Result<(), Failure> {
        self.run.check_budget()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn booking(cost: Option<f64>, cache: CacheStatus) -> Booking {
        Booking {
            usage: TokenUsage {
                prompt_tokens: 3,
                completion_tokens: 4,
                reasoning_tokens: None,
            },
            cost: cost.map(Cost::from_amount),
            cache,
            rate_limit: Pacing {
                waited: Duration::from_millis(30),
                rate_limited: 1,
            },
        }
    }

    #[test]
    fn a_call_is_booked_in_the_step_and_its_run_and_cache_answers_are_not_calls() {
        let run = Arc::new(RunLedger::new(None, None));
        let step = StepLedger::new(Arc::clone(&run));
        step.book_call("call", booking(Some(0.25), CacheStatus::Miss));
        let original = Duration::from_millis(40);
        step.book_call("vote 2", booking(None, CacheStatus::Hit { original }));
        assert_eq!(run.model_calls(), 1);
        assert_eq!(run.cost().map(Cost::amount), Some(0.25));
        assert_eq!(step.cost().map(Cost::amount), Some(0.25));
        assert_eq!(step.cached_calls(), ["vote 2"]);
        let tally = run.cache_tally();
        assert_eq!((tally.hits, tally.misses, tally.tokens_saved), (1, 1, 7));
        assert!((tally.ms_saved - 40.0).abs() < 1e-9);
    }

    #[test]
    fn a_step_s_usage_counts_every_booked_call_and_starts_afresh_once_taken() {
        let step = StepLedger::new(Arc::new(RunLedger::new(None, None)));
        step.book_call("attempt 1", booking(Some(0.25), CacheStatus::Unused));
        step.book_call("attempt 2", booking(None, CacheStatus::Unused));
        let nested = TokenUsage {
            prompt_tokens: 10,
            completion_tokens: 1,
            reasoning_tokens: None,
        };
        step.add_nested(None, nested);
        let taken = step.take_usage();
        assert_eq!((taken.prompt_tokens, taken.completion_tokens), (16, 9));
        assert_eq!(step.take_usage(), TokenUsage::default());
    }

    #[test]
    fn a_nested_run_books_into_its_parent_and_is_held_to_the_parent_s_limit() {
        let parent = Arc::new(RunLedger::new(Some(Cost::from_amount(1.0)), None));
        let nested = Arc::new(RunLedger::new(None, Some(Arc::clone(&parent))));
        let step = StepLedger::new(Arc::clone(&nested));
        step.book_call("call", booking(Some(0.75), CacheStatus::Unused));
        assert!(step.check_budget().is_ok());
        step.book_call("call", booking(Some(0.5), CacheStatus::Unused));
        assert_eq!(parent.model_calls(), 2);
        let waited = Pacing {
            waited: Duration::from_millis(60),
            rate_limited: 2,
        };
        assert_eq!((nested.rate_limit(), parent.rate_limit()), (waited, waited));
        assert_eq!(nested.cost().map(Cost::amount), Some(1.25));
        let failure = step.check_budget().expect_err("over the parent's max_cost");
        assert_eq!(failure.code, FailureCode::OrchestrationCostExceeded);
    }
}
