//! Q5_0 → Q8_0 re-quantisation of a GGUF file, streamed tensor by tensor.
//!
//! The embedded Qwen2.5 "Q4_K_M" file is mostly Q5_0 tensors (its hidden size, 896, is not a
//! multiple of 256, so llama.cpp fell back to Q5_0), and candle has no SIMD kernel for Q5_0: about
//! 70% of prefill time went to a scalar loop. Q8_0 has an AVX2 kernel; [`requantize`] converts
//! every Q5_0 tensor to Q8_0 once, at pull time (measured: prefill ~2×, decode ~1.25×; the file
//! grows from 491 MB to 637 MB; answers unchanged on our probes).
//!
//! Each Q5_0 block of 32 weights becomes one Q8_0 block of the same 32 weights, computed as ggml
//! (and candle) quantise: scale = the largest magnitude / 127, each weight rounded to the nearest
//! multiple of it. Every other tensor, and every metadata entry, is copied byte for byte. The
//! output is a version 2 header with the metadata sorted by key and the tensors by name, each
//! tensor's data padded to the file's alignment — byte for byte the file candle's GGUF writer
//! made for earlier pulls, so the same original always gives the same derived file.

use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Seek, SeekFrom, Write};
use std::path::Path;

use half::f16;

use super::header::{self, Header, TensorInfo};
use super::tensor_type::TensorType;
use super::{open, unusable};
use crate::core::{Failure, FailureCode};

/// Weights per Q5_0 or Q8_0 block.
const BLOCK: usize = 32;

/// Writes a copy of `source` with every Q5_0 tensor re-quantised to Q8_0 (others unchanged);
/// returns how many tensors were converted.
pub fn requantize(source: &Path, target: &Path) -> Result<usize, Failure> {
    let header = header::check(open(source)?).map_err(|problem| unusable(source, problem))?;
    let layout = Layout::of(&header).map_err(|problem| unusable(source, problem))?;
    let mut files = Files {
        reader: BufReader::new(open(source)?),
        writer: BufWriter::new(File::create(target).map_err(|e| cannot_write(target, e))?),
        source,
        target,
    };
    let header_bytes = layout
        .header_bytes(&mut files.reader)
        .map_err(|e| unusable(source, e))?;
    files.write(&header_bytes)?;
    for (tensor, kind) in &layout.tensors {
        files.seek(header.data_start + tensor.offset)?;
        let size = if *kind == tensor.kind {
            files.copy(tensor.size)?
        } else {
            files.q5_0_to_q8_0(tensor.size)?
        };
        files.write(&vec![0u8; padding(size, layout.alignment) as usize])?;
    }
    let file = files
        .writer
        .into_inner()
        .map_err(|e| cannot_write(target, e))?;
    file.sync_all().map_err(|e| cannot_write(target, e))?;
    Ok(layout.converted)
}

/// The original being read and the derived file being written, with their paths for failures.
struct Files<'p> {
    reader: BufReader<File>,
    writer: BufWriter<File>,
    source: &'p Path,
    target: &'p Path,
}

impl Files<'_> {
    fn seek(&mut self, position: u64) -> Result<(), Failure> {
        self.reader
            .seek(SeekFrom::Start(position))
            .map(drop)
            .map_err(|e| unusable(self.source, e))
    }

    fn write(&mut self, bytes: &[u8]) -> Result<(), Failure> {
        self.writer
            .write_all(bytes)
            .map_err(|e| cannot_write(self.target, e))
    }

    /// Copies `size` bytes unchanged; returns `size`.
    fn copy(&mut self, size: u64) -> Result<u64, Failure> {
        let copied =
            std::io::copy(&mut (&mut self.reader).take(size), &mut self.writer).map_err(|e| {
                // `io::copy` does not say which side failed; on a model file, reading is likelier.
                unusable(
                    self.source,
                    format!("{e} (copying into {})", self.target.display()),
                )
            })?;
        if copied != size {
            return Err(unusable(self.source, "it ends inside a tensor"));
        }
        Ok(size)
    }

    /// Reads `size` bytes of Q5_0 blocks and writes them as Q8_0; returns the bytes written.
    fn q5_0_to_q8_0(&mut self, size: u64) -> Result<u64, Failure> {
        let blocks = size / TensorType::Q5_0.block_bytes();
        let mut q5 = [0u8; 22];
        for _ in 0..blocks {
            self.reader
                .read_exact(&mut q5)
                .map_err(|e| unusable(self.source, e))?;
            self.write(&quantize_q8_0(&dequantize_q5_0(&q5)))?;
        }
        Ok(blocks * TensorType::Q8_0.block_bytes())
    }
}

