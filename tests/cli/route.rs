//! The `route` step on a scripted router: each route shape, rejection before anything runs, and
//! exactly two model calls per request of its own (a template agent makes one more, recorded too).

use serde_json::Value;

use crate::{events_in, pagantic, pagantic_with, root};

fn route(request: &str) -> (i32, Value, Vec<Value>) {
    route_with(request, "smart")
}

fn route_with(request: &str, router: &str) -> (i32, Value, Vec<Value>) {
    let (code, record, events, _) = routed(request, router);
    (code, record, events)
}

/// Runs the storefront plan on `request`: exit code, run record, events, and the orders file
/// the `order` tool appends to (None when no order was placed). Each call has a directory of its
/// own, so two requests never read each other's events or orders.
fn routed(request: &str, router: &str) -> (i32, Value, Vec<Value>, Option<String>) {
    let dir = tempfile::tempdir().expect("temp dir");
    let events_file = dir.path().join("events.jsonl");
    let orders_file = dir.path().join("orders.jsonl");
    let orders_env = orders_file.to_str().expect("utf-8");
    let args = [
        "run",
        "--format",
        "json",
        "--events",
        events_file.to_str().expect("utf-8"),
        "-i",
        &format!("request={request}"),
        "-i",
        &format!("router={router}"),
        "tests/plans/storefront-scripted.yaml",
    ];
    let run = pagantic_with(&root(), &args, &[("PAGANTIC_TEST_ORDERS", orders_env)]);
    let record = serde_json::from_str(&run.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}\n{}", run.stdout, run.stderr));
    let events = events_in(&events_file);
    let orders = std::fs::read_to_string(&orders_file).ok();
    (run.code, record, events, orders)
}

fn model_calls(events: &[Value]) -> usize {
    events.iter().filter(|e| e["kind"] == "inference").count()
}

#[test]
fn a_catalog_question_routes_to_a_single_agent() {
    let (code, record, events) = route("what do you have?");
    assert_eq!(code, 0, "{record}");
    let detail = &record["steps"][0]["detail"];
    assert_eq!(detail["route"]["mode"], "single");
    assert_eq!(detail["route"]["rationale"], "a catalog question");
    assert_eq!(detail["results"].as_array().map(Vec::len), Some(1));
    assert!(
        detail["results"][0]["output"]
            .as_str()
            .is_some_and(|o| o.contains("Aero 14"))
    );
    assert_eq!(record["output"], "Here is what I found.");
    assert_eq!(model_calls(&events), 2, "exactly two model calls");
}

#[test]
fn independent_questions_run_their_agents_in_parallel() {
    let (code, record, events) = route("price, rating and stock of the Aero 14");
    assert_eq!(code, 0, "{record}");
    let detail = &record["steps"][0]["detail"];
    assert_eq!(detail["route"]["mode"], "parallel");
    let agents: Vec<&str> = detail["results"]
        .as_array()
        .expect("results")
        .iter()
        .filter_map(|r| r["agent"].as_str())
        .collect();
    assert_eq!(agents, ["pricing", "reviews", "stock"]);
    assert!(
        detail["results"][1]["output"]
            .as_str()
            .is_some_and(|o| o.contains("battery lasts all day"))
    );
    assert_eq!(model_calls(&events), 2);
    let tools = events.iter().filter(|e| e["kind"] == "tool_start").count();
    assert_eq!(tools, 3);
}

#[test]
fn dependent_steps_run_in_sequence_and_the_order_is_placed() {
    let (code, record, events, orders) = routed(
        "find a laptop under $1000, check stock, then order it",
        "smart",
    );
    assert_eq!(code, 0, "{record}");
    let detail = &record["steps"][0]["detail"];
    assert_eq!(detail["route"]["mode"], "sequential");
    assert_eq!(
        detail["results"][2]["output"].as_str().map(str::trim),
        Some("ordered 1 x aero-14")
    );
    assert_eq!(
        orders.as_deref(),
        Some("{\"product\": \"aero-14\", \"quantity\": 1}\n"),
        "the order is written"
    );
    assert_eq!(model_calls(&events), 2);
}

