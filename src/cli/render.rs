//! `pagantic render` — the exact messages a step would send, or a prompt file rendered alone.

use std::io::{self, Write};
use std::path::PathBuf;

use serde_json::{Map, Value};

use crate::cache::CacheSettings;
use crate::orchestrate::{Rendered, SessionOptions};
use crate::plan::build::BuildOptions;
use crate::prompt::Templates;

use super::common::{
    CacheArgs, Exit, Outcome, PlanInputs, bind, build, for_stdout, load_checked, open_session,
    print_failure, split_pair, stderr_notice, write_messages,
};
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
    #[arg(long = "var", value_name = "NAME=VALUE", value_parser = split_pair)]
    vars: Vec<(String, String)>,
    /// Run the upstream steps on the plan's own models instead of scripted echoes.
    #[arg(long)]
    live: bool,
    /// With --live: the call cache (the echoes of a plain render never touch it).
    #[command(flatten)]
    cache: CacheArgs,
}

pub fn run(args: &Args) -> Outcome {
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

fn render_template(args: &Args) -> Outcome {
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
    match Templates::new(dir).render_file(&name, &Value::Object(context)) {
        Ok(text) => {
            writeln!(io::stdout(), "{}", for_stdout(&text))?;
            Ok(EXIT_OK)
        }
        Err(failure) => {
            print_failure(&failure)?;
            Ok(EXIT_INVALID)
        }
    }
}

fn render_plan_step(args: &Args) -> Outcome {
    let Some(step) = &args.step else {
        writeln!(io::stderr(), "error: rendering a plan needs --step NAME")?;
        return Err(Exit::Code(EXIT_INVALID));
    };
    let cache = match args.live {
        true => args.cache.settings(false),
        false => CacheSettings::default(),
    };
    let session = open_session(SessionOptions {
        cache,
        ..SessionOptions::default()
    })?;
    let plan = load_checked(&session, &args.file, &args.given)?;
    let pipeline = build(
        &session,
        &plan,
        BuildOptions {
            dry_run: !args.live,
            notice: Some(stderr_notice()),
            ..BuildOptions::default()
        },
    )?;
    let names: Vec<&str> = pipeline.steps.iter().map(|s| s.name.as_str()).collect();
    let Some(target) = names.iter().position(|n| n == step) else {
        writeln!(
            io::stderr(),
            "error: no step `{step}` in {} ({})",
            args.file.display(),
            crate::core::text::suggestion(step, "steps", names.iter().copied())
        )?;
        return Err(Exit::Code(EXIT_INVALID));
    };
    let inputs = bind(&session, &pipeline, &args.given)?;
    let rendered = session.render(&pipeline, target, inputs);
    let mut stdout = io::stdout().lock();
    match rendered {
        Ok(Rendered::Messages(messages)) => {
            write_messages(&mut stdout, None, &messages, for_stdout)?;
            Ok(EXIT_OK)
        }
        Ok(Rendered::Text(text)) => {
            writeln!(stdout, "{}", for_stdout(text.trim_end()))?;
            Ok(EXIT_OK)
        }
        Err(failure) => {
            print_failure(&failure)?;
            Ok(EXIT_FAILED)
        }
    }
}
