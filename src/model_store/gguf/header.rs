//! A GGUF header checked byte by byte before any model library reads it.
//!
//! The reader in candle trusts the lengths a header states: a string of 2^62 bytes, an array of
//! 2^56 items or a tensor of 2^32 dimensions is allocated before a single byte is read, and the
//! process aborts; an alignment of 0 divides by zero, a tensor offset near `u64::MAX` overflows.
//! [`check`] walks the same format without allocating what the file claims: every length is
//! compared with the bytes that remain, counts with what so many entries would take at least,
//! sizes are computed with checked arithmetic, and every tensor must end inside the file. Only
//! a header that passes is handed to the library. The walk also keeps what pagantic needs to know
//! about the model (its architecture, its tensors) and where each metadata entry lies, so
//! checking a file before a load parses its header once, and re-quantising copies the metadata
//! byte for byte: the vocabulary's hundreds of thousands of strings are skipped over in the read
//! buffer, never copied out.

use std::fs::File;
use std::io::{BufReader, Read};
use std::ops::Range;

use super::tensor_type::TensorType;

/// Longest key or string value read into memory (the architecture name and the like); longer
/// strings are skipped over, not read.
const MAX_READ_STRING: u64 = 64 * 1024;
/// Most dimensions a tensor may have (ggml's limit).
const MAX_DIMENSIONS: u32 = 4;
/// The alignment of tensor data when the header sets none.
const DEFAULT_ALIGNMENT: u64 = 32;

/// Why a header is not acceptable, in words for the user.
pub type Problem = String;

/// A reader that knows how many bytes remain.
struct Cursor {
    reader: BufReader<File>,
    position: u64,
    length: u64,
    /// GGUF v1 writes lengths and counts as u32, later versions as u64.
    wide: bool,
}

impl Cursor {
    fn remaining(&self) -> u64 {
        self.length.saturating_sub(self.position)
    }

    fn bytes<const N: usize>(&mut self) -> Result<[u8; N], Problem> {
        let mut buffer = [0u8; N];
        self.reader
            .read_exact(&mut buffer)
            .map_err(|_| format!("the header ends early (at byte {})", self.position))?;
        self.position += N as u64;
        Ok(buffer)
    }

    fn u32(&mut self) -> Result<u32, Problem> {
        self.bytes::<4>().map(u32::from_le_bytes)
    }

    fn u64(&mut self) -> Result<u64, Problem> {
        self.bytes::<8>().map(u64::from_le_bytes)
    }

    /// A length or count: u32 in v1, u64 after.
    fn length(&mut self) -> Result<u64, Problem> {
        if self.wide {
            self.u64()
        } else {
            self.u32().map(u64::from)
        }
    }

    fn skip(&mut self, count: u64, what: &str) -> Result<(), Problem> {
        if count > self.remaining() {
            return Err(format!(
                "{what} claims {count} bytes at byte {}, but only {} remain",
                self.position,
                self.remaining()
            ));
        }
        let offset = i64::try_from(count).map_err(|_| format!("{what} is too long"))?;
        // Relative, so a skip that lands inside the read buffer keeps it (no system call).
        self.reader
            .seek_relative(offset)
            .map_err(|e| format!("cannot read the header: {e}"))?;
        self.position += count;
        Ok(())
    }

    /// A string: read when short enough to matter, skipped otherwise.
    fn string(&mut self, what: &str) -> Result<Option<String>, Problem> {
        let length = self.string_length(what)?;
        if length > MAX_READ_STRING {
            self.skip(length, what)?;
            return Ok(None);
        }
        let mut buffer = vec![0u8; length as usize];
        self.reader
            .read_exact(&mut buffer)
            .map_err(|_| format!("the header ends early (at byte {})", self.position))?;
        self.position += length;
        Ok(Some(String::from_utf8_lossy(&buffer).into_owned()))
    }

