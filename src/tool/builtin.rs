//! The tools compiled into pagantic: what each one tells the model (a description and a JSON
//! Schema of its arguments) and what it does when called. They need nothing installed and touch
//! nothing outside what their arguments name; `read_file` never reads outside its root.

use std::fs::OpenOptions;
use std::io::{self, Read};
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Component, Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use num_traits::ToPrimitive;
use serde_json::{Value, json};

use super::calculator;
use crate::core::timestamp::civil_from_days;
use crate::core::{Failure, FailureCode};

/// The largest file `read_file` returns: enough for a document, small enough for a prompt.
const MAX_FILE_BYTES: u64 = 1024 * 1024;

use calculator::Number;

/// A tool compiled into pagantic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Builtin {
    /// Evaluates an arithmetic expression: `{"expression": "2 * (3 + 4) ^ 2"}` → `{"result": 98}`.
    Calculator,
    /// Reads a text file inside `root`: `{"path": "guide.md"}` → `{"path": …, "content": …}`.
    ReadFile {
        /// The only directory files are read from (symbolic links leading out are refused).
        root: PathBuf,
    },
    /// The current date and time: `{}` → `{"utc": "2026-11-22T02:13:00Z", "unix": 1795400000}`.
    CurrentTime,
}

impl Builtin {
    /// What the model is told about the tool: a description, and the JSON Schema its arguments
    /// must match.
    pub fn definition(&self) -> (&'static str, Value) {
        match self {
            Builtin::Calculator => (
                "Evaluates an arithmetic expression and returns the number. Supports + - * / % ^, \
                 parentheses, the constants pi and e, and the functions sqrt, abs, round, floor, \
                 ceil, min and max. Integer arithmetic is exact at any size up to 1024 bits (`/` \
                 when it divides evenly, `^` with a whole exponent); integers past 64 bits come \
                 back as strings of digits. Other results are doubles, marked `exact: false` when \
                 rounded.",
                json!({
                    "type": "object",
                    "properties": {
                        "expression": {
                            "type": "string",
                            "description": "The expression, e.g. `2 * (3 + 4) ^ 2`."
                        }
                    },
                    "required": ["expression"],
                    "additionalProperties": false
                }),
            ),
            Builtin::ReadFile { .. } => (
                "Reads a text file (at most 1 MiB) and returns its content.",
                json!({
                    "type": "object",
                    "properties": {
                        "path": {
                            "type": "string",
                            "description": "The file's path relative to the document root, e.g. `guide/setup.md`."
                        }
                    },
                    "required": ["path"],
                    "additionalProperties": false
                }),
            ),
            Builtin::CurrentTime => (
                "Returns the current date and time in UTC (ISO 8601) and as Unix seconds.",
                json!({ "type": "object", "properties": {}, "additionalProperties": false }),
            ),
        }
    }

    /// Runs the tool on arguments that match [`Builtin::definition`]'s schema (they are checked
    /// again here, so wrong arguments are an error, never a panic).
    ///
    /// `read_file` does blocking file I/O (at most 1 MiB); async callers may prefer
    /// `spawn_blocking`.
    pub fn call(&self, args: &Value) -> Result<Value, Failure> {
        match self {
            Builtin::Calculator => {
                self.check_fields(args, &["expression"])?;
                calculate(self.string_arg(args, "expression")?)
            }
            Builtin::ReadFile { root } => {
                self.check_fields(args, &["path"])?;
                read_file(root, self.string_arg(args, "path")?)
            }
            Builtin::CurrentTime => {
                self.check_fields(args, &[])?;
                current_time()
            }
        }
    }

    /// The directory a call works in and the files it reads, resolved, for keying a kept result
    /// on what it read rather than on how it was named: `read_file`'s canonical root and the
    /// file `args` names inside it (none when it resolves to nothing: that call fails, and a
    /// failure is never kept). The other builtins read nothing.
    pub fn reads(&self, args: &Value) -> (Option<PathBuf>, Vec<PathBuf>) {
        let Builtin::ReadFile { root } = self else {
            return (None, Vec::new());
        };
        let Ok(root) = root.canonicalize() else {
            return (None, Vec::new());
        };
        let file = args
            .get("path")
            .and_then(Value::as_str)
            .and_then(|requested| root.join(requested).canonicalize().ok())
            .filter(|file| file.starts_with(&root) && file.is_file());
        (Some(root), file.into_iter().collect())
    }

