//! [`CallCache`]: one process's handle on the cache — its mode, its database (or none, once the
//! database has failed), the warning that says so, and this run's tally of hits and misses.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock};
use std::time::UNIX_EPOCH;

use super::cassette::{self, Entries, Recorder};
use super::database::{Database, RunStats, Stored};
use super::{CacheError, CacheMode, CacheSettings, DATABASE_FILE, Key};
use crate::core::{Failure, Memo};
use crate::model_store::{FileHashes, Notice};

/// Says once that the cache cannot be used; the run goes on uncached.
struct Health {
    broken: AtomicBool,
    warn: Option<Notice>,
    location: String,
}

impl Health {
    fn fail(&self, reason: &CacheError) {
        if !self.broken.swap(true, Ordering::SeqCst)
            && let Some(warn) = &self.warn
        {
            warn(&format!(
                "the call cache at {} cannot be used ({reason}); running without it",
                self.location
            ));
        }
    }

    fn ok(&self) -> bool {
        !self.broken.load(Ordering::Relaxed)
    }
}

/// Where the entries are: the database, or a cassette read into memory.
enum Store {
    /// The SQLite database at `path`, opened on first use (None once it has failed).
    Database {
        path: PathBuf,
        database: OnceLock<Option<Arc<Database>>>,
    },
    /// A cassette's entries (`--cassette FILE`); what the run stores is kept in memory only, so
    /// the user's cache is neither read nor written.
    Cassette {
        path: PathBuf,
        entries: RwLock<Entries>,
    },
}

/// The cache as one process uses it; shared by every engine it stands in front of. The
/// database is opened on first use, so a run that calls no model never touches it.
pub struct CallCache {
    mode: CacheMode,
    store: Store,
    health: Arc<Health>,
    tally: Mutex<RunStats>,
    /// What `--record FILE` writes when the command ends.
    recorder: Option<Recorder>,
    /// Where to say what the record holds once it is written.
    notice: Option<Notice>,
    /// The model files the session has hashed (a file new to the database is hashed once).
    hashes: Arc<FileHashes>,
}

impl CallCache {
    /// The cache `settings` describe; None when its mode is off. A database that cannot be
    /// opened (when first needed) is warned about once, and the cache then never answers. A
    /// cassette is read now, and one that cannot be read, or a record that could not be
    /// written, is refused before anything runs. Files the database has no hash for are hashed
    /// through `hashes`, the session's.
    pub fn open(
        settings: &CacheSettings,
        hashes: Arc<FileHashes>,
    ) -> Result<Option<Arc<CallCache>>, Failure> {
        if settings.mode == CacheMode::Off {
            return Ok(None);
        }
        let (store, location) = match &settings.cassette {
            Some(path) => (
                Store::Cassette {
                    path: path.clone(),
                    entries: RwLock::new(cassette::read(path)?),
                },
                path.clone(),
            ),
            None => {
                let path = settings.directory().join(DATABASE_FILE);
                let store = Store::Database {
                    path: path.clone(),
                    database: OnceLock::new(),
                };
                (store, path)
            }
        };
        let recorder = match &settings.record {
            Some(path) => Some(Recorder::create(path, settings.record_tools)?),
            None => None,
        };
        Ok(Some(Arc::new(CallCache {
            mode: settings.mode,
            store,
            health: Arc::new(Health {
                broken: AtomicBool::new(false),
                warn: settings.warn.clone(),
                location: location.display().to_string(),
            }),
            tally: Mutex::default(),
            recorder,
            notice: settings.notice.clone(),
            hashes,
        })))
    }

    /// Opens the database at `dir` for maintenance (`pagantic cache stats|prune|clear`).
    pub fn maintain(dir: &Path) -> Result<Arc<Database>, CacheError> {
        Database::open(&dir.join(DATABASE_FILE), |_| {})
    }

    /// Whether every answer must come from the cache (`--cache-only`).
    pub fn only(&self) -> bool {
        self.mode == CacheMode::Only
    }

    /// The flag that says every call must come from the cache, and what it names (for
    /// `CACHE_MISS`): `--cache-only` and the cache, or `--cassette` and its file.
    pub fn replay_source(&self) -> (&'static str, String) {
        match &self.store {
            Store::Cassette { path, .. } => {
                ("--cassette", format!("the cassette {}", path.display()))
            }
            Store::Database { .. } => ("--cache-only", "the cache".to_string()),
        }
    }

    /// Whether the cache can answer (a cassette, or a database that opens and has not failed
    /// since).
    pub fn usable(&self) -> bool {
        matches!(self.store, Store::Cassette { .. }) || self.database().is_some()
    }

