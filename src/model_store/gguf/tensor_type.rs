//! The ggml tensor types a GGUF file may hold, and how many bytes each takes.
//!
//! pagantic reads GGUF headers and re-quantises tensors itself rather than through candle's types,
//! so that moving to a mistral.rs release on a newer candle changes one line of `Cargo.toml` and
//! nothing here. The list is the types candle (and so mistral.rs) can load; a file with any other
//! type is refused before it reaches them.

/// A ggml tensor type, by its number in a GGUF file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TensorType {
    F32,
    F16,
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Q8_0,
    Q8_1,
    Q2K,
    Q3K,
    Q4K,
    Q5K,
    Q6K,
    Q8K,
    BF16,
}

impl TensorType {
    /// The type numbered `code` in a GGUF file, if mistral.rs can load it.
    pub fn from_code(code: u32) -> Option<Self> {
        use TensorType::*;
        Some(match code {
            0 => F32,
            1 => F16,
            2 => Q4_0,
            3 => Q4_1,
            6 => Q5_0,
            7 => Q5_1,
            8 => Q8_0,
            9 => Q8_1,
            10 => Q2K,
            11 => Q3K,
            12 => Q4K,
            13 => Q5K,
            14 => Q6K,
            15 => Q8K,
            30 => BF16,
            _ => return None,
        })
    }

    /// Its number in a GGUF file.
    pub fn code(self) -> u32 {
        use TensorType::*;
        match self {
            F32 => 0,
            F16 => 1,
            Q4_0 => 2,
            Q4_1 => 3,
            Q5_0 => 6,
            Q5_1 => 7,
            Q8_0 => 8,
            Q8_1 => 9,
            Q2K => 10,
            Q3K => 11,
            Q4K => 12,
            Q5K => 13,
            Q6K => 14,
            Q8K => 15,
            BF16 => 30,
        }
    }

    /// Elements per block (1 for the plain float types).
    pub fn block_elements(self) -> u64 {
        use TensorType::*;
        match self {
            F32 | F16 | BF16 => 1,
            Q4_0 | Q4_1 | Q5_0 | Q5_1 | Q8_0 | Q8_1 => 32,
            Q2K | Q3K | Q4K | Q5K | Q6K | Q8K => 256,
        }
    }

    /// Bytes per block (ggml's `type_size`).
    pub fn block_bytes(self) -> u64 {
        use TensorType::*;
        match self {
            F32 => 4,
            F16 | BF16 => 2,
            Q4_0 => 18,
            Q4_1 => 20,
            Q5_0 => 22,
            Q5_1 => 24,
            Q8_0 => 34,
            Q8_1 => 36,
            Q2K => 84,
            Q3K => 110,
            Q4K => 144,
            Q5K => 176,
            Q6K => 210,
            Q8K => 292,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip_and_unknown_codes_are_refused() {
        for code in 0..64 {
            if let Some(kind) = TensorType::from_code(code) {
                assert_eq!(kind.code(), code);
            }
        }
        assert_eq!(TensorType::from_code(6), Some(TensorType::Q5_0));
        // Q4_2 and Q4_3 were removed from ggml; IQ types are not loadable by mistral.rs.
        assert_eq!(TensorType::from_code(4), None);
        assert_eq!(TensorType::from_code(16), None);
    }

    #[test]
    fn block_sizes_are_ggmls() {
        // A block's bytes: the f16 scale(s), the packed quants (and Q8_K's f32 scale and sums).
        assert_eq!(TensorType::Q5_0.block_bytes(), 2 + 4 + 16);
        assert_eq!(TensorType::Q8_0.block_bytes(), 2 + 32);
        assert_eq!(TensorType::Q6K.block_bytes(), 128 + 64 + 16 + 2);
        assert_eq!(TensorType::Q8K.block_bytes(), 4 + 256 + 32);
    }
}
