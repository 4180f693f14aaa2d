//! Enum normalisation: snaps near-miss strings onto the schema's allowed values.
//!
//! Small models often write `"Positive"` or `"very positive"` where the schema allows
//! `"positive"` or `"very_positive"`. Rejecting that costs a retry for nothing, so before
//! validation every string whose schema lists allowed strings (`enum`, or `const`) and that is
//! not one of them is replaced by the one member it equals after trimming and ignoring case — or,
//! failing that, ignoring punctuation, underscores and spacing too. Ambiguous or unmatched values
//! are left alone for validation to report.
//!
//! The schema is followed through `properties`, `additionalProperties`, `items`, `prefixItems`,
//! local `$ref`s (`#/$defs/…`) and `allOf`; an `anyOf`/`oneOf` is entered only when exactly one
//! branch can hold the value (for a string, the allowed values of all branches are pooled).
//! Values are changed in place: key order and numbers stay exactly as they were.

use serde_json::Value;

use crate::core::text::words;

/// How deep schemas and values are followed; also stops `$ref` cycles.
const MAX_DEPTH: usize = 128;

/// Replaces strings outside their schema's allowed values by the unique allowed value they
/// loosely equal; returns the JSON pointers (`/items/2/label`, `""` for the root) it changed.
pub fn normalize_enum_values(value: &mut Value, schema: &Value) -> Vec<String> {
    let mut normalizer = Normalizer {
        root: schema,
        changed: Vec::new(),
    };
    normalizer.visit(value, schema, &mut String::new(), 0);
    normalizer.changed
}

struct Normalizer<'s> {
    root: &'s Value,
    changed: Vec<String>,
}

impl<'s> Normalizer<'s> {
    fn visit(&mut self, value: &mut Value, schema: &'s Value, path: &mut String, depth: usize) {
        if depth > MAX_DEPTH {
            return;
        }
        if value.is_string() {
            let member = self
                .allowed(schema, value, depth)
                .zip(value.as_str())
                .and_then(|(allowed, text)| closest(text, &allowed));
            if let Some(member) = member {
                *value = Value::String(member.to_string());
                if !self.changed.contains(path) {
                    self.changed.push(path.clone());
                }
            }
            return;
        }
        let mut schemas = Vec::new();
        self.applicable(schema, value, depth, &mut schemas);
        match value {
            Value::Object(map) => {
                for (key, child) in map.iter_mut() {
                    let len = path.len();
                    path.push('/');
                    path.push_str(&key.replace('~', "~0").replace('/', "~1"));
                    for sub in schemas.iter().filter_map(|s| property_schema(s, key)) {
                        self.visit(child, sub, path, depth + 1);
                    }
                    path.truncate(len);
                }
            }
            Value::Array(items) => {
                for (index, item) in items.iter_mut().enumerate() {
                    let len = path.len();
                    path.push('/');
                    path.push_str(&index.to_string());
                    for sub in schemas.iter().filter_map(|s| item_schema(s, index)) {
                        self.visit(item, sub, path, depth + 1);
                    }
                    path.truncate(len);
                }
            }
            _ => {}
        }
    }

