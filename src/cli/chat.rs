//! `pagantic chat PLAN`: a conversation with a plan's agent. Each line typed runs the plan with
//! the line as its message input; the earlier turns go to the agent as `history` (bounded by the
//! agent step's `memory`, its system prompt always kept); tool calls and their outcomes are shown
//! on stderr as they happen. An agent whose answer is the plan's output streams it to stdout as
//! it is generated (see [`Reply`]). The model is loaded once, on the first turn. `--save` keeps
//! the transcript as the conversation goes and `--load` continues one (see [`transcript`]).

use std::fmt::Display;
use std::io::{self, BufRead, IsTerminal, Write};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};

use serde_json::{Map, Value};
use tokio::sync::mpsc::Receiver;

use crate::core::Message;
use crate::inference::TokenSink;
use crate::orchestrate::RunIds;
use crate::orchestrate::inputs::{InputSpec, InputType};
use crate::orchestrate::{
    Event, EventData, Pipeline, RunStatus, Session, SessionOptions, ToolOutcome,
};
use crate::plan::build::BuildOptions;
use crate::plan::{StepType, canonical};

use super::approve::{self, TypedLines};
use super::common::{
    self, ApproveArgs, CacheArgs, Exit, Outcome, PlanInputs, TraceArgs, build, inputs_file,
    load_checked, open_session, print_failure, stderr_notice,
};
use super::transcript;
use super::{EXIT_INVALID, EXIT_OK};
use crate::core::text::terminal_safe;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The plan file; it needs an `agent` step.
    plan: PathBuf,
    #[command(flatten)]
    given: PlanInputs,
    /// The input each typed line is bound to (default: the plan's first string input).
    #[arg(long, value_name = "NAME")]
    message_input: Option<String>,
    /// Replace models with scripted echoes and side-effecting tools with stand-ins.
    #[arg(long)]
    dry_run: bool,
    /// Write every event of the conversation (each turn a run of its own) to FILE as JSON Lines;
    /// every line carries the chat's session id.
    #[arg(long, value_name = "FILE")]
    events: Option<PathBuf>,
    /// Append the conversation to FILE as it goes (JSON Lines: session, role, content), each turn
    /// as soon as it is answered.
    #[arg(long, value_name = "FILE")]
    save: Option<PathBuf>,
    /// Continue the conversation in FILE (a transcript `--save` wrote): its turns are the
    /// history, and its session id goes on.
    #[arg(long, value_name = "FILE")]
    load: Option<PathBuf>,
    #[command(flatten)]
    approve: ApproveArgs,
    #[command(flatten)]
    cache: CacheArgs,
    #[command(flatten)]
    trace: TraceArgs,
}

pub fn run(args: &Args) -> Outcome {
    let (chat_session, conversation) = open_conversation(args)?;
    let reply = Reply::default();
    let shown = reply.clone();
    let session = open_session(SessionOptions {
        events_file: args.events.clone(),
        observer: Some(Box::new(move |event: &Event| {
            // A round whose text streamed and then turned into a tool call: the call starts a
            // line of its own.
            if matches!(event.data, EventData::ToolStart { .. }) {
                shown.end_line();
            }
            show_tool_event(event);
        })),
        chat_session: Some(chat_session),
        cache: args.cache.settings(false),
        tracer: args.trace.tracer("chat"),
        ..SessionOptions::default()
    })?;
    let plan = load_checked(&session, &args.plan, &args.given)?;
    // Known from the plan alone: refused before any model is built or loaded.
    let has_agent = plan
        .raw
        .steps
        .iter()
        .any(|s| s.step_type() == StepType::Agent);
    if !has_agent {
        return refuse_session(
            &session,
            format_args!("{} has no `agent` step to chat with", args.plan.display()),
        );
    }
    let file = inputs_file(&session, &args.given)?;
    let lines: TypedLines = Arc::new(tokio::sync::Mutex::new(stdin_lines()));
    let pipeline = build(
        &session,
        &plan,
        BuildOptions {
            dry_run: args.dry_run,
            notice: Some(stderr_notice()),
            stream: Some(reply.sink()),
            approvals: approve::at_terminal(&args.approve, &lines),
            ..BuildOptions::default()
        },
    )?;
    let message_input = match message_input(args, &pipeline) {
        Ok(name) => name,
        Err(reason) => return refuse_session(&session, reason),
    };
    // What every turn is given besides its line is checked once, before the first turn: an
    // input the plan does not declare, or a value that does not fit, ends the chat as `run`.
    let mut given = args.given.inputs.clone();
    given.push((
        message_input.clone(),
        sample_line(&pipeline.inputs[&message_input]),
    ));
    if let Err(failure) = pipeline.bind(&given, file.clone()) {
        return common::refuse(&session, &failure);
    }
    let mut chat = Chat {
        args,
        session: &session,
        pipeline: &pipeline,
        file,
        message_input,
        conversation,
        reply,
        lines,
    };
    chat.converse()?;
    Ok(EXIT_OK)
}

