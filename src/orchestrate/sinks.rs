//! Where a session's events go: every sink receives each typed [`Event`] of every run of the
//! session, as it happens, and does what it is for with it — the JSON Lines file of `--events`,
//! an observer such as the progress lines, a recorder in tests. A sink only receives: what a run
//! spends is counted by its ledger, never read back from events, so adding a sink changes no
//! number and no sink can disagree with another about what happened. The trace exporter takes
//! the same events, from each run's own `Events`, which keep the run's trace beside them.

use std::io::Write;
use std::path::Path;
use std::sync::Mutex;

use serde::Serialize;

use super::events::{Event, Observer};
use crate::core::{Failure, FailureCode};

/// Receives events; see the module docs. A sink must not fail the run: what it cannot do, it
/// drops.
pub trait EventSink: Send + Sync {
    fn receive(&self, event: &Event);
}

/// Every sink of a session, in the order they receive each event.
#[derive(Default)]
pub struct Sinks {
    sinks: Vec<Box<dyn EventSink>>,
    /// The recorder among them, for tests to read back.
    #[cfg(test)]
    recorder: Option<std::sync::Arc<Recorder>>,
}

#[cfg(test)]
impl Sinks {
    /// Sinks that only keep events in memory.
    pub fn recording() -> Self {
        let recorder = std::sync::Arc::new(Recorder::default());
        Sinks {
            recorder: Some(std::sync::Arc::clone(&recorder)),
            ..Sinks::default()
        }
        .with(recorder)
    }

    /// What the recorder kept (nothing without one).
    pub fn recorded(&self) -> Vec<Event> {
        self.recorder
            .as_ref()
            .map(|r| r.events())
            .unwrap_or_default()
    }
}

impl Sinks {
    /// Adds a sink (it receives events after those added before it).
    pub fn with(mut self, sink: impl EventSink + 'static) -> Self {
        self.sinks.push(Box::new(sink));
        self
    }

    /// Adds `sink` when there is one.
    pub fn with_some(self, sink: Option<impl EventSink + 'static>) -> Self {
        match sink {
            Some(sink) => self.with(sink),
            None => self,
        }
    }

    pub fn receive(&self, event: &Event) {
        for sink in &self.sinks {
            sink.receive(event);
        }
    }
}

/// Shows every event to a closure (the progress lines, a chat's tool lines).
pub struct Observing(pub Observer);

impl EventSink for Observing {
    fn receive(&self, event: &Event) {
        (self.0)(event);
    }
}

/// The `--events` file: one JSON object per line, flushed as it is written, so a crash loses
/// nothing already said. In a chat session every line carries the session's id first.
pub struct JsonLinesFile {
    file: Mutex<Box<dyn Write + Send>>,
    session: Option<String>,
}

/// An event as the events file of a chat session holds it: the session id first.
#[derive(Serialize)]
struct InSession<'a> {
    session: &'a str,
    #[serde(flatten)]
    event: &'a Event,
}

impl JsonLinesFile {
    /// Creates (or truncates) the file at `path`.
    pub fn create(path: &Path, session: Option<String>) -> Result<Self, Failure> {
        let file = std::fs::File::create(path).map_err(|e| {
            Failure::new(
                FailureCode::ConfigFileError,
                format!("cannot write events to {}: {e}", path.display()),
            )
            .with_help("--events needs a file path in a directory that exists and is writable")
        })?;
        Ok(Self::to_writer(
            Box::new(std::io::BufWriter::new(file)),
            session,
        ))
    }

    /// Lines written to `writer`.
    pub fn to_writer(writer: Box<dyn Write + Send>, session: Option<String>) -> Self {
        JsonLinesFile {
            file: Mutex::new(writer),
            session,
        }
    }
}

impl EventSink for JsonLinesFile {
    fn receive(&self, event: &Event) {
        let line = match &self.session {
            Some(session) => serde_json::to_string(&InSession { session, event }),
            None => serde_json::to_string(event),
        };
        if let Ok(line) = line
            && let Ok(mut file) = self.file.lock()
        {
            // An events file that cannot be written must not fail the run.
            let _ = writeln!(file, "{line}");
            let _ = file.flush();
        }
    }
}

/// Keeps every event in memory (tests read them back).
#[cfg(test)]
#[derive(Default)]
pub struct Recorder {
    kept: Mutex<Vec<Event>>,
}

#[cfg(test)]
impl Recorder {
    pub fn events(&self) -> Vec<Event> {
        self.kept.lock().map(|k| k.clone()).unwrap_or_default()
    }
}

#[cfg(test)]
impl EventSink for std::sync::Arc<Recorder> {
    fn receive(&self, event: &Event) {
        if let Ok(mut kept) = self.kept.lock() {
            kept.push(event.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;
    use crate::core::Timestamp;
    use crate::orchestrate::events::{EventData, SpanId};
    use crate::orchestrate::record::Lifecycle;

    /// A writer whose bytes the test can read back.
    #[derive(Clone, Default)]
    struct Shared(Arc<Mutex<Vec<u8>>>);

    impl Write for Shared {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().expect("buffer").extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn lifecycle(state: Lifecycle) -> Event {
        Event {
            run_id: "r1".into(),
            at: Timestamp::now(),
            at_ms: 0.0,
            step: None,
            span: SpanId::RUN,
            parent_span: None,
            parent_run_id: None,
            tool_call_id: None,
            request_id: None,
            data: EventData::Lifecycle { state },
        }
    }

    #[test]
    fn every_sink_receives_every_event_and_a_chat_s_lines_carry_its_session_first() {
        let buffer = Shared::default();
        let recorder = Arc::new(Recorder::default());
        let sinks = Sinks::default()
            .with(JsonLinesFile::to_writer(
                Box::new(buffer.clone()),
                Some("chat-1".into()),
            ))
            .with(Arc::clone(&recorder));
        sinks.receive(&lifecycle(Lifecycle::Init));
        sinks.receive(&lifecycle(Lifecycle::Plan));
        assert_eq!(recorder.events().len(), 2);
        let text = String::from_utf8(buffer.0.lock().expect("buffer").clone()).expect("utf-8");
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2);
        assert!(
            lines[0].starts_with(r#"{"session":"chat-1","run_id":"r1","#),
            "{}",
            lines[0]
        );
    }
}
