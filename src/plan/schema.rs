//! The JSON Schemas of plan and policy files: generated from the Rust types, shaped for good
//! editor help and good errors, and used to validate every file before it is deserialised.
//!
//! schemars describes tagged enums as `oneOf`, and optional fields as "this or null". Both make
//! validators report vague errors ("not valid under any of the given schemas"), so the generated
//! schema is reshaped: a `oneOf` whose branches are told apart by a constant property (`type:` of
//! a step, `kind:` of a model or tool) becomes an `enum` on that property plus one `if`/`then` per
//! branch, so only the branch the user chose reports errors; and `null` alternatives are dropped
//! (an absent field is the way to say "none"). Validation errors are then mapped back onto the YAML
//! tree ([`super::yaml::Node`]) so each diagnostic points at the offending line and column.

use std::sync::OnceLock;

use jsonschema::error::{TypeKind, ValidationErrorKind};
use jsonschema::types::JsonType;
use jsonschema::{ValidationError, Validator, paths::LocationSegment};
use schemars::generate::SchemaSettings;
use serde_json::{Map, Value, json};

use super::diagnostic::{Diagnostic, PlanError, QUOTE_TEMPLATES, Source, did_you_mean, suggestion};
use super::policy::PlanPolicy;
use super::raw::RawPlan;
use super::steps::StepType;
use super::suite::raw::RawSuite;
use super::yaml::{Entry, Located, Node, NodeValue};
use crate::core::duration::DURATION_PATTERN;

/// Makes one generated schema.
pub type SchemaMaker = fn() -> Value;

/// The file name under `schemas/` and the generated schema of each kind of file.
pub const SCHEMA_FILES: [(&str, SchemaMaker); 3] = [
    ("plan.schema.json", plan_schema),
    ("policy.schema.json", policy_schema),
    ("test.schema.json", suite_schema),
];

/// The JSON Schema of a plan file.
pub fn plan_schema() -> Value {
    let generator = SchemaSettings::draft2020_12().into_generator();
    let mut schema = generator.into_root_schema_for::<RawPlan>().to_value();
    reshape(&mut schema);
    schema
}

/// The JSON Schema of a policy file.
pub fn policy_schema() -> Value {
    let generator = SchemaSettings::draft2020_12().into_generator();
    let mut schema = generator.into_root_schema_for::<PlanPolicy>().to_value();
    reshape(&mut schema);
    schema
}

/// The JSON Schema of a test file (`*.test.yaml`).
pub fn suite_schema() -> Value {
    let generator = SchemaSettings::draft2020_12().into_generator();
    let mut schema = generator.into_root_schema_for::<RawSuite>().to_value();
    reshape(&mut schema);
    schema
}

/// What kind of file is being validated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DocumentKind {
    Plan,
    Policy,
    /// A test file.
    Suite,
}

impl DocumentKind {
    fn schema(self) -> &'static (Value, Result<Validator, String>) {
        static PLAN: OnceLock<(Value, Result<Validator, String>)> = OnceLock::new();
        static POLICY: OnceLock<(Value, Result<Validator, String>)> = OnceLock::new();
        static SUITE: OnceLock<(Value, Result<Validator, String>)> = OnceLock::new();
        let (cell, make): (_, SchemaMaker) = match self {
            DocumentKind::Plan => (&PLAN, plan_schema),
            DocumentKind::Policy => (&POLICY, policy_schema),
            DocumentKind::Suite => (&SUITE, suite_schema),
        };
        cell.get_or_init(|| {
            let schema = make();
            let validator = jsonschema::validator_for(&schema).map_err(|e| e.to_string());
            (schema, validator)
        })
    }
}

/// Validates `instance` (the JSON form of `root`) against the schema of `kind`; one diagnostic per
/// problem, each pointing into `source`.
pub fn validate(
    kind: DocumentKind,
    root: &Node,
    instance: &Value,
    source: &Source,
) -> Vec<Diagnostic> {
    let (schema, validator) = kind.schema();
    let validator = match validator {
        Ok(v) => v,
        Err(message) => {
            // The schema is generated from our own types; a test compiles it, so this is a bug.
            return vec![Diagnostic::new(PlanError::SchemaViolation {
                place: "internal schema".into(),
                message: message.clone(),
            })];
        }
    };
    let mapper = ErrorMapper {
        kind,
        root,
        schema,
        source,
    };
    let mut out = Vec::new();
    for error in validator.iter_errors(instance) {
        mapper.map(&error, &mut out);
    }
    drop_missing_fields_explained_by_typos(out)
}

