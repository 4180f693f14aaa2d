//! The plans a server serves, by name: each plan file checked exactly as `validate` checks it
//! and built once (its models are shared process-wide and load on their first call). With
//! `--watch` the catalog is refreshed: a plan whose file, a file of its prompts directory, or
//! another file it reads (a sub-plan, a schema, a tool's script: what its lockfile would pin)
//! changed is checked and built again and swapped in whole; a version that fails its checks is
//! rejected and the previous one goes on serving. A plan file that appears in a served directory
//! (or matches a served glob) is checked and, if it passes, served too.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::SystemTime;

use serde_json::Value;

use crate::core::text::did_you_mean;
use crate::core::{Failure, FailureCode};
use crate::orchestrate::{Pipeline, Resources, inputs};
use crate::plan::build::BuildOptions;
use crate::plan::suite::is_test_file;
use crate::plan::yaml::NodeValue;
use crate::plan::{self, Diagnostic, lock};

/// A plan as served.
pub struct Served {
    /// The name it is served under (the plan's `name`).
    pub name: String,
    pub description: Option<String>,
    pub path: PathBuf,
    pub pipeline: Arc<Pipeline>,
    /// Its inputs as a JSON Schema.
    pub inputs: Value,
    /// The files it reads besides its own (prompts, schemas, sub-plans, tool files).
    pub files: Vec<PathBuf>,
}

/// Why a plan file cannot be served.
pub enum Rejected {
    /// It fails its checks: the diagnostics `validate` prints.
    Invalid(Vec<Diagnostic>),
    /// It is valid but cannot be built (a corpus or tool that cannot be set up).
    Unbuildable(Failure),
}

/// The plan files PLANS name, and what they match that is not a plan file.
#[derive(Debug, Default)]
pub struct Expanded {
    pub files: Vec<PathBuf>,
    /// Matches of a directory or glob that are not regular files (a FIFO, a socket, a device):
    /// reading one could block for ever, so they are skipped, with a warning.
    pub skipped: Vec<PathBuf>,
    /// Matches of a directory or glob that are YAML files but not plans (a test file, a policy,
    /// another tool's configuration), each with what it is: skipped, with a note.
    pub not_plans: Vec<(PathBuf, &'static str)>,
}

/// The plan files PLANS name: files as they are, every `*.yaml` / `*.yml` regular file of a
/// directory, the regular files a glob matches; each in the order found, sorted within a
/// directory or glob. What a directory or glob matches that is not a plan is set apart (see
/// [`not_a_plan`]); a file named on its own is always read as a plan.
pub fn expand(patterns: &[String]) -> Result<Expanded, Failure> {
    let mut expanded = Expanded::default();
    for pattern in patterns {
        let path = Path::new(pattern);
        let mut found: Vec<PathBuf> = if path.is_dir() {
            let entries = std::fs::read_dir(path).map_err(|e| {
                Failure::new(
                    FailureCode::ConfigFileError,
                    format!("cannot read {pattern}: {e}"),
                )
            })?;
            entries
                .filter_map(Result::ok)
                .map(|entry| entry.path())
                .filter(|p| is_yaml(p) && !p.is_dir())
                .collect()
        } else if pattern.contains(['*', '?', '[']) {
            let matched = glob::glob(pattern).map_err(|e| {
                Failure::new(
                    FailureCode::ConfigInvalidInput,
                    format!("`{pattern}` is not a valid glob: {e}"),
                )
            })?;
            let found: Vec<PathBuf> = matched.filter_map(Result::ok).collect();
            if found.is_empty() {
                return Err(Failure::new(
                    FailureCode::ConfigFileError,
                    format!("no plan file matches `{pattern}`"),
                ));
            }
            found
        } else {
            expanded.files.push(path.to_path_buf());
            continue;
        };
        found.sort();
        for path in found {
            if !path.is_file() {
                expanded.skipped.push(path);
            } else if let Some(what) = not_a_plan(&path) {
                expanded.not_plans.push((path, what));
            } else {
                expanded.files.push(path);
            }
        }
    }
    Ok(expanded)
}

/// What a YAML file a directory or glob matched is, when it is not a plan: a test file (by its
/// name, `*.test.yaml`), or a YAML mapping without a top-level `steps` (a policy, a lockfile,
/// another tool's configuration). A file that cannot be read or parsed is taken for a plan, so
/// that serving it fails with its diagnostics rather than skipping it quietly.
fn not_a_plan(path: &Path) -> Option<&'static str> {
    if is_test_file(path) {
        return Some("a test file (`pagantic test` runs it)");
    }
    let bytes = crate::core::file::read_bytes_bounded(path, crate::core::file::TEXT_LIMIT).ok()?;
    let root = plan::yaml::parse(std::str::from_utf8(&bytes).ok()?).ok()?;
    let mapping = matches!(root.value, NodeValue::Map(_));
    (mapping && root.get("steps").is_none()).then_some("not a plan (no top-level `steps`)")
}

