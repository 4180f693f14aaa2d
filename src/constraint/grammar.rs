//! GBNF (llama.cpp's grammar format, which many published examples use) translated to Lark, the grammar
//! format mistral.rs's llguidance decoder accepts.
//!
//! GBNF rules are `name ::= body`, the start rule is `root`, terminals are `"strings"`, `[classes]`
//! and `.`, with `|`, `( )`, `*`, `+`, `?` and `{m}`, `{m,}`, `{m,n}` repetition; comments start
//! with `#`. The translation keeps the structure: `name: body`, classes become `/[…]/` regexes,
//! `{m,n}` becomes `~ m..n`, and `start: g_root` is added. Rule names are matched exactly, as
//! GBNF means them (`yes-word` and `yes_word`, `Root` and `root` are different rules), and carried
//! into Lark's lower-case names one-to-one (see [`rule_name`]). Undefined rules, a rule defined
//! twice, a missing `root` and unbalanced brackets are reported with what is wrong, so a bad
//! grammar is caught when the plan is checked rather than when the model runs.

use std::ops::Range;
use std::panic::AssertUnwindSafe;

use llguidance::api::{GrammarInit, ParserLimits, TopLevelGrammar};
use llguidance::earley::ValidationResult;

use crate::core::{Failure, FailureCode};

#[derive(Debug, Clone, PartialEq)]
enum Token {
    Name(String),
    Define,
    Literal(String),
    Class(String),
    Any,
    Op(char),
    /// `{m,n}`; `{m,}` is rewritten to `{m,m}` followed by the atom and `*`.
    Repeat(u32, u32),
}

/// A GBNF grammar that does not translate: what is wrong, and the byte range of the grammar text
/// at fault (so `validate` can underline the token, not the whole grammar).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GrammarError {
    pub message: String,
    pub span: Range<usize>,
}

impl From<GrammarError> for Failure {
    fn from(error: GrammarError) -> Self {
        Failure::new(FailureCode::ConstraintGrammarRejected, error.message)
            .with_help("GBNF: rules are `name ::= body`, the start rule is `root`")
    }
}

fn rejected(message: impl Into<String>, span: Range<usize>) -> GrammarError {
    GrammarError {
        message: message.into(),
        span,
    }
}

/// A token and the byte range it was read from.
type Spanned = (Token, Range<usize>);

/// One rule: its name, where the name is written, and its body.
struct Rule {
    name: String,
    at: Range<usize>,
    body: Vec<Spanned>,
}

/// Translates a GBNF grammar to Lark.
pub fn gbnf_to_lark(gbnf: &str) -> Result<String, GrammarError> {
    let tokens = tokenize(gbnf)?;
    let mut rules: Vec<Rule> = Vec::new();
    let mut i = 0;
    while i < tokens.len() {
        match (&tokens[i], tokens.get(i + 1)) {
            ((Token::Name(name), at), Some((Token::Define, _))) => {
                if rules.iter().any(|rule| rule.name == *name) {
                    return Err(rejected(
                        format!("rule `{name}` is defined twice"),
                        at.clone(),
                    ));
                }
                rules.push(Rule {
                    name: name.clone(),
                    at: at.clone(),
                    body: Vec::new(),
                });
                i += 2;
            }
            ((token, at), _) => {
                let Some(rule) = rules.last_mut() else {
                    return Err(rejected(
                        format!("the grammar must start with a rule `name ::= …`, found {token:?}"),
                        at.clone(),
                    ));
                };
                rule.body.push((token.clone(), at.clone()));
                i += 1;
            }
        }
    }
    if !rules.iter().any(|rule| rule.name == "root") {
        return Err(rejected("the grammar has no `root` rule", 0..gbnf.len()));
    }
    let defined: Vec<&str> = rules.iter().map(|rule| rule.name.as_str()).collect();
    let mut lark = format!("start: {}\n", rule_name("root"));
    for rule in &rules {
        let name = &rule.name;
        if rule.body.is_empty() {
            return Err(rejected(format!("rule `{name}` is empty"), rule.at.clone()));
        }
        let mut open: Vec<Range<usize>> = Vec::new();
        let mut parts = Vec::with_capacity(rule.body.len());
        for (token, at) in &rule.body {
            parts.push(match token {
                Token::Name(n) => {
                    if !defined.contains(&n.as_str()) {
                        return Err(rejected(
                            format!("rule `{name}` uses `{n}`, which is not defined"),
                            at.clone(),
                        ));
                    }
                    rule_name(n)
                }
                Token::Literal(text) => text.clone(),
                Token::Class(class) => format!("/{}/", class.replace('/', "\\/")),
                Token::Any => "/./s".to_string(),
                Token::Op(c) => {
                    match c {
                        '(' => open.push(at.clone()),
                        ')' if open.pop().is_none() => {
                            return Err(rejected(
                                format!("rule `{name}` closes a bracket it never opened"),
                                at.clone(),
                            ));
                        }
                        _ => {}
                    }
                    c.to_string()
                }
                Token::Repeat(min, max) => format!("~ {min}..{max}"),
                Token::Define => {
                    return Err(rejected(
                        format!("rule `{name}` has a stray `::=`"),
                        at.clone(),
                    ));
                }
            });
        }
        if let Some(at) = open.pop() {
            return Err(rejected(format!("rule `{name}` leaves a bracket open"), at));
        }
        lark.push_str(&format!(
            "{}: {}\n",
            rule_name(name),
            join_repetitions(&parts)
        ));
    }
    Ok(lark)
}

