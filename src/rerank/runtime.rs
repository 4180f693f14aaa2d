//! The ONNX Runtime library: found, checked and loaded once per process, and the sessions made
//! from it.
//!
//! The library is `$ORT_DYLIB_PATH` when that is set, else the one `pagantic models pull` stores
//! (pulled on first use, like the default LLM). ort would panic on a library it cannot load if
//! it were left to find one itself, so the library is always loaded here first, explicitly, and
//! every way that can fail — a missing file, a file that is not a shared library or not ONNX
//! Runtime, a version older than the API ort 2.0.0-rc.15 needs (1.31) — is a failure with the
//! fix. No ort call is made unless loading succeeded.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use ort::environment::Environment;
use ort::session::Session;
use ort::session::builder::GraphOptimizationLevel;

use crate::core::{Failure, FailureCode};
use crate::model_store::{self, Notice, describe_pull};

/// The environment variable naming the library to load instead of the pulled one.
pub const LIBRARY_VARIABLE: &str = "ORT_DYLIB_PATH";

/// The process's ONNX Runtime environment, or why there is none (remembered: the library is
/// loaded at most once per process).
static RUNTIME: OnceLock<Result<Environment, Failure>> = OnceLock::new();

/// How a session runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OnnxSessionOptions {
    /// Threads one inference may use.
    pub intra_threads: usize,
}

/// Loads `model` into a session on the process's runtime, loading the runtime first if needed.
pub fn session(
    model: &Path,
    options: OnnxSessionOptions,
    notice: &Notice,
) -> Result<Session, Failure> {
    let environment = RUNTIME
        .get_or_init(|| library_path(notice).and_then(|path| load(&path)))
        .as_ref()
        .map_err(Clone::clone)?;
    let unreadable = |reason: String| {
        Failure::new(
            FailureCode::InferenceModelUnavailable,
            format!("ONNX Runtime cannot load {}: {reason}", model.display()),
        )
        .with_help("check that the file is an ONNX model (opset supported by ONNX Runtime 1.31)")
    };
    let text = |e: ort::Error| e.to_string();
    let text_of_builder = |e: ort::Error<_>| e.to_string();
    let build = || -> Result<Session, String> {
        Session::builder(environment)
            .map_err(text)?
            .with_optimization_level(GraphOptimizationLevel::All)
            .map_err(text_of_builder)?
            .with_intra_threads(options.intra_threads)
            .map_err(text_of_builder)?
            .with_inter_threads(1)
            .map_err(text_of_builder)?
            .commit_from_file(model)
            .map_err(text)
    };
    build().map_err(unreadable)
}

/// `$ORT_DYLIB_PATH`, else the pulled library (pulling it if the store lacks it).
fn library_path(notice: &Notice) -> Result<PathBuf, Failure> {
    match std::env::var_os(LIBRARY_VARIABLE) {
        Some(path) if !path.is_empty() => Ok(PathBuf::from(path)),
        _ => model_store::ensure(&model_store::ONNX_RUNTIME, &mut |progress| {
            if let Some(line) = describe_pull(&model_store::ONNX_RUNTIME, &progress) {
                notice(&line);
            }
        }),
    }
}

/// Loads the library at `path` and creates the environment.
fn load(path: &Path) -> Result<Environment, Failure> {
    if !path.is_file() {
        return Err(library_failure(
            path,
            "does not exist".into(),
            "run `pagantic models pull`, or set ORT_DYLIB_PATH to libonnxruntime.so.1.31.1",
        ));
    }
    let loaded = std::panic::catch_unwind(|| ort::init_from(path)).map_err(|_| {
        library_failure(
            path,
            "could not be loaded (ONNX Runtime panicked)".into(),
            FIX,
        )
    })?;
    let builder = loaded.map_err(|e| explain(path, &e))?;
    builder
        .with_name("pagantic")
        .build()
        .map_err(|e| library_failure(path, format!("could not create an environment: {e}"), FIX))
}

const FIX: &str = "unset ORT_DYLIB_PATH to use the library `pagantic models pull` stores, or point it at libonnxruntime.so.1.31.1 from the onnxruntime 1.31.1 wheel";

/// What went wrong loading the library, in words, with the fix.
fn explain(path: &Path, error: &ort::LoadDynamicError) -> Failure {
    use ort::LoadDynamicError as E;
    let reason = match error {
        E::Dlopen { error, .. } => format!("is not a loadable shared library: {error}"),
        E::MissingApi { .. } => "is not ONNX Runtime (it exports no OrtGetApiBase)".into(),
        E::InvalidVersionString => "is not ONNX Runtime (its version string is malformed)".into(),
        E::BadVersion { version_str, .. } => format!(
            "is ONNX Runtime {version_str}; pagantic needs 1.{} or later",
            ort::MINOR_VERSION
        ),
    };
    library_failure(path, reason, FIX)
}

fn library_failure(path: &Path, reason: String, help: &str) -> Failure {
    Failure::new(
        FailureCode::InferenceModelUnavailable,
        format!("the ONNX Runtime library {} {reason}", path.display()),
    )
    .with_help(help)
}

/// Fails a test that needs the ONNX Runtime library with the fix, rather than pulling it.
#[cfg(test)]
pub(super) fn require_library() {
    let set = std::env::var_os(LIBRARY_VARIABLE).is_some_and(|v| !v.is_empty());
    assert!(
        set || model_store::cached_file(&model_store::ONNX_RUNTIME).is_some(),
        "this test needs the ONNX Runtime library: run `cargo run -- models pull` first (or set ORT_DYLIB_PATH)"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_old_runtime_is_explained_with_the_version_needed() {
        let path = Path::new("/opt/libonnxruntime.so.1.20.0");
        let failure = explain(
            path,
            &ort::LoadDynamicError::BadVersion {
                version_str: "1.20.0".into(),
                path: path.to_path_buf(),
            },
        );
        assert_eq!(failure.code, FailureCode::InferenceModelUnavailable);
        assert_eq!(
            failure.message,
            "the ONNX Runtime library /opt/libonnxruntime.so.1.20.0 is ONNX Runtime 1.20.0; pagantic needs 1.31 or later"
        );
        assert!(failure.help.is_some_and(|h| h.contains("ORT_DYLIB_PATH")));
    }
}
