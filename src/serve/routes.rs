//! The routes: `GET /healthz`, `GET /metrics`, `GET /v1/plans`, `POST /v1/plans/{name}/runs`
//! (JSON, or server-sent events when asked), `POST /v1/chat/completions` (in [`super::openai`]);
//! the bearer-token check; and starting a run for a request so that it ends properly however the
//! request ends.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, Path, RawQuery, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use futures_util::Stream;
use serde::Serialize;
use serde_json::{Map, Value, json};
use tokio::sync::{OwnedSemaphorePermit, mpsc, watch};
use tokio::task::JoinHandle;

use super::ServeOptions;
use super::admission::Admission;
use super::auth::Token;
use super::catalog::{Catalog, Served};
use super::metrics::{Gauges, Metrics, Refusal};
use crate::core::{Failure, FailureCode, text::suggestion};
use crate::inference::TokenSink;
use crate::orchestrate::{
    Event, EventData, Observer, RunRecord, RunRequest, RunStatus, Runner, Watch,
};

/// What every handler shares.
#[derive(Clone)]
pub struct App {
    runner: Runner,
    catalog: Arc<Catalog>,
    admission: Arc<Admission>,
    metrics: Arc<Metrics>,
    token: Option<Arc<Token>>,
    max_body_bytes: usize,
    /// Turns true when the grace period after SIGTERM is over: runs still going are cancelled.
    stop_runs: watch::Receiver<bool>,
}

/// A refused request: its status, why (for the metrics) and the failure the client reads.
pub struct Refused {
    status: StatusCode,
    why: Refusal,
    failure: Failure,
}

impl Refused {
    pub fn bad_request(failure: Failure) -> Self {
        Refused {
            status: StatusCode::BAD_REQUEST,
            why: Refusal::BadRequest,
            failure,
        }
    }
}

/// What a run sends to a client that streams it: its events and the text of its streamed step
/// as they happen, then its record.
pub enum Streamed {
    Event(Event),
    Token(String),
    Record(RunRecord),
}

/// Cancels a run when dropped: the request it belongs to is gone (the client disconnected), or
/// it ended (then cancelling is a no-op).
pub struct CancelOnDrop(watch::Sender<bool>);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0.send_replace(true);
    }
}

impl App {
    pub fn new(
        runner: Runner,
        catalog: Arc<Catalog>,
        options: &ServeOptions,
        stop_runs: watch::Receiver<bool>,
    ) -> Self {
        App {
            runner,
            catalog,
            admission: Arc::new(Admission::new(options.max_concurrent, options.queue)),
            metrics: Arc::new(Metrics::default()),
            token: options.token.as_deref().map(|t| Arc::new(Token::new(t))),
            max_body_bytes: options.max_body_bytes,
            stop_runs,
        }
    }

    pub fn admission(&self) -> Arc<Admission> {
        Arc::clone(&self.admission)
    }

    pub fn router(self) -> Router {
        Router::new()
            .route("/healthz", get(healthz))
            .route("/metrics", get(metrics))
            .route("/v1/plans", get(plans))
            .route("/v1/plans/{name}/runs", post(run))
            .route("/v1/chat/completions", post(super::openai::completions))
            .layer(DefaultBodyLimit::max(self.max_body_bytes))
            .layer(middleware::from_fn_with_state(self.clone(), authorize))
            .with_state(self)
    }

    /// The plan served under `name` (404 naming the closest one otherwise).
    pub fn plan(&self, name: &str) -> Result<Arc<Served>, Refused> {
        self.catalog.get(name).ok_or_else(|| {
            let all = self.catalog.all();
            Refused {
                status: StatusCode::NOT_FOUND,
                why: Refusal::NotFound,
                failure: Failure::new(
                    FailureCode::ConfigInvalidInput,
                    format!(
                        "no plan `{name}` is served ({})",
                        suggestion(name, "plans", all.keys().map(String::as_str))
                    ),
                )
                .with_help("GET /v1/plans lists the plans served"),
            }
        })
    }

    /// A request body as JSON (413 over the size limit, 400 when it is not JSON).
    pub fn json_body(body: Result<Bytes, BytesRejection>) -> Result<Value, Refused> {
        let body = body.map_err(|rejection| {
            let too_large = rejection.status() == StatusCode::PAYLOAD_TOO_LARGE;
            Refused {
                status: rejection.status(),
                why: if too_large {
                    Refusal::TooLarge
                } else {
                    Refusal::BadRequest
                },
                failure: Failure::new(FailureCode::ConfigInvalidInput, rejection.body_text())
                    .with_help(if too_large {
                        "send a smaller body, or start the server with a larger --max-body-bytes"
                    } else {
                        "send the inputs as a JSON object"
                    }),
            }
        })?;
        serde_json::from_slice(&body).map_err(|e| {
            Refused::bad_request(
                Failure::new(
                    FailureCode::ConfigInvalidInput,
                    format!("the body is not JSON: {e}"),
                )
                .with_help("send the inputs as a JSON object"),
            )
        })
    }

