//! `pagantic serve`: plans as an HTTP service.
//!
//! Every plan named on the command line is checked and built once at start (an invalid one
//! stops the server before it binds) and served under its `name`; models load lazily, on the
//! first call that needs them, once per process, and every request shares them. Each request is
//! one run of the session ([`Runner::run`]) with the plan's timeouts, its own cancellation — a
//! client that goes away cancels its run — and its own event watcher, which feeds the metrics and,
//! when the client asked for it, a server-sent event stream.
//!
//! At most `max_concurrent` runs go at once and at most `queue` requests wait for a slot; beyond
//! that a request gets 429 with `Retry-After`. Connections are bounded too (their number, how long
//! one may sit idle or send a request; see [`connections`]). SIGTERM or Ctrl-C stops accepting
//! connections, closes the idle ones and lets the runs in flight finish for a grace period, then
//! cancels what is left (at once, on a second signal) and gives their answers a moment to go out;
//! the server then returns, whatever its clients still hold open.
//!
//! The status rule, the same for every endpoint that runs a plan: 200 with the record when the
//! run completes, 422 with the record when it fails or is cancelled, 400 when the request or its
//! inputs are invalid (nothing ran), 404 for an unknown plan, 401 without the bearer token,
//! 413 for a body over the limit, 429 when full. Errors are `{"error": FAILURE}` with the
//! failure's stable code, message and help, as the command line prints them.
//!
//! Numbers here come from clients, model servers and cache rows: no arithmetic on them may
//! overflow, which clippy's `arithmetic_side_effects` holds every module of the server to.
#![deny(clippy::arithmetic_side_effects)]

mod admission;
mod app;
mod auth;
mod catalog;
mod connections;
mod mcp;
mod metrics;
mod openai;
mod origin;
mod request_id;
mod routes;
mod trace_context;

use std::future::Future;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use futures_util::FutureExt as _;
use tokio::sync::{oneshot, watch};

use crate::cache::CallCache;
use crate::core::{Failure, FailureCode};
use crate::model_store::Notice;
use crate::orchestrate::tools::Approvals;
use crate::orchestrate::{Resources, Runner};
use crate::plan::Diagnostic;
use crate::plan::build::BuildOptions;

pub use catalog::{Catalog, Expanded, Rejected, Served, expand, load};
pub use connections::Limits;

/// How long the answers of the runs cancelled at the end of a drain have to go out before the
/// server returns anyway.
const LAST_ANSWERS: Duration = Duration::from_secs(1);

/// How to serve.
pub struct ServeOptions {
    pub addr: SocketAddr,
    /// Most runs at once.
    pub max_concurrent: usize,
    /// Most requests waiting for a run slot.
    pub queue: usize,
    /// The bearer token every request but `/healthz` must carry, if any.
    pub token: Option<String>,
    /// Largest request body accepted, in bytes.
    pub max_body_bytes: usize,
    /// How long runs in flight may go on after SIGTERM before they are cancelled.
    pub grace: Duration,
    /// How often plan and prompt files are looked at for changes; None: never.
    pub watch: Option<Duration>,
    /// The call cache plans swapped in by `watch` are built with.
    pub cache: Option<Arc<CallCache>>,
    /// What the session's builds share (MCP servers, local models' loads), for the plans
    /// swapped in by `watch` as for those served from the start.
    pub resources: Resources,
    /// The tools marked `approval: required` that may run anyway (`--approve`), in the plans
    /// swapped in by `watch` as in those served from the start.
    pub approvals: Approvals,
    /// Origins whose web pages may call the server (none by default; see [`origin`]).
    pub allowed_origins: Vec<String>,
    /// Host names requests may be addressed to besides loopback ones (see [`origin`]).
    pub allowed_hosts: Vec<String>,
    /// The bounds on connections: how many, how long idle, how long to send a request.
    pub limits: Limits,
    /// Serve the plans as MCP tools at `/mcp` too (see [`mcp`]).
    pub mcp: bool,
}

/// What the server tells its operator; the command prints it.
pub trait Reporter: Send + Sync {
    /// One line of news (listening, draining, a plan swapped in).
    fn line(&self, text: &str);
    /// A changed plan file that was rejected, with why; the previous version goes on serving.
    fn rejected(&self, path: &Path, diagnostics: &[Diagnostic], failure: Option<&Failure>);
}

/// When the server stops: `first` starts the drain, `second` (the operator insisting) ends the
/// grace period at once.
pub struct Shutdown<F, G> {
    pub first: F,
    pub second: G,
}

