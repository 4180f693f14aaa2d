//! `pagantic validate`: example plans pass; formats, policies, globs and exit codes behave.

use crate::pagantic;

#[test]
fn every_example_plan_and_test_file_is_valid() {
    let run = pagantic(&["validate", "plans/*.yaml"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let names: Vec<String> = std::fs::read_dir(crate::root().join("plans"))
        .expect("plans/ exists")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".yaml"))
        .collect();
    let tests = names.iter().filter(|n| n.ends_with(".test.yaml")).count();
    let plans = names.len() - tests;
    assert!(plans >= 6, "at least six example plans");
    assert!(tests >= 2, "at least two example test files");
    assert!(
        run.stderr
            .contains(&format!("{plans} plans, {tests} test files checked")),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr
            .contains(&format!("{} valid, 0 invalid", plans + tests)),
        "{}",
        run.stderr
    );
}

#[test]
fn example_plans_together_use_every_step_type() {
    let mut text = String::new();
    for entry in std::fs::read_dir(crate::root().join("plans")).expect("plans/ exists") {
        let path = entry.expect("entry").path();
        if path.extension().is_some_and(|x| x == "yaml") {
            text.push_str(&std::fs::read_to_string(&path).expect("readable"));
        }
    }
    for step_type in pagantic::plan::StepType::ALL {
        assert!(
            text.contains(&format!("type: {step_type}\n")),
            "no example plan uses `type: {step_type}`"
        );
    }
}

#[test]
fn every_example_plan_carries_the_schema_modeline() {
    for entry in std::fs::read_dir(crate::root().join("plans")).expect("plans/ exists") {
        let path = entry.expect("entry").path();
        if path.extension().is_some_and(|x| x == "yaml") {
            let text = std::fs::read_to_string(&path).expect("readable");
            let schema = if path.to_string_lossy().ends_with(".test.yaml") {
                "test"
            } else {
                "plan"
            };
            assert!(
                text.starts_with(&format!(
                    "# yaml-language-server: $schema=../schemas/{schema}.schema.json\n"
                )),
                "{} lacks the modeline",
                path.display()
            );
        }
    }
}

#[test]
fn several_files_report_every_error_and_exit_2() {
    let run = pagantic(&[
        "validate",
        "plans/rag.yaml",
        "tests/invalid/cycle.yaml",
        "tests/invalid/unknown_model.yaml",
    ]);
    assert_eq!(run.code, 2);
    assert!(run.stderr.contains("ok: plans/rag.yaml"), "{}", run.stderr);
    assert!(run.stderr.contains("plan::cycle"), "{}", run.stderr);
    assert!(run.stderr.contains("plan::unknown_model"), "{}", run.stderr);
    assert!(run.stderr.contains("3 plans checked"), "{}", run.stderr);
    assert!(
        run.stderr.contains("1 valid, 2 invalid (2 errors)"),
        "{}",
        run.stderr
    );
}

#[test]
fn github_format_prints_annotations_on_stdout() {
    let run = pagantic(&[
        "validate",
        "--format",
        "github",
        "tests/invalid/unknown_model.yaml",
    ]);
    assert_eq!(run.code, 2);
    assert_eq!(
        run.stdout.lines().next(),
        Some(
            "::error file=tests/invalid/unknown_model.yaml,line=8,col=12,title=plan%3A%3Aunknown_model::\
             unknown model `lm`%0Ahelp: did you mean `llm`?"
        ),
        "{}",
        run.stdout
    );
}

#[test]
fn a_pattern_matching_nothing_is_an_error() {
    let run = pagantic(&["validate", "plans/*.nothing"]);
    assert_eq!(run.code, 2);
    assert!(run.stderr.contains("plan::read_failed"), "{}", run.stderr);
    assert!(run.stderr.contains("matches no file"), "{}", run.stderr);
}

#[test]
fn a_missing_file_is_an_error() {
    let run = pagantic(&["validate", "plans/missing.yaml"]);
    assert_eq!(run.code, 2);
    assert!(
        run.stderr.contains("cannot read plans/missing.yaml"),
        "{}",
        run.stderr
    );
}