/// `modle: llm` yields both "unknown field `modle`" (did you mean `model`?) and "missing field
/// `model`"; the second says nothing new, so it is dropped.
fn drop_missing_fields_explained_by_typos(diagnostics: Vec<Diagnostic>) -> Vec<Diagnostic> {
    let typos: Vec<(String, String)> = diagnostics
        .iter()
        .filter_map(|d| match (&d.error, &d.hint) {
            (PlanError::UnknownField { place, .. }, Some(hint)) => hint
                .strip_prefix("did you mean `")
                .and_then(|rest| rest.strip_suffix("`?"))
                .map(|meant| (place.clone(), meant.to_string())),
            _ => None,
        })
        .collect();
    diagnostics
        .into_iter()
        .filter(|d| match &d.error {
            PlanError::MissingField { field, place } => {
                !typos.iter().any(|(p, f)| p == place && f == field)
            }
            _ => true,
        })
        .collect()
}

struct ErrorMapper<'a> {
    kind: DocumentKind,
    root: &'a Node,
    schema: &'a Value,
    source: &'a Source,
}

impl ErrorMapper<'_> {
    /// The diagnostics for one validation error (one per unknown field, else one), each pointing
    /// at the YAML node the error is about.
    fn map(&self, error: &ValidationError<'_>, out: &mut Vec<Diagnostic>) {
        let path: Vec<String> = error
            .instance_path()
            .iter()
            .map(|segment| match segment {
                LocationSegment::Property(p) => p.to_string(),
                LocationSegment::Index(i) => i.to_string(),
            })
            .collect();
        let located = self.root.locate(&path);
        let node = located.node;
        let place = describe_place(self.kind, self.root, &path);
        let schema_path = error.schema_path().as_str();
        let keyword_parent = schema_at(self.schema, &parent_pointer(schema_path));
        let diagnostic = match error.kind() {
            ValidationErrorKind::AdditionalProperties { unexpected }
            | ValidationErrorKind::UnevaluatedProperties { unexpected } => {
                out.extend(self.unknown_fields(node, &place, keyword_parent, unexpected));
                return;
            }
            ValidationErrorKind::Required { property } => {
                self.missing_field(&path, &located, place, keyword_parent, property)
            }
            ValidationErrorKind::Type { kind } => {
                let expected = describe_type_kind(kind);
                let hint = if self.looks_like_unquoted_template(node) {
                    QUOTE_TEMPLATES.to_string()
                } else {
                    wrong_type_hint(&path, node, &expected)
                };
                self.wrong_type(node, place, expected).with_hint(hint)
            }
            ValidationErrorKind::Enum { options } => {
                self.invalid_value(&path, node, place, options.as_array())
            }
            ValidationErrorKind::Constant { expected_value } => {
                self.invalid_value(&path, node, place, Some(&vec![(**expected_value).clone()]))
            }
            ValidationErrorKind::Pattern { pattern } if pattern == DURATION_PATTERN => self.at(
                node,
                PlanError::BadDuration {
                    place,
                    found: scalar_text(node),
                },
                "not a duration",
            ),
            ValidationErrorKind::Pattern { pattern } if pattern.starts_with("^[A-Za-z_]") => self
                .at(
                    node,
                    PlanError::InvalidName {
                        place,
                        found: scalar_text(node),
                    },
                    "not a valid name",
                ),
            kind if let Some(message) = limit_broken(kind) => {
                self.out_of_range(node, place, message)
            }
            ValidationErrorKind::AnyOf { .. }
            | ValidationErrorKind::OneOfNotValid { .. }
            | ValidationErrorKind::OneOfMultipleValid { .. }
                if let (Some(keys), NodeValue::Map(entries)) = (
                    single_key_branches(self.schema, keyword_parent, schema_path),
                    &node.value,
                ) =>
            {
                self.not_one_key(node, place, entries, &keys)
            }
            ValidationErrorKind::AnyOf { .. } | ValidationErrorKind::OneOfNotValid { .. } => {
                match branch_types(self.schema, keyword_parent, schema_path) {
                    Some(expected) => {
                        let hint = wrong_type_hint(&path, node, &expected);
                        self.wrong_type(node, place, expected).with_hint(hint)
                    }
                    None => self.at(
                        node,
                        PlanError::SchemaViolation {
                            place,
                            message: "does not match any of the accepted forms".into(),
                        },
                        "here",
                    ),
                }
            }
            _ => self.at(
                node,
                PlanError::SchemaViolation {
                    place,
                    message: error.to_string(),
                },
                "here",
            ),
        };
        out.push(diagnostic);
    }

    /// `error` labelled `label` over the whole of `node`.
    fn at(&self, node: &Node, error: PlanError, label: &str) -> Diagnostic {
        Diagnostic::at(error, self.source, node.span.clone(), label)
    }

    /// One "unknown field" per field of `unexpected`, at its key, with the closest field the
    /// schema at `keyword_parent` knows (or the list of them) as the hint.
    fn unknown_fields(
        &self,
        node: &Node,
        place: &str,
        keyword_parent: Option<&Value>,
        unexpected: &[String],
    ) -> Vec<Diagnostic> {
        let known = property_names(keyword_parent);
        unexpected
            .iter()
            .map(|field| {
                let span = node
                    .entry(field)
                    .map_or(node.span.clone(), |e| e.key_span.clone());
                let hint = suggestion(field, "fields here", known.iter().map(String::as_str));
                Diagnostic::at(
                    PlanError::UnknownField {
                        field: field.clone(),
                        place: place.to_string(),
                    },
                    self.source,
                    span,
                    "unknown field",
                )
                .with_hint(hint)
            })
            .collect()
    }

    /// "missing field" at the key of the mapping that lacks `property`, with the field's
    /// description as the hint (or the step types, for a step without `type`).
    fn missing_field(
        &self,
        path: &[String],
        located: &Located<'_>,
        place: String,
        keyword_parent: Option<&Value>,
        property: &Value,
    ) -> Diagnostic {
        let field = property.as_str().unwrap_or_default().to_string();
        let span = located
            .key_span
            .cloned()
            .unwrap_or_else(|| first_line(located.node));
        let mut d = Diagnostic::at(
            PlanError::MissingField {
                field: field.clone(),
                place,
            },
            self.source,
            span,
            format!("`{field}` is missing here"),
        );
        let described = keyword_parent
            .and_then(|p| p.get("properties"))
            .and_then(|p| p.get(&field))
            .and_then(|p| resolve(self.schema, p).get("description"))
            .and_then(Value::as_str);
        if let Some(description) = described {
            d = d.with_hint(format!("`{field}`: {description}"));
        } else if field == "type" && path.first().is_some_and(|p| p == "steps") {
            d = d.with_hint(format!("step types: {}", step_type_list()));
        }
        d
    }

    /// "wrong type": `node` is not `expected`.
    fn wrong_type(&self, node: &Node, place: String, expected: String) -> Diagnostic {
        let label = format!("expected {expected}");
        self.at(
            node,
            PlanError::WrongType {
                place,
                expected,
                found: describe_node(node).into(),
            },
            &label,
        )
    }

    /// "exactly one key" for a mapping (`entries`) that must hold one of `keys` and holds none,
    /// several or another, with the closest of `keys` to an unknown key as the hint.
    fn not_one_key(
        &self,
        node: &Node,
        place: String,
        entries: &[Entry],
        keys: &[String],
    ) -> Diagnostic {
        let found: Vec<&str> = entries.iter().map(|e| e.key.as_str()).collect();
        let listed = |names: &[&str]| {
            names
                .iter()
                .map(|n| format!("`{n}`"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
        let mut d = self.at(
            node,
            PlanError::OneKey {
                place,
                allowed: listed(&keys),
                found: if found.is_empty() {
                    "none".into()
                } else {
                    listed(&found)
                },
            },
            "exactly one key here",
        );
        if let Some(unknown) = found.iter().find(|k| !keys.contains(k))
            && let Some(hint) = did_you_mean(unknown, keys.iter().copied())
        {
            d = d.with_hint(hint);
        }
        d
    }

    fn invalid_value(
        &self,
        path: &[String],
        node: &Node,
        place: String,
        options: Option<&Vec<Value>>,
    ) -> Diagnostic {
        let found = scalar_text(node);
        let is_step_type = path.len() == 3 && path[0] == "steps" && path[2] == "type";
        if is_step_type {
            let hint = did_you_mean(&found, StepType::ALL.iter().map(|t| t.name()))
                .unwrap_or_else(|| format!("step types: {}", step_type_list()));
            return Diagnostic::at(
                PlanError::UnknownStepType { found },
                self.source,
                node.span.clone(),
                "unknown step type",
            )
            .with_hint(hint);
        }
        let allowed: Vec<String> = options
            .map(|o| {
                o.iter()
                    .map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_string))
                    .collect()
            })
            .unwrap_or_default();
        let mut d = Diagnostic::at(
            PlanError::InvalidValue {
                place,
                found: found.clone(),
                allowed: allowed
                    .iter()
                    .map(|a| format!("`{a}`"))
                    .collect::<Vec<_>>()
                    .join(", "),
            },
            self.source,
            node.span.clone(),
            "not allowed here",
        );
        if let Some(hint) = did_you_mean(&found, allowed.iter().map(String::as_str)) {
            d = d.with_hint(hint);
        }
        d
    }

    fn out_of_range(&self, node: &Node, place: String, message: String) -> Diagnostic {
        Diagnostic::at(
            PlanError::OutOfRange { place, message },
            self.source,
            node.span.clone(),
            "out of range",
        )
    }

    fn looks_like_unquoted_template(&self, node: &Node) -> bool {
        node.flow
            && matches!(node.value, NodeValue::Map(_))
            && self
                .source
                .text
                .get(node.span.clone())
                .is_some_and(|t| t.starts_with("{{"))
    }
}

