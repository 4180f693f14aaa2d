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

fn rejected(message: impl Into<String>) -> Failure {
    Failure::new(FailureCode::ConstraintGrammarRejected, message)
        .with_help("GBNF: rules are `name ::= body`, the start rule is `root`")
}

/// Translates a GBNF grammar to Lark.
pub fn gbnf_to_lark(gbnf: &str) -> Result<String, Failure> {
    let tokens = tokenize(gbnf)?;
    let mut rules: Vec<(String, Vec<Token>)> = Vec::new();
    let mut i = 0;
    while i < tokens.len() {
        match (&tokens[i], tokens.get(i + 1)) {
            (Token::Name(name), Some(Token::Define)) => {
                if rules.iter().any(|(defined, _)| defined == name) {
                    return Err(rejected(format!("rule `{name}` is defined twice")));
                }
                rules.push((name.clone(), Vec::new()));
                i += 2;
            }
            (token, _) => {
                let Some((_, body)) = rules.last_mut() else {
                    return Err(rejected(format!(
                        "the grammar must start with a rule `name ::= …`, found {token:?}"
                    )));
                };
                body.push(token.clone());
                i += 1;
            }
        }
    }
    if !rules.iter().any(|(name, _)| name == "root") {
        return Err(rejected("the grammar has no `root` rule"));
    }
    let defined: Vec<&str> = rules.iter().map(|(n, _)| n.as_str()).collect();
    let mut lark = format!("start: {}\n", rule_name("root"));
    for (name, body) in &rules {
        if body.is_empty() {
            return Err(rejected(format!("rule `{name}` is empty")));
        }
        let mut depth = 0i32;
        let mut parts = Vec::with_capacity(body.len());
        for token in body {
            parts.push(match token {
                Token::Name(n) => {
                    if !defined.contains(&n.as_str()) {
                        return Err(rejected(format!(
                            "rule `{name}` uses `{n}`, which is not defined"
                        )));
                    }
                    rule_name(n)
                }
                Token::Literal(text) => text.clone(),
                Token::Class(class) => format!("/{}/", class.replace('/', "\\/")),
                Token::Any => "/./s".to_string(),
                Token::Op(c) => {
                    match c {
                        '(' => depth += 1,
                        ')' => depth -= 1,
                        _ => {}
                    }
                    if depth < 0 {
                        return Err(rejected(format!(
                            "rule `{name}` closes a bracket it never opened"
                        )));
                    }
                    c.to_string()
                }
                Token::Repeat(min, max) => format!("~ {min}..{max}"),
                Token::Define => return Err(rejected(format!("rule `{name}` has a stray `::=`"))),
            });
        }
        if depth != 0 {
            return Err(rejected(format!("rule `{name}` leaves a bracket open")));
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
/// grammar it would refuse is refused when the plan is validated. The message says what is wrong.
pub fn check_lark(grammar: &str) -> Result<(), String> {
    let init = GrammarInit::Serialized(TopLevelGrammar::from_lark(grammar.to_string()));
    // The parser is not ours; whatever it does with odd input must not take the checks down.
    let result = std::panic::catch_unwind(AssertUnwindSafe(|| {
        init.validate(None, ParserLimits::default())
    }));
    match result {
        Ok(ValidationResult::Error(message)) => {
            // The first line says what and where; the rest repeats the grammar with a caret.
            Err(message
                .lines()
                .next()
                .unwrap_or_default()
                .trim()
                .to_string())
        }
        Ok(_) => Ok(()),
        Err(_) => Err("the grammar could not be read".into()),
    }
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

fn tokenize(text: &str) -> Result<Vec<Token>, Failure> {
    let chars: Vec<char> = text.chars().collect();
    let mut tokens = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        match c {
            c if c.is_whitespace() => i += 1,
            '#' => {
                while i < chars.len() && chars[i] != '\n' {
                    i += 1;
                }
            }
            ':' if chars.get(i + 1) == Some(&':') && chars.get(i + 2) == Some(&'=') => {
                tokens.push(Token::Define);
                i += 3;
            }
            '"' => {
                let start = i;
                i += 1;
                while i < chars.len() && chars[i] != '"' {
                    i += if chars[i] == '\\' { 2 } else { 1 };
                }
                if i >= chars.len() {
                    return Err(rejected("a string literal is never closed"));
                }
                i += 1;
                tokens.push(Token::Literal(chars[start..i].iter().collect()));
            }
            '[' => {
                let start = i;
                i += 1;
                while i < chars.len() && chars[i] != ']' {
                    i += if chars[i] == '\\' { 2 } else { 1 };
                }
                if i >= chars.len() {
                    return Err(rejected("a character class `[…]` is never closed"));
                }
                i += 1;
                tokens.push(Token::Class(chars[start..i].iter().collect()));
            }
            '{' => {
                let close = chars[i..].iter().position(|&c| c == '}').map(|p| i + p);
                let Some(close) = close else {
                    return Err(rejected("a repetition `{…}` is never closed"));
                };
                let inner: String = chars[i + 1..close].iter().collect();
                let bad = || {
                    rejected(format!(
                        "`{{{inner}}}` is not a repetition (use {{m}}, {{m,}} or {{m,n}})"
                    ))
                };
                let number = |text: &str| text.trim().parse::<u32>().map_err(|_| bad());
                match inner.split_once(',') {
                    None => {
                        let n = number(&inner)?;
                        tokens.push(Token::Repeat(n, n));
                    }
                    Some((m, n)) if n.trim().is_empty() => {
                        // `x{m,}` is `x ~ m..m` followed by `x*`: repeat the previous atom.
                        let m = number(m)?;
                        let atom = previous_atom(&tokens)
                            .ok_or_else(|| rejected("a repetition follows nothing"))?;
                        tokens.push(Token::Repeat(m, m));
                        tokens.extend(atom);
                        tokens.push(Token::Op('*'));
                    }
                    Some((m, n)) => tokens.push(Token::Repeat(number(m)?, number(n)?)),
                }
                i = close + 1;
            }
            '.' => {
                tokens.push(Token::Any);
                i += 1;
            }
            '|' | '(' | ')' | '*' | '+' | '?' => {
                tokens.push(Token::Op(c));
                i += 1;
            }
            c if c.is_ascii_alphanumeric() || c == '-' || c == '_' => {
                let start = i;
                while i < chars.len()
                    && (chars[i].is_ascii_alphanumeric() || chars[i] == '-' || chars[i] == '_')
                {
                    i += 1;
                }
                tokens.push(Token::Name(chars[start..i].iter().collect()));
            }
            other => return Err(rejected(format!("unexpected `{other}` in the grammar"))),
        }
    }
    Ok(tokens)
}

/// The tokens of the atom just before a repetition: one terminal or name, or a bracketed group.
fn previous_atom(tokens: &[Token]) -> Option<Vec<Token>> {
    let last = tokens.last()?;
    if *last != Token::Op(')') {
        return Some(vec![last.clone()]);
    }
    let mut depth = 0;
    for start in (0..tokens.len()).rev() {
        match tokens[start] {
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
            let failure = gbnf_to_lark(gbnf).expect_err(gbnf);
            assert_eq!(failure.code, FailureCode::ConstraintGrammarRejected);
            assert!(
                failure.message.contains(expected),
                "{gbnf}: {}",
                failure.message
            );
        }
    }
}
