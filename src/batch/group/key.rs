//! The group key of `--group-by`: a dotted path into a row (`product`, `output.label`, `items.0`)
//! or a small template over the row (`{{ row.input.product }}/{{ row.output.label }}`), what it
//! finds in each row, the key's canonical JSON text (the group's row id in the output) and the
//! stable hash that puts every group in exactly one shard.

use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

use crate::core::{Failure, FailureCode};
use crate::prompt::{Templates, analyze_template};

/// How a row's group key is found.
#[derive(Debug, Clone)]
pub enum GroupKey {
    /// Object keys (and array indices) from the row down, e.g. `["output", "label"]`.
    Path(Vec<String>),
    /// A template rendered with the row as `row`; its text is the key.
    Template(String),
}

/// The key of one row: a string, a number or a boolean; None where the row has none.
pub type Key = Option<Value>;

fn bad_key(message: String, help: &str) -> Failure {
    Failure::new(FailureCode::ConfigInvalidInput, message).with_help(help)
}

impl GroupKey {
    /// Parses `--group-by TEXT`: a template when it holds `{{`, else a dotted path.
    pub fn parse(text: &str) -> Result<GroupKey, Failure> {
        if text.contains("{{") {
            let info = analyze_template(text).map_err(|e| {
                bad_key(
                    format!("--group-by `{text}` is not a valid template: {}", e.message),
                    "a template key reads the row as `row`, e.g. \"{{ row.product }}\"",
                )
            })?;
            if let Some(other) = info
                .variables
                .iter()
                .find(|v| v.split('.').next() != Some("row"))
            {
                return Err(bad_key(
                    format!("--group-by `{text}` reads `{other}`; a key template sees only `row`"),
                    "read the row's fields as `row.NAME`, e.g. \"{{ row.product }}\"",
                ));
            }
            return Ok(GroupKey::Template(text.to_string()));
        }
        let parts: Vec<String> = text.split('.').map(str::to_string).collect();
        if parts.iter().any(|p| p.trim().is_empty() || p.trim() != p) {
            return Err(bad_key(
                format!(
                    "--group-by `{text}` is not a path: every dot-separated part must be a field name"
                ),
                "name a field (`product`), a nested one (`input.product`), or give a template (\"{{ row.product }}\")",
            ));
        }
        Ok(GroupKey::Path(parts))
    }

    /// The key of `row` (line or record `number`, for errors): None when the path is missing or
    /// null, or the template renders empty; an object or array is refused, as is a template that
    /// fails on the row.
    pub fn of(
        &self,
        row: &Map<String, Value>,
        number: usize,
        templates: &Templates,
    ) -> Result<Key, Failure> {
        match self {
            GroupKey::Path(parts) => {
                let mut at = row.get(&parts[0]);
                for part in &parts[1..] {
                    at = match at {
                        Some(Value::Object(object)) => object.get(part),
                        Some(Value::Array(items)) => {
                            part.parse::<usize>().ok().and_then(|i| items.get(i))
                        }
                        _ => None,
                    };
                }
                match at {
                    None | Some(Value::Null) => Ok(None),
                    Some(value @ (Value::String(_) | Value::Number(_) | Value::Bool(_))) => {
                        Ok(Some(value.clone()))
                    }
                    Some(other) => Err(bad_key(
                        format!(
                            "row {number}: the group key `{}` is {}; a key must be a string, a number or a boolean",
                            parts.join("."),
                            if other.is_array() {
                                "an array"
                            } else {
                                "an object"
                            }
                        ),
                        "group by a field inside it (`KEY.NAME`), or by a template that picks one",
                    )),
                }
            }
            GroupKey::Template(text) => {
                let context = json!({ "row": row });
                let rendered = templates.render_str(text, &context).map_err(|failure| {
                    bad_key(
                        format!("row {number}: the --group-by template cannot be rendered: {}", failure.message),
                        "give missing fields a default, e.g. \"{{ row.product | default('') }}\" (an empty key is no key)",
                    )
                })?;
                let key = rendered.trim();
                Ok((!key.is_empty()).then(|| Value::String(key.to_string())))
            }
        }
    }
}

/// The key's canonical JSON text — `"aero-14"` (quoted), `5`, `true`, or `null` for rows
/// without one — the group's row id.
pub fn canonical(key: &Key) -> String {
    key.as_ref()
        .map_or_else(|| "null".to_string(), Value::to_string)
}