    /// The target of a local `$ref` (`#`, `#/$defs/…`).
    fn reference(&self, schema: &'s Value) -> Option<&'s Value> {
        let pointer = schema.get("$ref")?.as_str()?.strip_prefix('#')?;
        self.root.pointer(pointer)
    }

    /// The schemas that certainly apply to `value`: `schema`, what it refers to, its `allOf`
    /// branches, and the one `anyOf`/`oneOf` branch that can hold the value, if only one can.
    fn applicable(&self, schema: &'s Value, value: &Value, depth: usize, out: &mut Vec<&'s Value>) {
        if depth > MAX_DEPTH || !schema.is_object() {
            return;
        }
        out.push(schema);
        if let Some(target) = self.reference(schema) {
            self.applicable(target, value, depth + 1, out);
        }
        for branch in branches(schema, "allOf") {
            self.applicable(branch, value, depth + 1, out);
        }
        for keyword in ["anyOf", "oneOf"] {
            let mut admitting =
                branches(schema, keyword).filter(|b| self.admits(b, value, depth + 1));
            if let (Some(only), None) = (admitting.next(), admitting.next()) {
                self.applicable(only, value, depth + 1, out);
            }
        }
    }

    /// Whether `value` may be valid under `schema`, judged by what cannot be normalised away:
    /// its type, required properties, and properties with allowed strings it cannot match.
    fn admits(&self, schema: &'s Value, value: &Value, depth: usize) -> bool {
        if depth > MAX_DEPTH {
            return false;
        }
        let Some(object) = schema.as_object() else {
            return schema != &Value::Bool(false);
        };
        if self
            .reference(schema)
            .is_some_and(|target| !self.admits(target, value, depth + 1))
        {
            return false;
        }
        if !object.get("type").is_none_or(|t| type_admits(t, value)) {
            return false;
        }
        if let Value::Object(map) = value {
            let required = branches(schema, "required").filter_map(Value::as_str);
            if required.clone().any(|key| !map.contains_key(key)) {
                return false;
            }
            let properties = object.get("properties").and_then(Value::as_object);
            for (key, sub) in properties.into_iter().flatten() {
                let Some((child, text)) = map.get(key).and_then(|c| Some((c, c.as_str()?))) else {
                    continue;
                };
                let allowed = self.allowed(sub, child, depth + 1);
                if allowed.is_some_and(|a| !a.contains(&text) && closest(text, &a).is_none()) {
                    return false;
                }
            }
        }
        branches(schema, "allOf").all(|b| self.admits(b, value, depth + 1))
    }

    /// The strings `schema` restricts the string `value` to, or `None` when it lists none.
    fn allowed(&self, schema: &'s Value, value: &Value, depth: usize) -> Option<Vec<&'s str>> {
        if depth > MAX_DEPTH {
            return None;
        }
        let object = schema.as_object()?;
        let mut allowed = None;
        if let Some(members) = object.get("enum").and_then(Value::as_array) {
            restrict(
                &mut allowed,
                members.iter().filter_map(Value::as_str).collect(),
            );
        }
        if let Some(constant) = object.get("const") {
            restrict(&mut allowed, constant.as_str().into_iter().collect());
        }
        let referred = self.reference(schema).into_iter();
        for branch in referred.chain(branches(schema, "allOf")) {
            if let Some(list) = self.allowed(branch, value, depth + 1) {
                restrict(&mut allowed, list);
            }
        }
        for keyword in ["anyOf", "oneOf"] {
            let lists: Option<Vec<Vec<&'s str>>> = branches(schema, keyword)
                .filter(|b| self.admits(b, value, depth + 1))
                .map(|b| self.allowed(b, value, depth + 1))
                .collect();
            if let Some(lists) = lists.filter(|l| !l.is_empty()) {
                let mut pooled: Vec<&'s str> = Vec::new();
                for member in lists.into_iter().flatten() {
                    if !pooled.contains(&member) {
                        pooled.push(member);
                    }
                }
                restrict(&mut allowed, pooled);
            }
        }
        allowed
    }
}

/// The items of an array-valued keyword (`allOf`, `required`…).
fn branches<'s>(schema: &'s Value, keyword: &str) -> impl Iterator<Item = &'s Value> + Clone {
    schema
        .get(keyword)
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
}

/// Narrows the allowed strings to those also in `list`.
fn restrict<'s>(allowed: &mut Option<Vec<&'s str>>, list: Vec<&'s str>) {
    match allowed {
        None => *allowed = Some(list),
        Some(current) => current.retain(|m| list.contains(m)),
    }
}

/// The schema of property `key` under `schema`. Properties matched by `patternProperties` are
/// left alone rather than guessed at.
fn property_schema<'s>(schema: &'s Value, key: &str) -> Option<&'s Value> {
    schema
        .get("properties")
        .and_then(|p| p.get(key))
        .or_else(|| {
            (schema.get("patternProperties").is_none())
                .then(|| schema.get("additionalProperties"))
                .flatten()
        })
}

/// The schema of item `index` under `schema`: `prefixItems`, then `items` (or, before draft
/// 2020-12, a tuple in `items`, then `additionalItems`).
fn item_schema(schema: &Value, index: usize) -> Option<&Value> {
    match (schema.get("prefixItems"), schema.get("items")) {
        (Some(Value::Array(prefix)), items) => prefix.get(index).or(items),
        (None, Some(Value::Array(tuple))) => {
            tuple.get(index).or_else(|| schema.get("additionalItems"))
        }
        (_, items) => items,
    }
}

/// Whether a `type` keyword allows the value's type.
fn type_admits(types: &Value, value: &Value) -> bool {
    let admits = |name: &Value| {
        matches!(
            (name.as_str(), value),
            (Some("object"), Value::Object(_))
                | (Some("array"), Value::Array(_))
                | (Some("string"), Value::String(_))
                | (Some("number" | "integer"), Value::Number(_))
                | (Some("boolean"), Value::Bool(_))
                | (Some("null"), Value::Null)
        )
    };
    match types {
        Value::Array(names) => names.iter().any(admits),
        name => admits(name),
    }
}

