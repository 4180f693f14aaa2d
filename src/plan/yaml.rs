//! A YAML tree that remembers where every node came from.
//!
//! serde_yaml reports positions only for syntax errors; once a document parses, a wrong type three
//! levels down can no longer be traced back to its line. Every later stage of plan loading (schema
//! validation, semantic checks) needs to point at the offending node, so we build our own small tree
//! from saphyr-parser's span-carrying events and keep a byte range on every node and every key.
//!
//! The tree follows the YAML 1.2 core schema for plain scalars (null, booleans, integers, floats,
//! strings), resolves anchors and aliases with an expansion budget (no "billion laughs"), rejects
//! duplicate keys, complex keys, unknown tags and nesting deeper than [`MAX_DEPTH`], and converts to
//! `serde_json::Value` for schema validation and typed deserialisation.

use std::collections::HashMap;
use std::ops::Range;

use saphyr_parser::{Event, Parser, ScalarStyle, Span as YamlSpan};
use serde_json::{Map, Number, Value};

/// Deepest nesting of mappings and sequences accepted in a plan file.
pub const MAX_DEPTH: usize = 64;

/// Most nodes a document may expand to once aliases are resolved: room for a plan with 100,000
/// keyed values (a large `vars` table), while an alias bomb still stops within milliseconds.
pub const MAX_NODES: usize = 500_000;

/// A byte range in the source text.
pub type ByteSpan = Range<usize>;

/// One YAML node with the byte range it was written at.
#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    pub span: ByteSpan,
    pub value: NodeValue,
    /// True for flow-style collections (`{…}` / `[…]`); used to spot unquoted `{{ template }}`s.
    pub flow: bool,
}

/// The value of a node, already resolved to JSON's data model.
#[derive(Debug, Clone, PartialEq)]
pub enum NodeValue {
    Null,
    Bool(bool),
    Number(Number),
    String(String),
    Seq(Vec<Node>),
    Map(Vec<Entry>),
}

/// One `key: value` pair of a mapping.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    pub key: String,
    pub key_span: ByteSpan,
    pub value: Node,
}

/// Why a YAML document could not be turned into a tree.
#[derive(Debug, Clone, PartialEq)]
pub enum YamlError {
    /// The scanner or parser rejected the text.
    Syntax { message: String, at: usize },
    /// The same key appears twice in one mapping.
    DuplicateKey {
        key: String,
        first: ByteSpan,
        second: ByteSpan,
    },
    /// A mapping key that is itself a mapping, a sequence, or null.
    ComplexKey { at: ByteSpan },
    /// A tag other than the core schema's `!!str`, `!!int`, `!!float`, `!!bool`, `!!null`, `!!map`, `!!seq`.
    UnsupportedTag { tag: String, at: ByteSpan },
    /// A scalar tagged `!!int` etc. that is not of that type, or a number JSON cannot hold.
    BadScalar { message: String, at: ByteSpan },
    /// Nesting deeper than [`MAX_DEPTH`].
    TooDeep { at: ByteSpan },
    /// Aliases expand the document past [`MAX_NODES`].
    TooLarge { at: ByteSpan },
    /// More than one `---` document in a plan file.
    MultipleDocuments { at: ByteSpan },
    /// No document at all (an empty file, or only comments).
    Empty,
}

impl Node {
    /// Converts the tree to JSON (keys in document order).
    pub fn to_json(&self) -> Value {
        match &self.value {
            NodeValue::Null => Value::Null,
            NodeValue::Bool(b) => Value::Bool(*b),
            NodeValue::Number(n) => Value::Number(n.clone()),
            NodeValue::String(s) => Value::String(s.clone()),
            NodeValue::Seq(items) => Value::Array(items.iter().map(Node::to_json).collect()),
            NodeValue::Map(entries) => {
                let mut map = Map::with_capacity(entries.len());
                for entry in entries {
                    map.insert(entry.key.clone(), entry.value.to_json());
                }
                Value::Object(map)
            }
        }
    }

    /// The entry named `key`, when this node is a mapping that has it.
    pub fn entry(&self, key: &str) -> Option<&Entry> {
        match &self.value {
            NodeValue::Map(entries) => entries.iter().find(|e| e.key == key),
            _ => None,
        }
    }

    /// The value under `key`, when this node is a mapping that has it.
    pub fn get(&self, key: &str) -> Option<&Node> {
        self.entry(key).map(|e| &e.value)
    }

    /// The string value of a scalar node.
    pub fn as_str(&self) -> Option<&str> {
        match &self.value {
            NodeValue::String(s) => Some(s),
            _ => None,
        }
    }

