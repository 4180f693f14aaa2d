//! `pagantic schema`: the committed schemas are exactly what the code generates.

use crate::{pagantic, root};

#[test]
fn committed_schemas_match_the_code() {
    let run = pagantic(&["schema", "--check"]);
    assert_eq!(
        run.code, 0,
        "schemas/ drifted from the plan types; run `cargo run -- schema` and commit:\n{}",
        run.stderr
    );
}

#[test]
fn schema_writes_every_file_and_check_detects_drift() {
    let dir = tempfile::tempdir().expect("temp dir");
    let out = dir.path().join("schemas");
    let out_arg = out.to_str().expect("utf-8 path");
    let check = pagantic(&["schema", "--check", "--out", out_arg]);
    assert_eq!(check.code, 1, "missing files are drift");
    assert!(
        check.stderr.contains("is missing or out of date"),
        "{}",
        check.stderr
    );
    let write = pagantic(&["schema", "--out", out_arg]);
    assert_eq!(write.code, 0, "{}", write.stderr);
    for name in ["plan.schema.json", "policy.schema.json", "test.schema.json"] {
        let written = std::fs::read_to_string(out.join(name)).expect("written");
        let committed =
            std::fs::read_to_string(root().join("schemas").join(name)).expect("committed");
        assert_eq!(written, committed, "{name}");
        let value: serde_json::Value = serde_json::from_str(&written).expect("valid JSON");
        assert!(
            value["description"].is_string(),
            "{name} has descriptions for editors"
        );
    }
    assert_eq!(pagantic(&["schema", "--check", "--out", out_arg]).code, 0);
}