    /// A run slot, after waiting in the queue if need be (429 when the queue is full too).
    pub async fn admit(&self) -> Result<OwnedSemaphorePermit, Refused> {
        self.admission.enter().await.map_err(|_| Refused {
            status: StatusCode::TOO_MANY_REQUESTS,
            why: Refusal::QueueFull,
            failure: Failure::new(
                FailureCode::InferenceRateLimited,
                "every run slot is busy and the queue is full",
            )
            .with_help("retry after the time in Retry-After"),
        })
    }

    /// Starts a run of `served` in a task of its own, holding `permit` until it ends; its record
    /// is what the task returns (and, with `stream`, the last thing sent there, after its events).
    /// Dropping the returned guard cancels the run: it then ends CANCELLED, counted like any
    /// other, instead of being dropped mid-step.
    pub fn start(
        &self,
        served: Arc<Served>,
        inputs: Value,
        globals: Map<String, Value>,
        permit: OwnedSemaphorePermit,
        stream: Option<mpsc::UnboundedSender<Streamed>>,
    ) -> (JoinHandle<RunRecord>, CancelOnDrop) {
        let (cancel, cancelled) = watch::channel(false);
        let guard = CancelOnDrop(cancel.clone());
        let watcher: Observer = {
            let metrics = Arc::clone(&self.metrics);
            let plan = served.name.clone();
            let stream = stream.clone();
            Box::new(move |event: &Event| {
                if matches!(event.data, EventData::Inference { .. }) {
                    metrics.model_call(&plan);
                }
                if let Some(stream) = &stream {
                    let _ = stream.send(Streamed::Event(event.clone()));
                }
            })
        };
        let tokens = stream.clone().map(|stream| {
            Arc::new(move |piece: &str| {
                let _ = stream.send(Streamed::Token(piece.to_string()));
            }) as TokenSink
        });
        let runner = self.runner.clone();
        let metrics = Arc::clone(&self.metrics);
        let mut stop_runs = self.stop_runs.clone();
        let handle = tokio::spawn(async move {
            let _permit = permit;
            let request = RunRequest {
                globals,
                cancel: Some(cancelled),
                watch: Watch {
                    events: Some(watcher),
                    tokens,
                },
            };
            let run = runner.run(&served.pipeline, inputs, request);
            tokio::pin!(run);
            let stopped = async { stop_runs.wait_for(|stop| *stop).await.is_ok() };
            let record = tokio::select! {
                record = &mut run => record,
                stopped = stopped => {
                    if stopped {
                        cancel.send_replace(true);
                    }
                    run.await
                }
            };
            metrics.record_run(&served.name, &record);
            if let Some(stream) = stream {
                let _ = stream.send(Streamed::Record(record.clone()));
            }
            record
        });
        (handle, guard)
    }
}

impl IntoResponse for Refused {
    fn into_response(self) -> Response {
        let mut response = json_response(self.status, &json!({ "error": self.failure }));
        if self.status == StatusCode::TOO_MANY_REQUESTS {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        response
    }
}

/// Counts a refusal in the metrics and answers it.
pub fn refuse(app: &App, refused: Refused) -> Response {
    app.metrics.refused(refused.why);
    refused.into_response()
}

pub fn json_response(status: StatusCode, value: &impl Serialize) -> Response {
    match serde_json::to_vec(value) {
        Ok(body) => (
            status,
            [(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            )],
            body,
        )
            .into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

/// The status of a finished run's answer: 200 when it completed, 422 otherwise.
pub fn run_status(record: &RunRecord) -> StatusCode {
    match record.status {
        RunStatus::Complete => StatusCode::OK,
        RunStatus::Error | RunStatus::Cancelled => StatusCode::UNPROCESSABLE_ENTITY,
    }
}

/// A run's task ended without a record: it panicked.
pub fn lost_run() -> Response {
    json_response(
        StatusCode::INTERNAL_SERVER_ERROR,
        &json!({ "error": Failure::new(FailureCode::InferenceEngineError, "the run crashed") }),
    )
}

/// Whether the client asked for server-sent events: `Accept: text/event-stream` or
/// `?stream=true` (or `1`).
pub fn wants_stream(headers: &HeaderMap, query: Option<&str>) -> bool {
    let accepts = headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.contains("text/event-stream"));
    let asked = query
        .unwrap_or_default()
        .split('&')
        .any(|pair| matches!(pair.split_once('='), Some(("stream", "true" | "1"))));
    accepts || asked
}

/// Every request but `/healthz` needs the bearer token, when the server has one.
async fn authorize(State(app): State<App>, request: Request, next: Next) -> Response {
    let Some(token) = &app.token else {
        return next.run(request).await;
    };
    let given = request
        .headers()
        .get(header::AUTHORIZATION)
        .map(HeaderValue::as_bytes);
    if request.uri().path() == "/healthz" || token.admits(given) {
        return next.run(request).await;
    }
    let mut response = refuse(
        &app,
        Refused {
            status: StatusCode::UNAUTHORIZED,
            why: Refusal::Unauthorized,
            failure: Failure::new(
                FailureCode::ConfigInvalidInput,
                "this server needs `Authorization: Bearer <token>` with its token",
            ),
        },
    );
    response
        .headers_mut()
        .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    response
}

async fn healthz() -> Response {
    json_response(StatusCode::OK, &json!({ "status": "ok" }))
}

async fn metrics(State(app): State<App>) -> Response {
    let text = app.metrics.render(&Gauges {
        running: app.admission.running(),
        queued: app.admission.waiting(),
    });
    (
        StatusCode::OK,
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
        )],
        text,
    )
        .into_response()
}

