//! The OTLP/protobuf wire form of spans (`opentelemetry/proto/trace/v1/trace.proto`, and the
//! `ExportTraceServiceRequest` that carries them), written straight from what the trace sink
//! knows into one buffer per span.
//!
//! Why not the SDK's span type and its conversion to the generated structs: a batch of 100,000
//! rows makes half a million spans, and that road allocates a string for every attribute key and
//! value, twice, then walks every span again to group it by scope; on a two-core machine it took
//! a fifth of the batch's speed. Here attribute keys are the conventions' static names and
//! values are copied once, into place. The varint and key encoding is prost's; the field
//! numbers are OTLP's, stable since 1.0; the tests decode what is written here with the
//! generated `opentelemetry-proto` types, so the two cannot drift apart unseen.

use std::io::Write;
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use opentelemetry::{Array, Value};
use prost::encoding::{WireType, encode_varint, encoded_len_varint};

/// The field that holds a message's attributes: a span's, a span event's, a resource's.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Of {
    Span,
    Event,
    Resource,
}

impl Of {
    fn field(self) -> u32 {
        match self {
            Of::Span => 9,
            Of::Event => 3,
            Of::Resource => 1,
        }
    }
}

/// A message's attributes, encoded as they are added (repeated `KeyValue` fields).
#[derive(Debug, Clone, PartialEq)]
pub struct Attributes {
    of: Of,
    bytes: Vec<u8>,
}

impl Default for Attributes {
    /// No span attributes.
    fn default() -> Attributes {
        Attributes {
            of: Of::Span,
            bytes: Vec::new(),
        }
    }
}

/// An attribute's value (an `AnyValue`).
#[derive(Clone, Copy)]
pub enum Attr<'a> {
    Str(&'a str),
    Int(i64),
    Double(f64),
    Bool(bool),
    /// A list of strings (`gen_ai.response.finish_reasons`).
    Strs(&'a [&'a str]),
    /// A string in two parts written one after the other (`pagantic.` and an engine's name).
    Joined(&'a str, &'a str),
    /// A string written from its display form, so it is never put together on its own.
    Shown(&'a dyn std::fmt::Display),
}

impl Attributes {
    /// No attributes yet, of a message `of`.
    pub fn new(of: Of) -> Attributes {
        Attributes {
            of,
            bytes: Vec::with_capacity(if of == Of::Span { 512 } else { 0 }),
        }
    }

    /// Attributes that never change (`key`, `value` pairs), encoded once to be copied into
    /// every span that carries them.
    pub fn constant(pairs: &[(&str, &str)]) -> Attributes {
        let mut attributes = Attributes::default();
        for (key, value) in pairs {
            attributes.str(key, value);
        }
        attributes
    }

    /// Adds every attribute of `other`.
    pub fn extend(&mut self, other: &Attributes) {
        debug_assert_eq!(self.of, other.of);
        self.bytes.extend_from_slice(&other.bytes);
    }

    /// Adds `key` = `value`: its length worked out first, so the pair is written straight
    /// through, once.
    pub fn add(&mut self, key: &str, value: Attr<'_>) {
        let buf = &mut self.bytes;
        let Some(value_len) = value.encoded_len() else {
            message(buf, self.of.field(), |buf| {
                string(buf, 1, key);
                message(buf, 2, |buf| any_value(buf, value));
            });
            return;
        };
        let pair = string_len(key) + field_len(value_len);
        delimited(buf, self.of.field(), pair);
        string(buf, 1, key);
        delimited(buf, 2, value_len);
        any_value(buf, value);
    }

    pub fn str(&mut self, key: &str, value: &str) {
        self.add(key, Attr::Str(value));
    }

    pub fn int(&mut self, key: &str, value: i64) {
        self.add(key, Attr::Int(value));
    }

    /// A count, as an `int` (saturating at `i64::MAX`).
    pub fn count(&mut self, key: &str, value: u64) {
        self.int(key, i64::try_from(value).unwrap_or(i64::MAX));
    }

    pub fn bool(&mut self, key: &str, value: bool) {
        self.add(key, Attr::Bool(value));
    }

    pub fn double(&mut self, key: &str, value: f64) {
        self.add(key, Attr::Double(value));
    }

