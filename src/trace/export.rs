//! Sending finished spans to the collector without ever holding up a run: a bounded queue the
//! sink pushes to (a full queue drops the span and counts it), and a task on a thread of its own
//! that sends what has queued in batches, each request bounded by the exporter's timeout. A span
//! is queued already encoded (`wire.rs`), or, a step attempt's, as a record the task encodes when
//! it takes it. The task copies a shard's spans into the requests it will send, a batch of spans
//! each, after room it keeps for the request's envelope, and writes the envelope there when it
//! sends the request: from its shard to the socket a span is copied once.
//!
//! Pushing a span wakes nobody: the task is woken when a full batch is waiting, when the queue
//! closes, or when the schedule delay has passed, so a batch job making 200,000 spans a second
//! costs a few hundred wake-ups, not one a span. The thread runs at a lower priority than the
//! runs (nice +10 on Linux), so on a machine whose cores are busy it sends in the time they
//! leave. Nor do pushing threads wait for each other: the queue is sharded, a shard to a thread,
//! and a shard claims room under the queue's bound a few dozen spans at a time, so the threads
//! seldom write the one count they share; nor for the task, which swaps a shard's buffers for
//! empty ones and encodes the step attempts' spans after letting the shard go. Closing waits a
//! bounded time for the queue to drain; every span not confirmed by the collector — refused,
//! timed out, unreachable, still queued when time ran out — counts as dropped.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::Notify;

use super::span::StepRecord;
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
    /// How much lower than the runs the export thread is scheduled, as a nice value on Linux
    /// (`PAGANTIC_TRACE_EXPORT_NICE`): where the cores are all busy the runs come first, and at
    /// 10 the thread still gets about a tenth of a core beside each busy one, several times what
    /// sending a batch job's spans takes; 0 shares the cores with the runs equally.
    pub niceness: i32,
}

impl Default for Limits {
    /// The specification's defaults, but for the queue (see [`Limits::max_queue`]).
    fn default() -> Limits {
        Limits {
            max_queue: 32768,
            max_batch: 512,
            delay: Duration::from_secs(5),
            timeout: Duration::from_secs(10),
            niceness: 10,
        }
    }
}

/// How many spans went where. Every span offered is queued, taken or refused; a pushing
/// thread writes the count all threads share (`queued`) once every few spans, not at each.
#[derive(Debug, Default)]
pub struct Counts {
    /// Room claimed in the queue: its spans, and what each shard has claimed ahead for its next
    /// few (`room`). A shard claims [`Queue::claim`] spans of room at a time, so the threads
    /// pushing spans pass this count's cache line between cores once in that many spans.
    queued: AtomicU64,
    /// Each shard's room claimed and not yet filled.
    room: [Room; SHARDS],
    /// Spans the task took from the queue to send.
    taken: AtomicU64,
    /// Spans a full or closed queue refused.
    refused: AtomicU64,
    /// Spans the collector took.
    exported: AtomicU64,
}

/// A shard's room claimed ahead, on cache lines of its own: written by the thread that holds
/// the shard, read only when counting what was dropped.
#[derive(Debug, Default)]
#[repr(align(128))]
struct Room(AtomicU64);

impl Counts {
    /// Spans a full (or closed) queue refused: some of [`Counts::dropped`].
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }

    /// Spans offered and never confirmed by the collector.
    pub fn dropped(&self) -> u64 {
        let load = |count: &AtomicU64| count.load(Ordering::Relaxed);
        let unfilled: u64 = self.room.iter().map(|room| load(&room.0)).sum();
        let offered =
            load(&self.queued).saturating_sub(unfilled) + load(&self.taken) + load(&self.refused);
        offered.saturating_sub(load(&self.exported))
    }
}

/// How many shards the queue has. Each run pushes to one (its [`Lane`]), the runs taking them in
/// turn, so the threads running them (a runtime's workers, the main thread) seldom share a lock
/// or a cache line: with one lock for all, the lock's trips between cores cost a batch job more
/// than encoding its spans.
const SHARDS: usize = 8;

/// One shard of the queue, on cache lines of its own.
#[derive(Default)]
#[repr(align(128))]
struct Shard(Mutex<Queued>);