    fn database(&self) -> Option<&Database> {
        let Store::Database { path, database } = &self.store else {
            return None;
        };
        if !self.health.ok() {
            return None;
        }
        database
            .get_or_init(|| {
                let reporter = Arc::clone(&self.health);
                Database::open(path, move |reason| reporter.fail(&reason))
                    .inspect_err(|reason| self.health.fail(reason))
                    .ok()
            })
            .as_deref()
            .filter(|_| self.health.ok())
    }

    /// The entry under `key`, if the cache has it (noted for `--record`).
    pub fn get(&self, key: &Key) -> Option<Stored> {
        let found = match &self.store {
            Store::Cassette { entries, .. } => entries.read().ok()?.get(key).cloned(),
            Store::Database { .. } => match self.database()?.get(key) {
                Ok(found) => found,
                Err(reason) => {
                    self.health.fail(&reason);
                    None
                }
            },
        }?;
        if let Some(recorder) = &self.recorder {
            recorder.note(*key, &found);
        }
        Some(found)
    }

    /// Stores `value` under `key` (on the writer thread; this returns at once), noted for
    /// `--record`.
    pub fn put(&self, key: Key, kind: &'static str, value: String, tokens: u64, duration_ms: f64) {
        let stored = Stored {
            kind: kind.to_string(),
            value,
            tokens,
            duration_ms,
        };
        if let Some(recorder) = &self.recorder {
            recorder.note(key, &stored);
        }
        match &self.store {
            Store::Cassette { entries, .. } => {
                if let Ok(mut entries) = entries.write() {
                    entries.insert(key, stored);
                }
            }
            Store::Database { .. } => {
                if let Some(database) = self.database() {
                    database.put(key, kind, stored.value, tokens, duration_ms);
                }
            }
        }
    }

    /// Counts a lookup for this run's tally: a hit saving `tokens` and `ms`, or a miss.
    pub fn count(&self, hit: bool, tokens: u64, ms: f64) {
        if let Ok(mut tally) = self.tally.lock() {
            if hit {
                tally.hits += 1;
                // `tokens` is what a cache row claims: the sum saturates.
                tally.tokens_saved = tally.tokens_saved.saturating_add(tokens);
                tally.ms_saved += ms;
            } else {
                tally.misses += 1;
            }
        }
    }

    /// The SHA-256 of the file at `path`, hashed once per version of the file (its size and
    /// modification time): later runs read it from the database. None when it cannot be read.
    pub fn file_sha256(&self, path: &Path) -> Option<String> {
        let metadata = std::fs::metadata(path).ok()?;
        let modified_ns = metadata
            .modified()
            .ok()
            .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
            .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX));
        let name = std::fs::canonicalize(path)
            .unwrap_or_else(|_| path.to_path_buf())
            .display()
            .to_string();
        let database = self.database();
        if let Some(known) = database.and_then(|d| d.file_hash(&name, metadata.len(), modified_ns))
        {
            return Some(known);
        }
        let sha256 = self.hashes.sha256(path).ok()?;
        if let Some(database) = database {
            database.record_file_hash(name, metadata.len(), modified_ns, sha256.clone());
        }
        Some(sha256)
    }

    /// Writes this run's tally and waits until everything queued is committed (nothing to do
    /// when the database was never opened), then writes the record of `--record`, once.
    pub fn finish(&self) {
        self.commit();
        if let Some(recorder) = &self.recorder {
            let (said, to) = match recorder.write() {
                Ok(None) => return,
                Ok(Some(entries)) => (
                    format!(
                        "recorded {entries} {} in {}",
                        if entries == 1 { "entry" } else { "entries" },
                        recorder.path().display()
                    ),
                    &self.notice,
                ),
                Err(reason) => (reason.to_string(), &self.health.warn),
            };
            if let Some(say) = to {
                say(&said);
            }
        }
    }

    fn commit(&self) {
        let Store::Database { database, .. } = &self.store else {
            return;
        };
        let Some(Some(database)) = database.get() else {
            return;
        };
        if !self.health.ok() {
            return;
        }
        let tally = self
            .tally
            .lock()
            .map(|mut tally| std::mem::take(&mut *tally))
            .unwrap_or_default();
        if tally.hits + tally.misses > 0 {
            database.record_run(tally);
        }
        database.flush();
    }
}

impl Drop for CallCache {
    fn drop(&mut self) {
        self.finish();
    }
}

