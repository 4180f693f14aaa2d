//! Shards: which rows of a batch one worker of an array job runs, where that worker learns its
//! place (`--shard I/N`, or the scheduler's environment with `--shard env`), and the `{shard}` /
//! `{shards}` placeholders that let one job definition name every worker's output apart.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// One worker's share of a batch: the rows whose index ≡ `index` mod `count`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Shard {
    /// From 0.
    pub index: usize,
    pub count: usize,
    /// The environment variable the index came from (`--shard env`); None for `I/N`.
    pub from: Option<String>,
}

impl Shard {
    /// Whether the row at `index` belongs to this shard.
    pub fn holds(&self, index: usize) -> bool {
        index % self.count == self.index
    }

    /// How many of `rows` rows this shard holds.
    pub fn rows_of(&self, rows: usize) -> usize {
        (rows + self.count - 1 - self.index) / self.count
    }
}

/// `template` with `{shard}` and `{shards}` replaced by the shard's index and count (0 and 1
/// without a shard: a batch in one piece is shard 0 of 1).
pub fn expand(template: &Path, shard: Option<&Shard>) -> PathBuf {
    let (index, count) = shard.map_or((0, 1), |s| (s.index, s.count));
    let text = template.to_string_lossy();
    if !text.contains("{shard") {
        return template.to_path_buf();
    }
    PathBuf::from(
        text.replace("{shards}", &count.to_string())
            .replace("{shard}", &index.to_string()),
    )
}

/// Parses `I/N`, or takes the shard from the environment of array jobs: `env` reads Kubernetes
/// Indexed Jobs (`JOB_COMPLETION_INDEX`) and AWS Batch array jobs (`AWS_BATCH_JOB_ARRAY_INDEX`),
/// both with the count in `PAGANTIC_SHARDS`, or Slurm arrays (`SLURM_ARRAY_TASK_ID` and
/// `SLURM_ARRAY_TASK_COUNT`; the array may start anywhere and step, as `--array=1-8` or `0-14:2`
/// do: `SLURM_ARRAY_TASK_MIN` and `SLURM_ARRAY_TASK_STEP` turn the task id into a shard from 0).
pub fn parse_shard(text: &str) -> Result<Shard, ShardError> {
    let shard = if text == "env" {
        shard_from_env(|name| std::env::var(name).ok())?
    } else {
        let not_i_over_n = || ShardError::NotIOverN(text.to_string());
        let (i, n) = text.split_once('/').ok_or_else(not_i_over_n)?;
        let parse = |s: &str| s.trim().parse::<usize>().map_err(|_| not_i_over_n());
        Shard {
            index: parse(i)?,
            count: parse(n)?,
            from: None,
        }
    };
    shard.check()?;
    Ok(shard)
}

/// The most shards a batch may be split into: far more than any array job has, and small enough
/// that counting a part's missing shards stays cheap whatever a record claims.
pub const MAX_SHARDS: usize = 1_000_000;

impl Shard {
    /// Whether this shard can exist: its index below its count, which is 1 to [`MAX_SHARDS`]
    /// (a flag, a scheduler's variables and a part's record are all held to it).
    pub fn check(&self) -> Result<(), ShardError> {
        if self.count > MAX_SHARDS {
            return Err(ShardError::TooMany { count: self.count });
        }
        if self.count == 0 || self.index >= self.count {
            return Err(ShardError::NoSuchShard {
                index: self.index,
                count: self.count,
            });
        }
        Ok(())
    }
}

/// Why `--shard` names no shard.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ShardError {
    /// Neither `I/N` nor `env`.
    #[error("expected I/N, got `{0}`")]
    NotIOverN(String),
    /// The index is not below the count (or the count is 0).
    #[error("shard {index} of {count} does not exist (shards are 0 to N-1)")]
    NoSuchShard { index: usize, count: usize },
    /// More shards than [`MAX_SHARDS`].
    #[error("{count} shards are more than the {MAX_SHARDS} a batch may be split into")]
    TooMany { count: usize },
    /// A Slurm array task id below the array's first id.
    #[error("SLURM_ARRAY_TASK_ID {id} is below SLURM_ARRAY_TASK_MIN {min}")]
    BelowArrayStart { id: usize, min: usize },
    /// A variable of the scheduler is set but is not a number.
    #[error("{name} is `{value}`, not a number")]
    NotANumber { name: &'static str, value: String },
    /// The index is known but the count is not.
    #[error("{index_from} is set, but PAGANTIC_SHARDS (the number of shards) is not")]
    NoCount { index_from: &'static str },
    /// `--shard env` outside an array job.
    #[error(
        "--shard env found no array index: it reads JOB_COMPLETION_INDEX (Kubernetes) or \
         AWS_BATCH_JOB_ARRAY_INDEX (AWS Batch), with PAGANTIC_SHARDS, or SLURM_ARRAY_TASK_ID and \
         SLURM_ARRAY_TASK_COUNT (Slurm); none is set"
    )]
    NotAnArrayJob,
}