fn is_yaml(path: &Path) -> bool {
    path.extension().is_some_and(|e| e == "yaml" || e == "yml")
}

/// Checks and builds the plan at `path` with the session's `resources` and `options` (where to
/// tell about loading models, the call cache).
pub fn load(
    path: &Path,
    resources: &Resources,
    options: &BuildOptions,
) -> Result<Served, Rejected> {
    // Opening a FIFO (or a device) to read it could block for ever: only regular files are read.
    if std::fs::metadata(path).is_ok_and(|m| !m.is_file()) {
        return Err(Rejected::Unbuildable(
            Failure::new(
                FailureCode::ConfigFileError,
                format!("{} is not a regular file", path.display()),
            )
            .with_help("a plan must be a regular YAML file (not a FIFO, a socket or a device)"),
        ));
    }
    let plan = plan::load_plan(path, None).map_err(Rejected::Invalid)?;
    let options = BuildOptions {
        // Built to stream its final answer, into nothing here: each run's own watcher (a client
        // that asked for a stream) gets the text.
        stream: Some(Arc::new(|_: &str| {})),
        ..options.clone()
    };
    let pipeline = plan
        .build(resources, options)
        .map_err(Rejected::Unbuildable)?;
    Ok(Served {
        files: lock::files_used(&plan),
        name: plan.raw.name.clone(),
        description: plan.raw.description.clone(),
        path: path.to_path_buf(),
        inputs: inputs::json_schema(&pipeline.inputs),
        pipeline: Arc::new(pipeline),
    })
}

/// What the files a plan is read from looked like: each path with its modification time, size
/// and, for a file of at most [`HASHED_UP_TO`] bytes, a hash of its content (None for a file that
/// is gone).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Fingerprint(Vec<(PathBuf, Option<FileState>)>);

/// One file's modification time, size and content hash (small files only).
type FileState = (SystemTime, u64, Option<u64>);

/// Files up to this size (plans, prompts, schemas) are compared by content as well: file times
/// are coarse (a few milliseconds), so two writes of the same size in a row can leave a file's
/// time and size alike. Larger files (model weights) are compared by time and size alone.
const HASHED_UP_TO: u64 = 1 << 20;

/// A hash of `file`'s content when it is a readable file of at most [`HASHED_UP_TO`] bytes.
fn content_hash(file: &Path, len: u64) -> Option<u64> {
    use std::hash::{Hash, Hasher};
    if len > HASHED_UP_TO {
        return None;
    }
    let bytes = crate::core::file::read_bytes_bounded(file, HASHED_UP_TO).ok()?;
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    bytes.hash(&mut hasher);
    Some(hasher.finish())
}

