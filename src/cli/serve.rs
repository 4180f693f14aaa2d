//! `pagantic serve PLANS…` — serve plans over HTTP (see [`crate::serve`]): every plan is checked
//! and built first (any invalid plan: its diagnostics and exit 2, nothing served); the address
//! actually bound is printed on stderr (`--addr 127.0.0.1:0` picks a free port); SIGTERM or
//! Ctrl-C drains the server and exits 0. With `--mcp-stdio` the plans are MCP tools on stdin and
//! stdout instead, until the client closes stdin.

use std::io::{self, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::core::duration::DurationSpec;
use crate::core::text::terminal_safe;
use crate::core::{Failure, FailureCode};
use crate::orchestrate::{Session, SessionOptions};
use crate::plan::Diagnostic;
use crate::plan::build::BuildOptions;
use crate::serve::{self, Catalog, Limits, Rejected, Reporter, ServeOptions, Served, Shutdown};

use super::common::{
    ApproveArgs, CacheArgs, Exit, Outcome, TraceArgs, invalid, open_session, print_failure,
    stderr_notice,
};
use super::report::{self, Format};
use super::{EXIT_INVALID, EXIT_OK};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Plan files, directories (their `*.yaml` / `*.yml` files) or globs; each plan is served
    /// under its `name` (listed with its file at start-up). A directory or glob skips, with a
    /// note, the test files (`*.test.yaml`) and YAML files that are not plans.
    #[arg(required = true, value_name = "PLANS")]
    plans: Vec<String>,
    /// The address to listen on (port 0: any free port; the one bound is printed on stderr).
    #[arg(long, default_value = "127.0.0.1:8080", value_name = "HOST:PORT")]
    addr: SocketAddr,
    /// Most runs at once, over all plans.
    #[arg(long, default_value_t = 4, value_name = "N")]
    max_concurrent: usize,
    /// Most requests waiting for a run slot; more get 429 with Retry-After.
    #[arg(long, default_value_t = 64, value_name = "N")]
    queue: usize,
    /// Require `Authorization: Bearer <token>` on every request but /healthz, the token read
    /// from the environment variable NAME.
    #[arg(long, value_name = "NAME")]
    token_env: Option<String>,
    /// Largest request body accepted (bigger: 413).
    #[arg(long, default_value_t = 1024 * 1024, value_name = "BYTES")]
    max_body_bytes: usize,
    /// How long the runs in flight may go on after SIGTERM / Ctrl-C before they are cancelled
    /// (a second SIGTERM / Ctrl-C cancels them at once); idle connections close at once, and
    /// the server exits within this time and a second, whatever clients hold open. Seconds
    /// (`30`, `0.5`) or a duration (`1m`).
    #[arg(long, default_value = "30", value_name = "DURATION", value_parser = DurationSpec::parse_flag)]
    grace: Duration,
    /// Most connections open at once; at the limit a new connection closes the one idle
    /// longest (or waits, when every one is answering a request).
    #[arg(long, default_value_t = 512, value_name = "N")]
    max_connections: usize,
    /// How long a connection may stay open with nothing received: after it opens, or after an
    /// answer on a kept-alive connection.
    #[arg(long, default_value = "30", value_name = "DURATION", value_parser = DurationSpec::parse_flag)]
    idle_timeout: Duration,
    /// How long a request's headers may take to arrive, from their first byte.
    #[arg(long, default_value = "10", value_name = "DURATION", value_parser = DurationSpec::parse_flag)]
    header_timeout: Duration,
    /// How long a request's body may take to arrive, from the end of its headers (slower: 408).
    #[arg(long, default_value = "30", value_name = "DURATION", value_parser = DurationSpec::parse_flag)]
    body_timeout: Duration,
    /// Check plan and prompt files for changes every half second; a changed plan that passes
    /// its checks is swapped in, one that fails keeps the previous version serving; a plan file
    /// new in a served directory or glob is served once it passes.
    #[arg(long)]
    watch: bool,
    /// Most steps of one run running at once.
    #[arg(long, default_value_t = 4, value_name = "N")]
    max_parallel: usize,
    /// Origins (`scheme://host[:port]`) whose web pages may call the server; requests from any
    /// other page (they carry `Origin`) get 403. Default: none. Comma-separated or repeated.
    #[arg(long, value_name = "ORIGIN", value_delimiter = ',')]
    allowed_origins: Vec<String>,
    /// Host names requests may be addressed to. On a loopback address loopback names are always
    /// answered and any other host gets 403 (DNS rebinding); on another address, when given, only
    /// these. Comma-separated or repeated.
    #[arg(long, value_name = "HOST", value_delimiter = ',')]
    allowed_hosts: Vec<String>,
    /// Serve the plans as MCP tools too: streamable HTTP at /mcp, behind the same token and
    /// Host / Origin checks.
    #[arg(long)]
    mcp: bool,
    /// Serve the plans as MCP tools on stdin/stdout instead of HTTP (for MCP clients that start
    /// their tools as processes); nothing listens, and news goes to stderr.
    #[arg(long, conflicts_with_all = ["mcp", "addr", "token_env"])]
    mcp_stdio: bool,
    #[command(flatten)]
    approve: ApproveArgs,
    #[command(flatten)]
    cache: CacheArgs,
    #[command(flatten)]
    trace: TraceArgs,
}