/// What a value breaking a numeric, length or item-count limit must be instead; None for other
/// errors.
fn limit_broken(kind: &ValidationErrorKind) -> Option<String> {
    Some(match kind {
        ValidationErrorKind::Minimum { limit }
        | ValidationErrorKind::ExclusiveMinimum { limit } => {
            format!("must be at least {limit}")
        }
        ValidationErrorKind::Maximum { limit }
        | ValidationErrorKind::ExclusiveMaximum { limit } => {
            format!("must be at most {limit}")
        }
        ValidationErrorKind::MinItems { limit } => {
            format!("needs at least {limit} item{}", plural(*limit))
        }
        ValidationErrorKind::MaxItems { limit } => {
            format!("takes at most {limit} item{}", plural(*limit))
        }
        ValidationErrorKind::MinLength { limit } => {
            format!("needs at least {limit} character{}", plural(*limit))
        }
        ValidationErrorKind::MaxLength { limit } => {
            format!("takes at most {limit} character{}", plural(*limit))
        }
        _ => return None,
    })
}

fn plural(n: u64) -> &'static str {
    if n == 1 { "" } else { "s" }
}

fn step_type_list() -> String {
    StepType::ALL
        .iter()
        .map(|t| t.name())
        .collect::<Vec<_>>()
        .join(", ")
}

