//! Every file in `tests/invalid/` is a plan with a mistake. Each must be rejected with exit 2 and
//! located diagnostics, every one with a help line; the exact output (code, file:line:col, caret,
//! help) is pinned in a snapshot.

use crate::{pagantic_in, root};

#[test]
fn every_invalid_plan_is_rejected_with_located_diagnostics() {
    let tests_dir = root().join("tests");
    insta::glob!("..", "invalid/*.yaml", |path| {
        let relative = path.strip_prefix(&tests_dir).expect("inside tests/");
        let relative = relative.to_str().expect("utf-8 path");
        let human = pagantic_in(&tests_dir, &["validate", "--quiet", relative]);
        assert_eq!(
            human.code, 2,
            "{relative} should be invalid:\n{}",
            human.stderr
        );
        assert!(!human.stderr.contains("panicked"), "{relative} panicked");
        let json = pagantic_in(&tests_dir, &["validate", "--format", "json", relative]);
        let mut summary = String::new();
        for line in json.stdout.lines() {
            let value: serde_json::Value =
                serde_json::from_str(line).expect("one JSON object per line");
            assert!(
                value["line"].is_u64(),
                "{relative}: every diagnostic has a line: {line}"
            );
            assert!(
                value["column"].is_u64(),
                "{relative}: every diagnostic has a column: {line}"
            );
            assert!(
                value["help"].as_str().is_some_and(|h| !h.trim().is_empty()),
                "{relative}: every diagnostic has a help line: {line}"
            );
            summary.push_str(&format!(
                "{} {}:{}:{} {}\n",
                value["code"].as_str().unwrap_or_default(),
                value["file"].as_str().unwrap_or_default(),
                value["line"],
                value["column"],
                value["message"].as_str().unwrap_or_default(),
            ));
        }
        insta::assert_snapshot!(format!("{summary}\n{}", human.stderr));
    });
}
