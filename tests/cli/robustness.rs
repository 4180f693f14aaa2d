//! No input makes `validate` panic: junk, empty files, deep nesting, huge numbers, alias bombs,
//! duplicate keys. Each must end in exit 2 with a coded diagnostic (or exit 0 when it is valid).

use std::path::PathBuf;

use crate::pagantic;

/// A file named `name` holding `bytes`, in a directory removed with the returned guard.
fn scratch(name: &str, bytes: &[u8]) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join(name);
    std::fs::write(&path, bytes).expect("written");
    (dir, path)
}

fn check(name: &str, bytes: &[u8], expected_code: i32, expected_diagnostic: &str) {
    let (_dir, path) = scratch(name, bytes);
    let run = pagantic(&[
        "validate",
        "--format",
        "json",
        path.to_str().expect("utf-8"),
    ]);
    assert!(
        !run.stderr.contains("panicked"),
        "{name} panicked:\n{}",
        run.stderr
    );
    assert_eq!(
        run.code, expected_code,
        "{name}:\n{}{}",
        run.stdout, run.stderr
    );
    if expected_diagnostic.is_empty() {
        // A valid file: not a single diagnostic line.
        assert_eq!(run.stdout.trim(), "", "{name}: expected no diagnostics");
    } else {
        assert!(
            run.stdout.contains(expected_diagnostic),
            "{name}: expected {expected_diagnostic} in\n{}",
            run.stdout
        );
    }
}

/// Deterministic pseudo-random bytes (no dependency needed for junk).
fn junk(len: usize, mut seed: u64) -> Vec<u8> {
    (0..len)
        .map(|_| {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (seed >> 33) as u8
        })
        .collect()
}

#[test]
fn empty_and_blank_files() {
    check("empty.yaml", b"", 2, "plan::empty");
    check("blank.yaml", b"\n\n   \n", 2, "plan::empty");
}

#[test]
fn binary_junk() {
    for seed in 0..8 {
        let (_dir, path) = scratch(&format!("junk-{seed}.yaml"), &junk(4096, seed));
        let run = pagantic(&[
            "validate",
            "--format",
            "json",
            path.to_str().expect("utf-8"),
        ]);
        assert!(
            !run.stderr.contains("panicked"),
            "seed {seed} panicked:\n{}",
            run.stderr
        );
        assert_eq!(run.code, 2, "seed {seed}");
        assert!(
            run.stdout.contains("\"code\":\""),
            "seed {seed}: {}",
            run.stdout
        );
    }
}

#[test]
fn printable_junk() {
    let alphabet = b"{}[]:,-?&*!|>'\"%@` #\n\tab1.";
    for seed in 0..16 {
        let text: Vec<u8> = junk(2000, seed)
            .into_iter()
            .map(|b| alphabet[b as usize % alphabet.len()])
            .collect();
        let (_dir, path) = scratch(&format!("printable-{seed}.yaml"), &text);
        let run = pagantic(&[
            "validate",
            "--format",
            "json",
            path.to_str().expect("utf-8"),
        ]);
        assert!(
            !run.stderr.contains("panicked"),
            "seed {seed} panicked:\n{}",
            run.stderr
        );
        assert_eq!(run.code, 2, "seed {seed}");
    }
}

#[test]
fn deep_nesting() {
    let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    // The parser's own recursion limit or ours, whichever trips first.
    check("deep-flow.yaml", deep.as_bytes(), 2, "\"code\":\"yaml::");
    let mut block = String::new();
    for depth in 0..200 {
        block.push_str(&format!("{}k{depth}:\n", "  ".repeat(depth)));
    }
    check("deep-block.yaml", block.as_bytes(), 2, "yaml::too_deep");
}

#[test]
fn huge_numbers() {
    check(
        "inf.yaml",
        b"version: 1e999\nname: x\nsteps: []\n",
        2,
        "yaml::bad_scalar",
    );
    check(
        "big-int.yaml",
        b"version: 1\nname: x\npolicy: { max_steps: 99999999999999999999999999 }\nsteps:\n  - { name: a, type: template, template: x }\n",
        2,
        "\"line\":3",
    );
    check(
        "u64-overflow.yaml",
        b"version: 1\nname: x\npolicy: { max_steps: 4294967296 }\nsteps:\n  - { name: a, type: template, template: x }\n",
        2,
        "\"line\":3",
    );
}

#[test]
fn alias_bombs_are_cut_off() {
    let mut text =
        String::from("version: 1\nname: x\nvars:\n  a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
    for i in 1..12 {
        let refs = vec![format!("*a{}", i - 1); 10].join(", ");
        text.push_str(&format!("  a{i}: &a{i} [{refs}]\n"));
    }
    text.push_str("steps:\n  - { name: a, type: template, template: x }\n");
    check("bomb.yaml", text.as_bytes(), 2, "yaml::too_large");
}

#[test]
fn anchors_and_aliases_work_within_limits() {
    let text = b"# yaml-language-server: $schema=../../schemas/plan.schema.json\nversion: 1\nname: x\nsteps:\n  - &base { name: a, type: template, template: \"hi\" }\n  - { name: b, type: template, template: *name_text }\n";
    check("alias-unknown.yaml", text, 2, "unknown anchor");
    let ok = b"version: 1\nname: x\nvars:\n  greeting: &g hello\n  again: *g\nsteps:\n  - { name: a, type: template, template: \"{{ vars.again }}\" }\n";
    check("alias-ok.yaml", ok, 0, "");
}

#[test]
fn duplicate_keys_point_at_both() {
    check(
        "dup.yaml",
        b"version: 1\nname: x\nname: y\nsteps: []\n",
        2,
        "yaml::duplicate_key",
    );
}

#[test]
fn windows_line_endings_and_a_byte_order_mark_are_fine() {
    let text = "\u{feff}version: 1\r\nname: x\r\nsteps:\r\n  - { name: a, type: template, template: x }\r\n";
    check("crlf.yaml", text.as_bytes(), 0, "");
}

#[test]
fn non_ascii_text_is_located_by_character() {
    let text = "version: 1\nname: café\nsteps:\n  - { name: a, type: template, template: \"héllo {{ inptus.x }}\" }\n";
    check("unicode.yaml", text.as_bytes(), 2, "\"line\":4,");
}
