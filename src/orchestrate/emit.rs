//! The events of one run as it emits them: its run id, its clock and its spans, and where its
//! events go — the session's sinks, the run's own watcher, and its trace when the session exports
//! traces. A nested run (a sub-plan) emits under a run id of its own, every event linked to the
//! run and step that started it.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use super::events::{Event, EventData, RunIds, SpanId, Watch};
use super::record::Lifecycle;
use super::sinks::Sinks;
use super::traces::{Origin, RunTrace, TraceShape, TracedRun, Tracer};
use crate::core::{Timestamp, TraceParent};
use crate::inference::TokenSink;

/// Where a nested run (a sub-plan) hangs in the run that started it.
struct ParentLink {
    run_id: String,
    /// The span of the step that started it.
    span: SpanId,
}

struct Inner {
    run_id: String,
    started: Instant,
    next_span: AtomicU64,
    outlets: Arc<Outlets>,
    /// Who watches this run alone (a server's stream of one run to its client); a nested run
    /// is watched with the run that started it.
    watch: Arc<Watch>,
    parent: Option<ParentLink>,
    /// Its trace, when the session exports traces.
    traced: Option<Box<dyn TracedRun>>,
}

/// Where every run of a session sends its events: the session's sinks, and its tracer when it
/// exports traces; and where its runs get their ids. Shared by the runs, so a new run (a batch
/// row) takes one reference to it.
struct Outlets {
    sinks: Arc<Sinks>,
    tracer: Option<Arc<dyn Tracer>>,
    run_ids: RunIds,
}

/// The events of one run: its id, its clock and its spans, and where its events go (the
/// session's sinks and the run's own watcher). Cheap to clone and share between steps. It
/// counts nothing: what a run spends is in its `RunLedger`.
#[derive(Clone)]
pub struct Events {
    inner: Arc<Inner>,
}

impl Events {
    /// Events of a new run sent to `sinks`.
    pub fn new(sinks: Arc<Sinks>) -> Self {
        Self::traced(sinks, None)
    }

    /// Events of a new run (the session's own) sent to `sinks`, and to `tracer`, with the run's
    /// trace, when the session exports traces.
    pub fn traced(sinks: Arc<Sinks>, tracer: Option<Arc<dyn Tracer>>) -> Self {
        Self::run_of(
            Arc::new(Outlets {
                sinks,
                tracer,
                run_ids: RunIds::default(),
            }),
            Arc::new(Watch::default()),
            None,
            Origin::Session,
        )
    }

    /// Events sent nowhere (a run nobody records, such as a `--dry-run`'s preview of prompts).
    pub fn unrecorded() -> Self {
        Self::new(Arc::new(Sinks::default()))
    }

    fn run_of(
        outlets: Arc<Outlets>,
        watch: Arc<Watch>,
        parent: Option<ParentLink>,
        origin: Origin,
    ) -> Self {
        let run_id = outlets.run_ids.next();
        let traced = outlets
            .tracer
            .as_ref()
            .map(|tracer| tracer.open_run(origin));
        Events {
            inner: Arc::new(Inner {
                run_id,
                started: Instant::now(),
                next_span: AtomicU64::new(1),
                outlets,
                watch,
                parent,
                traced,
            }),
        }
    }

    /// A new id from those the session's runs get theirs from (a streamed completion's).
    pub fn new_id(&self) -> String {
        self.inner.outlets.run_ids.next()
    }

    /// Events of another run (its own run id, clock and spans) that go where these go: every
    /// row of a batch and every turn of a chat is a run of its own in the same events file.
    pub fn new_run(&self) -> Events {
        self.new_run_continuing(Watch::default(), None)
    }

    /// [`Events::new_run`] watched by `watch` too.
    pub fn new_run_watched(&self, watch: Watch) -> Events {
        self.new_run_continuing(watch, None)
    }

