//! The command line: one module per subcommand, each with its clap `Args` and a `run` returning
//! the exit code. This is the only layer that prints; everything below returns values.
//!
//! Exit codes: 0 success; 1 a valid request whose work failed (e.g. schemas out of date);
//! 2 invalid input (plan, policy, flags) — nothing was executed; 75 (`run`) the work stopped or
//! failed for a reason that may pass — a scheduler should run it again.

mod approve;
mod batch;
mod cache;
mod chat;
mod common;
mod completions;
mod diff;
mod graph;
mod init;
mod lock;
mod man;
mod models;
mod render;
mod report;
mod run;
mod run_batch;
mod schema;
mod serve;
mod test;
mod tools;
mod transcript;
mod validate;

use std::io;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use common::Exit;
pub use report::Format;

/// Exit code: everything went well.
pub const EXIT_OK: u8 = 0;
/// Exit code: the input was valid but the work failed.
pub const EXIT_FAILED: u8 = 1;
/// Exit code: invalid input; nothing was executed.
pub const EXIT_INVALID: u8 = 2;
/// Exit code (`EX_TEMPFAIL`): the work stopped (a signal: a preemption, a time limit) or failed
/// for a reason that may pass (a rate limit, a server error); running it again (`--resume` for a
/// batch) may succeed, so a scheduler requeues it.
pub const EXIT_TEMPFAIL: u8 = 75;

/// pagantic — a declarative pipeline runner for LLM work.
///
/// Describe a pipeline once in a YAML plan file (retrieve, rerank, infer, structured output,
/// voting, agent tool loops, validation); pagantic checks it in milliseconds and builds it into a
/// step graph.
#[derive(Debug, Parser)]
#[command(
    name = "pagantic",
    version,
    about,
    long_about,
    max_term_width = 100,
    after_help = FIRST_COMMANDS
)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// What `pagantic --help` ends with: the commands a newcomer tries first, in order.
const FIRST_COMMANDS: &str = "\
First commands to try:
  pagantic init my-plans                 a starter project: a plan, its tests, a cassette, CI
  cd my-plans
  pagantic validate 'plans/*.yaml'       check the plans and test files (no model loaded)
  pagantic test plans/ask.test.yaml --cassette plans/tests.cassette.jsonl
                                         run the tests, answered from the recorded cassette
  pagantic run plans/ask.yaml -i \"question=Why is the sky blue?\"
                                         ask the embedded local model (fetched on first use)
  pagantic serve plans/                  serve the plans over HTTP";

