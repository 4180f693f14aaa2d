//! Layer 4: OpenTelemetry traces of a session's runs, exported over OTLP/HTTP (protobuf) with the
//! GenAI semantic conventions (version 1.37.0, [`SEMCONV_SCHEMA`]), so Tempo, Jaeger, Phoenix,
//! Langfuse or Honeycomb show what a run did. An outlet above the run layer: the session is
//! opened with an [`Exporter`] as its `orchestrate::Tracer`, and hands it every event of every
//! run, the same typed events as the `--events` file (the sink in `sink.rs` makes them spans),
//! never a second instrumentation.
//!
//! Export is on when `--otlp URL`, `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` or
//! `OTEL_EXPORTER_OTLP_ENDPOINT` is given (and `OTEL_SDK_DISABLED` is not `true`); off, nothing
//! is built and nothing is sent. The standard variables are honoured: the service name and
//! resource attributes, headers (never printed), the timeout, the sampler. A collector that is
//! unreachable, slow, or answers garbage never fails or holds up a run: spans it did not take are
//! counted and reported once, when the session closes, which waits at most [`CLOSE_WITHIN`].
//! Content — prompts, answers, tool arguments and results — is exported only when asked for
//! (`--trace-content` or `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true`).
//! `OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental` changes nothing: 1.37.0 is the
//! only version of the conventions pagantic has emitted, so there is no older one to keep.
//!
//! | file | owns |
//! | --- | --- |
//! | `mod.rs` | the settings read from flags and the environment; the [`Exporter`] a session holds |
//! | `sink.rs` | events to spans: a run's spans in progress, names, parents, attributes |
//! | `span.rs` | a plan's and its steps' spans' constant parts; a span's ids; a step attempt's record |
//! | `content.rs` | captured messages and answers in the GenAI message format |
//! | `wire.rs` | spans and export requests in OTLP's protobuf form |
//! | `export.rs` | the bounded queue and the task that sends batches, on a thread of its own |
//! | `collector.rs` | the OTLP/HTTP endpoint: headers, the answer read |

mod collector;
mod content;
mod export;
mod sink;
mod span;
mod wire;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use opentelemetry_sdk::Resource;

use crate::core::TraceParent;
use crate::model_store::Notice;
use crate::orchestrate::{Origin, TraceShape, TracedRun, Tracer};

/// The schema URL of the OpenTelemetry semantic conventions (GenAI included) the spans follow,
/// version 1.37.0, set on the instrumentation scope.
pub const SEMCONV_SCHEMA: &str = "https://opentelemetry.io/schemas/1.37.0";
/// Longest captured text (a tool's arguments or result, a message's text part) in bytes.
pub const CONTENT_LIMIT: usize = 4096;
/// How long closing a session waits for queued spans to be sent.
pub const CLOSE_WITHIN: Duration = Duration::from_secs(2);

const CAPTURE_CONTENT: &str = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT";
/// The export thread's nice value on Linux, 0 to 19 (10 by default): 0 lets it compete with the
/// runs for the cores, so a busy machine drops fewer spans at some cost to the runs.
const EXPORT_NICE: &str = "PAGANTIC_TRACE_EXPORT_NICE";

/// What the command asks of tracing (its flags), besides the environment.
#[derive(Clone, Default)]
pub struct TraceSettings {
    /// `--otlp URL`: the collector's base URL, as `OTEL_EXPORTER_OTLP_ENDPOINT` takes it
    /// (`/v1/traces` is added unless the path already ends so).
    pub endpoint: Option<String>,
    /// `--trace-content`: export prompts, answers, tool arguments and results.
    pub capture_content: bool,
    /// The session's root span's name when it runs no plan of its own (`pagantic batch`).
    pub session_name: String,
    /// Told once, when the session closes, how many spans were not exported (and when export
    /// could not start).
    pub warn: Option<Notice>,
}

/// What tracing resolves to once the environment is read: None when it is off.
#[derive(Debug, Clone, PartialEq)]
struct Resolved {
    /// The traces URL: `--otlp`'s, else `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` as it is, else
    /// `OTEL_EXPORTER_OTLP_ENDPOINT` with `/v1/traces` added.
    endpoint: String,
    /// `OTEL_EXPORTER_OTLP_HEADERS`, then `OTEL_EXPORTER_OTLP_TRACES_HEADERS` (later wins).
    headers: Vec<String>,
    capture_content: bool,
    /// `TRACEPARENT` (with `TRACESTATE`), continued by the session's own run.
    parent: Option<TraceParent>,
    limits: export::Limits,
}