    /// The name plans use for the tool.
    fn name(&self) -> &'static str {
        match self {
            Builtin::Calculator => "calculator",
            Builtin::ReadFile { .. } => "read_file",
            Builtin::CurrentTime => "current_time",
        }
    }

    /// Arguments are an object (or `null`, as no arguments) with no fields but `allowed`.
    fn check_fields(&self, args: &Value, allowed: &[&str]) -> Result<(), Failure> {
        let name = self.name();
        let fields = match args {
            Value::Null => return Ok(()),
            Value::Object(fields) => fields,
            _ => {
                return Err(invalid(format!(
                    "the arguments of `{name}` must be a JSON object, not `{args}`"
                )));
            }
        };
        match fields.keys().find(|key| !allowed.contains(&key.as_str())) {
            None => Ok(()),
            Some(key) if allowed.is_empty() => Err(invalid(format!(
                "`{name}` takes no arguments, but was given `{key}`"
            ))),
            Some(key) => Err(invalid(format!(
                "`{name}` has no argument `{key}`; it takes `{}`",
                allowed.join("`, `")
            ))),
        }
    }

    fn string_arg<'a>(&self, args: &'a Value, field: &str) -> Result<&'a str, Failure> {
        args.get(field).and_then(Value::as_str).ok_or_else(|| {
            invalid(format!(
                "`{}` needs a string argument `{field}`",
                self.name()
            ))
        })
    }
}

fn invalid(message: String) -> Failure {
    Failure::new(FailureCode::ToolInvalidArguments, message)
}

fn calculate(expression: &str) -> Result<Value, Failure> {
    let evaluated = calculator::evaluate(expression).map_err(|error| {
        invalid(format!(
            "cannot evaluate `{}`: {error}",
            crate::core::text::excerpt(expression, 80)
        ))
    })?;
    let (result, exact) = match evaluated {
        // Past 64 bits a JSON number would be rounded by whoever reads it: digits instead.
        Number::Integer(n) => match (n.to_i64(), n.to_u64()) {
            (Some(small), _) => (Value::from(small), true),
            (None, Some(large)) => (Value::from(large), true),
            (None, None) => (Value::String(n.to_string()), true),
        },
        // Whole: prints as `3`, not `3.0`.
        Number::Real { value, exact } if value.fract() == 0.0 && value.abs() < 9.2e18 => {
            (Value::from(value as i64), exact)
        }
        Number::Real { value, exact } => (Value::from(value), exact),
    };
    if !exact {
        return Ok(json!({
            "result": result,
            "exact": false,
            "note": "the result is a rounded double (a fraction, a decimal or an irrational number \
                     a double cannot hold): it may be off in its last digits"
        }));
    }
    Ok(json!({ "result": result }))
}

fn read_file(root: &Path, requested: &str) -> Result<Value, Failure> {
    let relative = Path::new(requested);
    let plain = relative
        .components()
        .all(|part| matches!(part, Component::Normal(_) | Component::CurDir));
    if requested.is_empty() || !plain {
        return Err(invalid(format!(
            "`{requested}` is not a path inside the root: give a relative path without `..`"
        )));
    }
    let root = root
        .canonicalize()
        .ok()
        .filter(|root| root.is_dir())
        .ok_or_else(|| {
            Failure::new(
                FailureCode::ConfigFileError,
                format!(
                    "the root directory `{}` of `read_file` does not exist",
                    root.display()
                ),
            )
            .with_help("create it or fix the tool's `root`")
        })?;
    let not_readable = |error: io::Error| {
        let message = if error.kind() == io::ErrorKind::NotFound {
            format!("there is no file `{requested}`")
        } else {
            format!("cannot read `{requested}`: {error}")
        };
        Failure::new(FailureCode::ToolExecutionFailed, message).retryable(false)
    };
    let resolved = root.join(relative).canonicalize().map_err(not_readable)?;
    if !resolved.starts_with(&root) {
        return Err(invalid(format!(
            "`{requested}` leads outside the root through a symbolic link"
        )));
    }
    // The path can change between the checks above and the open (a directory swapped for a
    // symbolic link, a file for a FIFO), so what counts is what was opened: opened without
    // blocking (a FIFO would wait for a writer forever) and without following a last link,
    // then the descriptor itself must be a regular file whose real path is inside the root.
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NONBLOCK | nix::libc::O_NOFOLLOW)
        .open(&resolved)
        .map_err(not_readable)?;
    if !file.metadata().map_err(not_readable)?.is_file() {
        return Err(invalid(format!("`{requested}` is not a regular file")));
    }
    let opened =
        std::fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd())).map_err(not_readable)?;
    if !opened.starts_with(&root) {
        return Err(invalid(format!(
            "`{requested}` leads outside the root through a symbolic link"
        )));
    }
    let mut bytes = Vec::new();
    file.take(MAX_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(not_readable)?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(Failure::new(
            FailureCode::ToolExecutionFailed,
            format!("`{requested}` is larger than the 1 MiB `read_file` returns"),
        )
        .retryable(false));
    }
    Ok(json!({ "path": requested, "content": String::from_utf8_lossy(&bytes) }))
}

