//! Sending finished spans to the collector without ever holding up a run: a bounded queue the
//! sink pushes to (a full queue drops the span and counts it), and a task on a thread of its own
//! that sends what has queued in batches, each request bounded by the exporter's timeout. A span
//! is queued already encoded (`wire.rs`), so a request is its spans' bytes in one envelope.
//!
//! Pushing a span wakes nobody: the task is woken when a full batch is waiting, when the queue
//! closes, or when the schedule delay has passed, so a batch job making 200,000 spans a second
//! costs a few hundred wake-ups, not one a span. Closing waits a bounded time for the queue to
//! drain; every span not confirmed by the collector — refused, timed out, unreachable, still
//! queued when time ran out — counts as dropped.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;

use super::wire::{self, Envelope};

/// How the export task queues, batches and sends; each has its `OTEL_BSP_*` or
/// `OTEL_EXPORTER_OTLP_*` variable.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Limits {
    /// Most spans waiting to be sent (`OTEL_BSP_MAX_QUEUE_SIZE`): a batch job's rows end faster
    /// than a collector answers, so more than the specification's 2048 (at most some 30 MiB of
    /// spans when the collector falls behind).
    pub max_queue: usize,
    /// Most spans one request sends (`OTEL_BSP_MAX_EXPORT_BATCH_SIZE`).
    pub max_batch: usize,
    /// Longest a span waits for others to fill its request (`OTEL_BSP_SCHEDULE_DELAY`): without
    /// it, a busy batch job sends a request every few spans, each costing both ends a round trip.
    pub delay: Duration,
    /// Longest one request may take (`OTEL_EXPORTER_OTLP_TIMEOUT`).
    pub timeout: Duration,
}

impl Default for Limits {
    /// The specification's defaults, but for the queue (see [`Limits::max_queue`]).
    fn default() -> Limits {
        Limits {
            max_queue: 32768,
            max_batch: 512,
            delay: Duration::from_secs(5),
            timeout: Duration::from_secs(10),
        }
    }
}

/// How many spans went where.
#[derive(Debug, Default)]
pub struct Counts {
    /// Spans handed to the queue (accepted or not).
    pub offered: AtomicU64,
    /// Spans the collector took.
    pub exported: AtomicU64,
}

impl Counts {
    /// Spans offered and never confirmed by the collector.
    pub fn dropped(&self) -> u64 {
        let offered = self.offered.load(Ordering::Relaxed);
        offered.saturating_sub(self.exported.load(Ordering::Relaxed))
    }
}

/// The queue between the sink (any thread) and the export task.
pub struct Queue {
    pending: Mutex<Pending>,
    /// Wakes the task: a full batch is waiting, or the queue has closed.
    ready: Notify,
    counts: Arc<Counts>,
    max_queue: usize,
    max_batch: usize,
}

/// What is queued: the spans one after the other, each already framed as a `spans` field of the
/// request's `ScopeSpans` (so a request is a copy of a stretch of it), and where each ends.
#[derive(Default)]
pub struct Pending {
    framed: Vec<u8>,
    ends: Vec<usize>,
    /// Nothing more will come.
    closed: bool,
}

impl Pending {
    /// The framed bytes of the spans in stretches of at most `most`, with their counts.
    fn stretches(&self, most: usize) -> impl Iterator<Item = (&[u8], u64)> {
        let mut start = 0;
        self.ends.chunks(most).map(move |ends| {
            let end = ends[ends.len() - 1];
            let stretch = &self.framed[start..end];
            start = end;
            (stretch, ends.len() as u64)
        })
    }

    /// Each span's own bytes (its frame taken off).
    #[cfg(test)]
    pub fn spans(&self) -> Vec<&[u8]> {
        let mut start = 0;
        self.ends
            .iter()
            .map(|&end| {
                let mut framed = &self.framed[start + 1..end];
                prost::encoding::decode_varint(&mut framed).expect("a frame");
                start = end;
                framed
            })
            .collect()
    }
}

impl Queue {
    /// An open, empty queue of at most `limits.max_queue` spans.
    pub fn new(limits: &Limits) -> Queue {
        Queue {
            pending: Mutex::default(),
            ready: Notify::new(),
            counts: Arc::default(),
            max_queue: limits.max_queue,
            max_batch: limits.max_batch.max(1),
        }
    }

