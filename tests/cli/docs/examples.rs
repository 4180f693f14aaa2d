//! Every example in `README.md` and `docs/` runs as written, or says why it cannot run here.
//!
//! A fenced block's info string is its language, then, optionally, what the docs test is to do
//! with it (GitHub shows the language and nothing more):
//!
//! - `sh`, `bash`, `shell`: the block runs with bash (`-e -o pipefail`) in a sandbox laid out
//!   like the repository (see [`sandbox`]), and must exit 0.
//! - `console`: each `$ ` line runs the same way, and what it prints (stdout and stderr) must
//!   match the lines below it (`[..]` stands for any text within a line, a `...` line for any
//!   lines).
//! - `python`: runs with `python3` (with the stand-in `openai` client of `tests/docs/`, which
//!   speaks to the server over HTTP as the real one does for the calls shown).
//! - `yaml`: a plan (it has `steps:`) or a test file (`cases:`) validates with
//!   `pagantic validate` in the repository's `plans/`.
//! - `json`: parses; an MCP client configuration's `pagantic` servers start and load their
//!   plans (`serve --mcp-stdio` with its input closed exits 0).
//! - `… not-run: WHY`: not run, with the reason (it needs a GPU, a cluster, a service, the
//!   models' real answers…); counted apart. Its commands are still checked against `--help`.
//! - `… fragment: WHAT`: a piece of a plan or test file, not a document of its own.
//! - `… server: COMMAND`: the block runs while `COMMAND` (a `pagantic serve` line) serves.
//!
//! Other languages (`text` diagrams and outputs, `rust`) are not examples. The test prints how
//! many examples ran, were validated or were marked, and fails on the first problem of each
//! example, with its file and line.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use super::markdown::{Block, fenced_blocks, markdown_files, read};
use super::sandbox::{Harness, Sandbox, Server, printed, run_bounded};
use crate::root;
use crate::tracing::Collector;

/// What the docs test does with a block.
#[derive(Debug, Clone, PartialEq)]
enum Check {
    Shell {
        server: Option<String>,
    },
    Console,
    Python {
        server: Option<String>,
    },
    Yaml,
    Json,
    NotRun(String),
    Fragment(String),
    /// Not an example (a diagram, an output, another language).
    Prose,
}

/// How the block's info string says it is to be checked, or why it cannot be read.
fn check_of(block: &Block) -> Result<Check, String> {
    let (word, rest) = block
        .directive
        .split_once(':')
        .map_or((block.directive.as_str(), ""), |(w, r)| {
            (w.trim(), r.trim())
        });
    let server = match word {
        "" => None,
        "not-run" | "fragment" if rest.is_empty() => {
            return Err(format!("`{word}:` needs its reason"));
        }
        "not-run" => return Ok(Check::NotRun(rest.to_string())),
        "fragment" => return Ok(Check::Fragment(rest.to_string())),
        "server" if rest.starts_with("pagantic serve ") => Some(rest.to_string()),
        _ => {
            return Err(format!(
                "`{}`: the docs test knows `not-run: WHY`, `fragment: WHAT` and `server: pagantic serve …`",
                block.directive
            ));
        }
    };
    Ok(match block.lang.as_str() {
        "sh" | "bash" | "shell" => Check::Shell { server },
        "console" if server.is_none() => Check::Console,
        "python" => Check::Python { server },
        "yaml" if server.is_none() => Check::Yaml,
        "json" if server.is_none() => Check::Json,
        _ if server.is_some() => return Err("`server:` is for shell and Python examples".into()),
        _ => Check::Prose,
    })
}

/// What became of the examples.
#[derive(Default)]
struct Tally {
    ran: usize,
    validated: usize,
    parsed: usize,
    fragments: usize,
    not_run: BTreeMap<String, usize>,
    problems: Vec<String>,
}