/// Says why the command cannot go on, and exits as for an invalid plan.
fn refuse<T>(reason: impl Display) -> Outcome<T> {
    writeln!(
        io::stderr(),
        "error: {}",
        terminal_safe(&reason.to_string())
    )?;
    Err(Exit::Code(EXIT_INVALID))
}

/// [`refuse`] once the session is open: its events end with ERROR, as for an invalid plan.
fn refuse_session<T>(session: &Session, reason: impl Display) -> Outcome<T> {
    session.fail();
    session.finish();
    refuse(reason)
}

/// The conversation so far: its turns, and the transcript `--save` appends each new one to.
struct Conversation {
    history: Vec<Message>,
    saved: Option<transcript::Writer>,
}

impl Conversation {
    /// Adds a question and its answer, saving them first when `--save` asked.
    fn add_turn(&mut self, question: &str, answer: String) -> io::Result<()> {
        let turn = [Message::user(question), Message::assistant(answer)];
        if let Some(writer) = &mut self.saved {
            writer.write(&turn)?;
        }
        self.history.extend(turn);
        Ok(())
    }
}

/// The chat's session id and its conversation: the one `--load` continues, or a new one; with
/// `--save`'s transcript opened.
fn open_conversation(args: &Args) -> Outcome<(String, Conversation)> {
    let loaded = match &args.load {
        Some(path) => match transcript::load(path) {
            Ok(loaded) => Some(loaded),
            Err(error) => return refuse(error),
        },
        None => None,
    };
    let chat_session = loaded
        .as_ref()
        .map_or_else(|| RunIds::default().next(), |l| l.session.clone());
    let history: Vec<Message> = loaded.map(|l| l.messages).unwrap_or_default();
    let saved = match &args.save {
        Some(path) => {
            let mut writer = transcript::Writer::append(path, &chat_session)?;
            // Saving a loaded conversation elsewhere: the new file holds it whole.
            let same_file = args
                .load
                .as_ref()
                .is_some_and(|load| canonical(load) == canonical(path));
            if !(same_file && writer.kept_existing()) {
                writer.write(&history)?;
            }
            Some(writer)
        }
        None => None,
    };
    Ok((chat_session, Conversation { history, saved }))
}

/// The input each typed line is bound to: `--message-input`, else the plan's first string input;
/// or why there is none.
fn message_input(args: &Args, pipeline: &Pipeline) -> Result<String, String> {
    match &args.message_input {
        Some(name) if pipeline.inputs.contains_key(name) => Ok(name.clone()),
        Some(name) => Err(format!("the plan has no input `{name}`")),
        None => match pipeline
            .inputs
            .iter()
            .find(|(_, spec)| spec.kind == InputType::String)
        {
            Some((name, _)) => Ok(name.clone()),
            None => Err(
                "the plan has no string input for your messages (declare one, or name it with --message-input)"
                    .to_string(),
            ),
        },
    }
}

/// A line the message input accepts, to check the other inputs with before anything is typed.
fn sample_line(spec: &InputSpec) -> String {
    match spec.allowed.as_ref().and_then(|allowed| allowed.first()) {
        Some(Value::String(text)) => text.clone(),
        Some(other) => other.to_string(),
        None => match spec.kind {
            InputType::String => "",
            InputType::Number | InputType::Integer => "0",
            InputType::Boolean => "false",
            InputType::Array => "[]",
            InputType::Object => "{}",
        }
        .to_string(),
    }
}

/// A conversation with a built plan: what every turn needs.
struct Chat<'a> {
    args: &'a Args,
    session: &'a Session,
    pipeline: &'a Pipeline,
    /// The inputs of `--inputs-file`, given to every turn.
    file: Option<Map<String, Value>>,
    /// The input each typed line is bound to.
    message_input: String,
    conversation: Conversation,
    /// What the turn under way has streamed to stdout.
    reply: Reply,
    /// The lines typed, shared with the approval questions asked during a turn.
    lines: TypedLines,
}