/// The shard of an array job, from its environment (`var` reads one variable).
fn shard_from_env(var: impl Fn(&str) -> Option<String>) -> Result<Shard, ShardError> {
    let number = |name: &'static str| -> Result<Option<usize>, ShardError> {
        match var(name) {
            None => Ok(None),
            Some(value) => value
                .trim()
                .parse()
                .map(Some)
                .map_err(|_| ShardError::NotANumber { name, value }),
        }
    };
    for index_from in ["JOB_COMPLETION_INDEX", "AWS_BATCH_JOB_ARRAY_INDEX"] {
        if let Some(index) = number(index_from)? {
            let count = number("PAGANTIC_SHARDS")?.ok_or(ShardError::NoCount { index_from })?;
            return Ok(Shard {
                index,
                count,
                from: Some(index_from.to_string()),
            });
        }
    }
    if let (Some(id), Some(count)) = (
        number("SLURM_ARRAY_TASK_ID")?,
        number("SLURM_ARRAY_TASK_COUNT")?,
    ) {
        let min = number("SLURM_ARRAY_TASK_MIN")?.unwrap_or(0);
        let step = number("SLURM_ARRAY_TASK_STEP")?.unwrap_or(1).max(1);
        let offset = id
            .checked_sub(min)
            .ok_or(ShardError::BelowArrayStart { id, min })?;
        return Ok(Shard {
            index: offset / step,
            count,
            from: Some("SLURM_ARRAY_TASK_ID".to_string()),
        });
    }
    Err(ShardError::NotAnArrayJob)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An environment of these variables.
    fn env(pairs: &[(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        let pairs = pairs.to_vec();
        move |name: &str| {
            pairs
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| v.to_string())
        }
    }

    /// A Slurm array numbered from 1 (`--array=1-4`), or stepping (`--array=0-6:2`), covers every
    /// shard exactly once.
    #[test]
    fn slurm_arrays_cover_every_shard_once() {
        for (min, step, ids) in [
            ("1", "1", ["1", "2", "3", "4"]),
            ("0", "2", ["0", "2", "4", "6"]),
        ] {
            let mut shards: Vec<usize> = ids
                .into_iter()
                .map(|id| {
                    let shard = shard_from_env(env(&[
                        ("SLURM_ARRAY_TASK_ID", id),
                        ("SLURM_ARRAY_TASK_COUNT", "4"),
                        ("SLURM_ARRAY_TASK_MIN", min),
                        ("SLURM_ARRAY_TASK_STEP", step),
                    ]))
                    .expect("a shard");
                    assert_eq!(shard.from.as_deref(), Some("SLURM_ARRAY_TASK_ID"));
                    shard.index
                })
                .collect();
            shards.sort_unstable();
            assert_eq!(shards, [0, 1, 2, 3], "min {min}, step {step}");
        }
    }

    /// Kubernetes and AWS Batch number from 0 and take the count from PAGANTIC_SHARDS; an index
    /// without a count, or a count that is not a number, is refused saying which.
    #[test]
    fn kubernetes_and_aws_batch_take_the_count_from_pagantic_shards() {
        for index_from in ["JOB_COMPLETION_INDEX", "AWS_BATCH_JOB_ARRAY_INDEX"] {
            let shard = shard_from_env(env(&[(index_from, "2"), ("PAGANTIC_SHARDS", "3")]));
            assert_eq!(
                shard,
                Ok(Shard {
                    index: 2,
                    count: 3,
                    from: Some(index_from.to_string())
                })
            );
            assert_eq!(
                shard_from_env(env(&[(index_from, "2")])),
                Err(ShardError::NoCount { index_from })
            );
        }
        assert_eq!(
            shard_from_env(env(&[
                ("AWS_BATCH_JOB_ARRAY_INDEX", "1"),
                ("PAGANTIC_SHARDS", "four")
            ])),
            Err(ShardError::NotANumber {
                name: "PAGANTIC_SHARDS",
                value: "four".into()
            })
        );
        let none = shard_from_env(env(&[]));
        assert_eq!(none, Err(ShardError::NotAnArrayJob));
        assert!(
            ShardError::NotAnArrayJob
                .to_string()
                .contains("AWS_BATCH_JOB_ARRAY_INDEX")
        );
    }

    #[test]
    fn shards_parse_and_are_checked() {
        let one_of_four = Shard {
            index: 1,
            count: 4,
            from: None,
        };
        assert_eq!(parse_shard("1/4"), Ok(one_of_four));
        assert_eq!(
            parse_shard("4/4"),
            Err(ShardError::NoSuchShard { index: 4, count: 4 })
        );
        assert_eq!(
            parse_shard("0/18446744073709551615"),
            Err(ShardError::TooMany { count: usize::MAX }),
            "a count no array job has is refused before a row is counted with it"
        );
        assert_eq!(parse_shard("x"), Err(ShardError::NotIOverN("x".into())));
        assert_eq!(parse_shard("1/y"), Err(ShardError::NotIOverN("1/y".into())));
        let below = shard_from_env(env(&[
            ("SLURM_ARRAY_TASK_ID", "0"),
            ("SLURM_ARRAY_TASK_COUNT", "4"),
            ("SLURM_ARRAY_TASK_MIN", "1"),
        ]));
        assert_eq!(below, Err(ShardError::BelowArrayStart { id: 0, min: 1 }));
    }

    #[test]
    fn placeholders_name_each_shard_apart_and_a_whole_batch_is_shard_0_of_1() {
        let template = Path::new("out/part-{shard}-of-{shards}.jsonl");
        let shard = Shard {
            index: 2,
            count: 4,
            from: None,
        };
        assert_eq!(
            expand(template, Some(&shard)),
            PathBuf::from("out/part-2-of-4.jsonl")
        );
        assert_eq!(
            expand(template, None),
            PathBuf::from("out/part-0-of-1.jsonl")
        );
        assert_eq!(
            expand(Path::new("plain.jsonl"), Some(&shard)),
            PathBuf::from("plain.jsonl")
        );
    }

    #[test]
    fn a_shard_holds_every_count_th_row() {
        let shard = Shard {
            index: 1,
            count: 4,
            from: None,
        };
        let held: Vec<usize> = (0..10).filter(|&i| shard.holds(i)).collect();
        assert_eq!(held, [1, 5, 9]);
        assert_eq!(shard.rows_of(10), 3);
        assert_eq!(shard.rows_of(1), 0);
    }
}
