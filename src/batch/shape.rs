//! What a batch runs, chosen from the plan and the options: the plan once per row (a map), once
//! per group of rows (`--group-by`: a reduce), or once per row and then its `reduce:` plan once
//! per group of the rows' lines (map then reduce). With the shape goes what each output records
//! of the plan that wrote it (so `--resume` refuses another plan's output): the plan's SHA-256,
//! with the grouping folded in for a reduce.

use std::sync::Arc;

use super::group::GroupOptions;
use super::group::key::GroupKey;
use super::map::{self, RowPreview};
use super::{BatchOptions, Summary, clock};
use crate::core::Failure;
use crate::orchestrate::{GroupBy, Pipeline, Session};
use crate::plan::Plan;
use crate::plan::lock::plan_sha256;
use crate::plan::models::ModelSpec;

/// A batch ready to run: its pipeline, options and shape.
pub struct Batch {
    pub(super) pipeline: Arc<Pipeline>,
    pub(super) options: BatchOptions,
    /// The SHA-256 of the plan and what its lockfile pins.
    pub(super) plan_sha256: String,
    pub(super) shape: Shape,
}

/// What a batch runs.
pub(super) enum Shape {
    /// The plan once per row.
    Map,
    /// The plan once per group of rows.
    Reduce(GroupOptions),
    /// The plan once per row, then `reduce` once per group of the rows' lines.
    MapThenReduce {
        reduce: Arc<Pipeline>,
        grouping: GroupOptions,
    },
}

impl Batch {
    /// The batch of `plan` (built as `pipeline`) over `options`' input: a reduce when
    /// `group_by` is given, else a map, followed by the plan's `reduce:` if it has one. Refused
    /// when a group key is not one.
    pub fn new(
        session: &Session,
        plan: &Plan,
        pipeline: Arc<Pipeline>,
        options: BatchOptions,
        group_by: Option<&GroupBy>,
    ) -> Result<Batch, Failure> {
        let resources = session.resources();
        let plan_sha256 = plan_sha256(plan, resources);
        let shape = match (group_by, &pipeline.reduce) {
            (Some(group_by), _) => Shape::Reduce(grouping(group_by, &plan_sha256, &options)?),
            (None, Some(reduce)) => Shape::MapThenReduce {
                reduce: Arc::clone(&reduce.pipeline),
                grouping: grouping(&reduce.group_by, &(reduce.plan_sha256)(resources), &options)?,
            },
            (None, None) => Shape::Map,
        };
        Ok(Batch {
            pipeline,
            options,
            plan_sha256,
            shape,
        })
    }

    /// Whether the batch reads its rows from stdin (`-`), which it can read only once.
    pub fn reads_stdin(&self) -> bool {
        self.options.input == "-"
    }

    /// What the model would be sent for the first `rows` rows of a batch that runs the plan per
    /// row (none for a reduce, whose runs' inputs are known only once the rows are grouped).
    pub async fn preview(
        &self,
        session: &Session,
        rows: usize,
    ) -> Result<Vec<RowPreview>, Failure> {
        match self.shape {
            Shape::Reduce(_) => Ok(Vec::new()),
            Shape::Map | Shape::MapThenReduce { .. } => {
                map::preview(session, &self.pipeline, &self.options, rows).await
            }
        }
    }
}

/// A reduce's options: the batch's, grouped by `group_by` (refused when its key is not one),
/// the output recording `plan_sha256` with the grouping folded in.
fn grouping(
    group_by: &GroupBy,
    plan_sha256: &str,
    options: &BatchOptions,
) -> Result<GroupOptions, Failure> {
    Ok(GroupOptions {
        key: GroupKey::parse(&group_by.key)?,
        skip_missing_key: group_by.skip_missing_key,
        fold: group_by.fold,
        batch: options.clone(),
        plan_sha256: reduce_sha256(plan_sha256, group_by),
    })
}

/// The plan's SHA-256 with the grouping folded in, so a reduce's output (and its partial
/// results) is resumed only by the same key, fold and choice of rows without the key.
fn reduce_sha256(plan_sha256: &str, group_by: &GroupBy) -> String {
    use sha2::{Digest, Sha256};
    let GroupBy {
        key,
        skip_missing_key,
        fold,
    } = group_by;
    let mut text = format!("{plan_sha256}\ngroup-by {key}\nfold {fold:?}");
    if *skip_missing_key {
        text.push_str("\nskip-missing-key");
    }
    crate::model_store::hex(&Sha256::digest(text.as_bytes()))
}

/// For a dry run: how long the real run's model calls take at least at each rate-limited
/// model's `rate_limit`, were they all its calls (they are when the plan has one model).
pub fn paced_estimates(plan: &Plan, summary: &Summary) -> Vec<String> {
    let (calls, tokens) = (summary.model_calls, summary.usage.total());
    plan.raw
        .models
        .iter()
        .filter_map(|(name, spec)| match spec {
            ModelSpec::Openai(model) => model
                .paced_at_least(calls, tokens)
                .map(|least| (name, least)),
            _ => None,
        })
        .map(|(name, least)| {
            format!(
                "dry run: at model `{name}`'s rate_limit, {calls} model calls of about {tokens} \
                 tokens take at least {} (the stand-in's token count is rough)",
                clock(least)
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn group_by(key: &str, fold: Option<u64>, skip_missing_key: bool) -> GroupBy {
        GroupBy {
            key: key.to_owned(),
            skip_missing_key,
            fold,
        }
    }

    /// A reduce's output is resumed only by the same plan, key, fold and choice of rows without
    /// the key; the text hashed stays as it was, so outputs written by earlier builds resume.
    #[test]
    fn the_grouping_is_folded_into_the_plan_s_sha256() {
        let plan = "a".repeat(64);
        let once = reduce_sha256(&plan, &group_by("product", None, false));
        assert_eq!(
            once,
            "ab7bc7097bb3259f81f6ec8fa63222682b3aa4eade1e30b36cddd270e3a18cdc"
        );
        assert_eq!(
            reduce_sha256(&plan, &group_by("product", Some(50), false)),
            "8de451c5e31effcf952f9aed5b08b2a7f3d2e71d41c1ef97b90269747b2cf9ef"
        );
        for other in [
            reduce_sha256(&"b".repeat(64), &group_by("product", None, false)),
            reduce_sha256(&plan, &group_by("label", None, false)),
            reduce_sha256(&plan, &group_by("product", Some(50), false)),
            reduce_sha256(&plan, &group_by("product", None, true)),
        ] {
            assert_ne!(once, other);
        }
    }
}