    /// Items of a sequence node (empty for anything else).
    pub fn items(&self) -> &[Node] {
        match &self.value {
            NodeValue::Seq(items) => items,
            _ => &[],
        }
    }

    /// Follows a JSON-pointer-like path of keys and indices. Returns the node found and, when the
    /// last step was a mapping key, that key's span. Stops at the deepest node that exists.
    pub fn locate<S: AsRef<str>>(&self, path: impl IntoIterator<Item = S>) -> Located<'_> {
        let mut node = self;
        let mut key_span = None;
        for segment in path {
            let segment = segment.as_ref();
            let next = match &node.value {
                NodeValue::Map(entries) => entries
                    .iter()
                    .find(|e| e.key == segment)
                    .map(|e| (&e.value, Some(&e.key_span))),
                NodeValue::Seq(items) => segment
                    .parse::<usize>()
                    .ok()
                    .and_then(|i| items.get(i))
                    .map(|n| (n, None)),
                _ => None,
            };
            match next {
                Some((n, k)) => {
                    node = n;
                    key_span = k;
                }
                None => break,
            }
        }
        Located { node, key_span }
    }
}

/// The result of [`Node::locate`].
#[derive(Debug, Clone, Copy)]
pub struct Located<'a> {
    pub node: &'a Node,
    pub key_span: Option<&'a ByteSpan>,
}

/// Parses one YAML document into a [`Node`] tree.
pub fn parse(source: &str) -> Result<Node, YamlError> {
    let offsets = CharOffsets::new(source);
    let mut builder = Builder::default();
    let mut seen_document = false;
    for event in Parser::new_from_str(source) {
        let (event, span) = event.map_err(|e| YamlError::Syntax {
            message: e.info().to_string(),
            at: offsets.byte(e.marker().index()),
        })?;
        let span = offsets.span(span);
        match event {
            Event::DocumentStart(_) => {
                if seen_document {
                    return Err(YamlError::MultipleDocuments { at: span });
                }
                seen_document = true;
            }
            Event::Nothing | Event::StreamStart | Event::StreamEnd | Event::DocumentEnd => {}
            Event::Alias(id) => builder.alias(id, span)?,
            Event::Scalar(text, style, anchor, tag) => {
                let tag = tag.map(|t| format!("{}{}", t.handle, t.suffix));
                let value = resolve_scalar(&text, style, tag.as_deref(), &span)?;
                builder.push_node(
                    Node {
                        span,
                        value,
                        flow: false,
                    },
                    anchor,
                )?;
            }
            Event::SequenceStart(anchor, tag) => {
                check_collection_tag(
                    tag.map(|t| format!("{}{}", t.handle, t.suffix)),
                    "!!seq",
                    &span,
                )?;
                builder.open(Open::Seq(Vec::new()), anchor, span)?;
            }
            Event::MappingStart(anchor, tag) => {
                check_collection_tag(
                    tag.map(|t| format!("{}{}", t.handle, t.suffix)),
                    "!!map",
                    &span,
                )?;
                builder.open(
                    Open::Map {
                        entries: Vec::new(),
                        positions: HashMap::new(),
                        pending_key: None,
                    },
                    anchor,
                    span,
                )?;
            }
            Event::SequenceEnd | Event::MappingEnd => builder.close(span)?,
        }
    }
    builder.root.ok_or(YamlError::Empty)
}

/// Maps saphyr's character indices to byte offsets (identity for ASCII text).
struct CharOffsets {
    /// Byte offset of every char, plus the length; empty when the text is ASCII.
    table: Vec<usize>,
    len: usize,
}

impl CharOffsets {
    fn new(source: &str) -> Self {
        let table = if source.is_ascii() {
            Vec::new()
        } else {
            source
                .char_indices()
                .map(|(i, _)| i)
                .chain(std::iter::once(source.len()))
                .collect()
        };
        CharOffsets {
            table,
            len: source.len(),
        }
    }

    fn byte(&self, char_index: usize) -> usize {
        if self.table.is_empty() {
            char_index.min(self.len)
        } else {
            self.table.get(char_index).copied().unwrap_or(self.len)
        }
    }

    fn span(&self, span: YamlSpan) -> ByteSpan {
        let start = self.byte(span.start.index());
        let end = self.byte(span.end.index()).max(start);
        start..end
    }
}

const CORE_TAG_PREFIX: &str = "tag:yaml.org,2002:";

fn normalise_tag(tag: &str) -> String {
    match tag.strip_prefix(CORE_TAG_PREFIX) {
        Some(rest) => format!("!!{rest}"),
        None => tag.to_string(),
    }
}