    /// Adds an OpenTelemetry API value (a resource's attributes, read from the environment).
    pub fn value(&mut self, key: &str, value: &Value) {
        message(&mut self.bytes, self.of.field(), |buf| {
            string(buf, 1, key);
            message(buf, 2, |buf| api_value(buf, value));
        });
    }
}

impl Attr<'_> {
    /// The length of its `AnyValue` message, when known before it is written.
    fn encoded_len(&self) -> Option<usize> {
        let len = match self {
            // A value is one field of a `oneof`: written even when empty, unlike a plain string.
            Attr::Str(text) => field_len(text.len()),
            Attr::Joined(first, second) => field_len(first.len() + second.len()),
            Attr::Bool(_) => 2,
            Attr::Int(number) => 1 + encoded_len_varint(*number as u64),
            Attr::Double(_) => 9,
            Attr::Strs(texts) => {
                field_len(texts.iter().map(|t| field_len(field_len(t.len()))).sum())
            }
            Attr::Shown(_) => return None,
        };
        Some(len)
    }
}

fn any_value(buf: &mut Vec<u8>, value: Attr<'_>) {
    match value {
        Attr::Str(text) => bytes(buf, 1, text.as_bytes()),
        Attr::Bool(on) => {
            key(2, WireType::Varint, buf);
            varint(buf, u64::from(on));
        }
        Attr::Int(number) => {
            key(3, WireType::Varint, buf);
            // int64 is written as its two's complement, as protobuf does.
            varint(buf, number as u64);
        }
        Attr::Double(number) => {
            key(4, WireType::SixtyFourBit, buf);
            buf.extend_from_slice(&number.to_le_bytes());
        }
        Attr::Joined(first, second) => {
            delimited(buf, 1, first.len() + second.len());
            buf.extend_from_slice(first.as_bytes());
            buf.extend_from_slice(second.as_bytes());
        }
        Attr::Shown(value) => message(buf, 1, |buf| {
            // Writing to a Vec cannot fail.
            let _ = write!(buf, "{value}");
        }),
        Attr::Strs(texts) => message(buf, 5, |buf| {
            for text in texts {
                message(buf, 1, |buf| any_value(buf, Attr::Str(text)));
            }
        }),
    }
}

fn api_value(buf: &mut Vec<u8>, value: &Value) {
    let each = |buf: &mut Vec<u8>, values: &mut dyn Iterator<Item = Attr<'_>>| {
        message(buf, 5, |buf| {
            for value in values {
                message(buf, 1, |buf| any_value(buf, value));
            }
        });
    };
    match value {
        Value::Bool(on) => any_value(buf, Attr::Bool(*on)),
        Value::I64(number) => any_value(buf, Attr::Int(*number)),
        Value::F64(number) => any_value(buf, Attr::Double(*number)),
        Value::String(text) => any_value(buf, Attr::Str(text.as_str())),
        Value::Array(Array::Bool(all)) => each(buf, &mut all.iter().map(|v| Attr::Bool(*v))),
        Value::Array(Array::I64(all)) => each(buf, &mut all.iter().map(|v| Attr::Int(*v))),
        Value::Array(Array::F64(all)) => each(buf, &mut all.iter().map(|v| Attr::Double(*v))),
        Value::Array(Array::String(all)) => {
            each(buf, &mut all.iter().map(|v| Attr::Str(v.as_str())));
        }
        // A kind of value added to the API after this was written: its text form.
        other => any_value(buf, Attr::Str(&other.to_string())),
    }
}

/// The OTLP span kinds pagantic uses.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Kind {
    Internal = 1,
    Client = 3,
}

/// An event on a span (a retry, a feedback loop, a skipped step on a run's root span).
#[derive(Debug, Clone)]
pub struct SpanEvent {
    pub name: &'static str,
    /// When, in nanoseconds since the Unix epoch.
    pub time: u64,
    pub attributes: Attributes,
}

/// A link to another trace's span (a batch row's root span to the batch's).
#[derive(Debug, Clone, Copy)]
pub struct Link {
    pub trace_id: [u8; 16],
    pub span_id: [u8; 8],
    pub flags: u32,
}

