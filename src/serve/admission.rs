//! Admission: at most `max_concurrent` runs at once and at most `queue` requests waiting for a
//! turn; a request beyond both is refused at once (the server answers 429 with `Retry-After`)
//! rather than held, so an overloaded server stays responsive and its memory bounded.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The run slots and the queue in front of them.
pub struct Admission {
    slots: Arc<Semaphore>,
    max_concurrent: usize,
    queue: usize,
    waiting: AtomicUsize,
}

/// Every slot is taken and the queue is full.
#[derive(Debug, PartialEq, Eq)]
pub struct Full;

/// Leaves the queue when dropped: a request whose client went away while it waited.
struct InQueue<'a>(&'a AtomicUsize);

impl Drop for InQueue<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Admission {
    pub fn new(max_concurrent: usize, queue: usize) -> Self {
        let max_concurrent = max_concurrent.max(1);
        Admission {
            slots: Arc::new(Semaphore::new(max_concurrent)),
            max_concurrent,
            queue,
            waiting: AtomicUsize::new(0),
        }
    }

    /// A run slot: at once when one is free, after waiting in the queue when there is room in
    /// it, else [`Full`]. The slot is freed when the permit is dropped.
    pub async fn enter(&self) -> Result<OwnedSemaphorePermit, Full> {
        if let Ok(permit) = Arc::clone(&self.slots).try_acquire_owned() {
            return Ok(permit);
        }
        self.waiting
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |waiting| {
                (waiting < self.queue).then_some(waiting.saturating_add(1))
            })
            .map_err(|_| Full)?;
        let _in_queue = InQueue(&self.waiting);
        Arc::clone(&self.slots)
            .acquire_owned()
            .await
            .map_err(|_| Full)
    }

    /// Requests waiting for a slot.
    pub fn waiting(&self) -> usize {
        self.waiting.load(Ordering::SeqCst)
    }

    /// Runs holding a slot.
    pub fn running(&self) -> usize {
        self.max_concurrent
            .saturating_sub(self.slots.available_permits())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn requests_beyond_the_slots_wait_in_the_queue_and_beyond_it_are_refused() {
        let admission = Arc::new(Admission::new(1, 1));
        let first = admission.enter().await.expect("a free slot");
        let queued = tokio::spawn({
            let admission = Arc::clone(&admission);
            async move { admission.enter().await.map(drop) }
        });
        while admission.waiting() == 0 {
            tokio::task::yield_now().await;
        }
        assert_eq!((admission.running(), admission.waiting()), (1, 1));
        assert_eq!(admission.enter().await.map(drop), Err(Full));
        drop(first);
        assert_eq!(queued.await.expect("joined"), Ok(()));
        assert_eq!((admission.running(), admission.waiting()), (0, 0));
    }

    #[tokio::test]
    async fn a_request_that_stops_waiting_leaves_the_queue() {
        let admission = Admission::new(1, 1);
        let _first = admission.enter().await.expect("a free slot");
        let waiting = admission.enter();
        let gave_up = tokio::time::timeout(std::time::Duration::from_millis(1), waiting).await;
        assert!(gave_up.is_err());
        assert_eq!(admission.waiting(), 0);
    }
}
