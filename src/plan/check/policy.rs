//! Checks against the policy in force: step types, tools, timeouts, token and cost budgets, tool
//! iterations, step count and linearity, each naming the policy that set the limit.

use super::*;
use crate::core::{Price, TokenUsage};
use crate::plan::tools::{Capability, ToolKind};

impl Checker<'_> {
    /// Who set the limit `field`: the plan's own policy, or the policy file (for a sub-plan,
    /// the policy file or plan above it that set that limit).
    pub(super) fn origin_name(&self, origin: PolicyOrigin, field: &str) -> String {
        match (origin, self.policy_file) {
            (PolicyOrigin::File, Some(file)) => file.describe_limit(field),
            _ => "plan's policy".to_string(),
        }
    }

    pub(super) fn tool_policy(&mut self, name: &str, at: &[String]) {
        if let Some(Limit {
            value: allowed,
            origin,
        }) = &self.policy.allowed_tools
            && !allowed.iter().any(|t| t == name)
            && self.plan.tools.contains_key(name)
            && at.first().is_some_and(|s| s == "steps")
        {
            let span = self.span(at);
            let hint = allowed_hint("tools", allowed.iter().map(String::as_str));
            let origin = self.origin_name(*origin, "allowed_tools");
            self.emit(
                PlanError::ToolNotAllowed {
                    name: name.into(),
                    origin,
                },
                span,
                "not allowed",
            )
            .hint = Some(hint);
        }
    }

    /// A tool whose requirements (declared, and implied by its kind) the policy does not all
    /// grant, located at its `requires` (or its `kind`, when it declares none).
    pub(super) fn capability_policy(&mut self, name: &str, tool: &dyn ToolKind) {
        let Some(Limit {
            value: allowed,
            origin,
        }) = &self.policy.allowed_capabilities
        else {
            return;
        };
        let missing: Vec<&str> = self
            .policy
            .missing_capabilities(tool)
            .into_iter()
            .map(Capability::name)
            .collect();
        if missing.is_empty() {
            return;
        }
        let field = if tool.access().requires.is_empty() {
            "kind"
        } else {
            "requires"
        };
        let span = self.span(&path(&["tools", name, field]));
        let hint = allowed_hint("capabilities", allowed.iter().map(|c| c.name()));
        let origin = self.origin_name(*origin, "allowed_capabilities");
        self.emit(
            PlanError::CapabilityNotGranted {
                name: name.into(),
                missing: missing.join(", "),
                origin,
            },
            span,
            "not granted",
        )
        .hint = Some(hint);
    }

    pub(super) fn step_policy(
        &mut self,
        index: usize,
        max_tokens: &Option<(FieldPath, u64)>,
        iterations: &Option<(FieldPath, u32)>,
        priced_model: Option<(&str, Price)>,
    ) {
        let step = &self.plan.steps[index];
        if let Some(Limit {
            value: allowed,
            origin,
        }) = &self.policy.allowed_step_types
            && !allowed.contains(&step.step_type())
        {
            let span = self.span(&step_path(index, &path(&["type"])));
            let hint = allowed_hint("step types", allowed.iter().map(|t| t.name()));
            let origin = self.origin_name(*origin, "allowed_step_types");
            self.emit(
                PlanError::StepTypeNotAllowed {
                    step_type: step.step_type().name().into(),
                    origin,
                },
                span,
                "not allowed",
            )
            .hint = Some(hint);
        }
        if let (Some(Limit { value: max, origin }), Some(timeout)) =
            (&self.policy.timeout_per_step, step.common().timeout)
            && timeout > *max
        {
            let span = self.span(&step_path(index, &path(&["timeout"])));
            let origin = self.origin_name(*origin, "timeout_per_step");
            self.emit(
                PlanError::TimeoutExceeds {
                    found: timeout.to_string(),
                    max: max.to_string(),
                    origin,
                },
                span,
                "too long",
            );
        }
        if let (Some(Limit { value: max, origin }), Some((at, tokens))) =
            (&self.policy.max_tokens, max_tokens)
            && tokens > max
        {
            let span = self.span(&step_path(index, at));
            let origin = self.origin_name(*origin, "max_tokens");
            self.emit(
                PlanError::MaxTokensExceed {
                    found: *tokens,
                    max: *max,
                    origin,
                },
                span,
                "over budget",
            );
        }
        // Only completion tokens are known before the run (the prompt's size is not), so a
        // step is refused when they alone could cost more than the run may.
        if let (Some(Limit { value: max, origin }), Some((at, tokens)), Some((model, price))) =
            (&self.policy.max_cost, max_tokens, priced_model)
        {
            let cost = price.cost(TokenUsage {
                prompt_tokens: 0,
                completion_tokens: *tokens,
                reasoning_tokens: None,
            });
            if cost.amount() > *max {
                let span = self.span(&step_path(index, at));
                let origin = self.origin_name(*origin, "max_cost");
                self.emit(
                    PlanError::MaxCostExceed {
                        tokens: *tokens,
                        cost: cost.to_string(),
                        model: model.to_string(),
                        max: *max,
                        origin,
                    },
                    span,
                    "may cost too much",
                );
            }
        }
        if let (Some(Limit { value: max, origin }), Some((at, found))) =
            (&self.policy.max_tool_iterations, iterations)
            && found > max
        {
            let span = self.span(&step_path(index, at));
            let origin = self.origin_name(*origin, "max_tool_iterations");
            self.emit(
                PlanError::ToolIterationsExceed {
                    found: *found,
                    max: *max,
                    origin,
                },
                span,
                "too many",
            );
        }
    }

    pub(super) fn plan_policy(&mut self) {
        let count = self.plan.steps.len();
        if let Some(Limit { value: max, origin }) = &self.policy.max_steps
            && count > *max as usize
        {
            let span = self.span(&step_path(*max as usize, &path(&["name"])));
            let origin = self.origin_name(*origin, "max_steps");
            self.emit(
                PlanError::TooManySteps {
                    count,
                    max: *max,
                    origin,
                },
                span,
                "first step over the limit",
            );
        }
        if let Some(Limit {
            value: true,
            origin,
        }) = &self.policy.require_linear
        {
            let origin = self.origin_name(*origin, "require_linear");
            for index in 0..count {
                let predecessors = self.graph.predecessors(index);
                let successors = self.graph.successors(index);
                let reason = if predecessors.len() > 1 {
                    Some(format!(
                        "step `{}` joins {} steps",
                        self.step_name(index),
                        predecessors.len()
                    ))
                } else if successors.len() > 1 {
                    Some(format!(
                        "{} steps depend on `{}`",
                        successors.len(),
                        self.step_name(index)
                    ))
                } else if index > 0 && predecessors.is_empty() {
                    Some(format!(
                        "step `{}` starts a second branch",
                        self.step_name(index)
                    ))
                } else {
                    None
                };
                if let Some(reason) = reason {
                    let span = self.span(&step_path(index, &path(&["name"])));
                    self.emit(
                        PlanError::NotLinear {
                            reason,
                            origin: origin.clone(),
                        },
                        span,
                        "here",
                    );
                }
            }
        }
    }
}

/// The hint under an allow-list violation: `allowed WHAT: a, b`, or `none` for an empty list.
fn allowed_hint<'a>(what: &str, names: impl Iterator<Item = &'a str>) -> String {
    let names: Vec<&str> = names.collect();
    let listed = if names.is_empty() {
        "none".to_string()
    } else {
        names.join(", ")
    };
    format!("allowed {what}: {listed}")
}