/// Checks a Lark grammar with llguidance, the library the local engine decodes with, so a
/// grammar it would refuse is refused when the plan is validated. The error says what is wrong.
pub fn check_lark(grammar: &str) -> Result<(), GrammarRejected> {
    let init = GrammarInit::Serialized(TopLevelGrammar::from_lark(grammar.to_string()));
    // The parser is not ours; whatever it does with odd input must not take the checks down.
    let result = std::panic::catch_unwind(AssertUnwindSafe(|| {
        init.validate(None, ParserLimits::default())
    }));
    match result {
        // The first line says what and where; the rest repeats the grammar with a caret.
        Ok(ValidationResult::Error(message)) => Err(GrammarRejected::Invalid(
            message
                .lines()
                .next()
                .unwrap_or_default()
                .trim()
                .to_string(),
        )),
        Ok(_) => Ok(()),
        Err(_) => Err(GrammarRejected::Unreadable),
    }
}

/// Why the decoder would refuse a Lark grammar.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GrammarRejected {
    /// llguidance's own account of what is wrong and where.
    #[error("{0}")]
    Invalid(String),
    /// The grammar made llguidance's parser fail outright.
    #[error("the grammar could not be read")]
    Unreadable,
}

/// Joins translated tokens with spaces, attaching postfix operators and `)` to what they follow.
fn join_repetitions(parts: &[String]) -> String {
    let mut out = String::new();
    for part in parts {
        let attach = matches!(part.as_str(), "*" | "+" | "?" | ")") || out.ends_with('(');
        if !out.is_empty() && !attach {
            out.push(' ');
        }
        out.push_str(part);
    }
    out
}

/// The Lark name of GBNF rule `name`, one-to-one: Lark names are lower case, so `_` becomes
/// `__`, `-` becomes `_0` and an upper-case letter `_` and the letter; the `g_` prefix keeps every
/// name clear of Lark's own (`start`) and of a leading digit.
fn rule_name(name: &str) -> String {
    let mut out = String::from("g_");
    for c in name.chars() {
        match c {
            '_' => out.push_str("__"),
            '-' => out.push_str("_0"),
            c if c.is_ascii_uppercase() => {
                out.push('_');
                out.push(c.to_ascii_lowercase());
            }
            c => out.push(c),
        }
    }
    out
}

