//! Plan policies: the limits a plan runs under.
//!
//! A policy can sit inline in a plan (`policy:`) or in its own file passed with `--policy`, so a
//! team can hold every plan in CI to the same rules. A policy file can only tighten: the policy in
//! force is, field by field, the stricter of the two. Each limit remembers which file imposed it so
//! a violation can say so.

use indexmap::IndexSet;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::steps::StepType;
use super::tools::{Capability, ToolKind};
use crate::core::duration::DurationSpec;
use crate::tool::Enforcement;

/// Limits a plan must respect. Every field is optional; an absent field imposes nothing.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PlanPolicy {
    /// Most steps the plan may declare.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_steps: Option<u32>,
    /// Step types the plan may use; any other type is rejected before anything runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed_step_types: Option<Vec<StepType>>,
    /// When true, every step must have at most one predecessor and one successor (a chain).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub require_linear: Option<bool>,
    /// Longest a single step may run (e.g. `60s`); also the default step timeout.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_per_step: Option<DurationSpec>,
    /// Tools (by their name in `tools:`) that steps and agents may call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed_tools: Option<Vec<String>>,
    /// Capabilities the plan's tools may require (`filesystem`, `network`, `process`, `environment`): a tool that requires any other — by its `requires`, or by its kind (a command tool is a `process`) — is refused before anything runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed_capabilities: Option<Vec<Capability>>,
    /// When true, every tool that starts a process (a command, a stdio MCP server) must be fully sandboxed on this machine — its network and filesystem restricted unless it `requires` them, and every process it starts contained — or the run is refused before anything runs (`pagantic tools PLAN` shows what this machine enforces). Never runs a tool uncontained.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub require_sandbox: Option<bool>,
    /// Upper bound for any agent step's `max_tool_iterations`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_tool_iterations: Option<u32>,
    /// Token budget for one run of the plan; no single step may ask for more.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_tokens: Option<u64>,
    /// Most one run's model calls may cost, in the currency of the models' `price`s. `validate`
    /// rejects a step whose `max_tokens` alone could cost more (completion tokens at its model's
    /// price); at run time the run fails with ORCHESTRATION_COST_EXCEEDED at the call that takes
    /// it over. Unpriced models cost nothing against it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0.0))]
    pub max_cost: Option<f64>,
}

/// Where a policy came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PolicyOrigin {
    /// The plan's own `policy:` block.
    Plan,
    /// The file given with `--policy`.
    File,
}

/// One limit in force, and which policy set it.
#[derive(Debug, Clone, PartialEq)]
pub struct Limit<T> {
    pub value: T,
    pub origin: PolicyOrigin,
}

/// The policy in force: for every field, the stricter of the plan's and the policy file's.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EffectivePolicy {
    pub max_steps: Option<Limit<u32>>,
    pub allowed_step_types: Option<Limit<Vec<StepType>>>,
    pub require_linear: Option<Limit<bool>>,
    pub timeout_per_step: Option<Limit<DurationSpec>>,
    pub allowed_tools: Option<Limit<Vec<String>>>,
    pub allowed_capabilities: Option<Limit<Vec<Capability>>>,
    pub require_sandbox: Option<Limit<bool>>,
    pub max_tool_iterations: Option<Limit<u32>>,
    pub max_tokens: Option<Limit<u64>>,
    pub max_cost: Option<Limit<f64>>,
}