impl Fingerprint {
    /// The plan file, every file under the prompts directory its templates are read from, and
    /// `used`: the other files it read when it was last checked.
    fn of(path: &Path, used: &[PathBuf]) -> Self {
        let mut files = vec![path.to_path_buf()];
        files.extend_from_slice(used);
        let dir = match path.parent() {
            Some(parent) if !parent.as_os_str().is_empty() => parent.to_path_buf(),
            _ => PathBuf::from("."),
        };
        if let Some(prompts) = plan::prompts_dir(&dir) {
            collect_files(&prompts, 4, &mut files);
        }
        files.sort();
        files.dedup();
        Fingerprint(
            files
                .into_iter()
                .map(|file| {
                    let seen = std::fs::metadata(&file).ok().and_then(|m| {
                        Some((m.modified().ok()?, m.len(), content_hash(&file, m.len())))
                    });
                    (file, seen)
                })
                .collect(),
        )
    }
}

fn collect_files(dir: &Path, depth: usize, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.filter_map(Result::ok) {
        let path = entry.path();
        if path.is_dir() && depth > 0 {
            collect_files(&path, depth.saturating_sub(1), out);
        } else if path.is_file() {
            out.push(path);
        }
    }
}

/// What a refresh did with a changed or new plan file.
pub enum Change {
    /// A plan file new in a served directory or glob passed its checks and now serves as `name`.
    Added { name: String, path: PathBuf },
    /// The new version passed its checks and now serves under `name`.
    Swapped { name: String, path: PathBuf },
    /// The new version was rejected; the previous one goes on serving.
    Kept { path: PathBuf, why: Rejected },
    /// Something new in a served directory or glob is not a regular file, and is not read.
    Skipped { path: PathBuf },
}

/// A plan file as last looked at.
struct Seen {
    path: PathBuf,
    /// The other files it read the last time it passed its checks.
    used: Vec<PathBuf>,
    fingerprint: Fingerprint,
}

impl Seen {
    fn new(path: PathBuf, used: Vec<PathBuf>) -> Seen {
        let fingerprint = Fingerprint::of(&path, &used);
        Seen {
            path,
            used,
            fingerprint,
        }
    }
}

/// The served plans by name; readers get the whole set as it was at one moment.
pub struct Catalog {
    plans: RwLock<Arc<BTreeMap<String, Arc<Served>>>>,
    /// Per plan file, its fingerprint when last looked at.
    seen: Mutex<Vec<Seen>>,
    /// The served files, directories and globs, looked at again for new plan files.
    patterns: Vec<String>,
    /// What they match that is not a regular file, as of the last look (each reported once).
    skipped: Mutex<Vec<PathBuf>>,
}

impl Catalog {
    /// The catalog of `plans`; two plans with the same name are refused.
    pub fn new(plans: Vec<Served>) -> Result<Catalog, Failure> {
        let mut by_name: BTreeMap<String, Arc<Served>> = BTreeMap::new();
        let mut seen = Vec::new();
        for served in plans {
            if let Some(first) = by_name.get(&served.name) {
                return Err(duplicate(&served, &first.path));
            }
            seen.push(Seen::new(served.path.clone(), served.files.clone()));
            by_name.insert(served.name.clone(), Arc::new(served));
        }
        Ok(Catalog {
            plans: RwLock::new(Arc::new(by_name)),
            seen: Mutex::new(seen),
            patterns: Vec::new(),
            skipped: Mutex::new(Vec::new()),
        })
    }

    /// This catalog, where a refresh also serves plan files new in `patterns` (the files,
    /// directories and globs it was made from; `skipped`: what they matched that is not a
    /// regular file, already reported).
    pub fn watching(mut self, patterns: Vec<String>, skipped: Vec<PathBuf>) -> Catalog {
        self.patterns = patterns;
        self.skipped = Mutex::new(skipped);
        self
    }

    /// Every served plan, as of now.
    pub fn all(&self) -> Arc<BTreeMap<String, Arc<Served>>> {
        self.plans
            .read()
            .map(|plans| Arc::clone(&*plans))
            .unwrap_or_default()
    }

    /// The plan served under `name`.
    pub fn get(&self, name: &str) -> Option<Arc<Served>> {
        self.all().get(name).cloned()
    }