/// What the derived file holds, in the order it holds it.
struct Layout<'a> {
    /// The metadata entries, sorted by key: (key, where its bytes lie in the source).
    entries: Vec<(&'a str, std::ops::Range<u64>)>,
    /// The tensors sorted by name, each with the type it is written as.
    tensors: Vec<(&'a TensorInfo, TensorType)>,
    alignment: u64,
    /// Where tensor data starts in the derived file.
    data_start: u64,
    converted: usize,
}

impl<'a> Layout<'a> {
    fn of(header: &'a Header) -> Result<Self, header::Problem> {
        if header.version == 1 {
            return Err("it is a GGUF version 1 file, which pagantic does not re-quantise".into());
        }
        let mut entries = Vec::with_capacity(header.entries.len());
        for entry in &header.entries {
            let key = entry
                .key
                .as_deref()
                .ok_or("it has a metadata key too long to copy")?;
            entries.push((key, entry.bytes.clone()));
        }
        entries.sort_by(|a, b| a.0.cmp(b.0));
        let mut tensors = Vec::with_capacity(header.tensors.len());
        for tensor in &header.tensors {
            let name = tensor
                .name
                .as_deref()
                .ok_or("it has a tensor name too long to copy")?;
            let kind = match tensor.kind {
                TensorType::Q5_0 => TensorType::Q8_0,
                other => other,
            };
            tensors.push((name, tensor, kind));
        }
        tensors.sort_by(|a, b| a.0.cmp(b.0));
        let converted = tensors
            .iter()
            .filter(|(_, t, kind)| t.kind != *kind)
            .count();
        let mut layout = Layout {
            entries,
            tensors: tensors.into_iter().map(|(_, t, kind)| (t, kind)).collect(),
            alignment: header.alignment,
            data_start: 0,
            converted,
        };
        let header_length: u64 = 24
            + layout
                .entries
                .iter()
                .map(|(_, bytes)| bytes.end - bytes.start)
                .sum::<u64>()
            + layout
                .tensors
                .iter()
                .map(|(t, _)| tensor_info_length(t))
                .sum::<u64>();
        layout.data_start = header_length + padding(header_length, layout.alignment);
        Ok(layout)
    }

    /// The header: magic, version 2, counts, the metadata entries as the source has them, the
    /// tensor list with the new types and offsets, and the padding up to the data.
    fn header_bytes(&self, source: &mut BufReader<File>) -> std::io::Result<Vec<u8>> {
        let mut bytes = Vec::with_capacity(self.data_start as usize);
        bytes.extend(b"GGUF");
        bytes.extend(2u32.to_le_bytes());
        bytes.extend((self.tensors.len() as u64).to_le_bytes());
        bytes.extend((self.entries.len() as u64).to_le_bytes());
        for (_, range) in &self.entries {
            source.seek(SeekFrom::Start(range.start))?;
            let start = bytes.len();
            bytes.resize(start + (range.end - range.start) as usize, 0);
            source.read_exact(&mut bytes[start..])?;
        }
        let mut offset = 0u64;
        for (tensor, kind) in &self.tensors {
            let name = tensor.name.as_deref().unwrap_or_default();
            bytes.extend((name.len() as u64).to_le_bytes());
            bytes.extend(name.as_bytes());
            bytes.extend((tensor.dimensions.len() as u32).to_le_bytes());
            for dimension in &tensor.dimensions {
                bytes.extend(dimension.to_le_bytes());
            }
            bytes.extend(kind.code().to_le_bytes());
            bytes.extend(offset.to_le_bytes());
            let size = written_size(tensor, *kind);
            offset += size + padding(size, self.alignment);
        }
        bytes.resize(self.data_start as usize, 0);
        Ok(bytes)
    }
}

/// Bytes a tensor's entry takes in the tensor list.
fn tensor_info_length(tensor: &TensorInfo) -> u64 {
    let name = tensor.name.as_deref().unwrap_or_default().len() as u64;
    8 + name + 4 + 8 * tensor.dimensions.len() as u64 + 4 + 8
}

/// Bytes of a tensor's data when written as `kind`.
fn written_size(tensor: &TensorInfo, kind: TensorType) -> u64 {
    tensor.size / tensor.kind.block_bytes() * kind.block_bytes()
}

/// Zero bytes that follow `length` bytes to reach the next multiple of `alignment`.
fn padding(length: u64, alignment: u64) -> u64 {
    length.next_multiple_of(alignment) - length
}

/// The 32 weights of a Q5_0 block: an f16 scale, 32 high bits, then 16 bytes of low nibbles
/// (weights 0–15 in the low nibbles, 16–31 in the high); each weight is `scale × (q − 16)`.
fn dequantize_q5_0(block: &[u8; 22]) -> [f32; BLOCK] {
    let scale = f16::from_le_bytes([block[0], block[1]]).to_f32();
    let high_bits = u32::from_le_bytes([block[2], block[3], block[4], block[5]]);
    let mut weights = [0f32; BLOCK];
    for (j, &low) in block[6..].iter().enumerate() {
        let high_0 = (((high_bits >> j) << 4) & 0x10) as u8;
        let high_1 = ((high_bits >> (j + 12)) & 0x10) as u8;
        weights[j] = f32::from(((low & 0x0F) | high_0) as i8 - 16) * scale;
        weights[j + BLOCK / 2] = f32::from(((low >> 4) | high_1) as i8 - 16) * scale;
    }
    weights
}

/// A Q8_0 block of 32 weights: an f16 scale (the largest magnitude / 127), then each weight
/// divided by the scale and rounded, as one signed byte.
fn quantize_q8_0(weights: &[f32; BLOCK]) -> [u8; 34] {
    let largest = weights.iter().fold(0f32, |m, w| m.max(w.abs()));
    let scale = largest / 127.0;
    let inverse = if scale != 0.0 { 1.0 / scale } else { 0.0 };
    let mut block = [0u8; 34];
    block[..2].copy_from_slice(&f16::from_f32(scale).to_le_bytes());
    for (byte, weight) in block[2..].iter_mut().zip(weights) {
        *byte = (weight * inverse).round() as i8 as u8;
    }
    block
}

fn cannot_write(target: &Path, e: impl std::fmt::Display) -> Failure {
    Failure::new(
        FailureCode::ConfigFileError,
        format!("cannot write {}: {e}", target.display()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inference::gguf::test_file::q5_0_block;

    #[test]
    fn q5_0_blocks_decode_to_their_weights() {
        let q: [u8; BLOCK] = std::array::from_fn(|i| i as u8);
        let weights = dequantize_q5_0(&q5_0_block(0.5, q));
        let expected: [f32; BLOCK] = std::array::from_fn(|i| (i as f32 - 16.0) * 0.5);
        assert_eq!(weights, expected);
    }

    #[test]
    fn q8_0_blocks_are_ggmls_rounding_of_the_weights() {
        // Weights −16 … 15: scale 16/127, so −16 is −127 exactly and w becomes round(w × 127/16).
        let weights: [f32; BLOCK] = std::array::from_fn(|i| i as f32 - 16.0);
        let block = quantize_q8_0(&weights);
        assert_eq!(
            f16::from_le_bytes([block[0], block[1]]),
            f16::from_f32(16.0 / 127.0)
        );
        let quants: Vec<i8> = block[2..].iter().map(|&b| b as i8).collect();
        let expected: Vec<i8> = weights
            .iter()
            .map(|w| (w * 127.0 / 16.0).round() as i8)
            .collect();
        assert_eq!(quants, expected);
        assert_eq!(quants[0], -127);
        // All zeros: scale 0, quants 0 (no division by zero).
        assert_eq!(quantize_q8_0(&[0.0; BLOCK]), [0u8; 34]);
    }

    #[test]
    fn padding_reaches_the_next_multiple() {
        assert_eq!(padding(0, 32), 0);
        assert_eq!(padding(1, 32), 31);
        assert_eq!(padding(64, 32), 0);
        assert_eq!(padding(65, 64), 63);
    }
}
