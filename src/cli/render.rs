//! `pagantic render` — the exact messages a step would send, or a prompt file rendered alone.

use std::io::{self, Write};
use std::path::PathBuf;

use serde_json::{Map, Value};

use crate::orchestrate::{Events, Rendered, RunOptions, render_step};
use crate::plan::build::BuildOptions;
use crate::plan::inputs;
use crate::prompt::Templates;

use super::run::{PlanInputs, build_pipeline, load, print_failure, runtime};
use super::{EXIT_FAILED, EXIT_INVALID, EXIT_OK};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// A plan file (with --step), or a prompt template file (with --var).
    file: PathBuf,
    /// The plan step to render; its upstream steps run first.
    #[arg(long, value_name = "NAME")]
    step: Option<String>,
    #[command(flatten)]
    given: PlanInputs,
    /// A template variable for rendering a prompt file alone, as NAME=VALUE (values that parse as
    /// JSON are JSON, others strings).
    #[arg(long = "var", value_name = "NAME=VALUE", value_parser = inputs::split_pair)]
    vars: Vec<(String, String)>,
    /// Run the upstream steps on the plan's own models instead of scripted echoes.
    #[arg(long)]
    live: bool,
}

pub fn run(args: &Args) -> io::Result<u8> {
    let is_plan = args
        .file
        .extension()
        .is_some_and(|e| e == "yaml" || e == "yml");
    if is_plan {
        render_plan_step(args)
    } else {
        render_template(args)
    }
}

fn render_template(args: &Args) -> io::Result<u8> {
    let dir = args.file.parent().map(|p| p.to_path_buf());
    let name = args
        .file
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default()
        .to_string();
    let context: Map<String, Value> = args
        .vars
        .iter()
        .map(|(k, v)| {
            (
                k.clone(),
                serde_json::from_str(v).unwrap_or_else(|_| Value::String(v.clone())),
            )
        })
        .collect();
    match Templates::new(dir).render_file(&name, &context) {
        Ok(text) => {
            writeln!(io::stdout(), "{text}")?;
            Ok(EXIT_OK)
        }
        Err(failure) => {
            print_failure(&failure)?;
            Ok(EXIT_INVALID)
        }
    }
}

fn render_plan_step(args: &Args) -> io::Result<u8> {
    let Some(step) = &args.step else {
        writeln!(io::stderr(), "error: rendering a plan needs --step NAME")?;
        return Ok(EXIT_INVALID);
    };
    let loaded = match load(&args.file, &args.given)? {
        Ok(loaded) => loaded,
        Err(code) => return Ok(code),
    };
    let names: Vec<&str> = loaded
        .plan
        .raw
        .steps
        .iter()
        .map(|s| s.common().name.as_str())
        .collect();
    let Some(target) = names.iter().position(|n| n == step) else {
        writeln!(
            io::stderr(),
            "error: no step `{step}` in {} ({})",
            args.file.display(),
            crate::plan::diagnostic::suggestion(step, "steps", names.iter().copied())
        )?;
        return Ok(EXIT_INVALID);
    };
    let pipeline = match build_pipeline(
        &loaded.plan,
        BuildOptions {
            dry_run: !args.live,
            notice: Some(super::run::stderr_notice()),
            ..BuildOptions::default()
        },
    )? {
        Ok(pipeline) => pipeline,
        Err(code) => return Ok(code),
    };
    let events = Events::new(None);
    let rendered = runtime()?.block_on(render_step(
        &pipeline,
        target,
        loaded.inputs,
        RunOptions::new(4),
        &events,
    ));
    let mut stdout = io::stdout().lock();
    match rendered {
        Ok(Rendered::Messages(messages)) => {
            write_messages(&mut stdout, None, &messages)?;
            Ok(EXIT_OK)
        }
        Ok(Rendered::Text(text)) => {
            writeln!(stdout, "{}", text.trim_end())?;
            Ok(EXIT_OK)
        }
        Err(failure) => {
            print_failure(&failure)?;
            Ok(EXIT_FAILED)
        }
    }
}

/// Messages as the model would get them: a `--- role ---` line (`--- step: role ---` when a
/// step is named), then the text.
pub(super) fn write_messages(
    out: &mut impl Write,
    step: Option<&str>,
    messages: &[crate::core::Message],
) -> io::Result<()> {
    for message in messages {
        let role = serde_json::to_value(message.role).unwrap_or_default();
        let role = role.as_str().unwrap_or("message");
        match step {
            Some(step) => writeln!(out, "--- {step}: {role} ---")?,
            None => writeln!(out, "--- {role} ---")?,
        }
        writeln!(out, "{}", message.content.trim_end())?;
    }
    Ok(())
}
