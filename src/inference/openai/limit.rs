//! A model's `rate_limit`, and the pace a server's refusals and headers ask of the whole model.
//!
//! One [`Limiter`] belongs to one engine, which every step, vote candidate, agent round and
//! batch row of the process shares, so the pace holds for the model, not for one caller.
//! Requests and tokens each have a GCRA bucket (`governor`) refilled at the per-minute rate:
//! the request bucket holds `burst` requests (default one second's worth, at least one), the
//! token bucket one second's worth of tokens (at least one); a request larger than the token
//! bucket takes it a bucketful at a time. A request is charged its estimated tokens before it goes; once
//! the server reports its `usage`, the difference is carried to the next request's charge (more
//! when the estimate was short, less when it was long). What a server reports is not trusted to
//! stall the model: one reply can owe at most its own estimate and a bucketful more, the model
//! owes at most a minute's tokens, and no request is charged more than a minute's tokens, so
//! no wait for the token bucket passes about a minute whatever a server claims it used. A
//! semaphore bounds the requests in flight.

//!
//! The server's own word adapts the pace, with or without a `rate_limit`: a wait it asks for
//! (`Retry-After`, `retry-after-ms`, or an exhausted `x-ratelimit-remaining-*` with its
//! `x-ratelimit-reset-*`) holds back every request of the model, not only the refused one; each
//! 429 also doubles a spacing between the model's requests (from 100 ms, at most 10 s; but for
//! a 429 saying `Retry-After: 0`, which means "now"), which every answered request shrinks by a
//! quarter until it is gone. Time spent waiting here is off
//! the step's clock (a step's `timeout` is not charged for it), and is added up, with the 429s
//! seen, for each call ([`CallPace`], in the [`PaceTally`] its maker lends it): its run's record
//! adds its calls' up. What the server asks one
//! call to wait (its holds, its 429s' spacing and backoff) is bounded by the call's
//! [`WaitBudget`] (`max_wait`, default [`DEFAULT_MAX_WAIT`]): a call the server would hold
//! past it fails at once as `INFERENCE_RATE_LIMITED`, which is transient (a batch exits 75, and
//! a scheduler runs it again later) instead of stalling the work whatever its timeouts say.

use std::future::Future;
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use governor::{DefaultDirectRateLimiter, Quota};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use tokio::sync::{Semaphore, SemaphorePermit};
use tokio::time::Instant;

use crate::core::duration::DurationSpec;
use crate::core::step_clock::StepClock;
use crate::core::{Failure, FailureCode};

/// How fast a model may be called: any subset of the four limits (none set, no limit).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RateLimit {
    /// Requests sent per minute, at most (retries included).
    #[serde(default)]
    pub requests_per_minute: Option<NonZeroU32>,
    /// Tokens per minute, at most: each request counts its prompt (estimated as characters / 4)
    /// plus its `max_tokens`, before it is sent.
    #[serde(default)]
    pub tokens_per_minute: Option<NonZeroU32>,
    /// Requests waiting for an answer at the same time, at most.
    #[serde(default)]
    pub max_in_flight: Option<NonZeroU32>,
    /// Requests that may go at once before `requests_per_minute`'s pace applies (default: one
    /// second's worth of it, at least 1), so a fresh process does not send a minute's quota at
    /// once.
    #[serde(default)]
    pub burst: Option<NonZeroU32>,
    /// The longest one call waits, over all its attempts, for what the server asks (its
    /// `Retry-After`, `retry-after-ms` or `x-ratelimit-reset-*`, the spacing and backoff its 429s
    /// impose); default 30s. A call the server would hold longer fails at once with
    /// INFERENCE_RATE_LIMITED, which is transient: a batch exits 75, for a scheduler to run it
    /// again later.
    #[serde(default)]
    pub max_wait: Option<DurationSpec>,
}

/// How long one call waits for what the server asks when the model's `rate_limit` does not say.
pub const DEFAULT_MAX_WAIT: Duration = Duration::from_secs(30);

/// What is left of one call's `max_wait`: the waits the server asks for are taken from it, and a
/// wait past what is left fails the call.
#[derive(Debug, Clone, Copy)]
pub(super) struct WaitBudget {
    most: Duration,
    left: Duration,
}

