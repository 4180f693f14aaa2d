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
