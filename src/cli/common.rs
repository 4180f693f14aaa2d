//! What the commands that run plans share: the input flags, loading and checking a plan, opening
//! a session, building and binding inputs, and printing failures. Each helper prints its own
//! problem and returns [`Exit`] with the code to leave with, so commands chain them with `?`; a
//! helper that stops a session's run before it starts ends the session's lifecycle with ERROR, so
//! an events file never stops silently at PLAN or PREPARE.

use std::borrow::Cow;
use std::io::{self, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::{Map, Value};

use crate::cache::{CacheMode, CacheSettings};
use crate::core::text::terminal_safe;
use crate::core::{Failure, FailureCode, Message};
use crate::model_store::Notice;
use crate::orchestrate::tools::Approvals;
use crate::orchestrate::{Pipeline, Session, SessionOptions, Tracer};
use crate::plan::build::BuildOptions;
use crate::plan::lock::{Lock, lock_path};
use crate::plan::yaml::{self, YamlError};
use crate::plan::{self, Plan};
use crate::trace::{Exporter, TraceSettings};

use super::EXIT_INVALID;
use super::report::{self, Format};

/// Why a command stopped before its end: a problem already reported on stderr, with the exit
/// code it calls for, or an I/O error writing the report.
#[derive(Debug)]
pub enum Exit {
    Code(u8),
    Io(io::Error),
}

impl From<io::Error> for Exit {
    fn from(error: io::Error) -> Self {
        Exit::Io(error)
    }
}

/// A command's result: its exit code, or why it stopped early.
pub type Outcome<T = u8> = Result<T, Exit>;

/// Inputs and plan selection shared by `run`, `chat` and `render`.
#[derive(Debug, clap::Args)]
pub struct PlanInputs {
    /// An input, as NAME=VALUE (repeatable). Non-string inputs are parsed as JSON.
    #[arg(short = 'i', long = "input", value_name = "NAME=VALUE", value_parser = split_pair)]
    pub inputs: Vec<(String, String)>,
    /// A JSON file with an object of inputs; `-i` values override it.
    #[arg(long, value_name = "FILE")]
    pub inputs_file: Option<PathBuf>,
    /// A policy file whose limits apply on top of the plan's own.
    #[arg(long, value_name = "FILE")]
    pub policy: Option<PathBuf>,
}

/// The call cache flags every command that runs plans takes (`run`, `run --batch`, `chat`,
/// `render --live`, `serve`, `test`): flatten it into the command's `Args` and pass
/// [`CacheArgs::settings`] as `SessionOptions::cache`; the session writes `--record` when it ends.
#[derive(Debug, Clone, Default, clap::Args)]
#[command(next_help_heading = "Call cache")]
pub struct CacheArgs {
    /// Neither read nor write the call cache: every model call reaches its model.
    #[arg(long, conflicts_with = "cache_only")]
    pub no_cache: bool,
    /// Answer every model call from the call cache; a call it does not hold fails with
    /// CACHE_MISS (replays in CI, with no model at hand). PAGANTIC_CACHE_ONLY=1 does the same
    /// for every command that is not given --no-cache.
    #[arg(long)]
    pub cache_only: bool,
    /// Answer every model call from FILE, a cassette --record wrote, as --cache-only does from
    /// the cache; the call cache is neither read nor written.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["no_cache", "cache_only", "cache_dir"])]
    pub cassette: Option<PathBuf>,
    /// The call cache's directory (default: $PAGANTIC_CACHE_DIR, else $PAGANTIC_HOME/cache,
    /// else ~/.cache/pagantic/cache).
    #[arg(long = "cache", value_name = "DIR")]
    pub cache_dir: Option<PathBuf>,
    /// When the command ends (also when it fails), write every cache entry it read or stored
    /// to FILE: a cassette (JSON Lines, sorted by key) to commit and replay with --cassette.
    #[arg(long, value_name = "FILE", conflicts_with = "no_cache")]
    pub record: Option<PathBuf>,
    /// With --record: cached tool results too (they can hold the contents of files).
    #[arg(long, requires = "record")]
    pub record_tools: bool,
}

impl CacheArgs {
    /// The session's cache settings: on unless `--no-cache`, read-only from the cache or a
    /// cassette with `--cache-only` or `--cassette`, warnings on stderr, and what `--record`
    /// wrote too unless `quiet`.
    pub fn settings(&self, quiet: bool) -> CacheSettings {
        let only = self.cache_only || self.cassette.is_some() || cache_only_from_env();
        let mode = match (self.no_cache, only) {
            (true, _) => CacheMode::Off,
            (false, true) => CacheMode::Only,
            (false, false) => CacheMode::ReadWrite,
        };
        CacheSettings {
            mode,
            dir: self.cache_dir.clone(),
            warn: Some(stderr_notice()),
            notice: (!quiet).then(stderr_notice),
            cassette: self.cassette.clone(),
            record: self.record.clone(),
            record_tools: self.record_tools,
        }
    }
}

/// The environment variable that makes every command that runs plans answer from the call
/// cache only, as `--cache-only` does: for CI jobs and scripts that replay, and for the docs'
/// examples, run as written against recorded answers.
pub const CACHE_ONLY_VAR: &str = "PAGANTIC_CACHE_ONLY";

/// Whether [`CACHE_ONLY_VAR`] is set to anything but empty or `0`.
fn cache_only_from_env() -> bool {
    std::env::var_os(CACHE_ONLY_VAR).is_some_and(|value| !value.is_empty() && value != "0")
}

/// `--approve TOOL`: the commands that run plans (`run`, `chat`, `test`, `serve`) let the tools
/// it names run without asking, though they are marked `approval: required`.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ApproveArgs {
    /// Let tool TOOL run though it is marked `approval: required` (repeatable); without it,
    /// its calls fail with TOOL_APPROVAL_REQUIRED (in `chat` at a terminal, you are asked).
    #[arg(long = "approve", value_name = "TOOL")]
    pub approve: Vec<String>,
}