#[test]
fn a_policy_file_tightens_the_plans_own_policy() {
    // rag.yaml allows retrieve, rerank, infer, validate and 12 steps; the strict policy allows
    // neither rerank nor more than 3 steps.
    let run = pagantic(&[
        "validate",
        "--policy",
        "tests/policies/strict.policy.yaml",
        "plans/rag.yaml",
    ]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(
        run.stderr.contains(
            "step type `rerank` is not allowed by the policy file tests/policies/strict.policy.yaml"
        ),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr
            .contains("the plan has 4 steps; the policy file tests/policies/strict.policy.yaml allows at most 3"),
        "{}",
        run.stderr
    );
}

#[test]
fn a_looser_policy_file_does_not_loosen_the_plan() {
    let run = pagantic(&[
        "validate",
        "--policy",
        "tests/policies/loose.policy.yaml",
        "tests/invalid/policy_max_steps.yaml",
    ]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(
        run.stderr.contains("the plan's policy allows at most 2"),
        "{}",
        run.stderr
    );
}

#[test]
fn an_invalid_policy_file_is_reported_in_that_file() {
    let run = pagantic(&[
        "validate",
        "--policy",
        "tests/policies/invalid.policy.yaml",
        "plans/rag.yaml",
    ]);
    assert_eq!(run.code, 2);
    assert!(
        run.stderr
            .contains("tests/policies/invalid.policy.yaml:2:1"),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr
            .contains("unknown field `max_step` in the policy"),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr.contains("did you mean `max_steps`?"),
        "{}",
        run.stderr
    );
}

/// Each place a template runs sees the same variables under `validate` and under `run`: the
/// plan's `output` has no `input` (refused when the plan is checked, not left to fail at run
/// time), and it sees the run's `row` (in a batch) and `history` as every step does.
#[test]
fn the_output_template_reads_what_validate_allows() {
    let dir = tempfile::tempdir().expect("temp dir");
    let plan = |output: &str| {
        format!(
            "version: 1\nname: roots\ninputs: {{ x: {{ type: string }} }}\nsteps:\n  - \
             {{ name: s, type: template, template: \"{{{{ inputs.x }}}}!\" }}\noutput: \"{output}\"\n"
        )
    };
    std::fs::write(dir.path().join("input.yaml"), plan("{{ input.x }}")).expect("write");
    let refused = crate::pagantic_in(dir.path(), &["validate", "input.yaml"]);
    assert_eq!(refused.code, 2, "{}", refused.stderr);
    assert!(
        refused.stderr.contains("`input`") && refused.stderr.contains("input.yaml:6"),
        "{}",
        refused.stderr
    );

    let output = "{{ row.id }} {{ history | length }} {{ steps.s.output }} {{ inputs.x }}";
    std::fs::write(dir.path().join("globals.yaml"), plan(output)).expect("write");
    std::fs::write(
        dir.path().join("rows.jsonl"),
        "{\"id\": \"r1\", \"x\": \"a\"}\n{\"id\": \"r2\", \"x\": \"b\"}\n",
    )
    .expect("write");
    let checked = crate::pagantic_in(dir.path(), &["validate", "globals.yaml"]);
    assert_eq!(checked.code, 0, "{}", checked.stderr);
    let ran = crate::pagantic_in(
        dir.path(),
        &[
            "run",
            "globals.yaml",
            "--batch",
            "rows.jsonl",
            "--out",
            "out.jsonl",
            "-q",
        ],
    );
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    let written = std::fs::read_to_string(dir.path().join("out.jsonl")).expect("output");
    let mut outputs: Vec<String> = written
        .lines()
        .map(|line| {
            let row: serde_json::Value = serde_json::from_str(line).expect("a JSON line");
            row["output"].as_str().expect("text output").to_string()
        })
        .collect();
    outputs.sort();
    assert_eq!(outputs, ["r1 0 a! a", "r2 0 b! b"]);
}