fn current_time() -> Result<Value, Failure> {
    let unix = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_err(|_| {
            Failure::new(
                FailureCode::ToolExecutionFailed,
                "the system clock is set before 1970",
            )
            .retryable(false)
        })?
        .as_secs();
    Ok(json!({ "utc": utc_timestamp(unix), "unix": unix }))
}

/// `YYYY-MM-DDTHH:MM:SSZ` for seconds since 1970-01-01 UTC.
fn utc_timestamp(unix: u64) -> String {
    let (year, month, day) = civil_from_days(unix / 86_400);
    let seconds = unix % 86_400;
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        seconds / 3600,
        seconds % 3600 / 60,
        seconds % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_fails(result: Result<Value, Failure>, code: FailureCode, message: &str) {
        let failure = result.unwrap_err();
        assert_eq!(failure.code, code, "{failure}");
        assert!(failure.message.contains(message), "{failure}");
    }

    #[test]
    fn definitions_are_valid_schemas_that_accept_their_examples() {
        let cases = [
            (
                Builtin::Calculator,
                json!({ "expression": "1 + 1" }),
                json!({ "expr": "1" }),
            ),
            (
                Builtin::ReadFile { root: ".".into() },
                json!({ "path": "a.md" }),
                json!({ "path": 3 }),
            ),
            (Builtin::CurrentTime, json!({}), json!({ "tz": "UTC" })),
        ];
        for (builtin, good, bad) in cases {
            let (description, schema) = builtin.definition();
            assert!(!description.is_empty());
            let validator = jsonschema::validator_for(&schema).unwrap();
            assert!(validator.is_valid(&good), "{builtin:?} rejects {good}");
            assert!(!validator.is_valid(&bad), "{builtin:?} accepts {bad}");
        }
    }

    #[test]
    fn the_calculator_returns_whole_results_as_integers() {
        let cases = [
            ("2 * (3 + 4) ^ 2", json!({ "result": 98 })),
            ("-3 * 2", json!({ "result": -6 })),
            ("-0", json!({ "result": 0 })),
            ("10 / 4", json!({ "result": 2.5 })),
            ("2 ^ 52", json!({ "result": 4_503_599_627_370_496u64 })),
        ];
        for (expression, expected) in cases {
            let args = json!({ "expression": expression });
            assert_eq!(Builtin::Calculator.call(&args).unwrap(), expected);
        }
    }

    /// Integers are exact at any size (past 64 bits as digits); a rounded double says
    /// so instead of passing itself off as exact.
    #[test]
    fn the_calculator_is_exact_with_integers_and_says_when_a_result_may_be_rounded() {
        let exact = [
            ("2 ^ 60", json!(1_152_921_504_606_846_976u64)),
            ("2 ^ 64 - 1", json!(u64::MAX)),
            ("2 ^ 64 + 1", json!("18446744073709551617")),
            ("-(2 ^ 64)", json!("-18446744073709551616")),
            ("(2^53 + 1) - 2^53", json!(1)),
            ("round(2.5)", json!(3)),
        ];
        for (expression, expected) in exact {
            let result = Builtin::Calculator
                .call(&json!({ "expression": expression }))
                .unwrap();
            assert_eq!(result, json!({ "result": expected }), "{expression}");
        }
        for expression in [
            "1 / 3",
            "0.1 + 0.2",
            "sqrt(2)",
            "2 * pi",
            "2^60 * 1.5 + 0.5",
        ] {
            let result = Builtin::Calculator
                .call(&json!({ "expression": expression }))
                .unwrap();
            assert_eq!(result["exact"], false, "{expression}: {result}");
        }
        let long = format!("1 + {}", "x".repeat(10_000_000));
        let failure = Builtin::Calculator
            .call(&json!({ "expression": long }))
            .unwrap_err();
        assert!(failure.message.len() < 300, "the message quotes an excerpt");
    }

    #[test]
    fn wrong_arguments_are_refused_with_the_reason() {
        let cases = [
            (
                Builtin::Calculator,
                json!({ "expression": "1 / 0" }),
                "cannot evaluate `1 / 0`: column 3: division by zero",
            ),
            (
                Builtin::Calculator,
                json!({}),
                "`calculator` needs a string argument `expression`",
            ),
            (
                Builtin::Calculator,
                json!({ "expression": 3 }),
                "`calculator` needs a string argument `expression`",
            ),
            (
                Builtin::Calculator,
                json!({ "expression": "1", "mode": "exact" }),
                "`calculator` has no argument `mode`; it takes `expression`",
            ),
            (
                Builtin::Calculator,
                json!(["1 + 1"]),
                "must be a JSON object, not `[\"1 + 1\"]`",
            ),
            (
                Builtin::CurrentTime,
                json!({ "tz": "UTC" }),
                "`current_time` takes no arguments, but was given `tz`",
            ),
            (
                Builtin::ReadFile { root: ".".into() },
                Value::Null,
                "`read_file` needs a string argument `path`",
            ),
        ];
        for (builtin, args, message) in cases {
            assert_fails(
                builtin.call(&args),
                FailureCode::ToolInvalidArguments,
                message,
            );
        }
    }

    #[test]
    fn read_file_reads_only_regular_files_inside_its_root() {
        let dir = tempfile::tempdir().expect("temp dir");
        let root = dir.path().join("root");
        std::fs::create_dir_all(root.join("sub")).unwrap();
        std::fs::write(root.join("inside.txt"), "inside").unwrap();
        std::fs::write(root.join("sub/nested.txt"), "nested").unwrap();
        std::fs::write(root.join("latin1.txt"), b"caf\xe9").unwrap();
        std::fs::write(root.join("max.txt"), vec![b'a'; 1024 * 1024]).unwrap();
        std::fs::write(root.join("big.txt"), vec![b'a'; 1024 * 1024 + 1]).unwrap();
        std::fs::write(dir.path().join("outside.txt"), "secret").unwrap();
        std::os::unix::fs::symlink("inside.txt", root.join("good-link")).unwrap();
        std::os::unix::fs::symlink("../outside.txt", root.join("bad-link")).unwrap();
        std::os::unix::fs::symlink("..", root.join("parent")).unwrap();
        let tool = Builtin::ReadFile { root: root.clone() };
        let read = |path: &str| tool.call(&json!({ "path": path }));

        let found = [
            ("inside.txt", "inside"),
            ("./inside.txt", "inside"),
            ("sub/nested.txt", "nested"),
            ("sub//nested.txt", "nested"),
            ("good-link", "inside"),
            ("latin1.txt", "caf\u{fffd}"),
        ];
        for (path, content) in found {
            let expected = json!({ "path": path, "content": content });
            assert_eq!(read(path).unwrap(), expected, "{path}");
        }
        let at_limit = read("max.txt").unwrap();
        assert_eq!(at_limit["content"].as_str().unwrap().len(), 1024 * 1024);

        let refused = [
            (
                "../outside.txt",
                FailureCode::ToolInvalidArguments,
                "without `..`",
            ),
            (
                "sub/../inside.txt",
                FailureCode::ToolInvalidArguments,
                "without `..`",
            ),
            (
                "/etc/passwd",
                FailureCode::ToolInvalidArguments,
                "without `..`",
            ),
            (
                "",
                FailureCode::ToolInvalidArguments,
                "not a path inside the root",
            ),
            (
                "bad-link",
                FailureCode::ToolInvalidArguments,
                "through a symbolic link",
            ),
            (
                "parent/outside.txt",
                FailureCode::ToolInvalidArguments,
                "through a symbolic link",
            ),
            (
                "sub",
                FailureCode::ToolInvalidArguments,
                "not a regular file",
            ),
            (".", FailureCode::ToolInvalidArguments, "not a regular file"),
            (
                "missing.txt",
                FailureCode::ToolExecutionFailed,
                "there is no file `missing.txt`",
            ),
            (
                "big.txt",
                FailureCode::ToolExecutionFailed,
                "larger than the 1 MiB",
            ),
        ];
        for (path, code, message) in refused {
            let failure = read(path).unwrap_err();
            assert_eq!(failure.code, code, "{path}: {failure}");
            assert!(failure.message.contains(message), "{path}: {failure}");
            assert!(!failure.retryable, "{path}");
        }

        let gone = Builtin::ReadFile {
            root: dir.path().join("no-such-root"),
        };
        assert_fails(
            gone.call(&json!({ "path": "inside.txt" })),
            FailureCode::ConfigFileError,
            "no-such-root` of `read_file` does not exist",
        );
    }

    #[test]
    fn read_file_reads_name_the_canonical_root_and_the_file_inside_it() {
        let dir = tempfile::tempdir().expect("dir");
        let root = dir.path().join("docs");
        std::fs::create_dir(&root).expect("root");
        std::fs::write(root.join("notes.txt"), "notes").expect("written");
        let canonical = root.canonicalize().expect("canonical");
        let tool = Builtin::ReadFile {
            root: dir.path().join("docs/../docs"),
        };
        assert_eq!(
            tool.reads(&json!({ "path": "./notes.txt" })),
            (Some(canonical.clone()), vec![canonical.join("notes.txt")])
        );
        assert_eq!(
            tool.reads(&json!({ "path": "missing.txt" })),
            (Some(canonical), Vec::new())
        );
        assert_eq!(
            Builtin::Calculator.reads(&json!({ "expression": "1" })),
            (None, Vec::new())
        );
    }

    #[test]
    fn timestamps_follow_the_gregorian_calendar() {
        let cases = [
            (0, "1970-01-01T00:00:00Z"),
            (951_782_400, "2000-02-29T00:00:00Z"),
            (1_709_164_800, "2024-02-29T00:00:00Z"),
            (1_795_400_000, "2026-11-23T02:13:20Z"),
            (4_102_444_800, "2100-01-01T00:00:00Z"),
            (253_402_300_799, "9999-12-31T23:59:59Z"),
        ];
        for (unix, expected) in cases {
            assert_eq!(utc_timestamp(unix), expected, "{unix}");
        }
    }

    #[test]
    fn current_time_reports_now_in_both_forms() {
        let before = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs();
        let now = Builtin::CurrentTime.call(&json!({})).unwrap();
        let after = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs();

        let unix = now["unix"].as_u64().unwrap();
        assert!((before..=after).contains(&unix));
        assert_eq!(now["utc"], utc_timestamp(unix));
        assert!(Builtin::CurrentTime.call(&Value::Null).unwrap()["unix"].is_u64());
    }

    /// A FIFO (or a file swapped for one) must not block the read forever.
    #[test]
    fn a_fifo_is_refused_without_blocking() {
        let dir = tempfile::tempdir().expect("temp dir");
        let made = std::process::Command::new("mkfifo")
            .arg(dir.path().join("pipe"))
            .status()
            .expect("mkfifo runs");
        assert!(made.success());
        let tool = Builtin::ReadFile {
            root: dir.path().to_path_buf(),
        };
        let failure = tool.call(&json!({ "path": "pipe" })).unwrap_err();
        assert_eq!(failure.code, FailureCode::ToolInvalidArguments);
        assert!(
            failure.message.contains("not a regular file"),
            "{}",
            failure.message
        );
    }
}
