//! GGUF files: what is in them (checked before mistral.rs sees them) and the Q5_0 → Q8_0
//! re-quantisation that makes the embedded model fast on CPU.
//!
//! mistral.rs panics on an architecture it does not support (e.g. `gemma3`) and fails obscurely on
//! a truncated file, and the GGUF reader aborts the process on a header whose lengths are absurd,
//! so [`inspect`] checks the whole header first ([`header`]) and turns all of these into clear
//! failures.
//!
//! The embedded Qwen2.5 "Q4_K_M" file is mostly Q5_0 tensors (its hidden size, 896, is not a
//! multiple of 256, so llama.cpp fell back to Q5_0), and candle has no SIMD kernel for Q5_0: about
//! 70% of prefill time goes to a scalar loop. Q8_0 has an AVX2 kernel; [`requantize`] converts
//! every Q5_0 tensor to Q8_0 once, at pull time (measured: prefill ~2×, decode ~1.25×; the file
//! grows from 491 MB to 637 MB; answers unchanged on our probes).

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufReader, BufWriter};
use std::path::Path;

use candle_core::Device;
use candle_core::quantized::{GgmlDType, QTensor, gguf_file};

use crate::core::{Failure, FailureCode};

mod header;

/// Architectures mistral.rs 0.8.1 can run from GGUF.
pub const SUPPORTED_ARCHITECTURES: &[&str] = &[
    "llama",
    "mistral3",
    "phi2",
    "phi3",
    "starcoder2",
    "qwen2",
    "qwen3",
    "qwen3moe",
];

/// What a GGUF file holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GgufSummary {
    pub architecture: String,
    pub tensors: usize,
    /// Tensor count per quantisation type, e.g. `Q5_0: 133`.
    pub dtypes: BTreeMap<String, usize>,
}

fn unusable(path: &Path, reason: impl std::fmt::Display) -> Failure {
    Failure::new(
        FailureCode::InferenceModelUnavailable,
        format!("{} is not a usable GGUF model: {reason}", path.display()),
    )
    .with_help(
        "re-download it (`pagantic models pull`), or point `source:` at a complete .gguf file",
    )
}

fn open(path: &Path) -> Result<File, Failure> {
    File::open(path).map_err(|e| {
        Failure::new(
            FailureCode::InferenceModelUnavailable,
            format!("cannot open {}: {e}", path.display()),
        )
        .with_help("check the path, or run `pagantic models pull` for the embedded model")
    })
}

fn read_content(path: &Path) -> Result<(gguf_file::Content, BufReader<File>), Failure> {
    let file = open(path)?;
    // The library allocates whatever the header claims; nothing reaches it unchecked.
    let own = File::open(path).map_err(|e| unusable(path, e))?;
    header::check(own).map_err(|problem| unusable(path, problem))?;
    let mut reader = BufReader::new(file);
    let content = gguf_file::Content::read(&mut reader).map_err(|e| unusable(path, e))?;
    Ok((content, reader))
}

/// Reads a GGUF header and checks that mistral.rs can run the model (one pass over the header,
/// [`header::check`]'s).
pub fn inspect(path: &Path) -> Result<GgufSummary, Failure> {
    let header = header::check(open(path)?).map_err(|problem| unusable(path, problem))?;
    let architecture = header
        .architecture
        .ok_or_else(|| unusable(path, "it has no `general.architecture`"))?;
    if !SUPPORTED_ARCHITECTURES.contains(&architecture.as_str()) {
        return Err(Failure::new(
            FailureCode::InferenceModelUnavailable,
            format!(
                "{} is a `{architecture}` model, which mistral.rs 0.8.1 cannot run from GGUF",
                path.display()
            ),
        )
        .with_help(format!(
            "supported architectures: {}",
            SUPPORTED_ARCHITECTURES.join(", ")
        )));
    }
    let mut dtypes = BTreeMap::new();
    for dtype in &header.tensor_types {
        *dtypes.entry(format!("{dtype:?}")).or_insert(0) += 1;
    }
    Ok(GgufSummary {
        architecture,
        tensors: header.tensor_types.len(),
        dtypes,
    })
}