#[derive(Debug, Subcommand)]
enum Command {
    /// Check plan files: YAML, schema, references, templates, prompt files and policy. Loads no
    /// model and runs nothing. Exit 0 when every plan is valid, 2 otherwise.
    #[command(after_help = "Example:\n  pagantic validate 'plans/*.yaml' --format github")]
    Validate(validate::Args),
    /// Run a plan: check it, build it, and execute its steps. The result goes to stdout, progress
    /// to stderr. Exit 0 when the run (every row) completes, 75 when it was stopped by a signal
    /// or a row failed for a reason that may pass (rate limit, server error: run it again), 1
    /// when it failed for good, 2 when the plan or its inputs are invalid (nothing ran).
    #[command(
        after_help = "Example:\n  pagantic run plans/quickstart.yaml -i \"question=Why is the sky blue?\""
    )]
    Run(run::Args),
    /// Talk to a plan's agent: each line you type runs the plan with it as the message; earlier
    /// turns are remembered, tool calls are shown as they happen. Ctrl-D or /exit to leave.
    #[command(after_help = "Example:\n  pagantic chat plans/agent.yaml")]
    Chat(chat::Args),
    /// Show the exact messages a plan step would send (its upstream steps run on scripted echoes
    /// unless --live), or render a single prompt file with --var values.
    #[command(
        after_help = "Example:\n  pagantic render plans/rag.yaml --step answer -i \"question=How do I resume a batch?\""
    )]
    Render(render::Args),
    /// Fetch, verify and list the embedded default models.
    #[command(after_help = "Example:\n  pagantic models pull")]
    Models(models::Args),
    /// Write the JSON Schemas of plan, policy and test files (for editors and CI), or check they are current.
    #[command(after_help = "Example:\n  pagantic schema --check")]
    Schema(schema::Args),
    /// Print a plan's step graph as Graphviz DOT or a Mermaid flowchart.
    #[command(after_help = "Example:\n  pagantic graph plans/rag.yaml --format mermaid")]
    Graph(graph::Args),
    /// Serve plans over HTTP: run them with POST /v1/plans/{name}/runs, or through the
    /// OpenAI-compatible POST /v1/chat/completions; /healthz and Prometheus /metrics. Every plan
    /// is checked first (exit 2 if any is invalid); SIGTERM drains and exits 0.
    #[command(after_help = "Example:\n  pagantic serve plans/ --addr 127.0.0.1:8080")]
    Serve(serve::Args),
    /// Test plans: run every case of test files (`*.test.yaml`) under every variant of the plan
    /// and score the assertions. Exit 0 when every suite reaches its pass rate, 1 when one does
    /// not, 2 when a test file or its plan is invalid (nothing ran).
    #[command(
        after_help = "Example:\n  pagantic test plans/classify.test.yaml --cassette plans/classify.cassette.jsonl"
    )]
    Test(test::Args),
    /// Pin a plan's models (SHA-256 or server and model name) and the SHA-256 of its prompt,
    /// schema and sub-plan files in PLAN.lock, for `run --locked` and `validate --locked`.
    #[command(after_help = "Example:\n  pagantic lock plans/rag.yaml")]
    Lock(lock::Args),
    /// Look after the call cache: `stats`, `prune --older-than 30d`, `clear`, `import` cassettes,
    /// `merge` other caches.
    #[command(after_help = "Example:\n  pagantic cache stats")]
    Cache(cache::Args),
    /// Batch outputs: `merge` joins the parts a sharded batch wrote into one output by row id.
    #[command(
        after_help = "Example:\n  pagantic batch merge out/part-*.jsonl --input input.jsonl --out merged.jsonl"
    )]
    Batch(batch::Args),
    /// List a plan's tools and whether each can run here now: available, unavailable (and why:
    /// not on PATH, a missing directory) or refused by the policy in force. Exit 0 when the plan
    /// is valid, 2 otherwise.
    #[command(after_help = "Example:\n  pagantic tools plans/agent.yaml")]
    Tools(tools::Args),
    /// Compare two runs: two run records (`run --format json`) or two batch outputs, row by row.
    /// Exit 0 when no status or output changed, 1 when something did, 2 when an input is unreadable.
    #[command(after_help = "Example:\n  pagantic diff before.json after.json")]
    Diff(diff::Args),
    /// Start a project: a plan on the embedded model, its test file (three cases), the cassette
    /// its tests replay, a pre-commit configuration and a GitHub Actions workflow that validate
    /// and test from the cassette. Writes into DIR (default: here) and refuses to overwrite any
    /// file. Exit 0 when written, 2 when a file is already there (nothing written).
    #[command(after_help = "Example:\n  pagantic init my-plans")]
    Init(init::Args),
    /// Print the completion script of a shell (bash, zsh, fish, powershell) on stdout.
    #[command(
        after_help = "Example:\n  pagantic completions bash > ~/.local/share/bash-completion/completions/pagantic"
    )]
    Completions(completions::Args),
    /// Write the man pages: `pagantic.1` on stdout, or with --out DIR one page per command
    /// (`pagantic.1`, `pagantic-run.1`, …) into DIR.
    #[command(after_help = "Example:\n  pagantic man --out ~/.local/share/man/man1")]
    Man(man::Args),
}