    /// A string nobody reads (an item of a metadata array): checked and skipped.
    fn skip_string(&mut self, what: &str) -> Result<(), Problem> {
        let length = self.string_length(what)?;
        self.skip(length, what)
    }

    /// The length a string states, checked against what remains.
    fn string_length(&mut self, what: &str) -> Result<u64, Problem> {
        let length = self.length()?;
        if length > self.remaining() {
            return Err(format!(
                "{what} claims {length} bytes at byte {}, but only {} remain",
                self.position,
                self.remaining()
            ));
        }
        Ok(length)
    }

    /// A count of entries that each take at least `smallest` bytes, checked against what remains.
    fn count(&mut self, what: &str, smallest: u64) -> Result<u64, Problem> {
        let count = self.length()?;
        if count.saturating_mul(smallest) > self.remaining() {
            return Err(format!(
                "it claims {count} {what}, more than its {} remaining bytes can hold",
                self.remaining()
            ));
        }
        Ok(count)
    }
}

/// Bytes of one value of a fixed-size metadata type; None for strings and arrays.
fn fixed_size(value_type: u32) -> Result<Option<u64>, Problem> {
    Ok(match value_type {
        0 | 1 | 7 => Some(1),
        2 | 3 => Some(2),
        4..=6 => Some(4),
        10..=12 => Some(8),
        8 | 9 => None,
        other => return Err(format!("unknown metadata value type {other}")),
    })
}

/// A metadata value, as far as the check keeps it.
enum Value {
    /// An integer (for `general.alignment` and the context length).
    Integer(i128),
    /// A string short enough to be read (for `general.architecture`).
    Text(String),
    /// Anything else, skipped.
    Skipped,
}

/// Reads (or skips) one metadata value.
fn value(cursor: &mut Cursor, value_type: u32) -> Result<Value, Problem> {
    match fixed_size(value_type)? {
        Some(size) => {
            let raw = match size {
                1 => i128::from(cursor.bytes::<1>()?[0]),
                2 => i128::from(u16::from_le_bytes(cursor.bytes::<2>()?)),
                4 => i128::from(cursor.u32()?),
                _ => i128::from(cursor.u64()?),
            };
            // Signed types: the value as the type reads it.
            let signed = match value_type {
                1 => i128::from(raw as u8 as i8),
                3 => i128::from(raw as u16 as i16),
                5 => i128::from(raw as u32 as i32),
                11 => i128::from(raw as u64 as i64),
                _ => raw,
            };
            Ok(match value_type {
                0..=5 | 10 | 11 => Value::Integer(signed),
                _ => Value::Skipped,
            })
        }
        None if value_type == 8 => Ok(cursor
            .string("a metadata string")?
            .map_or(Value::Skipped, Value::Text)),
        None => skip_array(cursor, 0).map(|()| Value::Skipped),
    }
}

/// Skips the rest of a metadata array (its item type and count come next).
fn skip_array(cursor: &mut Cursor, depth: u32) -> Result<(), Problem> {
    if depth > 8 {
        return Err("metadata arrays are nested too deep".into());
    }
    let item_type = cursor.u32()?;
    let smallest = fixed_size(item_type)?.unwrap_or(if cursor.wide { 8 } else { 4 });
    let count = cursor.count("array items", smallest)?;
    match fixed_size(item_type)? {
        Some(size) => cursor.skip(count * size, "a metadata array"),
        None => {
            for _ in 0..count {
                if item_type == 8 {
                    cursor.skip_string("a metadata string")?;
                } else {
                    skip_array(cursor, depth + 1)?;
                }
            }
            Ok(())
        }
    }
}

/// What a header that passed says about the model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    /// The GGUF version (1 wrote lengths as u32, 2 and 3 as u64).
    pub version: u32,
    /// `general.architecture`, when it is a string.
    pub architecture: Option<String>,
    /// The metadata entries, in file order.
    pub entries: Vec<Entry>,
    /// The tensors, in the order they are listed.
    pub tensors: Vec<TensorInfo>,
    /// Where tensor data starts: tensor offsets count from here.
    pub data_start: u64,
    /// The alignment of tensor data (`general.alignment`, else 32).
    pub alignment: u64,
    /// Every `<architecture>.context_length` entry with a count for its value, by key, in file
    /// order: the context the model was trained for.
    pub context_lengths: Vec<(String, u64)>,
}