    /// Queues a copy of `span` (an encoded OTLP span), whose buffer goes back to the thread's
    /// spare for its next span; a full or closed queue drops it (it is counted as offered,
    /// never sent).
    pub fn push(&self, span: Vec<u8>) {
        self.counts.offered.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut pending) = self.pending.lock()
            && !pending.closed
            && pending.ends.len() < self.max_queue
        {
            wire::frame(&mut pending.framed, &span);
            let end = pending.framed.len();
            pending.ends.push(end);
            let batch_ready = pending.ends.len() == self.max_batch;
            drop(pending);
            if batch_ready {
                self.ready.notify_one();
            }
        }
        wire::spare(span);
    }

    /// Stops taking spans: the export task sends what is queued, then ends.
    pub fn close(&self) {
        if let Ok(mut pending) = self.pending.lock() {
            pending.closed = true;
        }
        self.ready.notify_one();
    }

    /// Everything queued, and whether the queue has closed.
    pub fn take(&self) -> Pending {
        match self.pending.lock() {
            Ok(mut pending) => Pending {
                framed: std::mem::take(&mut pending.framed),
                ends: std::mem::take(&mut pending.ends),
                closed: pending.closed,
            },
            Err(_) => Pending {
                closed: true,
                ..Pending::default()
            },
        }
    }
}

/// Where batches go: one export request at a time, answered with how many of its spans the
/// collector rejected (Err: none were taken).
pub trait Collector: Send + 'static {
    fn send(&self, request: Vec<u8>, spans: u64) -> impl Future<Output = Result<u64, ()>>;
}

/// Starts the export task on a thread of its own (with its own single-threaded runtime, so it
/// needs nothing of the session's and a stuck collector holds up no run): returns the queue,
/// the counts, and what says when the task has ended (once the queue is closed and drained).
pub fn start<C: Collector>(
    collector: C,
    envelope: Envelope,
    limits: Limits,
) -> std::io::Result<(Arc<Queue>, Arc<Counts>, Done)> {
    let queue = Arc::new(Queue::new(&limits));
    let counts = Arc::clone(&queue.counts);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let (done, ended) = std::sync::mpsc::channel();
    let task_queue = Arc::clone(&queue);
    std::thread::Builder::new()
        .name("pagantic-otlp".into())
        .spawn(move || {
            let batches = Batches { envelope, limits };
            runtime.block_on(batches.send(&task_queue, collector));
            let _ = done.send(());
        })?;
    Ok((queue, counts, Done(ended)))
}

/// Says when the export task has ended.
pub struct Done(std::sync::mpsc::Receiver<()>);

impl Done {
    /// Waits at most `within` for the task to end; whether it did.
    pub fn wait(&self, within: Duration) -> bool {
        !matches!(
            self.0.recv_timeout(within),
            Err(std::sync::mpsc::RecvTimeoutError::Timeout)
        )
    }
}

/// How the export task sends what is queued.
struct Batches {
    envelope: Envelope,
    limits: Limits,
}

