//! The clock a step's timeout runs on: wall time less the time spent waiting for a model to load.
//!
//! A local model loads once per process, on first use (and is pulled first on a fresh machine),
//! so without this the first step to call it would be charged seconds of loading that no later
//! step pays, and a `timeout` sized for answering would fail the first run only. The executor
//! gives each attempt of a step with a timeout a clock of its own and bounds the attempt with
//! [`StepClock::bound`]; the attempt's model calls carry the clock to their engine (in the
//! request's call context), and an engine that waits for a load wraps the wait in
//! [`StepClock::off`]. The clock is passed, not looked up, so neither layer knows the other; a
//! wait on the clock of no step (the default: `serve` warming up, a benchmark, a step without a
//! timeout) is simply not counted anywhere.

use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

/// The clock of one attempt of a step, shared by the model calls it makes; the default is the
/// clock of no step, on which waits are just awaited.
#[derive(Debug, Clone, Default)]
pub struct StepClock(Option<Arc<Mutex<Stopped>>>);

impl PartialEq for StepClock {
    /// The same attempt's clock (or both no step's).
    fn eq(&self, other: &StepClock) -> bool {
        match (&self.0, &other.0) {
            (Some(one), Some(other)) => Arc::ptr_eq(one, other),
            (one, other) => one.is_none() && other.is_none(),
        }
    }
}

/// The time an attempt has spent off the clock so far.
#[derive(Debug, Default)]
struct Stopped {
    /// Finished waits, added up.
    total: Duration,
    /// Since when the clock has been stopped, while `waits` > 0.
    since: Option<Instant>,
    /// Waits in progress (several requests of one step can wait for the same load).
    waits: usize,
}

impl Stopped {
    fn stop(&mut self) {
        if self.waits == 0 {
            self.since = Some(Instant::now());
        }
        self.waits += 1;
    }

    fn restart(&mut self) {
        self.waits = self.waits.saturating_sub(1);
        if self.waits == 0
            && let Some(since) = self.since.take()
        {
            self.total += since.elapsed();
        }
    }

    /// Everything spent off the clock up to now, the wait in progress included.
    fn so_far(&self) -> Duration {
        self.total + self.since.map_or(Duration::ZERO, |since| since.elapsed())
    }
}

/// Restarts the clock when the wait ends, however it ends (a cancelled step drops it mid-wait).
struct Restart(Option<Arc<Mutex<Stopped>>>);

impl Drop for Restart {
    fn drop(&mut self) {
        if let Some(clock) = &self.0 {
            clock
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .restart();
        }
    }
}

impl StepClock {
    /// The clock of an attempt, nothing yet spent off it.
    pub fn for_attempt() -> StepClock {
        StepClock(Some(Arc::default()))
    }

    /// Awaits `wait` (a model load) with this clock stopped.
    pub async fn off<F: Future>(&self, wait: F) -> F::Output {
        let clock = self.0.clone();
        if let Some(clock) = &clock {
            clock.lock().unwrap_or_else(PoisonError::into_inner).stop();
        }
        let _restart = Restart(clock);
        wait.await
    }

    /// Runs `attempt` (whose calls carry this clock), giving up once it has run `limit` on the
    /// clock: None when it ran past it.
    pub async fn bound<F: Future>(&self, limit: Duration, attempt: F) -> Option<F::Output> {
        let started = Instant::now();
        tokio::pin!(attempt);
        loop {
            let stopped = self.0.as_ref().map_or(Duration::ZERO, |clock| {
                clock
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .so_far()
            });
            let charged = started.elapsed().saturating_sub(stopped);
            let left = limit.saturating_sub(charged);
            if left.is_zero() {
                return None;
            }
            tokio::select! {
                output = &mut attempt => return Some(output),
                () = tokio::time::sleep(left) => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use tokio::time::sleep;

    use super::*;

    const SECOND: Duration = Duration::from_secs(1);

    #[tokio::test(start_paused = true)]
    async fn time_waiting_for_a_load_is_not_charged() {
        let (clock, started) = (StepClock::for_attempt(), Instant::now());
        let answer = clock
            .bound(2 * SECOND, async {
                clock.off(sleep(5 * SECOND)).await;
                sleep(SECOND).await;
                "answer"
            })
            .await;
        assert_eq!(answer, Some("answer"));
        assert_eq!(started.elapsed(), 6 * SECOND);
    }

    #[tokio::test(start_paused = true)]
    async fn the_rest_of_the_attempt_is_charged() {
        let (clock, started) = (StepClock::for_attempt(), Instant::now());
        let answer = clock
            .bound(2 * SECOND, async {
                clock.off(sleep(5 * SECOND)).await;
                sleep(3 * SECOND).await;
            })
            .await;
        assert_eq!(answer, None);
        // 5 s loading, then the full 2 s of the limit.
        assert_eq!(started.elapsed(), 7 * SECOND);
    }

    #[tokio::test(start_paused = true)]
    async fn overlapping_waits_stop_the_clock_once() {
        let (clock, started) = (StepClock::for_attempt(), Instant::now());
        let answer = clock
            .bound(2 * SECOND, async {
                sleep(SECOND).await;
                tokio::join!(
                    clock.off(sleep(4 * SECOND)),
                    clock.off(async {
                        sleep(SECOND).await;
                        clock.off(sleep(SECOND)).await;
                    }),
                );
                sleep(2 * SECOND).await;
            })
            .await;
        // 1 s charged before the waits, 4 s off the clock, then 1 more charged second runs out.
        assert_eq!(answer, None);
        assert_eq!(started.elapsed(), 6 * SECOND);
    }

    #[tokio::test(start_paused = true)]
    async fn a_wait_outside_any_step_is_just_awaited() {
        let (clock, started) = (StepClock::default(), Instant::now());
        clock.off(sleep(3 * SECOND)).await;
        assert_eq!(started.elapsed(), 3 * SECOND);
        let answer = clock.bound(2 * SECOND, clock.off(sleep(3 * SECOND))).await;
        assert_eq!(answer, None, "no step's clock never stops");
    }

    #[tokio::test(start_paused = true)]
    async fn another_attempt_s_wait_is_charged() {
        let (clock, other) = (StepClock::for_attempt(), StepClock::for_attempt());
        assert_eq!(clock, clock.clone());
        assert_ne!(clock, other);
        let answer = clock.bound(2 * SECOND, other.off(sleep(3 * SECOND))).await;
        assert_eq!(answer, None);
    }
}