impl ApproveArgs {
    /// The approvals of a command with nobody to ask: the named tools only.
    pub fn approvals(&self) -> Approvals {
        Approvals {
            approved: self.approve.clone(),
            ask: None,
        }
    }
}

/// The trace flags of the commands that run plans (`run`, `run --batch`, `chat`, `test`,
/// `serve`): flatten it into the command's `Args` and pass [`TraceArgs::tracer`] as
/// `SessionOptions::tracer`.
#[derive(Debug, Clone, Default, clap::Args)]
#[command(next_help_heading = "Traces")]
pub struct TraceArgs {
    /// Export OpenTelemetry traces over OTLP/HTTP to the collector at URL (`/v1/traces` is
    /// added); without it, traces are exported when OTEL_EXPORTER_OTLP_ENDPOINT or
    /// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set.
    #[arg(long, value_name = "URL")]
    pub otlp: Option<String>,
    /// Put prompts, answers, tool arguments and results in the exported spans (as
    /// OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true does); off by default.
    #[arg(long)]
    pub trace_content: bool,
}

impl TraceArgs {
    /// The session's trace exporter, when the flags or the environment turn export on (None
    /// otherwise); `command` names its root span (`pagantic batch`), and what was not exported
    /// is said on stderr.
    pub fn tracer(&self, command: &str) -> Option<Arc<dyn Tracer>> {
        let settings = TraceSettings {
            endpoint: self.otlp.clone(),
            capture_content: self.trace_content,
            session_name: format!("pagantic {command}"),
            warn: Some(stderr_notice()),
        };
        let exporter = Exporter::start(&settings)?;
        Some(Arc::new(exporter))
    }
}

/// `-j N`: how many batch rows (`run --batch`) or test cases (`test`) run at once.
#[derive(Debug, Clone, Copy, clap::Args)]
pub struct ConcurrencyArgs {
    /// Rows (or test cases) in flight at once; they share one loaded model.
    #[arg(
        short = 'j',
        long = "concurrency",
        default_value_t = 4,
        value_name = "N"
    )]
    pub concurrency: usize,
}