fn check_collection_tag(
    tag: Option<String>,
    expected: &str,
    span: &ByteSpan,
) -> Result<(), YamlError> {
    match tag.map(|t| normalise_tag(&t)) {
        None => Ok(()),
        Some(t) if t == expected => Ok(()),
        Some(t) => Err(YamlError::UnsupportedTag {
            tag: t,
            at: span.clone(),
        }),
    }
}

/// Resolves a scalar by the YAML 1.2 core schema, honouring core tags.
fn resolve_scalar(
    text: &str,
    style: ScalarStyle,
    tag: Option<&str>,
    span: &ByteSpan,
) -> Result<NodeValue, YamlError> {
    let bad = |what: &str| YamlError::BadScalar {
        message: format!("`{text}` is not {what}"),
        at: span.clone(),
    };
    match tag.map(normalise_tag).as_deref() {
        Some("!!str") => Ok(NodeValue::String(text.to_string())),
        Some("!!null") => plain_null(text)
            .then_some(NodeValue::Null)
            .ok_or_else(|| bad("null")),
        Some("!!bool") => plain_bool(text)
            .map(NodeValue::Bool)
            .ok_or_else(|| bad("a boolean")),
        Some("!!int") => plain_int(text)
            .ok_or_else(|| bad("an integer"))?
            .map_err(|m| YamlError::BadScalar {
                message: m,
                at: span.clone(),
            }),
        Some("!!float") => plain_float(text)
            .ok_or_else(|| bad("a float"))?
            .map_err(|m| YamlError::BadScalar {
                message: m,
                at: span.clone(),
            }),
        Some(other) => Err(YamlError::UnsupportedTag {
            tag: other.to_string(),
            at: span.clone(),
        }),
        None if style != ScalarStyle::Plain => Ok(NodeValue::String(text.to_string())),
        None => {
            if plain_null(text) {
                return Ok(NodeValue::Null);
            }
            if let Some(b) = plain_bool(text) {
                return Ok(NodeValue::Bool(b));
            }
            if let Some(n) = plain_int(text).or_else(|| plain_float(text)) {
                return n.map_err(|m| YamlError::BadScalar {
                    message: m,
                    at: span.clone(),
                });
            }
            Ok(NodeValue::String(text.to_string()))
        }
    }
}

fn plain_null(text: &str) -> bool {
    matches!(text, "" | "~" | "null" | "Null" | "NULL")
}

fn plain_bool(text: &str) -> Option<bool> {
    match text {
        "true" | "True" | "TRUE" => Some(true),
        "false" | "False" | "FALSE" => Some(false),
        _ => None,
    }
}

/// `None` when the text is not an integer; `Some(Err)` when it is one JSON cannot hold exactly.
fn plain_int(text: &str) -> Option<Result<NodeValue, String>> {
    let (negative, digits) = match text.as_bytes().first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    let (radix, body) = if let Some(hex) = digits.strip_prefix("0x") {
        (16, hex)
    } else if let Some(oct) = digits.strip_prefix("0o") {
        (8, oct)
    } else {
        (10, digits)
    };
    if body.is_empty()
        || !body.chars().all(|c| c.is_digit(radix))
        || (radix != 10 && text.starts_with(['-', '+']))
    {
        return None;
    }
    let parsed = u64::from_str_radix(body, radix).ok().and_then(|magnitude| {
        if negative {
            0i64.checked_sub_unsigned(magnitude).map(Number::from)
        } else {
            Some(Number::from(magnitude))
        }
    });
    Some(parsed.map(NodeValue::Number).ok_or_else(|| {
        format!(
            "the integer `{text}` is too large (the largest accepted is {})",
            u64::MAX
        )
    }))
}

fn plain_float(text: &str) -> Option<Result<NodeValue, String>> {
    let lower = text.to_ascii_lowercase();
    if matches!(lower.as_str(), ".inf" | "+.inf" | "-.inf" | ".nan") {
        return Some(Err(format!(
            "`{text}` cannot be represented in JSON; write a finite number"
        )));
    }
    let looks_numeric = text
        .chars()
        .all(|c| c.is_ascii_digit() || matches!(c, '.' | 'e' | 'E' | '+' | '-'))
        && text.chars().any(|c| c.is_ascii_digit());
    if !looks_numeric {
        return None;
    }
    let value: f64 = text.parse().ok()?;
    Some(
        Number::from_f64(value)
            .map(NodeValue::Number)
            .ok_or_else(|| format!("the number `{text}` is out of range")),
    )
}

