//! GGUF files: what is in them (checked before mistral.rs sees them) and the re-quantisation to
//! Q8_0 that makes the embedded model fast on CPU ([`requantize`]).
//!
//! mistral.rs panics on an architecture it does not support (e.g. `gemma3`) and fails obscurely on
//! a truncated file, and the GGUF reader aborts the process on a header whose lengths are absurd,
//! so [`inspect`] checks the whole header first ([`header`]) and turns all of these into clear
//! failures. Neither reads the file through candle: the format is pagantic's own code here, so a
//! mistral.rs on another candle version needs no change in this module.

use std::collections::BTreeMap;
use std::fs::File;
use std::path::Path;

use crate::core::{Failure, FailureCode};

mod header;
mod requantize;
mod tensor_type;
#[cfg(test)]
mod test_file;

pub use requantize::requantize;

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
    /// The context the model was trained for (`<architecture>.context_length`), when the file
    /// says.
    pub context_length: Option<u64>,
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
    for tensor in &header.tensors {
        *dtypes.entry(format!("{:?}", tensor.kind)).or_insert(0) += 1;
    }
    let context_key = format!("{architecture}.context_length");
    let context_length = header
        .context_lengths
        .iter()
        .find(|(key, _)| *key == context_key)
        .map(|&(_, tokens)| tokens);
    Ok(GgufSummary {
        architecture,
        tensors: header.tensors.len(),
        dtypes,
        context_length,
    })
}

#[cfg(test)]
mod tests {
    use super::tensor_type::TensorType;
    use super::*;
    use crate::model_store::gguf::test_file::{GgufBytes, q5_0_block};

    /// A path named `name` in a directory of its own, removed with the returned guard.
    fn scratch(name: &str) -> (tempfile::TempDir, std::path::PathBuf) {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join(name);
        (dir, path)
    }

    /// The scales of the two Q5_0 blocks of `a.weight` in [`tiny`].
    const A_SCALES: [f32; 2] = [0.5, 0.25];

    /// The 64 weights of `a.weight`: in each block, its scale × (q − 16) for q = 0 … 31.
    fn a_weights() -> Vec<f32> {
        (0..64)
            .map(|i| ((i % 32) as f32 - 16.0) * A_SCALES[i / 32])
            .collect()
    }

    /// A tiny GGUF file with the given architecture: its metadata out of key order, an F32
    /// tensor `b.weight` (4 weights) listed before a Q5_0 tensor `a.weight` (2 blocks, 32 × 2),
    /// then a Q4_K tensor `c.weight` of one all-zero block (256 weights of 0).
    fn tiny(path: &Path, architecture: &str) {
        let blocks: Vec<u8> = A_SCALES
            .iter()
            .flat_map(|&scale| q5_0_block(scale, std::array::from_fn(|q| q as u8)))
            .collect();
        let b: Vec<u8> = [1.5f32, -2.0, 0.0, 3.25]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        GgufBytes::new(3, 2)
            .text_entry("zz.note", "listed first")
            .text_entry("general.architecture", architecture)
            .tensor("b.weight", &[4], 0, 0)
            .tensor("a.weight", &[32, 2], 6, 32)
            .tensor("c.weight", &[256], 12, 96)
            .align()
            .raw(&b)
            .align()
            .raw(&blocks)
            .align()
            .raw(&[0u8; 144])
            .align()
            .write(path);
    }

    /// The weights of a Q8_0 tensor's blocks.
    fn q8_0_weights(data: &[u8]) -> Vec<f32> {
        data.chunks(34)
            .flat_map(|block| {
                let scale = half::f16::from_le_bytes([block[0], block[1]]).to_f32();
                block[2..].iter().map(move |&q| f32::from(q as i8) * scale)
            })
            .collect()
    }

    #[test]
    fn the_context_length_of_the_file_s_own_architecture_is_read() {
        let (_path_dir, path) = scratch("context.gguf");
        GgufBytes::new(0, 3)
            .string("llama.context_length")
            .u32(4)
            .u32(99)
            .text_entry("general.architecture", "qwen2")
            .string("qwen2.context_length")
            .u32(10)
            .u64(32768)
            .write(&path);
        assert_eq!(
            inspect(&path).expect("supported").context_length,
            Some(32768)
        );
        tiny(&path, "qwen2");
        assert_eq!(inspect(&path).expect("supported").context_length, None);
    }

