//! OpenTelemetry traces of a session's runs, exported over OTLP/HTTP (protobuf) with the GenAI
//! semantic conventions (version 1.37.0, [`SEMCONV_SCHEMA`]), so Tempo, Jaeger, Phoenix, Langfuse or Honeycomb
//! show what a run did. The spans come from the same typed events as the `--events` file (the
//! sink in `sink.rs`), never from a second instrumentation.
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
//! | `content.rs` | a model call's finish reason and captured messages |
//! | `context.rs` | W3C `traceparent`, a run's trace, span ids |
//! | `sink.rs` | events to spans: names, parents, attributes |
//! | `export.rs` | the bounded queue and the task that sends batches |

mod content;
mod context;
mod export;
mod sink;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use opentelemetry_otlp::{Protocol, RetryPolicy, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::SpanExporter;

pub use content::{captured, finish_reason};
pub use context::{RunTrace, TraceParent};
pub use export::Counts;
pub use sink::{Origin, RunInfo, Tracer};

use crate::inference::Notice;

/// The schema URL of the OpenTelemetry semantic conventions (GenAI included) the spans follow,
/// version 1.37.0, set on the instrumentation scope.
pub const SEMCONV_SCHEMA: &str = "https://opentelemetry.io/schemas/1.37.0";
/// Longest captured text (a tool's arguments or result, a message's text part) in bytes.
pub const CONTENT_LIMIT: usize = 4096;
/// How long closing a session waits for queued spans to be sent.
pub const CLOSE_WITHIN: Duration = Duration::from_secs(2);

const CAPTURE_CONTENT: &str = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT";

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
    /// The traces URL given by `--otlp` (None: the exporter reads the environment).
    endpoint: Option<String>,
    capture_content: bool,
    /// `TRACEPARENT` (with `TRACESTATE`), continued by the session's own run.
    parent: Option<TraceParent>,
    timeout: Duration,
    limits: (usize, usize),
}

impl TraceSettings {
    fn resolve(&self, env: impl Fn(&str) -> Option<String>) -> Option<Resolved> {
        let set = |name: &str| env(name).is_some_and(|value| !value.trim().is_empty());
        let truthy = |name: &str| env(name).is_some_and(|v| v.trim().eq_ignore_ascii_case("true"));
        let from_env =
            set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") || set("OTEL_EXPORTER_OTLP_ENDPOINT");
        if truthy("OTEL_SDK_DISABLED") || (self.endpoint.is_none() && !from_env) {
            return None;
        }
        let endpoint = self.endpoint.as_deref().map(|url| {
            let url = url.trim_end_matches('/');
            if url.ends_with("/v1/traces") {
                url.to_string()
            } else {
                format!("{url}/v1/traces")
            }
        });
        let millis = |name: &str| env(name).and_then(|v| v.trim().parse::<u64>().ok());
        let timeout = millis("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT")
            .or_else(|| millis("OTEL_EXPORTER_OTLP_TIMEOUT"))
            .map_or(
                opentelemetry_otlp::OTEL_EXPORTER_OTLP_TIMEOUT_DEFAULT,
                Duration::from_millis,
            );
        let size = |name: &str| env(name).and_then(|v| v.trim().parse::<usize>().ok());
        let limits = (
            size("OTEL_BSP_MAX_QUEUE_SIZE").unwrap_or(export::MAX_QUEUE),
            size("OTEL_BSP_MAX_EXPORT_BATCH_SIZE").unwrap_or(export::MAX_BATCH),
        );
        Some(Resolved {
            endpoint,
            capture_content: self.capture_content || truthy(CAPTURE_CONTENT),
            parent: env("TRACEPARENT")
                .and_then(|parent| TraceParent::parse(&parent, env("TRACESTATE").as_deref())),
            timeout,
            limits,
        })
    }
}

/// A session's tracing: the sink its runs' events go to, and the export task to close.
pub struct Tracing {
    pub tracer: Arc<Tracer>,
    counts: Arc<Counts>,
    done: Mutex<Option<export::Done>>,
    warn: Option<Notice>,
}

impl Tracing {
    /// Starts tracing as `settings` and the environment say; None when it is off, or when the
    /// exporter cannot start (then `warn` says why and the session runs untraced).
    pub fn start(settings: &TraceSettings) -> Option<Tracing> {
        let resolved = settings.resolve(|name| std::env::var(name).ok())?;
        let config = opentelemetry_sdk::trace::Config::default();
        let started = exporter(&resolved, &config.resource).and_then(|exporter| {
            export::start(exporter, resolved.timeout, resolved.limits).map_err(|e| e.to_string())
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
        let tracer = Tracer::new(
            queue,
            config.sampler,
            resolved.parent,
            settings.session_name.clone(),
            resolved.capture_content,
        );
        Some(Tracing {
            tracer: Arc::new(tracer),
            counts,
            done: Mutex::new(Some(done)),
            warn: settings.warn.clone(),
        })
    }

    /// Sends what is queued, waiting at most [`CLOSE_WITHIN`], and says how many spans the
    /// collector did not take (the first time only). Returns that number.
    pub fn close(&self) -> u64 {
        let done = self.done.lock().ok().and_then(|mut done| done.take());
        let Some(done) = done else {
            return self.counts.dropped();
        };
        self.tracer.close_queue();
        // A collector that still has not answered is left behind: its spans count as dropped.
        done.wait(CLOSE_WITHIN);
        let dropped = self.counts.dropped();
        if dropped > 0
            && let Some(warn) = &self.warn
        {
            warn(&format!(
                "{dropped} trace span(s) were not exported: the collector was unreachable, too slow, or refused them"
            ));
        }
        dropped
    }
}

/// The OTLP/HTTP protobuf exporter over the async reqwest client, its resource from the
/// environment (`pagantic` as the service name unless one is given).
fn exporter(
    resolved: &Resolved,
    resource: &Resource,
) -> Result<impl SpanExporter + 'static, String> {
    let mut builder = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(Protocol::HttpBinary)
        .with_timeout(resolved.timeout)
        .with_retry_policy(RetryPolicy::disabled());
    if let Some(endpoint) = &resolved.endpoint {
        builder = builder.with_endpoint(endpoint.clone());
    }
    let mut exporter = builder.build().map_err(|e| e.to_string())?;
    let unnamed = resource
        .get(&opentelemetry::Key::new("service.name"))
        .is_none_or(|name| name.as_str().starts_with("unknown_service"));
    if unnamed {
        let named = Resource::builder().with_service_name("pagantic").build();
        exporter.set_resource(&named);
    } else {
        exporter.set_resource(resource);
    }
    Ok(exporter)
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
        assert_eq!(
            on.endpoint.as_deref(),
            Some("http://127.0.0.1:4318/v1/traces")
        );
        assert_eq!(on.timeout, Duration::from_millis(1500));
        assert!(on.capture_content);
        assert_eq!(on.limits, (export::MAX_QUEUE, export::MAX_BATCH));
        let parent = on.parent.expect("continued");
        assert_eq!(
            parent.trace_id.to_string(),
            "4bf92f3577b34da6a3ce929d0e0e4736"
        );
        let full = TraceSettings {
            endpoint: Some("http://h/v1/traces".into()),
            ..TraceSettings::default()
        };
        let on = resolved(&full, &[]).expect("on");
        assert_eq!(on.endpoint.as_deref(), Some("http://h/v1/traces"));
        assert!(!on.capture_content && on.parent.is_none());
    }
}
