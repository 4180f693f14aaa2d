//! `pagantic lock PLAN` — pin what a plan's answers depend on besides its text, in `PLAN.lock`.

use std::io::{self, Write};
use std::path::PathBuf;

use crate::plan::lock::{Lock, lock_path};
use crate::plan::{self};

use super::report::{self, Format};
use super::{EXIT_INVALID, EXIT_OK};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The plan file; the lockfile is written beside it as PLAN.lock.
    plan: PathBuf,
}

pub fn run(args: &Args) -> io::Result<u8> {
    let plan = match plan::load_plan(&args.plan, None) {
        Ok(plan) => plan,
        Err(diagnostics) => {
            report::print(&diagnostics, Format::Human)?;
            return Ok(EXIT_INVALID);
        }
    };
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
