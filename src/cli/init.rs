//! `pagantic init [DIR]` — a starter project: a plan on the embedded model, its test file with
//! three cases, the cassette those tests replay (recorded on the embedded model), a pre-commit
//! configuration and a GitHub Actions workflow that validate the plans and replay the tests. The
//! files are those of `examples/starter/` in pagantic's repository, built into the binary; the
//! project validates and its tests pass as written (`tests/cli/onramp.rs` checks both).
//!
//! Nothing is overwritten: when any of the files is already there, nothing is written (exit 2).
//! Each file is created only if nothing, not even a symbolic link, is at its path.

use std::fs::OpenOptions;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use crate::core::text::terminal_safe;
use crate::core::{Failure, FailureCode};

use super::EXIT_OK;
use super::common::{Outcome, invalid};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The project's directory (created when missing).
    #[arg(default_value = ".", value_name = "DIR")]
    dir: PathBuf,
}

/// The starter project: each file's path in the project and its text.
pub const STARTER: [(&str, &str); 5] = [
    (
        "plans/ask.yaml",
        include_str!("../../examples/starter/plans/ask.yaml"),
    ),
    (
        "plans/ask.test.yaml",
        include_str!("../../examples/starter/plans/ask.test.yaml"),
    ),
    (
        "plans/tests.cassette.jsonl",
        include_str!("../../examples/starter/plans/tests.cassette.jsonl"),
    ),
    (
        ".pre-commit-config.yaml",
        include_str!("../../examples/starter/.pre-commit-config.yaml"),
    ),
    (
        ".github/workflows/pagantic.yml",
        include_str!("../../examples/starter/.github/workflows/pagantic.yml"),
    ),
];

pub fn run(args: &Args) -> Outcome {
    let shown = |path: &Path| terminal_safe(&path.display().to_string()).into_owned();
    let taken: Vec<String> = STARTER
        .iter()
        .map(|(file, _)| args.dir.join(file))
        .filter(|path| path.symlink_metadata().is_ok())
        .map(|path| shown(&path))
        .collect();
    if !taken.is_empty() {
        return invalid(
            &Failure::new(
                FailureCode::ConfigFileError,
                format!("already there: {}", taken.join(", ")),
            )
            .with_help("give `pagantic init` a new or empty directory; nothing was written"),
        );
    }
    for (file, text) in STARTER {
        let path = args.dir.join(file);
        if let Err(e) = create(&path, text) {
            return invalid(
                &Failure::new(
                    FailureCode::ConfigFileError,
                    format!("cannot write {}: {e}", shown(&path)),
                )
                .with_help("choose a directory you can write to"),
            );
        }
    }
    let dir = shown(&args.dir);
    let mut stderr = io::stderr().lock();
    writeln!(stderr, "wrote a starter project in {dir}:")?;
    for (file, _) in STARTER {
        writeln!(stderr, "  {file}")?;
    }
    writeln!(
        stderr,
        "next:\n  cd {dir}\n  pagantic validate 'plans/*.yaml'\n  \
         pagantic test plans/ask.test.yaml --cassette plans/tests.cassette.jsonl\n  \
         pagantic run plans/ask.yaml -i \"question=Why is the sky blue?\"   # fetches the model once"
    )?;
    Ok(EXIT_OK)
}

/// Creates `path` (and its directories) holding `text`; fails if anything is at `path` already.
fn create(path: &Path, text: &str) -> io::Result<()> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    let mut file = OpenOptions::new().write(true).create_new(true).open(path)?;
    file.write_all(text.as_bytes())?;
    file.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The workflow installs the release of the version that writes it.
    #[test]
    fn the_workflow_installs_this_version() {
        let (_, workflow) = STARTER
            .iter()
            .find(|(file, _)| file.ends_with("pagantic.yml"))
            .expect("a workflow");
        let pinned = format!("PAGANTIC_VERSION: \"{}\"", env!("CARGO_PKG_VERSION"));
        assert!(workflow.contains(&pinned), "{pinned}");
    }

    /// A symbolic link at a file's path is not followed: its target is left as it was.
    #[test]
    fn a_link_in_the_way_is_not_written_through() {
        let dir = tempfile::tempdir().expect("temp dir");
        let target = dir.path().join("target.txt");
        std::fs::write(&target, "mine").expect("written");
        let link = dir.path().join("plans/ask.yaml");
        std::fs::create_dir_all(link.parent().expect("parent")).expect("dir");
        std::os::unix::fs::symlink(&target, &link).expect("linked");
        assert!(create(&link, "theirs").is_err());
        assert_eq!(std::fs::read_to_string(&target).expect("read"), "mine");
    }
}