/// How often `--watch` looks at the files.
const WATCH_EVERY: Duration = Duration::from_millis(500);

/// Checks and builds every plan at `paths` in the session's PREPARE stage (exit 2, the session
/// ended with ERROR, when any is invalid or cannot be built: each one's problem is printed).
fn load_all(session: &Session, paths: &[PathBuf], build: &BuildOptions) -> Outcome<Vec<Served>> {
    let resources = session.resources();
    let loaded: Vec<_> = session.prepare(|| {
        paths
            .iter()
            .map(|path| serve::load(path, resources, build))
            .collect()
    });
    let mut plans = Vec::new();
    let mut rejected = false;
    for result in loaded {
        match result {
            Ok(served) => plans.push(served),
            Err(Rejected::Invalid(diagnostics)) => {
                report::print(&diagnostics, Format::Human)?;
                rejected = true;
            }
            Err(Rejected::Unbuildable(failure)) => {
                print_failure(&failure)?;
                rejected = true;
            }
        }
    }
    if rejected {
        session.fail();
        session.finish();
        return Err(Exit::Code(EXIT_INVALID));
    }
    Ok(plans)
}

pub fn run(args: &Args) -> Outcome {
    let expanded = serve::expand(&args.plans).or_else(|failure| invalid(&failure))?;
    for path in &expanded.skipped {
        writeln!(
            io::stderr(),
            "warning: skipping {}: not a regular file",
            terminal_safe(&path.display().to_string())
        )?;
    }
    for (path, what) in &expanded.not_plans {
        writeln!(
            io::stderr(),
            "pagantic: skipping {}: {what}",
            terminal_safe(&path.display().to_string())
        )?;
    }
    let paths = &expanded.files;
    let token = match &args.token_env {
        Some(name) => match std::env::var(name) {
            Ok(token) if !token.is_empty() => Some(token),
            _ => {
                return invalid(
                    &Failure::new(
                        FailureCode::ConfigInvalidInput,
                        format!("--token-env {name}: the environment variable `{name}` is not set or empty"),
                    )
                    .with_help(format!("export {name}=<a secret token> before starting the server")),
                );
            }
        },
        None => None,
    };
    let session = open_session(SessionOptions {
        max_parallel: args.max_parallel,
        cache: args.cache.settings(false),
        tracer: args.trace.tracer("serve"),
        ..SessionOptions::default()
    })?;
    let build = BuildOptions {
        notice: Some(stderr_notice()),
        cache: session.cache(),
        approvals: args.approve.approvals(),
        ..BuildOptions::default()
    };
    let plans = load_all(&session, paths, &build)?;
    let catalog = Catalog::new(plans)
        .map(|catalog| catalog.watching(args.plans.clone(), expanded.skipped.clone()))
        .or_else(|failure| {
            session.fail();
            session.finish();
            invalid(&failure)
        })?;
    if token.is_none() && !args.addr.ip().is_loopback() && !args.mcp_stdio {
        writeln!(
            io::stderr(),
            "warning: serving on {} without a token: anyone who can reach it can run these plans (use --token-env)",
            args.addr
        )?;
    }
    let options = ServeOptions {
        addr: args.addr,
        max_concurrent: args.max_concurrent,
        queue: args.queue,
        token,
        max_body_bytes: args.max_body_bytes,
        grace: args.grace,
        watch: args.watch.then_some(WATCH_EVERY),
        cache: session.cache(),
        resources: session.resources().clone(),
        approvals: args.approve.approvals(),
        allowed_origins: args.allowed_origins.clone(),
        allowed_hosts: args.allowed_hosts.clone(),
        limits: Limits {
            max_connections: args.max_connections,
            idle: args.idle_timeout,
            header: args.header_timeout,
            body: args.body_timeout,
        },
        mcp: args.mcp,
    };
    let served = if args.mcp_stdio {
        session.block_on(serve::serve_stdio(
            session.runner(),
            catalog,
            options,
            Arc::new(StderrReporter),
            session.wait_for_interrupt(),
        ))
    } else {
        session.block_on(serve::serve(
            session.runner(),
            catalog,
            options,
            Arc::new(StderrReporter),
            Shutdown {
                first: session.wait_for_interrupt(),
                second: session.wait_for_signals(2),
            },
        ))
    };
    session.finish_serving(served.is_err());
    match served {
        Ok(()) => Ok(EXIT_OK),
        Err(failure) => invalid(&failure),
    }
}

/// Prints the server's news on stderr.
struct StderrReporter;

impl Reporter for StderrReporter {
    fn line(&self, text: &str) {
        let _ = writeln!(io::stderr(), "pagantic: {}", terminal_safe(text));
    }

    fn rejected(&self, path: &Path, diagnostics: &[Diagnostic], failure: Option<&Failure>) {
        let _ = writeln!(
            io::stderr(),
            "pagantic: {} changed but is rejected; the previous version goes on serving:",
            path.display()
        );
        let _ = report::print(diagnostics, Format::Human);
        if let Some(failure) = failure {
            let _ = print_failure(failure);
        }
    }
}
