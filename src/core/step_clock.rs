//! The clock a step's timeout runs on: wall time less the time spent waiting for a model to load.
//!
//! A local model loads once per process, on first use (and is pulled first on a fresh machine),
//! so without this the first step to call it would be charged seconds of loading that no later
//! step pays, and a `timeout` sized for answering would fail the first run only. The executor
//! bounds each attempt with [`timeout`]; the engine that loads wraps its wait in
//! [`off_the_clock`]. The two meet through a task-local, so neither layer knows the other; a wait
//! outside any step (`serve` warming up, a benchmark) is simply not counted anywhere.

use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

tokio::task_local! {
    static CLOCK: Arc<Mutex<Stopped>>;
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

/// Awaits `wait` (a model load) with the calling step's clock stopped.
pub async fn off_the_clock<F: Future>(wait: F) -> F::Output {
    let clock = CLOCK.try_with(Arc::clone).ok();
    if let Some(clock) = &clock {
        clock.lock().unwrap_or_else(PoisonError::into_inner).stop();
    }
    let _restart = Restart(clock);
    wait.await
}

/// Runs `attempt`, giving up once it has run `limit` on the clock: None when it ran past it.
pub async fn timeout<F: Future>(limit: Duration, attempt: F) -> Option<F::Output> {
    let clock = Arc::new(Mutex::new(Stopped::default()));
    let started = Instant::now();
    let attempt = CLOCK.scope(Arc::clone(&clock), attempt);
    tokio::pin!(attempt);
    loop {
        let stopped = clock
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .so_far();
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

#[cfg(test)]
mod tests {
    use tokio::time::sleep;

    use super::*;

    const SECOND: Duration = Duration::from_secs(1);

    #[tokio::test(start_paused = true)]
    async fn time_waiting_for_a_load_is_not_charged() {
        let started = Instant::now();
        let answer = timeout(2 * SECOND, async {
            off_the_clock(sleep(5 * SECOND)).await;
            sleep(SECOND).await;
            "answer"
        })
        .await;
        assert_eq!(answer, Some("answer"));
        assert_eq!(started.elapsed(), 6 * SECOND);
    }

    #[tokio::test(start_paused = true)]
    async fn the_rest_of_the_attempt_is_charged() {
        let started = Instant::now();
        let answer = timeout(2 * SECOND, async {
            off_the_clock(sleep(5 * SECOND)).await;
            sleep(3 * SECOND).await;
        })
        .await;
        assert_eq!(answer, None);
        // 5 s loading, then the full 2 s of the limit.
        assert_eq!(started.elapsed(), 7 * SECOND);
    }

    #[tokio::test(start_paused = true)]
    async fn overlapping_waits_stop_the_clock_once() {
        let started = Instant::now();
        let answer = timeout(2 * SECOND, async {
            sleep(SECOND).await;
            tokio::join!(
                off_the_clock(sleep(4 * SECOND)),
                off_the_clock(async {
                    sleep(SECOND).await;
                    off_the_clock(sleep(SECOND)).await;
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
        let started = Instant::now();
        off_the_clock(sleep(3 * SECOND)).await;
        assert_eq!(started.elapsed(), 3 * SECOND);
    }
}
