//! Printing diagnostics: human (miette's graphical report), JSON Lines, or GitHub annotations.
//!
//! Human output goes to stderr; machine formats go to stdout so they can be piped. Human output is
//! coloured only as [`colour_stderr`] says (at a terminal, and never with `NO_COLOR`), and always
//! wraps at a fixed width, so snapshots of it are stable.

use std::io::{self, IsTerminal, Write};

use clap::ValueEnum;
use miette::{GraphicalReportHandler, GraphicalTheme};
use serde_json::json;

use crate::core::text::{workflow_data, workflow_property};
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

/// Whether human output on stderr should be coloured: never with `NO_COLOR` set (not empty);
/// always with `CLICOLOR_FORCE` set (not `0`); otherwise at a terminal that shows colour
/// (`TERM` is not `dumb`), unless `CLICOLOR=0`. The rule clap follows for its help and errors.
pub fn colour_stderr() -> bool {
    if anstyle_query::no_color() {
        return false;
    }
    if anstyle_query::clicolor_force() {
        return true;
    }
    io::stderr().is_terminal()
        && anstyle_query::clicolor().unwrap_or(true)
        && anstyle_query::term_supports_color()
}

/// Longest line shown whole in a report; a longer one is shown around its label.
const MAX_SHOWN_LINE: usize = 200;
/// Characters kept on each side of a label on a shortened line.
const SHOWN_AROUND: usize = 60;

/// A copy of `diagnostic` whose primary label's line, when longer than [`MAX_SHOWN_LINE`]
/// characters, is cut to the label and [`SHOWN_AROUND`] characters on each side (`…` marks the
/// cuts); labels are moved with the text and columns still count from the file's line start.
/// None when nothing needs cutting.
fn shorten_long_line(diagnostic: &Diagnostic) -> Option<Diagnostic> {
    let source = diagnostic.source.as_ref()?;
    let primary = diagnostic
        .labels
        .iter()
        .find(|l| l.primary())
        .or(diagnostic.labels.first())?;
    let text = &source.text;
    let (start, end) = (primary.offset(), primary.offset() + primary.len());
    if end > text.len() || !text.is_char_boundary(start) || !text.is_char_boundary(end) {
        return None;
    }
    let line_start = text[..start].rfind('\n').map_or(0, |i| i + 1);
    let line_end = text[start..].find('\n').map_or(text.len(), |i| start + i);
    if text[line_start..line_end].chars().count() <= MAX_SHOWN_LINE {
        return None;
    }
    let keep_from = text[line_start..start]
        .char_indices()
        .rev()
        .nth(SHOWN_AROUND - 1)
        .map_or(line_start, |(i, _)| line_start + i);
    let keep_to = text[end..line_end]
        .char_indices()
        .nth(SHOWN_AROUND)
        .map_or(line_end, |(i, _)| end + i);
    let (before, after) = (
        if keep_from > line_start { "…" } else { "" },
        if keep_to < line_end { "…" } else { "" },
    );
    let shortened = format!(
        "{}{before}{}{after}{}",
        &text[..line_start],
        &text[keep_from..keep_to],
        &text[line_end..]
    );
    let moved = |offset: usize| -> Option<usize> {
        if offset < line_start {
            Some(offset)
        } else if offset >= line_end {
            Some(offset + shortened.len() - text.len())
        } else if (keep_from..=keep_to).contains(&offset) {
            Some(offset - keep_from + line_start + before.len())
        } else {
            None
        }
    };
    let labels = diagnostic
        .labels
        .iter()
        .filter_map(|label| {
            let offset = moved(label.offset())?;
            let span = miette::SourceSpan::new(offset.into(), label.len());
            let text = label.label().map(String::from);
            Some(if label.primary() {
                miette::LabeledSpan::new_primary_with_span(text, span)
            } else {
                miette::LabeledSpan::new_with_span(text, span)
            })
        })
        .collect();
    // Columns as the report counts them on any line (bytes from the line start).
    let cut_columns = (keep_from - line_start) - before.len();
    let line_index = text[..line_start].matches('\n').count();
    let mut copy = diagnostic.clone();
    copy.source = Some(crate::plan::Source {
        name: source.name.clone(),
        text: shortened.into(),
        column_shift: Some((line_index, cut_columns)),
    });
    copy.labels = labels;
    Some(copy)
}

/// The miette report for one diagnostic.
pub fn render_human(diagnostic: &Diagnostic) -> String {
    let shortened = shorten_long_line(diagnostic);
    let diagnostic = shortened.as_ref().unwrap_or(diagnostic);
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
        properties.push(format!("file={}", workflow_property(file)));
        properties.push(format!("line={line}"));
        properties.push(format!("col={column}"));
    }
    properties.push(format!("title={}", workflow_property(&diagnostic.code())));
    let mut message = diagnostic.to_string();
    if let Some(help) = diagnostic.help_text() {
        message.push_str("\nhelp: ");
        message.push_str(&help);
    }
    format!(
        "::error {}::{}",
        properties.join(","),
        workflow_data(&message)
    )
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