impl WaitBudget {
    pub(super) fn new(most: Duration) -> Self {
        WaitBudget { most, left: most }
    }

    /// Takes `wait` from the budget; a wait past what is left is refused with the failure that
    /// ends the call, naming `asker` (the server).
    pub(super) fn take(&mut self, wait: Duration, asker: &str) -> Result<(), Failure> {
        match self.left.checked_sub(wait) {
            Some(left) => {
                self.left = left;
                Ok(())
            }
            None => Err(Failure::new(
                FailureCode::InferenceRateLimited,
                format!(
                    "{asker} asks to wait {:.1} s more, past the {} s this call may wait for it \
                     (`rate_limit.max_wait`); giving up for now",
                    wait.as_secs_f64(),
                    self.most.as_secs_f64()
                ),
            )
            .with_help(
                "the failure is transient: a batch exits 75 for a scheduler to run it again \
                 later; raise the model's `rate_limit.max_wait` to wait longer",
            )),
        }
    }
}

/// The buckets, the in-flight bound and the model-wide pause of one engine.
#[derive(Debug)]
pub(super) struct Limiter {
    requests: Option<DefaultDirectRateLimiter>,
    /// The token bucket, how many tokens it holds, and how many a minute brings.
    tokens: Option<TokenBucket>,
    in_flight: Option<Semaphore>,
    /// Until when no request of the model may be sent (a server's `Retry-After`).
    paused_until: Mutex<Option<Instant>>,
    /// Tokens used beyond the estimates charged (negative: charged beyond what was used), for
    /// the next request's charge.
    owed: Mutex<i64>,
    /// The spacing the server's 429s impose between the model's requests.
    slowed: Mutex<Slowdown>,
    /// The most one call waits for what the server asks.
    max_wait: Duration,
}

/// A token bucket: the limiter, how many tokens it holds, and how many a minute brings.
#[derive(Debug)]
struct TokenBucket {
    bucket: DefaultDirectRateLimiter,
    capacity: NonZeroU32,
    per_minute: NonZeroU32,
}

/// A spacing between requests, and when the next may go.
#[derive(Debug, Default)]
struct Slowdown {
    spacing: Duration,
    next: Option<Instant>,
}

/// The first spacing a 429 imposes; each further 429 doubles it.
const FIRST_SPACING: Duration = Duration::from_millis(100);

/// The widest spacing 429s impose.
const MOST_SPACING: Duration = Duration::from_secs(10);

/// A spacing narrower than this is dropped.
const LEAST_SPACING: Duration = Duration::from_millis(20);

/// What models waited for their pace (their `rate_limit`, a server's `Retry-After`, a place
/// among the requests in flight) and how many 429s they were answered: one call's (its event's
/// `rate_limit_wait_ms`), a run's (in its record, as `{waited_ms, refused}`), or a batch's so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Pacing {
    #[serde(rename = "waited_ms", serialize_with = "whole_millis")]
    pub waited: Duration,
    #[serde(rename = "refused")]
    pub rate_limited: u64,
}

/// Writes a duration as whole milliseconds.
fn whole_millis<S: serde::Serializer>(waited: &Duration, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_u64(u64::try_from(waited.as_millis()).unwrap_or(u64::MAX))
}

impl Pacing {
    /// Nothing waited and nothing refused.
    pub fn is_none(&self) -> bool {
        *self == Pacing::default()
    }

    /// This and `more` together.
    pub fn and(self, more: Pacing) -> Pacing {
        Pacing {
            waited: self.waited.saturating_add(more.waited),
            rate_limited: self.rate_limited.saturating_add(more.rate_limited),
        }
    }

    /// What happened after `earlier` was taken.
    pub fn since(self, earlier: Pacing) -> Pacing {
        Pacing {
            waited: self.waited.saturating_sub(earlier.waited),
            rate_limited: self.rate_limited.saturating_sub(earlier.rate_limited),
        }
    }
}