/// One span, as the sink knows it when it ends (its attributes aside: see [`Span::encode`]).
pub struct Span<'a> {
    pub trace_id: [u8; 16],
    pub span_id: [u8; 8],
    /// Absent for a trace's first span.
    pub parent_span_id: Option<[u8; 8]>,
    /// The W3C `tracestate` header the trace carries, if any.
    pub trace_state: &'a str,
    /// W3C trace flags in the low byte, and whether the parent is remote (OTLP's span flags).
    pub flags: u32,
    /// The name, in two parts written one after the other (`chat ` and the model, say), so
    /// it is never put together in a string of its own.
    pub name: (&'a str, &'a str),
    pub kind: Kind,
    /// When it started and ended, in nanoseconds since the Unix epoch.
    pub start: u64,
    pub end: u64,
    pub events: &'a [SpanEvent],
    pub links: &'a [Link],
    /// The status message of a span that failed (its status is then ERROR).
    pub error: Option<&'a str>,
}

impl Span<'_> {
    /// The encoded `Span` message (without its field key and length) with `attributes`, written
    /// after them in the same buffer: protobuf readers take a message's fields in any order.
    pub fn encode(&self, attributes: Attributes) -> Vec<u8> {
        debug_assert_eq!(attributes.of, Of::Span);
        let mut buf = attributes.bytes;
        self.encode_shared(&mut buf);
        self.encode_own(&mut buf);
        buf
    }

    /// What it shares with the spans of the same step's usual attempts, encoded once for all of
    /// them: its `attributes`, and its fields but its ids and times.
    pub fn shared(&self, attributes: Attributes) -> Shared {
        let mut buf = attributes.bytes;
        self.encode_shared(&mut buf);
        Shared(buf)
    }

    /// Appends it to `framed` as [`frame`] does, from `shared` (the rest of it, encoded for a
    /// span it shares it with) and its ids and times: the bytes [`Span::encode`] writes, in
    /// place, with nothing encoded twice.
    pub fn frame_with(&self, framed: &mut Vec<u8>, shared: &Shared) {
        let own = field_len(16)
            + field_len(8)
            + self.parent_span_id.map_or(0, |_| field_len(8))
            + 2 * (1 + 8);
        delimited(framed, 2, shared.0.len() + own);
        framed.extend_from_slice(&shared.0);
        let at = framed.len();
        self.encode_own(framed);
        debug_assert_eq!(framed.len() - at, own);
    }

    /// Its ids and times: what differs between two spans of a step's usual attempts.
    fn encode_own(&self, buf: &mut Vec<u8>) {
        bytes(buf, 1, &self.trace_id);
        bytes(buf, 2, &self.span_id);
        if let Some(parent) = &self.parent_span_id {
            bytes(buf, 4, parent);
        }
        fixed64(buf, 7, self.start);
        fixed64(buf, 8, self.end);
    }

    /// Its fields but its attributes, ids and times.
    fn encode_shared(&self, buf: &mut Vec<u8>) {
        string(buf, 3, self.trace_state);
        let (first, second) = self.name;
        delimited(buf, 5, first.len() + second.len());
        buf.extend_from_slice(first.as_bytes());
        buf.extend_from_slice(second.as_bytes());
        key(6, WireType::Varint, buf);
        varint(buf, self.kind as u64);
        for event in self.events {
            message(buf, 11, |buf| {
                fixed64(buf, 1, event.time);
                string(buf, 2, event.name);
                buf.extend_from_slice(&event.attributes.bytes);
            });
        }
        for link in self.links {
            message(buf, 13, |buf| {
                bytes(buf, 1, &link.trace_id);
                bytes(buf, 2, &link.span_id);
                fixed32(buf, 6, link.flags);
            });
        }
        if let Some(message_text) = self.error {
            message(buf, 15, |buf| {
                string(buf, 2, message_text);
                key(3, WireType::Varint, buf);
                varint(buf, 2); // STATUS_CODE_ERROR
            });
        }
        fixed32(buf, 16, self.flags);
    }
}

/// The encoded fields that the spans of a step's usual attempts share (see [`Span::shared`]).
#[derive(Debug, Default)]
pub struct Shared(Vec<u8>);

/// What every export request repeats around its spans: the resource and the instrumentation
/// scope, encoded once.
#[derive(Debug, Clone)]
pub struct Envelope {
    /// The `Resource` message.
    resource: Vec<u8>,
    resource_schema: String,
    /// The `InstrumentationScope` message.
    scope: Vec<u8>,
    scope_schema: String,
}