/// The first line of a node's span, so labels on missing fields do not cover whole blocks.
fn first_line(node: &Node) -> std::ops::Range<usize> {
    node.span.start..node.span.start
}

/// Human words for where a path points: "step `answer`", "`chunk.max_chars` of corpus `docs`".
pub fn describe_place(kind: DocumentKind, root: &Node, path: &[String]) -> String {
    let (owner, rest) = match (kind, path) {
        (DocumentKind::Policy, rest) => ("the policy".to_string(), rest),
        (DocumentKind::Suite, [section, index, rest @ ..])
            if matches!(section.as_str(), "cases" | "variants") =>
        {
            let what = if section == "cases" {
                "case"
            } else {
                "variant"
            };
            let located = root.locate([section.as_str(), index.as_str(), "name"]);
            let owner = match (located.key_span, located.node.as_str()) {
                (Some(_), Some(name)) => format!("{what} `{name}`"),
                _ => format!("{what} #{}", index.parse::<usize>().map_or(0, |i| i + 1)),
            };
            (owner, rest)
        }
        (DocumentKind::Suite, rest) => ("the test file".to_string(), rest),
        (DocumentKind::Plan, [steps, index, rest @ ..]) if steps == "steps" => {
            let located = root.locate([steps.as_str(), index.as_str(), "name"]);
            let owner = match (located.key_span, located.node.as_str()) {
                (Some(_), Some(name)) => format!("step `{name}`"),
                _ => format!("step #{}", index.parse::<usize>().map_or(0, |i| i + 1)),
            };
            (owner, rest)
        }
        (DocumentKind::Plan, [section, name, rest @ ..])
            if matches!(
                section.as_str(),
                "models" | "corpora" | "tools" | "agents" | "inputs"
            ) =>
        {
            let what = match section.as_str() {
                "models" => "model",
                "corpora" => "corpus",
                "tools" => "tool",
                "agents" => "agent",
                _ => "input",
            };
            (format!("{what} `{name}`"), rest)
        }
        (DocumentKind::Plan, [policy, rest @ ..]) if policy == "policy" => {
            ("the policy".to_string(), rest)
        }
        (DocumentKind::Plan, rest) => ("the plan".to_string(), rest),
    };
    if rest.is_empty() {
        return owner;
    }
    let mut field = String::new();
    for segment in rest {
        if segment.parse::<usize>().is_ok() {
            field.push_str(&format!("[{segment}]"));
        } else {
            if !field.is_empty() {
                field.push('.');
            }
            field.push_str(segment);
        }
    }
    format!("`{field}` of {owner}")
}

