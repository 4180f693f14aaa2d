//! GGUF files built byte by byte for the tests of this module's header check and re-quantiser.

use std::path::Path;

use half::f16;

/// A GGUF v3 file under construction: the counts first, then whatever the test appends.
pub struct GgufBytes {
    pub bytes: Vec<u8>,
}

impl GgufBytes {
    pub fn new(tensors: u64, entries: u64) -> Self {
        let mut bytes = b"GGUF".to_vec();
        bytes.extend(3u32.to_le_bytes());
        bytes.extend(tensors.to_le_bytes());
        bytes.extend(entries.to_le_bytes());
        GgufBytes { bytes }
    }
    pub fn string(mut self, text: &str) -> Self {
        self.bytes.extend((text.len() as u64).to_le_bytes());
        self.bytes.extend(text.as_bytes());
        self
    }
    pub fn u32(mut self, value: u32) -> Self {
        self.bytes.extend(value.to_le_bytes());
        self
    }
    pub fn u64(mut self, value: u64) -> Self {
        self.bytes.extend(value.to_le_bytes());
        self
    }
    pub fn raw(mut self, bytes: &[u8]) -> Self {
        self.bytes.extend(bytes);
        self
    }
    pub fn padding(self, count: usize) -> Self {
        self.raw(&vec![0u8; count])
    }
    /// Zero bytes up to the next multiple of 32 (where tensor data starts by default).
    pub fn align(self) -> Self {
        let length = self.bytes.len();
        self.padding(length.next_multiple_of(32) - length)
    }
    /// A metadata entry with a string value.
    pub fn text_entry(self, key: &str, value: &str) -> Self {
        self.string(key).u32(8).string(value)
    }
    /// A tensor list entry: name, dimensions, ggml type code, data offset.
    pub fn tensor(self, name: &str, dimensions: &[u64], code: u32, offset: u64) -> Self {
        let mut gguf = self.string(name).u32(dimensions.len() as u32);
        for &d in dimensions {
            gguf = gguf.u64(d);
        }
        gguf.u32(code).u64(offset)
    }
    pub fn write(&self, path: &Path) {
        std::fs::write(path, &self.bytes).expect("written");
    }
}

/// A Q5_0 block with scale `scale` whose 32 weights are `scale × (q − 16)` for the given `q`s
/// (each below 32).
pub fn q5_0_block(scale: f32, q: [u8; 32]) -> [u8; 22] {
    let mut block = [0u8; 22];
    block[..2].copy_from_slice(&f16::from_f32(scale).to_le_bytes());
    let mut high_bits = 0u32;
    for j in 0..16 {
        let (low, high) = (q[j], q[j + 16]);
        block[6 + j] = (low & 0x0F) | ((high & 0x0F) << 4);
        high_bits |= u32::from(low >> 4) << j;
        high_bits |= u32::from(high >> 4) << (j + 16);
    }
    block[2..6].copy_from_slice(&high_bits.to_le_bytes());
    block
}