/// What a shard holds: spans encoded, and step attempts' spans left for the task to encode.
#[derive(Default)]
struct Queued {
    spans: Framed,
    steps: Vec<StepRecord>,
}

impl Queued {
    fn is_empty(&self) -> bool {
        self.spans.is_empty() && self.steps.is_empty()
    }

    fn len(&self) -> usize {
        self.spans.len() + self.steps.len()
    }
}

/// The shard a run pushes its spans to, given when the run opens.
#[derive(Debug, Clone, Copy)]
pub struct Lane(usize);

/// The queue between the sink (any thread) and the export task.
pub struct Queue {
    shards: [Shard; SHARDS],
    /// The lane the next run is given.
    next_lane: AtomicUsize,
    closed: AtomicBool,
    /// Wakes the task: a full batch is waiting, or the queue has closed.
    ready: Notify,
    counts: Arc<Counts>,
    max_queue: usize,
    max_batch: usize,
    /// How much room a shard claims at a time: an eighth of a batch at most, so the task is
    /// woken with nearly a batch's worth queued; one span for a small queue, whose bound then
    /// holds exactly (claimed room no other shard can use is at most `SHARDS` times this).
    claim: u64,
}

/// Encoded spans one after the other, each framed as a `spans` field of a request's
/// `ScopeSpans`, and where each ends. In a shard they start at its first byte; in a request,
/// after room left for the request's envelope, which is written there when it is sent, so a
/// span is copied once between its shard and the socket.
#[derive(Default)]
pub struct Framed {
    bytes: Vec<u8>,
    ends: Vec<usize>,
    /// Where its first span starts: the room kept before it.
    first: usize,
}

impl Framed {
    /// A request's spans to come, after `room` bytes, in a buffer of `capacity` bytes.
    fn request(room: usize, capacity: usize) -> Framed {
        let mut bytes = Vec::with_capacity(capacity.max(room));
        bytes.resize(room, 0);
        Framed {
            bytes,
            ends: Vec::new(),
            first: room,
        }
    }

    /// Adds `span` (an encoded OTLP span).
    pub fn add(&mut self, span: &[u8]) {
        wire::frame(&mut self.bytes, span);
        self.ends.push(self.bytes.len());
    }

    /// Adds the span of `step`, encoded in place.
    fn add_step(&mut self, step: &StepRecord) {
        step.frame(&mut self.bytes);
        self.ends.push(self.bytes.len());
    }

    /// Adds `count` spans of `other` from its `at`th, in one copy.
    fn add_from(&mut self, other: &Framed, at: usize, count: usize) {
        let start = at
            .checked_sub(1)
            .map_or(other.first, |before| other.ends[before]);
        let ends = &other.ends[at..at + count];
        let Some(&end) = ends.last() else {
            return;
        };
        let base = self.bytes.len();
        self.bytes.extend_from_slice(&other.bytes[start..end]);
        self.ends
            .extend(ends.iter().map(|end| base + (end - start)));
    }

    /// How many spans it holds.
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    fn clear(&mut self) {
        self.bytes.truncate(self.first);
        self.ends.clear();
    }

    /// Each span's own bytes (its frame taken off).
    #[cfg(test)]
    pub fn spans(&self) -> Vec<&[u8]> {
        let mut start = self.first;
        self.ends
            .iter()
            .map(|&end| {
                let mut framed = &self.bytes[start + 1..end];
                prost::encoding::decode_varint(&mut framed).expect("a frame");
                start = end;
                framed
            })
            .collect()
    }
}

/// What the export task has taken from the queue and not yet sent, and whether more can come.
#[derive(Default)]
pub struct Pending {
    requests: Requests,
    /// Nothing more will come.
    closed: bool,
    /// An empty buffer, swapped for the next shard's full one.
    spare: Queued,
}

/// The most bytes a request is given before its first span: a full request of spans carrying
/// content can take megabytes, and one such need not make every later request as large.
const MOST_AT_ONCE: usize = 1 << 20;

/// Spans taken and not yet sent, as requests of a batch of spans each (the last may hold
/// fewer), oldest first, each with room for its envelope before its spans.
#[derive(Default)]
struct Requests {
    waiting: VecDeque<Framed>,
    /// The room a request keeps for its envelope ([`Envelope::room`]).
    room: usize,
    /// The bytes the last full request took: the next is given as many at once, so a request
    /// is not copied as it grows.
    size: usize,
}