impl EffectivePolicy {
    /// Combines the plan's policy with an external one; the external policy can only tighten.
    pub fn combine(plan: Option<&PlanPolicy>, file: Option<&PlanPolicy>) -> Self {
        let empty = PlanPolicy::default();
        let plan = plan.unwrap_or(&empty);
        let file = file.unwrap_or(&empty);
        EffectivePolicy {
            max_steps: stricter(plan.max_steps, file.max_steps, |a, b| b < a),
            allowed_step_types: intersect(&plan.allowed_step_types, &file.allowed_step_types),
            require_linear: stricter(plan.require_linear, file.require_linear, |a, b| b && !a),
            timeout_per_step: stricter(plan.timeout_per_step, file.timeout_per_step, |a, b| b < a),
            allowed_tools: intersect(&plan.allowed_tools, &file.allowed_tools),
            allowed_capabilities: intersect(&plan.allowed_capabilities, &file.allowed_capabilities),
            require_sandbox: stricter(plan.require_sandbox, file.require_sandbox, |a, b| b && !a),
            max_tool_iterations: stricter(
                plan.max_tool_iterations,
                file.max_tool_iterations,
                |a, b| b < a,
            ),
            max_tokens: stricter(plan.max_tokens, file.max_tokens, |a, b| b < a),
            max_cost: stricter(plan.max_cost, file.max_cost, |a, b| b < a),
        }
    }
}

impl EffectivePolicy {
    /// The capabilities `tool` requires (what it declares and what its kind implies) that the
    /// policy's `allowed_capabilities` does not grant; none without that limit.
    pub fn missing_capabilities(&self, tool: &dyn ToolKind) -> Vec<Capability> {
        let Some(Limit { value: allowed, .. }) = &self.allowed_capabilities else {
            return Vec::new();
        };
        tool.access()
            .required(&tool.implied())
            .into_iter()
            .filter(|needed| !allowed.contains(needed))
            .collect()
    }

    /// Why the policy refuses tool `name` (of kind `tool`), when it does: not among its
    /// `allowed_tools`, or requiring a capability its `allowed_capabilities` does not grant. The
    /// one verdict `validate`, `run` and `pagantic tools` give.
    pub fn tool_refusal(&self, name: &str, tool: &dyn ToolKind) -> Option<String> {
        let whose = |origin: PolicyOrigin| match origin {
            PolicyOrigin::Plan => "the plan's policy",
            PolicyOrigin::File => "the --policy file",
        };
        if let Some(Limit { value, origin }) = &self.allowed_tools
            && !value.iter().any(|allowed| allowed == name)
        {
            return Some(format!("not in the `allowed_tools` of {}", whose(*origin)));
        }
        let missing = self.missing_capabilities(tool);
        let Limit { origin, .. } = self.allowed_capabilities.as_ref()?;
        (!missing.is_empty()).then(|| {
            let names: Vec<&str> = missing.iter().map(|c| c.name()).collect();
            format!(
                "requires {}, which the `allowed_capabilities` of {} does not grant",
                names.join(", "),
                whose(*origin)
            )
        })
    }

    /// The limits in force as a policy of their own: what a sub-plan (a `plan:` agent) is held
    /// to on top of its own policy, so no limit can be escaped by moving steps into another file.
    pub fn handed_down(&self) -> PlanPolicy {
        fn value<T: Clone>(limit: &Option<Limit<T>>) -> Option<T> {
            limit.as_ref().map(|l| l.value.clone())
        }
        PlanPolicy {
            max_steps: value(&self.max_steps),
            allowed_step_types: value(&self.allowed_step_types),
            require_linear: value(&self.require_linear),
            timeout_per_step: value(&self.timeout_per_step),
            allowed_tools: value(&self.allowed_tools),
            allowed_capabilities: value(&self.allowed_capabilities),
            require_sandbox: value(&self.require_sandbox),
            max_tool_iterations: value(&self.max_tool_iterations),
            max_tokens: value(&self.max_tokens),
            max_cost: value(&self.max_cost),
        }
    }

    /// Why a tool whose processes have the sandbox `enforcement` here is refused: the policy
    /// requires sandboxes (`require_sandbox: true`) and a limit the tool should be held to cannot
    /// be enforced on this machine. None for a tool that starts no process.
    pub fn sandbox_refusal(&self, enforcement: Option<&Enforcement>) -> Option<String> {
        let required = self
            .require_sandbox
            .as_ref()
            .is_some_and(|limit| limit.value);
        let gaps = enforcement?.gaps();
        (required && !gaps.is_empty()).then(|| {
            format!(
                "`require_sandbox: true`, and this machine cannot enforce {}",
                gaps.join("; ")
            )
        })
    }

