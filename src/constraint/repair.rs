//! Lenient JSON parsing: finds the JSON in what a model wrote and repairs it.
//!
//! Small models wrap their answer in prose and markdown code fences, and slip on the details of
//! JSON. Strict parsing is tried first; when it fails, this file finds where the JSON starts (the
//! body of a code fence, else the first `{` or `[` that scans as a value, else a bare scalar that
//! is all there is) and hands it to the scanner in [`super::scan`], which writes it back as strict
//! JSON. Everything changed is named in the result, for the run record.

use serde::de::IgnoredAny;
use serde_json::Value;

use super::scan::{Scanned, scan};
use crate::core::{Failure, FailureCode};

/// The most starting points tried in one stretch of text, so hostile input stays linear.
const MAX_STARTS: usize = 8;

/// The most code blocks looked into.
const MAX_FENCES: usize = 4;

/// A value parsed from model output, and what repair changed to get it.
#[derive(Debug, Clone, PartialEq)]
pub struct Repair {
    /// The parsed value.
    pub value: Value,
    /// What was fixed, for the run record, in the order met; empty when the text was already
    /// JSON. Around the JSON: "code fence", "prose before", "prose after". In it: "single
    /// quotes", "unquoted keys", "comments", "trailing comma", "missing commas", "python
    /// literals", "unescaped quotes", "control characters", "invalid escapes", "mismatched
    /// brackets". Where the text stopped early: "closed string", "cut-off number", "cut-off
    /// literal", "dropped dangling comma", "dropped dangling key", "dropped incomplete value",
    /// "closed 1 bracket" / "closed N brackets".
    pub fixes: Vec<String>,
}

/// Parses model output as JSON, repairing it when strict parsing fails.
///
/// Valid JSON comes back unchanged with no fixes. Otherwise the text is repaired (see
/// [`repair_json`]); when even that fails, the failure is `CONSTRAINT_JSON_INVALID` and names the
/// line and column where strict parsing first went wrong.
pub fn parse_json_lenient(text: &str) -> Result<Repair, Failure> {
    let error = match serde_json::from_str(text) {
        Ok(value) => {
            return Ok(Repair {
                value,
                fixes: Vec::new(),
            });
        }
        Err(error) => error,
    };
    if text.trim().is_empty() {
        return Err(Failure::new(
            FailureCode::ConstraintJsonInvalid,
            "the output is empty, not JSON",
        ));
    }
    repair(text)
        .and_then(|r| {
            let value = serde_json::from_str(&r.json).ok()?;
            Some(Repair {
                value,
                fixes: r.fixes,
            })
        })
        .ok_or_else(|| {
            Failure::new(
                FailureCode::ConstraintJsonInvalid,
                format!("the output is not JSON, even after repair: {error}"),
            )
        })
}

/// The JSON in `text`, repaired into strict JSON text; `None` when nothing can be made of it.
///
/// Handles, in any combination: markdown code fences; prose before or after (the first balanced
/// object or array is taken; a bare string, number or literal only when it is all there is);
/// trailing and missing commas; single-quoted strings; unquoted keys; `//`, `#` and `/* */`
/// comments; `True`/`False`/`None`; raw newlines and stray quotes inside strings; and text cut
/// off mid-way (the open string and containers are closed, a dangling comma or key dropped).
/// Text inside strings is never changed, and numbers are copied digit for digit.
pub fn repair_json(text: &str) -> Option<String> {
    repair(text).map(|r| r.json)
}

/// The repaired JSON (checked to parse) and the list of fixes.
fn repair(text: &str) -> Option<Scanned> {
    fence_bodies(text)
        .into_iter()
        .chain([0])
        .find_map(|from| repair_from(text, from))
        .filter(|r| serde_json::from_str::<IgnoredAny>(&r.json).is_ok())
}

/// Repairs the first value found from byte `from` on.
fn repair_from(text: &str, from: usize) -> Option<Scanned> {
    let region = text.get(from..)?;
    let scalar_start = from + region.len() - region.trim_start().len();
    region
        .match_indices(['{', '['])
        .take(MAX_STARTS)
        .find_map(|(at, _)| located(text, from + at, false))
        .or_else(|| located(text, scalar_start, true))
}

