//! The character-level scanner behind JSON repair: reads one JSON-like value from a starting point
//! and writes it back as strict JSON, recording every fix it made.
//!
//! It keeps a stack of open containers, what it expects next (a value, a key, a colon, a comma or
//! a closing bracket) and whether it is inside a string, so it never touches text inside strings.
//! It fixes what small models get wrong — single quotes, unquoted keys, comments, trailing or
//! missing commas, Python literals, raw control characters and stray quotes inside strings — and,
//! when the text stops early (the model ran out of tokens), closes the open string and containers
//! and drops a dangling comma or key. Numbers are copied as written, so big integers survive
//! exactly. It never recurses, so nesting depth cannot overflow the stack; every character is
//! read once, apart from short look-aheads over whitespace.

/// What a successful scan produced.
#[derive(Debug)]
pub(super) struct Scanned {
    /// The value as strict JSON.
    pub json: String,
    /// The byte offset in the source just past the value.
    pub end: usize,
    /// What was fixed, in the order first met; each fix once.
    pub fixes: Vec<String>,
}

/// Scans the value that starts at byte `start` of `source`; `None` when it cannot be repaired.
pub(super) fn scan(source: &str, start: usize) -> Option<Scanned> {
    let mut scanner = Scanner {
        source,
        pos: start,
        out: String::with_capacity(source.len().saturating_sub(start) + 8),
        stack: Vec::new(),
        expect: Expect::Value,
        comma: None,
        value_end: 0,
        fixes: Vec::new(),
        closed: 0,
    };
    scanner.run()?;
    let mut fixes: Vec<String> = scanner.fixes.iter().map(|f| f.to_string()).collect();
    match scanner.closed {
        0 => {}
        1 => fixes.push("closed 1 bracket".to_string()),
        n => fixes.push(format!("closed {n} brackets")),
    }
    Some(Scanned {
        json: scanner.out,
        end: scanner.pos,
        fixes,
    })
}

/// The marker that ends a markdown code block; never part of JSON outside a string.
const FENCE: &str = "```";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Object,
    Array,
}

impl Kind {
    fn closer(self) -> char {
        match self {
            Kind::Object => '}',
            Kind::Array => ']',
        }
    }
}

/// An open container.
#[derive(Debug)]
struct Frame {
    kind: Kind,
    /// Where its current member or element begins in the output (its comma included), so an
    /// incomplete one can be cut off.
    mark: usize,
}

/// What may come next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expect {
    Value,
    Key,
    Colon,
    CommaOrClose,
    Done,
}

struct Scanner<'a> {
    source: &'a str,
    /// Byte offset of the next character to read.
    pos: usize,
    out: String,
    stack: Vec<Frame>,
    expect: Expect,
    /// The output offset of a comma not yet followed by an element.
    comma: Option<usize>,
    /// The output offset just past the last complete value (where a missing comma goes).
    value_end: usize,
    fixes: Vec<&'static str>,
    /// How many containers were closed because the text stopped early.
    closed: usize,
}

impl<'a> Scanner<'a> {
    fn run(&mut self) -> Option<()> {
        while self.expect != Expect::Done {
            let rest = self.rest();
            let Some(c) = rest.chars().next() else {
                return self.finish();
            };
            if rest.starts_with(FENCE) {
                return self.finish();
            }
            if let Some((opener, closer)) = [("//", "\n"), ("#", "\n"), ("/*", "*/")]
                .into_iter()
                .find(|(opener, _)| rest.starts_with(opener))
            {
                self.skip_comment(opener, closer);
            } else if c.is_whitespace() {
                self.pos += c.len_utf8();
                // JSON allows only four whitespace characters; a no-break space becomes a space.
                self.out.push(if matches!(c, ' ' | '\t' | '\n' | '\r') {
                    c
                } else {
                    ' '
                });
            } else {
                match self.expect {
                    Expect::Value => self.value(c)?,
                    Expect::Key => self.key(c)?,
                    Expect::Colon => self.colon(c)?,
                    Expect::CommaOrClose => self.comma_or_close(c)?,
                    Expect::Done => {}
                }
            }
        }
        Some(())
    }