/// One metadata entry of a header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Its key; None for a key too long to have been read.
    pub key: Option<String>,
    /// Where the whole entry (key, value type, value) lies in the file.
    pub bytes: Range<u64>,
}

/// One tensor a header lists.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorInfo {
    /// Its name; None for a name too long to have been read.
    pub name: Option<String>,
    /// Its dimensions as the file lists them (fastest-varying first).
    pub dimensions: Vec<u64>,
    pub kind: TensorType,
    /// Where its data starts, counted from [`Header::data_start`].
    pub offset: u64,
    /// Bytes of data.
    pub size: u64,
}

/// Checks a GGUF file's header and that every tensor it lists lies inside the file.
pub fn check(file: File) -> Result<Header, Problem> {
    let length = file
        .metadata()
        .map_err(|e| format!("cannot read it: {e}"))?
        .len();
    let mut cursor = Cursor {
        reader: BufReader::new(file),
        position: 0,
        length,
        wide: true,
    };
    if cursor.bytes::<4>()? != *b"GGUF" {
        return Err("it does not start with `GGUF`".into());
    }
    let version = cursor.u32()?;
    match version {
        1 => cursor.wide = false,
        2 | 3 => {}
        other => return Err(format!("unknown GGUF version {other}")),
    }
    // A tensor entry takes at least a name length, one dimension count, a type and an offset.
    let tensors = cursor.length()?;
    let entries = cursor.count("metadata entries", 13)?;
    if tensors.saturating_mul(24) > cursor.remaining() {
        return Err(format!(
            "it claims {tensors} tensors, more than its {} remaining bytes can hold",
            cursor.remaining()
        ));
    }
    let mut known = Known {
        alignment: DEFAULT_ALIGNMENT,
        architecture: None,
        context_lengths: Vec::new(),
    };
    let mut kept_entries = Vec::new();
    for _ in 0..entries {
        let start = cursor.position;
        let key = cursor.string("a metadata key")?;
        let value_type = cursor.u32()?;
        let value = value(&mut cursor, value_type)?;
        known.keep(key.as_deref(), value)?;
        kept_entries.push(Entry {
            key,
            bytes: start..cursor.position,
        });
    }
    let mut listed = Vec::new();
    for _ in 0..tensors {
        listed.push(tensor_info(&mut cursor)?);
    }
    let alignment = known.alignment;
    let data_start = cursor.position.div_ceil(alignment) * alignment;
    for tensor in &listed {
        let name = tensor.name.as_deref().unwrap_or("(a long name)");
        let end = data_start
            .checked_add(tensor.offset + tensor.size)
            .ok_or_else(|| format!("tensor `{name}` lies past any file"))?;
        if end > length {
            return Err(format!(
                "the file is truncated ({length} bytes, tensor `{name}` needs {end})"
            ));
        }
    }
    Ok(Header {
        version,
        architecture: known.architecture,
        entries: kept_entries,
        tensors: listed,
        data_start,
        alignment,
        context_lengths: known.context_lengths,
    })
}

