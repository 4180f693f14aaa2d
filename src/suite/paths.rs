//! A small JSON path for `json_path` assertions: dotted keys and bracketed indices or quoted keys
//! (`label`, `items[0].name`, `$.scores[2]`, `["a key"]`), enough to point into a step's JSON.

use serde_json::Value;

/// The value at `path` inside `json`, if there is one.
pub fn json_at<'a>(json: &'a Value, path: &str) -> Option<&'a Value> {
    let mut node = json;
    for segment in segments(path)? {
        node = match segment {
            Segment::Key(key) => node.as_object()?.get(&key)?,
            Segment::Index(index) => node.as_array()?.get(index)?,
        };
    }
    Some(node)
}

enum Segment {
    Key(String),
    Index(usize),
}

/// The path's segments; None when it does not parse.
fn segments(path: &str) -> Option<Vec<Segment>> {
    let path = path.trim();
    let path = path.strip_prefix('$').unwrap_or(path);
    let mut out = Vec::new();
    let mut rest = path;
    while !rest.is_empty() {
        if let Some(after) = rest.strip_prefix('.') {
            rest = after;
            continue;
        }
        if let Some(after) = rest.strip_prefix('[') {
            let (inside, tail) = after.split_once(']')?;
            let inside = inside.trim();
            let quoted = inside
                .strip_prefix('"')
                .and_then(|s| s.strip_suffix('"'))
                .or_else(|| inside.strip_prefix('\'').and_then(|s| s.strip_suffix('\'')));
            out.push(match quoted {
                Some(key) => Segment::Key(key.to_string()),
                None => Segment::Index(inside.parse().ok()?),
            });
            rest = tail;
            continue;
        }
        let end = rest.find(['.', '[']).unwrap_or(rest.len());
        out.push(Segment::Key(rest[..end].to_string()));
        rest = &rest[end..];
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn paths_reach_keys_indices_and_quoted_keys() {
        let json = json!({"a": {"b": [1, {"c": "x"}]}, "a key": 2});
        assert_eq!(json_at(&json, "a.b[1].c"), Some(&json!("x")));
        assert_eq!(json_at(&json, "$.a.b[0]"), Some(&json!(1)));
        assert_eq!(json_at(&json, "[\"a key\"]"), Some(&json!(2)));
        assert_eq!(json_at(&json, ""), Some(&json));
        assert_eq!(json_at(&json, "a.b[2]"), None);
        assert_eq!(json_at(&json, "a.b[x]"), None);
        assert_eq!(json_at(&json, "a.missing"), None);
    }
}