/// A collection still being filled.
enum Open {
    Seq(Vec<Node>),
    Map {
        entries: Vec<Entry>,
        /// Each key's position in `entries`, so a duplicate is found in constant time (a plan
        /// with 100,000 keys in one mapping must not take quadratic time).
        positions: HashMap<String, usize>,
        pending_key: Option<(String, ByteSpan)>,
    },
}

struct Frame {
    open: Open,
    anchor: usize,
    start: ByteSpan,
}

/// Builds the tree from events without recursion.
#[derive(Default)]
struct Builder {
    stack: Vec<Frame>,
    anchors: HashMap<usize, Node>,
    root: Option<Node>,
    nodes: usize,
}

impl Builder {
    fn count(&mut self, added: usize, at: &ByteSpan) -> Result<(), YamlError> {
        self.nodes = self.nodes.saturating_add(added);
        if self.nodes > MAX_NODES {
            return Err(YamlError::TooLarge { at: at.clone() });
        }
        Ok(())
    }

    fn open(&mut self, open: Open, anchor: usize, start: ByteSpan) -> Result<(), YamlError> {
        if self.stack.len() >= MAX_DEPTH {
            return Err(YamlError::TooDeep { at: start });
        }
        self.count(1, &start)?;
        self.stack.push(Frame {
            open,
            anchor,
            start,
        });
        Ok(())
    }

    fn close(&mut self, end: ByteSpan) -> Result<(), YamlError> {
        let Some(frame) = self.stack.pop() else {
            return Ok(());
        };
        let (value, last_end) = match frame.open {
            Open::Seq(items) => {
                let last = items.last().map(|n| n.span.end);
                (NodeValue::Seq(items), last)
            }
            Open::Map { entries, .. } => {
                let last = entries.last().map(|e| e.value.span.end);
                (NodeValue::Map(entries), last)
            }
        };
        // Block collections end where their last item ends; flow ones at their closing bracket.
        let flow = end.end > frame.start.start
            && last_end.is_none_or(|l| end.end > l)
            && self.is_flow_close(&end);
        let stop = if flow {
            end.end
        } else {
            last_end.unwrap_or(frame.start.end)
        };
        let node = Node {
            span: frame.start.start..stop.max(frame.start.start),
            value,
            flow,
        };
        self.push_node(node, frame.anchor)
    }

    /// saphyr reports a non-empty span for the `]`/`}` of flow collections and an empty one at
    /// the dedent of block collections.
    fn is_flow_close(&self, end: &ByteSpan) -> bool {
        !end.is_empty()
    }

    fn alias(&mut self, id: usize, span: ByteSpan) -> Result<(), YamlError> {
        let node = self
            .anchors
            .get(&id)
            .cloned()
            .ok_or_else(|| YamlError::Syntax {
                message: "unknown anchor".into(),
                at: span.start,
            })?;
        self.count(node_count(&node), &span)?;
        self.push_node(node, 0)
    }

    fn push_node(&mut self, node: Node, anchor: usize) -> Result<(), YamlError> {
        if anchor != 0 {
            self.anchors.insert(anchor, node.clone());
        }
        if matches!(
            node.value,
            NodeValue::Null | NodeValue::Bool(_) | NodeValue::Number(_) | NodeValue::String(_)
        ) {
            self.count(1, &node.span)?;
        }
        let Some(frame) = self.stack.last_mut() else {
            self.root = Some(node);
            return Ok(());
        };
        match &mut frame.open {
            Open::Seq(items) => items.push(node),
            Open::Map {
                entries,
                positions,
                pending_key,
            } => match pending_key.take() {
                None => {
                    let key = match node.value {
                        NodeValue::String(s) => s,
                        NodeValue::Bool(b) => b.to_string(),
                        NodeValue::Number(n) => n.to_string(),
                        NodeValue::Null | NodeValue::Seq(_) | NodeValue::Map(_) => {
                            return Err(YamlError::ComplexKey { at: node.span });
                        }
                    };
                    if let Some(&first) = positions.get(&key) {
                        return Err(YamlError::DuplicateKey {
                            key,
                            first: entries[first].key_span.clone(),
                            second: node.span,
                        });
                    }
                    *pending_key = Some((key, node.span));
                }
                Some((key, key_span)) => {
                    positions.insert(key.clone(), entries.len());
                    entries.push(Entry {
                        key,
                        key_span,
                        value: node,
                    });
                }
            },
        }
        Ok(())
    }
}

fn node_count(node: &Node) -> usize {
    match &node.value {
        NodeValue::Seq(items) => 1 + items.iter().map(node_count).sum::<usize>(),
        NodeValue::Map(entries) => {
            1 + entries
                .iter()
                .map(|e| 1 + node_count(&e.value))
                .sum::<usize>()
        }
        _ => 1,
    }
}
