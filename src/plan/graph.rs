//! The step graph: which step waits for which, built with petgraph.
//!
//! A step with `needs` depends on the steps it names; a step without `needs` depends on the step
//! written before it (chaining). Building the graph reports names that match no step and every
//! dependency cycle (with its path); a graph without problems has a topological order and levels
//! (sets of steps whose dependencies are all in earlier levels, so they can run concurrently).
//! Rendering to DOT and Mermaid is deterministic: nodes and edges follow the plan's order.

use std::collections::{BTreeSet, HashMap};
use std::fmt::Write as _;

use petgraph::algo::{tarjan_scc, toposort};
use petgraph::graph::{DiGraph, NodeIndex};
use petgraph::visit::EdgeRef;

use super::steps::RawStep;

/// Why one step depends on another.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dependency {
    /// The step has no `needs` and follows the step before it.
    Chain,
    /// The step names the other in `needs` (position in that list).
    Needs(usize),
}

/// A problem found while building the graph.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GraphProblem {
    /// `steps[step].needs[position]` names no step.
    UnknownNeed {
        step: usize,
        position: usize,
        name: String,
    },
    /// These steps depend on each other in a cycle, in order; the first is repeated at the end.
    Cycle { path: Vec<usize> },
}

/// The dependency graph of a plan's steps. Node weights are step indices.
#[derive(Debug, Clone)]
pub struct StepGraph {
    graph: DiGraph<usize, Dependency>,
    order: Vec<usize>,
    levels: Vec<Vec<usize>>,
}

impl StepGraph {
    /// Builds the graph; problems are returned beside it (a graph with a cycle has no order).
    pub fn build(steps: &[RawStep]) -> (StepGraph, Vec<GraphProblem>) {
        let mut graph = DiGraph::with_capacity(steps.len(), steps.len());
        let nodes: Vec<NodeIndex> = (0..steps.len()).map(|i| graph.add_node(i)).collect();
        let mut by_name: HashMap<&str, usize> = HashMap::new();
        for (i, step) in steps.iter().enumerate() {
            by_name.entry(step.common().name.as_str()).or_insert(i);
        }
        let mut problems = Vec::new();
        for (i, step) in steps.iter().enumerate() {
            match &step.common().needs {
                Some(needs) => {
                    for (position, name) in needs.iter().enumerate() {
                        match by_name.get(name.as_str()) {
                            Some(&from) => {
                                graph.add_edge(nodes[from], nodes[i], Dependency::Needs(position));
                            }
                            None => problems.push(GraphProblem::UnknownNeed {
                                step: i,
                                position,
                                name: name.clone(),
                            }),
                        }
                    }
                }
                None if i > 0 => {
                    graph.add_edge(nodes[i - 1], nodes[i], Dependency::Chain);
                }
                None => {}
            }
        }
        let mut cycles = find_cycles(&graph);
        problems.append(&mut cycles);
        let order = match toposort(&graph, None) {
            Ok(sorted) => stable_order(&graph, sorted.len()),
            Err(_) => Vec::new(),
        };
        let levels = levels(&graph, &order);
        (
            StepGraph {
                graph,
                order,
                levels,
            },
            problems,
        )
    }

    /// Step indices in an order where every step comes after its dependencies (plan order among
    /// independent steps). Empty when the graph has a cycle.
    pub fn order(&self) -> &[usize] {
        &self.order
    }

    /// Groups of steps that can run at the same time, in execution order.
    pub fn levels(&self) -> &[Vec<usize>] {
        &self.levels
    }

    /// The steps `step` depends on directly, in plan order.
    pub fn predecessors(&self, step: usize) -> Vec<usize> {
        let mut out: Vec<usize> = self
            .graph
            .neighbors_directed(NodeIndex::new(step), petgraph::Direction::Incoming)
            .map(|n| self.graph[n])
            .collect();
        out.sort_unstable();
        out.dedup();
        out
    }

    /// The steps that depend on `step` directly, in plan order.
    pub fn successors(&self, step: usize) -> Vec<usize> {
        let mut out: Vec<usize> = self
            .graph
            .neighbors_directed(NodeIndex::new(step), petgraph::Direction::Outgoing)
            .map(|n| self.graph[n])
            .collect();
        out.sort_unstable();
        out.dedup();
        out
    }

    /// Every step `step` depends on, directly or not.
    pub fn ancestors(&self, step: usize) -> BTreeSet<usize> {
        let mut seen = BTreeSet::new();
        let mut stack = self.predecessors(step);
        while let Some(s) = stack.pop() {
            if seen.insert(s) {
                stack.extend(self.predecessors(s));
            }
        }
        seen
    }