impl Requests {
    /// The request to add a span to: the last, or a new one when it is full.
    fn open(&mut self, max_batch: usize) -> &mut Framed {
        if self
            .waiting
            .back()
            .is_none_or(|last| last.len() >= max_batch)
        {
            let capacity = self.size.min(MOST_AT_ONCE);
            self.waiting.push_back(Framed::request(self.room, capacity));
        }
        let last = self.waiting.len() - 1;
        &mut self.waiting[last]
    }

    /// Takes the first `count` requests, to send (a full one's size is kept for the next).
    fn take_first(&mut self, count: usize, max_batch: usize) -> impl Iterator<Item = Framed> {
        let size = &mut self.size;
        self.waiting.drain(..count).inspect(move |request| {
            if request.len() == max_batch {
                *size = request.bytes.len();
            }
        })
    }
}

impl Pending {
    /// Nothing taken yet; requests keep `room` bytes for their envelope.
    fn new(room: usize) -> Pending {
        let requests = Requests {
            room,
            ..Requests::default()
        };
        Pending {
            requests,
            ..Pending::default()
        }
    }

    /// How many of its requests to send now: all of them once the queue has closed or the
    /// schedule delay has passed; when the task was woken by a full batch, only the full ones,
    /// the last waiting for more (so it sends full requests, not a full one and the few spans
    /// that came while it woke).
    fn due(&self, woken_by_batch: bool, max_batch: usize) -> usize {
        let waiting = &self.requests.waiting;
        let last_short = waiting.back().is_some_and(|last| last.len() < max_batch);
        if last_short && woken_by_batch && !self.closed {
            waiting.len() - 1
        } else {
            waiting.len()
        }
    }

    /// Moves the spans of the shard's buffers just swapped into `spare` into requests of at
    /// most `max_batch` spans: the encoded ones a stretch at a time, the step attempts' encoded
    /// in place.
    fn take_spare(&mut self, max_batch: usize) {
        let Pending {
            requests, spare, ..
        } = self;
        let mut at = 0;
        while at < spare.spans.len() {
            let request = requests.open(max_batch);
            let count = (max_batch - request.len()).min(spare.spans.len() - at);
            request.add_from(&spare.spans, at, count);
            at += count;
        }
        spare.spans.clear();
        for step in spare.steps.drain(..) {
            requests.open(max_batch).add_step(&step);
        }
    }

    /// How many spans it holds.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.requests.waiting.iter().map(Framed::len).sum()
    }

    /// Each span's own bytes, in order.
    #[cfg(test)]
    pub fn spans(&self) -> Vec<&[u8]> {
        let waiting = self.requests.waiting.iter();
        waiting.flat_map(Framed::spans).collect()
    }
}

impl Queue {
    /// An open, empty queue of at most `limits.max_queue` spans.
    pub fn new(limits: &Limits) -> Queue {
        Queue {
            shards: std::array::from_fn(|_| Shard::default()),
            next_lane: AtomicUsize::new(0),
            closed: AtomicBool::new(false),
            ready: Notify::new(),
            counts: Arc::default(),
            max_queue: limits.max_queue,
            max_batch: limits.max_batch.max(1),
            claim: (limits.max_queue / (SHARDS * 64))
                .min(limits.max_batch / 8)
                .clamp(1, 64) as u64,
        }
    }

    /// The lane of a run that opens now: the runs take the shards in turn.
    pub fn lane(&self) -> Lane {
        Lane(self.next_lane.fetch_add(1, Ordering::Relaxed) % SHARDS)
    }

    /// Queues a copy of `span` (an encoded OTLP span) in `lane`; a full or closed queue refuses
    /// it (it is counted as dropped). Every batch's worth queued wakes the task.
    pub fn push(&self, lane: Lane, span: &[u8]) {
        self.queue(lane, |queued| queued.spans.add(span));
    }

    /// Queues the span of a step attempt, which the task encodes when it takes it; refused and
    /// counted as [`Queue::push`]'s spans are.
    pub fn push_step(&self, lane: Lane, step: StepRecord) {
        self.queue(lane, |queued| queued.steps.push(step));
    }