impl Envelope {
    /// The envelope of `resource` (encoded [`Attributes`] of [`Of::Resource`]) and the scope
    /// named `name` at `version` following the conventions at `schema_url`.
    pub fn new(
        resource: &Attributes,
        resource_schema: &str,
        name: &str,
        version: &str,
        schema_url: &str,
    ) -> Envelope {
        let mut scope = Vec::new();
        string(&mut scope, 1, name);
        string(&mut scope, 2, version);
        Envelope {
            resource: resource.bytes.clone(),
            resource_schema: resource_schema.to_string(),
            scope,
            scope_schema: schema_url.to_string(),
        }
    }

    /// The room to keep before a request's spans for [`Envelope::wrap`] to write the envelope
    /// in: its fields, and two lengths of up to ten bytes.
    pub fn room(&self) -> usize {
        2 * (1 + 10)
            + field_len(self.resource.len())
            + string_len(&self.resource_schema)
            + field_len(self.scope.len())
            + string_len(&self.scope_schema)
    }

    /// The `ExportTraceServiceRequest` of the spans in `framed` (each [`frame`]d) after its
    /// first `room` bytes, at least [`Envelope::room`]: the envelope is written into that room,
    /// just before the spans, so they are not copied again. Its fields come before the spans,
    /// the schema URLs included, which protobuf allows (a message's fields in any order).
    pub fn wrap(&self, mut framed: Vec<u8>, room: usize) -> Bytes {
        let scope_spans =
            field_len(self.scope.len()) + string_len(&self.scope_schema) + framed.len() - room;
        let resource_spans = field_len(self.resource.len())
            + string_len(&self.resource_schema)
            + field_len(scope_spans);
        let mut head = Vec::with_capacity(self.room());
        delimited(&mut head, 1, resource_spans);
        bytes(&mut head, 1, &self.resource);
        string(&mut head, 3, &self.resource_schema);
        delimited(&mut head, 2, scope_spans);
        bytes(&mut head, 1, &self.scope);
        string(&mut head, 3, &self.scope_schema);
        let start = room - head.len();
        framed[start..room].copy_from_slice(&head);
        Bytes::from(framed).slice(start..)
    }
}

/// Appends `span` (an encoded `Span`) to `framed` as a `spans` field of a `ScopeSpans`.
pub fn frame(framed: &mut Vec<u8>, span: &[u8]) {
    bytes(framed, 2, span);
}

/// The bytes a length-delimited field of `len` bytes takes, its key included (fields 1 to 15
/// have one-byte keys; the envelope and attributes use no other).
#[inline(always)]
fn field_len(len: usize) -> usize {
    1 + encoded_len_varint(len as u64) + len
}

/// The bytes `text` takes as a string field; nothing when empty (proto3 leaves it out).
#[inline(always)]
fn string_len(text: &str) -> usize {
    if text.is_empty() {
        0
    } else {
        field_len(text.len())
    }
}

/// A length-delimited field's key and length; its `len` bytes follow.
#[inline(always)]
fn delimited(buf: &mut Vec<u8>, field: u32, len: usize) {
    key(field, WireType::LengthDelimited, buf);
    varint(buf, len as u64);
}

/// A field's key (its number and wire type), as a varint.
#[inline(always)]
fn key(field: u32, wire_type: WireType, buf: &mut Vec<u8>) {
    varint(buf, u64::from(field << 3 | wire_type as u32));
}

/// `value` as a varint; most are a single byte (keys, attribute lengths), written directly.
#[inline(always)]
fn varint(buf: &mut Vec<u8>, value: u64) {
    if value < 0x80 {
        buf.push(value as u8);
    } else {
        encode_varint(value, buf);
    }
}

#[inline(always)]
fn bytes(buf: &mut Vec<u8>, field: u32, value: &[u8]) {
    delimited(buf, field, value.len());
    buf.extend_from_slice(value);
}

#[inline(always)]
fn string(buf: &mut Vec<u8>, field: u32, text: &str) {
    if !text.is_empty() {
        bytes(buf, field, text.as_bytes());
    }
}

#[inline(always)]
fn fixed64(buf: &mut Vec<u8>, field: u32, value: u64) {
    key(field, WireType::SixtyFourBit, buf);
    buf.extend_from_slice(&value.to_le_bytes());
}

#[inline(always)]
fn fixed32(buf: &mut Vec<u8>, field: u32, value: u32) {
    key(field, WireType::ThirtyTwoBit, buf);
    buf.extend_from_slice(&value.to_le_bytes());
}

