//! Streamed replies (`stream: true`): server-sent events parsed by `eventsource-stream`, each
//! event's data a completion chunk whose text goes to the sink as it arrives and whose tool-call
//! pieces are put together by index.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use eventsource_stream::{EventStreamError, Eventsource};
use futures_util::{Stream, StreamExt};

use super::failure::{malformed, too_long};
use super::wire::{PartialCall, WireReply};
use super::{MAX_BODY, OpenAiEngine};
use crate::core::{Failure, TokenUsage};
use crate::inference::{CacheStatus, Response, Timings, TokenSink};

impl OpenAiEngine {
    /// Reads a streamed reply, passing text to `sink` as it arrives.
    pub(super) async fn read_stream(
        &self,
        response: reqwest::Response,
        sink: &TokenSink,
    ) -> Result<Response, Failure> {
        let over_cap = Arc::new(AtomicBool::new(false));
        let mut events = data_events(capped(response.bytes_stream(), Arc::clone(&over_cap)));
        let mut state = StreamState::default();
        let mut any = false;
        while let Some(event) = events.next().await {
            any = true;
            let data = event.map_err(|err| match err {
                EventStreamError::Transport(err) => self.transport_failure(&err),
                other => malformed(format!("the server's event stream does not parse: {other}")),
            })?;
            if self.apply_event(&mut state, &data, sink)? == Flow::Done {
                return Ok(state.finish());
            }
        }
        if over_cap.load(Ordering::Relaxed) {
            return Err(too_long());
        }
        if !any {
            return Err(malformed(
                "the server answered the streaming request with neither events nor a JSON completion"
                    .to_string(),
            ));
        }
        Ok(state.finish())
    }

    /// Applies one `data:` payload of the stream.
    pub(super) fn apply_event(
        &self,
        state: &mut StreamState,
        data: &str,
        sink: &TokenSink,
    ) -> Result<Flow, Failure> {
        if data.trim() == "[DONE]" {
            return Ok(Flow::Done);
        }
        let chunk: WireReply = serde_json::from_str(data).map_err(|err| {
            malformed(format!(
                "the server streamed an event that is not a completion chunk: {err}"
            ))
        })?;
        if let Some(error) = &chunk.error {
            return Err(self.reported_error(error));
        }
        state.apply(chunk, sink);
        Ok(Flow::More)
    }
}

/// Whether a stream goes on.
#[derive(Debug, PartialEq)]
pub(super) enum Flow {
    More,
    Done,
}

/// What a stream has said so far.
#[derive(Default)]
pub(super) struct StreamState {
    pub(super) text: String,
    /// By the index the server gives each call.
    pub(super) tool_calls: BTreeMap<usize, PartialCall>,
    pub(super) usage: TokenUsage,
}

impl StreamState {
    pub(super) fn apply(&mut self, chunk: WireReply, sink: &TokenSink) {
        if let Some(usage) = chunk.usage {
            self.usage = usage.into_usage();
        }
        let delta = chunk
            .choices
            .unwrap_or_default()
            .into_iter()
            .next()
            .and_then(|choice| choice.delta);
        let Some(delta) = delta else {
            return;
        };
        if let Some(piece) = delta.content.filter(|piece| !piece.is_empty()) {
            sink(&piece);
            self.text.push_str(&piece);
        }
        for (position, call) in delta.tool_calls.unwrap_or_default().into_iter().enumerate() {
            let index = call.index.unwrap_or(position);
            self.tool_calls.entry(index).or_default().extend(call);
        }
    }

    pub(super) fn finish(self) -> Response {
        Response {
            text: self.text,
            tool_calls: self
                .tool_calls
                .into_values()
                .enumerate()
                .map(|(i, call)| call.finish(i))
                .collect(),
            usage: self.usage,
            timings: Timings::default(),
            cache: CacheStatus::Unused,
            schema_mode: None,
        }
    }
}

/// The data of each event of a server-sent event stream, whatever the boundaries of the chunks it
/// arrives in: the lines of a multi-line `data:` joined with newlines, comments and other fields
/// skipped, as the SSE format says. Events with no data are dropped.
pub(super) fn data_events<S, B, E>(
    bytes: S,
) -> impl Stream<Item = Result<String, EventStreamError<E>>>
where
    S: Stream<Item = Result<B, E>>,
    B: AsRef<[u8]>,
{
    bytes
        .eventsource()
        .map(|event| event.map(|event| event.data))
        .filter(|data| std::future::ready(data.as_ref().map_or(true, |d| !d.trim().is_empty())))
}

/// The stream until it has carried `MAX_BODY` bytes; past that it ends early and sets `over`.
fn capped<S, B, E>(bytes: S, over: Arc<AtomicBool>) -> impl Stream<Item = Result<B, E>>
where
    S: Stream<Item = Result<B, E>>,
    B: AsRef<[u8]>,
{
    bytes.scan(0usize, move |read, chunk| {
        if let Ok(bytes) = &chunk {
            *read = read.saturating_add(bytes.as_ref().len());
            if *read > MAX_BODY {
                over.store(true, Ordering::Relaxed);
                return std::future::ready(None);
            }
        }
        std::future::ready(Some(chunk))
    })
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;

    use super::*;

    /// Collects the event data of `stream` sent in pieces of `size` bytes.
    async fn split_every(stream: &str, size: usize) -> Vec<String> {
        let pieces: Vec<Result<Vec<u8>, Infallible>> = stream
            .as_bytes()
            .chunks(size)
            .map(|piece| Ok(piece.to_vec()))
            .collect();
        data_events(futures_util::stream::iter(pieces))
            .map(|data| data.expect("parses"))
            .collect()
            .await
    }

    #[tokio::test]
    async fn events_survive_any_split_and_multi_line_data_is_joined() {
        let stream = "data: {\"a\":1}\r\n\r\nevent: x\n: comment\ndata:{\"b\":\"é\"}\n\n\
                      data: {\"c\":\ndata: 2}\n\ndata: [DONE]\n\n";
        for size in 1..stream.len() {
            assert_eq!(
                split_every(stream, size).await,
                ["{\"a\":1}", "{\"b\":\"é\"}", "{\"c\":\n2}", "[DONE]"],
                "split every {size} bytes"
            );
        }
    }

    #[tokio::test]
    async fn a_stream_past_its_cap_ends_and_says_so() {
        let over = Arc::new(AtomicBool::new(false));
        let pieces: Vec<Result<Vec<u8>, Infallible>> =
            vec![Ok(vec![b'x'; MAX_BODY]), Ok(vec![b'y'; 2])];
        let passed: Vec<_> = capped(futures_util::stream::iter(pieces), Arc::clone(&over))
            .collect()
            .await;
        assert_eq!(passed.len(), 1);
        assert!(over.load(Ordering::Relaxed));
    }
}
