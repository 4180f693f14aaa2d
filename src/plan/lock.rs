//! Lockfiles: what a plan's answers depend on besides its own text, pinned so that CI can refuse
//! to run when any of it changed.
//!
//! `pagantic lock PLAN` writes `PLAN.lock` beside the plan: the pagantic version, each model's
//! kind and source with the SHA-256 of its files (or its server and model name; for a Hugging
//! Face file the revision and SHA-256 its cache recorded), and the SHA-256 of every prompt file
//! (with the templates it includes, imports or extends), schema file and sub-plan file the
//! plan's steps and agents use, and of the scripts and data files its command tools name; and per
//! corpus, the SHA-256 of each file it reads (the files its patterns match, its JSON Lines
//! file). `run --locked` and `validate --locked` compute the same again and refuse, naming each
//! difference, when the two disagree. A lockfile written before corpora were pinned has no
//! `corpora`; checked against a plan with corpora it is refused, asking for `pagantic lock` again.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::Plan;
use super::models::file_sha256;
use super::steps::{SchemaSource, TemplateSource};
use super::tools::{ToolEnv, ToolSpec};
use crate::core::file::{ReadError, TEXT_LIMIT, read_bounded};
use crate::core::{Failure, FailureCode};
use crate::corpora::matching_files;
use crate::model_store::FileHashes;
use crate::orchestrate::Resources;
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
    /// Per corpus name: per file it reads, relative to the plan, its SHA-256 (null when it
    /// cannot be read). Absent from lockfiles written before corpora were pinned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub corpora: Option<BTreeMap<String, BTreeMap<String, Value>>>,
    /// Per `kind: mcp` tool that could be reached when the lock was written: per tool its
    /// server lists, the SHA-256 of its name, description and input schema. Absent when the
    /// plan declares no MCP tool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mcp: Option<BTreeMap<String, BTreeMap<String, Value>>>,
}

/// The SHA-256 of `plan`'s text and of everything its lockfile pins: which plan, and which of
/// the files it uses, wrote a batch's output.
pub fn plan_sha256(plan: &Plan, resources: &Resources) -> String {
    use sha2::{Digest, Sha256};
    let mut hasher = Sha256::new();
    hasher.update(plan.source.text.as_bytes());
    hasher.update(Lock::of(plan, resources).to_text().as_bytes());
    crate::model_store::hex(&hasher.finalize())
}

/// The lockfile of the plan at `plan`: `PLAN.lock` beside it.
pub fn lock_path(plan: &Path) -> PathBuf {
    let mut name = plan.as_os_str().to_owned();
    name.push(".lock");
    PathBuf::from(name)
}

/// The files `plan` reads besides its own: each prompt file and every template it or an inline
/// template reaches by name (`{% include %}`, `{% import %}`, `{% extends %}`, found as the
/// prompt loader finds them), schema files, sub-plan files, and the files command tools name.
pub fn files_used(plan: &Plan) -> Vec<PathBuf> {
    let dir = plan.dir();
    let prompts = super::prompts_dir(&dir).unwrap_or_else(|| dir.join("prompts"));
    let mut files = Vec::new();
    for step in &plan.raw.steps {
        let references = step.references();
        for template in &references.templates {
            let names = if template.source == TemplateSource::File {
                files.push(prompts.join(template.text));
                vec![template.text.to_string()]
            } else {
                prompt::referenced_templates(template.text)
            };
            files.extend(prompt::reached_prompt_files(&prompts, names));
        }
        for (_, schema) in &references.schemas {
            if let SchemaSource::File(file) = schema {
                files.push(dir.join(file));
            }
        }
    }
    for agent in plan.raw.agents.values() {
        if let Some(file) = &agent.plan {
            files.push(dir.join(file));
        }
    }
    for tool in plan.raw.tools.values() {
        files.extend(tool.kind().files(&dir));
    }
    files.sort();
    files.dedup();
    files
}

