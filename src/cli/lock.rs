//! `pagantic lock PLAN` — pin what a plan's answers depend on besides its text, in `PLAN.lock`.

use std::io::{self, Write};
use std::path::PathBuf;

use crate::plan::lock::{Lock, lock_path};

use super::EXIT_OK;
use super::common::{Outcome, load_plan};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The plan file; the lockfile is written beside it as PLAN.lock.
    plan: PathBuf,
}

pub fn run(args: &Args) -> Outcome {
    let plan = load_plan(&args.plan)?;
    let lock = Lock::of(&plan);
    let path = lock_path(&args.plan);
    std::fs::write(&path, lock.to_text())?;
    writeln!(
        io::stderr(),
        "wrote {} ({} models, {} files)",
        path.display(),
        lock.models.len(),
        lock.files.len()
    )?;
    Ok(EXIT_OK)
}
