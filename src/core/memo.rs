//! A persistent memo of computed values by content key: what a scorer is handed to keep its
//! embeddings across runs without knowing what keeps them (the call cache, a layer above it).

use std::path::Path;

/// Keeps values computed from content (an embedding of a text) under a SHA-256 key.
pub trait Memo: Send + Sync {
    /// The value stored under `key`, if any.
    fn recall(&self, key: [u8; 32]) -> Option<String>;
    /// Stores `value` (of `kind`: `embedding`, …) under `key`; may return before it is written.
    fn remember(&self, kind: &'static str, key: [u8; 32], value: String);
    /// The SHA-256 of the file at `path`, as hex (a model file's identity); None if unreadable.
    fn file_sha256(&self, path: &Path) -> Option<String>;
}
