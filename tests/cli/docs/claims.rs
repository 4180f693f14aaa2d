//! The numbers the README and the docs state about this repository, checked against it: how
//! many plans `plans/` holds (and that they use every step type), what the committed cassette
//! holds, and every figure of the README's tables, which must be the figure on the page the row
//! links to (the measurements live there, with when and how they were taken).

use std::collections::BTreeSet;
use std::path::Path;

use pulldown_cmark::{Event, Options, Parser, Tag, TagEnd};
use regex::Regex;

use super::markdown::read;
use crate::root;

/// Small numbers as the docs write them.
const WORDS: [&str; 13] = [
    "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
    "eleven", "twelve",
];

/// The plan files of `plans/` (its YAML files but the test files).
fn plan_files() -> Vec<std::path::PathBuf> {
    let mut plans: Vec<_> = std::fs::read_dir(root().join("plans"))
        .expect("plans/")
        .map(|entry| entry.expect("entry").path())
        .filter(|path| {
            let name = path
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or_default();
            name.ends_with(".yaml") && !name.ends_with(".test.yaml")
        })
        .collect();
    plans.sort();
    plans
}

#[test]
fn the_plans_the_docs_count_are_there_and_use_every_step_type() {
    let plans = plan_files();
    let said = Regex::new(r"(?i)\b(\w+) plans in \[`plans/`\]").expect("a regex");
    let mut checked = 0;
    for file in ["README.md", "docs/plans.md"] {
        for found in said.captures_iter(&read(Path::new(file))) {
            let word = found[1].to_lowercase();
            let count = WORDS.iter().position(|w| *w == word);
            assert_eq!(
                count,
                Some(plans.len()),
                "{file} says `{}`, and plans/ holds {} plans",
                &found[0],
                plans.len()
            );
            checked += 1;
        }
    }
    assert!(checked >= 2, "found the counts ({checked})");
    let mut used = BTreeSet::new();
    for path in &plans {
        let plan = pagantic::plan::load_plan(path, None)
            .unwrap_or_else(|e| panic!("{} is valid: {e:?}", path.display()));
        used.extend(plan.raw.steps.iter().map(|s| s.step_type().to_string()));
    }
    let every: BTreeSet<String> = pagantic::plan::StepType::ALL
        .iter()
        .map(ToString::to_string)
        .collect();
    let unused: Vec<_> = every.difference(&used).collect();
    assert!(unused.is_empty(), "no plan in plans/ uses {unused:?}");
}

#[test]
fn the_committed_cassette_is_as_the_docs_describe_it() {
    let cassette = root().join("plans/classify.cassette.jsonl");
    let entries = pagantic::cache::read_cassette(&cassette)
        .expect("the cassette")
        .len();
    let kb = std::fs::metadata(&cassette).expect("the cassette").len() as f64 / 1000.0;
    let counted = Regex::new(r"\b(\d+) entries\b").expect("a regex");
    let sized = Regex::new(r"(\d+) KB").expect("a regex");
    for file in ["docs/cache.md", "docs/testing.md"] {
        let text = read(Path::new(file));
        let counts: Vec<usize> = counted
            .captures_iter(&text)
            .map(|c| c[1].parse().expect("a number"))
            .collect();
        assert!(!counts.is_empty(), "{file} counts the entries");
        assert!(
            counts.iter().all(|n| *n == entries),
            "{file} says {counts:?} entries; plans/classify.cassette.jsonl holds {entries}"
        );
        for size in sized.captures_iter(&text) {
            let said: f64 = size[1].parse().expect("a number");
            assert!(
                (said - kb).abs() <= 0.5,
                "{file} says {said} KB; the cassette is {kb:.1} KB"
            );
        }
    }
}

/// A table row: each cell's text and the links in it.
struct Row {
    cells: Vec<(String, Vec<String>)>,
}

