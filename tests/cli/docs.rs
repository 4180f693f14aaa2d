//! Docs are tests: README YAML examples (plans and test files) validate, and the list of
//! diagnostic codes in `docs/diagnostics.md` matches the codes the code can emit.

use std::collections::BTreeSet;

use crate::{pagantic, root};

#[test]
fn readme_yaml_examples_validate() {
    let readme = std::fs::read_to_string(root().join("README.md")).expect("README.md");
    // The examples sit in a `plans/` directory holding the repository's plans and their data,
    // beside its prompts and corpus, as the README's plans and test files do, so their relative
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
    let (mut plan_count, mut test_count) = (0, 0);
    for (i, block) in readme.split("```yaml\n").skip(1).enumerate() {
        let body = block.split("```").next().unwrap_or_default();
        let name = if body.contains("\nsteps:") {
            plan_count += 1;
            format!("example-{i}.yaml")
        } else if body.contains("\ncases:") {
            test_count += 1;
            format!("example-{i}.test.yaml")
        } else {
            continue;
        };
        let path = plans.join(name);
        std::fs::write(&path, body).expect("written");
        let run = pagantic(&["validate", path.to_str().expect("utf-8")]);
        assert_eq!(
            run.code, 0,
            "README example #{i} is invalid:\n{body}\n{}",
            run.stderr
        );
    }
    assert!(plan_count >= 1, "the README shows at least one plan");
    assert!(test_count >= 1, "the README shows at least one test file");
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
