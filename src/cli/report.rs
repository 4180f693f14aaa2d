//! Printing diagnostics: human (miette's graphical report), JSON Lines, or GitHub annotations.
//!
//! Human output goes to stderr; machine formats go to stdout so they can be piped. Human output is
//! coloured only when stderr is a terminal and `NO_COLOR` is unset, and always wraps at a fixed
//! width, so snapshots of it are stable.

use std::io::{self, IsTerminal, Write};

use clap::ValueEnum;
use miette::{GraphicalReportHandler, GraphicalTheme};
use serde_json::json;

use crate::plan::Diagnostic;

/// How diagnostics are printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub enum Format {
    /// Annotated source excerpts with carets, on stderr.
    #[default]
    Human,
    /// One JSON object per diagnostic (JSON Lines) on stdout: file, line, column, code, message, help.
    Json,
    /// GitHub Actions workflow commands (`::error file=…,line=…,col=…::…`) on stdout.
    Github,
}

/// Width human reports wrap at.
const REPORT_WIDTH: usize = 100;

/// Prints diagnostics in `format`.
pub fn print(diagnostics: &[Diagnostic], format: Format) -> io::Result<()> {
    match format {
        Format::Human => {
            let mut stderr = io::stderr().lock();
            for diagnostic in diagnostics {
                stderr.write_all(render_human(diagnostic).as_bytes())?;
            }
            Ok(())
        }
        Format::Json => {
            let mut stdout = io::stdout().lock();
            for diagnostic in diagnostics {
                writeln!(stdout, "{}", render_json(diagnostic))?;
            }
            stdout.flush()
        }
        Format::Github => {
            let mut stdout = io::stdout().lock();
            for diagnostic in diagnostics {
                writeln!(stdout, "{}", render_github(diagnostic))?;
            }
            stdout.flush()
        }
    }
}

/// Whether human output on stderr should be coloured.
pub fn colour_stderr() -> bool {
    io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none()
}

/// The miette report for one diagnostic.
pub fn render_human(diagnostic: &Diagnostic) -> String {
    let theme = if colour_stderr() {
        GraphicalTheme::unicode()
    } else {
        GraphicalTheme::unicode_nocolor()
    };
    let handler = GraphicalReportHandler::new_themed(theme)
        .with_width(REPORT_WIDTH)
        .with_links(false);
    let mut out = String::new();
    if handler.render_report(&mut out, diagnostic).is_err() {
        out = format!("error: {diagnostic}\n");
    }
    out.push('\n');
    out
}

fn render_json(diagnostic: &Diagnostic) -> String {
    let (file, line, column) = match diagnostic.location() {
        Some((file, line, column)) => (Some(file.to_string()), Some(line), Some(column)),
        None => (None, None, None),
    };
    json!({
        "file": file,
        "line": line,
        "column": column,
        "severity": "error",
        "code": diagnostic.code(),
        "message": diagnostic.to_string(),
        "help": diagnostic.help_text(),
    })
    .to_string()
}

fn render_github(diagnostic: &Diagnostic) -> String {
    let mut properties = Vec::new();
    if let Some((file, line, column)) = diagnostic.location() {
        properties.push(format!("file={}", escape_property(file)));
        properties.push(format!("line={line}"));
        properties.push(format!("col={column}"));
    }
    properties.push(format!("title={}", escape_property(&diagnostic.code())));
    let mut message = diagnostic.to_string();
    if let Some(help) = diagnostic.help_text() {
        message.push_str("\nhelp: ");
        message.push_str(&help);
    }
    format!(
        "::error {}::{}",
        properties.join(","),
        escape_data(&message)
    )
}

fn escape_data(text: &str) -> String {
    text.replace('%', "%25")
        .replace('\r', "%0D")
        .replace('\n', "%0A")
}

fn escape_property(text: &str) -> String {
    escape_data(text).replace(':', "%3A").replace(',', "%2C")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{PlanError, Source};

    fn sample() -> Diagnostic {
        let source = Source::new("plans/a.yaml", "version: 1\nname: a\nsteps: []\n");
        Diagnostic::at(
            PlanError::UnknownStep { name: "x".into() },
            &source,
            19..24,
            "no step has this name",
        )
        .with_hint("did you mean `y`?")
    }

    #[test]
    fn json_has_location_code_and_message() {
        let value: serde_json::Value = serde_json::from_str(&render_json(&sample())).expect("json");
        assert_eq!(value["file"], "plans/a.yaml");
        assert_eq!(value["line"], 3);
        assert_eq!(value["column"], 1);
        assert_eq!(value["code"], "plan::unknown_step");
        assert_eq!(value["message"], "unknown step `x`");
        assert_eq!(value["help"], "did you mean `y`?");
    }

    #[test]
    fn github_annotations_escape_their_separators() {
        assert_eq!(
            render_github(&sample()),
            "::error file=plans/a.yaml,line=3,col=1,title=plan%3A%3Aunknown_step::unknown step `x`%0Ahelp: did you mean `y`?"
        );
    }
}