/// Scans the value at `start` and names the text around it; a bare scalar must stand alone.
fn located(text: &str, start: usize, scalar: bool) -> Option<Scanned> {
    let Scanned { json, end, fixes } = scan(text, start)?;
    let (before, fence_before) = strip_opening_fence(text.get(..start)?);
    let (after, fence_after) = strip_closing_fence(text.get(end..)?);
    let prose_after = !after.trim().is_empty();
    if scalar && prose_after {
        return None;
    }
    let around = [
        (fence_before || fence_after, "code fence"),
        (!before.trim().is_empty(), "prose before"),
        (prose_after, "prose after"),
    ];
    let mut all: Vec<String> = around
        .into_iter()
        .filter(|(found, _)| *found)
        .map(|(_, fix)| fix.to_string())
        .collect();
    all.extend(fixes);
    Some(Scanned {
        json,
        end,
        fixes: all,
    })
}

/// The byte offsets where the bodies of markdown code blocks begin: after a fence that opens a
/// line and its info string (```` ```json ````). Blocks tagged as JSON come first.
fn fence_bodies(text: &str) -> Vec<usize> {
    let mut bodies = Vec::new();
    let mut line_start = 0;
    let mut opening = true;
    for line in text.split_inclusive('\n') {
        let indent = line.len() - line.trim_start_matches([' ', '\t']).len();
        if let Some(after) = line[indent..].strip_prefix("```") {
            if opening {
                let info_len = after
                    .find(|c: char| !(c.is_alphanumeric() || matches!(c, '-' | '_' | '+' | '.')))
                    .unwrap_or(after.len());
                let tagged_json = after[..info_len].to_ascii_lowercase().starts_with("json");
                bodies.push((!tagged_json, line_start + indent + 3 + info_len));
                if bodies.len() == MAX_FENCES {
                    break;
                }
            }
            opening = !opening;
        }
        line_start += line.len();
    }
    bodies.sort_by_key(|(untagged, _)| *untagged);
    bodies.into_iter().map(|(_, at)| at).collect()
}

/// The text before the JSON without a code fence (and its info string) at its end.
fn strip_opening_fence(before: &str) -> (&str, bool) {
    let trimmed = before.trim_end();
    match trimmed.rfind("```") {
        Some(at)
            if trimmed[at + 3..]
                .chars()
                .all(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | '+' | '.')) =>
        {
            (&trimmed[..at], true)
        }
        _ => (before, false),
    }
}