    /// Queues one span, which `add` puts into `lane`'s shard, when the queue is open and has
    /// room; else counts it refused. The shard fills room it claimed before, and claims
    /// [`Queue::claim`] spans more (as much as is left) when it has none.
    fn queue(&self, Lane(at): Lane, add: impl FnOnce(&mut Queued)) {
        let counts = &self.counts;
        let mut queued = match self.shards[at].0.lock() {
            Ok(queued) if !self.closed.load(Ordering::Acquire) => queued,
            // A poisoned shard takes no more spans.
            _ => {
                counts.refused.fetch_add(1, Ordering::Relaxed);
                return;
            }
        };
        let room = &counts.room[at].0;
        let left = match room.load(Ordering::Relaxed) {
            0 => self.claim_room(),
            left => left,
        };
        if left == 0 {
            counts.refused.fetch_add(1, Ordering::Relaxed);
            return;
        }
        add(&mut queued);
        room.store(left - 1, Ordering::Relaxed);
    }

    /// Claims room for a shard's next spans: [`Queue::claim`] or what is left of the bound,
    /// which may be none. Every batch's worth claimed wakes the task.
    fn claim_room(&self) -> u64 {
        let queued = &self.counts.queued;
        let max_queue = self.max_queue as u64;
        let before = queued.fetch_add(self.claim, Ordering::Relaxed);
        let claimed = self.claim.min(max_queue.saturating_sub(before));
        if claimed < self.claim {
            queued.fetch_sub(self.claim - claimed, Ordering::Relaxed);
        }
        let batch = self.max_batch as u64;
        if (before + claimed) / batch > before / batch {
            self.ready.notify_one();
        }
        claimed
    }

    /// Stops taking spans: the export task sends what is queued, then ends.
    pub fn close(&self) {
        self.closed.store(true, Ordering::Release);
        self.ready.notify_one();
    }

    /// Adds what is queued to what `into` holds, and says in it whether the queue has closed.
    /// A shard's spans are taken by swapping its buffers for `into`'s empty spares, so a thread
    /// pushing spans waits for no copy; they are copied into `into`'s requests, and step
    /// attempts' spans encoded there, after the shard's lock is let go.
    pub fn take_into(&self, into: &mut Pending) {
        // Read before the shards are taken: a pushing thread reads it holding its shard, so a
        // span it adds before the queue closes is in its shard when the last take comes.
        into.closed = self.closed.load(Ordering::Acquire);
        let mut taken = 0;
        for shard in &self.shards {
            match shard.0.lock() {
                Ok(mut spans) if !spans.is_empty() => std::mem::swap(&mut *spans, &mut into.spare),
                _ => continue,
            }
            taken += into.spare.len() as u64;
            into.take_spare(self.max_batch);
        }
        self.counts.queued.fetch_sub(taken, Ordering::Relaxed);
        self.counts.taken.fetch_add(taken, Ordering::Relaxed);
    }

    /// Everything queued, and whether the queue has closed.
    #[cfg(test)]
    pub fn take(&self) -> Pending {
        let mut taken = Pending::default();
        self.take_into(&mut taken);
        taken
    }
}

/// Where batches go: one export request at a time, answered with how many of its spans the
/// collector rejected (Err: none were taken).
pub trait Collector: Send + 'static {
    fn send(&self, request: Bytes, spans: u64) -> impl Future<Output = Result<u64, ()>>;
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
            yield_to_runs(limits.niceness);
            let batches = Batches { envelope, limits };
            runtime.block_on(batches.send(&task_queue, collector));
            let _ = done.send(());
        })?;
    Ok((queue, counts, Done(ended)))
}

