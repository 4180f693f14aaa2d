//! The layers of the crate (listed in `src/lib.rs`) point downward only: a module may use modules
//! of lower layers, never of a higher one, and the modules of the middle band (layer 2) do not use
//! each other. This test reads every `crate::…` path in `src/` and fails on a violation.

use std::path::Path;

/// Every top-level module and its layer; a module missing here fails the test.
const LAYERS: &[(&str, u8)] = &[
    ("core", 0),
    ("inference", 1),
    ("corpora", 2),
    ("tool", 2),
    ("constraint", 2),
    ("rerank", 2),
    ("validate", 2),
    ("prompt", 2),
    ("cache", 2),
    ("orchestrate", 3),
    ("plan", 4),
    ("batch", 5),
    ("serve", 5),
    ("suite", 5),
    ("cli", 5),
];

fn layer(module: &str) -> Option<u8> {
    LAYERS
        .iter()
        .find(|(name, _)| *name == module)
        .map(|(_, layer)| *layer)
}

fn rust_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("readable src dir") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The modules a source text names through `crate::<module>`.
fn crate_references(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find("crate::") {
        rest = &rest[at + "crate::".len()..];
        let name: String = rest
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        if name.is_empty() {
            // `use crate::{a, b}`: every name inside the braces.
            if let Some(inner) = rest
                .strip_prefix('{')
                .and_then(|r| r.split_once('}'))
                .map(|(i, _)| i)
            {
                found.extend(
                    inner
                        .split(',')
                        .map(|p| p.trim().split("::").next().unwrap_or_default().to_string())
                        .filter(|n| !n.is_empty()),
                );
            }
        } else {
            found.push(name);
        }
    }
    found
}

#[test]
fn layers_point_downward_only() {
    let src = crate::root().join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut violations = Vec::new();
    for file in files {
        let relative = file.strip_prefix(&src).expect("inside src");
        let top = relative
            .components()
            .next()
            .and_then(|c| c.as_os_str().to_str())
            .unwrap_or_default();
        let module = top.trim_end_matches(".rs");
        if matches!(module, "lib" | "main") {
            continue;
        }
        let Some(own) = layer(module) else {
            violations.push(format!(
                "src/{module} is not in the layer table (add it here and to src/lib.rs)"
            ));
            continue;
        };
        let text = std::fs::read_to_string(&file).expect("readable");
        for used in crate_references(&text) {
            if used == module {
                continue;
            }
            match layer(&used) {
                None => violations.push(format!(
                    "{}: uses unknown module crate::{used}",
                    relative.display()
                )),
                Some(l) if l > own => violations.push(format!(
                    "{}: layer {own} ({module}) uses crate::{used} of higher layer {l}",
                    relative.display()
                )),
                Some(2) if own == 2 => violations.push(format!(
                    "{}: middle-band module {module} uses middle-band module {used}",
                    relative.display()
                )),
                Some(_) => {}
            }
        }
    }
    assert!(
        violations.is_empty(),
        "layer violations:\n{}",
        violations.join("\n")
    );
}

#[test]
fn the_reference_scanner_sees_grouped_imports() {
    assert_eq!(
        crate_references("use crate::{plan::x, prompt};\nlet a = crate::cli::main;"),
        ["plan", "prompt", "cli"]
    );
}

/// A module's file: `a/b.rs` or `a/b/mod.rs` under `src`, for the module path `[a, b]`.
fn module_file(src: &Path, module: &[String]) -> Option<std::path::PathBuf> {
    let joined: std::path::PathBuf = module.iter().collect();
    [
        src.join(&joined).with_extension("rs"),
        src.join(&joined).join("mod.rs"),
    ]
    .into_iter()
    .find(|p| p.is_file())
}

/// The module path of a source file: `src/plan/check/mod.rs` → `[plan, check]`.
fn module_of(src: &Path, file: &Path) -> Vec<String> {
    let relative = file.strip_prefix(src).expect("inside src");
    let mut parts: Vec<String> = relative
        .with_extension("")
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if parts.last().is_some_and(|p| p == "mod" || p == "lib") {
        parts.pop();
    }
    parts
}