impl TraceSettings {
    fn resolve(&self, env: impl Fn(&str) -> Option<String>) -> Option<Resolved> {
        let set = |name: &str| env(name).filter(|value| !value.trim().is_empty());
        let truthy = |name: &str| env(name).is_some_and(|v| v.trim().eq_ignore_ascii_case("true"));
        if truthy("OTEL_SDK_DISABLED") {
            return None;
        }
        let traces_path = |url: &str| {
            let url = url.trim().trim_end_matches('/');
            if url.ends_with("/v1/traces") {
                url.to_string()
            } else {
                format!("{url}/v1/traces")
            }
        };
        let endpoint = match &self.endpoint {
            Some(url) => traces_path(url),
            None => match set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") {
                Some(url) => url.trim().to_string(),
                None => traces_path(&set("OTEL_EXPORTER_OTLP_ENDPOINT")?),
            },
        };
        let headers = [
            "OTEL_EXPORTER_OTLP_HEADERS",
            "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
        ]
        .into_iter()
        .filter_map(&env)
        .collect();
        let number = |name: &str| env(name).and_then(|v| v.trim().parse::<u64>().ok());
        let millis = |name: &str| number(name).map(Duration::from_millis);
        let size = |name: &str| number(name).and_then(|n| usize::try_from(n).ok());
        let default = export::Limits::default();
        let limits = export::Limits {
            max_queue: size("OTEL_BSP_MAX_QUEUE_SIZE").unwrap_or(default.max_queue),
            max_batch: size("OTEL_BSP_MAX_EXPORT_BATCH_SIZE").unwrap_or(default.max_batch),
            delay: millis("OTEL_BSP_SCHEDULE_DELAY").unwrap_or(default.delay),
            timeout: millis("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT")
                .or_else(|| millis("OTEL_EXPORTER_OTLP_TIMEOUT"))
                .unwrap_or(default.timeout),
            niceness: export_niceness(&env)
                .ok()
                .flatten()
                .unwrap_or(default.niceness),
        };
        Some(Resolved {
            endpoint,
            headers,
            capture_content: self.capture_content || truthy(CAPTURE_CONTENT),
            parent: env("TRACEPARENT")
                .and_then(|parent| TraceParent::parse(&parent, env("TRACESTATE").as_deref())),
            limits,
        })
    }
}

/// A session's trace export: the sink its runs' events go to, and the export task to close.
pub struct Exporter {
    sink: Arc<sink::Sink>,
    counts: Arc<export::Counts>,
    done: Mutex<Option<export::Done>>,
    /// The queue's bound, named when spans did not fit in it.
    max_queue: usize,
    warn: Option<Notice>,
}

impl Exporter {
    /// Starts export as `settings` and the environment say; None when it is off, or when the
    /// exporter cannot start (then `warn` says why and the session runs untraced).
    pub fn start(settings: &TraceSettings) -> Option<Exporter> {
        let env = |name: &str| std::env::var(name).ok();
        let resolved = settings.resolve(env)?;
        if let Some(warn) = &settings.warn {
            if let Some(protocol) = other_protocol(env) {
                warn(&format!(
                    "traces are exported over OTLP/HTTP with protobuf only: OTEL_EXPORTER_OTLP_PROTOCOL={protocol} is not used"
                ));
            }
            if export_niceness(env).is_err() {
                let default = export::Limits::default().niceness;
                warn(&format!(
                    "{EXPORT_NICE} is not a nice value from 0 to 19: the export thread runs at {default}"
                ));
            }
        }
        let config = opentelemetry_sdk::trace::Config::default();
        let limits = resolved.limits;
        let started = collector::Http::new(&resolved.endpoint, &resolved.headers, limits.timeout)
            .and_then(|collector| {
                let envelope = envelope(&config.resource);
                export::start(collector, envelope, limits).map_err(|e| e.to_string())
            });
        let (queue, counts, done) = match started {
            Ok(started) => started,
            Err(why) => {
                if let Some(warn) = &settings.warn {
                    warn(&format!("traces are not exported: {why}"));
                }
                return None;
            }
        };
        let sink = sink::Sink::new(
            queue,
            config.sampler,
            resolved.parent,
            settings.session_name.clone(),
            resolved.capture_content,
        );
        Some(Exporter {
            sink: Arc::new(sink),
            counts,
            done: Mutex::new(Some(done)),
            max_queue: limits.max_queue,
            warn: settings.warn.clone(),
        })
    }

    /// What to say of `dropped` spans not exported, `refused` of them by a full queue.
    fn dropped_why(&self, dropped: u64, refused: u64) -> String {
        let queue = format!(
            "did not fit in the queue of {} spans (raise OTEL_BSP_MAX_QUEUE_SIZE, or set {EXPORT_NICE}=0 on a busy machine)",
            self.max_queue
        );
        let collector = "the collector was unreachable, too slow, or refused them";
        let why = match refused.min(dropped) {
            0 => collector.to_string(),
            all if all == dropped => queue,
            some => format!("{some} {queue}; for the others, {collector}"),
        };
        format!("{dropped} trace span(s) were not exported: {why}")
    }
}