/// What to write instead of a value of the wrong type, for the mistakes people make.
fn wrong_type_hint(path: &[String], node: &Node, expected: &str) -> String {
    let field = path.last().map(String::as_str).unwrap_or_default();
    let text = scalar_text(node);
    match &node.value {
        NodeValue::Number(_) if DURATION_FIELDS.contains(&field) => {
            format!("a duration needs a unit: `{text}s`, `{text}ms` or `{text}m`")
        }
        NodeValue::String(word) if expected.contains("a boolean") => {
            let truthy = ["yes", "y", "on", "true", "True", "TRUE"].contains(&word.as_str());
            format!(
                "write `{}` (a boolean); `{word}` is text in YAML 1.2",
                if truthy { "true" } else { "false" }
            )
        }
        NodeValue::String(word) if expected.contains("a list") => {
            format!("write a list, even of one: `[{word}]`")
        }
        NodeValue::String(word)
            if (expected.contains("an integer") || expected.contains("a number"))
                && serde_json::from_str::<serde_json::Number>(word).is_ok() =>
        {
            format!("remove the quotes: `{word}`")
        }
        _ => format!("write {expected} here"),
    }
}

/// Fields whose value is a duration (`30s`), so a bare number is missing its unit.
const DURATION_FIELDS: &[&str] = &["timeout", "backoff", "timeout_per_step", "stall"];

fn describe_node(node: &Node) -> &'static str {
    match &node.value {
        NodeValue::Null => "nothing (null)",
        NodeValue::Bool(_) => "a boolean",
        NodeValue::Number(n) if n.is_f64() => "a number",
        NodeValue::Number(_) => "an integer",
        NodeValue::String(_) => "a string",
        NodeValue::Seq(_) => "a list",
        NodeValue::Map(_) => "a mapping",
    }
}

/// "an integer", "a string or a list", … for the types a `type` keyword names.
fn describe_type_kind(kind: &TypeKind) -> String {
    let types: Vec<JsonType> = match kind {
        TypeKind::Single(one) => vec![*one],
        TypeKind::Multiple(set) => set.iter().collect(),
    };
    let names: Vec<&str> = types
        .into_iter()
        .map(|t| match t {
            JsonType::String => "a string",
            JsonType::Integer => "an integer",
            JsonType::Number => "a number",
            JsonType::Boolean => "a boolean",
            JsonType::Array => "a list",
            JsonType::Object => "a mapping",
            JsonType::Null => "null",
        })
        .collect();
    if names.is_empty() {
        "a value of another type".to_string()
    } else {
        names.join(" or ")
    }
}

fn scalar_text(node: &Node) -> String {
    match &node.value {
        NodeValue::String(s) => s.clone(),
        NodeValue::Null => "null".into(),
        NodeValue::Bool(b) => b.to_string(),
        NodeValue::Number(n) => n.to_string(),
        NodeValue::Seq(_) => "a list".into(),
        NodeValue::Map(_) => "a mapping".into(),
    }
}

fn parent_pointer(pointer: &str) -> String {
    pointer
        .rsplit_once('/')
        .map_or(String::new(), |(parent, _)| parent.to_string())
}