/// Reads one tensor entry of the header: its name, dimensions, type and offset, refusing counts
/// that overflow and element counts that are not whole blocks of its type.
fn tensor_info(cursor: &mut Cursor) -> Result<TensorInfo, Problem> {
    let read_name = cursor.string("a tensor name")?;
    let name = read_name.as_deref().unwrap_or("(a long name)");
    let count = cursor.u32()?;
    if count > MAX_DIMENSIONS {
        return Err(format!(
            "tensor `{name}` has {count} dimensions (at most {MAX_DIMENSIONS})"
        ));
    }
    let mut dimensions = Vec::new();
    let mut elements: u64 = 1;
    for _ in 0..count {
        let size = cursor.length()?;
        dimensions.push(size);
        elements = elements
            .checked_mul(size)
            .ok_or_else(|| format!("tensor `{name}` has more elements than can be counted"))?;
    }
    let code = cursor.u32()?;
    let kind = TensorType::from_code(code)
        .ok_or_else(|| format!("tensor `{name}` has unknown type {code}"))?;
    let (block, bytes_per_block) = (kind.block_elements(), kind.block_bytes());
    if !elements.is_multiple_of(block) {
        return Err(format!(
            "tensor `{name}` has {elements} elements, not a whole number of {block}-element blocks"
        ));
    }
    let size = (elements / block)
        .checked_mul(bytes_per_block)
        .ok_or_else(|| format!("tensor `{name}` is larger than can be counted"))?;
    let offset = cursor.u64()?;
    offset
        .checked_add(size)
        .ok_or_else(|| format!("tensor `{name}` lies past any file (offset {offset})"))?;
    Ok(TensorInfo {
        name: read_name,
        dimensions,
        kind,
        offset,
        size,
    })
}

/// What the check keeps of the metadata values it reads.
struct Known {
    alignment: u64,
    architecture: Option<String>,
    context_lengths: Vec<(String, u64)>,
}

