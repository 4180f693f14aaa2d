//! A chat's transcript file: `chat --save FILE` writes it as the conversation goes, `chat --load
//! FILE` continues it.
//!
//! One JSON object per line, `{"session": ID, "role": "user" | "assistant", "content": TEXT}`,
//! each turn added as soon as it is answered, so a conversation that ends badly keeps every turn
//! it finished. The file is rewritten whole and atomically at each turn (never half a turn in
//! it; a symbolic link at its path is replaced, not written through), and read whole with a
//! bound (a device or FIFO named by `--load` is refused). The session id is the conversation's across every process that
//! continues it, and every line of the chat's `--events` file carries it too.

use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::core::file::{TEXT_LIMIT, read_bounded, write_atomic};
use crate::core::{Message, Role};

/// One line of a transcript.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Line {
    session: String,
    role: Role,
    content: String,
}

/// A transcript read back: its session and messages.
#[derive(Debug, Clone, PartialEq)]
pub struct Loaded {
    pub session: String,
    pub messages: Vec<Message>,
}

/// A transcript line that is not one; says where and why.
#[derive(Debug, thiserror::Error)]
#[error("{path}:{line}: {reason}")]
pub struct TranscriptError {
    path: PathBuf,
    line: usize,
    reason: String,
}

/// Reads a transcript: every line a user or assistant message of one session.
pub fn load(path: &Path) -> Result<Loaded, TranscriptError> {
    let fail = |line: usize, reason: String| TranscriptError {
        path: path.to_path_buf(),
        line,
        reason,
    };
    let whole = read_bounded(path, TEXT_LIMIT)
        .map_err(|e| fail(0, format!("cannot read it: {}", e.reason())))?;
    let mut session: Option<String> = None;
    let mut messages = Vec::new();
    for (index, text) in whole.lines().enumerate() {
        let number = index + 1;
        if text.trim().is_empty() {
            continue;
        }
        let line: Line = serde_json::from_str(text).map_err(|e| {
            fail(
                number,
                format!("not a transcript line ({{\"session\", \"role\", \"content\"}}): {e}"),
            )
        })?;
        if !matches!(line.role, Role::User | Role::Assistant) {
            return Err(fail(
                number,
                "only `user` and `assistant` messages belong in a transcript".into(),
            ));
        }
        match &session {
            Some(first) if *first != line.session => {
                return Err(fail(
                    number,
                    format!(
                        "session `{}` differs from the file's first line (`{first}`)",
                        line.session
                    ),
                ));
            }
            Some(_) => {}
            None => session = Some(line.session.clone()),
        }
        messages.push(match line.role {
            Role::User => Message::user(line.content),
            _ => Message::assistant(line.content),
        });
    }
    let session = session.ok_or_else(|| fail(0, "the transcript is empty".into()))?;
    Ok(Loaded { session, messages })
}

/// Adds a conversation's turns to its transcript file.
pub struct Writer {
    path: PathBuf,
    /// Everything the file holds: what it held when opened, and every line added since.
    text: String,
    /// Whether `text` began with what the file held.
    kept_existing: bool,
    session: String,
}

impl Writer {
    /// A transcript at `path` to add to: what a regular file there holds is kept; a symbolic
    /// link there is not read (whatever it points at stays out of the transcript), and is
    /// replaced by the file at the first write.
    pub fn append(path: &Path, session: &str) -> io::Result<Self> {
        let regular = std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_file());
        let text = if regular {
            read_bounded(path, TEXT_LIMIT).map_err(io::Error::other)?
        } else {
            String::new()
        };
        Ok(Writer {
            path: path.to_path_buf(),
            kept_existing: !text.is_empty(),
            text,
            session: session.to_string(),
        })
    }

    /// Whether the file already held lines when it was opened (and still holds them).
    pub fn kept_existing(&self) -> bool {
        self.kept_existing
    }

    /// Writes messages (a whole turn at once, so a turn is never half in the file).
    pub fn write(&mut self, messages: &[Message]) -> io::Result<()> {
        for message in messages {
            let line = Line {
                session: self.session.clone(),
                role: message.role,
                content: message.content.clone(),
            };
            self.text
                .push_str(&serde_json::to_string(&line).map_err(io::Error::other)?);
            self.text.push('\n');
        }
        write_atomic(&self.path, self.text.as_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_written_transcript_loads_back() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let path = dir.path().join("chat.jsonl");
        let turn = [Message::user("hi"), Message::assistant("hello\nthere")];
        Writer::append(&path, "s1")
            .and_then(|mut w| w.write(&turn))
            .expect("written");
        Writer::append(&path, "s1")
            .and_then(|mut w| w.write(&[Message::user("again"), Message::assistant("yes")]))
            .expect("appended");
        let loaded = load(&path).expect("loads");
        assert_eq!(loaded.session, "s1");
        let contents: Vec<&str> = loaded.messages.iter().map(|m| m.content.as_str()).collect();
        assert_eq!(contents, ["hi", "hello\nthere", "again", "yes"]);
    }

    #[test]
    fn saving_replaces_a_symbolic_link_without_reading_or_writing_its_target() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let secret = dir.path().join("secret.txt");
        std::fs::write(&secret, "private\n").expect("written");
        let path = dir.path().join("chat.jsonl");
        std::os::unix::fs::symlink(&secret, &path).expect("linked");
        let mut writer = Writer::append(&path, "s1").expect("opened");
        assert!(!writer.kept_existing());
        writer.write(&[Message::user("hi")]).expect("written");
        assert_eq!(std::fs::read_to_string(&secret).expect("read"), "private\n");
        let saved = std::fs::read_to_string(&path).expect("read");
        assert!(!saved.contains("private"), "{saved}");
        assert_eq!(load(&path).expect("loads").messages.len(), 1);
    }

    #[test]
    fn a_device_or_fifo_is_refused_as_a_transcript() {
        let error = load(Path::new("/dev/zero")).expect_err("a device");
        assert_eq!(error.line, 0);
        assert!(error.to_string().contains("not a regular file"), "{error}");
    }

    #[test]
    fn a_bad_line_is_named_with_its_number() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let path = dir.path().join("chat.jsonl");
        let cases = [
            (
                "{\"session\":\"s\",\"role\":\"user\",\"content\":\"a\"}\nnot json\n",
                2,
                "not a transcript line",
            ),
            (
                "{\"session\":\"s\",\"role\":\"tool\",\"content\":\"a\"}\n",
                1,
                "only `user` and `assistant`",
            ),
            (
                "{\"session\":\"s\",\"role\":\"user\",\"content\":\"a\"}\n{\"session\":\"t\",\"role\":\"assistant\",\"content\":\"b\"}\n",
                2,
                "differs",
            ),
            ("\n", 0, "empty"),
        ];
        for (text, line, reason) in cases {
            std::fs::write(&path, text).expect("written");
            let error = load(&path).expect_err(text);
            assert_eq!(error.line, line, "{text}");
            assert!(error.to_string().contains(reason), "{error}");
        }
    }
}