/// What one model call waited for its model's pace and the 429s it was answered, over all its
/// attempts: lent to the engine in the call's context, and read by whoever made the call once it
/// ends, whether it answered or failed (a call refused until its retries or its `max_wait` are
/// spent waited too). Clones share one tally.
#[derive(Debug, Clone, Default)]
pub struct PaceTally(Arc<Mutex<Pacing>>);

impl PaceTally {
    /// What the call has waited and been refused so far.
    pub fn get(&self) -> Pacing {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn add(&self, more: Pacing) {
        let mut so_far = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        *so_far = so_far.and(more);
    }
}

impl PartialEq for PaceTally {
    /// The same call's tally.
    fn eq(&self, other: &PaceTally) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

/// One model call's part in its model's pace: the clock of the step making it, which waiting for
/// the pace is off, and the tally of what the call has waited for the pace and the 429s it was
/// answered so far (over all its attempts).
pub(super) struct CallPace {
    clock: StepClock,
    tally: PaceTally,
}

impl CallPace {
    /// A call made on `clock`, tallying its waits and 429s in `tally`.
    pub(super) fn new(clock: StepClock, tally: PaceTally) -> Self {
        CallPace { clock, tally }
    }

    /// What the call has waited and been refused so far.
    pub(super) fn so_far(&self) -> Pacing {
        self.tally.get()
    }

    /// Awaits `wait`, a wait for the model's pace: off the step's clock, and added to the
    /// call's time waited when it took a millisecond or more (a request that went at once did
    /// not wait).
    async fn paced<F: Future>(&mut self, wait: F) -> F::Output {
        let started = Instant::now();
        let output = self.clock.off(wait).await;
        let waited = started.elapsed();
        if waited >= Duration::from_millis(1) {
            self.tally.add(Pacing {
                waited,
                rate_limited: 0,
            });
        }
        output
    }
}

impl Limiter {
    pub(super) fn new(limit: &RateLimit) -> Self {
        let requests = limit.requests_per_minute.map(|per_minute| {
            let burst = limit.burst.unwrap_or_else(|| one_second_of(per_minute));
            DefaultDirectRateLimiter::direct(Quota::per_minute(per_minute).allow_burst(burst))
        });
        let tokens = limit.tokens_per_minute.map(|per_minute| {
            let capacity = one_second_of(per_minute);
            let bucket = DefaultDirectRateLimiter::direct(
                Quota::per_minute(per_minute).allow_burst(capacity),
            );
            TokenBucket {
                bucket,
                capacity,
                per_minute,
            }
        });
        let in_flight = limit
            .max_in_flight
            .map(|most| Semaphore::new(usize::try_from(most.get()).unwrap_or(usize::MAX)));
        Limiter {
            requests,
            tokens,
            in_flight,
            paused_until: Mutex::new(None),
            owed: Mutex::new(0),
            slowed: Mutex::new(Slowdown::default()),
            max_wait: limit.max_wait.map_or(DEFAULT_MAX_WAIT, DurationSpec::get),
        }
    }

    /// A fresh budget for one call's waits for the server.
    pub(super) fn budget(&self) -> WaitBudget {
        WaitBudget::new(self.max_wait)
    }

    /// Waits for a place among the requests in flight for `call`; the place is held until the
    /// permit drops (the whole call: its retries and reading its answer).
    pub(super) async fn in_flight(&self, call: &mut CallPace) -> Option<SemaphorePermit<'_>> {
        let semaphore = self.in_flight.as_ref()?;
        // The semaphore is never closed, so acquiring only fails if it were.
        call.paced(semaphore.acquire()).await.ok()
    }

