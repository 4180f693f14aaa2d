//! Checks against the policy in force: step types, tools, timeouts, token and cost budgets, tool
//! iterations, step count and linearity, each naming the policy that set the limit.

use super::*;
use crate::core::{Price, TokenUsage};

impl Checker<'_> {
    pub(super) fn origin_name(&self, origin: PolicyOrigin) -> String {
        match (origin, self.policy_name) {
            (PolicyOrigin::File, Some(name)) => name.to_string(),
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
            let hint = format!(
                "allowed tools: {}",
                if allowed.is_empty() {
                    "none".to_string()
                } else {
                    allowed.join(", ")
                }
            );
            let origin = self.origin_name(*origin);
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
            let hint = format!(
                "allowed step types: {}",
                if allowed.is_empty() {
                    "none".to_string()
                } else {
                    allowed
                        .iter()
                        .map(|t| t.name())
                        .collect::<Vec<_>>()
                        .join(", ")
                }
            );
            let origin = self.origin_name(*origin);
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
            let origin = self.origin_name(*origin);
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
            let origin = self.origin_name(*origin);
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
            });
            if cost.amount() > *max {
                let span = self.span(&step_path(index, at));
                let origin = self.origin_name(*origin);
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
            let origin = self.origin_name(*origin);
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
            let origin = self.origin_name(*origin);
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
            let origin = self.origin_name(*origin);
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
