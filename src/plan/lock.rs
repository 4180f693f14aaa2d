//! Lockfiles: what a plan's answers depend on besides its own text, pinned so that CI can refuse
//! to run when any of it changed.
//!
//! `pagantic lock PLAN` writes `PLAN.lock` beside the plan: the pagantic version, each model's
//! kind and source with the SHA-256 of its files (or its server and model name; for a Hugging
//! Face file the revision and SHA-256 its cache recorded), and the SHA-256 of every prompt file
//! (with the templates it includes, imports or extends), schema file and sub-plan file the
//! plan's steps and agents use, and of the scripts and data files its command tools name. `run --locked` and `validate --locked` compute the same again and refuse, naming each
//! difference, when the two disagree.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::Plan;
use super::models::file_sha256;
use super::steps::{SchemaSource, TemplateSource};
use crate::core::{Failure, FailureCode};
use crate::prompt;

/// A plan's lockfile.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Lock {
    /// The pagantic version that wrote it.
    pub pagantic: String,
    /// Per model name: its kind, source and the SHA-256 of its files, or server and model name.
    pub models: BTreeMap<String, Value>,
    /// Per file the plan uses (prompt and the templates it reaches, schema, sub-plan, a command
    /// tool's script or data file), relative to the plan: its SHA-256 (null when it cannot be
    /// read).
    pub files: BTreeMap<String, Value>,
}

/// The lockfile of the plan at `plan`: `PLAN.lock` beside it.
pub fn lock_path(plan: &Path) -> PathBuf {
    let mut name = plan.as_os_str().to_owned();
    name.push(".lock");
    PathBuf::from(name)
}

impl Lock {
    /// What `plan` depends on now (hashes its model, prompt, schema, sub-plan and tool files).
    pub fn of(plan: &Plan) -> Lock {
        let dir = plan.dir();
        let models = plan
            .raw
            .models
            .iter()
            .map(|(name, spec)| (name.clone(), spec.kind().locked(&dir)))
            .collect();
        let prompts = super::prompts_dir(&dir).unwrap_or_else(|| dir.join("prompts"));
        let mut files = BTreeMap::new();
        let mut add = |path: PathBuf| {
            let name = path
                .strip_prefix(&dir)
                .unwrap_or(&path)
                .display()
                .to_string();
            files.insert(name, file_sha256(&path));
        };
        for step in &plan.raw.steps {
            let references = step.references();
            for template in &references.templates {
                // A prompt file, and every template it or an inline template reaches by name
                // (`{% include %}`, `{% import %}`, `{% extends %}`), as the prompt loader finds it.
                let names = if template.source == TemplateSource::File {
                    add(prompts.join(template.text));
                    vec![template.text.to_string()]
                } else {
                    prompt::referenced_templates(template.text)
                };
                for path in prompt::reached_prompt_files(&prompts, names) {
                    add(path);
                }
            }
            for (_, schema) in &references.schemas {
                if let SchemaSource::File(file) = schema {
                    add(dir.join(file));
                }
            }
        }
        for agent in plan.raw.agents.values() {
            if let Some(file) = &agent.plan {
                add(dir.join(file));
            }
        }
        for tool in plan.raw.tools.values() {
            for path in tool.kind().files(&dir) {
                add(path);
            }
        }
        Lock {
            pagantic: env!("CARGO_PKG_VERSION").to_string(),
            models,
            files,
        }
    }

    /// Reads the lockfile at `path`.
    pub fn read(path: &Path) -> Result<Lock, Failure> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            Failure::new(
                FailureCode::ConfigFileError,
                format!("cannot read the lockfile {}: {e}", path.display()),
            )
            .with_help("write it with `pagantic lock PLAN`")
        })?;
        serde_json::from_str(&text).map_err(|e| {
            Failure::new(
                FailureCode::ConfigFileError,
                format!("{} is not a pagantic lockfile: {e}", path.display()),
            )
            .with_help("write it again with `pagantic lock PLAN`")
        })
    }

    /// The lockfile's text (pretty JSON, keys sorted, a final newline).
    pub fn to_text(&self) -> String {
        let mut text = serde_json::to_string_pretty(self).unwrap_or_default();
        text.push('\n');
        text
    }

    /// What differs between this lock (as written) and `now`, one line each; empty when nothing.
    pub fn drift(&self, now: &Lock) -> Vec<String> {
        let mut changes = Vec::new();
        if self.pagantic != now.pagantic {
            changes.push(format!(
                "pagantic version: locked {}, running {}",
                self.pagantic, now.pagantic
            ));
        }
        compare(&mut changes, "model", &self.models, &now.models);
        compare(&mut changes, "file", &self.files, &now.files);
        changes
    }

    /// Fails naming every difference between the lockfile at `path` and `plan` now.
    pub fn check(plan: &Plan, path: &Path) -> Result<(), Failure> {
        let locked = Lock::read(path)?;
        let changes = locked.drift(&Lock::of(plan));
        if changes.is_empty() {
            return Ok(());
        }
        Err(Failure::new(
            FailureCode::ConfigInvalidInput,
            format!(
                "{} no longer matches {}:\n{}",
                plan.path.display(),
                path.display(),
                changes
                    .iter()
                    .map(|c| format!("  - {c}"))
                    .collect::<Vec<_>>()
                    .join("\n")
            ),
        )
        .with_help(format!(
            "if the changes are intended, run `pagantic lock {}` and commit the lockfile",
            plan.path.display()
        )))
    }
}

/// Lines for the entries of `locked` and `now` that differ: changed, no longer used, new.
fn compare(
    changes: &mut Vec<String>,
    what: &str,
    locked: &BTreeMap<String, Value>,
    now: &BTreeMap<String, Value>,
) {
    for (name, old) in locked {
        match now.get(name) {
            Some(new) if new == old => {}
            Some(new) => changes.push(format!("{what} `{name}`: locked {old}, now {new}")),
            None => changes.push(format!("{what} `{name}`: locked, no longer used")),
        }
    }
    for (name, new) in now {
        if !locked.contains_key(name) {
            changes.push(format!("{what} `{name}`: not in the lockfile, now {new}"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn lock(models: Value, files: Value) -> Lock {
        Lock {
            pagantic: "1.0.0".into(),
            models: serde_json::from_value(models).expect("models"),
            files: serde_json::from_value(files).expect("files"),
        }
    }

    #[test]
    fn drift_names_every_change_addition_and_removal() {
        let locked = lock(
            json!({ "llm": { "kind": "openai", "model": "a" } }),
            json!({ "prompts/a.j2": "11", "schemas/s.json": "22" }),
        );
        assert_eq!(locked.drift(&locked.clone()), Vec::<String>::new());
        let now = Lock {
            pagantic: "1.1.0".into(),
            ..lock(
                json!({ "llm": { "kind": "openai", "model": "b" } }),
                json!({ "prompts/a.j2": "33", "prompts/b.j2": "44" }),
            )
        };
        assert_eq!(
            locked.drift(&now),
            [
                "pagantic version: locked 1.0.0, running 1.1.0",
                r#"model `llm`: locked {"kind":"openai","model":"a"}, now {"kind":"openai","model":"b"}"#,
                r#"file `prompts/a.j2`: locked "11", now "33""#,
                "file `schemas/s.json`: locked, no longer used",
                r#"file `prompts/b.j2`: not in the lockfile, now "44""#,
            ]
        );
    }

    #[test]
    fn the_lockfile_sits_beside_the_plan() {
        assert_eq!(
            lock_path(Path::new("plans/rag.yaml")),
            Path::new("plans/rag.yaml.lock")
        );
    }
}