#[test]
fn a_route_breaking_an_agent_schema_is_rejected_before_anything_runs() {
    let (code, record, events) = route_with("order nine of them", "bad_arguments");
    assert_eq!(code, 1);
    assert_eq!(record["error"]["code"], "ORCHESTRATION_STEP_MISMATCH");
    assert!(
        record["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("/steps/0")),
        "{record}"
    );
    assert_eq!(
        events.iter().filter(|e| e["kind"] == "tool_start").count(),
        0,
        "no agent ran"
    );
    assert_eq!(
        model_calls(&events),
        2,
        "the route was retried once with the errors"
    );
}

#[test]
fn a_route_over_the_limit_is_rejected() {
    let (code, record, events) = route_with("everything please", "too_many");
    assert_eq!(code, 1);
    assert_eq!(record["error"]["code"], "ORCHESTRATION_STEP_MISMATCH");
    assert_eq!(
        events.iter().filter(|e| e["kind"] == "tool_start").count(),
        0
    );
}

#[test]
fn a_plan_agent_runs_its_plan_with_the_route_arguments_as_inputs() {
    let (code, record, events) = route("describe the aero");
    assert_eq!(code, 0, "{record}");
    let result = &record["steps"][0]["detail"]["results"][0];
    assert_eq!(result["agent"], "describe");
    // The argument became the sub-plan's input, its default filled the other.
    assert!(
        result["output"]
            .as_str()
            .is_some_and(|o| o.starts_with("short description of aero: ") && o.contains("Aero 14")),
        "{result}"
    );
    assert_eq!(model_calls(&events), 2);
}

#[test]
fn a_template_agent_s_model_call_is_recorded_like_the_step_s_own() {
    let (code, record, events) = route("a blurb for the aero, please");
    assert_eq!(code, 0, "{record}");
    let result = &record["steps"][0]["detail"]["results"][0];
    assert_eq!(result["agent"], "blurb");
    assert_eq!(result["output"], "A light, fast laptop.");
    let calls: Vec<&Value> = events.iter().filter(|e| e["kind"] == "inference").collect();
    assert_eq!(calls.len(), 3, "route, the agent's call, synthesis");
    let agent_call = calls
        .iter()
        .find(|e| e["data"]["call"] == "agent")
        .expect("the agent's call");
    assert_eq!(agent_call["step"], "assist");
    assert_eq!(agent_call["data"]["agent"], "blurb");
    assert_eq!(agent_call["data"]["messages"], 1);
}

#[test]
fn a_plan_agent_that_leads_back_to_its_own_plan_is_refused() {
    let run = pagantic(&["run", "tests/plans/agents/loop.yaml"]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(
        run.stderr.contains("plan::sub_plan_cycle")
            && run.stderr.contains("leads back to this plan (a cycle)"),
        "{}",
        run.stderr
    );
}

#[test]
fn a_failed_agent_becomes_its_result_and_stops_the_sequence_after_it() {
    let (code, record, events, orders) = routed("find a unicorn, then order it", "smart");
    assert_eq!(code, 0, "{record}");
    let results = &record["steps"][0]["detail"]["results"];
    // grep finds no unicorn: the search fails, its error is its result…
    assert_eq!(results[0]["error"]["code"], "TOOL_EXECUTION_FAILED");
    assert!(
        results[0]["output"]
            .as_str()
            .is_some_and(|o| o.starts_with("error: "))
    );
    // …and the order after it is not placed.
    assert_eq!(results[1]["agent"], "place_order");
    assert_eq!(results[1]["skipped"], true);
    assert_eq!(orders, None, "no order was placed");
    // The answer is still written, from what could be done.
    assert_eq!(record["output"], "Here is what I found.");
    assert_eq!(model_calls(&events), 2);
}

#[test]
fn every_kind_of_sequential_agent_reads_the_earlier_results() {
    let run = pagantic(&["run", "--format", "json", "tests/plans/route-results.yaml"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let record: Value = serde_json::from_str(&run.stdout).expect("a run record");
    let outputs: Vec<&str> = record["steps"][0]["detail"]["results"]
        .as_array()
        .expect("results")
        .iter()
        .map(|r| r["output"].as_str().expect("text output"))
        .collect();
    assert_eq!(
        outputs,
        [
            // `search`, a tool agent, runs first and sees no result.
            "{\"id\": \"aero-14\", \"name\": \"Aero 14 laptop\", \"price\": 949, \"rating\": 4.5, \"stock\": 12}\n",
            // `stock`, a tool agent, reads the search's output in its argv.
            "stock of aero-14 is 12 (after 1 result)\n",
            // `note`, a template agent, reads both.
            "Note: stock of aero-14 is 12 (after 1 result) (search ran first)",
            // `summary`, a plan agent, gets them as its `results` input.
            "Aero after 3 agents: search; stock; note; ",
        ]
    );
    assert_eq!(record["output"], "All four agents ran.");
}

/// A plan agent's run is nested in the route step: its own run id, its events linked to the
/// calling run and step, no lifecycle of the calling run's among them, and its steps shown
/// inside the route step's progress.
#[test]
fn a_plan_agent_runs_nested_in_the_route_step() {
    let dir = tempfile::tempdir().expect("temp dir");
    let events_file = dir.path().join("events.jsonl");
    let run = pagantic(&[
        "run",
        "--events",
        events_file.to_str().expect("utf-8"),
        "tests/plans/route-results.yaml",
    ]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let events = events_in(&events_file);
    let parent = events[0]["run_id"].as_str().expect("a run id").to_string();
    let states = |run_id: &str| -> Vec<String> {
        events
            .iter()
            .filter(|e| e["run_id"] == run_id && e["kind"] == "lifecycle")
            .map(|e| e["data"]["state"].as_str().unwrap_or_default().to_string())
            .collect()
    };
    assert_eq!(
        states(&parent),
        ["INIT", "PLAN", "PREPARE", "EXECUTE", "VALIDATE", "COMPLETE"]
    );
    let nested: Vec<&Value> = events.iter().filter(|e| e["run_id"] != parent).collect();
    assert!(!nested.is_empty(), "the sub-plan's events are in the file");
    assert!(nested.iter().all(|e| e["parent_run_id"] == parent.as_str()));
    let child = nested[0]["run_id"].as_str().expect("its run id");
    assert_eq!(states(child), ["EXECUTE", "VALIDATE", "COMPLETE"]);
    // Its run-level events hang from the span of its agent, a child of an attempt span of the
    // route step in the calling run.
    let route_spans: Vec<&Value> = events
        .iter()
        .filter(|e| e["run_id"] == parent.as_str() && e["kind"] == "step_start")
        .map(|e| &e["span"])
        .collect();
    let hangs_from = &nested[0]["parent_span"];
    let agent = events
        .iter()
        .find(|e| e["kind"] == "agent_start" && &e["span"] == hangs_from)
        .unwrap_or_else(|| panic!("an agent's span: {hangs_from}"));
    assert_eq!(agent["data"]["agent"], "summary");
    assert!(
        route_spans.contains(&&agent["parent_span"]),
        "{}",
        agent["parent_span"]
    );
    let shown = |prefix: &str| run.stderr.lines().any(|line| line.starts_with(prefix));
    assert!(shown("      ✓ summary ("), "{}", run.stderr);
    assert!(shown("  ✓ assist ("), "{}", run.stderr);
}