/// Splits `name=value` (at the first `=`).
pub fn split_pair(text: &str) -> Result<(String, String), NotAPair> {
    match text.split_once('=') {
        Some((name, value)) if !name.is_empty() => Ok((name.to_string(), value.to_string())),
        _ => Err(NotAPair(text.to_string())),
    }
}

/// A flag's value that should be `NAME=VALUE` and is not (no `=`, or nothing before it).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("expected NAME=VALUE, got `{0}`")]
pub struct NotAPair(pub String);

/// Prints one-time work (pulling or loading a model) and what engines say (a server's refusal,
/// quoted) on stderr, its control characters shown, not obeyed.
pub fn stderr_notice() -> Notice {
    Arc::new(|line: &str| {
        let _ = writeln!(io::stderr(), "pagantic: {}", terminal_safe(line));
    })
}

/// Text from a model, a server or a file bound for stdout: on a terminal its control characters
/// are shown as escapes ([`terminal_safe`]), so it cannot drive the terminal; a pipe or a file
/// gets its exact text.
pub fn for_stdout(text: &str) -> Cow<'_, str> {
    if io::stdout().is_terminal() {
        terminal_safe(text)
    } else {
        Cow::Borrowed(text)
    }
}

/// Prints a failure with its code and help on stderr.
pub fn print_failure(failure: &Failure) -> io::Result<()> {
    let mut stderr = io::stderr().lock();
    // A message can quote a model's answer: its control characters are shown, not obeyed.
    let message = terminal_safe(&failure.message);
    writeln!(stderr, "error[{}]: {message}", failure.code)?;
    if let Some(help) = &failure.help {
        writeln!(stderr, "  help: {}", terminal_safe(help))?;
    }
    Ok(())
}

/// Prints `failure` and stops with exit 2: the input was invalid and nothing ran.
pub fn invalid<T>(failure: &Failure) -> Outcome<T> {
    print_failure(failure)?;
    Err(Exit::Code(EXIT_INVALID))
}

/// Ends `session` with ERROR, prints `failure` and stops with exit 2: nothing ran.
pub fn refuse<T>(session: &Session, failure: &Failure) -> Outcome<T> {
    session.fail();
    session.finish();
    invalid(failure)
}

/// Opens the session every run goes through (exit 2 when its events file cannot be written).
pub fn open_session(options: SessionOptions) -> Outcome<Session> {
    Session::open(options).or_else(|failure| invalid(&failure))
}

/// Loads and checks the plan at `path` outside a session (`graph`, `lock`): exit 2 with its
/// diagnostics when invalid.
pub fn load_plan(path: &Path) -> Outcome<Plan> {
    plan::load_plan(path, None).or_else(|diagnostics| {
        report::print(&diagnostics, Format::Human)?;
        Err(Exit::Code(EXIT_INVALID))
    })
}

/// Loads and checks the plan under the policy file, if any (exit 2 with diagnostics, and the
/// session ended with ERROR, when invalid).
pub fn load_checked(session: &Session, path: &Path, given: &PlanInputs) -> Outcome<Plan> {
    let loaded = match &given.policy {
        Some(policy) => {
            plan::load_policy(policy).and_then(|policy| plan::load_plan(path, Some(&policy)))
        }
        None => plan::load_plan(path, None),
    };
    loaded.or_else(|diagnostics| {
        session.fail();
        session.finish();
        report::print(&diagnostics, Format::Human)?;
        Err(Exit::Code(EXIT_INVALID))
    })
}

/// Refuses (exit 2, the session ended with ERROR) a plan that no longer matches its lockfile.
pub fn check_lock(session: &Session, plan: &Plan) -> Outcome<()> {
    Lock::check(plan, &lock_path(&plan.path), session.resources())
        .or_else(|failure| refuse(session, &failure))
}