#[test]
fn every_example_runs_as_written_or_says_why_not() {
    let harness = Harness::new();
    let collector = Collector::start();
    let mut tally = Tally::default();
    for file in markdown_files() {
        let text = read(&file);
        // A backtick in a backtick fence's info string makes it no fence at all (CommonMark).
        for (i, line) in text.lines().enumerate() {
            let info = line.trim_start().strip_prefix("```").unwrap_or_default();
            if !info.starts_with('`') && info.contains('`') {
                tally.problems.push(format!(
                    "{}:{}: a backtick in the fence's info string makes it no code block",
                    file.display(),
                    i + 1
                ));
            }
        }
        for block in fenced_blocks(&text) {
            let at = format!("{}:{}", file.display(), block.line);
            let started = Instant::now();
            let result = match check_of(&block) {
                Err(problem) => Err(problem),
                Ok(check) => run(&harness, &collector, &block, &check, &mut tally),
            };
            match result {
                Ok(Some(what)) => {
                    println!("{at}: {what} ({:.1} s)", started.elapsed().as_secs_f64())
                }
                Ok(None) => {}
                Err(problem) => {
                    println!("{at}: FAILED");
                    tally.problems.push(format!("{at}: {problem}"));
                }
            }
        }
    }
    if harness.recording {
        harness.write_recording();
    }
    let marked: usize = tally.not_run.values().sum();
    println!(
        "docs examples: {} run, {} validated, {} parsed, {marked} marked not run, {} fragments",
        tally.ran, tally.validated, tally.parsed, tally.fragments
    );
    for (why, count) in &tally.not_run {
        println!("  not run ({count}): {why}");
    }
    assert!(
        tally.problems.is_empty(),
        "{} of the docs' examples do not work as written:\n\n{}",
        tally.problems.len(),
        tally.problems.join("\n\n")
    );
    assert!(
        tally.ran >= 15 && tally.validated >= 4,
        "found the examples"
    );
}

/// Checks one block; what was done with it, to print (None for prose).
fn run(
    harness: &Harness,
    collector: &Collector,
    block: &Block,
    check: &Check,
    tally: &mut Tally,
) -> Result<Option<String>, String> {
    match check {
        Check::Prose => return Ok(None),
        Check::NotRun(why) => {
            *tally.not_run.entry(why.clone()).or_default() += 1;
            return Ok(Some(format!("not run: {why}")));
        }
        Check::Fragment(what) => {
            tally.fragments += 1;
            return Ok(Some(format!("a fragment: {what}")));
        }
        Check::Yaml => {
            validate(harness, block)?;
            tally.validated += 1;
            return Ok(Some("validated".into()));
        }
        Check::Json => {
            let started = json(harness, block)?;
            tally.parsed += 1;
            return Ok(Some(format!("parsed{started}")));
        }
        _ => {}
    }
    let sandbox = harness.sandbox();
    let spans_before = collector.spans().len();
    let (body, stand_ins) = sandbox.stand_in(&block.body, &collector.url());
    let server = match check {
        Check::Shell { server } | Check::Python { server } => server.as_deref(),
        _ => None,
    };
    let server = match server {
        Some(line) => {
            let (line, _) = sandbox.stand_in(line, &collector.url());
            let mut command = harness.command(&sandbox.cache, sandbox.path(), true);
            command.arg(format!("exec {line}"));
            Some(Server::start(command)?)
        }
        None => None,
    };
    match check {
        Check::Console => console(harness, &sandbox, &body)?,
        Check::Python { .. } => {
            let script = sandbox.path().join(".example.py");
            std::fs::write(&script, &body).map_err(|e| e.to_string())?;
            let mut command = harness.command(&sandbox.cache, sandbox.path(), false);
            command.arg("python3 .example.py").env(
                "PYTHONPATH",
                root().join("tests/docs/stand-ins").as_os_str(),
            );
            succeed(&mut command, harness.limit())?;
        }
        _ => {
            let mut command = harness.command(&sandbox.cache, sandbox.path(), false);
            command.arg(&body);
            succeed(&mut command, harness.limit())?;
        }
    }
    if let Some(server) = server {
        server.stop()?;
    }
    if stand_ins
        .iter()
        .any(|why| !why.starts_with("port") && !why.starts_with("a path"))
    {
        let spans = collector.spans();
        if spans.len() == spans_before {
            return Err("the example exports traces, but none reached the collector".into());
        }
    }
    tally.ran += 1;
    let with = if stand_ins.is_empty() {
        String::new()
    } else {
        format!(", with stand-ins for: {}", stand_ins.join(", "))
    };
    Ok(Some(format!("ran{with}")))
}