/// Binds `options.addr`, says so, and serves `catalog` until `shutdown.first` resolves; then
/// drains (see the module docs) and returns.
pub async fn serve<F, G>(
    runner: Runner,
    catalog: Catalog,
    options: ServeOptions,
    reporter: Arc<dyn Reporter>,
    shutdown: Shutdown<F, G>,
) -> Result<(), Failure>
where
    F: Future<Output = ()> + Send + 'static,
    G: Future<Output = ()> + Send + 'static,
{
    let listener = tokio::net::TcpListener::bind(options.addr)
        .await
        .map_err(|e| {
            Failure::new(
                FailureCode::ConfigInvalidInput,
                format!("cannot listen on {}: {e}", options.addr),
            )
            .with_help("choose a free port with --addr (port 0 picks one)")
        })?;
    let bound = listener.local_addr().map_err(|e| {
        Failure::new(
            FailureCode::ConfigInvalidInput,
            format!("cannot read the address listened on: {e}"),
        )
    })?;
    let catalog = Arc::new(catalog);
    let (app, connections, stop_runs) = start(runner, &catalog, &options, &reporter);
    let in_flight = app.admission();
    reporter.line(&format!(
        "listening on http://{bound} — serving {} by name (POST /v1/plans/NAME/runs, or \"model\": NAME):\n{}",
        plans(catalog.all().len()),
        catalog.mapping()
    ));
    let (drain, drained) = oneshot::channel::<()>();
    let serving = tokio::spawn(Arc::clone(&connections).serve(
        listener,
        routes::router(app, options.mcp),
        async move {
            let _ = drained.await;
        },
    ));
    // Dropping a task's handle does not stop it: the connections are closed on every way out.
    let _close_all = AbortOnDrop(serving.abort_handle());
    let ended = async move {
        let _ = serving.await;
    }
    .fuse();
    tokio::pin!(ended);
    shutdown.first.await;
    let grace = options.grace;
    reporter.line(&format!(
        "shutting down: no new connections; {} runs in flight get {} s to finish \
         (a second Ctrl-C or SIGTERM cancels them now)",
        in_flight.running(),
        grace.as_secs_f64()
    ));
    let _ = drain.send(());
    let second = shutdown.second;
    tokio::pin!(second);
    let insisted = tokio::select! {
        () = &mut ended => false,
        () = tokio::time::sleep(grace) => false,
        () = &mut second => true,
    };
    if connections.count() > 0 {
        if in_flight.running() > 0 {
            reporter.line(if insisted {
                "signalled again: cancelling the runs still in flight"
            } else {
                "grace period over: cancelling the runs still in flight"
            });
        }
        stop_runs.send_replace(true);
        tokio::select! {
            () = &mut ended => {}
            () = tokio::time::sleep(LAST_ANSWERS) => {}
            () = &mut second, if !insisted => {}
        }
    }
    reporter.line("stopped");
    Ok(())
}

/// Serves `catalog`'s plans as MCP tools on stdin and stdout (see [`mcp`]) until the client
/// closes its end or `shutdown` resolves; then cancels the runs still going and returns. Nothing
/// listens, and nothing but the protocol is written on stdout.
pub async fn serve_stdio<F>(
    runner: Runner,
    catalog: Catalog,
    options: ServeOptions,
    reporter: Arc<dyn Reporter>,
    shutdown: F,
) -> Result<(), Failure>
where
    F: Future<Output = ()> + Send + 'static,
{
    let catalog = Arc::new(catalog);
    let (app, _, stop_runs) = start(runner, &catalog, &options, &reporter);
    let names: Vec<String> = catalog.all().keys().cloned().collect();
    reporter.line(&format!(
        "serving {} as MCP tools on stdin/stdout:\n{}",
        names.join(", "),
        catalog.mapping()
    ));
    let served = tokio::select! {
        served = mcp::serve_stdio(mcp::PlanTools::new(app)) => served,
        () = shutdown => Ok(()),
    };
    stop_runs.send_replace(true);
    reporter.line("stopped");
    served
}

/// "1 plan", "9 plans".
fn plans(count: usize) -> String {
    if count == 1 {
        "1 plan".into()
    } else {
        format!("{count} plans")
    }
}

/// Aborts a spawned task when dropped.
struct AbortOnDrop(tokio::task::AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// What every request will share, the connections it comes on, and the switch that cancels the
/// runs still going; with `options.watch`, the served plans' files are looked at for changes from
/// now on.
fn start(
    runner: Runner,
    catalog: &Arc<Catalog>,
    options: &ServeOptions,
    reporter: &Arc<dyn Reporter>,
) -> (app::App, Arc<connections::Connections>, watch::Sender<bool>) {
    let (stop_runs, stop_runs_seen) = watch::channel(false);
    let connections = Arc::new(connections::Connections::new(options.limits));
    let app = app::App::new(
        runner,
        Arc::clone(catalog),
        options,
        Arc::clone(&connections),
        stop_runs_seen,
    );
    if let Some(every) = options.watch {
        tokio::spawn(watch_files(
            Arc::clone(catalog),
            every,
            Arc::clone(reporter),
            options.resources.clone(),
            options.cache.clone(),
            options.approvals.clone(),
        ));
    }
    (app, connections, stop_runs)
}

/// Looks at the served plans' files every `every`, swapping in the plans that changed and pass
/// their checks (built with `resources`, `cache` and `approvals`), and reporting the ones that do
/// not.
async fn watch_files(
    catalog: Arc<Catalog>,
    every: Duration,
    reporter: Arc<dyn Reporter>,
    resources: Resources,
    cache: Option<Arc<CallCache>>,
    approvals: Approvals,
) {
    let notice: Notice = {
        let reporter = Arc::clone(&reporter);
        Arc::new(move |line: &str| reporter.line(line))
    };
    let build = BuildOptions {
        notice: Some(notice),
        cache,
        approvals,
        ..BuildOptions::default()
    };
    let mut ticks = tokio::time::interval(every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let catalog = Arc::clone(&catalog);
        let (resources, build) = (resources.clone(), build.clone());
        // Checking and building read files: off the async workers.
        let refreshed = tokio::task::spawn_blocking(move || catalog.refresh(&resources, &build));
        let Ok(changes) = refreshed.await else {
            continue;
        };
        for change in changes {
            match change {
                catalog::Change::Added { name, path } => {
                    reporter.line(&format!("now serving {} as {name}", path.display()));
                }
                catalog::Change::Swapped { name, path } => {
                    reporter.line(&format!("reloaded {} (serving as {name})", path.display()));
                }
                catalog::Change::Skipped { path } => {
                    reporter.line(&format!(
                        "warning: skipping {}: not a regular file",
                        path.display()
                    ));
                }
                catalog::Change::Kept { path, why } => match why {
                    Rejected::Invalid(diagnostics) => reporter.rejected(&path, &diagnostics, None),
                    Rejected::Unbuildable(failure) => reporter.rejected(&path, &[], Some(&failure)),
                },
            }
        }
    }
}
