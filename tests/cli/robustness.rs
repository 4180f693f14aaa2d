//! No input makes `validate` panic: junk, empty files, deep nesting, huge numbers, alias bombs,
//! duplicate keys. Each must end in exit 2 with a coded diagnostic (or exit 0 when it is valid).
//! Files read whole are bounded and must be regular files (a device or FIFO is refused at once),
//! and `models list` gives every stored file, the derived Q8_0 one included, a verdict.

use std::path::PathBuf;

use crate::{pagantic, pagantic_with};

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

/// A plan, policy, inputs file or lockfile named by a device or a FIFO is refused at once, with
/// exit 2 and the reason, never read without end.
#[test]
fn devices_and_fifos_are_refused_where_a_file_is_meant() {
    let dir = tempfile::tempdir().expect("temp dir");
    let fifo = dir.path().join("plan.yaml");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .expect("mkfifo runs");
    assert!(made.success());
    let fifo = fifo.to_str().expect("utf-8");
    let cases: [&[&str]; 4] = [
        &["validate", "/dev/zero"],
        &["validate", fifo],
        &[
            "run",
            "plans/quickstart.yaml",
            "--dry-run",
            "--inputs-file",
            "/dev/zero",
        ],
        &[
            "run",
            "plans/quickstart.yaml",
            "--dry-run",
            "--policy",
            fifo,
        ],
    ];
    for args in cases {
        let run = pagantic(args);
        assert_eq!(run.code, 2, "{args:?}: {}{}", run.stdout, run.stderr);
        let said = format!("{}{}", run.stdout, run.stderr);
        assert!(said.contains("not a regular file"), "{args:?}: {said}");
    }
}

/// A store holding the default LLM and its derived Q8_0 file: `models list` gives the derived
/// file a verdict of its own (here a wrong size), says why, and how to repair it.
#[test]
fn models_list_gives_the_derived_file_a_verdict_and_the_repair() {
    let home = tempfile::tempdir().expect("temp dir");
    let models = home.path().join("models");
    std::fs::create_dir(&models).expect("models dir");
    let original = "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf";
    let derived = "qwen2.5-coder-0.5b-instruct-q4_k_m.q8_0-derived.gguf";
    std::fs::write(models.join(original), "GGUF original").expect("original");
    std::fs::write(models.join(derived), "GGUF derived").expect("derived");
    let manifest = serde_json::json!({
        "name": "qwen2.5-coder-0.5b-instruct", "file": original, "size": 13,
        "sha256": "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        "derived": { "file": derived, "size": 12, "sha256": "0", "note": "" },
    });
    std::fs::write(
        models.join("qwen2.5-coder-0.5b-instruct.json"),
        manifest.to_string(),
    )
    .expect("manifest");
    let home = home.path().to_str().expect("utf-8");
    let listed = pagantic_with(
        &crate::root(),
        &["models", "list"],
        &[("PAGANTIC_HOME", home)],
    );
    assert_eq!(listed.code, 1, "{}{}", listed.stdout, listed.stderr);
    let row = listed
        .stdout
        .lines()
        .find(|line| line.contains("(derived Q8_0)"))
        .unwrap_or_default();
    assert!(
        row.contains(" NO ") && row.ends_with(derived),
        "{}",
        listed.stdout
    );
    assert!(
        listed
            .stdout
            .contains("sizes compared, contents not re-hashed"),
        "{}",
        listed.stdout
    );
    for expected in [
        &format!("{derived} does not verify: 12 bytes, expected 675710848"),
        "help: `pagantic models pull qwen2.5-coder-0.5b-instruct --force`",
    ] {
        assert!(
            listed.stderr.contains(expected),
            "{expected}\n{}",
            listed.stderr
        );
    }
}
