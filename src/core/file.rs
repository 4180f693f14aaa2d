//! Whole files in and out, safely: the one way pagantic reads a file whole (plans, prompts,
//! schemas, policies, lockfiles, transcripts, test files, datasets, corpora, `diff` inputs) and
//! the one way it writes a file it creates (lockfiles, reports, transcripts, run output).
//!
//! A read is bounded and takes only a regular file: `/dev/zero` or a 1 GB file named where a
//! plan is meant fails with a clear error instead of exhausting memory, and a FIFO fails instead
//! of blocking forever. A write goes to a temporary file in the same directory, renamed over the
//! target: a reader never sees half a file, and a symbolic link at the target is replaced, not
//! followed (a planted `PLAN.lock -> ~/.bashrc` cannot redirect the write). Streams (batch input
//! and output, event files) are not read or written whole and do not come here.

use std::fs::{OpenOptions, Permissions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use super::{Failure, FailureCode};

/// The bound for text pagantic reads whole: plans, prompts, schemas, policies, lockfiles,
/// transcripts, test files and input files.
pub const TEXT_LIMIT: u64 = 64 * 1024 * 1024;

/// The bound for data files read whole: a corpus's documents, a test file's dataset, the run
/// records and batch outputs `diff` compares.
pub const DATA_LIMIT: u64 = 256 * 1024 * 1024;

/// Why a file could not be read whole.
#[derive(Debug)]
pub enum ReadError {
    /// Missing, not permitted, or an I/O error.
    Unreadable { path: PathBuf, source: io::Error },
    /// A directory, FIFO, socket or device where a file is meant.
    NotRegular { path: PathBuf, kind: &'static str },
    /// Past the bound for its kind of file.
    TooLarge { path: PathBuf, limit: u64 },
    /// Text expected, and the bytes are not UTF-8.
    NotUtf8 { path: PathBuf },
}

impl ReadError {
    /// What is wrong, without the path (for messages that name the file themselves).
    pub fn reason(&self) -> String {
        match self {
            ReadError::Unreadable { source, .. } => source.to_string(),
            ReadError::NotRegular { kind, .. } => format!("not a regular file (it is {kind})"),
            ReadError::TooLarge { limit, .. } => format!(
                "larger than the {} MiB pagantic reads from such a file",
                limit / (1024 * 1024)
            ),
            ReadError::NotUtf8 { .. } => "not UTF-8 text".to_string(),
        }
    }

    /// What to do about it.
    pub fn help(&self) -> &'static str {
        match self {
            ReadError::Unreadable { .. } => "check the path and its permissions",
            ReadError::NotRegular { .. } => "name a regular file (or a symbolic link to one)",
            ReadError::TooLarge { .. } => "split the file or name a smaller one",
            ReadError::NotUtf8 { .. } => "save the file as UTF-8",
        }
    }

    /// Whether the file is not there at all.
    pub fn is_not_found(&self) -> bool {
        matches!(self, ReadError::Unreadable { source, .. } if source.kind() == io::ErrorKind::NotFound)
    }
}

impl std::fmt::Display for ReadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReadError::Unreadable { path, source } => {
                write!(f, "cannot read {}: {source}", path.display())
            }
            ReadError::NotRegular { path, .. }
            | ReadError::TooLarge { path, .. }
            | ReadError::NotUtf8 { path } => write!(f, "{} is {}", path.display(), self.reason()),
        }
    }
}

impl std::error::Error for ReadError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ReadError::Unreadable { source, .. } => Some(source),
            _ => None,
        }
    }
}

impl From<ReadError> for Failure {
    fn from(error: ReadError) -> Self {
        let help = error.help();
        Failure::new(FailureCode::ConfigFileError, error.to_string()).with_help(help)
    }
}

/// The bytes of the regular file at `path` (a symbolic link to one is followed), refused when
/// longer than `limit` bytes or not a regular file. The file is opened without blocking, so a
/// FIFO is refused rather than waited on.
pub fn read_bytes_bounded(path: &Path, limit: u64) -> Result<Vec<u8>, ReadError> {
    let unreadable = |source| ReadError::Unreadable {
        path: path.to_path_buf(),
        source,
    };
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NONBLOCK)
        .open(path)
        .map_err(unreadable)?;
    let file_type = file.metadata().map_err(unreadable)?.file_type();
    if !file_type.is_file() {
        return Err(ReadError::NotRegular {
            path: path.to_path_buf(),
            kind: kind_of(file_type),
        });
    }
    let mut bytes = Vec::new();
    file.take(limit.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(unreadable)?;
    if bytes.len() as u64 > limit {
        return Err(ReadError::TooLarge {
            path: path.to_path_buf(),
            limit,
        });
    }
    Ok(bytes)
}

/// The text of the regular file at `path`, bounded as [`read_bytes_bounded`] and refused when
/// not UTF-8.
pub fn read_bounded(path: &Path, limit: u64) -> Result<String, ReadError> {
    String::from_utf8(read_bytes_bounded(path, limit)?).map_err(|_| ReadError::NotUtf8 {
        path: path.to_path_buf(),
    })
}

fn kind_of(file_type: std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if file_type.is_dir() {
        "a directory"
    } else if file_type.is_fifo() {
        "a FIFO"
    } else if file_type.is_socket() {
        "a socket"
    } else if file_type.is_char_device() || file_type.is_block_device() {
        "a device"
    } else {
        "not a file"
    }
}