/// Builds the plan's pipeline in the session's PREPARE stage, with the session's resources and
/// behind its call cache (exit 2 when it cannot be built: nothing ran).
pub fn build(session: &Session, plan: &Plan, options: BuildOptions) -> Outcome<Pipeline> {
    let options = BuildOptions {
        cache: session.cache(),
        ..options
    };
    session
        .prepare(|| plan.build(session.resources(), options))
        .or_else(|failure| refuse(session, &failure))
}

/// The object of `--inputs-file`, if given (exit 2 when it cannot be read).
pub fn inputs_file(session: &Session, given: &PlanInputs) -> Outcome<Option<Map<String, Value>>> {
    match &given.inputs_file {
        Some(path) => read_inputs_file(path)
            .map(Some)
            .or_else(|failure| refuse(session, &failure)),
        None => Ok(None),
    }
}

/// The run's inputs from `-i` pairs and `--inputs-file` (exit 2 when they do not fit the plan).
pub fn bind(session: &Session, pipeline: &Pipeline, given: &PlanInputs) -> Outcome<Value> {
    let file = inputs_file(session, given)?;
    pipeline
        .bind(&given.inputs, file)
        .or_else(|failure| refuse(session, &failure))
}

fn read_inputs_file(path: &Path) -> Result<Map<String, Value>, Failure> {
    let text = crate::core::file::read_bounded(path, crate::core::file::TEXT_LIMIT)?;
    // JSON keeps the last of two equal keys without a word; a plan refuses them, so do inputs.
    if let Err(YamlError::DuplicateKey { key, second, .. }) = yaml::parse(&text) {
        let line = text
            .chars()
            .take(second.start)
            .filter(|c| *c == '\n')
            .count()
            + 1;
        return Err(Failure::new(
            FailureCode::ConfigInvalidInput,
            format!(
                "{}:{line}: the key `{key}` appears twice; which value was meant?",
                path.display()
            ),
        )
        .with_help("give every input once"));
    }
    match serde_json::from_str::<Value>(&text) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(_) => Err(Failure::new(
            FailureCode::ConfigInvalidInput,
            format!("{} must hold a JSON object of inputs", path.display()),
        )),
        Err(e) => Err(Failure::new(
            FailureCode::ConfigInvalidInput,
            format!("{} is not JSON: {e}", path.display()),
        )),
    }
}

/// Messages as the model would get them: a `--- role ---` line (`--- step: role ---` when a
/// step is named), then the text, passed through `shown` (`terminal_safe` for a terminal).
pub fn write_messages(
    out: &mut impl Write,
    step: Option<&str>,
    messages: &[Message],
    shown: impl for<'t> Fn(&'t str) -> Cow<'t, str>,
) -> io::Result<()> {
    for message in messages {
        let role = serde_json::to_value(message.role).unwrap_or_default();
        let role = role.as_str().unwrap_or("message");
        match step {
            Some(step) => writeln!(out, "--- {step}: {role} ---")?,
            None => writeln!(out, "--- {role} ---")?,
        }
        writeln!(out, "{}", shown(message.content.trim_end()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_inputs_file_with_a_key_twice_is_refused() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("inputs.json");
        std::fs::write(
            &path,
            "{\n  \"question\": \"a\",\n  \"question\": \"b\"\n}\n",
        )
        .expect("written");
        let failure = read_inputs_file(&path).expect_err("refused");
        assert_eq!(failure.code, FailureCode::ConfigInvalidInput);
        assert!(
            failure.message.ends_with(
                "inputs.json:3: the key `question` appears twice; which value was meant?"
            ),
            "{}",
            failure.message
        );
        std::fs::write(&path, "{\"question\": \"a\"}").expect("written");
        assert_eq!(read_inputs_file(&path).map(|m| m.len()), Ok(1));
    }

    #[test]
    fn pairs_split_at_the_first_equals_sign() {
        assert_eq!(split_pair("q=a=b"), Ok(("q".into(), "a=b".into())));
        assert!(split_pair("=x").is_err());
        assert!(split_pair("novalue").is_err());
    }
}