/// Embeddings (and other values computed from content) kept beside the calls, under their own
/// `kind` so `cache stats` counts them apart.
impl Memo for CallCache {
    fn recall(&self, key: [u8; 32]) -> Option<String> {
        self.get(&Key(key)).map(|stored| stored.value)
    }

    fn remember(&self, kind: &'static str, key: [u8; 32], value: String) {
        self.put(Key(key), kind, value, 0, 0.0);
    }

    fn file_sha256(&self, path: &Path) -> Option<String> {
        CallCache::file_sha256(self, path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(dir: &Path, warnings: &Arc<Mutex<Vec<String>>>) -> CacheSettings {
        let sink = Arc::clone(warnings);
        CacheSettings {
            mode: CacheMode::ReadWrite,
            dir: Some(dir.to_path_buf()),
            warn: Some(Arc::new(move |line: &str| {
                sink.lock().expect("lock").push(line.to_string())
            })),
            ..CacheSettings::default()
        }
    }

    #[test]
    fn an_answer_stored_by_one_process_is_read_by_the_next() {
        let dir = tempfile::tempdir().expect("temp dir");
        let warnings = Arc::default();
        let key = Key::of("call", &[&"question"]);
        {
            let cache = CallCache::open(&settings(dir.path(), &warnings), Arc::default())
                .expect("opens")
                .expect("on");
            assert_eq!(cache.get(&key), None);
            cache.put(key, "call", "answer".into(), 3, 50.0);
        }
        let cache = CallCache::open(&settings(dir.path(), &warnings), Arc::default())
            .expect("opens")
            .expect("on");
        assert_eq!(
            cache.get(&key),
            Some(Stored {
                kind: "call".into(),
                value: "answer".into(),
                tokens: 3,
                duration_ms: 50.0
            })
        );
        assert!(warnings.lock().expect("lock").is_empty());
    }

    #[test]
    fn a_corrupt_database_is_reported_once_and_never_answers() {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::write(
            dir.path().join(DATABASE_FILE),
            "this is not a database, just garbage ".repeat(200),
        )
        .expect("written");
        let warnings: Arc<Mutex<Vec<String>>> = Arc::default();
        let cache = CallCache::open(&settings(dir.path(), &warnings), Arc::default())
            .expect("opens")
            .expect("on");
        let key = Key::of("call", &[&"question"]);
        assert!(!cache.usable());
        cache.put(key, "call", "answer".into(), 1, 1.0);
        assert_eq!(cache.get(&key), None);
        let warnings = warnings.lock().expect("lock");
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(warnings[0].contains("cannot be used"), "{}", warnings[0]);
    }

    #[test]
    fn a_database_of_a_newer_schema_is_warned_about_and_the_run_goes_on_without_it() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join(DATABASE_FILE);
        let key = Key::of("call", &[&"question"]);
        {
            let newer = rusqlite::Connection::open(&path).expect("opens");
            newer
                .execute_batch("CREATE TABLE answers (key BLOB PRIMARY KEY, text TEXT);")
                .expect("a newer layout");
            newer
                .pragma_update(None, "user_version", 99)
                .expect("a newer version");
        }
        let before = std::fs::read(&path).expect("the file");
        let warnings: Arc<Mutex<Vec<String>>> = Arc::default();
        let cache = CallCache::open(&settings(dir.path(), &warnings), Arc::default())
            .expect("opens")
            .expect("on");
        assert!(!cache.usable());
        cache.put(key, "call", "answer".into(), 1, 1.0);
        assert_eq!(cache.get(&key), None);
        cache.finish();
        drop(cache);
        let warnings = warnings.lock().expect("lock");
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(
            warnings[0].contains("cannot be used") && warnings[0].contains("schema version is 99"),
            "{}",
            warnings[0]
        );
        assert_eq!(std::fs::read(&path).expect("the file"), before);
    }

    #[test]
    fn a_cache_that_is_never_asked_creates_nothing() {
        let dir = tempfile::tempdir().expect("temp dir");
        let cache = CallCache::open(&settings(dir.path(), &Arc::default()), Arc::default())
            .expect("opens")
            .expect("on");
        cache.finish();
        drop(cache);
        assert!(!dir.path().join(DATABASE_FILE).exists());
    }

    #[test]
    fn the_mode_off_opens_nothing() {
        let dir = tempfile::tempdir().expect("temp dir");
        let settings = CacheSettings {
            dir: Some(dir.path().to_path_buf()),
            ..CacheSettings::default()
        };
        assert!(
            CallCache::open(&settings, Arc::default())
                .expect("opens")
                .is_none()
        );
        assert!(!dir.path().join(DATABASE_FILE).exists());
    }
}