/// A nested message written in place by `body`: one byte is kept for its length, and the body
/// moved along in the rare case the length needs more (a body of 128 bytes or more).
fn message(buf: &mut Vec<u8>, field: u32, body: impl FnOnce(&mut Vec<u8>)) {
    key(field, WireType::LengthDelimited, buf);
    let at = buf.len();
    buf.push(0);
    body(buf);
    let len = buf.len() - at - 1;
    let width = encoded_len_varint(len as u64);
    if width > 1 {
        buf.resize(buf.len() + width - 1, 0);
        buf.copy_within(at + 1..at + 1 + len, at + width);
    }
    let mut slot = &mut buf[at..at + width];
    encode_varint(len as u64, &mut slot);
}

/// A trace's first span named `name`, ended as it started, with nothing else to it.
#[cfg(test)]
pub fn bare_span(name: &str) -> Vec<u8> {
    let now = nanos(SystemTime::now());
    let span = Span {
        trace_id: [7; 16],
        span_id: [1; 8],
        parent_span_id: None,
        trace_state: "",
        flags: 0x101,
        name: (name, ""),
        kind: Kind::Internal,
        start: now,
        end: now,
        events: &[],
        links: &[],
        error: None,
    };
    span.encode(Attributes::new(Of::Span))
}

/// Nanoseconds since the Unix epoch (0 for a time before it).
pub fn nanos(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH).map_or(0, |since| {
        u64::try_from(since.as_nanos()).unwrap_or(u64::MAX)
    })
}

#[cfg(test)]
mod tests {
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
    use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
    use opentelemetry_proto::tonic::common::v1::{AnyValue, ArrayValue, KeyValue};
    use opentelemetry_proto::tonic::trace::v1::status::StatusCode;
    use prost::Message;

    use super::*;

    fn kv(key: &str, value: Any) -> KeyValue {
        KeyValue {
            key: key.into(),
            value: Some(AnyValue { value: Some(value) }),
            key_strindex: 0,
        }
    }