impl Lock {
    /// What `plan` depends on now (hashes its model, prompt, schema, sub-plan and tool files, and
    /// lists its MCP servers' tools, with the session's `resources`).
    pub fn of(plan: &Plan, resources: &Resources) -> Lock {
        let dir = plan.dir();
        let known = &resources.hashes;
        let models = plan
            .raw
            .models
            .iter()
            .map(|(name, spec)| (name.clone(), spec.kind().locked(&dir, known)))
            .collect();
        let corpora = plan
            .raw
            .corpora
            .iter()
            .map(|(name, spec)| {
                let mut files = Vec::new();
                for pattern in &spec.files {
                    // A pattern that matches nothing (or cannot be matched) pins nothing: the
                    // plan's own check refuses it before any run.
                    files.extend(matching_files(&dir, pattern).unwrap_or_default());
                }
                files.extend(spec.jsonl.iter().map(|jsonl| dir.join(&jsonl.path)));
                (name.clone(), hashes(&dir, files, known))
            })
            .collect();
        Lock {
            pagantic: env!("CARGO_PKG_VERSION").to_string(),
            models,
            files: hashes(&dir, files_used(plan), known),
            corpora: Some(corpora),
            mcp: mcp_pins(plan, resources),
        }
    }

    /// Reads the lockfile at `path`.
    pub fn read(path: &Path) -> Result<Lock, Failure> {
        let text = read_bounded(path, TEXT_LIMIT).map_err(|e| {
            let message = match e {
                ReadError::Unreadable { source, .. } => {
                    format!("cannot read the lockfile {}: {source}", path.display())
                }
                other => format!("cannot use the lockfile: {other}"),
            };
            Failure::new(FailureCode::ConfigFileError, message)
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
        let (corpora, mcp) = (Group::Corpus, Group::McpServer);
        compare_groups(
            &mut changes,
            corpora,
            self.corpora.as_ref(),
            now.corpora.as_ref(),
        );
        compare_groups(&mut changes, mcp, self.mcp.as_ref(), now.mcp.as_ref());
        changes
    }

    /// Fails naming every difference between the lockfile at `path` and `plan` now.
    pub fn check(plan: &Plan, path: &Path, resources: &Resources) -> Result<(), Failure> {
        let locked = Lock::read(path)?;
        let changes = locked.drift(&Lock::of(plan, resources));
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

/// What the lockfile pins in groups: a corpus's files, an MCP server's tools.
#[derive(Clone, Copy)]
enum Group {
    Corpus,
    McpServer,
}

impl Group {
    /// The line for a lockfile written before this group was pinned.
    fn predates(self) -> &'static str {
        match self {
            Group::Corpus => {
                "corpora: the lockfile was written before pagantic pinned corpus files"
            }
            Group::McpServer => "MCP tools: the lockfile was written before pagantic pinned them",
        }
    }

    /// How a line names an entry of group `name`.
    fn label(self, name: &str) -> String {
        match self {
            Group::Corpus => format!("corpus `{name}` file"),
            Group::McpServer => format!("MCP server of tool `{name}`: tool"),
        }
    }

    /// The line for a locked group missing now, when it is not compared entry by entry: an MCP
    /// server that cannot be reached (a corpus missing now has each of its files gone).
    fn missing(self, name: &str) -> Option<String> {
        match self {
            Group::Corpus => None,
            Group::McpServer => Some(format!(
                "MCP server of tool `{name}`: locked, but it cannot be reached now to check its tools"
            )),
        }
    }
}

/// Lines for the entries of `locked` and `now` that differ, group by group; one line when the
/// lockfile predates this kind of pin and the plan has some.
fn compare_groups(
    changes: &mut Vec<String>,
    group: Group,
    locked: Option<&BTreeMap<String, BTreeMap<String, Value>>>,
    now: Option<&BTreeMap<String, BTreeMap<String, Value>>>,
) {
    let none = BTreeMap::new();
    let now = now.unwrap_or(&none);
    let Some(locked) = locked else {
        if !now.is_empty() {
            changes.push(group.predates().into());
        }
        return;
    };
    let empty = BTreeMap::new();
    let names = locked
        .keys()
        .chain(now.keys().filter(|n| !locked.contains_key(*n)));
    for name in names {
        if locked.contains_key(name)
            && !now.contains_key(name)
            && let Some(line) = group.missing(name)
        {
            changes.push(line);
            continue;
        }
        compare(
            changes,
            &group.label(name),
            locked.get(name).unwrap_or(&empty),
            now.get(name).unwrap_or(&empty),
        );
    }
}

/// The tools each MCP server of the plan lists now, by its tool's name in the plan; a server
/// that cannot be reached is left out. None when the plan declares no MCP tool.
fn mcp_pins(
    plan: &Plan,
    resources: &Resources,
) -> Option<BTreeMap<String, BTreeMap<String, Value>>> {
    let dir = plan.dir();
    let servers: Vec<_> = plan
        .raw
        .tools
        .iter()
        .filter_map(|(name, spec)| match spec {
            ToolSpec::Mcp(server) => Some((name, server)),
            _ => None,
        })
        .collect();
    if servers.is_empty() {
        return None;
    }
    let pins = servers.into_iter().filter_map(|(name, server)| {
        let env = ToolEnv {
            name,
            dir: &dir,
            dry_run: false,
            mcp: &resources.mcp,
            sandboxes: &resources.sandboxes,
        };
        let listed = server.server(&env).list_tools(None).ok()?;
        let tools = listed
            .into_iter()
            .map(|tool| (tool.name, Value::String(tool.sha256)))
            .collect();
        Some((name.clone(), tools))
    });
    Some(pins.collect())
}

/// Each of `files` by its name relative to `dir`, with its SHA-256 (null when unreadable; a
/// version of a file `known` holds is not read again).
fn hashes(dir: &Path, files: Vec<PathBuf>, known: &FileHashes) -> BTreeMap<String, Value> {
    files
        .into_iter()
        .map(|path| {
            let name = path
                .strip_prefix(dir)
                .unwrap_or(&path)
                .display()
                .to_string();
            (name, file_sha256(&path, known))
        })
        .collect()
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
            corpora: Some(BTreeMap::new()),
            mcp: None,
        }
    }

    #[test]
    fn drift_names_each_mcp_tool_that_changed_and_a_server_out_of_reach() {
        let pins = |servers: Value| Some(serde_json::from_value(servers).expect("pins"));
        let locked = Lock {
            mcp: pins(json!({ "files": { "read": "11", "list": "22" }, "web": { "get": "33" } })),
            ..lock(json!({}), json!({}))
        };
        let now = Lock {
            mcp: pins(json!({ "files": { "read": "44", "list": "22", "write": "55" } })),
            ..lock(json!({}), json!({}))
        };
        assert_eq!(
            locked.drift(&now),
            [
                r#"MCP server of tool `files`: tool `read`: locked "11", now "44""#,
                r#"MCP server of tool `files`: tool `write`: not in the lockfile, now "55""#,
                "MCP server of tool `web`: locked, but it cannot be reached now to check its tools",
            ]
        );
        let old = lock(json!({}), json!({}));
        assert_eq!(
            old.drift(&now),
            ["MCP tools: the lockfile was written before pagantic pinned them"]
        );
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
    fn drift_names_each_corpus_file_that_changed_and_an_old_lockfile() {
        let corpora = |files: Value| Some(serde_json::from_value(files).expect("corpora"));
        let locked = Lock {
            corpora: corpora(json!({ "docs": { "corpus/a.md": "11", "corpus/b.md": "22" } })),
            ..lock(json!({}), json!({}))
        };
        let now = Lock {
            corpora: corpora(
                json!({ "docs": { "corpus/a.md": "33", "corpus/b.md": "22" },
                                     "faq": { "faq.jsonl": "44" } }),
            ),
            ..lock(json!({}), json!({}))
        };
        assert_eq!(
            locked.drift(&now),
            [
                r#"corpus `docs` file `corpus/a.md`: locked "11", now "33""#,
                r#"corpus `faq` file `faq.jsonl`: not in the lockfile, now "44""#,
            ]
        );
        let old: Lock = serde_json::from_value(json!({
            "pagantic": "1.0.0", "models": {}, "files": {}
        }))
        .expect("a lockfile without corpora reads");
        assert_eq!(
            old.drift(&Lock {
                pagantic: "1.0.0".into(),
                ..now
            }),
            ["corpora: the lockfile was written before pagantic pinned corpus files"]
        );
        let without_corpora = Lock {
            corpora: Some(BTreeMap::new()),
            ..old.clone()
        };
        assert_eq!(old.drift(&without_corpora), Vec::<String>::new());
    }

    #[test]
    fn the_lockfile_sits_beside_the_plan() {
        assert_eq!(
            lock_path(Path::new("plans/rag.yaml")),
            Path::new("plans/rag.yaml.lock")
        );
    }
}