/// Every path a source text names from `crate::` or `super::`, braces expanded, as module paths
/// relative to the crate root (`super` resolved against `module`).
fn named_paths(text: &str, module: &[String]) -> Vec<Vec<String>> {
    fn expand(rest: &str, prefix: Vec<String>, out: &mut Vec<Vec<String>>) {
        let mut path = prefix;
        let mut rest = rest;
        loop {
            let name: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if name.is_empty() {
                if let Some(inner) = rest.strip_prefix('{') {
                    // Split the group at its top-level commas.
                    let (mut depth, mut start) = (0, 0);
                    for (i, c) in inner.char_indices() {
                        match c {
                            '{' => depth += 1,
                            '}' if depth == 0 => {
                                expand(inner[start..i].trim_start(), path.clone(), out);
                                return;
                            }
                            '}' => depth -= 1,
                            ',' if depth == 0 => {
                                expand(inner[start..i].trim_start(), path.clone(), out);
                                start = i + 1;
                            }
                            _ => {}
                        }
                    }
                }
                out.push(path);
                return;
            }
            rest = &rest[name.len()..];
            if name != "self" {
                path.push(name);
            }
            match rest.strip_prefix("::") {
                Some(after) => rest = after,
                None => {
                    out.push(path);
                    return;
                }
            }
        }
    }
    let mut out = Vec::new();
    for (at, _) in text
        .match_indices("crate::")
        .chain(text.match_indices("super::"))
    {
        let before = text[..at].chars().next_back();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
            continue;
        }
        let mut base: Vec<String> = Vec::new();
        let mut rest = &text[at..];
        if let Some(after) = rest.strip_prefix("crate::") {
            rest = after;
        } else {
            base = module.to_vec();
            while let Some(after) = rest.strip_prefix("super::") {
                base.pop();
                rest = after;
            }
        }
        expand(rest, base, &mut out);
    }
    out
}

/// The source file a named path lands in: the deepest module along it that has a file.
fn target_file(src: &Path, path: &[String]) -> Option<std::path::PathBuf> {
    (1..=path.len())
        .rev()
        .find_map(|len| module_file(src, &path[..len]))
}

#[test]
fn no_two_source_files_import_each_other() {
    let src = crate::root().join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut edges: std::collections::BTreeMap<_, std::collections::BTreeSet<_>> =
        Default::default();
    for file in &files {
        let module = module_of(&src, file);
        let text = std::fs::read_to_string(file).expect("readable");
        // Tests may reach anywhere; only the code itself must not go round in circles.
        let code = without_tests(&without_literals(&text));
        for path in named_paths(&code, &module) {
            let Some(target) = target_file(&src, &path) else {
                continue;
            };
            let target_module = module_of(&src, &target);
            // A module declaring or re-exporting its own children is the module tree, not a use.
            let descends = target_module.len() > module.len() && target_module.starts_with(&module);
            if target != *file && !descends {
                edges.entry(file.clone()).or_default().insert(target);
            }
        }
    }
    let mut cycles = Vec::new();
    for (from, targets) in &edges {
        for to in targets {
            if from < to && reaches(&edges, to, from) {
                cycles.push(format!(
                    "{} ⇄ {}",
                    from.strip_prefix(&src).unwrap_or(from).display(),
                    to.strip_prefix(&src).unwrap_or(to).display()
                ));
            }
        }
    }
    assert!(cycles.is_empty(), "import cycles:\n{}", cycles.join("\n"));
}

/// Whether `to` can be reached from `from` along `edges`.
fn reaches(
    edges: &std::collections::BTreeMap<
        std::path::PathBuf,
        std::collections::BTreeSet<std::path::PathBuf>,
    >,
    from: &Path,
    to: &Path,
) -> bool {
    let mut seen = std::collections::BTreeSet::new();
    let mut stack = vec![from.to_path_buf()];
    while let Some(at) = stack.pop() {
        if at == to {
            return true;
        }
        if seen.insert(at.clone()) {
            stack.extend(edges.get(&at).into_iter().flatten().cloned());
        }
    }
    false
}

