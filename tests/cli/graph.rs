//! `pagantic graph`: DOT and Mermaid output of the step graph.

use crate::pagantic;

#[test]
fn dot_output_is_pinned_and_well_formed() {
    let run = pagantic(&["graph", "plans/pipeline.yaml"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_well_formed_dot(&run.stdout);
    insta::assert_snapshot!(run.stdout);
}

#[test]
fn mermaid_output_is_pinned() {
    let run = pagantic(&["graph", "--format", "mermaid", "plans/pipeline.yaml"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(run.stdout.starts_with("flowchart TD\n"));
    insta::assert_snapshot!(run.stdout);
}

#[test]
fn an_invalid_plan_has_no_graph() {
    let run = pagantic(&["graph", "tests/invalid/cycle.yaml"]);
    assert_eq!(run.code, 2);
    assert!(run.stdout.is_empty());
    assert!(run.stderr.contains("plan::cycle"), "{}", run.stderr);
}

/// A structural check of DOT: one digraph, balanced braces, and every edge between declared nodes.
fn assert_well_formed_dot(dot: &str) {
    assert!(dot.starts_with("digraph \""), "{dot}");
    assert!(dot.trim_end().ends_with('}'), "{dot}");
    assert_eq!(
        dot.matches('{').count(),
        dot.matches('}').count(),
        "balanced braces"
    );
    let nodes: Vec<&str> = dot
        .lines()
        .filter(|l| l.contains(" [label=") && !l.contains("->"))
        .filter_map(|l| l.trim().split(' ').next())
        .collect();
    for line in dot.lines().filter(|l| l.contains("->")) {
        let mut ends = line.trim().trim_end_matches(';').split(" -> ");
        let from = ends.next().unwrap_or_default();
        let to = ends
            .next()
            .unwrap_or_default()
            .split(' ')
            .next()
            .unwrap_or_default();
        assert!(
            nodes.contains(&from) && nodes.contains(&to),
            "edge between undeclared nodes: {line}"
        );
    }
}