    /// Waits until the model may send one more request of `call` of about `tokens` tokens: past
    /// any pause and the spacing 429s imposed (taken from `budget`: a wait past it fails the
    /// call, naming `server`), then for a request and its tokens (with what earlier estimates
    /// owe) from the buckets.
    pub(super) async fn admit(
        &self,
        tokens: u32,
        call: &mut CallPace,
        budget: &mut WaitBudget,
        server: &str,
    ) -> Result<(), Failure> {
        call.paced(async {
            while let Some(until) = self.pause() {
                budget.take(until.saturating_duration_since(Instant::now()), server)?;
                tokio::time::sleep_until(until).await;
            }
            if let Some(at) = self.next_slot() {
                budget.take(at.saturating_duration_since(Instant::now()), server)?;
                tokio::time::sleep_until(at).await;
            }
            if let Some(bucket) = &self.requests {
                bucket.until_ready().await;
            }
            if let Some(tokens_bucket) = &self.tokens {
                let capacity = tokens_bucket.capacity;
                // A charge larger than the bucket is taken a bucketful at a time.
                let mut left = self.charge(tokens, tokens_bucket);
                while left > 0 {
                    let taken = left.min(u64::from(capacity.get()));
                    let wanted = u32::try_from(taken).map_or(capacity, |taken| {
                        NonZeroU32::new(taken).unwrap_or(NonZeroU32::MIN)
                    });
                    // `wanted` is at most the bucket's capacity, which is the only refusal.
                    let _ = tokens_bucket.bucket.until_n_ready(wanted).await;
                    left = left.saturating_sub(taken);
                }
            }
            Ok(())
        })
        .await
    }

    /// Waits out `wait` before a request of `call` is tried again: a wait for the pace, taken
    /// from `budget`, when the server refused for its rate limit (a wait past the budget fails
    /// the call, naming `server`).
    pub(super) async fn wait_to_retry(
        &self,
        wait: Duration,
        rate_limited: bool,
        call: &mut CallPace,
        budget: &mut WaitBudget,
        server: &str,
    ) -> Result<(), Failure> {
        if rate_limited {
            budget.take(wait, server)?;
            call.paced(tokio::time::sleep(wait)).await;
        } else {
            tokio::time::sleep(wait).await;
        }
        Ok(())
    }

    /// What to take from the token bucket for a request estimated at `tokens`: the estimate
    /// with what earlier ones owe, less what they were overcharged (a credit kept up to one
    /// bucket's capacity), at least one token and at most a minute's (a request larger than the
    /// quota cannot be held to it; what it owes beyond a minute's tokens is forgiven).
    fn charge(&self, tokens: u32, bucket: &TokenBucket) -> u64 {
        let mut owed = self.owed.lock().unwrap_or_else(PoisonError::into_inner);
        let wanted = i64::from(tokens).saturating_add(*owed);
        let charged = wanted.clamp(1, i64::from(bucket.per_minute.get()));
        *owed = wanted
            .saturating_sub(charged)
            .clamp(i64::from(bucket.capacity.get()).saturating_neg(), 0);
        u64::try_from(charged).unwrap_or(1)
    }

    /// Carries the difference between a request's estimate and what the server says it used to
    /// the next charge. A server's count is not trusted to stall the model: one reply owes at
    /// most its estimate and a bucketful beyond it, and the model at most a minute's tokens.
    pub(super) fn used(&self, estimated: u32, used: u64) {
        let Some(bucket) = &self.tokens else {
            return;
        };
        let estimated = i64::from(estimated);
        let most = estimated
            .saturating_mul(2)
            .saturating_add(i64::from(bucket.capacity.get()));
        let used = i64::try_from(used).unwrap_or(i64::MAX).min(most);
        let mut owed = self.owed.lock().unwrap_or_else(PoisonError::into_inner);
        *owed = owed
            .saturating_add(used)
            .saturating_sub(estimated)
            .min(i64::from(bucket.per_minute.get()));
    }

    /// A 429 answered to `call`: counted, and the model's requests spaced out twice as far as
    /// before. The wait the server asked for (`retry_after`) the caller holds the model for; it
    /// does not bound the spacing, since a server whose quota is a sliding window says "in a
    /// second" for as long as the window is full, but one saying `Retry-After: 0` means "now",
    /// not "slower", and leaves the spacing as it was.
    pub(super) fn refused(&self, retry_after: Option<Duration>, call: &mut CallPace) {
        call.tally.add(Pacing {
            waited: Duration::ZERO,
            rate_limited: 1,
        });
        if retry_after.is_some_and(|wait| wait.is_zero()) {
            return;
        }
        let mut slowed = self.slowed.lock().unwrap_or_else(PoisonError::into_inner);
        slowed.spacing = slowed
            .spacing
            .saturating_mul(2)
            .clamp(FIRST_SPACING, MOST_SPACING);
    }