#[test]
fn named_paths_expand_groups_and_resolve_super() {
    let module = vec!["plan".to_string(), "steps".to_string()];
    assert_eq!(
        named_paths(
            "use super::{build::{self, Builder}, model};\nlet x = crate::core::Failure::new();",
            &module
        ),
        vec![
            vec!["core".to_string(), "Failure".into(), "new".into()],
            vec!["plan".into(), "build".into()],
            vec!["plan".into(), "build".into(), "Builder".into()],
            vec!["plan".into(), "model".into()],
        ]
    );
}

/// The files whose code may call the executor: the runner, and the executor itself (rendering a
/// step runs its upstream steps first).
const RUNS_START_IN: &[&str] = &["orchestrate/session.rs", "orchestrate/executor/mod.rs"];

/// Calls of `name(` in `code` as a free function (not a method, not its definition).
fn free_calls(code: &str, name: &str) -> usize {
    let call = format!("{name}(");
    code.match_indices(&call)
        .filter(|(at, _)| {
            let before = &code[..*at];
            let previous = before.chars().next_back();
            !previous.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '.')
                && !before.trim_end().ends_with("fn")
        })
        .count()
}

/// Every run — one run, a batch row, a test case, a judge, a route's sub-plan, a served request —
/// starts at the `Runner`, so what a run does (its events, ledger, cancellation, end state) is
/// decided in one place.
#[test]
fn only_the_runner_starts_runs() {
    let mut callers = Vec::new();
    for (relative, code) in src_code() {
        if RUNS_START_IN.contains(&relative.as_str()) {
            continue;
        }
        for name in ["execute", "render_step"] {
            if free_calls(&code, name) > 0 {
                callers.push(format!("{relative} calls {name}"));
            }
        }
    }
    assert!(
        callers.is_empty(),
        "runs must start at the Runner:\n{}",
        callers.join("\n")
    );
}

#[test]
fn free_calls_leave_out_methods_and_definitions() {
    let code = "let r = execute(p, i).await; db.execute(q); async fn execute(x) {} \
                executor::execute(p); my_execute(x);";
    assert_eq!(free_calls(code, "execute"), 2);
}

/// The most lines a function of `src/` may have, outside tests: past it, a function does more
/// than one thing and is split.
const MAX_FUNCTION_LINES: usize = 120;

/// `code` with the contents of string and character literals blanked (their line breaks kept),
/// so braces inside them do not count.
fn without_literals(code: &str) -> String {
    let mut out = String::with_capacity(code.len());
    let mut chars = code.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '"' => {
                out.push('"');
                while let Some(inner) = chars.next() {
                    match inner {
                        // An escape: the character after it, a line break kept.
                        '\\' if chars.next() == Some('\n') => out.push('\n'),
                        '\\' => {}
                        '"' => break,
                        '\n' => out.push('\n'),
                        _ => {}
                    }
                }
                out.push('"');
            }
            // A character literal ('{', '\''); a lifetime ('a) has no closing quote.
            '\'' => {
                let literal: String = chars.clone().take(3).collect();
                let end = if literal.starts_with('\\') {
                    literal.char_indices().skip(1).find(|(_, c)| *c == '\'')
                } else {
                    literal.char_indices().nth(1).filter(|(_, c)| *c == '\'')
                };
                match end {
                    Some((at, _)) => {
                        for _ in 0..=at {
                            chars.next();
                        }
                        out.push_str("' '");
                    }
                    None => out.push('\''),
                }
            }
            '/' if chars.peek() == Some(&'/') => {
                for skipped in chars.by_ref() {
                    if skipped == '\n' {
                        out.push('\n');
                        break;
                    }
                }
            }
            _ => out.push(c),
        }
    }
    out
}

