//! The routes: `GET /healthz`, `GET /metrics`, `GET /v1/plans`, `POST /v1/plans/{name}/runs`
//! (JSON, or server-sent events when asked), `POST /v1/chat/completions` and `GET /v1/models`
//! (in [`super::openai`]), `/mcp` with `--mcp` (in [`super::mcp`]); and the bearer-token check in
//! front of them.

use std::convert::Infallible;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, Path, RawQuery, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Router};
use futures_util::Stream;
use serde_json::{Map, Value, json};
use tokio::sync::mpsc;

use super::app::{
    App, CancelOnDrop, Refused, Streamed, json_response, lost_run, refuse, run_status,
};
use super::metrics::{CONTENT_TYPE as METRICS_CONTENT_TYPE, Gauges, Refusal};
use super::request_id::{self, RequestId};
use super::trace_context::{Caller, with_trace_id};
use crate::core::{Failure, FailureCode};

/// Every route (with `mcp`, `/mcp` too), behind the body limit and the token check, each answer
/// carrying the caller's request id back.
pub fn router(app: App, mcp: bool) -> Router {
    let routes = Router::new();
    let routes = if mcp {
        routes.route_service("/mcp", super::mcp::http_service(app.clone()))
    } else {
        routes
    };
    routes
        .route("/healthz", get(healthz))
        .route("/metrics", get(metrics))
        .route("/v1/plans", get(plans))
        .route("/v1/plans/{name}/runs", post(run))
        .route("/v1/chat/completions", post(super::openai::completions))
        .route("/v1/models", get(super::openai::models))
        .route("/v1/models/{id}", get(super::openai::one_model))
        .layer(DefaultBodyLimit::max(app.max_body_bytes))
        .layer(middleware::from_fn_with_state(app.clone(), authorize))
        .layer(middleware::from_fn_with_state(app.clone(), same_origin))
        .layer(middleware::from_fn_with_state(
            app.clone(),
            request_id::carry,
        ))
        .with_state(app)
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

/// Refuses (403) a request from a web page of a foreign origin or to a foreign host name, before
/// anything else looks at it; see [`super::origin`].
async fn same_origin(State(app): State<App>, request: Request, next: Next) -> Response {
    let verdict = {
        let headers = request.headers();
        let text = |value: &HeaderValue| String::from_utf8_lossy(value.as_bytes()).into_owned();
        let origin = headers.get(header::ORIGIN).map(text);
        let host = headers
            .get(header::HOST)
            .map(text)
            .or_else(|| request.uri().authority().map(|a| a.to_string()));
        app.origins.admit(origin.as_deref(), host.as_deref())
    };
    match verdict {
        Ok(()) => next.run(request).await,
        Err(foreign) => refuse(
            &app,
            Refused {
                status: StatusCode::FORBIDDEN,
                why: Refusal::Forbidden,
                failure: Failure::new(FailureCode::ConfigInvalidInput, foreign.explain())
                    .with_help(
                        "call the server from a program, or start it with --allowed-origins / --allowed-hosts naming who may",
                    ),
            },
        ),
    }
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
    let rendered = app.metrics.render(&Gauges {
        running: app.admission.running(),
        queued: app.admission.waiting(),
        connections: app.connections.count(),
        busy_connections: app.connections.busy(),
    });
    match rendered {
        Ok(text) => (
            StatusCode::OK,
            [(
                header::CONTENT_TYPE,
                HeaderValue::from_static(METRICS_CONTENT_TYPE),
            )],
            text,
        )
            .into_response(),
        Err(error) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("the metrics could not be written: {error}"),
        )
            .into_response(),
    }
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
    request_id: Option<Extension<RequestId>>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let request_id = request_id.map(|Extension(RequestId(id))| id);
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
        let caller = Caller::of(request_id, &headers);
        let (_, guard) = app.start(served, inputs, Map::new(), caller, permit, Some(sender));
        return Sse::new(events_then_record(receiver, guard))
            .keep_alive(KeepAlive::new().interval(Duration::from_secs(10)))
            .into_response();
    }
    let caller = Caller::of(request_id, &headers);
    let (handle, _cancel_if_gone) = app.start(served, inputs, Map::new(), caller, permit, None);
    match handle.await {
        Ok(record) => with_trace_id(json_response(run_status(&record), &record), &record),
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
