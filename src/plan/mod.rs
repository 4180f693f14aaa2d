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
pub mod graph;
pub mod load;
pub mod lock;
pub mod models;
pub mod policy;
pub mod raw;
pub mod schema;
pub mod steps;
pub mod suite;
pub mod tools;
pub mod yaml;

#[cfg(test)]
mod mutants;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

pub use diagnostic::{Diagnostic, PlanError, Source};
pub use graph::StepGraph;
pub use policy::{EffectivePolicy, PlanPolicy};
pub use raw::RawPlan;
pub use steps::{RawStep, StepType};

use load::{Loaded, load_bytes, load_file, load_file_edited};
use schema::DocumentKind;

/// The canonical form of a plan's path, for telling whether two names are the same file.
pub fn canonical(path: &Path) -> PathBuf {
    std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf())
}

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
    /// Per step, what the checks found out about it that building it needs.
    pub facts: Vec<steps::StepFacts>,
    /// The policy from outside it that it was checked under (`--policy`, or its parent's).
    pub outer_policy: Option<PolicyFile>,
}

impl Plan {
    /// The policy a `plan:` agent's plan is loaded under: this plan's policy in force.
    pub fn handed_down_policy(&self) -> PolicyFile {
        PolicyFile::inherited(&self.policy, &self.path, self.outer_policy.as_ref())
    }
}

/// A policy from outside the plan: a file given with `--policy`, or the policy in force in a
/// plan whose `plan:` agent runs this one.
#[derive(Debug, Clone)]
pub struct PolicyFile {
    pub policy: PlanPolicy,
    /// The policy file, or the plan that hands its policy down.
    pub path: PathBuf,
    /// Whether `path` is a plan handing its policy down to a sub-plan.
    pub inherited: bool,
    /// For a policy handed down, who set each of its limits (by field): the handing plan's own
    /// policy, or a policy file above it. A limit not listed was set by `path`.
    pub set_by: BTreeMap<&'static str, String>,
}

impl PolicyFile {
    /// The policy in force in the plan at `plan_path`, as its sub-plans inherit it; `outer` is
    /// the policy from outside that plan it was checked under, which set the limits of
    /// [`PolicyOrigin::File`](policy::PolicyOrigin::File) origin.
    pub fn inherited(
        policy: &EffectivePolicy,
        plan_path: &Path,
        outer: Option<&PolicyFile>,
    ) -> Self {
        let own = format!("policy of {}", plan_path.display());
        let set_by = policy
            .origins()
            .into_iter()
            .map(|(field, origin)| {
                let name = match (origin, outer) {
                    (policy::PolicyOrigin::File, Some(outer)) => outer.describe_limit(field),
                    _ => own.clone(),
                };
                (field, name)
            })
            .collect();
        PolicyFile {
            policy: policy.handed_down(),
            path: plan_path.to_path_buf(),
            inherited: true,
            set_by,
        }
    }

    /// How diagnostics name the policy that set the limit `field`.
    pub fn describe_limit(&self, field: &str) -> String {
        self.set_by
            .get(field)
            .cloned()
            .unwrap_or_else(|| self.describe())
    }

    /// How diagnostics name it: "policy file ci.policy.yaml", "policy of plans/main.yaml".
    pub fn describe(&self) -> String {
        let kind = if self.inherited {
            "policy of"
        } else {
            "policy file"
        };
        format!("{kind} {}", self.path.display())
    }
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
        inherited: false,
        set_by: BTreeMap::new(),
    })
}

/// Loads a plan and runs every check on it, under its own policy tightened by `policy_file`.
pub fn load_plan(path: &Path, policy_file: Option<&PolicyFile>) -> Result<Plan, Vec<Diagnostic>> {
    load_within(path, policy_file, &[])
}

/// [`load_plan`] for a plan run by a `plan:` agent of the plans in `enclosing` (canonical
/// paths, outermost first), which it must not lead back to.
pub fn load_within(
    path: &Path,
    policy_file: Option<&PolicyFile>,
    enclosing: &[PathBuf],
) -> Result<Plan, Vec<Diagnostic>> {
    let loaded: Loaded<RawPlan> = load_file(path, DocumentKind::Plan)?;
    check_loaded(loaded, path, policy_file, enclosing)
}

/// [`load_plan`] with fields set otherwise (a test file's variant: `STEP.FIELD` or a path from the
/// plan's top, see [`suite::overrides`]); a key that names nothing is left to the caller, which
/// checks the keys first.
pub fn load_plan_with(
    path: &Path,
    set: &[(String, serde_json::Value)],
) -> Result<Plan, Vec<Diagnostic>> {
    let loaded: Loaded<RawPlan> = load_file_edited(path, DocumentKind::Plan, |plan| {
        for (key, value) in set {
            // The keys were checked against this plan before; one that fails changes nothing.
            let _ = suite::overrides::apply(plan, key, value);
        }
    })?;
    check_loaded(loaded, path, None, &[])
}

/// Loads and checks a plan from `text`, as if it were the file at `path` (whose directory its
/// relative paths are resolved from): a plan pagantic writes itself, such as a test's judge.
pub fn load_plan_text(path: &Path, text: String) -> Result<Plan, Vec<Diagnostic>> {
    let loaded: Loaded<RawPlan> = load_bytes(
        &path.display().to_string(),
        text.into_bytes(),
        DocumentKind::Plan,
    )?;
    check_loaded(loaded, path, None, &[])
}

/// Runs the semantic checks on a plan loaded from `path`.
fn check_loaded(
    loaded: Loaded<RawPlan>,
    path: &Path,
    policy_file: Option<&PolicyFile>,
    enclosing: &[PathBuf],
) -> Result<Plan, Vec<Diagnostic>> {
    let policy =
        EffectivePolicy::combine(loaded.value.policy.as_ref(), policy_file.map(|p| &p.policy));
    let dir = path.parent().unwrap_or(Path::new("."));
    let dir = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    let nesting = check::Nesting { path, enclosing };
    let analysis = check::analyse(&loaded, dir, policy, policy_file, &nesting);
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
        facts: analysis.facts,
        outer_policy: policy_file.cloned(),
    })
}
