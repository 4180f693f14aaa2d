//! Plans: the YAML files users write, from text to a checked, typed [`Plan`] with its step graph.
//!
//! The pipeline, each stage collecting all of its diagnostics before the next runs:
//! read file → spanned YAML tree (`yaml`) → JSON Schema check against the schema generated from
//! the Rust types (`schema`), errors pointing at YAML nodes → typed [`RawPlan`] (`model`, `steps`)
//! → semantic checks (`check`: references, templates, prompt files, embedded schemas, policy)
//! → [`Plan`] with its [`StepGraph`] (`graph`). Nothing here loads a model or touches the network.

pub mod build;
pub mod check;
pub mod diagnostic;
pub mod duration;
pub mod graph;
pub mod inputs;
pub mod load;
pub mod model;
pub mod policy;
pub mod schema;
pub mod steps;
pub mod yaml;

use std::path::{Path, PathBuf};

pub use diagnostic::{Diagnostic, PlanError, Source};
pub use graph::StepGraph;
pub use model::RawPlan;
pub use policy::{EffectivePolicy, PlanPolicy};
pub use steps::{RawStep, StepType};

use load::{Loaded, load_file};
use schema::DocumentKind;

/// A plan that passed every check: typed, with its graph and the policy in force.
#[derive(Debug, Clone)]
pub struct Plan {
    pub raw: RawPlan,
    pub path: PathBuf,
    pub source: Source,
    pub graph: StepGraph,
    pub policy: EffectivePolicy,
    /// Per step, the steps its templates read (None: all upstream steps).
    pub reads: Vec<Option<std::collections::BTreeSet<usize>>>,
}

/// A policy file given with `--policy`.
#[derive(Debug, Clone)]
pub struct PolicyFile {
    pub policy: PlanPolicy,
    pub path: PathBuf,
}

/// The directory prompt files are read from: `prompts/` next to the plan, else `../prompts/`.
pub fn prompts_dir(plan_dir: &Path) -> Option<PathBuf> {
    [
        plan_dir.join("prompts"),
        plan_dir.join("..").join("prompts"),
    ]
    .into_iter()
    .find(|d| d.is_dir())
}

/// Loads and checks a policy file.
pub fn load_policy(path: &Path) -> Result<PolicyFile, Vec<Diagnostic>> {
    let loaded: Loaded<PlanPolicy> = load_file(path, DocumentKind::Policy)?;
    Ok(PolicyFile {
        policy: loaded.value,
        path: path.to_path_buf(),
    })
}

/// Loads a plan and runs every check on it, under its own policy tightened by `policy_file`.
pub fn load_plan(path: &Path, policy_file: Option<&PolicyFile>) -> Result<Plan, Vec<Diagnostic>> {
    let loaded: Loaded<RawPlan> = load_file(path, DocumentKind::Plan)?;
    let policy =
        EffectivePolicy::combine(loaded.value.policy.as_ref(), policy_file.map(|p| &p.policy));
    let dir = path.parent().unwrap_or(Path::new("."));
    let dir = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    let policy_name = policy_file.map(|p| p.path.display().to_string());
    let analysis = check::analyse(&loaded, dir, policy, policy_name.as_deref());
    if !analysis.diagnostics.is_empty() {
        return Err(analysis.diagnostics);
    }
    Ok(Plan {
        raw: loaded.value,
        path: path.to_path_buf(),
        source: loaded.source,
        graph: analysis.graph,
        policy: analysis.policy,
        reads: analysis.reads,
    })
}