    /// [`Events::new_run_watched`], its trace continuing the caller's `remote` span (a served
    /// request's `traceparent`) when given, else a trace of its own; either way linked to this
    /// run's span (the batch a row belongs to).
    pub fn new_run_continuing(&self, watch: Watch, remote: Option<TraceParent>) -> Events {
        let link = self.trace().map(|trace| trace.traceparent(SpanId::RUN));
        Self::run_of(
            Arc::clone(&self.inner.outlets),
            Arc::new(watch),
            None,
            Origin::Own { remote, link },
        )
    }

    /// Events of a run nested in this one (a sub-plan), started by the step whose span is
    /// `step_span`: its own run id, its events linked to that step and seen by this run's
    /// watcher too.
    pub fn nested_run(&self, step_span: SpanId) -> Events {
        let parent = ParentLink {
            run_id: self.inner.run_id.clone(),
            span: step_span,
        };
        let origin = match self.trace() {
            Some(trace) => Origin::Nested(trace.traceparent(step_span)),
            None => Origin::Session,
        };
        Self::run_of(
            Arc::clone(&self.inner.outlets),
            Arc::clone(&self.inner.watch),
            Some(parent),
            origin,
        )
    }

    /// The session's tracer and this run's trace, when the session exports traces.
    fn tracing(&self) -> Option<(&dyn Tracer, &dyn TracedRun)> {
        let tracer = self.inner.outlets.tracer.as_deref()?;
        Some((tracer, self.inner.traced.as_deref()?))
    }

    fn trace(&self) -> Option<&RunTrace> {
        self.inner.traced.as_ref().map(|traced| traced.trace())
    }

    /// Says what this run runs, for its trace: its plan's shape, made by the tracer the first
    /// time (`shape` holds it), and the root span's `attributes` (both asked for only when the
    /// run is sampled).
    pub fn describe(
        &self,
        shape: impl FnOnce(&dyn Tracer) -> TraceShape,
        attributes: impl FnOnce() -> Vec<(&'static str, String)>,
    ) {
        if let Some((tracer, run)) = self.tracing()
            && run.trace().sampled
        {
            run.describe(shape(tracer), attributes());
        }
    }

    /// Whether this run's model calls should carry their messages and answer for its trace:
    /// only a sampled run of a session that captures content (`--trace-content`).
    pub fn captures_content(&self) -> bool {
        self.tracing()
            .is_some_and(|(tracer, run)| run.trace().sampled && tracer.captures_content())
    }

    /// The id of the trace this run belongs to, when the session exports traces.
    pub fn trace_id(&self) -> Option<String> {
        self.trace().map(RunTrace::trace_id_hex)
    }

    /// The `traceparent` naming span `span` of this run, when the session exports traces (what
    /// the `openai` engine sends, so the server's spans join the trace).
    pub fn traceparent(&self, span: SpanId) -> Option<TraceParent> {
        self.trace().map(|trace| trace.traceparent(span))
    }

    /// Where this run's streamed text goes besides the build's sink, if anyone watches it.
    pub fn tokens(&self) -> Option<&TokenSink> {
        self.inner.watch.tokens.as_ref()
    }

    pub fn run_id(&self) -> &str {
        &self.inner.run_id
    }

    /// The run's own span.
    pub fn run_span(&self) -> SpanId {
        SpanId::RUN
    }

    /// A fresh span id.
    pub fn new_span(&self) -> SpanId {
        SpanId::numbered(self.inner.next_span.fetch_add(1, Ordering::Relaxed))
    }

    /// Milliseconds since the run started.
    pub fn elapsed_ms(&self) -> f64 {
        self.inner.started.elapsed().as_secs_f64() * 1000.0
    }

    /// Records an event.
    pub fn emit(&self, step: Option<&str>, span: SpanId, parent: Option<SpanId>, data: EventData) {
        self.emit_event(Event {
            run_id: self.inner.run_id.clone(),
            at: Timestamp::now(),
            at_ms: (self.elapsed_ms() * 1000.0).round() / 1000.0,
            step: step.map(str::to_string),
            span,
            parent_span: parent,
            parent_run_id: None,
            tool_call_id: None,
            request_id: None,
            data,
        });
    }

    /// Records the run's move to `state`.
    pub fn lifecycle(&self, state: Lifecycle) {
        self.emit(None, self.run_span(), None, EventData::Lifecycle { state });
    }

    /// Records a fully built event (tool events set `tool_call_id`); a nested run's events are
    /// linked to the run and step that started it here, and a watched run's carry the id its
    /// watcher knows it by.
    pub fn emit_event(&self, mut event: Event) {
        event.request_id.clone_from(&self.inner.watch.request_id);
        if let Some(link) = &self.inner.parent {
            event.parent_run_id = Some(link.run_id.clone());
            if event.parent_span.is_none() {
                event.parent_span = Some(link.span);
            }
        }
        self.inner.outlets.sinks.receive(&event);
        if let Some(run) = &self.inner.traced {
            run.receive(&event);
        }
        if let Some(watcher) = &self.inner.watch.events {
            watcher(&event);
        }
    }
}

#[cfg(test)]
impl Events {
    /// Events of a run kept in memory.
    pub fn recording() -> Self {
        Self::new(Arc::new(Sinks::recording()))
    }

