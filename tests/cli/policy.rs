//! A `--policy` file on `run`: every limit it sets tightens the plan's own, and its step timeout
//! is the default timeout of the steps the run executes.

use crate::pagantic;

/// tests/plans/policy-tighten.yaml runs within its own policy; the policy file tightens each of
/// the five limits that policy sets, and `run` refuses the plan before any step runs, naming the
/// file for every limit.
#[test]
fn run_under_a_policy_file_refuses_what_each_tightened_limit_forbids() {
    let plan = "tests/plans/policy-tighten.yaml";
    let own = pagantic(&["run", plan, "-i", "message=hi"]);
    assert_eq!(own.code, 0, "{}", own.stderr);

    let file = "tests/policies/tight.policy.yaml";
    let run = pagantic(&["run", "--policy", file, plan, "-i", "message=hi"]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert_eq!(run.stdout, "", "nothing ran");
    assert!(!run.stderr.contains("✓"), "no step ran: {}", run.stderr);

    let checked = pagantic(&["validate", "--format", "json", "--policy", file, plan]);
    let mut found: Vec<(String, String)> = checked
        .stdout
        .lines()
        .map(|line| {
            let d: serde_json::Value = serde_json::from_str(line).expect("one JSON diagnostic");
            (
                d["code"].as_str().unwrap_or_default().to_string(),
                d["message"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    found.sort();
    let codes: Vec<&str> = found.iter().map(|(code, _)| code.as_str()).collect();
    assert_eq!(
        codes,
        [
            "policy::max_tokens_exceed",
            "policy::not_linear",
            "policy::timeout_exceeds",
            "policy::tool_iterations_exceed",
            "policy::tool_not_allowed",
        ],
        "{}",
        checked.stdout
    );
    for (code, message) in &found {
        assert!(
            message.contains(&format!("the policy file {file}")),
            "{code}: {message}"
        );
        assert!(
            run.stderr.contains(code.as_str()),
            "run reports {code} too: {}",
            run.stderr
        );
    }
}

/// Allow-lists only narrow: a policy file that allows more tools and step types than the plan's
/// own policy leaves the plan's lists in force, at `validate` and at `run`, and the violation is
/// still reported against the plan's policy.
#[test]
fn a_policy_file_cannot_widen_the_plans_allow_lists() {
    let file = "tests/policies/wide-lists.policy.yaml";
    for (plan, code, message) in [
        (
            "tests/invalid/policy_tool.yaml",
            "policy::tool_not_allowed",
            "`shell`",
        ),
        (
            "tests/invalid/policy_step_type.yaml",
            "policy::step_type_not_allowed",
            "`infer`",
        ),
    ] {
        for command in ["validate", "run"] {
            let run = pagantic(&[command, "--policy", file, plan]);
            assert_eq!(run.code, 2, "{command} {plan}: {}", run.stderr);
            assert_eq!(run.stdout, "", "nothing ran");
            assert!(
                run.stderr.contains(code) && run.stderr.contains(message),
                "{command} {plan}: {}",
                run.stderr
            );
            assert!(
                run.stderr.contains("the plan's policy") && !run.stderr.contains(file),
                "the plan's own list is the one in force: {}",
                run.stderr
            );
        }
    }
}

/// A step that sets no timeout runs under the policy file's `timeout_per_step`: a model that
/// stalls for a minute is stopped after the file's one second.
#[test]
fn the_policy_files_step_timeout_is_the_default_at_run_time() {
    let run = pagantic(&[
        "run",
        "--policy",
        "tests/policies/one-second.policy.yaml",
        "tests/plans/chat-stall.yaml",
        "-i",
        "message=slow",
    ]);
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(
        run.stderr
            .contains("error[ORCHESTRATION_STEP_TIMEOUT]: step `slow` ran past its timeout of 1s"),
        "{}",
        run.stderr
    );
}
