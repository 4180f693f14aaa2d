//! `pagantic graph PLAN` — the step graph as Graphviz DOT or a Mermaid flowchart.

use std::io::{self, Write};
use std::path::PathBuf;

use clap::ValueEnum;

use super::EXIT_OK;
use super::common::{Outcome, load_plan};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum GraphFormat {
    /// Graphviz DOT (`pagantic graph plan.yaml | dot -Tsvg > plan.svg`).
    Dot,
    /// A Mermaid flowchart (renders in GitHub Markdown).
    Mermaid,
}

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The plan file.
    plan: PathBuf,
    /// Output format.
    #[arg(long, value_enum, default_value_t = GraphFormat::Dot)]
    format: GraphFormat,
}

pub fn run(args: &Args) -> Outcome {
    let plan = load_plan(&args.plan)?;
    let text = match args.format {
        GraphFormat::Dot => plan.graph.to_dot(&plan.raw.name, &plan.raw.steps),
        GraphFormat::Mermaid => plan.graph.to_mermaid(&plan.raw.steps),
    };
    let mut stdout = io::stdout().lock();
    stdout.write_all(text.as_bytes())?;
    stdout.flush()?;
    Ok(EXIT_OK)
}