/// Writes a copy of `source` with every Q5_0 tensor re-quantised to Q8_0 (others unchanged);
/// returns how many tensors were converted. Tensors and metadata are written in name order, so
/// the same input always gives the same bytes.
pub fn requantize(source: &Path, target: &Path) -> Result<usize, Failure> {
    let (content, mut reader) = read_content(source)?;
    let failed = |e: candle_core::Error| {
        Failure::new(
            FailureCode::InferenceModelUnavailable,
            format!("re-quantising {}: {e}", source.display()),
        )
    };
    let mut names: Vec<&String> = content.tensor_infos.keys().collect();
    names.sort();
    let mut tensors: Vec<(String, QTensor)> = Vec::with_capacity(names.len());
    let mut converted = 0;
    for name in names {
        let tensor = content
            .tensor(&mut reader, name, &Device::Cpu)
            .map_err(failed)?;
        let tensor = if tensor.dtype() == GgmlDType::Q5_0 {
            converted += 1;
            let values = tensor.dequantize(&Device::Cpu).map_err(failed)?;
            QTensor::quantize(&values, GgmlDType::Q8_0).map_err(failed)?
        } else {
            tensor
        };
        tensors.push((name.clone(), tensor));
    }
    let mut metadata: Vec<(&str, &gguf_file::Value)> = content
        .metadata
        .iter()
        .map(|(k, v)| (k.as_str(), v))
        .collect();
    metadata.sort_by(|a, b| a.0.cmp(b.0));
    let tensor_refs: Vec<(&str, &QTensor)> = tensors.iter().map(|(n, t)| (n.as_str(), t)).collect();
    let file = File::create(target).map_err(|e| {
        Failure::new(
            FailureCode::ConfigFileError,
            format!("cannot write {}: {e}", target.display()),
        )
    })?;
    let mut writer = BufWriter::new(file);
    gguf_file::write(&mut writer, &metadata, &tensor_refs).map_err(failed)?;
    writer
        .into_inner()
        .map_err(|e| {
            Failure::new(
                FailureCode::ConfigFileError,
                format!("cannot write {}: {e}", target.display()),
            )
        })?
        .sync_all()
        .map_err(|e| {
            Failure::new(
                FailureCode::ConfigFileError,
                format!("cannot write {}: {e}", target.display()),
            )
        })?;
    Ok(converted)
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Tensor;

    /// A path named `name` in a directory of its own, removed with the returned guard.
    fn scratch(name: &str) -> (tempfile::TempDir, std::path::PathBuf) {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join(name);
        (dir, path)
    }

    /// A tiny GGUF file: one Q5_0 tensor and one F32 tensor, with the given architecture.
    fn tiny(path: &Path, architecture: &str) {
        let values = Tensor::arange(0f32, 64f32, &Device::Cpu)
            .expect("arange")
            .reshape((2, 32))
            .expect("reshape");
        let q5 = QTensor::quantize(&values, GgmlDType::Q5_0).expect("q5");
        let f32 = QTensor::quantize(&values, GgmlDType::F32).expect("f32");
        let arch = gguf_file::Value::String(architecture.into());
        let mut file = File::create(path).expect("create");
        gguf_file::write(
            &mut file,
            &[("general.architecture", &arch)],
            &[("a.weight", &q5), ("b.weight", &f32)],
        )
        .expect("write");
    }

    #[test]
    fn supported_models_are_summarised() {
        let (_path_dir, path) = scratch("ok.gguf");
        tiny(&path, "qwen2");
        let summary = inspect(&path).expect("supported");
        assert_eq!(summary.architecture, "qwen2");
        assert_eq!(summary.tensors, 2);
        assert_eq!(summary.dtypes.get("Q5_0"), Some(&1));
    }

    #[test]
    fn unsupported_architectures_and_broken_files_are_failures_not_panics() {
        let (_gemma_dir, gemma) = scratch("gemma.gguf");
        tiny(&gemma, "gemma3");
        let failure = inspect(&gemma).expect_err("gemma3 is unsupported");
        assert_eq!(failure.code, FailureCode::InferenceModelUnavailable);
        assert!(
            failure.message.contains("`gemma3` model"),
            "{}",
            failure.message
        );

        let (_truncated_dir, truncated) = scratch("truncated.gguf");
        tiny(&truncated, "qwen2");
        let bytes = std::fs::read(&truncated).expect("read");
        std::fs::write(&truncated, &bytes[..bytes.len() - 40]).expect("cut");
        assert!(
            inspect(&truncated)
                .expect_err("truncated")
                .message
                .contains("truncated")
        );

        let (_junk_dir, junk) = scratch("junk.gguf");
        std::fs::write(&junk, b"not a gguf file at all").expect("write");
        assert_eq!(
            inspect(&junk).map_err(|f| f.code),
            Err(FailureCode::InferenceModelUnavailable)
        );

        let (_missing_dir, missing) = scratch("missing.gguf");
        assert!(
            inspect(&missing)
                .expect_err("missing")
                .message
                .contains("cannot open")
        );
    }

    #[test]
    fn requantizing_turns_q5_0_into_q8_0_and_keeps_values_close() {
        let (_source_dir, source) = scratch("source.gguf");
        let (_target_dir, target) = scratch("target.gguf");
        tiny(&source, "qwen2");
        assert_eq!(requantize(&source, &target).expect("requantized"), 1);
        let summary = inspect(&target).expect("readable");
        assert_eq!(summary.dtypes.get("Q8_0"), Some(&1));
        assert_eq!(summary.dtypes.get("Q5_0"), None);
        let values = |path: &Path| {
            let (content, mut reader) = read_content(path).expect("content");
            content
                .tensor(&mut reader, "a.weight", &Device::Cpu)
                .expect("tensor")
                .dequantize(&Device::Cpu)
                .expect("dequantize")
                .flatten_all()
                .expect("flat")
                .to_vec1::<f32>()
                .expect("values")
        };
        // Q8_0 of the Q5_0 values loses far less than Q5_0 itself did.
        for (before, after) in values(&source).iter().zip(values(&target)) {
            assert!((before - after).abs() < 0.5, "{before} became {after}");
        }
        let (_again_dir, again) = scratch("again.gguf");
        requantize(&source, &again).expect("again");
        assert_eq!(
            std::fs::read(&target).expect("a"),
            std::fs::read(&again).expect("b"),
            "deterministic"
        );
    }
}
