//! Docs are tests. Over `README.md`, `CHANGELOG.md` and `docs/*.md`: every example plan and test
//! file validates, every command a shell example runs exists and takes the flags it is given,
//! and every relative link points at a file (and heading) that exists. The synopsis in
//! `docs/cli.md` names exactly the flags each command's `--help` lists, the README stays a front
//! door (at most 300 lines), and the lists of diagnostic and failure codes in `docs/` match the
//! codes the code can emit.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use crate::{pagantic, root};

/// Most lines the README may have.
const README_MAX_LINES: usize = 300;

/// The Markdown files the checks read, relative to the repository root: the README, the
/// changelog and every page of `docs/`.
fn markdown_files() -> Vec<PathBuf> {
    let mut files = vec![PathBuf::from("README.md"), PathBuf::from("CHANGELOG.md")];
    let mut pages: Vec<PathBuf> = std::fs::read_dir(root().join("docs"))
        .expect("docs/")
        .map(|entry| entry.expect("entry").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "md"))
        .map(|path| Path::new("docs").join(path.file_name().expect("a file name")))
        .collect();
    pages.sort();
    files.extend(pages);
    files
}

fn read(file: &Path) -> String {
    std::fs::read_to_string(root().join(file)).unwrap_or_else(|e| panic!("{}: {e}", file.display()))
}

/// A fenced code block: its info string (`yaml`, `sh`, …), its text, and the line its fence is
/// on (1-based).
struct Block {
    info: String,
    body: String,
    line: usize,
}

/// The fenced code blocks of a Markdown text (fences of three or more backticks).
fn fenced_blocks(text: &str) -> Vec<Block> {
    let mut blocks = Vec::new();
    let mut open: Option<(String, usize, String)> = None;
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        match &mut open {
            None => {
                if let Some(info) = trimmed.strip_prefix("```") {
                    open = Some((info.trim().to_string(), i + 1, String::new()));
                }
            }
            Some((info, start, body)) => {
                if trimmed.starts_with("```") {
                    blocks.push(Block {
                        info: std::mem::take(info),
                        body: std::mem::take(body),
                        line: *start,
                    });
                    open = None;
                } else {
                    body.push_str(line);
                    body.push('\n');
                }
            }
        }
    }
    blocks
}

/// The text outside fenced code blocks, line by line (`None` for a line inside one), so that
/// headings and links are only looked for in the prose.
fn prose_lines(text: &str) -> Vec<Option<&str>> {
    let mut inside = false;
    text.lines()
        .map(|line| {
            if line.trim_start().starts_with("```") {
                inside = !inside;
                None
            } else if inside {
                None
            } else {
                Some(line)
            }
        })
        .collect()
}

/// A line without its inline code spans (`` `a` ``, ``` ``a `b` c`` ```).
fn without_code_spans(line: &str) -> String {
    let mut out = String::new();
    let mut rest = line;
    while let Some(start) = rest.find('`') {
        out.push_str(&rest[..start]);
        let ticks = rest[start..].chars().take_while(|&c| c == '`').count();
        let fence = "`".repeat(ticks);
        let after = &rest[start + ticks..];
        match after.find(&fence) {
            Some(end) => rest = &after[end + ticks..],
            None => {
                rest = after;
                break;
            }
        }
    }
    out.push_str(rest);
    out
}

/// The anchors GitHub gives a Markdown file's headings: lower case, everything but letters,
/// digits, spaces, `-` and `_` dropped, spaces made `-`; a repeated anchor gets `-1`, `-2`, ….
fn heading_anchors(text: &str) -> BTreeSet<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut anchors = BTreeSet::new();
    for line in prose_lines(text).into_iter().flatten() {
        let hashes = line.chars().take_while(|&c| c == '#').count();
        if !(1..=6).contains(&hashes) || !line[hashes..].starts_with(' ') {
            continue;
        }
        let slug: String = line[hashes..]
            .trim()
            .to_lowercase()
            .chars()
            .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
            .map(|c| if c == ' ' { '-' } else { c })
            .collect();
        let count = seen.entry(slug.clone()).or_insert(0);
        anchors.insert(if *count == 0 {
            slug
        } else {
            format!("{slug}-{count}")
        });
        *count += 1;
    }
    anchors
}