/// Writes `contents` to `path` atomically: into a temporary file beside it, flushed, then renamed
/// over `path`. A symbolic link at `path` is replaced by the file, never written through. A new
/// file gets the usual permissions (0666 less the umask); a file that was there keeps its mode.
/// A terminal, pipe or FIFO at `path` (`/dev/stdout`, `/dev/null`, a named pipe) is a stream,
/// not a file to replace: it is written to directly.
pub fn write_atomic(path: &Path, contents: &[u8]) -> io::Result<()> {
    let named = |error: io::Error| {
        io::Error::new(
            error.kind(),
            format!("cannot write {}: {error}", path.display()),
        )
    };
    if let Ok(target) = std::fs::metadata(path) {
        use std::os::unix::fs::FileTypeExt;
        let kind = target.file_type();
        if kind.is_char_device() || kind.is_fifo() {
            let mut stream = OpenOptions::new().write(true).open(path).map_err(named)?;
            return stream.write_all(contents).map_err(named);
        }
    }
    let dir = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    };
    let file_name = path
        .file_name()
        .ok_or_else(|| named(io::Error::from(io::ErrorKind::InvalidInput)))?;
    let mut prefix = std::ffi::OsString::from(".");
    prefix.push(file_name);
    prefix.push(".");
    let mut temporary = tempfile::Builder::new()
        .prefix(&prefix)
        .suffix(".tmp")
        .permissions(Permissions::from_mode(0o666))
        .tempfile_in(dir)
        .map_err(named)?;
    temporary.write_all(contents).map_err(named)?;
    if let Ok(existing) = std::fs::symlink_metadata(path)
        && existing.is_file()
    {
        temporary
            .as_file()
            .set_permissions(existing.permissions())
            .map_err(named)?;
    }
    temporary.as_file().sync_all().map_err(named)?;
    temporary.persist(path).map_err(|e| named(e.error))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_regular_file_within_its_bound() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("plan.yaml");
        std::fs::write(&path, "version: 1\n").expect("written");
        assert_eq!(read_bounded(&path, 11).expect("read"), "version: 1\n");
        assert!(matches!(
            read_bounded(&path, 10),
            Err(ReadError::TooLarge { limit: 10, .. })
        ));
        std::fs::write(&path, b"caf\xe9").expect("written");
        assert!(matches!(
            read_bounded(&path, 10),
            Err(ReadError::NotUtf8 { .. })
        ));
        assert!(matches!(
            read_bounded(&dir.path().join("missing"), 10),
            Err(ReadError::Unreadable { .. })
        ));
    }

    #[test]
    fn refuses_devices_directories_and_fifos_without_blocking() {
        let error = read_bytes_bounded(Path::new("/dev/zero"), TEXT_LIMIT).expect_err("a device");
        assert!(matches!(
            error,
            ReadError::NotRegular {
                kind: "a device",
                ..
            }
        ));
        assert!(
            error
                .to_string()
                .contains("/dev/zero is not a regular file")
        );
        let dir = tempfile::tempdir().expect("dir");
        assert!(matches!(
            read_bytes_bounded(dir.path(), TEXT_LIMIT),
            Err(ReadError::NotRegular {
                kind: "a directory",
                ..
            })
        ));
        let fifo = dir.path().join("fifo.yaml");
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .expect("mkfifo runs");
        assert!(made.success());
        assert!(matches!(
            read_bytes_bounded(&fifo, TEXT_LIMIT),
            Err(ReadError::NotRegular { kind: "a FIFO", .. })
        ));
        let failure = Failure::from(read_bytes_bounded(&fifo, 1).expect_err("a FIFO"));
        assert_eq!(failure.code, FailureCode::ConfigFileError);
    }

    #[test]
    fn atomic_writes_replace_a_symbolic_link_instead_of_following_it() {
        let dir = tempfile::tempdir().expect("dir");
        let victim = dir.path().join("victim.txt");
        std::fs::write(&victim, "keep me").expect("written");
        let target = dir.path().join("plan.yaml.lock");
        std::os::unix::fs::symlink(&victim, &target).expect("linked");
        write_atomic(&target, b"{}\n").expect("written");
        assert_eq!(std::fs::read_to_string(&victim).expect("read"), "keep me");
        assert!(std::fs::symlink_metadata(&target).expect("meta").is_file());
        assert_eq!(std::fs::read_to_string(&target).expect("read"), "{}\n");
        let leftovers = std::fs::read_dir(dir.path()).expect("listed").count();
        assert_eq!(leftovers, 2, "no temporary file is left behind");
    }

    #[test]
    fn a_stream_is_written_to_not_replaced() {
        write_atomic(Path::new("/dev/null"), b"gone").expect("written");
        let kind = std::fs::metadata("/dev/null").expect("meta").file_type();
        assert!(std::os::unix::fs::FileTypeExt::is_char_device(&kind));
    }

    #[test]
    fn atomic_writes_keep_an_existing_files_mode() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("report.html");
        std::fs::write(&path, "old").expect("written");
        std::fs::set_permissions(&path, Permissions::from_mode(0o640)).expect("chmod");
        write_atomic(&path, b"new").expect("written");
        let mode = std::fs::metadata(&path).expect("meta").permissions().mode();
        assert_eq!(mode & 0o777, 0o640);
        assert_eq!(std::fs::read_to_string(&path).expect("read"), "new");
    }
}
