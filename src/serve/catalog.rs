//! The plans a server serves, by name: each plan file checked exactly as `validate` checks it
//! and built once (its models are shared process-wide and load on their first call). With
//! `--watch` the catalog is refreshed: a plan whose file, or a file of its prompts directory,
//! changed is checked and built again and swapped in whole; a version that fails its checks is
//! rejected and the previous one goes on serving. A plan file that appears in a served directory
//! (or matches a served glob) is checked and, if it passes, served too.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::SystemTime;

use serde_json::Value;

use crate::core::{Failure, FailureCode};
use crate::orchestrate::{Pipeline, inputs};
use crate::plan::build::BuildOptions;
use crate::plan::{self, Diagnostic};

/// A plan as served.
pub struct Served {
    /// The name it is served under (the plan's `name`).
    pub name: String,
    pub description: Option<String>,
    pub path: PathBuf,
    pub pipeline: Arc<Pipeline>,
    /// Its inputs as a JSON Schema.
    pub inputs: Value,
}

/// Why a plan file cannot be served.
pub enum Rejected {
    /// It fails its checks: the diagnostics `validate` prints.
    Invalid(Vec<Diagnostic>),
    /// It is valid but cannot be built (a corpus or tool that cannot be set up).
    Unbuildable(Failure),
}

/// The plan files PLANS name: files as they are, every `*.yaml` / `*.yml` file of a directory,
/// the files a glob matches; each in the order found, sorted within a directory or glob.
pub fn expand(patterns: &[String]) -> Result<Vec<PathBuf>, Failure> {
    let mut files = Vec::new();
    for pattern in patterns {
        let path = Path::new(pattern);
        if path.is_dir() {
            let entries = std::fs::read_dir(path).map_err(|e| {
                Failure::new(
                    FailureCode::ConfigFileError,
                    format!("cannot read {pattern}: {e}"),
                )
            })?;
            let mut found: Vec<PathBuf> = entries
                .filter_map(Result::ok)
                .map(|entry| entry.path())
                .filter(|p| p.is_file() && is_yaml(p))
                .collect();
            found.sort();
            files.extend(found);
        } else if pattern.contains(['*', '?', '[']) {
            let matched = glob::glob(pattern).map_err(|e| {
                Failure::new(
                    FailureCode::ConfigInvalidInput,
                    format!("`{pattern}` is not a valid glob: {e}"),
                )
            })?;
            let mut found: Vec<PathBuf> = matched.filter_map(Result::ok).collect();
            if found.is_empty() {
                return Err(Failure::new(
                    FailureCode::ConfigFileError,
                    format!("no plan file matches `{pattern}`"),
                ));
            }
            found.sort();
            files.extend(found);
        } else {
            files.push(path.to_path_buf());
        }
    }
    Ok(files)
}

fn is_yaml(path: &Path) -> bool {
    path.extension().is_some_and(|e| e == "yaml" || e == "yml")
}

/// Checks and builds the plan at `path` with `options` (where to tell about loading models, the
/// call cache).
pub fn load(path: &Path, options: &BuildOptions) -> Result<Served, Rejected> {
    let plan = plan::load_plan(path, None).map_err(Rejected::Invalid)?;
    let pipeline = plan
        .build(BuildOptions {
            // Built to stream its final answer, into nothing here: each run's own watcher (a
            // client that asked for a stream) gets the text.
            stream: Some(Arc::new(|_: &str| {})),
            ..options.clone()
        })
        .map_err(Rejected::Unbuildable)?;
    Ok(Served {
        name: plan.raw.name.clone(),
        description: plan.raw.description.clone(),
        path: path.to_path_buf(),
        inputs: inputs::json_schema(&pipeline.inputs),
        pipeline: Arc::new(pipeline),
    })
}

/// What the files a plan is read from looked like: each path with its modification time and
/// size (None for a file that is gone).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Fingerprint(Vec<(PathBuf, Option<(SystemTime, u64)>)>);