    /// The events recorded so far, of this run and every run sharing its sinks (only for
    /// [`Events::recording`]).
    pub fn recorded(&self) -> Vec<Event> {
        self.inner.outlets.sinks.recorded()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;
    use crate::orchestrate::events::Observer;

    #[test]
    fn a_watched_run_shows_its_own_events_to_its_watcher_and_the_others_to_nobody_else() {
        let session = Events::recording();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let watcher: Observer = {
            let seen = Arc::clone(&seen);
            Box::new(move |event: &Event| {
                if let Ok(mut seen) = seen.lock() {
                    seen.push(event.run_id.clone());
                }
            })
        };
        let tokens: TokenSink = Arc::new(|_: &str| {});
        let watched = session.new_run_watched(Watch {
            events: Some(watcher),
            tokens: Some(tokens),
            request_id: Some("req-7".into()),
        });
        let other = session.new_run();
        watched.lifecycle(Lifecycle::Execute);
        other.lifecycle(Lifecycle::Execute);
        assert_eq!(*seen.lock().expect("seen"), [watched.run_id().to_string()]);
        assert_eq!(
            session.recorded().len(),
            2,
            "both still reach the session's outputs"
        );
        assert!(watched.tokens().is_some() && other.tokens().is_none());
        let request_ids: Vec<Option<String>> = session
            .recorded()
            .into_iter()
            .map(|event| event.request_id)
            .collect();
        assert_eq!(
            request_ids,
            [Some("req-7".to_string()), None],
            "only the watched run's events carry its request id"
        );
    }

    #[test]
    fn a_nested_run_has_its_own_id_and_its_events_hang_from_the_step_that_started_it() {
        let parent = Events::recording();
        let step_span = parent.new_span();
        let nested = parent.nested_run(step_span);
        nested.lifecycle(Lifecycle::Execute);
        let inner_step = nested.new_span();
        nested.emit(
            Some("lookup"),
            inner_step,
            Some(nested.run_span()),
            EventData::StepStart { attempt: 1 },
        );
        let recorded = parent.recorded();
        assert_eq!(
            recorded.len(),
            2,
            "the nested run's events reach the same sinks"
        );
        assert!(recorded.iter().all(|e| e.run_id == nested.run_id()));
        assert_ne!(nested.run_id(), parent.run_id());
        assert!(
            recorded
                .iter()
                .all(|e| e.parent_run_id.as_deref() == Some(parent.run_id()))
        );
        assert_eq!(
            recorded[0].parent_span,
            Some(step_span),
            "the run-level event hangs from the step"
        );
        assert_eq!(
            recorded[1].parent_span,
            Some(SpanId::RUN),
            "its steps hang from its own run"
        );
        let line = serde_json::to_value(&recorded[0]).expect("json");
        assert_eq!(line["parent_run_id"], parent.run_id());
    }
}