/// The shard (of `count`) the group of `canonical` text belongs to: from the SHA-256 of the
/// text, the same on every machine and in every run.
pub fn shard_of(canonical: &str, count: usize) -> usize {
    let digest = Sha256::digest(canonical.as_bytes());
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    (u64::from_be_bytes(first) % count.max(1) as u64) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(value: Value) -> Map<String, Value> {
        value.as_object().cloned().expect("an object")
    }

    #[test]
    fn a_path_reads_nested_fields_and_a_missing_or_null_one_is_no_key() {
        let templates = Templates::new(None);
        let key = GroupKey::parse("output.label").expect("a path");
        let line = row(json!({ "output": { "label": "good" }, "items": [3, 4] }));
        assert_eq!(key.of(&line, 1, &templates), Ok(Some(json!("good"))));
        let index = GroupKey::parse("items.1").expect("a path");
        assert_eq!(index.of(&line, 1, &templates), Ok(Some(json!(4))));
        let missing = GroupKey::parse("input.product").expect("a path");
        assert_eq!(missing.of(&line, 1, &templates), Ok(None));
        let null = row(json!({ "input": { "product": null } }));
        assert_eq!(missing.of(&null, 1, &templates), Ok(None));
    }

    #[test]
    fn an_object_key_is_refused_with_its_row() {
        let templates = Templates::new(None);
        let key = GroupKey::parse("output").expect("a path");
        let failure = key
            .of(
                &row(json!({ "output": { "label": "good" } })),
                7,
                &templates,
            )
            .expect_err("refused");
        assert_eq!(failure.code, FailureCode::ConfigInvalidInput);
        assert!(
            failure
                .message
                .starts_with("row 7: the group key `output` is an object"),
            "{}",
            failure.message
        );
    }

    #[test]
    fn bad_paths_and_templates_are_refused_before_any_row() {
        for text in ["a..b", "", ".a", "a. b"] {
            let failure = GroupKey::parse(text).expect_err(text);
            assert!(
                failure.message.contains("is not a path"),
                "{}",
                failure.message
            );
        }
        let other_root = GroupKey::parse("{{ inputs.product }}").expect_err("refused");
        assert!(
            other_root.message.contains("sees only `row`"),
            "{}",
            other_root.message
        );
        let broken = GroupKey::parse("{{ row.product ").expect_err("refused");
        assert!(
            broken.message.contains("not a valid template"),
            "{}",
            broken.message
        );
    }

    #[test]
    fn a_template_key_is_its_trimmed_text_and_empty_is_no_key() {
        let templates = Templates::new(None);
        let key = GroupKey::parse("{{ row.a }}/{{ row.b | default('') }}").expect("a template");
        assert_eq!(
            key.of(&row(json!({ "a": "x", "b": 2 })), 1, &templates),
            Ok(Some(json!("x/2")))
        );
        let blank = GroupKey::parse("{{ row.b | default('') }}").expect("a template");
        assert_eq!(blank.of(&row(json!({})), 1, &templates), Ok(None));
        let padded = GroupKey::parse("{{ row.a }}").expect("a template");
        assert_eq!(
            padded.of(&row(json!({ "a": " \t aero-14 \n" })), 1, &templates),
            Ok(Some(json!("aero-14"))),
            "the same product however it is padded is one group"
        );
        assert_eq!(
            padded.of(&row(json!({ "a": " \n " })), 1, &templates),
            Ok(None),
            "a key of only whitespace is no key"
        );
        let failure = GroupKey::parse("{{ row.a }}")
            .expect("a template")
            .of(&row(json!({})), 3, &templates)
            .expect_err("undefined");
        assert!(failure.message.starts_with("row 3:"), "{}", failure.message);
    }

    #[test]
    fn canonical_text_tells_strings_from_numbers_and_the_shard_is_stable() {
        assert_eq!(canonical(&Some(json!("5"))), "\"5\"");
        assert_eq!(canonical(&Some(json!(5))), "5");
        assert_eq!(canonical(&None), "null");
        let shard = shard_of("\"aero-14\"", 4);
        assert!(shard < 4);
        assert_eq!(
            shard_of("\"aero-14\"", 4),
            shard,
            "the same key, the same shard"
        );
        assert_eq!(shard_of("anything", 1), 0);
        assert_eq!(shard_of("anything", 0), 0, "no shards is one");
    }

    /// `shard_of` of five keys' canonical text over 7 shards, as every earlier version gave it.
    const PINNED_SHARDS_OF_7: [usize; 5] = [2, 4, 6, 0, 4];

    /// The shard a group lands in is pinned (a part written by one version is resumed and
    /// merged by the next), and groups spread over every shard: a function that sent every
    /// group to one shard, or ignored the key's text, fails here.
    #[test]
    fn groups_spread_over_every_shard_and_the_assignment_is_pinned() {
        let pinned: Vec<usize> = ["\"aero-14\"", "\"zen-3\"", "5", "true", "null"]
            .iter()
            .map(|canonical| shard_of(canonical, 7))
            .collect();
        assert_eq!(pinned, PINNED_SHARDS_OF_7);
        for count in [2, 3, 4, 16] {
            let mut sizes = vec![0usize; count];
            for n in 0..64 * count {
                sizes[shard_of(&format!("\"product-{n}\""), count)] += 1;
            }
            assert!(
                sizes.iter().all(|&size| size >= 32),
                "{count} shards: {sizes:?}"
            );
        }
    }
}