/// The rows (header row left out) of the tables under the heading `title` in `text`.
fn table_rows(text: &str, title: &str) -> Vec<Row> {
    let mut rows = Vec::new();
    let mut in_section = false;
    let mut heading: Option<String> = None;
    let mut row: Option<Row> = None;
    let mut in_head = false;
    for event in Parser::new_ext(text, Options::ENABLE_TABLES) {
        match event {
            Event::Start(Tag::Heading { .. }) => heading = Some(String::new()),
            Event::End(TagEnd::Heading(_)) => {
                in_section = heading.take().is_some_and(|h| h == title);
            }
            Event::Start(Tag::TableHead) => in_head = true,
            Event::End(TagEnd::TableHead) => in_head = false,
            Event::Start(Tag::TableRow) if in_section && !in_head => {
                row = Some(Row { cells: Vec::new() });
            }
            Event::End(TagEnd::TableRow) => rows.extend(row.take()),
            Event::Start(Tag::TableCell) => {
                if let Some(row) = &mut row {
                    row.cells.push((String::new(), Vec::new()));
                }
            }
            Event::Start(Tag::Link { dest_url, .. }) => {
                if let Some((_, links)) = row.as_mut().and_then(|r| r.cells.last_mut()) {
                    links.push(dest_url.to_string());
                }
            }
            Event::Text(piece) | Event::Code(piece) => {
                if let Some(heading) = &mut heading {
                    heading.push_str(&piece);
                } else if let Some((cell, _)) = row.as_mut().and_then(|r| r.cells.last_mut()) {
                    cell.push_str(&piece);
                }
            }
            _ => {}
        }
    }
    rows
}

/// The part of a Markdown page under the heading whose anchor is `anchor` (to the next heading
/// of its level or above); the whole page without an anchor.
fn section(page: &str, anchor: &str) -> String {
    if anchor.is_empty() {
        return page.to_string();
    }
    let mut kept = String::new();
    let mut level = None;
    for line in page.lines() {
        let hashes = line.chars().take_while(|&c| c == '#').count();
        if hashes > 0 && line[hashes..].starts_with(' ') {
            let title: String = line[hashes..]
                .trim()
                .replace('`', "")
                .to_lowercase()
                .chars()
                .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
                .map(|c| if c == ' ' { '-' } else { c })
                .collect();
            match level {
                Some(open) if hashes <= open => break,
                None if title == anchor => level = Some(hashes),
                _ => {}
            }
        }
        if level.is_some() {
            kept.push_str(line);
            kept.push('\n');
        }
    }
    kept
}

/// Every figure in the README's "What works" and "Headline figures" tables is on the page (and
/// under the heading) its row links to, so that a figure has one source: a re-measurement
/// changes the page, and this test then names each README figure left behind.
#[test]
fn the_readme_s_figures_are_those_of_the_pages_they_link_to() {
    let readme = read(Path::new("README.md"));
    let number = Regex::new(r"\d+(?:,\d{3})*(?:\.\d+)?").expect("a regex");
    let mut problems = Vec::new();
    let mut checked = 0;
    for title in ["What works", "Headline figures"] {
        let rows = table_rows(&readme, title);
        assert!(!rows.is_empty(), "the README has its `{title}` table");
        for row in rows {
            let text: String = row
                .cells
                .iter()
                .map(|(text, _)| text.as_str())
                .collect::<Vec<_>>()
                .join(" | ");
            // A number inside a name (`Qwen2.5-Coder-0.5B`, `Q8_0`) is not a figure.
            let inside_a_name =
                |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
            let figures: Vec<&str> = number
                .find_iter(&text)
                .filter(|m| {
                    !inside_a_name(text[..m.start()].chars().next_back())
                        && !inside_a_name(text[m.end()..].chars().next())
                })
                .map(|m| m.as_str())
                .collect();
            if figures.is_empty() {
                continue;
            }
            let links: Vec<&String> = row
                .cells
                .iter()
                .flat_map(|(_, links)| links)
                .filter(|link| link.starts_with("docs/") && link.contains(".md"))
                .collect();
            if links.is_empty() {
                problems.push(format!(
                    "`{text}`: figures without a link to where they come from"
                ));
                continue;
            }
            let source: String = links
                .iter()
                .map(|link| {
                    let (page, anchor) = link.split_once('#').unwrap_or((link, ""));
                    section(&read(Path::new(page)), anchor)
                })
                .collect();
            for figure in figures {
                checked += 1;
                if !source.contains(figure) {
                    problems.push(format!("README `{text}`: {figure} is not in {links:?}"));
                }
            }
        }
    }
    assert!(checked >= 30, "found the figures ({checked})");
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