impl Tracer for Exporter {
    fn open_run(&self, origin: Origin) -> Box<dyn TracedRun> {
        Box::new(self.sink.open_run(origin))
    }

    fn plan_shape(
        &self,
        name: &str,
        steps: &mut dyn Iterator<Item = (&str, &'static str)>,
    ) -> TraceShape {
        Arc::new(span::PlanShape::new(name, steps))
    }

    fn captures_content(&self) -> bool {
        self.sink.captures_content()
    }

    /// Sends what is queued, waiting at most [`CLOSE_WITHIN`], and says how many spans were not
    /// exported (the first time only), and why. Returns that number.
    fn finish(&self) -> u64 {
        let done = self.done.lock().ok().and_then(|mut done| done.take());
        let Some(done) = done else {
            return self.counts.dropped();
        };
        self.sink.close_queue();
        // A collector that still has not answered is left behind: its spans count as dropped.
        done.wait(CLOSE_WITHIN);
        let dropped = self.counts.dropped();
        if dropped > 0
            && let Some(warn) = &self.warn
        {
            warn(&self.dropped_why(dropped, self.counts.refused()));
        }
        dropped
    }
}

/// The export thread's nice value [`EXPORT_NICE`] asks for: None when it is not set, Err when
/// it is not a number from 0 to 19.
fn export_niceness(env: impl Fn(&str) -> Option<String>) -> Result<Option<i32>, ()> {
    let Some(value) = env(EXPORT_NICE) else {
        return Ok(None);
    };
    match value.trim().parse::<i32>() {
        Ok(niceness) if (0..=19).contains(&niceness) => Ok(Some(niceness)),
        _ => Err(()),
    }
}

/// The OTLP protocol the environment asks for (`OTEL_EXPORTER_OTLP_TRACES_PROTOCOL`, else
/// `OTEL_EXPORTER_OTLP_PROTOCOL`) when it is not the one pagantic speaks, `http/protobuf`.
fn other_protocol(env: impl Fn(&str) -> Option<String>) -> Option<String> {
    let protocol =
        env("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL").or_else(|| env("OTEL_EXPORTER_OTLP_PROTOCOL"))?;
    let protocol = protocol.trim();
    (!protocol.is_empty() && protocol != "http/protobuf").then(|| protocol.to_string())
}

/// What every export request carries besides its spans: the resource the environment
/// describes (`OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`; `pagantic` as the service name
/// unless one is given) and pagantic as the instrumentation scope.
fn envelope(resource: &Resource) -> wire::Envelope {
    let service = opentelemetry::Key::new("service.name");
    let named = resource
        .get(&service)
        .map(|name| name.as_str().into_owned())
        .filter(|name| !name.starts_with("unknown_service"));
    let mut attributes = wire::Attributes::new(wire::Of::Resource);
    attributes.str("service.name", named.as_deref().unwrap_or("pagantic"));
    for (key, value) in resource.iter().filter(|(key, _)| **key != service) {
        attributes.value(key.as_str(), value);
    }
    let schema = resource.schema_url().unwrap_or_default();
    let version = env!("CARGO_PKG_VERSION");
    wire::Envelope::new(&attributes, schema, "pagantic", version, SEMCONV_SCHEMA)
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn resolved(settings: &TraceSettings, vars: &[(&str, &str)]) -> Option<Resolved> {
        let vars: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        settings.resolve(|name| vars.get(name).cloned())
    }

    #[test]
    fn tracing_is_off_without_an_endpoint_or_when_the_sdk_is_disabled() {
        let settings = TraceSettings::default();
        assert_eq!(resolved(&settings, &[]), None);
        assert_eq!(
            resolved(&settings, &[("OTEL_EXPORTER_OTLP_ENDPOINT", " ")]),
            None
        );
        let on = [("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318")];
        assert!(resolved(&settings, &on).is_some());
        let disabled = [on[0], ("OTEL_SDK_DISABLED", "true")];
        assert_eq!(resolved(&settings, &disabled), None);
    }

    #[test]
    fn a_protocol_other_than_http_protobuf_is_named() {
        let protocol = |vars: &[(&str, &str)]| {
            other_protocol(|name| {
                let found = vars.iter().find(|(key, _)| *key == name);
                found.map(|(_, value)| value.to_string())
            })
        };
        assert_eq!(protocol(&[]), None);
        assert_eq!(
            protocol(&[("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")]),
            None
        );
        let grpc = [("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")];
        assert_eq!(protocol(&grpc).as_deref(), Some("grpc"));
        let json = [
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
            ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/json"),
        ];
        assert_eq!(protocol(&json).as_deref(), Some("http/json"));
    }

    #[test]
    fn the_traces_endpoint_is_taken_as_it_is_and_the_flag_wins_over_both() {
        let settings = TraceSettings::default();
        let both = [
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://general:4318/"),
            (
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                "http://traces:4318/custom",
            ),
            ("OTEL_EXPORTER_OTLP_HEADERS", "a=1"),
            ("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "b=2"),
        ];
        let on = resolved(&settings, &both).expect("on");
        assert_eq!(on.endpoint, "http://traces:4318/custom");
        assert_eq!(on.headers, ["a=1", "b=2"]);
        assert_eq!(on.limits, export::Limits::default());
        let general = resolved(&settings, &both[..1]).expect("on");
        assert_eq!(general.endpoint, "http://general:4318/v1/traces");
        let flag = TraceSettings {
            endpoint: Some("http://flag:4318".into()),
            ..TraceSettings::default()
        };
        let on = resolved(&flag, &both).expect("on");
        assert_eq!(on.endpoint, "http://flag:4318/v1/traces");
    }

    #[test]
    fn the_flag_s_url_gets_the_traces_path_and_the_environment_its_parent_and_limits() {
        let settings = TraceSettings {
            endpoint: Some("http://127.0.0.1:4318/".into()),
            ..TraceSettings::default()
        };
        let vars = [
            (
                "TRACEPARENT",
                "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            ),
            ("OTEL_EXPORTER_OTLP_TIMEOUT", "1500"),
            (CAPTURE_CONTENT, "TRUE"),
        ];
        let on = resolved(&settings, &vars).expect("on");
        assert_eq!(on.endpoint, "http://127.0.0.1:4318/v1/traces");
        assert_eq!(on.limits.timeout, Duration::from_millis(1500));
        assert!(on.capture_content);
        assert_eq!(on.limits.max_batch, export::Limits::default().max_batch);
        let parent = on.parent.expect("continued");
        assert_eq!(parent.trace_id, 0x4bf9_2f35_77b3_4da6_a3ce_929d_0e0e_4736);
        let full = TraceSettings {
            endpoint: Some("http://h/v1/traces".into()),
            ..TraceSettings::default()
        };
        let on = resolved(&full, &[]).expect("on");
        assert_eq!(on.endpoint, "http://h/v1/traces");
        assert!(!on.capture_content && on.parent.is_none());
    }

    /// The export thread's priority is a knob for machines whose cores the runs keep busy: a
    /// nice value from 0 to 19, anything else leaving the default (and said).
    #[test]
    fn the_export_thread_s_nice_value_is_read_from_the_environment() {
        let on = ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318");
        let settings = TraceSettings::default();
        let niceness = |value: Option<&str>| {
            let mut vars = vec![on];
            vars.extend(value.map(|value| (EXPORT_NICE, value)));
            resolved(&settings, &vars).expect("on").limits.niceness
        };
        assert_eq!(niceness(None), 10);
        assert_eq!(niceness(Some("0")), 0);
        assert_eq!(niceness(Some(" 19 ")), 19);
        for bad in ["-5", "20", "ten", "", "18446744073709551616"] {
            assert_eq!(niceness(Some(bad)), 10, "{bad:?}");
            let env = |name: &str| (name == EXPORT_NICE).then(|| bad.to_string());
            assert_eq!(export_niceness(env), Err(()), "{bad:?}");
        }
    }

    /// What was not exported is said with why: spans a full queue refused name the knobs that
    /// keep them; spans the collector did not take name the collector.
    #[test]
    fn spans_not_exported_are_said_with_why() {
        let settings = TraceSettings {
            endpoint: Some("http://127.0.0.1:9".into()),
            ..TraceSettings::default()
        };
        let exporter = Exporter::start(&settings).expect("started");
        let collector = "5 trace span(s) were not exported: the collector was unreachable, too slow, or refused them";
        assert_eq!(exporter.dropped_why(5, 0), collector);
        let full = exporter.dropped_why(5, 5);
        assert!(
            full.starts_with(
                "5 trace span(s) were not exported: did not fit in the queue of 32768 spans"
            ),
            "{full}"
        );
        assert!(
            full.contains("OTEL_BSP_MAX_QUEUE_SIZE") && full.contains(EXPORT_NICE),
            "{full}"
        );
        let both = exporter.dropped_why(5, 2);
        assert!(
            both.contains(": 2 did not fit")
                && both.ends_with(
                    "for the others, the collector was unreachable, too slow, or refused them"
                ),
            "{both}"
        );
        assert_eq!(exporter.finish(), 0);
    }
}