/// The allowed member `text` was meant to be: the only one equal to it ignoring case and
/// surrounding space, else the only one with the same words (`Very Positive` = `very_positive`).
/// `None` when `text` is allowed already, matches nothing, or matches several.
fn closest<'s>(text: &str, allowed: &[&'s str]) -> Option<&'s str> {
    if allowed.contains(&text) {
        return None;
    }
    let lower = text.trim().to_lowercase();
    let by_case = allowed.iter().filter(|m| m.trim().to_lowercase() == lower);
    only(by_case).or_else(|| {
        let key = canonical(text);
        let by_words = allowed.iter().filter(|m| canonical(m) == key);
        (!key.is_empty()).then(|| only(by_words)).flatten()
    })
}

/// The single distinct member an iterator yields, if it yields exactly one.
fn only<'a, 's: 'a>(mut matches: impl Iterator<Item = &'a &'s str>) -> Option<&'s str> {
    let first = *matches.next()?;
    matches.all(|m| *m == first).then_some(first)
}

/// The lower-cased words of `text`, joined by single spaces.
fn canonical(text: &str) -> String {
    words(text).collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    fn sentiment() -> Value {
        json!({
            "type": "object",
            "properties": {
                "sentiment": {
                    "enum": ["very_negative", "negative", "neutral", "positive", "very_positive"]
                },
                "lang": {"type": "string", "enum": ["en", "de", "EN-GB"]},
                "score": {"type": "number"}
            }
        })
    }

    #[test]
    fn snaps_near_misses_onto_the_allowed_value() {
        let cases = [
            ("case", "Positive", "positive"),
            ("upper case", "NEUTRAL", "neutral"),
            ("surrounding space", "  negative \n", "negative"),
            ("spaces for underscores", "Very Positive", "very_positive"),
            ("hyphens for underscores", "very-negative", "very_negative"),
            ("surrounding punctuation", "**positive**.", "positive"),
            ("quotes inside the string", "'neutral'", "neutral"),
            ("already allowed", "positive", "positive"),
            ("unmatched", "great", "great"),
            ("empty", "", ""),
            ("only punctuation", "?!", "?!"),
        ];
        for (name, written, expected) in cases {
            let mut value = json!({"sentiment": written, "score": 0.5});
            let changed = normalize_enum_values(&mut value, &sentiment());
            assert_eq!(
                value,
                json!({"sentiment": expected, "score": 0.5}),
                "{name}"
            );
            let expected_changed: &[&str] = if written == expected {
                &[]
            } else {
                &["/sentiment"]
            };
            assert_eq!(changed, expected_changed, "{name}");
        }
    }

    #[test]
    fn leaves_ambiguous_values_alone() {
        let schema = json!({"enum": ["Yes", "yes", "in_progress", "in-progress", "C++", "C#"]});
        let cases = [
            ("two members differ only in case", "YES", "YES"),
            (
                "two members with the same words",
                "In Progress",
                "In Progress",
            ),
            ("case decides before words", "c++", "C++"),
            ("same words, exact case match", "c#", "C#"),
            ("a word match that is not unique", "c", "c"),
        ];
        for (name, written, expected) in cases {
            let mut value = json!(written);
            normalize_enum_values(&mut value, &schema);
            assert_eq!(value, json!(expected), "{name}");
        }
    }

    #[test]
    fn follows_nested_objects_arrays_and_references() {
        let schema = json!({
            "$defs": {
                "label": {"enum": ["spam", "ham"]},
                "item": {
                    "type": "object",
                    "properties": {"label": {"$ref": "#/$defs/label"}, "note": {"type": "string"}}
                }
            },
            "type": "object",
            "properties": {
                "items": {"type": "array", "items": {"$ref": "#/$defs/item"}},
                "pair": {"prefixItems": [{"enum": ["low", "high"]}, {"enum": ["up", "down"]}]},
                "extra": {"additionalProperties": {"enum": ["on", "off"]}},
                "both": {"allOf": [{"enum": ["a", "b", "c"]}, {"enum": ["b", "c"]}]}
            }
        });
        let mut value = json!({
            "items": [{"label": "Spam", "note": "SPAM"}, {"label": "ham"}, {"label": " HAM "}],
            "pair": ["HIGH", "Down", "extra"],
            "extra": {"wifi": "ON", "a/b~c": "Off"},
            "both": "B"
        });
        let changed = normalize_enum_values(&mut value, &schema);
        assert_eq!(
            value,
            json!({
                "items": [{"label": "spam", "note": "SPAM"}, {"label": "ham"}, {"label": "ham"}],
                "pair": ["high", "down", "extra"],
                "extra": {"wifi": "on", "a/b~c": "off"},
                "both": "b"
            })
        );
        assert_eq!(
            changed,
            [
                "/items/0/label",
                "/items/2/label",
                "/pair/0",
                "/pair/1",
                "/extra/wifi",
                "/extra/a~1b~0c",
                "/both"
            ]
        );
    }

    #[test]
    fn enters_alternatives_conservatively() {
        let pets = json!({
            "oneOf": [
                {
                    "type": "object",
                    "required": ["kind"],
                    "properties": {"kind": {"const": "cat"}, "sound": {"enum": ["meow", "purr"]}}
                },
                {
                    "type": "object",
                    "required": ["kind"],
                    "properties": {"kind": {"const": "dog"}, "sound": {"enum": ["woof"]}}
                }
            ]
        });
        let cases = [
            (
                "the one branch its discriminator picks",
                pets.clone(),
                json!({"kind": "dog", "sound": "WOOF"}),
                json!({"kind": "dog", "sound": "woof"}),
            ),
            (
                "the discriminator itself, through the pooled constants",
                pets.clone(),
                json!({"kind": "Cat", "sound": "Purr"}),
                json!({"kind": "cat", "sound": "purr"}),
            ),
            (
                "no branch when the discriminator is missing",
                pets,
                json!({"sound": "WOOF"}),
                json!({"sound": "WOOF"}),
            ),
            (
                "allowed strings pooled across branches",
                json!({"anyOf": [{"enum": ["a", "b"]}, {"enum": ["c"]}, {"type": "null"}]}),
                json!("C"),
                json!("c"),
            ),
            (
                "no restriction when one branch takes any string",
                json!({"anyOf": [{"enum": ["a", "b"]}, {"type": "string"}]}),
                json!("A"),
                json!("A"),
            ),
            (
                "no branch when several hold the value",
                json!({"anyOf": [
                    {"properties": {"x": {"enum": ["a"]}}},
                    {"properties": {"x": {"enum": ["A"]}}}
                ]}),
                json!({"x": "a "}),
                json!({"x": "a "}),
            ),
            (
                "a type that does not allow strings",
                json!({"type": "integer", "enum": [1, 2]}),
                json!("1"),
                json!("1"),
            ),
        ];
        for (name, schema, mut value, expected) in cases {
            normalize_enum_values(&mut value, &schema);
            assert_eq!(value, expected, "{name}");
        }
    }

    #[test]
    fn keeps_key_order_and_numbers_exactly() {
        let text = r#"{"zeta":"HIGH","alpha":12345678901234567890,"mid":[-9223372036854775808,"LOW"],"beta":1.5}"#;
        let mut value: Value = serde_json::from_str(text).unwrap();
        let schema = json!({
            "properties": {
                "zeta": {"enum": ["low", "high"]},
                "mid": {"items": {"enum": ["low", "high"]}}
            }
        });
        assert_eq!(
            normalize_enum_values(&mut value, &schema),
            ["/zeta", "/mid/1"]
        );
        assert_eq!(
            value.to_string(),
            r#"{"zeta":"high","alpha":12345678901234567890,"mid":[-9223372036854775808,"low"],"beta":1.5}"#
        );
    }

    #[test]
    fn survives_recursive_and_odd_schemas() {
        let tree = json!({
            "properties": {"tag": {"enum": ["leaf", "node"]}, "child": {"$ref": "#"}}
        });
        let mut value = json!({"tag": "NODE", "child": {"tag": "Leaf", "child": {"tag": "x"}}});
        let changed = normalize_enum_values(&mut value, &tree);
        assert_eq!(changed, ["/tag", "/child/tag"]);
        assert_eq!(value["child"]["tag"], "leaf");

        for schema in [
            json!({"$ref": "#"}),
            json!({"allOf": [{"$ref": "#"}]}),
            json!({"anyOf": [{"$ref": "#"}, {"$ref": "#"}]}),
            json!({"$ref": "#/$defs/missing"}),
            json!({"$ref": "other.json#/x"}),
            json!(true),
            json!(false),
            json!({"enum": "not a list", "properties": 3, "items": "x"}),
        ] {
            let mut value = json!({"a": ["B"]});
            assert_eq!(
                normalize_enum_values(&mut value, &schema),
                Vec::<String>::new(),
                "{schema}"
            );
            assert_eq!(value, json!({"a": ["B"]}));
        }
    }
}
