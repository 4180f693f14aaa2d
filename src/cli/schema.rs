//! `pagantic schema` — write (or check) the JSON Schemas generated from the plan, policy and
//! test-file types.

use std::io::{self, Write};
use std::path::PathBuf;

use crate::plan::schema::SCHEMA_FILES;

use super::{EXIT_FAILED, EXIT_OK};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Directory to write `plan.schema.json`, `policy.schema.json` and `test.schema.json` into.
    #[arg(long, value_name = "DIR", default_value = "schemas")]
    out: PathBuf,
    /// Write nothing; exit 1 if the files in DIR differ from what this version generates.
    #[arg(long)]
    check: bool,
}

/// The text written for a schema: pretty JSON with a final newline.
pub fn schema_text(schema: &serde_json::Value) -> String {
    let mut text = serde_json::to_string_pretty(schema).unwrap_or_default();
    text.push('\n');
    text
}

pub fn run(args: &Args) -> io::Result<u8> {
    let mut stale = Vec::new();
    for (name, make) in SCHEMA_FILES {
        let path = args.out.join(name);
        let text = schema_text(&make());
        if args.check {
            if crate::core::file::read_bounded(&path, crate::core::file::TEXT_LIMIT)
                .ok()
                .as_deref()
                != Some(text.as_str())
            {
                stale.push(path);
            }
        } else {
            std::fs::create_dir_all(&args.out)?;
            crate::core::file::write_atomic(&path, text.as_bytes())?;
            writeln!(io::stderr(), "wrote {}", path.display())?;
        }
    }
    if stale.is_empty() {
        return Ok(EXIT_OK);
    }
    for path in &stale {
        writeln!(
            io::stderr(),
            "error: {} is missing or out of date; run `pagantic schema --out {}`",
            path.display(),
            args.out.display()
        )?;
    }
    Ok(EXIT_FAILED)
}