    /// Edges as (from, to, why), in plan order of the dependent step.
    pub fn edges(&self) -> Vec<(usize, usize, Dependency)> {
        let mut edges: Vec<(usize, usize, Dependency)> = self
            .graph
            .edge_references()
            .map(|e| (self.graph[e.source()], self.graph[e.target()], *e.weight()))
            .collect();
        edges.sort_by_key(|&(from, to, why)| {
            (
                to,
                match why {
                    Dependency::Chain => 0,
                    Dependency::Needs(p) => p,
                },
                from,
            )
        });
        edges
    }

    /// Graphviz DOT text.
    pub fn to_dot(&self, plan_name: &str, steps: &[RawStep]) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "digraph {} {{", dot_quote(plan_name));
        out.push_str("  rankdir=TB;\n  node [shape=box, fontname=\"Helvetica\"];\n");
        for step in steps {
            let common = step.common();
            let _ = writeln!(
                out,
                "  {} [label={}];",
                dot_quote(&common.name),
                dot_quote(&format!("{}\n{}", common.name, step.step_type()))
            );
        }
        for (from, to, why) in self.edges() {
            let style = match why {
                Dependency::Chain => "",
                Dependency::Needs(_) => " [label=\"needs\"]",
            };
            let _ = writeln!(
                out,
                "  {} -> {}{style};",
                dot_quote(&steps[from].common().name),
                dot_quote(&steps[to].common().name)
            );
        }
        out.push_str("}\n");
        out
    }

    /// Mermaid flowchart text.
    pub fn to_mermaid(&self, steps: &[RawStep]) -> String {
        let mut out = String::from("flowchart TD\n");
        for (i, step) in steps.iter().enumerate() {
            let common = step.common();
            let label = format!("{} ({})", common.name, step.step_type()).replace('"', "#quot;");
            let _ = writeln!(out, "  s{i}[\"{label}\"]");
        }
        for (from, to, why) in self.edges() {
            let arrow = match why {
                Dependency::Chain => "-->",
                Dependency::Needs(_) => "-->|needs|",
            };
            let _ = writeln!(out, "  s{from} {arrow} s{to}");
        }
        out
    }
}

fn dot_quote(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Kahn's algorithm, always taking the lowest-numbered ready step, so the order is the plan's
/// order wherever dependencies allow.
fn stable_order(graph: &DiGraph<usize, Dependency>, count: usize) -> Vec<usize> {
    let mut indegree: Vec<usize> = (0..count)
        .map(|i| {
            graph
                .neighbors_directed(NodeIndex::new(i), petgraph::Direction::Incoming)
                .count()
        })
        .collect();
    let mut ready: BTreeSet<usize> = (0..count).filter(|&i| indegree[i] == 0).collect();
    let mut order = Vec::with_capacity(count);
    while let Some(next) = ready.pop_first() {
        order.push(next);
        for edge in graph.edges(NodeIndex::new(next)) {
            let to = graph[edge.target()];
            indegree[to] -= 1;
            if indegree[to] == 0 {
                ready.insert(to);
            }
        }
    }
    order
}

fn levels(graph: &DiGraph<usize, Dependency>, order: &[usize]) -> Vec<Vec<usize>> {
    let mut level_of = vec![0usize; graph.node_count()];
    let mut levels: Vec<Vec<usize>> = Vec::new();
    for &step in order {
        let level = graph
            .neighbors_directed(NodeIndex::new(step), petgraph::Direction::Incoming)
            .map(|n| level_of[graph[n]] + 1)
            .max()
            .unwrap_or(0);
        level_of[step] = level;
        if levels.len() <= level {
            levels.resize_with(level + 1, Vec::new);
        }
        levels[level].push(step);
    }
    for level in &mut levels {
        level.sort_unstable();
    }
    levels
}

/// One cycle per strongly connected component that has one, as a path starting at its
/// lowest-numbered step.
fn find_cycles(graph: &DiGraph<usize, Dependency>) -> Vec<GraphProblem> {
    let mut cycles = Vec::new();
    for component in tarjan_scc(graph) {
        let members: BTreeSet<usize> = component.iter().map(|n| graph[*n]).collect();
        let Some(&start) = members.first() else {
            continue;
        };
        let self_loop = graph.contains_edge(NodeIndex::new(start), NodeIndex::new(start));
        if members.len() == 1 && !self_loop {
            continue;
        }
        let path = if self_loop {
            vec![start, start]
        } else {
            shortest_cycle(graph, &members, start)
        };
        cycles.push(GraphProblem::Cycle { path });
    }
    cycles.sort_by_key(|c| match c {
        GraphProblem::Cycle { path } => path.first().copied().unwrap_or(0),
        GraphProblem::UnknownNeed { step, .. } => *step,
    });
    cycles
}

/// The shortest path from `start` back to itself inside one strongly connected component.
fn shortest_cycle(
    graph: &DiGraph<usize, Dependency>,
    members: &BTreeSet<usize>,
    start: usize,
) -> Vec<usize> {
    let mut parent: HashMap<usize, usize> = HashMap::new();
    let mut queue = std::collections::VecDeque::from([start]);
    let mut last = start;
    'search: while let Some(current) = queue.pop_front() {
        let mut next_steps: Vec<usize> = graph
            .neighbors(NodeIndex::new(current))
            .map(|n| graph[n])
            .filter(|n| members.contains(n))
            .collect();
        next_steps.sort_unstable();
        for next in next_steps {
            if next == start {
                last = current;
                break 'search;
            }
            if next != start && !parent.contains_key(&next) {
                parent.insert(next, current);
                queue.push_back(next);
            }
        }
    }
    let mut path = vec![last];
    while let Some(&p) = parent.get(path.last().unwrap_or(&start)) {
        path.push(p);
    }
    path.reverse();
    path.push(start);
    path
}