impl Known {
    /// Keeps what the entry `key` says, when the check needs it: the alignment (refused unless
    /// a power of two), the architecture, a context length.
    fn keep(&mut self, key: Option<&str>, value: Value) -> Result<(), Problem> {
        match (key, value) {
            (Some("general.alignment"), Value::Integer(number)) => {
                self.alignment = u64::try_from(number)
                    .ok()
                    .filter(|a| a.is_power_of_two())
                    .ok_or_else(|| {
                        format!("its alignment is {number}, not a power of two above zero")
                    })?;
            }
            (Some("general.architecture"), Value::Text(text)) => self.architecture = Some(text),
            (Some(key), Value::Integer(number)) if key.ends_with(".context_length") => {
                if let Ok(tokens) = u64::try_from(number) {
                    self.context_lengths.push((key.to_string(), tokens));
                }
            }
            _ => {}
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model_store::gguf::test_file::GgufBytes as Gguf;

    /// Checks the bytes built so far, written to a file of their own.
    fn check_bytes(gguf: Gguf) -> Result<Header, Problem> {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("model.gguf");
        gguf.write(&path);
        check(File::open(&path).expect("opened"))
    }

    /// An F32 tensor's entry in the tensor list.
    fn tensor(gguf: Gguf, name: &str, dims: &[u64], offset: u64) -> Gguf {
        gguf.tensor(name, dims, 0, offset)
    }

    /// `gguf` with one 4-element F32 tensor, `w`, whose data follows the header; checked.
    fn check_with_one_tensor(gguf: Gguf) -> Result<Header, Problem> {
        check_bytes(tensor(gguf, "w", &[4], 0).align().padding(16))
    }

    #[test]
    fn a_well_formed_header_passes() {
        let gguf = Gguf::new(1, 1)
            .string("general.architecture")
            .u32(8)
            .string("qwen2");
        // magic, version, counts (24 bytes); then the entry: key (8 + 20), type (4), value (8 + 5).
        let entry_end = 24 + 8 + 20 + 4 + 8 + 5;
        // Then the tensor: name (8 + 1), one dimension (4 + 8), type and offset (4 + 8).
        let header_end = entry_end + 8 + 1 + 4 + 8 + 4 + 8;
        assert_eq!(
            check_with_one_tensor(gguf),
            Ok(Header {
                version: 3,
                architecture: Some("qwen2".into()),
                entries: vec![Entry {
                    key: Some("general.architecture".into()),
                    bytes: 24..entry_end,
                }],
                tensors: vec![TensorInfo {
                    name: Some("w".into()),
                    dimensions: vec![4],
                    kind: TensorType::F32,
                    offset: 0,
                    size: 16,
                }],
                data_start: header_end.div_ceil(32) * 32,
                alignment: 32,
                context_lengths: Vec::new(),
            })
        );
    }

    /// A vocabulary (an array of strings, and one of arrays) before the architecture is stepped
    /// over, and the walk still finds the architecture and the tensor after it.
    #[test]
    fn arrays_are_skipped_and_the_architecture_still_found() {
        let mut gguf = Gguf::new(1, 3)
            .string("tokenizer.ggml.tokens")
            .u32(9)
            .u32(8)
            .u64(3);
        for token in ["a", "bc", "<|im_end|>"] {
            gguf = gguf.string(token);
        }
        let gguf = gguf
            .string("nested")
            .u32(9)
            .u32(9)
            .u64(1)
            .u32(4)
            .u64(2)
            .u32(7)
            .u32(8)
            .string("general.architecture")
            .u32(8)
            .string("llama");
        let checked = check_with_one_tensor(gguf).expect("passes");
        assert_eq!(checked.architecture.as_deref(), Some("llama"));
        let keys: Vec<_> = checked.entries.iter().map(|e| e.key.as_deref()).collect();
        assert_eq!(
            keys,
            [
                Some("tokenizer.ggml.tokens"),
                Some("nested"),
                Some("general.architecture")
            ]
        );
        // Each entry ends where the next starts.
        for pair in checked.entries.windows(2) {
            assert_eq!(pair[0].bytes.end, pair[1].bytes.start);
        }
        assert_eq!(checked.tensors.len(), 1);
        assert_eq!(checked.tensors[0].kind, TensorType::F32);
    }

    #[test]
    fn hostile_headers_fail_cleanly() {
        let cases: Vec<(&str, Gguf, &str)> = vec![
            (
                "a 2^62-byte key",
                Gguf::new(0, 1).u64(1 << 62).padding(64),
                "claims 4611686018427387904 bytes",
            ),
            (
                "a 2^56-item array",
                Gguf::new(0, 1)
                    .string("k")
                    .u32(9)
                    .u32(4)
                    .u64(1 << 56)
                    .padding(64),
                "array items",
            ),
            (
                "a string array of 2^40 strings",
                Gguf::new(0, 1)
                    .string("k")
                    .u32(9)
                    .u32(8)
                    .u64(1 << 40)
                    .padding(64),
                "array items",
            ),
            (
                "2^60 metadata entries",
                Gguf::new(0, 1 << 60),
                "metadata entries",
            ),
            (
                "2^32 - 1 dimensions",
                Gguf::new(1, 0).string("w").u32(u32::MAX).padding(64),
                "dimensions",
            ),
            (
                "an alignment of 0",
                Gguf::new(0, 1).string("general.alignment").u32(4).u32(0),
                "alignment is 0",
            ),
            (
                "an alignment of 3",
                Gguf::new(0, 1).string("general.alignment").u32(4).u32(3),
                "alignment is 3",
            ),
            (
                "an offset of u64::MAX",
                tensor(Gguf::new(1, 0), "w", &[4], u64::MAX).padding(64),
                "lies past any file",
            ),
            (
                "an element count that overflows",
                tensor(Gguf::new(1, 0), "w", &[1 << 40, 1 << 40], 0).padding(64),
                "more elements than can be counted",
            ),
            (
                "a tensor past the end",
                tensor(Gguf::new(1, 0), "w", &[1024], 0).padding(64),
                "truncated",
            ),
            (
                "not GGUF",
                Gguf {
                    bytes: b"GGML....".to_vec(),
                },
                "`GGUF`",
            ),
            (
                "cut in the header",
                Gguf {
                    bytes: b"GGUF\x03\0\0\0\x01".to_vec(),
                },
                "ends early",
            ),
        ];
        for (what, gguf, expected) in cases {
            let problem = check_bytes(gguf).expect_err(what);
            assert!(problem.contains(expected), "{what}: {problem}");
        }
    }
}
