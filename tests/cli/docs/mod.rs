//! Docs are tests. Over `README.md`, `CHANGELOG.md` and `docs/*.md` (read as CommonMark, see
//! [`markdown`]): every example runs as written, or is marked with why it cannot run here
//! ([`examples`]); every command a shell example names exists and takes the flags it is given;
//! every relative link points at a file (and heading) that exists; every number the README and
//! the docs state about the repository is checked ([`claims`]). The synopsis in `docs/cli.md`
//! names exactly the flags each command's `--help` lists, the README stays a front door (at most
//! 300 lines), and the lists of diagnostic and failure codes in `docs/` match the codes the code
//! can emit.

mod claims;
mod examples;
mod markdown;
mod sandbox;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use markdown::{fenced_blocks, heading_anchors, links, markdown_files, read};

use crate::{pagantic, root};

/// Most lines the README may have.
const README_MAX_LINES: usize = 300;

/// What `pagantic COMMAND… --help` lists: its flags (short and long, without `-h`, `--help`,
/// `-V`, `--version`) and its subcommands (without `help`).
struct Help {
    flags: BTreeSet<String>,
    subcommands: Vec<String>,
}

fn help(command: &[String]) -> Help {
    let mut args: Vec<&str> = command.iter().map(String::as_str).collect();
    args.push("--help");
    let run = pagantic(&args);
    assert_eq!(
        run.code,
        0,
        "`pagantic {}` failed: {}",
        args.join(" "),
        run.stderr
    );
    let mut flags = BTreeSet::new();
    let mut subcommands = Vec::new();
    let mut in_commands = false;
    for line in run.stdout.lines() {
        let trimmed = line.trim_start();
        let indent = line.len() - trimmed.len();
        if line.is_empty() || !line.starts_with(' ') {
            in_commands = line == "Commands:";
            continue;
        }
        if in_commands && indent == 2 {
            let name = trimmed.split_whitespace().next().unwrap_or_default();
            if name != "help" {
                subcommands.push(name.to_string());
            }
        } else if (indent == 2 || indent == 6) && trimmed.starts_with('-') {
            // `-i, --input <NAME=VALUE>`, `    --format <FORMAT>  How to print …`
            let spec = trimmed.split("  ").next().unwrap_or_default();
            for part in spec.split(", ") {
                let flag = part.split([' ', '=']).next().unwrap_or_default();
                if !matches!(flag, "-h" | "--help" | "-V" | "--version") {
                    flags.insert(flag.to_string());
                }
            }
        }
    }
    Help { flags, subcommands }
}

/// Every command that does something (`run`, `models pull`, `cache stats`, …) with the flags
/// its `--help` lists.
fn leaf_commands() -> BTreeMap<Vec<String>, BTreeSet<String>> {
    let mut leaves = BTreeMap::new();
    let mut todo: Vec<Vec<String>> = help(&[]).subcommands.into_iter().map(|c| vec![c]).collect();
    while let Some(command) = todo.pop() {
        let listed = help(&command);
        if listed.subcommands.is_empty() {
            leaves.insert(command, listed.flags);
        } else {
            for sub in listed.subcommands {
                let mut path = command.clone();
                path.push(sub);
                todo.push(path);
            }
        }
    }
    assert!(leaves.len() >= 12, "found the commands ({leaves:?})");
    leaves
}

/// The flags written in a piece of a synopsis or command line: words that start with `-` and a
/// letter (or `--` and a letter), cut at `=`.
fn flags_in(text: &str) -> Vec<String> {
    text.split(|c: char| c.is_whitespace() || "[]|(){}…,".contains(c))
        .filter(|word| {
            let name = word.trim_start_matches('-');
            word.starts_with('-')
                && word.len() - name.len() <= 2
                && name.starts_with(|c: char| c.is_ascii_alphabetic())
        })
        .map(|word| word.split('=').next().unwrap_or_default().to_string())
        .collect()
}

/// The leading words of `words` that name a command in `leaves` (`["models", "pull"]`), or the
/// words that do not.
fn command_path(words: &[&str], leaves: &BTreeMap<Vec<String>, BTreeSet<String>>) -> Vec<String> {
    let mut path = Vec::new();
    for word in words {
        if leaves.contains_key(&path) {
            break;
        }
        path.push((*word).to_string());
    }
    path
}

