//! The first minutes with pagantic: `pagantic init` writes a project that validates and whose
//! tests pass as written (its pre-commit hooks and CI workflow run the same commands);
//! completions and man pages come from the clap definitions; `--help` names the first commands;
//! at a terminal, colour follows NO_COLOR and a streamed answer never shares its line with a
//! progress line.

use std::path::Path;
use std::process::Command;

use crate::{Run, command, fresh_cache_dir, output_of, pagantic, pagantic_in, path_arg, scratch};

/// The commands a YAML file of the starter project runs (`entry:` of a pre-commit hook, `run:` of
/// a workflow step) that start with `pagantic`, in order.
fn pagantic_commands(yaml: &str, key: &str) -> Vec<String> {
    let root = pagantic::plan::yaml::parse(yaml).expect("the starter's YAML parses");
    let mut found = Vec::new();
    collect(&root, key, &mut found);
    found
        .into_iter()
        .flat_map(|text| {
            text.lines()
                .map(str::trim)
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .filter(|line| line.starts_with("pagantic "))
        .collect()
}

fn collect(node: &pagantic::plan::yaml::Node, key: &str, found: &mut Vec<String>) {
    use pagantic::plan::yaml::NodeValue;
    match &node.value {
        NodeValue::Map(entries) => {
            for entry in entries {
                match (entry.key == key, entry.value.as_str()) {
                    (true, Some(text)) => found.push(text.to_string()),
                    _ => collect(&entry.value, key, found),
                }
            }
        }
        NodeValue::Seq(items) => items.iter().for_each(|item| collect(item, key, found)),
        _ => {}
    }
}

/// Runs a command line of the starter project with bash in `dir`, `pagantic` the binary under
/// test.
fn run_line(dir: &Path, line: &str) -> Run {
    let bin = scratch("bin");
    std::fs::create_dir_all(&bin).expect("bin/");
    let link = bin.join("pagantic");
    if !link.exists() {
        std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_pagantic"), &link).expect("linked");
    }
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut bash = crate::runner_like(&command(&fresh_cache_dir()), "bash");
    let output = output_of(
        bash.args(["-e", "-c", line])
            .env("PATH", path)
            .current_dir(dir),
    );
    Run {
        code: output.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// The starter project validates, its three cases pass from the cassette (no model), and the
/// commands its pre-commit hooks and CI workflow run succeed on it as written.
#[test]
fn init_writes_a_project_that_validates_and_whose_tests_pass() {
    let dir = scratch("starter");
    let init = pagantic(&["init", path_arg(&dir)]);
    assert_eq!(init.code, 0, "{}", init.stderr);
    assert!(
        init.stderr.contains("plans/ask.test.yaml"),
        "{}",
        init.stderr
    );
    let validate = pagantic_in(&dir, &["validate", "plans/*.yaml"]);
    assert_eq!(validate.code, 0, "{}", validate.stderr);
    assert!(
        validate.stderr.contains("1 plan, 1 test file checked"),
        "{}",
        validate.stderr
    );
    let test = pagantic_in(
        &dir,
        &[
            "test",
            "plans/ask.test.yaml",
            "--cassette",
            "plans/tests.cassette.jsonl",
        ],
    );
    assert_eq!(
        test.code, 0,
        "the starter's tests pass from its cassette (after a change to how requests are built, \
         record it again: see examples/starter/plans/ask.test.yaml):\n{}{}",
        test.stdout, test.stderr
    );
    assert!(test.stdout.contains("3/3"), "{}", test.stdout);
    let hooks = std::fs::read_to_string(dir.join(".pre-commit-config.yaml")).expect("hooks");
    let workflow =
        std::fs::read_to_string(dir.join(".github/workflows/pagantic.yml")).expect("workflow");
    let mut lines = pagantic_commands(&hooks, "entry");
    assert_eq!(lines.len(), 2, "{lines:?}");
    // pre-commit passes the files a commit touches to a hook that takes them.
    lines[0].push_str(" plans/ask.yaml plans/ask.test.yaml");
    lines.extend(pagantic_commands(&workflow, "run"));
    assert_eq!(lines.len(), 4, "{lines:?}");
    for line in &lines {
        let run = run_line(&dir, line);
        assert_eq!(run.code, 0, "`{line}`:\n{}{}", run.stdout, run.stderr);
    }
}

/// A second `init` in the same place writes nothing and says what is in the way; a file where
/// the directory should be is refused too.
#[test]
fn init_never_overwrites() {
    let dir = scratch("twice");
    assert_eq!(pagantic(&["init", path_arg(&dir)]).code, 0);
    let plan = dir.join("plans/ask.yaml");
    std::fs::write(&plan, "mine").expect("written");
    let again = pagantic(&["init", path_arg(&dir)]);
    assert_eq!(again.code, 2, "{}", again.stderr);
    assert!(again.stderr.contains("already there"), "{}", again.stderr);
    assert_eq!(std::fs::read_to_string(&plan).expect("read"), "mine");
    let file = scratch("a-file");
    std::fs::write(&file, "").expect("written");
    let refused = pagantic(&["init", path_arg(&file)]);
    assert_eq!(refused.code, 2, "{}", refused.stderr);
    assert!(
        refused.stderr.contains("cannot write"),
        "{}",
        refused.stderr
    );
}

/// A directory name with terminal escapes is shown escaped, not obeyed.
#[test]
fn init_shows_a_hostile_directory_name_escaped() {
    let dir = scratch("\u{1b}]0;owned\u{7}project");
    let run = pagantic(&["init", path_arg(&dir)]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(!run.stderr.contains('\u{1b}'), "{:?}", run.stderr);
    assert!(run.stderr.contains("\\u{1b}]0;owned"), "{}", run.stderr);
}

/// Every shell gets a script naming the commands; bash's parses.
#[test]
fn completions_for_every_shell() {
    for shell in ["bash", "zsh", "fish", "powershell"] {
        let run = pagantic(&["completions", shell]);
        assert_eq!(run.code, 0, "{shell}: {}", run.stderr);
        for command in ["validate", "init", "completions", "serve"] {
            assert!(run.stdout.contains(command), "{shell} lacks {command}");
        }
    }
    let script = scratch("pagantic.bash");
    std::fs::write(&script, pagantic(&["completions", "bash"]).stdout).expect("written");
    let syntax = output_of(Command::new("bash").arg("-n").arg(&script));
    assert!(syntax.status.success(), "{syntax:?}");
    let unknown = pagantic(&["completions", "tcsh"]);
    assert_eq!(unknown.code, 2, "{}", unknown.stderr);
}

/// The man page on stdout, and one page per command in a directory.
#[test]
fn man_pages_from_the_same_definitions() {
    let page = pagantic(&["man"]);
    assert_eq!(page.code, 0, "{}", page.stderr);
    assert!(
        page.stdout.starts_with(".ie"),
        "roff: {}",
        &page.stdout[..40.min(page.stdout.len())]
    );
    assert!(page.stdout.contains(".TH pagantic 1"), "{}", page.stdout);
    let dir = scratch("man");
    let written = pagantic(&["man", "--out", path_arg(&dir)]);
    assert_eq!(written.code, 0, "{}", written.stderr);
    for name in [
        "pagantic.1",
        "pagantic-run.1",
        "pagantic-init.1",
        "pagantic-cache-import.1",
    ] {
        assert!(dir.join(name).is_file(), "{name}");
    }
}

/// `pagantic --help` ends with the commands to try first, in the order a newcomer needs them.
#[test]
fn help_names_the_first_commands_to_try() {
    let help = pagantic(&["--help"]);
    assert_eq!(help.code, 0);
    let first = help
        .stdout
        .split("First commands to try:")
        .nth(1)
        .expect("a section of first commands");
    let order: Vec<usize> = [
        "pagantic init",
        "pagantic validate",
        "pagantic test",
        "pagantic run",
    ]
    .iter()
    .map(|command| {
        first
            .find(command)
            .unwrap_or_else(|| panic!("{command} in {first}"))
    })
    .collect();
    assert!(order.windows(2).all(|w| w[0] < w[1]), "{first}");
}

/// What a command printed at a terminal (a pseudo-terminal from util-linux's `script`: stdout
/// and stderr together), with `env` set and NO_COLOR unset unless given.
fn at_terminal(dir: &Path, line: &str, env: &[(&str, &str)]) -> String {
    let mut script = command(&fresh_cache_dir());
    script
        .env_remove("NO_COLOR")
        .env("TERM", "xterm")
        .envs(env.iter().copied());
    let mut pty = crate::runner_like(&script, "script");
    let line = format!("{} {line}", env!("CARGO_BIN_EXE_pagantic"));
    let output = output_of(pty.args(["-qec", &line, "/dev/null"]).current_dir(dir));
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// At a terminal diagnostics and clap's usage errors are coloured, and with NO_COLOR neither is.
#[test]
fn no_color_turns_colour_off_everywhere_at_a_terminal() {
    let dir = scratch("colour");
    std::fs::create_dir_all(&dir).expect("dir");
    std::fs::write(dir.join("bad.yaml"), "version: 1\nname: bad\nsteps: 3\n").expect("written");
    let coloured = at_terminal(&dir, "validate bad.yaml", &[]);
    assert!(
        coloured.contains('\u{1b}'),
        "a terminal gets colour: {coloured:?}"
    );
    let usage = at_terminal(&dir, "--no-such-flag", &[]);
    assert!(usage.contains('\u{1b}'), "clap colours too: {usage:?}");
    for line in ["validate bad.yaml", "--no-such-flag", "run --help"] {
        let plain = at_terminal(&dir, line, &[("NO_COLOR", "1")]);
        assert!(
            !plain.contains('\u{1b}'),
            "`{line}` with NO_COLOR: {plain:?}"
        );
        let plain = at_terminal(&dir, line, &[("CLICOLOR", "0")]);
        assert!(
            !plain.contains('\u{1b}'),
            "`{line}` with CLICOLOR=0: {plain:?}"
        );
    }
}

/// At a terminal a streamed answer ends its line before the step's progress line: the answer
/// and `✓ answer` are never on one line, and no blank line is left after it.
#[test]
fn a_streamed_answer_never_shares_the_progress_line() {
    let dir = scratch("stream");
    std::fs::create_dir_all(&dir).expect("dir");
    std::fs::write(
        dir.join("say.yaml"),
        "version: 1\nname: say\nmodels: { m: { kind: scripted, replies: [\"Paris\"] } }\n\
         steps:\n  - { name: answer, type: infer, model: m, template: capital }\n",
    )
    .expect("written");
    let shown = at_terminal(&dir, "run say.yaml", &[("NO_COLOR", "1")]);
    let lines: Vec<&str> = shown.lines().map(|l| l.trim_end_matches('\r')).collect();
    assert!(
        lines.contains(&"Paris"),
        "the answer on a line of its own: {lines:?}"
    );
    let progress = lines
        .iter()
        .find(|l| l.contains("✓ answer"))
        .unwrap_or_else(|| panic!("a progress line: {lines:?}"));
    assert!(progress.starts_with("  ✓"), "{progress:?}");
    assert!(!lines.contains(&""), "no blank line: {lines:?}");
}