async fn plans(State(app): State<App>) -> Response {
    let plans: Vec<Value> = app
        .catalog
        .all()
        .values()
        .map(|served| {
            json!({
                "name": served.name,
                "description": served.description,
                "inputs": served.inputs,
            })
        })
        .collect();
    json_response(StatusCode::OK, &json!({ "plans": plans }))
}

/// `POST /v1/plans/{name}/runs`: the body is the inputs; the answer is the run record (the JSON
/// of `run --format json`), or its events then the record as server-sent events.
async fn run(
    State(app): State<App>,
    Path(name): Path<String>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let prepared = (|| {
        let served = app.plan(&name)?;
        let given = App::json_body(body)?;
        if !given.is_object() {
            return Err(Refused::bad_request(
                Failure::new(
                    FailureCode::ConfigInvalidInput,
                    "the body must be a JSON object of inputs",
                )
                .with_help("send e.g. {\"question\": \"…\"}"),
            ));
        }
        let inputs = served
            .pipeline
            .bind_object(&given)
            .map_err(Refused::bad_request)?;
        Ok((served, inputs))
    })();
    let (served, inputs) = match prepared {
        Ok(prepared) => prepared,
        Err(refused) => return refuse(&app, refused),
    };
    let permit = match app.admit().await {
        Ok(permit) => permit,
        Err(refused) => return refuse(&app, refused),
    };
    if wants_stream(&headers, query.as_deref()) {
        let (sender, receiver) = mpsc::unbounded_channel();
        let (_, guard) = app.start(served, inputs, Map::new(), permit, Some(sender));
        return Sse::new(events_then_record(receiver, guard))
            .keep_alive(KeepAlive::new().interval(Duration::from_secs(10)))
            .into_response();
    }
    let (handle, _cancel_if_gone) = app.start(served, inputs, Map::new(), permit, None);
    match handle.await {
        Ok(record) => json_response(run_status(&record), &record),
        Err(_) => lost_run(),
    }
}

/// The stream of a run: `event: <kind>` with the event as `data` for each event, `event: token`
/// with `{"text": …}` for each piece of the streamed step's answer, then `event: record` with the
/// record; dropping it (the client went away) cancels the run.
fn events_then_record(
    receiver: mpsc::UnboundedReceiver<Streamed>,
    guard: CancelOnDrop,
) -> impl Stream<Item = Result<SseEvent, Infallible>> {
    futures_util::stream::unfold(Some((receiver, guard)), |state| async move {
        let (mut receiver, guard) = state?;
        match receiver.recv().await? {
            Streamed::Event(event) => {
                let data = serde_json::to_value(&event).unwrap_or_default();
                let kind = data["kind"].as_str().unwrap_or("event").to_string();
                let sse = SseEvent::default().event(kind).data(data.to_string());
                Some((Ok(sse), Some((receiver, guard))))
            }
            Streamed::Token(text) => {
                let data = json!({ "text": text }).to_string();
                let sse = SseEvent::default().event("token").data(data);
                Some((Ok(sse), Some((receiver, guard))))
            }
            Streamed::Record(record) => {
                let data = serde_json::to_string(&record).unwrap_or_default();
                Some((Ok(SseEvent::default().event("record").data(data)), None))
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stream_is_asked_for_by_accept_header_or_query() {
        let mut headers = HeaderMap::new();
        assert!(!wants_stream(&headers, None));
        assert!(wants_stream(&headers, Some("a=b&stream=true")));
        assert!(wants_stream(&headers, Some("stream=1")));
        assert!(!wants_stream(&headers, Some("stream=false")));
        headers.insert(
            header::ACCEPT,
            HeaderValue::from_static("text/event-stream"),
        );
        assert!(wants_stream(&headers, None));
    }
}