    /// Each limit in force, by its field's name, with the policy that set it.
    pub fn origins(&self) -> Vec<(&'static str, PolicyOrigin)> {
        fn origin<T>(limit: &Option<Limit<T>>) -> Option<PolicyOrigin> {
            limit.as_ref().map(|l| l.origin)
        }
        [
            ("max_steps", origin(&self.max_steps)),
            ("allowed_step_types", origin(&self.allowed_step_types)),
            ("require_linear", origin(&self.require_linear)),
            ("timeout_per_step", origin(&self.timeout_per_step)),
            ("allowed_tools", origin(&self.allowed_tools)),
            ("allowed_capabilities", origin(&self.allowed_capabilities)),
            ("require_sandbox", origin(&self.require_sandbox)),
            ("max_tool_iterations", origin(&self.max_tool_iterations)),
            ("max_tokens", origin(&self.max_tokens)),
            ("max_cost", origin(&self.max_cost)),
        ]
        .into_iter()
        .filter_map(|(field, origin)| origin.map(|o| (field, o)))
        .collect()
    }
}

/// Picks the file's value when `tighter(plan, file)` says it is stricter, else the plan's.
fn stricter<T: Copy>(
    plan: Option<T>,
    file: Option<T>,
    tighter: impl Fn(T, T) -> bool,
) -> Option<Limit<T>> {
    match (plan, file) {
        (None, None) => None,
        (Some(value), None) => Some(Limit {
            value,
            origin: PolicyOrigin::Plan,
        }),
        (None, Some(value)) => Some(Limit {
            value,
            origin: PolicyOrigin::File,
        }),
        (Some(p), Some(f)) if tighter(p, f) => Some(Limit {
            value: f,
            origin: PolicyOrigin::File,
        }),
        (Some(p), Some(_)) => Some(Limit {
            value: p,
            origin: PolicyOrigin::Plan,
        }),
    }
}