/// The text after the JSON without a code fence at its start.
fn strip_closing_fence(after: &str) -> (&str, bool) {
    match after.trim_start().strip_prefix("```") {
        Some(rest) => (rest, true),
        None => (after, false),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    /// What small models actually write, what it must repair to, and the fixes named.
    #[test]
    fn repairs_what_small_models_write() {
        let cases: &[(&str, &str, Value, &[&str])] = &[
            (
                "fenced after a preamble",
                "Sure! Here is the JSON:\n```json\n{\"label\": \"positive\", \"score\": 0.9}\n```",
                json!({"label": "positive", "score": 0.9}),
                &["code fence", "prose before"],
            ),
            (
                "fenced with a sign-off",
                "```json\n{\"a\": 1}\n```\nLet me know if you need anything else!",
                json!({"a": 1}),
                &["code fence", "prose after"],
            ),
            (
                "fence without a language",
                "```\n[1, 2, 3]\n```",
                json!([1, 2, 3]),
                &["code fence"],
            ),
            (
                "fence inline in a sentence",
                "Here you go: ```json {\"a\": 1}``` hope it helps",
                json!({"a": 1}),
                &["code fence", "prose before", "prose after"],
            ),
            (
                "braces in the preamble, JSON in the fence",
                "I'll use the format {label}:\n```json\n{\"label\": \"spam\"}\n```",
                json!({"label": "spam"}),
                &["code fence", "prose before"],
            ),
            (
                "a JSON block preferred over an earlier code block",
                "```python\nd = {1: 2}\n```\nAs JSON:\n```json\n{\"ok\": true}\n```",
                json!({"ok": true}),
                &["code fence", "prose before"],
            ),
            (
                "single quotes and a trailing comma",
                "{'a': 1,}",
                json!({"a": 1}),
                &["single quotes", "trailing comma"],
            ),
            (
                "unquoted key",
                "{a: 1}",
                json!({"a": 1}),
                &["unquoted keys"],
            ),
            (
                "JavaScript object literal",
                "{name: 'Ada', age: 36, tags: ['x', 'y',], $ref_id: 7, 'first-name': 'A',}",
                json!({
                    "name": "Ada", "age": 36, "tags": ["x", "y"], "$ref_id": 7, "first-name": "A"
                }),
                &["unquoted keys", "single quotes", "trailing comma"],
            ),
            (
                "Python dict",
                "{'ok': True, 'error': None, 'retry': False}",
                json!({"ok": true, "error": null, "retry": false}),
                &["single quotes", "python literals"],
            ),
            (
                "cut off mid-string",
                "{\"summary\": \"The product is gre",
                json!({"summary": "The product is gre"}),
                &["closed string", "closed 1 bracket"],
            ),
            (
                "cut off mid-array",
                "{\"tags\": [\"a\", \"b\"",
                json!({"tags": ["a", "b"]}),
                &["closed 2 brackets"],
            ),
            (
                "cut off after a comma",
                "[1, 2, ",
                json!([1, 2]),
                &["dropped dangling comma", "closed 1 bracket"],
            ),
            (
                "cut off mid-key",
                "{\"a\": 1, \"lab",
                json!({"a": 1}),
                &["dropped dangling key", "closed 1 bracket"],
            ),
            (
                "cut off after a key",
                "{\"a\": 1, \"label\"",
                json!({"a": 1}),
                &["dropped dangling key", "closed 1 bracket"],
            ),
            (
                "cut off after a colon",
                "{\"a\": 1, \"label\": ",
                json!({"a": 1}),
                &["dropped dangling key", "closed 1 bracket"],
            ),
            (
                "cut off deep inside",
                "{\"items\": [{\"id\": 1, \"tags\": [\"x\", \"y",
                json!({"items": [{"id": 1, "tags": ["x", "y"]}]}),
                &["closed string", "closed 4 brackets"],
            ),
            (
                "cut off after an inner key",
                "{\"items\": [{\"id\": 1}, {\"id\"",
                json!({"items": [{"id": 1}, {}]}),
                &["dropped dangling key", "closed 3 brackets"],
            ),
            (
                "cut off mid-number",
                "{\"score\": 0.",
                json!({"score": 0}),
                &["cut-off number", "closed 1 bracket"],
            ),
            (
                "cut off at a minus sign",
                "[1, -",
                json!([1]),
                &["dropped incomplete value", "closed 1 bracket"],
            ),
            (
                "cut off mid-literal",
                "{\"ok\": tr",
                json!({"ok": true}),
                &["cut-off literal", "closed 1 bracket"],
            ),
            (
                "cut off mid-escape",
                "{\"a\": \"line\\",
                json!({"a": "line"}),
                &["closed string", "closed 1 bracket"],
            ),
            (
                "cut off mid-unicode-escape",
                "[\"caf\\u00",
                json!(["caf"]),
                &["closed string", "closed 1 bracket"],
            ),
            (
                "cut off inside a closed fence",
                "```json\n{\"a\": [1, 2\n```",
                json!({"a": [1, 2]}),
                &["code fence", "closed 2 brackets"],
            ),
            (
                "string cut off by the closing fence",
                "```json\n{\"a\": \"unfinished\n```",
                json!({"a": "unfinished"}),
                &["code fence", "closed string", "closed 1 bracket"],
            ),
            (
                "preamble and cut off",
                "Here is the JSON: {\"a\": 1",
                json!({"a": 1}),
                &["prose before", "closed 1 bracket"],
            ),
            (
                "only an opening brace",
                "{",
                json!({}),
                &["closed 1 bracket"],
            ),
            (
                "deep opening brackets",
                "[[[[",
                json!([[[[]]]]),
                &["closed 4 brackets"],
            ),
            (
                "comments",
                "{\n  // the label\n  \"label\": \"ham\", /* sure */\n  \"score\": 1 # no\n}",
                json!({"label": "ham", "score": 1}),
                &["comments"],
            ),
            (
                "cut off in a block comment",
                "[1, 2 /* the rest",
                json!([1, 2]),
                &["comments", "closed 1 bracket"],
            ),
            (
                "prose after with braces",
                "{\"a\": 1}\n\nI hope this helps! Ask me {anything}.",
                json!({"a": 1}),
                &["prose after"],
            ),
            (
                "a stray closing brace",
                "{\"a\": 1}}",
                json!({"a": 1}),
                &["prose after"],
            ),
            (
                "unicode",
                "{'city': 'Zürich', 'emoji': '🎉', 'jp': '日本語',}",
                json!({"city": "Zürich", "emoji": "🎉", "jp": "日本語"}),
                &["single quotes", "trailing comma"],
            ),
            (
                "unicode escapes kept",
                "{'a': '\\u00e9\\ud83c\\udf89'}",
                json!({"a": "é🎉"}),
                &["single quotes"],
            ),
            (
                "escaped quotes in single quotes",
                "{'quote': 'She said \\'hi\\' and \"bye\"'}",
                json!({"quote": "She said 'hi' and \"bye\""}),
                &["single quotes"],
            ),
            (
                "an apostrophe in single quotes",
                "{'text': 'It's fine'}",
                json!({"text": "It's fine"}),
                &["single quotes", "unescaped quotes"],
            ),
            (
                "unescaped double quotes",
                "{\"text\": \"He said \"hi\" to me\", \"n\": 1}",
                json!({"text": "He said \"hi\" to me", "n": 1}),
                &["unescaped quotes"],
            ),
            (
                "braces and commas inside strings untouched",
                "{\"a\": \"a, }\", \"b\": \"[x, y,]\", 'c': \"it's // not /* a */ comment\",}",
                json!({"a": "a, }", "b": "[x, y,]", "c": "it's // not /* a */ comment"}),
                &["single quotes", "trailing comma"],
            ),
            (
                "a fence inside a string",
                "{\"code\": \"```py\\nx = 1\\n```\",}",
                json!({"code": "```py\nx = 1\n```"}),
                &["trailing comma"],
            ),
            (
                "lone surrogates",
                "[\"\\ud83d!\", \"\\ude00\", \"\\ud83d\\u0041\",]",
                json!(["\u{fffd}!", "\u{fffd}", "\u{fffd}A"]),
                &["invalid escapes", "trailing comma"],
            ),
            (
                "cut off between surrogates",
                "{\"a\": \"party \\ud83c\\ud",
                json!({"a": "party "}),
                &["closed string", "closed 1 bracket"],
            ),
            (
                "a raw newline in a string",
                "{\"text\": \"line one\nline two\ttab\"}",
                json!({"text": "line one\nline two\ttab"}),
                &["control characters"],
            ),
            (
                "a regex with a bare backslash",
                "{\"pattern\": \"^\\d+$\"}",
                json!({"pattern": "^\\d+$"}),
                &["invalid escapes"],
            ),
            (
                "missing commas between objects",
                "[{\"a\": 1}\n{\"a\": 2}]",
                json!([{"a": 1}, {"a": 2}]),
                &["missing commas"],
            ),
            (
                "missing comma between members",
                "{\"a\": 1\n \"b\": 2}",
                json!({"a": 1, "b": 2}),
                &["missing commas"],
            ),
            (
                "the wrong closing bracket",
                "{\"a\": [1, 2}",
                json!({"a": [1, 2]}),
                &["mismatched brackets"],
            ),
            (
                "brackets in the preamble",
                "Answer [see below]: {\"a\": 1}",
                json!({"a": 1}),
                &["prose before"],
            ),
            (
                "braces in the preamble",
                "{the label} is: {\"label\": 1}",
                json!({"label": 1}),
                &["prose before"],
            ),
            (
                "a bare single-quoted string",
                "'hello'",
                json!("hello"),
                &["single quotes"],
            ),
            (
                "a bare Python literal",
                " None ",
                json!(null),
                &["python literals"],
            ),
            (
                "a fenced scalar",
                "```\n\"yes\"\n```",
                json!("yes"),
                &["code fence"],
            ),
            (
                "a single-quoted string holding braces",
                "'use {x}'",
                json!("use {x}"),
                &["single quotes"],
            ),
            (
                "everything at once",
                "Sure!\n```json\n{\n  name: 'Widget', // product\n  price: 9.99,\n  \
                 tags: ['a', 'b',],\n  in_stock: True,\n  note: \"He said \\\"ok\\\"\",\n  \
                 sizes: [1, 2",
                json!({
                    "name": "Widget", "price": 9.99, "tags": ["a", "b"],
                    "in_stock": true, "note": "He said \"ok\"", "sizes": [1, 2]
                }),
                &[
                    "code fence",
                    "prose before",
                    "unquoted keys",
                    "single quotes",
                    "comments",
                    "trailing comma",
                    "python literals",
                    "closed 2 brackets",
                ],
            ),
        ];
        for (name, text, expected, fixes) in cases {
            let repaired = repair(text).unwrap_or_else(|| panic!("{name}: not repaired"));
            let value: Value = serde_json::from_str(&repaired.json)
                .unwrap_or_else(|e| panic!("{name}: {e} in {}", repaired.json));
            assert_eq!(&value, expected, "{name}: {}", repaired.json);
            assert_eq!(repaired.fixes, *fixes, "{name}");
            assert_eq!(repair_json(text), Some(repaired.json), "{name}");
        }
    }

    #[test]
    fn gives_up_on_text_without_json() {
        let cases = [
            ("empty", ""),
            ("whitespace", " \n\t "),
            ("prose", "no json here"),
            ("prose with a number", "The answer is 42"),
            ("a scalar with prose after", "42 apples"),
            ("an empty fence", "```json\n"),
            ("an empty fenced block", "```json\n```"),
            ("an unknown word as a value", "{\"a\": maybe}"),
            ("a key without a colon", "{\"a\" 1}"),
            ("a comma too many", "[1,,2]"),
            ("a closer with nothing open", "]"),
            (
                "an object left open before prose",
                "{\"a\": \"b\"\n\nHope this helps!",
            ),
        ];
        for (name, text) in cases {
            assert_eq!(repair_json(text), None, "{name}");
        }
    }

    #[test]
    fn keeps_the_text_of_numbers_and_whitespace() {
        let text = "{\"id\": 12345678901234567890, \"big\": 123456789012345678901234567890,\n \
                    \"x\": 1.50, \"e\": -2.5E+10,}";
        let expected = "{\"id\": 12345678901234567890, \"big\": 123456789012345678901234567890,\n \
                        \"x\": 1.50, \"e\": -2.5E+10}";
        assert_eq!(repair_json(text).as_deref(), Some(expected));
        let value = parse_json_lenient(text).map(|r| r.value);
        assert_eq!(
            value.ok().and_then(|v| v["id"].as_u64()),
            Some(12345678901234567890)
        );
    }

    #[test]
    fn valid_json_is_parsed_without_fixes() {
        for text in [
            "{\"a\": [1, {\"b\": null}]}",
            " 42 ",
            "\"hi\"",
            "[]",
            "true",
        ] {
            let repair = parse_json_lenient(text);
            assert_eq!(repair.as_ref().map(|r| r.fixes.len()), Ok(0), "{text}");
            assert_eq!(repair_json(text).as_deref(), Some(text.trim()), "{text}");
        }
    }

    #[test]
    fn lenient_parsing_reports_repairs_and_failures() {
        let repaired = parse_json_lenient("```json\n{'a': [1, 2,]}\n```");
        assert_eq!(
            repaired,
            Ok(Repair {
                value: json!({"a": [1, 2]}),
                fixes: vec![
                    "code fence".into(),
                    "single quotes".into(),
                    "trailing comma".into()
                ],
            })
        );
        let cases = [
            ("", "the output is empty, not JSON"),
            (
                "no json here",
                "the output is not JSON, even after repair: expected ident at line 1 column 2",
            ),
            (
                "{\"a\": 1,\n \"b\": @}",
                "the output is not JSON, even after repair: expected value at line 2 column 7",
            ),
            (
                &"[".repeat(200),
                "the output is not JSON, even after repair: recursion limit exceeded at line 1 \
                 column 128",
            ),
        ];
        for (text, message) in cases {
            let failure = parse_json_lenient(text).err();
            assert_eq!(
                failure.as_ref().map(|f| f.code),
                Some(FailureCode::ConstraintJsonInvalid)
            );
            assert_eq!(
                failure.map(|f| f.message).as_deref(),
                Some(message),
                "{text:?}"
            );
        }
    }

    /// Every prefix of a document is what a model cut off by its token limit writes.
    #[test]
    fn every_prefix_of_a_document_repairs() {
        let document = "{\"name\": \"Zoë \\\"Z\\\" \\u00e9 \\ud83c\\udf89\", \"n\": -12.5e-3, \"ok\": false, \
                        \"items\": [{\"id\": 1, \"tags\": [\"a, }\", null]}, [], {}], \"end\": true}";
        for (at, _) in document.char_indices().skip(1) {
            let prefix = &document[..at];
            let repaired = repair_json(prefix);
            assert!(
                repaired
                    .as_deref()
                    .is_some_and(|j| serde_json::from_str::<Value>(j).is_ok()),
                "{prefix:?} → {repaired:?}"
            );
        }
    }

    /// Random bytes from a small deterministic generator: repair must never panic, and what it
    /// returns must parse.
    #[test]
    fn never_panics_on_random_input() {
        const ALPHABET: &[u8] = b"{}[]\"':,/*\\ \n\t-+.eE0123456789abcdfnultrTFN`#";
        let mut state: u64 = 0x2545_f491_4f6c_dd1d;
        let mut next = move || {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (state >> 33) as usize
        };
        for _ in 0..3_000 {
            let len = next() % 60;
            let bytes: Vec<u8> = (0..len)
                .map(|_| match next() % 10 {
                    0 => (next() % 256) as u8,
                    _ => ALPHABET[next() % ALPHABET.len()],
                })
                .collect();
            let text = String::from_utf8_lossy(&bytes);
            if let Some(json) = repair_json(&text) {
                assert!(
                    serde_json::from_str::<Value>(&json).is_ok(),
                    "{text:?} → {json:?}"
                );
            }
            let _ = parse_json_lenient(&text);
        }
    }

    /// The least CPU time this thread spent on one of five repairs of `text`. CPU time, not
    /// elapsed time: other processes on a busy machine delay a repair but do not add to it.
    fn fastest_repair(text: &str) -> std::time::Duration {
        let thread_cpu = || {
            nix::time::clock_gettime(nix::time::ClockId::CLOCK_THREAD_CPUTIME_ID)
                .map(std::time::Duration::from)
                .expect("the thread's CPU clock")
        };
        (0..5)
            .map(|_| {
                let started = thread_cpu();
                let _ = std::hint::black_box(repair_json(std::hint::black_box(text)));
                thread_cpu().saturating_sub(started)
            })
            .min()
            .unwrap_or_default()
    }

    /// Long hostile input stays linear: four times the input takes about four times the CPU
    /// time, where a quadratic scan would take sixteen. Compared with each other, the two times
    /// do not depend on how fast the machine is, and CPU time not on how busy it is.
    #[test]
    fn hostile_input_stays_linear() {
        for unit in [
            "[", "{", "\"", "[1,", "{\"a\":", "'", "```", "/*", "{a", "\" \"",
        ] {
            let short = fastest_repair(&unit.repeat(10_000));
            let long = fastest_repair(&unit.repeat(40_000));
            // A millisecond of slack keeps timer resolution out of very fast repairs.
            assert!(
                long < short * 10 + std::time::Duration::from_millis(1),
                "{unit:?}: {short:?} for 10,000 repeats, {long:?} for 40,000"
            );
        }
    }
}