impl Fingerprint {
    /// The plan file and every file under the prompts directory its templates are read from.
    fn of(path: &Path) -> Self {
        let mut files = vec![path.to_path_buf()];
        let dir = match path.parent() {
            Some(parent) if !parent.as_os_str().is_empty() => parent.to_path_buf(),
            _ => PathBuf::from("."),
        };
        if let Some(prompts) = plan::prompts_dir(&dir) {
            collect_files(&prompts, 4, &mut files);
        }
        files.sort();
        Fingerprint(
            files
                .into_iter()
                .map(|file| {
                    let seen = std::fs::metadata(&file)
                        .ok()
                        .and_then(|m| Some((m.modified().ok()?, m.len())));
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
            collect_files(&path, depth - 1, out);
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
}

/// The served plans by name; readers get the whole set as it was at one moment.
pub struct Catalog {
    plans: RwLock<Arc<BTreeMap<String, Arc<Served>>>>,
    /// Per plan file, its fingerprint when last looked at.
    seen: Mutex<Vec<(PathBuf, Fingerprint)>>,
    /// The served files, directories and globs, looked at again for new plan files.
    patterns: Vec<String>,
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
            seen.push((served.path.clone(), Fingerprint::of(&served.path)));
            by_name.insert(served.name.clone(), Arc::new(served));
        }
        Ok(Catalog {
            plans: RwLock::new(Arc::new(by_name)),
            seen: Mutex::new(seen),
            patterns: Vec::new(),
        })
    }

    /// This catalog, where a refresh also serves plan files new in `patterns` (the files,
    /// directories and globs it was made from).
    pub fn watching(mut self, patterns: Vec<String>) -> Catalog {
        self.patterns = patterns;
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

    /// Checks again every plan whose files changed since last seen, and swaps in those that pass;
    /// then checks the plan files new in the watched patterns, and adds those that pass.
    pub fn refresh(&self, options: &BuildOptions) -> Vec<Change> {
        let Ok(mut seen) = self.seen.lock() else {
            return Vec::new();
        };
        let mut changes = Vec::new();
        for (path, fingerprint) in seen.iter_mut() {
            let now = Fingerprint::of(path);
            if now == *fingerprint {
                continue;
            }
            *fingerprint = now;
            changes.push(self.check(path.clone(), options, false));
        }
        // A glob that matches nothing now, or a directory gone, has no new files.
        for path in expand(&self.patterns).unwrap_or_default() {
            if seen.iter().any(|(known, _)| *known == path) {
                continue;
            }
            seen.push((path.clone(), Fingerprint::of(&path)));
            changes.push(self.check(path, options, true));
        }
        changes
    }

    /// Checks and builds the plan at `path` (`new` to the catalog or not) and serves it if it
    /// passes.
    fn check(&self, path: PathBuf, options: &BuildOptions, new: bool) -> Change {
        match load(&path, options) {
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
            expand(std::slice::from_ref(&text)).expect("expanded"),
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
        let plans = [&a, &b].map(|p| load(p, &quiet()).ok().expect("valid"));
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
        let catalog =
            Catalog::new(vec![load(&path, &quiet()).ok().expect("valid")]).expect("catalog");
        assert!(catalog.refresh(&quiet()).is_empty(), "nothing changed");
        write(&path, "second-name");
        let changes = catalog.refresh(&quiet());
        assert!(matches!(&changes[..], [Change::Swapped { name, .. }] if name == "second-name"));
        assert!(catalog.get("first").is_none() && catalog.get("second-name").is_some());
        std::fs::write(&path, "version: 1\nname: broken\nsteps: 3\n").expect("written");
        let changes = catalog.refresh(&quiet());
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
    fn a_plan_file_new_in_a_served_directory_is_served_once_it_passes() {
        let dir = tempfile::tempdir().expect("temp dir");
        let first = dir.path().join("a.yaml");
        write(&first, "first");
        let pattern = dir.path().to_string_lossy().into_owned();
        let catalog = Catalog::new(vec![load(&first, &quiet()).ok().expect("valid")])
            .expect("catalog")
            .watching(vec![pattern]);
        assert!(catalog.refresh(&quiet()).is_empty(), "nothing new");
        let added = dir.path().join("b.yaml");
        std::fs::write(&added, "version: 1\nname: broken\nsteps: 3\n").expect("written");
        let changes = catalog.refresh(&quiet());
        assert!(matches!(&changes[..], [Change::Kept { path, .. }] if *path == added));
        assert!(catalog.get("broken").is_none());
        write(&added, "second");
        let changes = catalog.refresh(&quiet());
        assert!(matches!(&changes[..], [Change::Swapped { name, .. }] if name == "second"));
        let third = dir.path().join("c.yaml");
        write(&third, "third");
        let changes = catalog.refresh(&quiet());
        assert!(matches!(&changes[..], [Change::Added { name, .. }] if name == "third"));
        assert_eq!(catalog.all().len(), 3);
        assert!(
            catalog.refresh(&quiet()).is_empty(),
            "each file is taken in once"
        );
    }
}
