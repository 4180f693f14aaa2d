//! Model files' SHA-256: hashed whole ([`sha256_file`]), and remembered per version of a file by
//! [`FileHashes`], which the session owns: a lockfile's pins (checked at every batch start) and
//! the call cache's keys each ask for a model file's hash, and a local GGUF takes seconds to read.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufReader, Read};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};
use std::time::SystemTime;

use sha2::{Digest, Sha256};

use super::io_failure;
use crate::core::Failure;

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

/// Bytes (a digest) in lower-case hex.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A version of a file: its canonical path, size and modification time.
type Version = (PathBuf, u64, Option<SystemTime>);

/// The files hashed so far, each read once per version (its path, size and modification time).
#[derive(Debug, Default)]
pub struct FileHashes {
    hashed: Mutex<BTreeMap<Version, String>>,
}

impl FileHashes {
    /// The SHA-256 of a file as [`sha256_file`] gives it, read only if this version of the file
    /// was not hashed before.
    pub fn sha256(&self, path: &Path) -> Result<String, Failure> {
        let metadata = std::fs::metadata(path).map_err(|e| io_failure("read", path, e))?;
        let version = (
            std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf()),
            metadata.len(),
            metadata.modified().ok(),
        );
        let hashed = || self.hashed.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(known) = hashed().get(&version) {
            return Ok(known.clone());
        }
        let sha256 = sha256_file(path)?;
        hashed().insert(version, sha256.clone());
        Ok(sha256)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sha256_of_known_text() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("abc.txt");
        std::fs::write(&path, b"abc").expect("write");
        assert_eq!(
            sha256_file(&path).expect("hash"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    /// Rewrites the file at `path` with `content`, its modification time set to `when`.
    fn write_at(path: &Path, content: &[u8], when: std::time::SystemTime) {
        std::fs::write(path, content).expect("write");
        File::options()
            .write(true)
            .open(path)
            .and_then(|file| file.set_modified(when))
            .expect("a settable modification time");
    }

    #[test]
    fn a_file_is_hashed_once_per_version() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("model.gguf");
        let when = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_000_000);
        write_at(&path, b"first", when);
        let hashes = FileHashes::default();
        let first = hashes.sha256(&path).expect("hash");
        assert_eq!(first, sha256_file(&path).expect("hash"));
        // The same size and time: the version already hashed, not read again.
        write_at(&path, b"other", when);
        assert_eq!(hashes.sha256(&path).expect("hash"), first);
        // Another time is another version.
        write_at(&path, b"other", when + std::time::Duration::from_secs(1));
        let second = hashes.sha256(&path).expect("hash");
        assert_ne!(second, first);
        assert_eq!(second, sha256_file(&path).expect("hash"));
        // Another owner has hashed nothing yet.
        write_at(&path, b"third", when + std::time::Duration::from_secs(1));
        assert_eq!(hashes.sha256(&path).expect("hash"), second);
        assert_ne!(FileHashes::default().sha256(&path).expect("hash"), second);
    }
}
