//! Re-quantisation of a GGUF file's Q5_0, Q4_K and Q6_K tensors to Q8_0, streamed tensor by
//! tensor.
//!
//! The embedded Qwen2.5 "Q4_K_M" file is mostly Q5_0 tensors (its hidden size, 896, is not a
//! multiple of 256, so llama.cpp fell back to Q5_0), and candle has no SIMD kernel for Q5_0: about
//! 70% of prefill time went to a scalar loop. Q8_0 has an AVX2 kernel, and in candle 0.10 it is
//! also faster than the Q4_K and Q6_K kernels the file's `ffn_down` tensors use. [`requantize`]
//! converts all three types to Q8_0 once, at pull time (measured: Q5_0 alone gave prefill ~2×,
//! decode ~1.25×; Q4_K and Q6_K as well about 1.2× more on both; the file grows from 491 MB to
//! 676 MB).
//!
//! Each block's weights are decoded exactly as ggml (and candle) decode them — checked bit for
//! bit against candle on every such tensor of the embedded model — and re-encoded 32 at a time
//! as ggml quantises Q8_0: scale = the largest magnitude / 127, each weight rounded to the nearest
//! multiple of it. Every other tensor, and every metadata entry, is copied byte for byte. The
//! output is a version 2 header with the metadata sorted by key and the tensors by name, each
//! tensor's data padded to the file's alignment (the layout of candle's GGUF writer, which made
//! the derived files before), so the same original always gives the same derived file.

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

/// Writes a copy of `source` with every Q5_0, Q4_K and Q6_K tensor re-quantised to Q8_0 (others
/// unchanged); returns how many tensors were converted.
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
            files.requantize_to_q8_0(tensor.size, tensor.kind)?
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

    /// Reads `size` bytes of `from` blocks and writes their weights as Q8_0 blocks; returns the
    /// bytes written.
    fn requantize_to_q8_0(&mut self, size: u64, from: TensorType) -> Result<u64, Failure> {
        let blocks = size / from.block_bytes();
        let mut block = vec![0u8; from.block_bytes() as usize];
        let mut weights = Vec::with_capacity(from.block_elements() as usize);
        for _ in 0..blocks {
            self.reader
                .read_exact(&mut block)
                .map_err(|e| unusable(self.source, e))?;
            weights.clear();
            dequantize(from, &block, &mut weights);
            for chunk in weights.chunks_exact(BLOCK) {
                let chunk: &[f32; BLOCK] = chunk.try_into().unwrap_or(&[0.0; BLOCK]);
                self.write(&quantize_q8_0(chunk))?;
            }
        }
        Ok(blocks * from.block_elements() / BLOCK as u64 * TensorType::Q8_0.block_bytes())
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
                TensorType::Q5_0 | TensorType::Q4K | TensorType::Q6K => TensorType::Q8_0,
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
    let elements = tensor.size / tensor.kind.block_bytes() * tensor.kind.block_elements();
    elements / kind.block_elements() * kind.block_bytes()
}

/// Zero bytes that follow `length` bytes to reach the next multiple of `alignment`.
fn padding(length: u64, alignment: u64) -> u64 {
    length.next_multiple_of(alignment) - length
}

/// Appends the weights of one block of a type [`requantize`] converts.
fn dequantize(kind: TensorType, block: &[u8], weights: &mut Vec<f32>) {
    match kind {
        TensorType::Q5_0 => dequantize_q5_0(block, weights),
        TensorType::Q4K => dequantize_q4_k(block, weights),
        TensorType::Q6K => dequantize_q6_k(block, weights),
        _ => {}
    }
}

fn scale(bytes: &[u8]) -> f32 {
    f16::from_le_bytes([bytes[0], bytes[1]]).to_f32()
}

/// A Q5_0 block (22 bytes, 32 weights): an f16 scale, 32 high bits, then 16 bytes of low
/// nibbles (weights 0–15 in the low nibbles, 16–31 in the high); each weight is
/// `scale × (q − 16)`.
fn dequantize_q5_0(block: &[u8], weights: &mut Vec<f32>) {
    let d = scale(block);
    let high_bits = u32::from_le_bytes([block[2], block[3], block[4], block[5]]);
    let low = &block[6..22];
    weights.extend(low.iter().enumerate().map(|(j, &q)| {
        let high = (((high_bits >> j) << 4) & 0x10) as u8;
        f32::from(((q & 0x0F) | high) as i8 - 16) * d
    }));
    weights.extend(low.iter().enumerate().map(|(j, &q)| {
        let high = ((high_bits >> (j + 12)) & 0x10) as u8;
        f32::from(((q >> 4) | high) as i8 - 16) * d
    }));
}

/// A Q4_K block (144 bytes, 256 weights): f16 `d` and `dmin`, 12 bytes packing eight 6-bit
/// scales and mins, then 128 bytes of nibbles; the weights come in four runs of 64, each the low
/// then the high nibbles of 32 bytes, weight = `d × scale × q − dmin × min` with its 32's pair.
fn dequantize_q4_k(block: &[u8], weights: &mut Vec<f32>) {
    let (d, dmin) = (scale(&block[0..2]), scale(&block[2..4]));
    let packed = &block[4..16];
    for (run, quants) in block[16..144].chunks_exact(32).enumerate() {
        for (half, shift) in [(0, 0), (1, 4)] {
            let (sc, m) = scale_min_k4(2 * run + half, packed);
            let (d, min) = (d * f32::from(sc), dmin * f32::from(m));
            weights.extend(
                quants
                    .iter()
                    .map(|q| d * f32::from((q >> shift) & 0xF) - min),
            );
        }
    }
}