impl Batches {
    /// Sends what has queued each time the task is woken (a full batch, the queue closing) or
    /// the schedule delay passes, `max_batch` spans a request, one request at a time, until the
    /// queue has closed and is empty. A request that fails or outlasts `timeout` is lost, and
    /// spans the collector rejects are not counted as exported.
    async fn send<C: Collector>(&self, queue: &Queue, collector: C) {
        loop {
            let _ = tokio::time::timeout(self.limits.delay, queue.ready.notified()).await;
            let pending = queue.take();
            for (spans, sent) in pending.stretches(queue.max_batch) {
                let request = collector.send(self.envelope.request(spans), sent);
                if let Ok(Ok(rejected)) = tokio::time::timeout(self.limits.timeout, request).await {
                    let taken = sent.saturating_sub(rejected);
                    queue.counts.exported.fetch_add(taken, Ordering::Relaxed);
                }
            }
            if pending.closed {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
    use prost::Message;

    use super::super::wire::{Attributes, Of};
    use super::*;

    /// A collector that keeps the names of the spans it is sent, refuses everything, or rejects
    /// one span of every request.
    #[derive(Debug, Clone, Default)]
    struct Kept {
        spans: Arc<Mutex<Vec<String>>>,
        refuse: bool,
        reject_one: bool,
    }

    impl Collector for Kept {
        async fn send(&self, request: Vec<u8>, spans: u64) -> Result<u64, ()> {
            if self.refuse {
                return Err(());
            }
            let request = ExportTraceServiceRequest::decode(&request[..]).map_err(|_| ())?;
            let names = request
                .resource_spans
                .into_iter()
                .flat_map(|r| r.scope_spans)
                .flat_map(|s| s.spans)
                .map(|span| span.name);
            let names: Vec<String> = names.collect();
            assert_eq!(names.len() as u64, spans);
            self.spans.lock().expect("spans").extend(names);
            Ok(u64::from(self.reject_one))
        }
    }

    fn envelope() -> Envelope {
        Envelope::new(&Attributes::new(Of::Resource), "", "test", "1", "")
    }

    fn span(name: &str) -> Vec<u8> {
        wire::bare_span(name)
    }

    /// Pushes `spans` spans into a queue of `limits.0`, closes it, then lets the task send them
    /// in batches of `limits.1` (so a queue too small drops what did not fit).
    fn sent_through(collector: Kept, limits: (usize, usize), spans: usize) -> Arc<Counts> {
        let limits = Limits {
            max_queue: limits.0,
            max_batch: limits.1,
            ..Limits::default()
        };
        let queue = Queue::new(&limits);
        for n in 0..spans {
            queue.push(span(&format!("s{n}")));
        }
        queue.close();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let batches = Batches {
            envelope: envelope(),
            limits,
        };
        runtime.block_on(batches.send(&queue, collector));
        Arc::clone(&queue.counts)
    }

    #[test]
    fn the_task_on_its_own_thread_sends_and_says_when_it_ended() {
        let exporter = Kept::default();
        let limits = Limits {
            max_batch: 2,
            delay: Duration::from_millis(20),
            ..Limits::default()
        };
        let (queue, counts, done) = start(exporter.clone(), envelope(), limits).expect("started");
        let sent = || exporter.spans.lock().expect("spans").clone();
        let waited = |want: usize| {
            let until = std::time::Instant::now() + Duration::from_secs(30);
            while sent().len() < want && std::time::Instant::now() < until {
                std::thread::sleep(Duration::from_millis(5));
            }
        };
        // One span waits for the schedule delay; two fill a batch.
        queue.push(span("one"));
        waited(1);
        queue.push(span("two"));
        queue.push(span("three"));
        waited(3);
        assert_eq!(sent(), ["one", "two", "three"]);
        assert!(!done.wait(Duration::from_millis(10)), "still open");
        queue.push(span("four"));
        queue.close();
        assert!(done.wait(Duration::from_secs(30)));
        assert_eq!(sent(), ["one", "two", "three", "four"]);
        assert_eq!(counts.dropped(), 0);
        queue.push(span("too late"));
        assert_eq!(counts.dropped(), 1);
    }

    #[test]
    fn every_queued_span_is_sent_once_the_queue_closes() {
        let exporter = Kept::default();
        let counts = sent_through(exporter.clone(), (100, 3), 10);
        assert_eq!(exporter.spans.lock().expect("spans").len(), 10);
        assert_eq!(counts.dropped(), 0);
    }

    #[test]
    fn a_refused_export_and_a_full_queue_are_counted_as_dropped() {
        let refusing = Kept {
            refuse: true,
            ..Kept::default()
        };
        assert_eq!(sent_through(refusing, (100, 4), 7).dropped(), 7);
        // A queue of 2 that nobody empties before it closes keeps 2 of 5.
        let exporter = Kept::default();
        let counts = sent_through(exporter.clone(), (2, 10), 5);
        assert_eq!(*exporter.spans.lock().expect("spans"), ["s0", "s1"]);
        assert_eq!(counts.dropped(), 3);
        // A collector that takes a request but rejects one span of each (a partial success).
        let partial = Kept {
            reject_one: true,
            ..Kept::default()
        };
        assert_eq!(sent_through(partial, (100, 4), 7).dropped(), 2);
    }
}