/// Runs `command` and fails unless it exits 0.
fn succeed(command: &mut std::process::Command, limit: Duration) -> Result<(), String> {
    let output = run_bounded(command, limit)?;
    if output.status.success() {
        return Ok(());
    }
    Err(format!(
        "exited {:?}:\n{}",
        output.status.code(),
        printed(&output)
    ))
}

/// Runs each `$ ` line of a console block and compares what it prints with the lines below it.
fn console(harness: &Harness, sandbox: &Sandbox, body: &str) -> Result<(), String> {
    let mut sessions: Vec<(String, Vec<String>)> = Vec::new();
    for line in body.lines() {
        match line.strip_prefix("$ ") {
            Some(command) => sessions.push((command.to_string(), Vec::new())),
            None => match sessions.last_mut() {
                Some((_, expected)) => expected.push(line.trim_end().to_string()),
                None => return Err(format!("output before any `$ ` command: {line}")),
            },
        }
    }
    if sessions.is_empty() {
        return Err("a console block without a `$ ` command".into());
    }
    for (command_line, expected) in sessions {
        let mut command = harness.command(&sandbox.cache, sandbox.path(), false);
        command.arg(format!("{{ {command_line}\n}} 2>&1"));
        let output = run_bounded(&mut command, harness.limit())?;
        let shown: Vec<String> = String::from_utf8_lossy(&output.stdout)
            .lines()
            .map(|line| line.trim_end().to_string())
            .collect();
        if !output.status.success() {
            return Err(format!(
                "`{command_line}` exited {:?}:\n{}",
                output.status.code(),
                shown.join("\n")
            ));
        }
        if !lines_match(&expected, &shown) {
            return Err(format!(
                "`{command_line}` printed:\n{}\nbut the docs show:\n{}",
                shown.join("\n"),
                expected.join("\n")
            ));
        }
    }
    Ok(())
}

/// Whether `shown` matches `expected`, where a `...` line stands for any lines and `[..]` for any
/// text within a line.
fn lines_match(expected: &[String], shown: &[String]) -> bool {
    match expected.split_first() {
        None => shown.is_empty(),
        Some((first, rest)) if first == "..." => {
            (0..=shown.len()).any(|skip| lines_match(rest, &shown[skip..]))
        }
        Some((first, rest)) => shown
            .split_first()
            .is_some_and(|(line, others)| line_matches(first, line) && lines_match(rest, others)),
    }
}

/// Whether `line` matches `pattern`, where `[..]` stands for any text.
fn line_matches(pattern: &str, line: &str) -> bool {
    let mut pieces = pattern.split("[..]");
    let first = pieces.next().unwrap_or_default();
    let Some(mut rest) = line.strip_prefix(first) else {
        return false;
    };
    let pieces: Vec<&str> = pieces.collect();
    let Some((last, middle)) = pieces.split_last() else {
        return rest.is_empty();
    };
    for piece in middle {
        match rest.find(piece) {
            Some(at) => rest = &rest[at + piece.len()..],
            None => return false,
        }
    }
    rest.ends_with(last)
}

