//! `docs/environment.md` lists every environment variable pagantic reads: each name the source
//! reads (a string literal in `src/` outside its tests that looks like one of pagantic's,
//! OpenTelemetry's, a scheduler's or a terminal's variables) is on the page, and each name on the
//! page is read by the source or said to be read by a library.

use std::collections::BTreeSet;
use std::path::Path;

use crate::root;

/// The prefixes (or whole names) of the variables the code may read.
const FAMILIES: [&str; 14] = [
    "PAGANTIC_",
    "OTEL_",
    "SLURM_",
    "AWS_BATCH_",
    "JOB_COMPLETION_INDEX",
    "ORT_",
    "HF_",
    "NO_COLOR",
    "CLICOLOR",
    "TRACEPARENT",
    "TRACESTATE",
    "GITHUB_STEP_SUMMARY",
    "RUST_",
    "HOME",
];

/// Names in the source that are not variables it reads: the tests' own, and constants that
/// only look like variables.
const NOT_READ: [&str; 2] = ["PAGANTIC_HARDEN_TEST_CHILD", "PAGANTIC_SURELY_UNSET"];

/// The quoted upper-case names in the Rust files under `dir`, their tests (from the first
/// `#[cfg(test)]` on) left out.
fn names_in(dir: &Path, found: &mut BTreeSet<String>) {
    for entry in std::fs::read_dir(dir).expect("a directory") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            names_in(&path, found);
            continue;
        }
        if path.extension().is_none_or(|e| e != "rs") {
            continue;
        }
        let text = std::fs::read_to_string(&path).expect("source");
        let code = text.split("#[cfg(test)]").next().unwrap_or_default();
        for quoted in code.split('"').skip(1).step_by(2) {
            let looks = !quoted.is_empty()
                && quoted
                    .chars()
                    .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
                && FAMILIES.iter().any(|family| quoted.starts_with(family));
            if looks && !NOT_READ.contains(&quoted) {
                found.insert(quoted.to_string());
            }
        }
    }
}

/// The names in the first column of the page's tables.
fn listed(page: &str) -> BTreeSet<String> {
    page.lines()
        .filter_map(|line| line.strip_prefix("| `"))
        .filter_map(|rest| rest.split(" |").next())
        .flat_map(|cell| {
            cell.split(", ")
                .map(|name| name.trim_matches('`').to_string())
                .collect::<Vec<_>>()
        })
        .collect()
}

#[test]
fn the_environment_page_lists_every_variable_read() {
    let mut read = BTreeSet::new();
    names_in(&root().join("src"), &mut read);
    assert!(
        read.len() >= 20 && read.contains("PAGANTIC_CACHE_ONLY"),
        "found the variables: {read:?}"
    );
    let page = std::fs::read_to_string(root().join("docs/environment.md")).expect("the page");
    let on_page = listed(&page);
    let missing: Vec<_> = read.difference(&on_page).collect();
    assert!(
        missing.is_empty(),
        "read by the code, missing from docs/environment.md: {missing:?}"
    );
    let libraries = page
        .split("## Read by libraries pagantic uses")
        .nth(1)
        .map(listed)
        .unwrap_or_default();
    let by_sdk: BTreeSet<String> = page
        .lines()
        .filter(|line| line.contains("read by the OpenTelemetry SDK"))
        .flat_map(listed)
        .collect();
    let stale: Vec<_> = on_page
        .iter()
        .filter(|name| {
            !read.contains(*name)
                && !libraries.contains(*name)
                && !by_sdk.contains(*name)
                // Read through anstyle-query, as clap reads them (see the page).
                && !matches!(name.as_str(), "NO_COLOR" | "CLICOLOR" | "CLICOLOR_FORCE" | "TERM")
        })
        .collect();
    assert!(
        stale.is_empty(),
        "on docs/environment.md but read by nothing: {stale:?}"
    );
}