/// `code` (with literals blanked) without the items marked `#[cfg(test)]` — a `mod tests { … }`,
/// a `mod tests;`, a test-only `use` or function — wherever they are in the file; each removed
/// item's line breaks are kept, so line numbers still point into the file.
fn without_tests(code: &str) -> String {
    const MARK: &str = "#[cfg(test)]";
    let mut out = String::with_capacity(code.len());
    let mut rest = code;
    while let Some(at) = rest.find(MARK) {
        out.push_str(&rest[..at]);
        let item = &rest[at..];
        // The item ends at its first `;` outside braces, or at the brace closing its body.
        let mut depth = 0usize;
        let mut end = item.len();
        for (i, c) in item.char_indices().skip(MARK.len()) {
            match c {
                '{' => depth += 1,
                '}' if depth <= 1 => {
                    end = i + 1;
                    break;
                }
                '}' => depth -= 1,
                ';' if depth == 0 => {
                    end = i + 1;
                    break;
                }
                _ => {}
            }
        }
        out.extend(item[..end].chars().filter(|&c| c == '\n'));
        rest = &item[end..];
    }
    out.push_str(rest);
    out
}

/// Each function in `code` (by the line its `fn` is on) with how many lines it spans.
fn function_lengths(code: &str) -> Vec<(usize, usize)> {
    let lines: Vec<&str> = code.lines().collect();
    let mut found = Vec::new();
    for (start, line) in lines.iter().enumerate() {
        let is_fn = line
            .split_whitespace()
            .take_while(|w| !w.starts_with("fn"))
            .all(|w| matches!(w, "pub" | "async" | "const" | "unsafe") || w.starts_with("pub("))
            && line.split_whitespace().any(|w| w == "fn");
        if !is_fn {
            continue;
        }
        let mut depth = 0i64;
        let mut opened = false;
        for (end, body) in lines.iter().enumerate().skip(start) {
            if !opened && body.trim_end().ends_with(';') {
                break;
            }
            depth += body.matches('{').count() as i64 - body.matches('}').count() as i64;
            opened |= body.contains('{');
            if opened && depth <= 0 {
                found.push((start + 1, end - start + 1));
                break;
            }
        }
    }
    found
}

#[test]
fn no_function_is_longer_than_the_limit() {
    let mut long = Vec::new();
    for (relative, code) in src_code() {
        for (line, length) in function_lengths(&code) {
            if length > MAX_FUNCTION_LINES {
                long.push(format!("src/{relative}:{line}: {length} lines"));
            }
        }
    }
    assert!(
        long.is_empty(),
        "functions over {MAX_FUNCTION_LINES} lines:\n{}",
        long.join("\n")
    );
}

/// Every file of `src/` but a `tests.rs` — its path from `src/`, and its code without its unit
/// tests, with the contents of literals and comments blanked (see [`without_literals`] and
/// [`without_tests`]).
fn src_code() -> Vec<(String, String)> {
    let src = crate::root().join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files
        .iter()
        .filter(|file| file.file_name().is_none_or(|n| n != "tests.rs"))
        .map(|file| {
            let relative = file
                .strip_prefix(&src)
                .unwrap_or(file)
                .display()
                .to_string();
            let text = std::fs::read_to_string(file).expect("readable");
            (relative, without_tests(&without_literals(&text)))
        })
        .collect()
}

#[test]
fn test_items_are_left_out_wherever_they_are() {
    let code = "use a;\n#[cfg(test)]\nuse crate::b;\nfn c() {}\n#[cfg(test)]\nmod tests {\n    \
                fn d() { crate::e(); }\n}\nfn f() { crate::g(); }\n#[cfg(test)]\nmod more;\n";
    let kept = without_tests(code);
    assert_eq!(
        kept,
        "use a;\n\n\nfn c() {}\n\n\n\n\nfn f() { crate::g(); }\n\n\n"
    );
    assert_eq!(kept.lines().count(), code.lines().count());
}

#[test]
fn function_lengths_skip_braces_in_literals_and_comments() {
    let code = "fn a() {\n    let s = \"{{ x }}\";\n    let c = '{';\n    // {\n}\nfn b();\nfn c<'a>(x: &'a str) {\n}\n";
    assert_eq!(function_lengths(&without_literals(code)), [(1, 5), (7, 2)]);
}