    fn rest(&self) -> &'a str {
        self.source.get(self.pos..).unwrap_or_default()
    }

    fn fix(&mut self, fix: &'static str) {
        if !self.fixes.contains(&fix) {
            self.fixes.push(fix);
        }
    }

    /// Skips a comment (`//` or `#` to the end of the line, `/* */`), or to the end of the text.
    fn skip_comment(&mut self, opener: &str, closer: &str) {
        self.fix("comments");
        let body = self.rest().get(opener.len()..).unwrap_or_default();
        // A line comment's newline is left to be copied as whitespace.
        let kept = if closer == "\n" { 0 } else { closer.len() };
        self.pos += opener.len() + body.find(closer).map_or(body.len(), |at| at + kept);
    }

    /// Whether the text stops here: nothing but whitespace left, or a closing code fence.
    fn at_cut(&self) -> bool {
        let rest = self.rest().trim_start();
        rest.is_empty() || rest.starts_with(FENCE)
    }

    fn top(&self) -> Option<Kind> {
        self.stack.last().map(|f| f.kind)
    }

    /// Starts an element or member: takes over a pending comma and marks where it begins.
    fn begin_item(&mut self) {
        // A member of an object begins at its key, not at its value.
        if self.expect == Expect::Value && self.top() == Some(Kind::Object) {
            return;
        }
        let mark = self.comma.take().unwrap_or(self.out.len());
        if let Some(frame) = self.stack.last_mut() {
            frame.mark = mark;
        }
    }

    fn value_done(&mut self) {
        self.value_end = self.out.len();
        self.expect = if self.stack.is_empty() {
            Expect::Done
        } else {
            Expect::CommaOrClose
        };
    }

    fn value(&mut self, c: char) -> Option<()> {
        match c {
            '{' | '[' => {
                self.begin_item();
                self.pos += 1;
                self.out.push(c);
                let (kind, expect) = if c == '{' {
                    (Kind::Object, Expect::Key)
                } else {
                    (Kind::Array, Expect::Value)
                };
                self.stack.push(Frame {
                    kind,
                    mark: self.out.len(),
                });
                self.expect = expect;
            }
            '"' | '\'' => {
                self.begin_item();
                if self.string(c) {
                    self.fix("closed string");
                }
                self.value_done();
            }
            '-' | '0'..='9' => {
                self.begin_item();
                self.number()?;
            }
            ']' | '}' if self.top() == Some(Kind::Array) => self.close(c)?,
            c if c.is_alphabetic() => {
                self.begin_item();
                self.literal()?;
            }
            _ => return None,
        }
        Some(())
    }

    fn key(&mut self, c: char) -> Option<()> {
        match c {
            '"' | '\'' => {
                self.begin_item();
                // A key cut off mid-way is dropped when the text ends, so it is not reported.
                self.string(c);
                self.expect = Expect::Colon;
            }
            '}' | ']' => self.close(c)?,
            c if starts_bare_key(c) => {
                self.begin_item();
                self.fix("unquoted keys");
                let rest = self.rest();
                let len = rest
                    .find(|c: char| !(starts_bare_key(c) || c == '-'))
                    .unwrap_or(rest.len());
                self.out.push('"');
                self.out.push_str(&rest[..len]);
                self.out.push('"');
                self.pos += len;
                self.expect = Expect::Colon;
            }
            _ => return None,
        }
        Some(())
    }

    fn colon(&mut self, c: char) -> Option<()> {
        (c == ':').then_some(())?;
        self.pos += 1;
        self.out.push(':');
        self.expect = Expect::Value;
        Some(())
    }

    fn comma_or_close(&mut self, c: char) -> Option<()> {
        let kind = self.top()?;
        match c {
            ',' => {
                self.pos += 1;
                self.comma = Some(self.out.len());
                self.out.push(',');
            }
            '}' | ']' => return self.close(c),
            // Two items with nothing between them: the model forgot the comma.
            c if (kind == Kind::Object && (c == '"' || c == '\'' || starts_bare_key(c)))
                || (kind == Kind::Array && starts_value(c)) =>
            {
                self.fix("missing commas");
                self.out.insert(self.value_end, ',');
                self.comma = Some(self.value_end);
            }
            _ => return None,
        }
        self.expect = match kind {
            Kind::Object => Expect::Key,
            Kind::Array => Expect::Value,
        };
        Some(())
    }

    /// Closes the innermost open container of the closer's kind, and any opened inside it.
    fn close(&mut self, closer: char) -> Option<()> {
        let kind = if closer == '}' {
            Kind::Object
        } else {
            Kind::Array
        };
        let at = self.stack.iter().rposition(|f| f.kind == kind)?;
        self.pos += 1;
        if let Some(comma) = self.comma.take() {
            self.fix("trailing comma");
            self.out.remove(comma);
        }
        if at + 1 < self.stack.len() {
            self.fix("mismatched brackets");
        }
        for frame in self.stack.drain(at..).rev() {
            self.out.push(frame.kind.closer());
        }
        self.value_done();
        Some(())
    }

    /// The text stopped (or a closing fence came) inside the value: drops what is incomplete and
    /// closes what is open.
    fn finish(&mut self) -> Option<()> {
        let Some(frame) = self.stack.last() else {
            return (self.expect == Expect::Done).then_some(());
        };
        let (kind, mark) = (frame.kind, frame.mark);
        if let Some(comma) = self.comma.take() {
            self.fix("dropped dangling comma");
            self.out.truncate(comma);
        } else if matches!(self.expect, Expect::Value | Expect::Colon)
            && !self.out.get(mark..).unwrap_or_default().trim().is_empty()
        {
            self.fix(match kind {
                Kind::Object => "dropped dangling key",
                Kind::Array => "dropped incomplete value",
            });
            self.out.truncate(mark);
        }
        self.closed = self.stack.len();
        for frame in self.stack.drain(..).rev() {
            self.out.push(frame.kind.closer());
        }
        self.expect = Expect::Done;
        Some(())
    }

    /// Reads a string from its opening quote and writes it double-quoted; returns whether the
    /// text stopped before the closing quote.
    fn string(&mut self, quote: char) -> bool {
        if quote == '\'' {
            self.fix("single quotes");
        }
        self.pos += 1;
        self.out.push('"');
        // In a value inside a container, a quote followed by more words is taken for a quote the
        // model forgot to escape. A key is followed by its colon, and nothing follows a value at
        // the top level, so there the first quote closes.
        let always_closes = self.stack.is_empty() || self.expect == Expect::Key;
        while let Some(c) = self.rest().chars().next() {
            self.pos += c.len_utf8();
            match c {
                '\\' => self.escape(),
                c if c == quote => {
                    if always_closes || quote_closes(self.rest()) {
                        self.out.push('"');
                        return false;
                    }
                    self.fix("unescaped quotes");
                    self.out.push_str(if quote == '"' { "\\\"" } else { "'" });
                }
                '"' => self.out.push_str("\\\""),
                // A string left open, cut off by the closing fence on the next line.
                '\n' if self
                    .rest()
                    .trim_start_matches([' ', '\t'])
                    .starts_with(FENCE) =>
                {
                    self.pos -= 1;
                    break;
                }
                '\n' | '\r' | '\t' => {
                    self.fix("control characters");
                    self.out.push_str(match c {
                        '\n' => "\\n",
                        '\r' => "\\r",
                        _ => "\\t",
                    });
                }
                c if c < ' ' => {
                    self.fix("control characters");
                    self.out.push_str(&format!("\\u{:04x}", u32::from(c)));
                }
                c => self.out.push(c),
            }
        }
        self.out.push('"');
        true
    }

    /// Copies the escape after a backslash; a backslash JSON does not allow becomes a literal one,
    /// and one cut off by the end of the text is dropped.
    fn escape(&mut self) {
        let rest = self.rest();
        let Some(c) = rest.chars().next() else {
            return;
        };
        match c {
            '"' | '\\' | '/' | 'b' | 'f' | 'n' | 'r' | 't' => {
                self.pos += 1;
                self.out.push('\\');
                self.out.push(c);
            }
            '\'' => {
                self.pos += 1;
                self.out.push('\'');
            }
            'u' => self.unicode_escape(rest),
            _ => {
                self.fix("invalid escapes");
                self.out.push_str("\\\\");
            }
        }
    }

    /// Copies a `\uXXXX` escape (`rest` starts at the `u`); surrogates only as pairs. An escape
    /// cut off by the end of the text is dropped, a lone surrogate becomes U+FFFD, and a `\u`
    /// without four hex digits a literal backslash.
    fn unicode_escape(&mut self, rest: &str) {
        let is_high = |code: u32| (0xD800..=0xDBFF).contains(&code);
        let is_low = |code: u32| (0xDC00..=0xDFFF).contains(&code);
        let digits = rest.get(1..).unwrap_or_default();
        let Some(code) = hex4(digits) else {
            if digits.len() < 4 && digits.bytes().all(|b| b.is_ascii_hexdigit()) {
                self.pos += rest.len();
            } else {
                self.fix("invalid escapes");
                self.out.push_str("\\\\");
            }
            return;
        };
        let after = rest.get(5..).unwrap_or_default();
        let paired = after.strip_prefix("\\u").and_then(hex4).is_some_and(is_low);
        let cut_before_pair = after.len() < 6
            && after
                .chars()
                .all(|c| matches!(c, '\\' | 'u') || c.is_ascii_hexdigit());
        let len = if !is_high(code) && !is_low(code) {
            5
        } else if is_high(code) && paired {
            11
        } else {
            if is_high(code) && cut_before_pair {
                self.pos += rest.len();
            } else {
                self.fix("invalid escapes");
                self.out.push_str("\\ufffd");
                self.pos += 5;
            }
            return;
        };
        self.out.push('\\');
        self.out.push_str(&rest[..len]);
        self.pos += len;
    }

    /// Copies a number as written; one cut off by the end of the text loses its incomplete tail
    /// (`1.` → `1`), or is dropped when nothing is left (`-`).
    fn number(&mut self) -> Option<()> {
        let rest = self.rest();
        let len = rest
            .find(|c: char| !(c.is_ascii_digit() || matches!(c, '-' | '+' | '.' | 'e' | 'E')))
            .unwrap_or(rest.len());
        let mut text = &rest[..len];
        self.pos += len;
        if !is_json_number(text) {
            if !self.at_cut() {
                return None;
            }
            text = text.trim_end_matches(['-', '+', '.', 'e', 'E']);
            if text.is_empty() {
                return Some(());
            }
            if !is_json_number(text) {
                return None;
            }
            self.fix("cut-off number");
        }
        self.out.push_str(text);
        self.value_done();
        Some(())
    }

    /// Reads `true`, `false`, `null`, their Python spellings, or (where the text stops) the start
    /// of one.
    fn literal(&mut self) -> Option<()> {
        let rest = self.rest();
        let len = rest
            .find(|c: char| !(c.is_alphanumeric() || c == '_'))
            .unwrap_or(rest.len());
        let word = &rest[..len];
        self.pos += len;
        let json = match word {
            "true" | "false" | "null" => word,
            "True" | "False" | "None" => {
                self.fix("python literals");
                python_literal(word)
            }
            _ if self.at_cut() => {
                let full = ["true", "false", "null", "True", "False", "None"]
                    .into_iter()
                    .find(|l| l.starts_with(word))?;
                self.fix("cut-off literal");
                python_literal(full)
            }
            _ => return None,
        };
        self.out.push_str(json);
        self.value_done();
        Some(())
    }
}