/// Parses the command line, runs the command, and returns the process exit code.
pub fn main() -> ExitCode {
    // First, before any API key is read: command tools run as the same user must not read this
    // process's environment through `/proc/<pid>/environ`.
    if let Err(e) = harden() {
        eprintln!(
            "warning: cannot make pagantic non-dumpable ({e}); a command tool running as the same \
             user can read pagantic's environment, API keys included"
        );
    }
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Validate(args) => validate::run(&args).map_err(Exit::from),
        Command::Run(args) => run::run(&args),
        Command::Chat(args) => chat::run(&args),
        Command::Render(args) => render::run(&args),
        Command::Models(args) => models::run(&args).map_err(Exit::from),
        Command::Schema(args) => schema::run(&args).map_err(Exit::from),
        Command::Graph(args) => graph::run(&args),
        Command::Diff(args) => diff::run(&args).map_err(Exit::from),
        Command::Serve(args) => serve::run(&args),
        Command::Test(args) => test::run(&args),
        Command::Cache(args) => cache::run(&args),
        Command::Batch(args) => batch::run(&args),
        Command::Lock(args) => lock::run(&args),
        Command::Tools(args) => tools::run(&args),
        Command::Init(args) => init::run(&args),
        Command::Completions(args) => completions::run(&args).map_err(Exit::from),
        Command::Man(args) => man::run(&args).map_err(Exit::from),
    };
    match result {
        Ok(code) | Err(Exit::Code(code)) => ExitCode::from(code),
        // A closed pipe (`pagantic graph plan.yaml | head`) is not an error.
        Err(Exit::Io(e)) if e.kind() == io::ErrorKind::BrokenPipe => ExitCode::from(EXIT_OK),
        Err(Exit::Io(e)) => {
            eprintln!("error: {e}");
            ExitCode::from(EXIT_FAILED)
        }
    }
}

/// Marks the process non-dumpable: its `/proc/<pid>/environ`, `mem` and the like then open only
/// for a process with `CAP_SYS_PTRACE`, not for any process of the same user (a command tool),
/// and it cannot be attached to with ptrace or leave a core dump.
#[cfg(target_os = "linux")]
fn harden() -> nix::Result<()> {
    nix::sys::prctl::set_dumpable(false)
}

/// Elsewhere there is no `prctl` (and no `/proc/<pid>/environ` to protect): nothing to do. Only
/// Linux is tested.
#[cfg(not(target_os = "linux"))]
fn harden() -> nix::Result<()> {
    Ok(())
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    /// Set in the copy of the test binary that runs the hardening, so that the shared test
    /// process stays dumpable for the tests after it.
    const IN_CHILD: &str = "PAGANTIC_HARDEN_TEST_CHILD";

    /// After hardening, the process is not dumpable. The test runs itself again in a child
    /// process and hardens only there.
    #[test]
    fn hardening_makes_the_process_non_dumpable() {
        if std::env::var_os(IN_CHILD).is_some() {
            super::harden().expect("prctl works on Linux");
            assert_eq!(nix::sys::prctl::get_dumpable(), Ok(false));
            return;
        }
        let name = format!(
            "{}::hardening_makes_the_process_non_dumpable",
            module_path!().split_once("::").map_or("", |(_, path)| path)
        );
        let child = std::process::Command::new(std::env::current_exe().expect("the test binary"))
            .args([name.as_str(), "--exact", "--test-threads=1"])
            .env(IN_CHILD, "1")
            .output()
            .expect("the test binary runs");
        let stdout = String::from_utf8_lossy(&child.stdout);
        assert!(
            child.status.success() && stdout.contains("1 passed"),
            "{stdout}{}",
            String::from_utf8_lossy(&child.stderr)
        );
        assert_eq!(
            nix::sys::prctl::get_dumpable(),
            Ok(true),
            "this process stays as it was"
        );
    }
}