/// Follows a JSON pointer through `schema`, jumping through `$ref`s as the validator did.
fn schema_at<'a>(schema: &'a Value, pointer: &str) -> Option<&'a Value> {
    let mut node = schema;
    for raw in pointer.split('/').skip(1) {
        let segment = raw.replace("~1", "/").replace("~0", "~");
        if segment == "$ref" {
            node = resolve(schema, node);
            continue;
        }
        node = match node {
            Value::Object(map) => map.get(&segment)?,
            Value::Array(items) => items.get(segment.parse::<usize>().ok()?)?,
            _ => return None,
        };
    }
    Some(resolve(schema, node))
}

/// A schema with its `$ref` (to `#/$defs/…`) followed.
fn resolve<'a>(root: &'a Value, schema: &'a Value) -> &'a Value {
    let mut current = schema;
    for _ in 0..16 {
        match current
            .get("$ref")
            .and_then(Value::as_str)
            .and_then(|r| r.strip_prefix('#'))
        {
            Some(pointer) => match root.pointer(pointer) {
                Some(target) => current = target,
                None => break,
            },
            None => break,
        }
    }
    current
}

fn property_names(schema: Option<&Value>) -> Vec<String> {
    schema
        .and_then(|s| s.get("properties"))
        .and_then(Value::as_object)
        .map(|p| p.keys().cloned().collect())
        .unwrap_or_default()
}

/// For an `anyOf`/`oneOf` failure: "a string or a mapping" when every branch names a type.
fn branch_types(root: &Value, parent: Option<&Value>, keyword_path: &str) -> Option<String> {
    let keyword = keyword_path.rsplit('/').next()?;
    let branches = parent?.get(keyword)?.as_array()?;
    let mut names: Vec<String> = Vec::new();
    for branch in branches {
        let ty: JsonType = resolve(root, branch).get("type")?.as_str()?.parse().ok()?;
        let name = describe_type_kind(&TypeKind::Single(ty));
        if !names.contains(&name) {
            names.push(name);
        }
    }
    Some(names.join(" or "))
}

/// For an `anyOf`/`oneOf` failure where every branch is a mapping of one required key (a rule,
/// a constraint: `{ regex: … }` or `{ lark: … }`), those keys.
fn single_key_branches(
    root: &Value,
    parent: Option<&Value>,
    keyword_path: &str,
) -> Option<Vec<String>> {
    let keyword = keyword_path.rsplit('/').next()?;
    let branches = parent?.get(keyword)?.as_array()?;
    let mut keys = Vec::new();
    for branch in branches {
        let branch = resolve(root, branch);
        match branch.get("required")?.as_array()?.as_slice() {
            [Value::String(key)] if branch.get("type")? == "object" => keys.push(key.clone()),
            _ => return None,
        }
    }
    (keys.len() > 1).then_some(keys)
}

