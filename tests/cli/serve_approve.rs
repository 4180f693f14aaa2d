//! `pagantic serve --approve TOOL`: a served plan's tool marked `approval: required` fails its
//! calls with TOOL_APPROVAL_REQUIRED unless the server was started approving it, and the
//! approval holds for a plan `--watch` swaps in as for the one served from the start.

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::serve::{Server, post};

/// A plan whose one step calls `stamp`, a tool that needs approval, on `what`.
fn stamping(what: &str) -> String {
    format!(
        "version: 1\nname: stamping\ntools:\n  stamp:\n    kind: command\n    description: Stamps something.\n    argv: [echo, \"stamped {{{{ args.what }}}}\"]\n    parameters: {{ type: object, required: [what], properties: {{ what: {{ type: string }} }} }}\n    side_effects: none\n    approval: required\nsteps:\n  - {{ name: stamp, type: tool, tool: stamp, args: {{ what: \"{what}\" }} }}\noutput: \"{{{{ steps.stamp.output }}}}\"\n"
    )
}

async fn run_stamping(server: &Server) -> (StatusCode, Value) {
    post(server, "/v1/plans/stamping/runs", &json!({})).await
}

#[tokio::test]
async fn a_served_tool_needing_approval_runs_only_when_the_server_approves_it() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("stamping.yaml");
    std::fs::write(&path, stamping("the form")).expect("written");
    let plan = path.to_str().expect("utf-8");

    let unapproved = Server::start(&[plan, "--approve", "shred"], &[]);
    let (status, record) = run_stamping(&unapproved).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{record}");
    assert_eq!(
        record["error"]["code"], "TOOL_APPROVAL_REQUIRED",
        "{record}"
    );
    drop(unapproved);

    let mut approved = Server::start(&[plan, "--approve", "stamp", "--watch"], &[]);
    let (status, record) = run_stamping(&approved).await;
    assert_eq!(status, StatusCode::OK, "{record}");
    assert_eq!(record["output"], "stamped the form\n", "{record}");

    // The plan `--watch` rebuilds is approved too.
    std::fs::write(&path, stamping("the letter")).expect("written");
    approved.wait_for_line(|l| l.contains("reloaded") && l.contains("stamping.yaml"));
    let (status, record) = run_stamping(&approved).await;
    assert_eq!(status, StatusCode::OK, "{record}");
    assert_eq!(record["output"], "stamped the letter\n", "{record}");
}
