//! The variables a template may read, for each place a template runs. The checker refuses a
//! template that reads a root its place does not list, and the executor builds each place's
//! context from the same lists, so `validate` and `run` agree on what is defined.

/// A step's templates (its prompt, `when`, fields): the run's inputs and vars, the upstream
/// steps' results, `input` (its predecessors' outputs; refused where the step has none) and the
/// run's [`GLOBALS`].
pub const STEP: &[&str] = &["inputs", "input", "steps", "vars", "row", "history"];

/// The plan's `output`: every step's result, the run's inputs, vars and [`GLOBALS`]. No `input`:
/// the output has no predecessor of its own (it reads `steps.NAME.output`).
pub const OUTPUT: &[&str] = &["inputs", "steps", "vars", "row", "history"];

/// What a route's template agent renders with, besides its call's `args` and `results`: nothing
/// of the steps around it.
pub const ROUTE_AGENT: &[&str] = &["inputs", "vars"];

/// The run-wide variables callers may set besides inputs: `row` (the row, in a batch and in a
/// test file's dataset cases) and `history` (a chat's earlier messages, empty elsewhere).
pub const GLOBALS: &[&str] = &["row", "history"];