/// `True` → `true`, `False` → `false`, `None` → `null`; JSON spellings unchanged.
fn python_literal(word: &str) -> &'static str {
    match word {
        "true" | "True" => "true",
        "false" | "False" => "false",
        _ => "null",
    }
}

/// The value of four hex digits at the start of `text`.
fn hex4(text: &str) -> Option<u32> {
    let digits = text.get(..4)?;
    if digits.bytes().all(|b| b.is_ascii_hexdigit()) {
        u32::from_str_radix(digits, 16).ok()
    } else {
        None
    }
}

/// Whether a quote followed by `rest` ends its string: what follows must be able to follow a
/// string (punctuation, a comment, the end of the text or of the line); a word on the same line
/// means the quote belongs inside.
fn quote_closes(rest: &str) -> bool {
    let next = rest.trim_start_matches([' ', '\t']);
    next.is_empty() || next.starts_with([',', ':', '}', ']', '"', '/', '`', '#', '\r', '\n'])
}

fn starts_bare_key(c: char) -> bool {
    c.is_alphanumeric() || c == '_' || c == '$'
}

fn starts_value(c: char) -> bool {
    matches!(c, '{' | '[' | '"' | '\'' | '-') || c.is_ascii_digit() || c.is_alphabetic()
}

/// Whether `text` is a number as JSON writes it: `-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?`.
fn is_json_number(text: &str) -> bool {
    let bytes = text.as_bytes();
    let digits_from = |i: usize| {
        i + bytes
            .get(i..)
            .unwrap_or_default()
            .iter()
            .take_while(|b| b.is_ascii_digit())
            .count()
    };
    let mut i = usize::from(bytes.first() == Some(&b'-'));
    match bytes.get(i) {
        Some(b'0') => i += 1,
        Some(b'1'..=b'9') => i = digits_from(i),
        _ => return false,
    }
    if bytes.get(i) == Some(&b'.') {
        let end = digits_from(i + 1);
        if end == i + 1 {
            return false;
        }
        i = end;
    }
    if matches!(bytes.get(i), Some(b'e' | b'E')) {
        i += 1;
        if matches!(bytes.get(i), Some(b'+' | b'-')) {
            i += 1;
        }
        let end = digits_from(i);
        if end == i {
            return false;
        }
        i = end;
    }
    i == bytes.len()
}
