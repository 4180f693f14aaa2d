//! `pagantic lock PLAN` — pin what a plan's answers depend on besides its text, in `PLAN.lock`
//! (written atomically: a symbolic link at that path is replaced, never written through).

use std::io::{self, Write};
use std::path::PathBuf;

use crate::plan::lock::{Lock, lock_path};

use super::EXIT_OK;
use super::common::{Outcome, invalid, load_plan};
use crate::core::file::write_atomic;
use crate::orchestrate::Standalone;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The plan file; the lockfile is written beside it as PLAN.lock.
    plan: PathBuf,
}

pub fn run(args: &Args) -> Outcome {
    let plan = load_plan(&args.plan)?;
    let standalone = Standalone::start().or_else(|failure| invalid(&failure))?;
    let lock = Lock::of(&plan, standalone.resources());
    let path = lock_path(&args.plan);
    // Atomically, and replacing a symbolic link at the path rather than writing through it.
    write_atomic(&path, lock.to_text().as_bytes())?;
    let corpus_files: usize = lock.corpora.iter().flatten().map(|(_, f)| f.len()).sum();
    let corpora = match corpus_files {
        0 => String::new(),
        n => format!(", {n} corpus files"),
    };
    let servers = lock.mcp.iter().flatten();
    let mcp = match servers.clone().map(|(_, tools)| tools.len()).sum::<usize>() {
        0 => String::new(),
        n => format!(", {n} MCP tools of {} servers", servers.count()),
    };
    writeln!(
        io::stderr(),
        "wrote {} ({} models, {} files{corpora}{mcp})",
        path.display(),
        lock.models.len(),
        lock.files.len()
    )?;
    Ok(EXIT_OK)
}