    #[test]
    fn a_span_decodes_as_otlp_with_every_field_it_was_given() {
        let mut attributes = Attributes::new(Of::Span);
        attributes.str("gen_ai.request.model", "m");
        attributes.int("gen_ai.usage.input_tokens", -3);
        attributes.count("big", u64::MAX);
        attributes.bool("pagantic.cached", true);
        attributes.double("gen_ai.request.temperature", 0.25);
        attributes.add("reasons", Attr::Strs(&["stop", "", "length"]));
        // Long enough that its lengths take two bytes, moving the body along.
        let long = "x".repeat(300);
        attributes.str("gen_ai.input.messages", &long);
        attributes.add("provider", Attr::Joined("pagantic.", "scripted"));
        attributes.add("joined long", Attr::Joined("y", &long));
        attributes.add("shown", Attr::Shown(&format_args!("round {}", 3)));
        // An empty value is still a string value, not a missing one.
        attributes.extend(&Attributes::constant(&[("k", "v"), ("k2", "")]));
        attributes.add("joined empty", Attr::Joined("", ""));
        let mut noted = Attributes::new(Of::Event);
        noted.int("pagantic.step.next_attempt", 2);
        let start = 1_700_000_000_123_456_789;
        let span = Span {
            trace_id: [7; 16],
            span_id: [1; 8],
            parent_span_id: Some([2; 8]),
            trace_state: "vendor=value",
            flags: 0x301,
            name: ("chat ", "m"),
            kind: Kind::Client,
            start,
            end: start + 5_000_000,
            events: &[SpanEvent {
                name: "step_retry",
                time: start,
                attributes: noted,
            }],
            links: &[Link {
                trace_id: [9; 16],
                span_id: [8; 8],
                flags: 0x101,
            }],
            error: Some("STEP_FAILED"),
        };
        let mut resource = Attributes::new(Of::Resource);
        resource.value("service.name", &Value::from("pagantic"));
        resource.value("list", &Value::Array(Array::I64(vec![1, 2])));
        let envelope = Envelope::new(
            &resource,
            "https://r/1",
            "pagantic",
            "1.0",
            "https://s/1.37.0",
        );
        let room = envelope.room();
        let mut spans = vec![0; room];
        frame(&mut spans, &span.encode(attributes.clone()));
        frame(&mut spans, &span.encode(attributes));
        let request = envelope.wrap(spans, room);
        let decoded = ExportTraceServiceRequest::decode(&request[..]).expect("valid OTLP");
        let [resource_spans] = &decoded.resource_spans[..] else {
            panic!("{decoded:?}")
        };
        assert_eq!(resource_spans.schema_url, "https://r/1");
        let resource = resource_spans.resource.as_ref().expect("resource");
        assert_eq!(
            resource.attributes,
            [
                kv("service.name", Any::StringValue("pagantic".into())),
                kv(
                    "list",
                    Any::ArrayValue(ArrayValue {
                        values: vec![
                            AnyValue {
                                value: Some(Any::IntValue(1))
                            },
                            AnyValue {
                                value: Some(Any::IntValue(2))
                            },
                        ]
                    })
                ),
            ]
        );
        let [scope_spans] = &resource_spans.scope_spans[..] else {
            panic!("{resource_spans:?}")
        };
        assert_eq!(scope_spans.schema_url, "https://s/1.37.0");
        let scope = scope_spans.scope.as_ref().expect("scope");
        assert_eq!(
            (scope.name.as_str(), scope.version.as_str()),
            ("pagantic", "1.0")
        );
        assert_eq!(scope_spans.spans.len(), 2);
        let got = &scope_spans.spans[0];
        assert_eq!(got.trace_id, [7; 16]);
        assert_eq!(got.span_id, [1; 8]);
        assert_eq!(got.parent_span_id, [2; 8]);
        assert_eq!(got.trace_state, "vendor=value");
        assert_eq!(got.flags, 0x301);
        assert_eq!(got.name, "chat m");
        assert_eq!(got.kind, 3);
        assert_eq!(got.start_time_unix_nano, 1_700_000_000_123_456_789);
        assert_eq!(got.end_time_unix_nano, 1_700_000_000_128_456_789);
        let strings = |texts: &[&str]| {
            let values = texts
                .iter()
                .map(|text| AnyValue {
                    value: Some(Any::StringValue(text.to_string())),
                })
                .collect();
            Any::ArrayValue(ArrayValue { values })
        };
        assert_eq!(
            got.attributes,
            [
                kv("gen_ai.request.model", Any::StringValue("m".into())),
                kv("gen_ai.usage.input_tokens", Any::IntValue(-3)),
                kv("big", Any::IntValue(i64::MAX)),
                kv("pagantic.cached", Any::BoolValue(true)),
                kv("gen_ai.request.temperature", Any::DoubleValue(0.25)),
                kv("reasons", strings(&["stop", "", "length"])),
                kv("gen_ai.input.messages", Any::StringValue(long.clone())),
                kv("provider", Any::StringValue("pagantic.scripted".into())),
                kv("joined long", Any::StringValue(format!("y{long}"))),
                kv("shown", Any::StringValue("round 3".into())),
                kv("k", Any::StringValue("v".into())),
                kv("k2", Any::StringValue(String::new())),
                kv("joined empty", Any::StringValue(String::new())),
            ]
        );
        let [event] = &got.events[..] else {
            panic!("{got:?}")
        };
        assert_eq!(event.name, "step_retry");
        assert_eq!(event.time_unix_nano, 1_700_000_000_123_456_789);
        assert_eq!(
            event.attributes,
            [kv("pagantic.step.next_attempt", Any::IntValue(2))]
        );
        let [link] = &got.links[..] else {
            panic!("{got:?}")
        };
        assert_eq!(
            (&link.trace_id[..], &link.span_id[..]),
            (&[9; 16][..], &[8; 8][..])
        );
        assert_eq!(link.flags, 0x101);
        let status = got.status.as_ref().expect("status");
        assert_eq!(status.code, StatusCode::Error as i32);
        assert_eq!(status.message, "STEP_FAILED");
    }

    #[test]
    fn a_root_span_without_a_parent_or_error_leaves_those_fields_out() {
        let encoded = bare_span("invoke_workflow p");
        let decoded =
            opentelemetry_proto::tonic::trace::v1::Span::decode(&encoded[..]).expect("span");
        assert!(decoded.parent_span_id.is_empty() && decoded.trace_state.is_empty());
        assert_eq!(decoded.kind, 1);
        assert_eq!(decoded.status, None);
        // Before the epoch is 0, not a panic.
        assert_eq!(nanos(UNIX_EPOCH - std::time::Duration::from_secs(1)), 0);
    }
}
