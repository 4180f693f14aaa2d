//! A model's `rate_limit`, and the pause a server's `Retry-After` asks of the whole model.
//!
//! One [`Limiter`] belongs to one engine, which every step, vote candidate, agent round and
//! batch row of the process shares, so the pace holds for the model, not for one caller.
//! Requests and tokens each have a GCRA bucket (`governor`) refilled at the per-minute rate:
//! the request bucket holds `burst` requests (default one second's worth, at least one), the
//! token bucket one second's worth of tokens (at least one); a request larger than the token
//! bucket waits for a full one. A semaphore bounds the requests in flight. When a server
//! refuses with a `Retry-After`, every request of the model waits it out, not only the refused
//! one: the others would be refused too.

use std::num::NonZeroU32;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use governor::{DefaultDirectRateLimiter, Quota};
use schemars::JsonSchema;
use serde::Deserialize;
use tokio::sync::{Semaphore, SemaphorePermit};
use tokio::time::Instant;

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
}

/// The buckets, the in-flight bound and the model-wide pause of one engine.
#[derive(Debug)]
pub(super) struct Limiter {
    requests: Option<DefaultDirectRateLimiter>,
    /// The token bucket and how many tokens it holds.
    tokens: Option<(DefaultDirectRateLimiter, NonZeroU32)>,
    in_flight: Option<Semaphore>,
    /// Until when no request of the model may be sent (a server's `Retry-After`).
    paused_until: Mutex<Option<Instant>>,
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
            (bucket, capacity)
        });
        let in_flight = limit
            .max_in_flight
            .map(|most| Semaphore::new(usize::try_from(most.get()).unwrap_or(usize::MAX)));
        Limiter {
            requests,
            tokens,
            in_flight,
            paused_until: Mutex::new(None),
        }
    }

    /// Waits for a place among the requests in flight; the place is held until the permit drops
    /// (the whole call: its retries and reading its answer).
    pub(super) async fn in_flight(&self) -> Option<SemaphorePermit<'_>> {
        // The semaphore is never closed, so acquiring only fails if it were.
        self.in_flight.as_ref()?.acquire().await.ok()
    }

    /// Waits until the model may send one more request of about `tokens` tokens: past any pause,
    /// then for a request and its tokens from the buckets.
    pub(super) async fn admit(&self, tokens: u32) {
        while let Some(until) = self.pause() {
            tokio::time::sleep_until(until).await;
        }
        if let Some(bucket) = &self.requests {
            bucket.until_ready().await;
        }
        if let Some((bucket, capacity)) = &self.tokens {
            let wanted = NonZeroU32::new(tokens.min(capacity.get())).unwrap_or(NonZeroU32::MIN);
            // `wanted` is at most the bucket's capacity, which is the only refusal.
            let _ = bucket.until_n_ready(wanted).await;
        }
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
        limiter.admit(10).await;
        assert_eq!(started.elapsed().as_secs(), 3, "the longer hold wins");
    }

    #[tokio::test]
    async fn in_flight_is_bounded() {
        let limit = RateLimit {
            max_in_flight: NonZeroU32::new(1),
            ..RateLimit::default()
        };
        let limiter = Limiter::new(&limit);
        let first = limiter.in_flight().await;
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
    async fn a_request_larger_than_the_token_bucket_takes_all_of_it() {
        let limit = RateLimit {
            tokens_per_minute: NonZeroU32::new(600),
            ..RateLimit::default()
        };
        let limiter = Limiter::new(&limit);
        limiter.admit(25).await;
        let (bucket, capacity) = limiter.tokens.as_ref().expect("a token bucket");
        assert_eq!(capacity.get(), 10, "one second of 600 a minute");
        assert!(bucket.check().is_err(), "the bucket is empty");
    }

    #[test]
    fn no_limit_builds_no_bucket() {
        let limiter = Limiter::new(&RateLimit::default());
        assert!(
            limiter.requests.is_none() && limiter.tokens.is_none() && limiter.in_flight.is_none()
        );
    }
}
