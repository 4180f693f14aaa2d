//! The layers of the crate (listed in `src/lib.rs`) point downward only: a module may use modules
//! of lower layers, never of a higher one, and the modules of the middle band (layer 2) do not use
//! each other. This test reads every `crate::…` path in `src/` and fails on a violation.

use std::path::Path;

/// Every top-level module and its layer; a module missing here fails the test.
const LAYERS: &[(&str, u8)] = &[
    ("core", 0),
    ("inference", 1),
    ("context", 2),
    ("tool", 2),
    ("constraint", 2),
    ("rerank", 2),
    ("validate", 2),
    ("prompt", 2),
    ("orchestrate", 3),
    ("plan", 4),
    ("batch", 5),
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