impl Chat<'_> {
    /// Runs a turn for each line typed, until `/exit`, the end of input, or an interrupt at the
    /// prompt.
    fn converse(&mut self) -> Outcome<()> {
        let interactive = io::stdin().is_terminal();
        if interactive {
            writeln!(
                io::stderr(),
                "chatting with {} — /exit or Ctrl-D to leave, Ctrl-C stops a reply",
                self.args.plan.display()
            )?;
        }
        loop {
            if interactive {
                write!(io::stderr(), "you> ")?;
                io::stderr().flush()?;
            }
            let Some(line) = self.next_line()? else {
                return Ok(());
            };
            let line = line.trim();
            if line == "/exit" || line == "/quit" {
                return Ok(());
            }
            if !line.is_empty() {
                self.turn(line)?;
            }
        }
    }

    /// The next line typed; None at the end of input or on an interrupt (Ctrl-C or SIGTERM at
    /// the prompt ends the conversation; during a reply it stops the reply).
    fn next_line(&self) -> io::Result<Option<String>> {
        let interrupted = self.session.wait_for_interrupt();
        let next = self.session.block_on(async {
            let mut lines = self.lines.lock().await;
            tokio::select! {
                line = lines.recv() => line,
                () = interrupted => None,
            }
        });
        next.transpose()
    }

    /// Runs the plan on `line`, with the turns so far as `history`, and prints its answer. A
    /// failed or cancelled turn is reported and forgotten; the conversation goes on.
    fn turn(&mut self, line: &str) -> Outcome<()> {
        let mut given = self.args.given.inputs.clone();
        given.push((self.message_input.clone(), line.to_string()));
        let inputs = match self.pipeline.bind(&given, self.file.clone()) {
            Ok(inputs) => inputs,
            Err(failure) => {
                print_failure(&failure)?;
                return Ok(());
            }
        };
        let history = serde_json::to_value(&self.conversation.history).map_err(io::Error::other)?;
        let globals = Map::from_iter([("history".to_string(), history)]);
        self.reply.start();
        let record = self.session.run(self.pipeline, inputs, globals);
        let streamed = self.reply.end_line();
        match (record.status, record.error) {
            (RunStatus::Complete, _) => {
                let answer = match record.output {
                    Some(Value::String(text)) => text,
                    Some(other) => other.to_string(),
                    None => String::new(),
                };
                // Shown, not obeyed: an answer's control characters cannot drive the terminal
                // (the transcript keeps the exact text).
                if !streamed {
                    writeln!(io::stdout(), "{}", terminal_safe(&answer))?;
                }
                self.conversation.add_turn(line, answer)?;
            }
            (RunStatus::Cancelled, _) => {
                writeln!(io::stderr(), "(reply cancelled)")?;
                self.session.clear_interrupt();
            }
            (_, Some(failure)) => print_failure(&failure)?,
            (_, None) => {}
        }
        Ok(())
    }
}

/// The reply of the turn under way as it streams to stdout, shared by the build's token sink,
/// the tool-event observer and the turn.
#[derive(Clone, Default)]
struct Reply(Arc<Mutex<Streaming>>);

#[derive(Default)]
struct Streaming {
    /// Whether any of the turn's text has been shown.
    streamed: bool,
    /// Whether stdout's last line is unfinished.
    line_open: bool,
}

impl Reply {
    fn state(&self) -> std::sync::MutexGuard<'_, Streaming> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A new turn: nothing of it shown yet.
    fn start(&self) {
        *self.state() = Streaming::default();
    }

    /// Where the agent's answer streams: stdout, piece by piece, shown but not obeyed.
    fn sink(&self) -> TokenSink {
        let reply = self.clone();
        Arc::new(move |piece: &str| {
            if piece.is_empty() {
                return;
            }
            let mut state = reply.state();
            let mut stdout = io::stdout().lock();
            let _ = stdout.write_all(terminal_safe(piece).as_bytes());
            let _ = stdout.flush();
            state.streamed = true;
            state.line_open = !piece.ends_with('\n');
        })
    }

    /// Ends stdout's unfinished line, if any; whether the turn streamed text.
    fn end_line(&self) -> bool {
        let mut state = self.state();
        if state.line_open {
            let mut stdout = io::stdout().lock();
            let _ = stdout.write_all(b"\n");
            let _ = stdout.flush();
            state.line_open = false;
        }
        state.streamed
    }
}

/// Lines of stdin, read on a thread of their own so that waiting for one can be interrupted.
fn stdin_lines() -> Receiver<io::Result<String>> {
    let (sender, receiver) = tokio::sync::mpsc::channel(1);
    std::thread::spawn(move || {
        for line in io::stdin().lock().lines() {
            if sender.blocking_send(line).is_err() {
                break;
            }
        }
    });
    receiver
}

/// `→ tool {arguments}` when a tool starts, `← tool ok|failed|refused|cancelled (ms)` when it ends.
fn show_tool_event(event: &Event) {
    let line = match &event.data {
        EventData::ToolStart { tool, args, .. } => format!("  → {tool} {args}"),
        EventData::ToolEnd {
            tool,
            outcome,
            duration_ms,
            cached,
        } => {
            let (status, error) = match outcome {
                ToolOutcome::Ok { .. } => ("ok", None),
                ToolOutcome::Failed { error } => ("failed", Some(error)),
                ToolOutcome::Refused { error } => ("refused", Some(error)),
                ToolOutcome::Cancelled => ("cancelled", None),
            };
            let reason = error
                .map(|e| format!(": {}", e.message))
                .unwrap_or_default();
            let from = if *cached { ", from the cache" } else { "" };
            format!("  ← {tool} {status} ({duration_ms:.0} ms{from}){reason}")
        }
        _ => return,
    };
    let _ = writeln!(io::stderr(), "{}", terminal_safe(&line));
}