    #[test]
    fn supported_models_are_summarised() {
        let (_path_dir, path) = scratch("ok.gguf");
        tiny(&path, "qwen2");
        let summary = inspect(&path).expect("supported");
        assert_eq!(summary.architecture, "qwen2");
        assert_eq!(summary.tensors, 3);
        assert_eq!(summary.dtypes.get("Q5_0"), Some(&1));
        assert_eq!(summary.dtypes.get("Q4K"), Some(&1));
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
    fn requantizing_turns_q5_0_into_q8_0_keeps_the_rest_and_sorts_the_layout() {
        let (_source_dir, source) = scratch("source.gguf");
        let (_target_dir, target) = scratch("target.gguf");
        tiny(&source, "qwen2");
        assert_eq!(requantize(&source, &target).expect("requantized"), 2);
        let summary = inspect(&target).expect("readable");
        assert_eq!(summary.dtypes.get("Q8_0"), Some(&2));
        assert_eq!(summary.dtypes.get("Q5_0"), None);
        assert_eq!(summary.dtypes.get("Q4K"), None);

        let read = |path: &Path| {
            let header = header::check(File::open(path).expect("open")).expect("checked");
            (header, std::fs::read(path).expect("read"))
        };
        let (before, source_bytes) = read(&source);
        let (after, target_bytes) = read(&target);
        assert_eq!(after.version, 2);
        let entry = |header: &header::Header, bytes: &[u8], key: &str| {
            let found = header
                .entries
                .iter()
                .find(|e| e.key.as_deref() == Some(key));
            let range = found.expect("entry").bytes.clone();
            bytes[range.start as usize..range.end as usize].to_vec()
        };
        let keys: Vec<_> = after.entries.iter().map(|e| e.key.clone()).collect();
        assert_eq!(
            keys,
            [Some("general.architecture".into()), Some("zz.note".into())]
        );
        for key in ["general.architecture", "zz.note"] {
            assert_eq!(
                entry(&before, &source_bytes, key),
                entry(&after, &target_bytes, key)
            );
        }
        let data = |header: &header::Header, bytes: &[u8], name: &str| {
            let tensor = header
                .tensors
                .iter()
                .find(|t| t.name.as_deref() == Some(name));
            let tensor = tensor.expect("tensor").clone();
            let start = (header.data_start + tensor.offset) as usize;
            let data = bytes[start..start + tensor.size as usize].to_vec();
            (tensor, data)
        };
        let names: Vec<_> = after.tensors.iter().map(|t| t.name.clone()).collect();
        assert_eq!(
            names,
            [
                Some("a.weight".into()),
                Some("b.weight".into()),
                Some("c.weight".into())
            ]
        );
        // 256 zero weights: eight Q8_0 blocks of scale 0 and quants 0.
        let (c, c_bytes) = data(&after, &target_bytes, "c.weight");
        assert_eq!((c.kind, c_bytes), (TensorType::Q8_0, vec![0u8; 8 * 34]));
        let (b_before, b_bytes) = data(&before, &source_bytes, "b.weight");
        let (b_after, b_copied) = data(&after, &target_bytes, "b.weight");
        assert_eq!((b_after.kind, b_copied), (b_before.kind, b_bytes));
        let (a, a_bytes) = data(&after, &target_bytes, "a.weight");
        assert_eq!((a.kind, a.dimensions), (TensorType::Q8_0, vec![32, 2]));
        // Q8_0 keeps each weight within half a step (the largest, 8, / 127 / 2), plus what
        // rounding the scale to f16 costs.
        let weights = a_weights();
        let kept = q8_0_weights(&a_bytes);
        assert_eq!(kept.len(), weights.len());
        for (weight, kept) in weights.iter().zip(kept) {
            assert!(
                (weight - kept).abs() <= 8.0 / 127.0 / 2.0 + 0.01,
                "{weight} became {kept}"
            );
        }

        let (_again_dir, again) = scratch("again.gguf");
        requantize(&source, &again).expect("again");
        assert_eq!(
            target_bytes,
            std::fs::read(&again).expect("b"),
            "deterministic"
        );
        // A derived file derived again is the same file: nothing left to convert, same layout.
        assert_eq!(requantize(&target, &again).expect("re-derived"), 0);
        assert_eq!(
            target_bytes,
            std::fs::read(&again).expect("c"),
            "a fixed point"
        );
    }
}
