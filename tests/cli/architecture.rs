//! The layers of the crate (listed in `src/lib.rs`) point downward only: a module may use modules
//! of lower layers, never of a higher one, and the modules of the middle band (layer 2) do not use
//! each other. This test reads every `crate::…` path in `src/` and fails on a violation.

use std::path::Path;

/// Every top-level module and its layer; a module missing here fails the test.
const LAYERS: &[(&str, u8)] = &[
    ("core", 0),
    ("model_store", 1),
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
    ("trace", 4),
    ("batch", 5),
    ("serve", 5),
    ("suite", 5),
    ("cli", 5),
];

/// Modules of one layer that one of them may not use: the model files lie below the engines,
/// which use them.
const BELOW_IN_ITS_LAYER: &[(&str, &str)] = &[("model_store", "inference")];

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
        if matches!(module, "lib" | "main" | "bin") {
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
                Some(_) if BELOW_IN_ITS_LAYER.contains(&(module, used.as_str())) => violations
                    .push(format!(
                        "{}: {module} uses crate::{used}, which it lies below",
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

/// The run layer's files that hand a run's events on: they know a trace exporter only as the
/// `Tracer` trait, never the exporter itself (the `trace` module, above them).
const KNOW_NO_EXPORTER: &[&str] = &[
    "orchestrate/pipeline.rs",
    "orchestrate/session.rs",
    "orchestrate/emit.rs",
    "orchestrate/mod.rs",
];

/// Paths in `code` through a module named `module` (`module::…` after anything but a name).
fn paths_through(code: &str, module: &str) -> usize {
    let path = format!("{module}::");
    code.match_indices(&path)
        .filter(|(at, _)| {
            let previous = code[..*at].chars().next_back();
            !previous.is_some_and(|c| c.is_alphanumeric() || c == '_')
        })
        .count()
}

/// Trace export is an outlet above the run layer, behind a trait the session calls: the files
/// that run pipelines and emit their events do not name it, so exporting traces, or changing
/// how, touches no run.
#[test]
fn the_run_layer_knows_the_trace_exporter_only_by_its_trait() {
    let mut named = Vec::new();
    let mut read = 0;
    for (relative, code) in src_code() {
        if !KNOW_NO_EXPORTER.contains(&relative.as_str()) {
            continue;
        }
        read += 1;
        for module in ["trace", "otel", "opentelemetry", "opentelemetry_sdk"] {
            if paths_through(&code, module) > 0 {
                named.push(format!("src/{relative} names {module}::"));
            }
        }
    }
    assert_eq!(read, KNOW_NO_EXPORTER.len(), "a file listed is gone");
    assert!(named.is_empty(), "{}", named.join("\n"));
}

#[test]
fn paths_through_a_module_leave_out_longer_names() {
    let code = "use crate::trace::Exporter; traceparent::with(x); my_trace::y; trace::z();";
    assert_eq!(paths_through(code, "trace"), 2);
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

/// The statics `src/` may declare outside tests (thread- and task-locals included), by file and
/// name: each holds a value that never changes once set, so the process keeps no state of its
/// own. Everything a session's runs share (its runtime, MCP servers, local models' loads, file
/// hashes, run ids) is owned by the session and handed down instead.
const CONSTANT_STATICS: &[(&str, &str)] = &[
    // The tool access of a tool that declares none: a constant.
    ("plan/tools/access.rs", "NO_ACCESS"),
    // The generated schemas' compiled validators, built on first use and never changed: the
    // schemas are constants of the binary.
    ("plan/schema.rs", "PLAN"),
    ("plan/schema.rs", "POLICY"),
    ("plan/schema.rs", "SUITE"),
    // The ONNX Runtime environment, loaded once: ONNX Runtime allows one environment per
    // process (ort refuses to build a second one, even after the first is dropped), so it
    // cannot belong to a session.
    ("rerank/runtime.rs", "RUNTIME"),
];

/// The names of the statics `code` declares: `static NAME:` (also inside `thread_local!` and
/// `task_local!`), not the `'static` lifetime.
fn statics(code: &str) -> Vec<String> {
    let mut found = Vec::new();
    for (at, _) in code.match_indices("static ") {
        let before = code[..at].chars().next_back();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '\'') {
            continue;
        }
        let rest = code[at + "static ".len()..].trim_start();
        let rest = rest.strip_prefix("mut ").unwrap_or(rest).trim_start();
        let name: String = rest
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        if !name.is_empty() && rest[name.len()..].trim_start().starts_with(':') {
            found.push(name);
        }
    }
    found
}

/// Process-wide state has one owner, the session: a static that holds state (a registry, a
/// counter, a runtime, a task-local passing values around) would be shared by every session of
/// the process behind their backs.
#[test]
fn the_process_keeps_no_state_of_its_own() {
    let (mut unexpected, mut found) = (Vec::new(), Vec::new());
    for (relative, code) in code_outside_tests() {
        for name in statics(&code) {
            let entry = (relative.clone(), name);
            let listed = (entry.0.as_str(), entry.1.as_str());
            if !CONSTANT_STATICS.contains(&listed) {
                unexpected.push(format!("src/{}: static {}", entry.0, entry.1));
            }
            found.push(entry);
        }
    }
    for (file, name) in CONSTANT_STATICS {
        assert!(
            found.iter().any(|(f, n)| f == file && n == name),
            "src/{file}: static {name} is gone: take it off the list"
        );
    }
    assert!(
        unexpected.is_empty(),
        "statics that are not constants (give the state to the session's resources):\n{}",
        unexpected.join("\n")
    );
    assert!(CONSTANT_STATICS.len() <= 6, "at most six constant statics");
}

#[test]
fn statics_are_found_in_every_form_but_lifetimes() {
    let code = "static A: u8 = 1;\npub static B: X = X;\npub(crate) static mut C: u8 = 0;\n\
                thread_local! { static D: Cell<u8> = Cell::new(0); }\n\
                fn f(x: &'static str) -> Box<dyn Fn() + 'static> {}\nlet is_static = 1;";
    assert_eq!(statics(code), ["A", "B", "C", "D"]);
}

/// The lines of `src/` that name a cargo feature: the light build (`--no-default-features`)
/// differs from the default one in these only.
const MAX_FEATURE_LINES: usize = 4;

#[test]
fn the_light_build_differs_in_a_few_lines() {
    let src = crate::root().join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut lines = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).expect("readable");
        for (number, line) in text.lines().enumerate() {
            if line.contains("feature =") {
                let relative = file.strip_prefix(&src).unwrap_or(file);
                lines.push(format!(
                    "src/{}:{}: {}",
                    relative.display(),
                    number + 1,
                    line.trim()
                ));
            }
        }
    }
    assert!(
        lines.len() <= MAX_FEATURE_LINES,
        "more than {MAX_FEATURE_LINES} lines name a feature (switch a whole module on one `mod` line instead):\n{}",
        lines.join("\n")
    );
}

/// The files that may start an async runtime: the session's (or a command's without a session)
/// is the process's one; the trace exporter's thread has its own, so sending spans never waits
/// on the runs' work (nor theirs on it).
const RUNTIMES_START_IN: &[&str] = &["orchestrate/resources.rs", "trace/export.rs"];

/// One async runtime runs a session's work (its runs, its MCP servers' sessions), so nothing
/// waits on work parked on another.
#[test]
fn runtimes_start_in_one_place() {
    let mut starts = Vec::new();
    for (relative, code) in code_outside_tests() {
        let started = ["new_multi_thread", "new_current_thread", "Runtime::new"]
            .iter()
            .any(|start| free_calls(&code, start) > 0);
        if started && !RUNTIMES_START_IN.contains(&relative.as_str()) {
            starts.push(format!("src/{relative}"));
        }
    }
    assert!(
        starts.is_empty(),
        "async runtimes started outside the session's resources:\n{}",
        starts.join("\n")
    );
}

/// The files of `src/` that only tests compile: those of a module declared `#[cfg(test)] mod
/// NAME;` (`NAME.rs`, and every file under `NAME/`), as paths from `src/`.
fn test_only_files() -> Vec<String> {
    let src = crate::root().join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut modules = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).expect("readable");
        let module = module_of(&src, file);
        for (at, _) in text.match_indices("#[cfg(test)]") {
            let item = text[at + "#[cfg(test)]".len()..].trim_start();
            let item = item.strip_prefix("pub(crate) ").unwrap_or(item);
            let Some(declared) = item.strip_prefix("mod ") else {
                continue;
            };
            let name: String = declared
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if declared[name.len()..].trim_start().starts_with(';') {
                let path: std::path::PathBuf = module.iter().chain([&name]).collect();
                modules.push(path.display().to_string());
            }
        }
    }
    files
        .iter()
        .map(|file| {
            let relative = file.strip_prefix(&src).unwrap_or(file);
            relative.display().to_string()
        })
        .filter(|relative| {
            modules.iter().any(|module| {
                relative == &format!("{module}.rs") || relative.starts_with(&format!("{module}/"))
            })
        })
        .collect()
}

/// [`src_code`] without the files only tests compile.
fn code_outside_tests() -> Vec<(String, String)> {
    let test_only = test_only_files();
    src_code()
        .into_iter()
        .filter(|(relative, _)| !test_only.contains(relative))
        .collect()
}

#[test]
fn files_of_test_only_modules_are_known() {
    let test_only = test_only_files();
    for file in ["plan/mutants.rs", "model_store/gguf/test_file.rs"] {
        assert!(test_only.iter().any(|f| f == file), "{file}: {test_only:?}");
    }
    assert!(!test_only.iter().any(|f| f == "plan/build.rs"));
}