/// Reshapes a generated schema for clear errors: discriminated `oneOf` → `enum` + `if`/`then`;
/// "X or null" → X.
fn reshape(schema: &mut Value) {
    match schema {
        Value::Object(map) => {
            drop_null_alternative(map);
            constants_to_enum(map);
            discriminate_one_of(map);
            for value in map.values_mut() {
                reshape(value);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(reshape),
        _ => {}
    }
}

fn drop_null_alternative(map: &mut Map<String, Value>) {
    if map.get("default") == Some(&Value::Null) {
        map.remove("default");
    }
    if let Some(Value::Array(types)) = map.get_mut("type") {
        types.retain(|t| t != "null");
        if types.len() == 1 {
            let only = types.remove(0);
            map.insert("type".into(), only);
        }
    }
    let is_null = |v: &Value| {
        v.get("type") == Some(&json!("null")) && v.as_object().is_some_and(|o| o.len() == 1)
    };
    if let Some(Value::Array(branches)) = map.get("anyOf")
        && branches.len() == 2
        && branches.iter().any(is_null)
    {
        let kept = branches.iter().find(|b| !is_null(b)).cloned();
        map.remove("anyOf");
        if let Some(Value::Object(kept)) = kept {
            for (k, v) in kept {
                map.entry(k).or_insert(v);
            }
        }
    }
}

/// A `oneOf` of documented constants (how schemars writes an enum whose variants have doc
/// comments) becomes a plain `enum`, with the docs kept as `enumDescriptions` for editors.
fn constants_to_enum(map: &mut Map<String, Value>) {
    let Some(Value::Array(branches)) = map.get("oneOf") else {
        return;
    };
    if branches.is_empty() || !branches.iter().all(|b| b.get("const").is_some()) {
        return;
    }
    let values: Vec<Value> = branches
        .iter()
        .filter_map(|b| b.get("const").cloned())
        .collect();
    let descriptions: Vec<Value> = branches
        .iter()
        .map(|b| {
            b.get("description")
                .cloned()
                .unwrap_or(Value::String(String::new()))
        })
        .collect();
    let ty = branches.first().and_then(|b| b.get("type")).cloned();
    map.remove("oneOf");
    if let Some(ty) = ty {
        map.insert("type".into(), ty);
    }
    map.insert("enum".into(), Value::Array(values));
    map.insert("enumDescriptions".into(), Value::Array(descriptions));
}

fn discriminate_one_of(map: &mut Map<String, Value>) {
    let Some(Value::Array(branches)) = map.get("oneOf") else {
        return;
    };
    let Some(tag) = common_tag(branches) else {
        return;
    };
    let mut names = Vec::new();
    let mut rules = Vec::new();
    for branch in branches {
        let Some(name) = branch.pointer(&format!("/properties/{tag}/const")).cloned() else {
            return;
        };
        names.push(name.clone());
        rules.push(json!({
            "if": { "properties": { tag.clone(): { "const": name } }, "required": [tag.clone()] },
            "then": branch
        }));
    }
    map.remove("oneOf");
    map.insert("type".into(), json!("object"));
    map.insert("required".into(), json!([tag.clone()]));
    map.insert("properties".into(), json!({ tag: { "enum": names } }));
    map.insert("allOf".into(), Value::Array(rules));
}

/// The property every branch pins with `const`, if there is one.
fn common_tag(branches: &[Value]) -> Option<String> {
    let first = branches.first()?.get("properties")?.as_object()?;
    first
        .iter()
        .filter(|(_, v)| v.get("const").is_some())
        .map(|(k, _)| k.clone())
        .find(|tag| {
            branches
                .iter()
                .all(|b| b.pointer(&format!("/properties/{tag}/const")).is_some())
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_schemas_compile() {
        for (name, make) in SCHEMA_FILES {
            assert!(
                jsonschema::validator_for(&make()).is_ok(),
                "{name} does not compile"
            );
        }
    }

    #[test]
    fn step_types_are_an_enum_with_one_rule_per_type() {
        let schema = plan_schema();
        let step = schema
            .pointer("/$defs/RawStep")
            .expect("RawStep is defined");
        let names = step
            .pointer("/properties/type/enum")
            .and_then(Value::as_array)
            .expect("enum of types");
        assert_eq!(names.len(), StepType::ALL.len());
        assert_eq!(
            step.get("allOf").and_then(Value::as_array).map(Vec::len),
            Some(StepType::ALL.len())
        );
        assert!(step.get("oneOf").is_none());
    }

    #[test]
    fn documented_unit_enums_become_plain_enums() {
        let schema = plan_schema();
        let method = schema.pointer("/$defs/VotingMethod").expect("VotingMethod");
        assert_eq!(
            method.get("enum"),
            Some(&json!([
                "majority",
                "unanimity",
                "similarity",
                "field_majority"
            ]))
        );
        assert!(method.get("oneOf").is_none());
    }

    #[test]
    fn null_alternatives_are_dropped() {
        let schema = plan_schema();
        let description = schema
            .pointer("/properties/description")
            .expect("description");
        assert_eq!(description.get("type"), Some(&json!("string")));
        assert!(description.get("default").is_none());
    }

    #[test]
    fn places_are_described_in_words() {
        let root = super::super::yaml::parse("steps:\n  - name: answer\n    type: infer\n")
            .expect("parses");
        let path = |p: &[&str]| p.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            describe_place(DocumentKind::Plan, &root, &path(&["steps", "0"])),
            "step `answer`"
        );
        assert_eq!(
            describe_place(
                DocumentKind::Plan,
                &root,
                &path(&["steps", "0", "retry", "max_attempts"])
            ),
            "`retry.max_attempts` of step `answer`"
        );
        assert_eq!(
            describe_place(
                DocumentKind::Plan,
                &root,
                &path(&["corpora", "docs", "files", "0"])
            ),
            "`files[0]` of corpus `docs`"
        );
        assert_eq!(
            describe_place(DocumentKind::Plan, &root, &path(&[])),
            "the plan"
        );
    }
}