/// Validates a YAML example: a plan or a test file, in the repository's `plans/`.
fn validate(harness: &Harness, block: &Block) -> Result<(), String> {
    let top_level = |key: &str| block.body.lines().any(|line| line.starts_with(key));
    let extension = if top_level("steps:") {
        "yaml"
    } else if top_level("cases:") || top_level("dataset:") {
        "test.yaml"
    } else {
        return Err(
            "a YAML block that is neither a plan (`steps:`) nor a test file (`cases:`): mark it \
             `fragment: WHAT` or `not-run: WHY`"
                .into(),
        );
    };
    let sandbox = harness.sandbox();
    let file = PathBuf::from(format!("plans/example-{}.{extension}", block.line));
    std::fs::write(sandbox.path().join(&file), &block.body).map_err(|e| e.to_string())?;
    let mut command = harness.command(&sandbox.cache, sandbox.path(), false);
    command.arg(format!("pagantic validate {}", file.display()));
    succeed(&mut command, harness.limit())
}

/// What an MCP client says first: initialize, initialized, and a request for the tools.
const MCP_HELLO: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"docs-test","version":"0"}}}
{"jsonrpc":"2.0","method":"notifications/initialized"}
{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#;

/// Parses a JSON example; an MCP client configuration's `pagantic` servers are started as the
/// client would start them, greeted as it would greet them, and must list their plans as tools
/// and exit 0 when the client closes.
fn json(harness: &Harness, block: &Block) -> Result<String, String> {
    let value: serde_json::Value =
        serde_json::from_str(&block.body).map_err(|e| format!("not JSON: {e}"))?;
    let Some(servers) = value.get("mcpServers").and_then(|s| s.as_object()) else {
        return Ok(String::new());
    };
    let mut started = Vec::new();
    for (name, server) in servers {
        if server.get("command").and_then(|c| c.as_str()) != Some("pagantic") {
            continue;
        }
        let sandbox = harness.sandbox();
        let args: Vec<String> = server["args"]
            .as_array()
            .map(|args| {
                args.iter()
                    .filter_map(|a| a.as_str())
                    .map(|a| shell_quote(&sandbox.stand_in(a, "").0))
                    .collect()
            })
            .unwrap_or_default();
        let mut command = harness.command(&sandbox.cache, sandbox.path(), false);
        command.arg(format!(
            "pagantic {} <<'MCP'\n{MCP_HELLO}\nMCP",
            args.join(" ")
        ));
        let output = run_bounded(&mut command, harness.limit())?;
        let said = String::from_utf8_lossy(&output.stdout);
        if !output.status.success() || !said.contains(r#""id":2,"result":{"tools":[{"name""#) {
            return Err(format!(
                "MCP server `{name}` exited {:?} without listing tools:\n{}",
                output.status.code(),
                printed(&output)
            ));
        }
        started.push(name.clone());
    }
    Ok(if started.is_empty() {
        String::new()
    } else {
        format!("; MCP servers started: {}", started.join(", "))
    })
}

/// `text` quoted for bash.
fn shell_quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

#[test]
fn console_output_matches_with_wildcards() {
    let lines = |text: &str| text.lines().map(str::to_string).collect::<Vec<_>>();
    assert!(lines_match(
        &lines("a [..] c\n...\nz"),
        &lines("a b c\nx\ny\nz")
    ));
    assert!(lines_match(&lines("...\n"), &lines("")));
    assert!(!lines_match(&lines("a [..] c"), &lines("a b d")));
    assert!(!lines_match(&lines("a"), &lines("a\nb")));
    assert!(line_matches(
        "[..]: 80 entries[..]",
        "x.jsonl: 80 entries: 80 added"
    ));
}

#[test]
fn a_directive_needs_a_reason_and_a_known_word() {
    let block = |lang: &str, directive: &str| Block {
        lang: lang.into(),
        directive: directive.into(),
        body: String::new(),
        line: 1,
    };
    assert_eq!(
        check_of(&block("sh", "not-run: needs a GPU")),
        Ok(Check::NotRun("needs a GPU".into()))
    );
    assert!(check_of(&block("sh", "not-run:")).is_err());
    assert!(check_of(&block("sh", "norun: x")).is_err());
    assert_eq!(check_of(&block("text", "")), Ok(Check::Prose));
}
