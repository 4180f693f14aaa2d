//! `pagantic chat PLAN`: a conversation with a plan's agent. Each line typed runs the plan with
//! the line as its message input; the earlier turns go to the agent as `history` (bounded by the
//! agent step's `memory`, its system prompt always kept); tool calls and their outcomes are shown
//! on stderr as they happen. The model is loaded once, on the first turn. `--save` keeps the
//! transcript as the conversation goes and `--load` continues one (see [`transcript`]).

use std::io::{self, BufRead, IsTerminal, Write};
use std::path::PathBuf;

use serde_json::{Map, Value};

use crate::core::Message;
use crate::orchestrate::inputs::InputType;
use crate::orchestrate::new_run_id;
use crate::orchestrate::{Event, EventData, RunStatus, SessionOptions, ToolOutcome};
use crate::plan::build::BuildOptions;
use crate::plan::canonical;

use super::common::{
    CacheArgs, Exit, Outcome, PlanInputs, build, inputs_file, load_checked, open_session,
    print_failure, stderr_notice,
};
use super::transcript;
use super::{EXIT_INVALID, EXIT_OK};

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
    cache: CacheArgs,
}

pub fn run(args: &Args) -> Outcome {
    let loaded = match &args.load {
        Some(path) => match transcript::load(path) {
            Ok(loaded) => Some(loaded),
            Err(error) => {
                writeln!(io::stderr(), "error: {error}")?;
                return Err(Exit::Code(EXIT_INVALID));
            }
        },
        None => None,
    };
    let chat_session = loaded
        .as_ref()
        .map_or_else(new_run_id, |l| l.session.clone());
    let mut history: Vec<Message> = loaded.map(|l| l.messages).unwrap_or_default();
    let mut saved = match &args.save {
        Some(path) => {
            let mut writer = transcript::Writer::append(path, &chat_session)?;
            // Saving a loaded conversation elsewhere: the new file holds it whole.
            let same_file = args
                .load
                .as_ref()
                .is_some_and(|load| canonical(load) == canonical(path));
            if !same_file {
                writer.write(&history)?;
            }
            Some(writer)
        }
        None => None,
    };
    let session = open_session(SessionOptions {
        events_file: args.events.clone(),
        observer: Some(Box::new(show_tool_event)),
        chat_session: Some(chat_session),
        cache: args.cache.settings(),
        ..SessionOptions::default()
    })?;
    let plan = load_checked(&session, &args.plan, &args.given)?;
    let file = inputs_file(&session, &args.given)?;
    let pipeline = build(
        &session,
        &plan,
        BuildOptions {
            dry_run: args.dry_run,
            notice: Some(stderr_notice()),
            ..BuildOptions::default()
        },
    )?;
    if !pipeline.steps.iter().any(|s| s.kind == "agent") {
        writeln!(
            io::stderr(),
            "error: {} has no `agent` step to chat with",
            args.plan.display()
        )?;
        return Err(Exit::Code(EXIT_INVALID));
    }
    let message_input = match &args.message_input {
        Some(name) if pipeline.inputs.contains_key(name) => name.clone(),
        Some(name) => {
            writeln!(io::stderr(), "error: the plan has no input `{name}`")?;
            return Err(Exit::Code(EXIT_INVALID));
        }
        None => match pipeline
            .inputs
            .iter()
            .find(|(_, spec)| spec.kind == InputType::String)
        {
            Some((name, _)) => name.clone(),
            None => {
                writeln!(
                    io::stderr(),
                    "error: the plan has no string input for your messages (declare one, or name it with --message-input)"
                )?;
                return Err(Exit::Code(EXIT_INVALID));
            }
        },
    };
    let interactive = io::stdin().is_terminal();
    if interactive {
        writeln!(
            io::stderr(),
            "chatting with {} — /exit or Ctrl-D to leave, Ctrl-C stops a reply",
            args.plan.display()
        )?;
    }
    let mut lines = stdin_lines();
    loop {
        if interactive {
            write!(io::stderr(), "you> ")?;
            io::stderr().flush()?;
        }
        // Ctrl-C or SIGTERM at the prompt ends the conversation; during a reply it stops the reply.
        let interrupted = session.wait_for_interrupt();
        let next = session.block_on(async {
            tokio::select! {
                line = lines.recv() => line,
                () = interrupted => None,
            }
        });
        let Some(line) = next.transpose()? else {
            break;
        };
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        if line == "/exit" || line == "/quit" {
            break;
        }
        let mut given = args.given.inputs.clone();
        given.push((message_input.clone(), line.to_string()));
        let inputs = match pipeline.bind(&given, file.clone()) {
            Ok(inputs) => inputs,
            Err(failure) => {
                print_failure(&failure)?;
                continue;
            }
        };
        let globals = Map::from_iter([(
            "history".to_string(),
            serde_json::to_value(&history).map_err(io::Error::other)?,
        )]);
        let record = session.run(&pipeline, inputs, globals);
        match (record.status, record.error) {
            (RunStatus::Complete, _) => {
                let answer = match record.output {
                    Some(Value::String(text)) => text,
                    Some(other) => other.to_string(),
                    None => String::new(),
                };
                writeln!(io::stdout(), "{answer}")?;
                let turn = [Message::user(line), Message::assistant(answer)];
                if let Some(writer) = &mut saved {
                    writer.write(&turn)?;
                }
                history.extend(turn);
            }
            (RunStatus::Cancelled, _) => {
                // The reply was stopped; the conversation goes on without it.
                writeln!(io::stderr(), "(reply cancelled)")?;
                session.clear_interrupt();
            }
            // A failed turn is reported and forgotten; the conversation goes on.
            (_, Some(failure)) => print_failure(&failure)?,
            (_, None) => {}
        }
    }
    Ok(EXIT_OK)
}

/// Lines of stdin, read on a thread of their own so that waiting for one can be interrupted.
fn stdin_lines() -> tokio::sync::mpsc::Receiver<io::Result<String>> {
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
        EventData::ToolStart { tool, args } => format!("  → {tool} {args}"),
        EventData::ToolEnd {
            tool,
            outcome,
            duration_ms,
            cached,
        } => {
            let (status, error) = match outcome {
                ToolOutcome::Ok => ("ok", None),
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
    let _ = writeln!(io::stderr(), "{line}");
}