fn tokenize(text: &str) -> Result<Vec<Spanned>, GrammarError> {
    // Characters with their byte offsets; `end(i)` is where character `i` ends.
    let chars: Vec<(usize, char)> = text.char_indices().collect();
    let offset = |i: usize| chars.get(i).map_or(text.len(), |(at, _)| *at);
    let char_at = |i: usize| chars.get(i).map(|(_, c)| *c);
    let mut tokens: Vec<Spanned> = Vec::new();
    let mut i = 0;
    while let Some(c) = char_at(i) {
        let start = i;
        match c {
            c if c.is_whitespace() => i += 1,
            '#' => {
                while char_at(i).is_some_and(|c| c != '\n') {
                    i += 1;
                }
            }
            ':' if char_at(i + 1) == Some(':') && char_at(i + 2) == Some('=') => {
                i += 3;
                tokens.push((Token::Define, offset(start)..offset(i)));
            }
            '"' | '[' => {
                let close = if c == '"' { '"' } else { ']' };
                i += 1;
                while char_at(i).is_some_and(|c| c != close) {
                    i += if char_at(i) == Some('\\') { 2 } else { 1 };
                }
                if i >= chars.len() {
                    let what = if c == '"' {
                        "a string literal"
                    } else {
                        "a character class `[…]`"
                    };
                    return Err(rejected(
                        format!("{what} is never closed"),
                        offset(start)..text.len(),
                    ));
                }
                i += 1;
                let span = offset(start)..offset(i);
                let written = text[span.clone()].to_string();
                let token = if c == '"' {
                    Token::Literal(written)
                } else {
                    Token::Class(written)
                };
                tokens.push((token, span));
            }
            '{' => {
                let Some(close) = (i..chars.len()).find(|&j| char_at(j) == Some('}')) else {
                    return Err(rejected(
                        "a repetition `{…}` is never closed",
                        offset(start)..text.len(),
                    ));
                };
                let span = offset(start)..offset(close + 1);
                let inner = &text[offset(start + 1)..offset(close)];
                let bad = || {
                    rejected(
                        format!("`{{{inner}}}` is not a repetition (use {{m}}, {{m,}} or {{m,n}})"),
                        span.clone(),
                    )
                };
                let number = |text: &str| text.trim().parse::<u32>().map_err(|_| bad());
                match inner.split_once(',') {
                    None => {
                        let n = number(inner)?;
                        tokens.push((Token::Repeat(n, n), span));
                    }
                    Some((m, n)) if n.trim().is_empty() => {
                        // `x{m,}` is `x ~ m..m` followed by `x*`: repeat the previous atom.
                        let m = number(m)?;
                        let atom = previous_atom(&tokens).ok_or_else(|| {
                            rejected("a repetition follows nothing", span.clone())
                        })?;
                        tokens.push((Token::Repeat(m, m), span.clone()));
                        tokens.extend(atom);
                        tokens.push((Token::Op('*'), span));
                    }
                    Some((m, n)) => tokens.push((Token::Repeat(number(m)?, number(n)?), span)),
                }
                i = close + 1;
            }
            '.' => {
                i += 1;
                tokens.push((Token::Any, offset(start)..offset(i)));
            }
            '|' | '(' | ')' | '*' | '+' | '?' => {
                i += 1;
                tokens.push((Token::Op(c), offset(start)..offset(i)));
            }
            c if c.is_ascii_alphanumeric() || c == '-' || c == '_' => {
                while char_at(i).is_some_and(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
                {
                    i += 1;
                }
                let span = offset(start)..offset(i);
                tokens.push((Token::Name(text[span.clone()].to_string()), span));
            }
            other => {
                return Err(rejected(
                    format!("unexpected `{other}` in the grammar"),
                    offset(start)..offset(start + 1),
                ));
            }
        }
    }
    Ok(tokens)
}

/// The tokens of the atom just before a repetition: one terminal or name, or a bracketed group.
fn previous_atom(tokens: &[Spanned]) -> Option<Vec<Spanned>> {
    let last = tokens.last()?;
    if last.0 != Token::Op(')') {
        return Some(vec![last.clone()]);
    }
    let mut depth = 0;
    for start in (0..tokens.len()).rev() {
        match tokens[start].0 {
            Token::Op(')') => depth += 1,
            Token::Op('(') => {
                depth -= 1;
                if depth == 0 {
                    return Some(tokens[start..].to_vec());
                }
            }
            _ => {}
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn translates_rules_terminals_and_operators() {
        let cases = [
            (
                "root ::= \"yes\" | \"no\"",
                "start: g_root\ng_root: \"yes\" | \"no\"\n",
            ),
            (
                "root ::= answer ws\nanswer ::= [a-z]+ (\".\" [0-9]?)*\nws ::= [ \\t\\n]* # spaces",
                "start: g_root\ng_root: g_answer g_ws\ng_answer: /[a-z]/+ (\".\" /[0-9]/?)*\ng_ws: /[ \\t\\n]/*\n",
            ),
            (
                "root ::= digit{2,4} \"/\" any-char\ndigit ::= [0-9]\nany-char ::= .",
                "start: g_root\ng_root: g_digit ~ 2..4 \"/\" g_any_0char\ng_digit: /[0-9]/\ng_any_0char: /./s\n",
            ),
            ("root ::= \"a\"{3}", "start: g_root\ng_root: \"a\" ~ 3..3\n"),
            (
                "root ::= \"a\"{2,}",
                "start: g_root\ng_root: \"a\" ~ 2..2 \"a\"*\n",
            ),
        ];
        for (gbnf, lark) in cases {
            assert_eq!(gbnf_to_lark(gbnf).as_deref(), Ok(lark), "{gbnf}");
        }
    }

    #[test]
    fn names_that_differ_stay_different_rules() {
        let lark = gbnf_to_lark(
            "root ::= yes-word yes_word Yes start\nyes-word ::= \"a\"\nyes_word ::= \"b\"\nYes ::= \"c\"\nstart ::= \"d\"",
        )
        .expect("valid");
        assert_eq!(
            lark,
            "start: g_root\ng_root: g_yes_0word g_yes__word g__yes g_start\ng_yes_0word: \"a\"\n\
             g_yes__word: \"b\"\ng__yes: \"c\"\ng_start: \"d\"\n"
        );
        assert_eq!(check_lark(&lark), Ok(()));
    }

    #[test]
    fn lark_is_checked_by_the_decoder_s_own_parser() {
        assert_eq!(check_lark("start: \"yes\" | \"no\""), Ok(()));
        for broken in [
            "The answer is yes or no.",
            "start: missing",
            "start: (\"a\"",
        ] {
            assert!(check_lark(broken).is_err(), "{broken}");
        }
    }

    #[test]
    fn broken_grammars_say_what_is_wrong() {
        let cases = [
            ("answer ::= \"x\"", "no `root` rule"),
            ("root ::= answer", "uses `answer`, which is not defined"),
            ("root ::= (\"a\"", "leaves a bracket open"),
            ("root ::= \"a\")", "closes a bracket it never opened"),
            ("root ::= \"open", "never closed"),
            ("root ::= [a-z", "never closed"),
            ("root ::= \"a\"{x}", "is not a repetition"),
            ("\"a\" root ::= \"b\"", "must start with a rule"),
            ("root ::=", "is empty"),
            ("root ::= @", "unexpected `@`"),
            // Names are exact: no rule is found by another spelling.
            ("Root ::= \"a\"", "no `root` rule"),
            (
                "root ::= yes-word\nyes_word ::= \"y\"",
                "uses `yes-word`, which is not defined",
            ),
            (
                "root ::= \"a\"\nroot ::= \"b\"",
                "rule `root` is defined twice",
            ),
        ];
        for (gbnf, expected) in cases {
            let failure = Failure::from(gbnf_to_lark(gbnf).expect_err(gbnf));
            assert_eq!(failure.code, FailureCode::ConstraintGrammarRejected);
            assert!(
                failure.message.contains(expected),
                "{gbnf}: {}",
                failure.message
            );
        }
    }

    #[test]
    fn an_error_points_at_the_token_at_fault() {
        let at = |gbnf: &str| {
            let error = gbnf_to_lark(gbnf).expect_err(gbnf);
            gbnf[error.span].to_string()
        };
        assert_eq!(at("root ::= yes\nno ::= \"n\""), "yes");
        assert_eq!(at("root ::= \"a\" (\"b\""), "(");
        assert_eq!(at("root ::= \"a\")"), ")");
        assert_eq!(at("root ::= \"é\" @"), "@");
        assert_eq!(at("root ::= \"a\"{x}"), "{x}");
        assert_eq!(at("root ::= \"a\"\nroot ::= \"b\""), "root");
        assert_eq!(
            gbnf_to_lark("root ::= \"a\"\nroot ::= \"b\"")
                .expect_err("twice")
                .span,
            13..17
        );
        assert_eq!(at("root ::= \"open"), "\"open");
        assert_eq!(at("root ::=\nx ::= \"a\""), "root");
    }
}