/// An allow-list in force is the intersection of both; the file is named when it removed anything.
fn intersect<T: Clone + PartialEq + Eq + std::hash::Hash>(
    plan: &Option<Vec<T>>,
    file: &Option<Vec<T>>,
) -> Option<Limit<Vec<T>>> {
    match (plan, file) {
        (None, None) => None,
        (Some(p), None) => Some(Limit {
            value: p.clone(),
            origin: PolicyOrigin::Plan,
        }),
        (None, Some(f)) => Some(Limit {
            value: f.clone(),
            origin: PolicyOrigin::File,
        }),
        (Some(p), Some(f)) => {
            let allowed: IndexSet<&T> = f.iter().collect();
            let value: Vec<T> = p.iter().filter(|x| allowed.contains(x)).cloned().collect();
            let origin = if value.len() < p.len() {
                PolicyOrigin::File
            } else {
                PolicyOrigin::Plan
            };
            Some(Limit { value, origin })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(
        max_steps: Option<u32>,
        types: Option<Vec<StepType>>,
        linear: Option<bool>,
    ) -> PlanPolicy {
        PlanPolicy {
            max_steps,
            allowed_step_types: types,
            require_linear: linear,
            ..PlanPolicy::default()
        }
    }

    #[test]
    fn a_policy_file_tightens_but_never_loosens() {
        let plan = policy(
            Some(12),
            Some(vec![StepType::Infer, StepType::Retrieve]),
            Some(true),
        );
        let file = policy(
            Some(50),
            Some(vec![StepType::Infer, StepType::Tool]),
            Some(false),
        );
        let effective = EffectivePolicy::combine(Some(&plan), Some(&file));
        assert_eq!(
            effective.max_steps,
            Some(Limit {
                value: 12,
                origin: PolicyOrigin::Plan
            })
        );
        assert_eq!(
            effective.allowed_step_types,
            Some(Limit {
                value: vec![StepType::Infer],
                origin: PolicyOrigin::File
            })
        );
        assert_eq!(
            effective.require_linear,
            Some(Limit {
                value: true,
                origin: PolicyOrigin::Plan
            })
        );
    }

    #[test]
    fn require_sandbox_refuses_a_tool_only_where_a_limit_is_not_enforced() {
        use crate::tool::sandbox::{Grants, Support};
        let required = |plan: Option<bool>, file: Option<bool>| {
            let [plan, file] = [plan, file].map(|value| PlanPolicy {
                require_sandbox: value,
                ..PlanPolicy::default()
            });
            EffectivePolicy::combine(Some(&plan), Some(&file))
        };
        let contained = Enforcement::decide(Grants::default(), &Support::everything());
        let uncontained = Enforcement::decide(Grants::default(), &Support::none("old kernel"));
        let strict = required(Some(false), Some(true));
        assert_eq!(strict.sandbox_refusal(Some(&contained)), None);
        assert_eq!(
            strict.sandbox_refusal(None),
            None,
            "a tool that starts no process"
        );
        let refusal = strict.sandbox_refusal(Some(&uncontained)).expect("refused");
        assert!(refusal.contains("network: old kernel"), "{refusal}");
        // A file cannot loosen a plan that requires sandboxes; without either, nothing is refused.
        assert!(
            required(Some(true), Some(false))
                .sandbox_refusal(Some(&uncontained))
                .is_some()
        );
        assert_eq!(
            required(None, None).sandbox_refusal(Some(&uncontained)),
            None
        );
    }

    #[test]
    fn a_policy_file_alone_applies_in_full() {
        let file = policy(Some(3), None, Some(true));
        let effective = EffectivePolicy::combine(None, Some(&file));
        assert_eq!(
            effective.max_steps,
            Some(Limit {
                value: 3,
                origin: PolicyOrigin::File
            })
        );
        assert_eq!(
            effective.require_linear,
            Some(Limit {
                value: true,
                origin: PolicyOrigin::File
            })
        );
        assert_eq!(effective.allowed_step_types, None);
    }

    #[test]
    fn the_policy_in_force_is_handed_down_whole() {
        let plan = PlanPolicy {
            allowed_tools: Some(vec!["calc".into(), "search".into()]),
            max_tokens: Some(500),
            max_cost: Some(0.5),
            ..policy(Some(20), Some(vec![StepType::Infer]), None)
        };
        let file = PlanPolicy {
            allowed_tools: Some(vec!["calc".into()]),
            max_cost: Some(0.05),
            ..policy(Some(5), None, Some(true))
        };
        let handed = EffectivePolicy::combine(Some(&plan), Some(&file)).handed_down();
        assert_eq!(
            handed,
            PlanPolicy {
                allowed_tools: Some(vec!["calc".into()]),
                max_tokens: Some(500),
                max_cost: Some(0.05),
                ..policy(Some(5), Some(vec![StepType::Infer]), Some(true))
            }
        );
        // A sub-plan's own policy can tighten what it is handed, never loosen it.
        let sub = policy(Some(50), None, Some(false));
        let in_sub = EffectivePolicy::combine(Some(&sub), Some(&handed));
        assert_eq!(in_sub.max_steps.map(|l| l.value), Some(5));
        assert_eq!(in_sub.require_linear.map(|l| l.value), Some(true));
    }

    #[test]
    fn the_stricter_limit_wins_whichever_side_it_is_on() {
        let plan = policy(Some(20), None, None);
        let file = policy(Some(5), None, None);
        let effective = EffectivePolicy::combine(Some(&plan), Some(&file));
        assert_eq!(
            effective.max_steps,
            Some(Limit {
                value: 5,
                origin: PolicyOrigin::File
            })
        );
    }
}