#[cfg(test)]
mod tests {
    use super::*;

    fn steps(spec: &[(&str, Option<&[&str]>)]) -> Vec<RawStep> {
        spec.iter()
            .map(|(name, needs)| {
                let mut value =
                    serde_json::json!({ "type": "template", "name": name, "template": "x" });
                if let Some(needs) = needs {
                    value["needs"] = serde_json::json!(needs);
                }
                serde_json::from_value(value).expect("valid step")
            })
            .collect()
    }

    #[test]
    fn steps_without_needs_chain() {
        let (graph, problems) = StepGraph::build(&steps(&[("a", None), ("b", None), ("c", None)]));
        assert!(problems.is_empty());
        assert_eq!(graph.order(), &[0, 1, 2]);
        assert_eq!(graph.levels(), &[vec![0], vec![1], vec![2]]);
        assert_eq!(graph.ancestors(2), BTreeSet::from([0, 1]));
    }

    #[test]
    fn needs_make_a_fan_out_and_join() {
        let (graph, problems) = StepGraph::build(&steps(&[
            ("a", None),
            ("b", Some(&["a"])),
            ("c", Some(&["a"])),
            ("d", Some(&["b", "c"])),
        ]));
        assert!(problems.is_empty());
        assert_eq!(graph.levels(), &[vec![0], vec![1, 2], vec![3]]);
        assert_eq!(graph.predecessors(3), vec![1, 2]);
        assert_eq!(graph.successors(0), vec![1, 2]);
    }

    #[test]
    fn steps_with_empty_needs_are_roots() {
        let (graph, _) = StepGraph::build(&steps(&[
            ("a", None),
            ("b", Some(&[])),
            ("c", Some(&["a", "b"])),
        ]));
        assert_eq!(graph.levels(), &[vec![0, 1], vec![2]]);
    }

    #[test]
    fn unknown_needs_are_reported_with_their_position() {
        let (_, problems) = StepGraph::build(&steps(&[("a", None), ("b", Some(&["a", "zz"]))]));
        assert_eq!(
            problems,
            vec![GraphProblem::UnknownNeed {
                step: 1,
                position: 1,
                name: "zz".into()
            }]
        );
    }

    #[test]
    fn cycles_are_reported_with_their_path() {
        // a needs c; b follows a; c follows b: a → b → c → a.
        let (graph, problems) =
            StepGraph::build(&steps(&[("a", Some(&["c"])), ("b", None), ("c", None)]));
        assert_eq!(
            problems,
            vec![GraphProblem::Cycle {
                path: vec![0, 1, 2, 0]
            }]
        );
        assert!(graph.order().is_empty());
        let (_, problems) = StepGraph::build(&steps(&[("a", Some(&["a"]))]));
        assert_eq!(problems, vec![GraphProblem::Cycle { path: vec![0, 0] }]);
    }

    #[test]
    fn dot_and_mermaid_list_nodes_and_edges_in_plan_order() {
        let plan = steps(&[("a", None), ("b", Some(&["a"])), ("end", None)]);
        let (graph, _) = StepGraph::build(&plan);
        assert_eq!(
            graph.to_dot("demo", &plan),
            "digraph \"demo\" {\n  rankdir=TB;\n  node [shape=box, fontname=\"Helvetica\"];\n  \
             \"a\" [label=\"a\\ntemplate\"];\n  \"b\" [label=\"b\\ntemplate\"];\n  \"end\" [label=\"end\\ntemplate\"];\n  \
             \"a\" -> \"b\" [label=\"needs\"];\n  \"b\" -> \"end\";\n}\n"
        );
        assert_eq!(
            graph.to_mermaid(&plan),
            "flowchart TD\n  s0[\"a (template)\"]\n  s1[\"b (template)\"]\n  s2[\"end (template)\"]\n  \
             s0 -->|needs| s1\n  s1 --> s2\n"
        );
    }
}