/// Lowers the calling thread's scheduling priority to `niceness` (see [`Limits::niceness`]), so
/// exporting spans takes the time the runs leave rather than the runs' own. On Linux a nice
/// value is a thread's own (`setpriority` of process 0 sets the caller's); elsewhere it would be
/// the whole process's, so the thread is left as it is. Failing to lower it changes nothing else.
fn yield_to_runs(niceness: i32) {
    #[cfg(target_os = "linux")]
    let _ = rustix::process::setpriority_process(None, niceness);
    #[cfg(not(target_os = "linux"))]
    let _ = niceness;
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
    /// Sends what has queued each time the task is woken (full batches, the queue closing) or
    /// the schedule delay passes (everything), `max_batch` spans a request, one request at a
    /// time, until the queue has closed and is empty. A request that fails or outlasts
    /// `timeout` is lost, and spans the collector rejects are not counted as exported.
    async fn send<C: Collector>(&self, queue: &Queue, collector: C) {
        let mut pending = Pending::new(self.envelope.room());
        loop {
            let woken = tokio::time::timeout(self.limits.delay, queue.ready.notified()).await;
            queue.take_into(&mut pending);
            let due = pending.due(woken.is_ok(), queue.max_batch);
            for request in pending.requests.take_first(due, queue.max_batch) {
                let sent = request.len() as u64;
                let request = self.envelope.wrap(request.bytes, request.first);
                let request = collector.send(request, sent);
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
    use opentelemetry_proto::tonic::trace::v1::Span;
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
        async fn send(&self, request: Bytes, spans: u64) -> Result<u64, ()> {
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

    /// The names of the spans in `pending`, in order.
    fn names(pending: &Pending) -> Vec<String> {
        let spans = pending.spans().into_iter();
        spans
            .map(|span| Span::decode(span).expect("a span").name)
            .collect()
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
            queue.push(Lane(0), &span(&format!("s{n}")));
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
        queue.push(Lane(0), &span("one"));
        waited(1);
        queue.push(Lane(0), &span("two"));
        queue.push(Lane(0), &span("three"));
        waited(3);
        assert_eq!(sent(), ["one", "two", "three"]);
        assert!(!done.wait(Duration::from_millis(10)), "still open");
        queue.push(Lane(0), &span("four"));
        queue.close();
        assert!(done.wait(Duration::from_secs(30)));
        assert_eq!(sent(), ["one", "two", "three", "four"]);
        assert_eq!(counts.dropped(), 0);
        queue.push(Lane(0), &span("too late"));
        assert_eq!(counts.dropped(), 1);
    }

    /// Whether an export thread of this process runs at nice value `niceness` (field 19 of its
    /// stat, the 17th after the parenthesised name), waiting a bounded time for it to lower
    /// itself; other tests' export threads may be the one found.
    #[cfg(target_os = "linux")]
    fn an_export_thread_runs_at(niceness: i32) -> bool {
        let found = || {
            let tasks = std::fs::read_dir("/proc/self/task").expect("this process's threads");
            tasks.flatten().any(|task| {
                let read = |file: &str| std::fs::read_to_string(task.path().join(file));
                let named = read("comm").is_ok_and(|name| name.trim() == "pagantic-otlp");
                let stat = read("stat").unwrap_or_default();
                let nice = stat
                    .rsplit_once(')')
                    .and_then(|(_, rest)| rest.split_whitespace().nth(16)?.parse::<i32>().ok());
                named && nice == Some(niceness)
            })
        };
        let until = std::time::Instant::now() + Duration::from_secs(10);
        while !found() && std::time::Instant::now() < until {
            std::thread::sleep(Duration::from_millis(5));
        }
        found()
    }

    /// The export thread yields to the runs (nice 10) unless told otherwise: here 15, a value
    /// no other test's thread takes (lowering it below the process's own would need a privilege).
    #[cfg(target_os = "linux")]
    #[test]
    fn the_export_thread_runs_at_a_lower_priority_than_the_runs_as_configured() {
        for niceness in [Limits::default().niceness, 15] {
            let limits = Limits {
                niceness,
                ..Limits::default()
            };
            let (queue, _, done) = start(Kept::default(), envelope(), limits).expect("started");
            assert!(
                an_export_thread_runs_at(niceness),
                "an export thread at nice {niceness}"
            );
            queue.close();
            assert!(done.wait(Duration::from_secs(30)));
        }
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

    #[test]
    fn spans_pushed_from_many_threads_are_all_taken_and_counted() {
        let limits = Limits {
            max_queue: 300,
            ..Limits::default()
        };
        let queue = Queue::new(&limits);
        std::thread::scope(|threads| {
            for thread in 0..4 {
                let queue = &queue;
                threads.spawn(move || {
                    let lane = queue.lane();
                    for n in 0..100 {
                        queue.push(lane, &span(&format!("t{thread}-{n}")));
                    }
                });
            }
        });
        let mut names = names(&queue.take());
        assert_eq!(
            names.len(),
            300,
            "the queue's bound holds across its shards"
        );
        names.sort();
        names.dedup();
        assert_eq!(names.len(), 300, "each span once");
        assert_eq!(
            queue.counts.dropped(),
            400,
            "none sent: 300 taken, 100 refused"
        );
        assert_eq!(queue.take().len(), 0);
    }

    #[test]
    fn a_shard_claims_room_ahead_and_the_bound_and_the_counts_still_hold() {
        let limits = Limits {
            max_queue: 8192,
            ..Limits::default()
        };
        let queue = Queue::new(&limits);
        assert_eq!(
            queue.claim, 16,
            "a 64th of the queue a shard, at most an eighth of a batch"
        );
        for n in 0..10 {
            queue.push(Lane(0), &span(&format!("s{n}")));
        }
        assert_eq!(queue.counts.queued.load(Ordering::Relaxed), 16, "one claim");
        assert_eq!(
            queue.counts.dropped(),
            10,
            "room claimed and not filled is no span"
        );
        assert_eq!(names(&queue.take()).len(), 10);
        // The 10 taken leave the queue; 8,200 more fill it to its bound.
        for n in 10..8210 {
            queue.push(Lane(0), &span(&format!("s{n}")));
        }
        assert_eq!(
            queue.take().len(),
            8192,
            "the bound holds: the last 8 are refused"
        );
        assert_eq!(queue.counts.dropped(), 8210, "none sent");
    }

    /// A queue that wakes its task every 3 spans.
    fn batches_of_3() -> Queue {
        Queue::new(&Limits {
            max_batch: 3,
            ..Limits::default()
        })
    }

    #[test]
    fn a_full_batch_wakes_the_task() {
        let queue = batches_of_3();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let woken = |queue: &Queue| {
            runtime.block_on(async {
                let wait = queue.ready.notified();
                tokio::time::timeout(Duration::from_millis(50), wait).await
            })
        };
        queue.push(Lane(0), &span("a"));
        queue.push(Lane(0), &span("b"));
        assert!(woken(&queue).is_err(), "two spans are short of a batch");
        queue.push(Lane(0), &span("c"));
        assert!(woken(&queue).is_ok(), "the third fills it");
    }

    #[test]
    fn a_task_woken_by_full_batches_sends_whole_batches_and_keeps_the_rest_in_order() {
        let queue = batches_of_3();
        for n in 0..7 {
            queue.push(Lane(0), &span(&format!("s{n}")));
        }
        let mut pending = Pending::new(5);
        queue.take_into(&mut pending);
        let due = pending.due(true, 3);
        assert_eq!(due, 2, "two full requests");
        let mut sent = Vec::new();
        for request in pending.requests.take_first(due, 3) {
            assert_eq!(request.first, 5, "room for the envelope");
            assert_eq!(request.bytes[..5], [0; 5]);
            sent.push(request.len());
        }
        assert_eq!(sent, [3, 3]);
        assert_eq!(names(&pending), ["s6"], "the span short of a batch is kept");
        queue.push(Lane(0), &span("s7"));
        queue.take_into(&mut pending);
        assert_eq!(pending.due(true, 3), 0, "two spans are short of a batch");
        assert_eq!(pending.due(false, 3), 1, "the delay passed: all of them");
        assert_eq!(names(&pending), ["s6", "s7"], "the kept span first");
        queue.push(Lane(0), &span("s8"));
        queue.push(Lane(0), &span("s9"));
        queue.close();
        queue.take_into(&mut pending);
        assert_eq!(names(&pending), ["s6", "s7", "s8", "s9"]);
        assert_eq!(pending.due(true, 3), 2, "a closed queue gives everything");
        let full = pending.requests.size;
        assert!(full > 5, "a full request's size is kept");
        let opened_after = &pending.requests.waiting[1];
        assert!(
            opened_after.bytes.capacity() >= full,
            "a request opened after a full one was sent is given its size at once"
        );
        let first: Vec<Framed> = pending.requests.take_first(1, 3).collect();
        assert_eq!(first.iter().map(Framed::len).collect::<Vec<_>>(), [3]);
        assert_eq!(names(&pending), ["s9"]);
        assert!(queue.take().spans().is_empty(), "nothing is left queued");
    }
}
