//! What every request handler shares: the served plans, the admission, the metrics, the token;
//! refusing a request with its status and failure; and starting a run for a request so that it
//! ends properly however the request ends.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde_json::{Map, Value, json};
use tokio::sync::{OwnedSemaphorePermit, mpsc, watch};
use tokio::task::JoinHandle;

use super::ServeOptions;
use super::admission::Admission;
use super::auth::Token;
use super::catalog::{Catalog, Served};
use super::connections::{BodyTooSlow, Connections};
use super::metrics::{Metrics, Refusal};
use super::origin::OriginPolicy;
use super::trace_context::Caller;
use crate::core::{Failure, FailureCode};
use crate::inference::TokenSink;
use crate::orchestrate::{
    Event, EventData, Observer, RunRecord, RunRequest, RunStatus, Runner, Watch,
};

/// What every handler shares.
#[derive(Clone)]
pub struct App {
    pub(super) runner: Runner,
    pub(super) catalog: Arc<Catalog>,
    pub(super) admission: Arc<Admission>,
    pub(super) metrics: Arc<Metrics>,
    pub(super) token: Option<Arc<Token>>,
    /// Which web pages and host names may reach the server.
    pub(super) origins: Arc<OriginPolicy>,
    pub(super) max_body_bytes: usize,
    /// The client connections (for the metrics).
    pub(super) connections: Arc<Connections>,
    /// Turns true when the grace period after SIGTERM is over: runs still going are cancelled.
    pub(super) stop_runs: watch::Receiver<bool>,
}

/// A refused request: its status, why (for the metrics) and the failure the client reads.
pub struct Refused {
    pub(super) status: StatusCode,
    pub(super) why: Refusal,
    pub(super) failure: Failure,
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
        connections: Arc<Connections>,
        stop_runs: watch::Receiver<bool>,
    ) -> Self {
        App {
            runner,
            catalog,
            admission: Arc::new(Admission::new(options.max_concurrent, options.queue)),
            metrics: Arc::new(Metrics::default()),
            token: options.token.as_deref().map(|t| Arc::new(Token::new(t))),
            origins: Arc::new(OriginPolicy::new(
                options.addr,
                options.allowed_origins.clone(),
                options.allowed_hosts.clone(),
            )),
            max_body_bytes: options.max_body_bytes,
            connections,
            stop_runs,
        }
    }

    pub fn admission(&self) -> Arc<Admission> {
        Arc::clone(&self.admission)
    }

    /// The plan served under `name` (404 naming the served ones otherwise).
    pub fn plan(&self, name: &str) -> Result<Arc<Served>, Refused> {
        self.catalog.get(name).ok_or_else(|| Refused {
            status: StatusCode::NOT_FOUND,
            why: Refusal::NotFound,
            failure: Failure::new(FailureCode::ConfigInvalidInput, self.catalog.unknown(name))
                .with_help("GET /v1/plans (or /v1/models) lists the plans served, by name"),
        })
    }

    /// A request body as JSON (413 over the size limit, 408 when it did not arrive within the
    /// body timeout, 400 when it is not JSON).
    pub fn json_body(body: Result<Bytes, BytesRejection>) -> Result<Value, Refused> {
        let body = body.map_err(|rejection| {
            if let Some(slow) = too_slow(&rejection) {
                return Refused {
                    status: StatusCode::REQUEST_TIMEOUT,
                    why: Refusal::TooSlow,
                    failure: Failure::new(FailureCode::ConfigInvalidInput, slow.to_string())
                        .with_help(
                            "send the whole body at once, or start the server with a longer --body-timeout",
                        ),
                };
            }
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
    /// other, instead of being dropped mid-step. Its events and record carry the caller's
    /// request id, and its trace continues the caller's.
    pub fn start(
        &self,
        served: Arc<Served>,
        inputs: Value,
        globals: Map<String, Value>,
        caller: impl Into<Caller>,
        permit: OwnedSemaphorePermit,
        stream: Option<mpsc::UnboundedSender<Streamed>>,
    ) -> (JoinHandle<RunRecord>, CancelOnDrop) {
        let Caller {
            request_id,
            trace_parent,
        } = caller.into();
        let (cancel, cancelled) = watch::channel(false);
        let guard = CancelOnDrop(cancel.clone());
        let watcher: Observer = {
            let metrics = Arc::clone(&self.metrics);
            let plan = served.name.clone();
            let stream = stream.clone();
            Box::new(move |event: &Event| {
                if let EventData::Inference { cached, .. } = &event.data {
                    metrics.model_call(&plan, *cached);
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
                    request_id: request_id.clone(),
                },
                trace_parent,
                ..RunRequest::default()
            };
            let run = runner.run(&served.pipeline, inputs, request);
            tokio::pin!(run);
            let stopped = async { stop_runs.wait_for(|stop| *stop).await.is_ok() };
            let mut record = tokio::select! {
                record = &mut run => record,
                stopped = stopped => {
                    if stopped {
                        cancel.send_replace(true);
                    }
                    run.await
                }
            };
            record.request_id = request_id;
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

/// The body timeout that failed the reading of a body, if that is why it failed.
fn too_slow(rejection: &BytesRejection) -> Option<&BodyTooSlow> {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(rejection);
    while let Some(error) = cause {
        if let Some(slow) = error.downcast_ref::<BodyTooSlow>() {
            return Some(slow);
        }
        cause = error.source();
    }
    None
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