    /// Every served plan's name beside the file it is read from, one per line, aligned: what a
    /// newcomer who knows a plan by its file needs to call it by name.
    pub fn mapping(&self) -> String {
        let all = self.all();
        let width = all
            .keys()
            .map(|name| name.chars().count())
            .max()
            .unwrap_or(0);
        all.values()
            .map(|served| format!("  {:width$}  {}", served.name, served.path.display()))
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Why `name` is not served, naming what is: the plan read from a file of that name (a plan
    /// is served under its `name`, not its file's), the closest name, or every served plan.
    pub fn unknown(&self, name: &str) -> String {
        let all = self.all();
        let by_file = all
            .values()
            .find(|served| served.path.file_stem().and_then(|stem| stem.to_str()) == Some(name));
        if let Some(served) = by_file {
            return format!(
                "no plan `{name}` is served: {} is served as `{}` (a plan is served under its `name`)",
                served.path.display(),
                served.name
            );
        }
        let mut served: Vec<String> = all
            .values()
            .map(|served| format!("`{}` ({})", served.name, served.path.display()))
            .collect();
        if served.is_empty() {
            served.push("none".into());
        }
        let closest = did_you_mean(name, all.keys().map(String::as_str))
            .map(|hint| format!(" ({hint})"))
            .unwrap_or_default();
        format!(
            "no plan `{name}` is served{closest}; served plans: {}",
            served.join(", ")
        )
    }

    /// Checks again every plan whose files changed since last seen, and swaps in those that pass;
    /// then checks the plan files new in the watched patterns, and adds those that pass.
    pub fn refresh(&self, resources: &Resources, options: &BuildOptions) -> Vec<Change> {
        let Ok(mut seen) = self.seen.lock() else {
            return Vec::new();
        };
        let mut changes = Vec::new();
        for plan in seen.iter_mut() {
            let now = Fingerprint::of(&plan.path, &plan.used);
            if now == plan.fingerprint {
                continue;
            }
            plan.fingerprint = now;
            changes.push(self.check(plan.path.clone(), resources, options, false));
            self.look_again(plan);
        }
        // A glob that matches nothing now, or a directory gone, has no new files.
        let expanded = expand(&self.patterns).unwrap_or_default();
        if let Ok(mut skipped) = self.skipped.lock() {
            for path in &expanded.skipped {
                if !skipped.contains(path) {
                    changes.push(Change::Skipped { path: path.clone() });
                }
            }
            *skipped = expanded.skipped;
        }
        for path in expanded.files {
            if seen.iter().any(|plan| plan.path == path) {
                continue;
            }
            let mut plan = Seen::new(path.clone(), Vec::new());
            changes.push(self.check(path, resources, options, true));
            self.look_again(&mut plan);
            seen.push(plan);
        }
        changes
    }

    /// After `plan` was checked: watches the files the version now served from its path reads
    /// (unchanged when it was rejected), fingerprinting the ones it did not read before.
    fn look_again(&self, plan: &mut Seen) {
        let Some(used) = self
            .all()
            .values()
            .find(|served| served.path == plan.path)
            .map(|served| served.files.clone())
        else {
            return;
        };
        if used != plan.used {
            *plan = Seen::new(plan.path.clone(), used);
        }
    }

    /// Checks and builds the plan at `path` (`new` to the catalog or not) and serves it if it
    /// passes.
    fn check(
        &self,
        path: PathBuf,
        resources: &Resources,
        options: &BuildOptions,
        new: bool,
    ) -> Change {
        match load(&path, resources, options) {
            Ok(served) => match self.swap(served) {
                Ok(name) if new => Change::Added { name, path },
                Ok(name) => Change::Swapped { name, path },
                Err(failure) => Change::Kept {
                    path,
                    why: Rejected::Unbuildable(failure),
                },
            },
            Err(why) => Change::Kept { path, why },
        }
    }

    /// Puts `served` in place of the plan read from the same file (whose name may have changed).
    fn swap(&self, served: Served) -> Result<String, Failure> {
        let Ok(mut plans) = self.plans.write() else {
            return Err(Failure::new(
                FailureCode::ConfigFileError,
                "the catalog of plans is unusable after an earlier crash",
            ));
        };
        let mut next: BTreeMap<String, Arc<Served>> = (**plans).clone();
        if let Some(other) = next.get(&served.name)
            && other.path != served.path
        {
            return Err(duplicate(&served, &other.path));
        }
        next.retain(|_, plan| plan.path != served.path);
        let name = served.name.clone();
        next.insert(name.clone(), Arc::new(served));
        *plans = Arc::new(next);
        Ok(name)
    }
}

fn duplicate(served: &Served, first: &Path) -> Failure {
    Failure::new(
        FailureCode::ConfigInvalidInput,
        format!(
            "{} and {} are both named `{}`",
            first.display(),
            served.path.display(),
            served.name
        ),
    )
    .with_help("every served plan needs its own `name`")
}

#[cfg(test)]
mod tests {
    use super::*;

    const PLAN: &str = "version: 1\nname: NAME\ninputs:\n  q: { type: string }\nsteps:\n  - name: echo\n    type: template\n    template: \"{{ inputs.q }}\"\n";

    fn quiet() -> BuildOptions {
        BuildOptions::default()
    }

    fn resources() -> Resources {
        crate::orchestrate::test_resources()
    }

    fn write(path: &Path, name: &str) {
        std::fs::write(path, PLAN.replace("NAME", name)).expect("written");
    }

    #[test]
    fn a_directory_gives_its_yaml_files_and_a_glob_that_matches_nothing_is_refused() {
        let dir = tempfile::tempdir().expect("temp dir");
        for file in ["b.yaml", "a.yml", "notes.txt"] {
            std::fs::write(dir.path().join(file), "").expect("written");
        }
        let text = dir.path().to_string_lossy().into_owned();
        assert_eq!(
            expand(std::slice::from_ref(&text)).expect("expanded").files,
            [dir.path().join("a.yml"), dir.path().join("b.yaml")]
        );
        let failure = expand(&[format!("{text}/*.json")]).expect_err("refused");
        assert!(
            failure.message.starts_with("no plan file matches"),
            "{}",
            failure.message
        );
    }

    #[test]
    fn two_plans_with_one_name_are_refused() {
        let dir = tempfile::tempdir().expect("temp dir");
        let (a, b) = (dir.path().join("a.yaml"), dir.path().join("b.yaml"));
        write(&a, "same");
        write(&b, "same");
        let plans = [&a, &b].map(|p| load(p, &resources(), &quiet()).ok().expect("valid"));
        let failure = Catalog::new(plans.into()).err().expect("refused");
        assert!(
            failure.message.ends_with("are both named `same`"),
            "{}",
            failure.message
        );
    }

    #[test]
    fn a_changed_plan_is_swapped_in_and_an_invalid_change_keeps_the_old_one() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("p.yaml");
        write(&path, "first");
        let catalog = Catalog::new(vec![
            load(&path, &resources(), &quiet()).ok().expect("valid"),
        ])
        .expect("catalog");
        assert!(
            catalog.refresh(&resources(), &quiet()).is_empty(),
            "nothing changed"
        );
        write(&path, "second-name");
        let changes = catalog.refresh(&resources(), &quiet());
        assert!(matches!(&changes[..], [Change::Swapped { name, .. }] if name == "second-name"));
        assert!(catalog.get("first").is_none() && catalog.get("second-name").is_some());
        std::fs::write(&path, "version: 1\nname: broken\nsteps: 3\n").expect("written");
        let changes = catalog.refresh(&resources(), &quiet());
        assert!(matches!(
            &changes[..],
            [Change::Kept {
                why: Rejected::Invalid(_),
                ..
            }]
        ));
        assert!(
            catalog.get("second-name").is_some(),
            "the old version still serves"
        );
    }

    #[test]
    fn a_change_to_a_file_the_plan_reads_swaps_it_in_again() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("p.yaml");
        let schema = dir.path().join("answer.schema.json");
        std::fs::write(&schema, r#"{"type": "object"}"#).expect("written");
        std::fs::write(
            &path,
            "version: 1\nname: shaped\nmodels: { m: { kind: scripted, echo: true } }\n\
             steps:\n  - { name: s, type: structured, model: m, template: hi, schema: answer.schema.json }\n",
        )
        .expect("written");
        let catalog = Catalog::new(vec![
            load(&path, &resources(), &quiet()).ok().expect("valid"),
        ])
        .expect("catalog");
        assert!(
            catalog.refresh(&resources(), &quiet()).is_empty(),
            "nothing changed"
        );
        std::fs::write(&schema, r#"{"type": "object", "required": ["a"]}"#).expect("written");
        let changes = catalog.refresh(&resources(), &quiet());
        assert!(matches!(&changes[..], [Change::Swapped { name, .. }] if name == "shaped"));
        assert!(
            catalog.refresh(&resources(), &quiet()).is_empty(),
            "seen once"
        );
    }

    #[test]
    fn a_plan_file_new_in_a_served_directory_is_served_once_it_passes() {
        let dir = tempfile::tempdir().expect("temp dir");
        let first = dir.path().join("a.yaml");
        write(&first, "first");
        let pattern = dir.path().to_string_lossy().into_owned();
        let catalog = Catalog::new(vec![
            load(&first, &resources(), &quiet()).ok().expect("valid"),
        ])
        .expect("catalog")
        .watching(vec![pattern], Vec::new());
        assert!(
            catalog.refresh(&resources(), &quiet()).is_empty(),
            "nothing new"
        );
        let added = dir.path().join("b.yaml");
        std::fs::write(&added, "version: 1\nname: broken\nsteps: 3\n").expect("written");
        let changes = catalog.refresh(&resources(), &quiet());
        assert!(matches!(&changes[..], [Change::Kept { path, .. }] if *path == added));
        assert!(catalog.get("broken").is_none());
        write(&added, "second");
        let changes = catalog.refresh(&resources(), &quiet());
        assert!(matches!(&changes[..], [Change::Swapped { name, .. }] if name == "second"));
        let third = dir.path().join("c.yaml");
        write(&third, "third");
        let changes = catalog.refresh(&resources(), &quiet());
        assert!(matches!(&changes[..], [Change::Added { name, .. }] if name == "third"));
        assert_eq!(catalog.all().len(), 3);
        assert!(
            catalog.refresh(&resources(), &quiet()).is_empty(),
            "each file is taken in once"
        );
    }

    #[test]
    fn a_fifo_matched_by_a_glob_is_skipped_once_and_never_read() {
        let dir = tempfile::tempdir().expect("temp dir");
        let first = dir.path().join("a.yaml");
        write(&first, "first");
        let pattern = format!("{}/*.yaml", dir.path().display());
        let catalog = Catalog::new(vec![
            load(&first, &resources(), &quiet()).ok().expect("valid"),
        ])
        .expect("catalog")
        .watching(vec![pattern.clone()], Vec::new());
        let fifo = dir.path().join("b.yaml");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status();
        assert!(made.expect("mkfifo runs").success(), "a FIFO");
        let expanded = expand(std::slice::from_ref(&pattern)).expect("expanded");
        assert_eq!(expanded.files, [first]);
        assert_eq!(expanded.skipped, std::slice::from_ref(&fifo));
        let changes = catalog.refresh(&resources(), &quiet());
        assert!(matches!(&changes[..], [Change::Skipped { path }] if *path == fifo));
        assert!(
            catalog.refresh(&resources(), &quiet()).is_empty(),
            "reported once"
        );
        assert!(matches!(
            load(&fifo, &resources(), &quiet()),
            Err(Rejected::Unbuildable(_))
        ));
    }
}