/// The `j`-th 6-bit scale and min of a Q4_K block's 12 packed bytes.
fn scale_min_k4(j: usize, q: &[u8]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        (
            (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4),
            (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
        )
    }
}

/// A Q6_K block (210 bytes, 256 weights): 128 bytes of low nibbles, 64 of high 2-bit pairs,
/// 16 signed 8-bit scales (one per 16 weights), then an f16 `d`; weight = `d × scale × (q − 32)`.
/// Two halves of 128 weights, each drawn from 64 low bytes and 32 high bytes in four strands.
fn dequantize_q6_k(block: &[u8], weights: &mut Vec<f32>) {
    let d = scale(&block[208..210]);
    let start = weights.len();
    weights.resize(start + 256, 0.0);
    for half in 0..2 {
        let low = &block[64 * half..64 * half + 64];
        let high = &block[128 + 32 * half..128 + 32 * half + 32];
        let scales = &block[192 + 8 * half..192 + 8 * half + 8];
        let out = &mut weights[start + 128 * half..start + 128 * half + 128];
        for l in 0..32 {
            let is = l / 16;
            let quants = [
                (low[l] & 0xF) | ((high[l] & 3) << 4),
                (low[l + 32] & 0xF) | (((high[l] >> 2) & 3) << 4),
                (low[l] >> 4) | (((high[l] >> 4) & 3) << 4),
                (low[l + 32] >> 4) | (((high[l] >> 6) & 3) << 4),
            ];
            for (strand, q) in quants.into_iter().enumerate() {
                let sc = f32::from(scales[is + 2 * strand] as i8);
                out[l + 32 * strand] = d * sc * f32::from(q as i8 - 32);
            }
        }
    }
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
    use crate::model_store::gguf::test_file::q5_0_block;

    #[test]
    fn q5_0_blocks_decode_to_their_weights() {
        let q: [u8; BLOCK] = std::array::from_fn(|i| i as u8);
        let mut weights = Vec::new();
        dequantize(TensorType::Q5_0, &q5_0_block(0.5, q), &mut weights);
        let expected: Vec<f32> = (0..BLOCK).map(|i| (i as f32 - 16.0) * 0.5).collect();
        assert_eq!(weights, expected);
    }

    #[test]
    fn q4_k_blocks_decode_to_their_weights() {
        // d 1, dmin 0.5; eight 6-bit scales 1…8 and mins 0,1,0,1,…: the first four of each in
        // bytes 0–7, the low nibbles of the last four in bytes 8–11 (their high bits are 0).
        let (scales, mins) = ([1u8, 2, 3, 4, 5, 6, 7, 8], [0u8, 1, 0, 1, 0, 1, 0, 1]);
        let mut block = Vec::new();
        block.extend(f16::from_f32(1.0).to_le_bytes());
        block.extend(f16::from_f32(0.5).to_le_bytes());
        block.extend(&scales[..4]);
        block.extend(&mins[..4]);
        block.extend((4..8).map(|j| scales[j] | (mins[j] << 4)));
        // Byte i holds i % 16 in its low nibble and 15 − i % 16 in its high one.
        block.extend((0..128u8).map(|i| (i % 16) | ((15 - i % 16) << 4)));
        let mut weights = Vec::new();
        dequantize(TensorType::Q4K, &block, &mut weights);
        assert_eq!(weights.len(), 256);
        // Weight 32 + i of run r is byte 32r + i's high nibble, under scale/min 2r + 1.
        assert_eq!(weights[0], 0.0);
        assert_eq!(weights[32], 2.0 * 15.0 - 0.5);
        assert_eq!(weights[64 + 5], 3.0 * 5.0);
        assert_eq!(weights[255], 8.0 * 0.0 - 0.5);
    }

    #[test]
    fn q6_k_blocks_decode_to_their_weights() {
        // Low bytes 0x21 (nibbles 1 and 2), high bytes 0b11_10_01_00 (pairs 0, 1, 2, 3): the
        // four strands' quants are 1, 1 + 16, 2 + 32, 2 + 48, less 32.
        let scales: [i8; 16] =
            std::array::from_fn(|i| if i % 2 == 0 { i as i8 + 1 } else { -(i as i8) });
        let mut block = vec![0x21u8; 128];
        block.extend([0b1110_0100u8; 64]);
        block.extend(scales.iter().map(|&s| s as u8));
        block.extend(f16::from_f32(0.5).to_le_bytes());
        let mut weights = Vec::new();
        dequantize(TensorType::Q6K, &block, &mut weights);
        assert_eq!(weights.len(), 256);
        let weight = |half: usize, strand: usize, l: usize| {
            let q = [-31.0, -15.0, 2.0, 18.0][strand];
            0.5 * f32::from(scales[8 * half + l / 16 + 2 * strand]) * q
        };
        for (half, strand, l) in [(0, 0, 0), (0, 1, 0), (0, 2, 16), (1, 3, 31), (1, 0, 17)] {
            assert_eq!(
                weights[128 * half + 32 * strand + l],
                weight(half, strand, l)
            );
        }
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