    /// An answered request: the spacing 429s imposed shrinks by a quarter, and goes below the
    /// least.
    pub(super) fn answered(&self) {
        let mut slowed = self.slowed.lock().unwrap_or_else(PoisonError::into_inner);
        if slowed.spacing.is_zero() {
            return;
        }
        slowed.spacing = slowed.spacing.mul_f64(0.75);
        if slowed.spacing < LEAST_SPACING {
            slowed.spacing = Duration::ZERO;
            slowed.next = None;
        }
    }

    /// When the next request may go under the spacing 429s imposed (None: now), the one after
    /// a spacing later.
    fn next_slot(&self) -> Option<Instant> {
        let mut slowed = self.slowed.lock().unwrap_or_else(PoisonError::into_inner);
        if slowed.spacing.is_zero() {
            return None;
        }
        let now = Instant::now();
        let at = slowed.next.map_or(now, |next| next.max(now));
        slowed.next = at.checked_add(slowed.spacing);
        Some(at)
    }

    /// Holds every request of the model back for `wait` (or longer, if a pause already runs).
    pub(super) fn hold(&self, wait: Duration) {
        let until = Instant::now().checked_add(wait);
        let mut paused = self
            .paused_until
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if until > *paused {
            *paused = until;
        }
    }

    /// The end of the pause now running, if one is.
    fn pause(&self) -> Option<Instant> {
        let paused = *self
            .paused_until
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        paused.filter(|until| *until > Instant::now())
    }
}

/// One second's worth of a per-minute rate, at least one.
fn one_second_of(per_minute: NonZeroU32) -> NonZeroU32 {
    NonZeroU32::new(per_minute.get() / 60).unwrap_or(NonZeroU32::MIN)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The pace of a call that no step's clock times.
    fn pace() -> CallPace {
        CallPace::new(StepClock::default(), PaceTally::default())
    }

    /// Admits one request of `tokens` for `call`, within a budget too large to run out.
    async fn admit(limiter: &Limiter, tokens: u32, call: &mut CallPace) {
        let mut budget = WaitBudget::new(Duration::from_secs(3600));
        limiter
            .admit(tokens, call, &mut budget, "the server")
            .await
            .expect("within the budget");
    }

    fn limit(requests_per_minute: u32, burst: Option<u32>) -> RateLimit {
        RateLimit {
            requests_per_minute: NonZeroU32::new(requests_per_minute),
            burst: burst.and_then(NonZeroU32::new),
            ..RateLimit::default()
        }
    }

    #[test]
    fn the_default_burst_is_one_second_of_the_rate() {
        let limiter = Limiter::new(&limit(120, None));
        let bucket = limiter.requests.as_ref().expect("a request bucket");
        assert!(bucket.check().is_ok());
        assert!(bucket.check().is_ok());
        assert!(
            bucket.check().is_err(),
            "a third request within a second waits"
        );
    }

    #[test]
    fn a_slow_rate_still_lets_one_request_through() {
        let limiter = Limiter::new(&limit(30, None));
        let bucket = limiter.requests.as_ref().expect("a request bucket");
        assert!(bucket.check().is_ok());
        assert!(bucket.check().is_err());
    }

    #[test]
    fn an_explicit_burst_replaces_the_default() {
        let limiter = Limiter::new(&limit(60, Some(5)));
        let bucket = limiter.requests.as_ref().expect("a request bucket");
        assert_eq!((0..10).filter(|_| bucket.check().is_ok()).count(), 5);
    }

    #[tokio::test(start_paused = true)]
    async fn a_hold_delays_every_later_request() {
        let limiter = Limiter::new(&RateLimit::default());
        limiter.hold(Duration::from_secs(3));
        limiter.hold(Duration::from_secs(1));
        let started = Instant::now();
        admit(&limiter, 10, &mut pace()).await;
        assert_eq!(started.elapsed().as_secs(), 3, "the longer hold wins");
    }

    #[tokio::test(start_paused = true)]
    async fn waiting_for_the_pace_is_off_the_step_s_clock() {
        let limiter = Limiter::new(&RateLimit::default());
        limiter.hold(Duration::from_secs(5));
        let clock = StepClock::for_attempt();
        let tally = PaceTally::default();
        let mut call = CallPace::new(clock.clone(), tally.clone());
        let admitted = clock
            .bound(Duration::from_secs(1), admit(&limiter, 1, &mut call))
            .await;
        assert!(admitted.is_some(), "a 1 s step timeout outlasts a 5 s wait");
        assert!(
            tally.get().waited >= Duration::from_secs(5),
            "the maker's tally has it"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_call_tallies_its_own_waits_and_429s_only() {
        let limiter = Limiter::new(&RateLimit::default());
        limiter.refused(None, &mut pace());
        let mut call = pace();
        limiter.hold(Duration::from_secs(2));
        admit(&limiter, 1, &mut call).await;
        limiter.refused(None, &mut call);
        let mut budget = limiter.budget();
        limiter
            .wait_to_retry(
                Duration::from_secs(1),
                true,
                &mut call,
                &mut budget,
                "the server",
            )
            .await
            .expect("within the budget");
        let call = call.so_far();
        assert_eq!(
            call.rate_limited, 1,
            "the 429 before the call is not its own"
        );
        assert!(call.waited >= Duration::from_secs(3), "{call:?}");
        assert!(pace().so_far().is_none());
    }

    #[tokio::test]
    async fn in_flight_is_bounded() {
        let limit = RateLimit {
            max_in_flight: NonZeroU32::new(1),
            ..RateLimit::default()
        };
        let limiter = Limiter::new(&limit);
        let first = limiter.in_flight(&mut pace()).await;
        assert!(first.is_some());
        assert_eq!(
            limiter.in_flight.as_ref().map(Semaphore::available_permits),
            Some(0)
        );
        drop(first);
        assert_eq!(
            limiter.in_flight.as_ref().map(Semaphore::available_permits),
            Some(1)
        );
    }

    #[tokio::test]
    async fn a_request_larger_than_the_token_bucket_takes_a_bucketful_at_a_time() {
        let limit = RateLimit {
            tokens_per_minute: NonZeroU32::new(600),
            ..RateLimit::default()
        };
        let limiter = Limiter::new(&limit);
        let started = std::time::Instant::now();
        admit(&limiter, 12, &mut pace()).await;
        let tokens = limiter.tokens.as_ref().expect("a token bucket");
        let (bucket, capacity) = (&tokens.bucket, tokens.capacity);
        assert_eq!(capacity.get(), 10, "one second of 600 a minute");
        assert!(
            started.elapsed() >= Duration::from_millis(150),
            "the 2 tokens past the full bucket take 0.2 s to come"
        );
        assert!(bucket.check().is_err(), "the bucket is empty");
    }

    #[test]
    fn usage_corrects_the_next_charge() {
        let limit = RateLimit {
            tokens_per_minute: NonZeroU32::new(6000),
            ..RateLimit::default()
        };
        let limiter = Limiter::new(&limit);
        let charge = |tokens| {
            let bucket = limiter.tokens.as_ref().expect("a token bucket");
            limiter.charge(tokens, bucket)
        };
        assert_eq!(charge(30), 30);
        limiter.used(30, 50);
        assert_eq!(charge(30), 50, "20 short the last time");
        limiter.used(30, 0);
        assert_eq!(charge(40), 10, "30 long the last time");
        limiter.used(200, 500);
        assert_eq!(charge(10), 310, "paid in full, a bucketful at a time");
        assert_eq!(charge(0), 1, "at least one token");
        limiter.used(10_000, 0);
        // A credit of at most a bucket: 100 left after the first charge, then 51, then 2.
        let charges: Vec<u64> = (0..4).map(|_| charge(50)).collect();
        assert_eq!(charges, [1, 1, 1, 48]);
    }

    /// A server that says one reply used 2^64-1 tokens does not stall the model: the reply owes
    /// at most its estimate and a bucketful more, the model at most a minute's tokens, and no
    /// charge passes a minute's tokens.
    #[test]
    fn a_server_s_usage_cannot_put_the_model_in_debt_for_long() {
        let limit = RateLimit {
            tokens_per_minute: NonZeroU32::new(6000),
            ..RateLimit::default()
        };
        let limiter = Limiter::new(&limit);
        let bucket = limiter.tokens.as_ref().expect("a token bucket");
        limiter.used(10, u64::MAX);
        assert_eq!(limiter.charge(10, bucket), 10 + 10 + 100);
        for _ in 0..1000 {
            limiter.used(4000, u64::MAX);
        }
        assert_eq!(limiter.charge(0, bucket), 6000, "a minute's tokens at most");
        assert_eq!(limiter.charge(0, bucket), 1, "the rest is forgiven");
        assert_eq!(limiter.charge(u32::MAX, bucket), 6000);
    }

    /// Waits the server asks for are taken from the call's budget: one past what is left fails
    /// the call at once, as a transient rate limit naming `max_wait`.
    #[tokio::test(start_paused = true)]
    async fn a_hold_past_the_budget_fails_the_call_at_once() {
        let limit = RateLimit {
            max_wait: Some(DurationSpec::parse("5s").expect("a duration")),
            ..RateLimit::default()
        };
        let limiter = Limiter::new(&limit);
        let mut budget = limiter.budget();
        limiter.hold(Duration::from_secs(3));
        let started = Instant::now();
        limiter
            .admit(1, &mut pace(), &mut budget, "the server")
            .await
            .expect("3 s of 5");
        limiter.hold(Duration::from_secs(3));
        let refused = limiter
            .admit(1, &mut pace(), &mut budget, "the server")
            .await
            .expect_err("3 s more is past the 2 s left");
        assert_eq!(started.elapsed(), Duration::from_secs(3), "it did not wait");
        assert_eq!(refused.code, FailureCode::InferenceRateLimited);
        assert!(refused.transient());
        assert!(refused.message.contains("max_wait"), "{}", refused.message);
        let mut fresh = limiter.budget();
        let retried = limiter
            .wait_to_retry(
                Duration::from_secs(6),
                true,
                &mut pace(),
                &mut fresh,
                "the server",
            )
            .await;
        assert!(retried.is_err(), "a retry's wait counts too");
        assert_eq!(
            Limiter::new(&RateLimit::default()).max_wait,
            DEFAULT_MAX_WAIT
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_429_spaces_the_requests_out_until_answers_come_back() {
        let limiter = Limiter::new(&RateLimit::default());
        limiter.refused(None, &mut pace());
        limiter.refused(None, &mut pace());
        let started = Instant::now();
        for _ in 0..3 {
            admit(&limiter, 1, &mut pace()).await;
        }
        assert_eq!(
            started.elapsed(),
            Duration::from_millis(400),
            "one at once, then one each 200 ms"
        );
        for _ in 0..9 {
            limiter.answered();
        }
        assert!(limiter.next_slot().is_none(), "back to full speed");
    }

    /// 429s saying `Retry-After: 1` widen the spacing past that second (a full sliding window
    /// keeps saying it), up to the widest; 429s saying `Retry-After: 0` leave it as it was.
    #[tokio::test(start_paused = true)]
    async fn a_429_saying_now_leaves_the_spacing_alone() {
        let limiter = Limiter::new(&RateLimit::default());
        for _ in 0..10 {
            limiter.refused(Some(Duration::from_secs(1)), &mut pace());
        }
        let started = Instant::now();
        for _ in 0..3 {
            admit(&limiter, 1, &mut pace()).await;
        }
        assert_eq!(started.elapsed(), MOST_SPACING * 2);
        let now = Limiter::new(&RateLimit::default());
        for _ in 0..10 {
            now.refused(Some(Duration::ZERO), &mut pace());
        }
        assert!(now.next_slot().is_none(), "`Retry-After: 0` means now");
    }

    #[test]
    fn no_limit_builds_no_bucket() {
        let limiter = Limiter::new(&RateLimit::default());
        assert!(
            limiter.requests.is_none() && limiter.tokens.is_none() && limiter.in_flight.is_none()
        );
    }
}