#[test]
fn the_cli_synopsis_names_exactly_the_flags_of_help() {
    let leaves = leaf_commands();
    let cli = read(Path::new("docs/cli.md"));
    let after = cli
        .split("\n## Synopsis\n")
        .nth(1)
        .expect("docs/cli.md has a `## Synopsis` section");
    let block = fenced_blocks(after)
        .into_iter()
        .next()
        .expect("the synopsis is a code block");
    // One synopsis per line starting `pagantic `, continued on the indented lines below it.
    let mut synopses: Vec<String> = Vec::new();
    for line in block.body.lines() {
        if line.starts_with("pagantic ") {
            synopses.push(line.to_string());
        } else if line.starts_with(' ') && !synopses.is_empty() {
            let last = synopses.len() - 1;
            synopses[last].push(' ');
            synopses[last].push_str(line.trim());
        } else if !line.trim().is_empty() {
            panic!(
                "docs/cli.md synopsis: a line that is neither a synopsis nor its continuation: {line}"
            );
        }
    }
    let mut documented: BTreeMap<Vec<String>, BTreeSet<String>> = BTreeMap::new();
    let mut problems = Vec::new();
    for synopsis in &synopses {
        let words: Vec<&str> = synopsis.split_whitespace().skip(1).collect();
        let command: Vec<String> = words
            .iter()
            .take_while(|w| w.chars().all(|c| c.is_ascii_lowercase()))
            .map(|w| (*w).to_string())
            .collect();
        if !leaves.contains_key(&command) {
            problems.push(format!(
                "docs/cli.md documents `pagantic {}`, which is not a command",
                command.join(" ")
            ));
            continue;
        }
        documented
            .entry(command)
            .or_default()
            .extend(flags_in(synopsis));
    }
    for (command, listed) in &leaves {
        let name = command.join(" ");
        let Some(named) = documented.get(command) else {
            problems.push(format!("docs/cli.md has no synopsis of `pagantic {name}`"));
            continue;
        };
        for flag in listed.difference(named) {
            problems.push(format!(
                "`pagantic {name}`: `{flag}` is in `--help` but missing from the synopsis in docs/cli.md"
            ));
        }
        for flag in named.difference(listed) {
            problems.push(format!(
                "`pagantic {name}`: `{flag}` is in the synopsis in docs/cli.md but not in `--help`"
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn shell_examples_run_commands_that_exist_with_flags_they_take() {
    let leaves = leaf_commands();
    let mut problems = Vec::new();
    let mut checked = 0;
    for file in markdown_files() {
        for block in fenced_blocks(&read(&file)) {
            if !matches!(block.lang.as_str(), "sh" | "bash" | "shell" | "console") {
                continue;
            }
            let joined = block.body.replace("\\\n", " ");
            for (i, line) in joined.lines().enumerate() {
                // A console block's commands are its `$ ` lines; the others are what they print.
                let line = match (block.lang.as_str(), line.strip_prefix("$ ")) {
                    ("console", Some(command)) => command,
                    ("console", None) => continue,
                    _ => line,
                };
                let line = line.split(" #").next().unwrap_or_default();
                if line.trim_start().starts_with('#') {
                    continue;
                }
                for segment in line.split("&&").flat_map(|s| s.split(['|', ';'])) {
                    let words: Vec<&str> = segment
                        .split_whitespace()
                        .map(|w| w.trim_matches(['(', ')']))
                        .collect();
                    // `pagantic ARGS…`, or `cargo run [--locked] -- ARGS…`
                    let args = if let Some(at) = words.iter().position(|w| *w == "pagantic") {
                        &words[at + 1..]
                    } else if let Some(at) = words.windows(2).position(|w| w == ["cargo", "run"]) {
                        let rest = &words[at + 2..];
                        match rest.iter().position(|w| *w == "--") {
                            Some(dash) if !rest[..dash].contains(&"--example") => &rest[dash + 1..],
                            _ => continue,
                        }
                    } else {
                        continue;
                    };
                    checked += 1;
                    let command = command_path(args, &leaves);
                    let at = format!("{}:{}", file.display(), block.line + 1 + i);
                    let Some(flags) = leaves.get(&command) else {
                        problems.push(format!(
                            "{at}: `pagantic {}` is not a command",
                            args.join(" ")
                        ));
                        continue;
                    };
                    let rest = args[command.len()..].join(" ");
                    for flag in flags_in(&rest) {
                        if !flags.contains(&flag) {
                            problems.push(format!(
                                "{at}: `pagantic {}` does not take `{flag}`",
                                command.join(" ")
                            ));
                        }
                    }
                }
            }
        }
    }
    assert!(checked >= 10, "found the shell examples ({checked})");
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn relative_links_point_at_files_and_headings_that_exist() {
    let mut problems = Vec::new();
    let mut checked = 0;
    for file in markdown_files() {
        let text = read(&file);
        let dir = file.parent().unwrap_or(Path::new(""));
        for link in links(&text) {
            let target = link.target.as_str();
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            checked += 1;
            let at = format!("{}:{}", file.display(), link.line);
            let (path, anchor) = target.split_once('#').unwrap_or((target, ""));
            let linked = if path.is_empty() {
                file.clone()
            } else {
                dir.join(path)
            };
            if !root().join(&linked).exists() {
                problems.push(format!("{at}: `{target}`: no file {}", linked.display()));
                continue;
            }
            if !anchor.is_empty() && linked.extension().is_some_and(|e| e == "md") {
                let anchors = heading_anchors(&read(&linked));
                if !anchors.contains(anchor) {
                    problems.push(format!(
                        "{at}: `{target}`: {} has no heading with the anchor `#{anchor}`",
                        linked.display()
                    ));
                }
            }
        }
    }
    assert!(checked >= 50, "found the links ({checked})");
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_readme_is_a_front_door() {
    let lines = read(Path::new("README.md")).lines().count();
    assert!(
        lines <= README_MAX_LINES,
        "README.md has {lines} lines, more than {README_MAX_LINES}: move detail into docs/"
    );
}

#[test]
fn documented_codes_match_the_code() {
    let source =
        std::fs::read_to_string(root().join("src/plan/diagnostic.rs")).expect("diagnostic.rs");
    let in_code: BTreeSet<String> = source
        .split("code(")
        .skip(1)
        .filter_map(|rest| rest.split(')').next())
        .filter(|code| code.contains("::"))
        .map(str::to_string)
        .collect();
    let docs =
        std::fs::read_to_string(root().join("docs/diagnostics.md")).expect("docs/diagnostics.md");
    let documented: BTreeSet<String> = docs
        .lines()
        .filter_map(|line| line.strip_prefix("| `"))
        .filter_map(|rest| rest.split('`').next())
        .map(str::to_string)
        .collect();
    assert!(
        in_code.len() >= 40,
        "found the codes in the source ({})",
        in_code.len()
    );
    let undocumented: Vec<_> = in_code.difference(&documented).collect();
    let stale: Vec<_> = documented.difference(&in_code).collect();
    assert!(
        undocumented.is_empty(),
        "codes missing from docs/diagnostics.md: {undocumented:?}"
    );
    assert!(
        stale.is_empty(),
        "docs/diagnostics.md lists codes the code no longer has: {stale:?}"
    );
}

#[test]
fn documented_failure_codes_match_the_taxonomy() {
    let docs = std::fs::read_to_string(root().join("docs/failures.md")).expect("docs/failures.md");
    let documented: Vec<String> = docs
        .lines()
        .filter_map(|line| line.strip_prefix("| `"))
        .filter_map(|rest| rest.split('`').next())
        .map(str::to_string)
        .collect();
    let in_code: Vec<String> = pagantic::core::FailureCode::ALL
        .iter()
        .map(|c| c.as_str().to_string())
        .collect();
    assert_eq!(
        documented, in_code,
        "docs/failures.md must list every FailureCode, in order"
    );
    for code in pagantic::core::FailureCode::ALL {
        let row = docs
            .lines()
            .find(|l| l.starts_with(&format!("| `{}`", code.as_str())))
            .expect("row");
        let retried = if code.retryable() {
            "| yes |"
        } else {
            "| no |"
        };
        assert!(
            row.contains(retried),
            "{row}: retryable is {}",
            code.retryable()
        );
    }
}

/// Every command's `--help` ends with an example of it, which names the command and only flags
/// the command takes.
#[test]
fn every_command_s_help_has_an_example_it_takes() {
    let leaves = leaf_commands();
    let mut problems = Vec::new();
    for (command, flags) in &leaves {
        let mut args: Vec<&str> = command.iter().map(String::as_str).collect();
        args.push("--help");
        let run = pagantic(&args);
        let name = command.join(" ");
        let Some(example) = run
            .stdout
            .split("\nExample:\n")
            .nth(1)
            .and_then(|rest| rest.lines().next())
        else {
            problems.push(format!("`pagantic {name} --help` has no `Example:`"));
            continue;
        };
        let prefix = format!("  pagantic {name}");
        if !example.starts_with(&prefix) {
            problems.push(format!("`pagantic {name}`: its example is `{example}`"));
            continue;
        }
        for flag in flags_in(&example[prefix.len()..]) {
            if !flags.contains(&flag) {
                problems.push(format!(
                    "`pagantic {name}`: its example's `{flag}` is not a flag of it"
                ));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