#[test]
fn example_plans_and_test_files_validate() {
    // The examples sit in a `plans/` directory holding the repository's plans and their data,
    // beside its prompts and corpus, as the docs' plans and test files do, so their relative
    // paths resolve.
    let dir = tempfile::tempdir().expect("temp dir");
    let plans = dir.path().join("plans");
    std::fs::create_dir_all(&plans).expect("plans dir");
    for shared in ["prompts", "corpus"] {
        std::os::unix::fs::symlink(root().join(shared), dir.path().join(shared)).expect("linked");
    }
    for entry in std::fs::read_dir(root().join("plans")).expect("plans/") {
        let entry = entry.expect("entry");
        std::os::unix::fs::symlink(entry.path(), plans.join(entry.file_name())).expect("linked");
    }
    let mut counts: BTreeMap<PathBuf, (usize, usize)> = BTreeMap::new();
    let mut invalid = Vec::new();
    for (n, file) in markdown_files().into_iter().enumerate() {
        for block in fenced_blocks(&read(&file)) {
            if block.info != "yaml" {
                continue;
            }
            let count = counts.entry(file.clone()).or_default();
            let name = if block.body.contains("\nsteps:") {
                count.0 += 1;
                format!("example-{n}-{}.yaml", block.line)
            } else if block.body.contains("\ncases:") {
                count.1 += 1;
                format!("example-{n}-{}.test.yaml", block.line)
            } else {
                continue;
            };
            let path = plans.join(name);
            std::fs::write(&path, &block.body).expect("written");
            let run = pagantic(&["validate", path.to_str().expect("utf-8")]);
            if run.code != 0 {
                invalid.push(format!(
                    "{}:{}: the example is invalid:\n{}\n{}",
                    file.display(),
                    block.line,
                    block.body,
                    run.stderr
                ));
            }
        }
    }
    assert!(invalid.is_empty(), "{}", invalid.join("\n"));
    let readme = counts
        .get(Path::new("README.md"))
        .copied()
        .unwrap_or_default();
    assert!(readme.0 >= 1, "the README shows at least one plan");
    let plans_shown: usize = counts.values().map(|c| c.0).sum();
    let tests_shown: usize = counts.values().map(|c| c.1).sum();
    assert!(
        plans_shown >= 2,
        "the docs show plans ({plans_shown} found)"
    );
    assert!(tests_shown >= 1, "the docs show at least one test file");
}

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
            if !matches!(block.info.as_str(), "sh" | "bash" | "shell" | "console") {
                continue;
            }
            let joined = block.body.replace("\\\n", " ");
            for (i, line) in joined.lines().enumerate() {
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
        for (i, line) in prose_lines(&text).into_iter().enumerate() {
            let Some(line) = line else { continue };
            let line = without_code_spans(line);
            for piece in line.split("](").skip(1) {
                let Some(target) = piece.split(')').next() else {
                    continue;
                };
                if target.contains("://") || target.starts_with("mailto:") {
                    continue;
                }
                checked += 1;
                let at = format!("{}:{}", file.display(), i + 1);
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
fn heading_anchors_follow_github() {
    let anchors = heading_anchors(
        "# A, b\n## `RUST_BACKTRACE` and c\n```sh\n# not a heading\n```\n## run --batch\n## A, b\n",
    );
    let expected: BTreeSet<String> = ["a-b", "a-b-1", "rust_backtrace-and-c", "run---batch"]
        .map(String::from)
        .into();
    assert_eq!(anchors, expected);
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
