//! `pagantic chat PLAN`: a conversation with a plan's agent. Each line typed runs the plan with
//! the line as its message input; the earlier turns go to the agent as `history` (bounded by the
//! agent step's `memory`, its system prompt always kept); tool calls and their outcomes are shown
//! on stderr as they happen. The model is loaded once, on the first turn.

use std::io::{self, BufRead, IsTerminal, Write};
use std::path::PathBuf;

use serde_json::Value;

use crate::core::Message;
use crate::orchestrate::{Event, EventKind, Events, RunOptions, RunStatus, execute};
use crate::plan::build::BuildOptions;
use crate::plan::inputs;
use crate::plan::model::InputType;

use super::run::{
    PlanInputs, build_pipeline, inputs_file, load_checked, print_failure, runtime, stderr_notice,
};
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
}

pub fn run(args: &Args) -> io::Result<u8> {
    let plan = match load_checked(&args.plan, &args.given)? {
        Ok(plan) => plan,
        Err(code) => return Ok(code),
    };
    if !plan
        .raw
        .steps
        .iter()
        .any(|s| s.step_type().name() == "agent")
    {
        writeln!(
            io::stderr(),
            "error: {} has no `agent` step to chat with",
            args.plan.display()
        )?;
        return Ok(EXIT_INVALID);
    }
    let message_input = match &args.message_input {
        Some(name) if plan.raw.inputs.contains_key(name) => name.clone(),
        Some(name) => {
            writeln!(io::stderr(), "error: the plan has no input `{name}`")?;
            return Ok(EXIT_INVALID);
        }
        None => match plan
            .raw
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
                return Ok(EXIT_INVALID);
            }
        },
    };
    let file = match inputs_file(&args.given)? {
        Ok(file) => file,
        Err(code) => return Ok(code),
    };
    let pipeline = match build_pipeline(
        &plan,
        BuildOptions {
            dry_run: args.dry_run,
            notice: Some(stderr_notice()),
            ..BuildOptions::default()
        },
    )? {
        Ok(pipeline) => pipeline,
        Err(code) => return Ok(code),
    };
    let runtime = runtime()?;
    let events = Events::with_observer(None, show_tool_event);
    let interactive = io::stdin().is_terminal();
    if interactive {
        writeln!(
            io::stderr(),
            "chatting with {} — /exit or Ctrl-D to leave",
            args.plan.display()
        )?;
    }
    let mut history: Vec<Message> = Vec::new();
    let mut lines = io::stdin().lock().lines();
    loop {
        if interactive {
            write!(io::stderr(), "you> ")?;
            io::stderr().flush()?;
        }
        let Some(line) = lines.next().transpose()? else {
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
        let inputs = match inputs::resolve(&plan.raw.inputs, &given, file.clone()) {
            Ok(inputs) => inputs,
            Err(failure) => {
                print_failure(&failure)?;
                continue;
            }
        };
        let mut options = RunOptions::new(4);
        options.globals.insert(
            "history".into(),
            serde_json::to_value(&history).map_err(io::Error::other)?,
        );
        let record = runtime.block_on(execute(&pipeline, inputs, options, &events));
        match (record.status, record.error) {
            (RunStatus::Complete, _) => {
                let answer = match record.output {
                    Some(Value::String(text)) => text,
                    Some(other) => other.to_string(),
                    None => String::new(),
                };
                writeln!(io::stdout(), "{answer}")?;
                history.push(Message::user(line));
                history.push(Message::assistant(answer));
            }
            // A failed turn is reported and forgotten; the conversation goes on.
            (_, Some(failure)) => print_failure(&failure)?,
            (_, None) => {}
        }
    }
    Ok(EXIT_OK)
}

/// `→ tool {arguments}` when a tool starts, `← tool ok|failed (ms)` when it ends.
fn show_tool_event(event: &Event) {
    let tool = event.data["tool"].as_str().unwrap_or("tool");
    let line = match event.kind {
        EventKind::ToolStart => format!("  → {tool} {}", event.data["args"]),
        EventKind::ToolEnd => format!(
            "  ← {tool} {} ({:.0} ms){}",
            event.data["status"].as_str().unwrap_or("done"),
            event.data["duration_ms"].as_f64().unwrap_or(0.0),
            event.data["error"]["message"]
                .as_str()
                .map(|m| format!(": {m}"))
                .unwrap_or_default()
        ),
        _ => return,
    };
    let _ = writeln!(io::stderr(), "{line}");
}
