//! Sending finished spans to the collector without ever holding up a run: a bounded queue the
//! sink pushes to (a full queue drops the span and counts it), and one task on the session's
//! runtime that sends what has queued in batches, each export bounded by the exporter's timeout.
//! Closing waits a bounded time for the queue to drain; every span not confirmed by the collector
//! — refused, timed out, unreachable, still queued when time ran out — counts as dropped.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use opentelemetry_sdk::trace::{SpanData, SpanExporter};
use tokio::sync::mpsc;

/// Most spans one export sends (`OTEL_BSP_MAX_EXPORT_BATCH_SIZE` overrides it).
pub const MAX_BATCH: usize = 512;
/// Most spans waiting to be sent (`OTEL_BSP_MAX_QUEUE_SIZE` overrides it): a batch job's
/// rows end faster than a collector answers, so more than the specification's 2048 (at most
/// some 30 MiB of spans when the collector falls behind).
pub const MAX_QUEUE: usize = 32768;

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

/// The sending end: what the sink pushes finished spans into, from any thread.
pub struct Queue {
    sender: RwLock<Option<mpsc::Sender<SpanData>>>,
    counts: Arc<Counts>,
}

impl Queue {
    /// Queues `span`; a full or closed queue drops it (it is counted as offered, never sent).
    pub fn push(&self, span: SpanData) {
        self.counts.offered.fetch_add(1, Ordering::Relaxed);
        if let Ok(sender) = self.sender.read()
            && let Some(sender) = &*sender
        {
            let _ = sender.try_send(span);
        }
    }

    /// Stops taking spans: the export task sends what is queued, then ends.
    pub fn close(&self) {
        if let Ok(mut sender) = self.sender.write() {
            *sender = None;
        }
    }
}

/// Starts the export task on a thread of its own (with its own single-threaded runtime, so it
/// needs nothing of the session's and a stuck collector holds up no run): returns the queue,
/// the counts, and what says when the task has ended (once the queue is closed and drained).
pub fn start<E: SpanExporter + 'static>(
    exporter: E,
    timeout: Duration,
    limits: (usize, usize),
) -> std::io::Result<(Queue, Arc<Counts>, Done)> {
    let (max_queue, max_batch) = limits;
    let (queue, receiver) = queue(max_queue);
    let counts = Arc::clone(&queue.counts);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let (done, ended) = std::sync::mpsc::channel();
    let task_counts = Arc::clone(&counts);
    std::thread::Builder::new()
        .name("pagantic-otlp".into())
        .spawn(move || {
            let sent = send_batches(receiver, exporter, task_counts, timeout, max_batch);
            runtime.block_on(sent);
            let _ = done.send(());
        })?;
    Ok((queue, counts, Done(ended)))
}

/// A queue of at most `max_queue` spans and its receiving end.
pub fn queue(max_queue: usize) -> (Queue, mpsc::Receiver<SpanData>) {
    let (sender, receiver) = mpsc::channel(max_queue.max(1));
    let queue = Queue {
        sender: RwLock::new(Some(sender)),
        counts: Arc::default(),
    };
    (queue, receiver)
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

/// Sends what arrives, up to `max_batch` spans an export, one export at a time (the exporter
/// is never called concurrently); a batch that fails or outlasts `timeout` is lost.
async fn send_batches<E: SpanExporter>(
    mut receiver: mpsc::Receiver<SpanData>,
    exporter: E,
    counts: Arc<Counts>,
    timeout: Duration,
    max_batch: usize,
) {
    let max_batch = max_batch.max(1);
    let mut batch = Vec::with_capacity(max_batch);
    while receiver.recv_many(&mut batch, max_batch).await > 0 {
        let spans = std::mem::replace(&mut batch, Vec::with_capacity(max_batch));
        let sent = spans.len() as u64;
        if let Ok(Ok(())) = tokio::time::timeout(timeout, exporter.export(spans)).await {
            counts.exported.fetch_add(sent, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use opentelemetry::InstrumentationScope;
    use opentelemetry::trace::{SpanContext, SpanKind, Status};
    use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
    use opentelemetry_sdk::trace::{SpanEvents, SpanLinks};

    use super::*;

    /// An exporter that keeps what it is sent, or refuses everything.
    #[derive(Debug, Clone, Default)]
    struct Kept {
        spans: Arc<Mutex<Vec<String>>>,
        refuse: bool,
    }

    impl SpanExporter for Kept {
        async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
            if self.refuse {
                return Err(OTelSdkError::InternalFailure("refused".into()));
            }
            let names = batch.into_iter().map(|span| span.name.into_owned());
            self.spans.lock().expect("spans").extend(names);
            Ok(())
        }
    }

    fn span(name: &str) -> SpanData {
        SpanData {
            span_context: SpanContext::empty_context(),
            parent_span_id: opentelemetry::trace::SpanId::INVALID,
            parent_span_is_remote: false,
            span_kind: SpanKind::Internal,
            name: name.to_string().into(),
            start_time: std::time::SystemTime::now(),
            end_time: std::time::SystemTime::now(),
            attributes: Vec::new(),
            dropped_attributes_count: 0,
            events: SpanEvents::default(),
            links: SpanLinks::default(),
            status: Status::Unset,
            instrumentation_scope: InstrumentationScope::builder("test").build(),
        }
    }

    /// Pushes `spans` spans into a queue of `limits.0`, closes it, then lets the task send them
    /// in batches of `limits.1` (so a queue too small drops what did not fit).
    fn sent_through(exporter: Kept, limits: (usize, usize), spans: usize) -> Arc<Counts> {
        let (queue, receiver) = queue(limits.0);
        let counts = Arc::clone(&queue.counts);
        for n in 0..spans {
            queue.push(span(&format!("s{n}")));
        }
        queue.close();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let sent = send_batches(
            receiver,
            exporter,
            Arc::clone(&counts),
            Duration::from_secs(5),
            limits.1,
        );
        runtime.block_on(sent);
        counts
    }

    #[test]
    fn the_task_on_its_own_thread_sends_and_says_when_it_ended() {
        let exporter = Kept::default();
        let (queue, counts, done) =
            start(exporter.clone(), Duration::from_secs(5), (10, 10)).expect("started");
        queue.push(span("one"));
        assert!(!done.wait(Duration::from_millis(10)), "still open");
        queue.close();
        assert!(done.wait(Duration::from_secs(30)));
        assert_eq!(*exporter.spans.lock().expect("spans"), ["one"]);
        assert_eq!(counts.dropped(), 0);
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
    }
}
