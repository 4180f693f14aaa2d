//! The arithmetic behind the `calculator` builtin: a recursive-descent parser that evaluates as
//! it parses.
//!
//! Grammar, loosest binding first (`^` is right-associative and binds tighter than unary minus,
//! so `-2^2` is -4 and `2^3^2` is 512):
//!
//! ```text
//! expression = term (("+" | "-") term)*
//! term       = unary (("*" | "/" | "%") unary)*
//! unary      = ("-" | "+") unary | power
//! power      = primary ("^" unary)?
//! primary    = number | constant | function "(" expression ("," expression)* ")" | "(" expression ")"
//! ```
//!
//! Numbers are decimals (`2`, `2.5`, `.5`); constants `pi` and `e`; functions `sqrt`, `abs`,
//! `round`, `floor`, `ceil` (one argument) and `min`, `max` (one or more). Nesting is limited to
//! [`MAX_DEPTH`] so that no input can exhaust the stack, and every intermediate result must be a
//! finite real number.

use std::fmt;

use crate::core::text::excerpt;

/// Deepest nesting of parentheses, signs and exponents accepted.
const MAX_DEPTH: usize = 64;

/// Names an expression may use, for the "unknown name" message.
const KNOWN_NAMES: &str = "pi, e, sqrt, abs, round, floor, ceil, min, max";

/// Why an expression cannot be evaluated, and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct CalcError {
    /// 1-based character column the problem starts at.
    pub column: usize,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for CalcError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "column {}: {}", self.column, self.message)
    }
}

/// The largest magnitude below which every integer is a double exactly (2^53).
pub(super) const EXACT_INTEGER_LIMIT: f64 = 9_007_199_254_740_992.0;

/// A result, and whether it may be rounded: true when a number in the expression, an
/// intermediate result or the result itself reaches [`EXACT_INTEGER_LIMIT`], where doubles no
/// longer hold every integer (`2^53 + 1` is `2^53`, so 2^53 itself may be a rounded result).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Evaluated {
    pub value: f64,
    pub inexact: bool,
}

/// Evaluates an arithmetic expression.
pub(super) fn evaluate(text: &str) -> Result<Evaluated, CalcError> {
    let mut parser = Parser {
        text,
        at: 0,
        inexact: false,
    };
    let value = parser.expression(0)?;
    match parser.peek() {
        None => Ok(Evaluated {
            value,
            inexact: parser.inexact,
        }),
        Some(c) => Err(parser.error(parser.at, format!("unexpected `{c}`"))),
    }
}

#[derive(Debug, Clone, Copy)]
enum Op {
    Add,
    Subtract,
    Multiply,
    Divide,
    Remainder,
    Power,
}

struct Parser<'a> {
    text: &'a str,
    /// Byte offset of the next character; always on a character boundary.
    at: usize,
    /// Whether a value beyond exact integers was seen.
    inexact: bool,
}

impl Parser<'_> {
    fn expression(&mut self, depth: usize) -> Result<f64, CalcError> {
        self.check_depth(depth)?;
        let mut value = self.term(depth)?;
        loop {
            let op = match self.peek() {
                Some('+') => Op::Add,
                Some('-') => Op::Subtract,
                _ => return Ok(value),
            };
            let at = self.bump();
            let right = self.term(depth)?;
            value = self.apply(op, at, value, right)?;
        }
    }

    fn term(&mut self, depth: usize) -> Result<f64, CalcError> {
        let mut value = self.unary(depth)?;
        loop {
            let op = match self.peek() {
                Some('*') => Op::Multiply,
                Some('/') => Op::Divide,
                Some('%') => Op::Remainder,
                _ => return Ok(value),
            };
            let at = self.bump();
            let right = self.unary(depth)?;
            value = self.apply(op, at, value, right)?;
        }
    }

    fn unary(&mut self, depth: usize) -> Result<f64, CalcError> {
        self.check_depth(depth)?;
        match self.peek() {
            Some('-') => {
                self.bump();
                Ok(-self.unary(depth + 1)?)
            }
            Some('+') => {
                self.bump();
                self.unary(depth + 1)
            }
            _ => self.power(depth),
        }
    }

    fn power(&mut self, depth: usize) -> Result<f64, CalcError> {
        let base = self.primary(depth)?;
        if self.peek() != Some('^') {
            return Ok(base);
        }
        let at = self.bump();
        let exponent = self.unary(depth + 1)?;
        self.apply(Op::Power, at, base, exponent)
    }

    fn primary(&mut self, depth: usize) -> Result<f64, CalcError> {
        match self.peek() {
            Some(c) if c.is_ascii_digit() || c == '.' => self.number(),
            Some(c) if c.is_ascii_alphabetic() => self.name(depth),
            Some('(') => {
                self.bump();
                let value = self.expression(depth + 1)?;
                self.expect(')')?;
                Ok(value)
            }
            Some(c) => Err(self.error(self.at, format!("unexpected `{c}`"))),
            None => Err(self.error(self.at, "unexpected end of the expression")),
        }
    }

    fn number(&mut self) -> Result<f64, CalcError> {
        let start = self.at;
        let rest = &self.text[start..];
        let digits = |s: &str| s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
        let mut len = digits(rest);
        if rest[len..].starts_with('.') {
            len += 1 + digits(&rest[len + 1..]);
        }
        let literal = &rest[..len];
        self.at += len;
        match literal.parse::<f64>() {
            Ok(value) if value.is_finite() => {
                // A whole number that a double cannot hold exactly (`9007199254740993`).
                let whole_exact = literal
                    .parse::<u128>()
                    .map_or(literal.contains('.'), |n| n as f64 as u128 == n);
                self.inexact |= !whole_exact || value.abs() >= EXACT_INTEGER_LIMIT;
                Ok(value)
            }
            Ok(_) => Err(self.error(
                start,
                format!("the number `{}` is too large", excerpt(literal, 40)),
            )),
            Err(_) => Err(self.error(start, format!("`{}` is not a number", excerpt(literal, 40)))),
        }
    }

    fn name(&mut self, depth: usize) -> Result<f64, CalcError> {
        let start = self.at;
        let rest = &self.text[start..];
        let len = rest
            .find(|c: char| !c.is_ascii_alphanumeric() && c != '_')
            .unwrap_or(rest.len());
        let name = &rest[..len];
        self.at += len;
        let constant = match name {
            "pi" => Some(std::f64::consts::PI),
            "e" => Some(std::f64::consts::E),
            _ => None,
        };
        let is_call = self.peek() == Some('(');
        match (constant, is_call) {
            (Some(value), false) => return Ok(value),
            (Some(_), true) => {
                return Err(self.error(start, format!("`{name}` is a constant, not a function")));
            }
            (None, _) => {}
        }
        let arity_one: Option<fn(f64) -> f64> = match name {
            "sqrt" => Some(f64::sqrt),
            "abs" => Some(f64::abs),
            "round" => Some(f64::round),
            "floor" => Some(f64::floor),
            "ceil" => Some(f64::ceil),
            _ => None,
        };
        let fold: Option<fn(f64, f64) -> f64> = match name {
            "min" => Some(f64::min),
            "max" => Some(f64::max),
            _ => None,
        };
        if arity_one.is_none() && fold.is_none() {
            return Err(self.error(
                start,
                format!(
                    "unknown name `{}`; known names: {KNOWN_NAMES}",
                    excerpt(name, 40)
                ),
            ));
        }
        if !is_call {
            return Err(self.error(
                self.at,
                format!("expected `(` after `{}`", excerpt(name, 40)),
            ));
        }
        let args = self.arguments(depth)?;
        let value = match (arity_one, fold, args.as_slice()) {
            (Some(function), _, &[x]) => function(x),
            (Some(_), _, _) => {
                return Err(self.error(start, format!("`{name}` takes exactly 1 argument")));
            }
            (None, Some(function), &[first, ref rest @ ..]) => {
                rest.iter().copied().fold(first, function)
            }
            (None, _, _) => {
                return Err(self.error(start, format!("`{name}` takes at least 1 argument")));
            }
        };
        self.finite(start, value)
    }

    /// `( expression, … )`, the opening parenthesis next.
    fn arguments(&mut self, depth: usize) -> Result<Vec<f64>, CalcError> {
        self.expect('(')?;
        let mut args = Vec::new();
        if self.peek() == Some(')') {
            self.bump();
            return Ok(args);
        }
        loop {
            args.push(self.expression(depth + 1)?);
            match self.peek() {
                Some(',') => {
                    self.bump();
                }
                _ => {
                    self.expect(')')?;
                    return Ok(args);
                }
            }
        }
    }

    fn apply(&mut self, op: Op, at: usize, left: f64, right: f64) -> Result<f64, CalcError> {
        let value = match op {
            Op::Divide | Op::Remainder if right == 0.0 => {
                return Err(self.error(at, "division by zero"));
            }
            Op::Add => left + right,
            Op::Subtract => left - right,
            Op::Multiply => left * right,
            Op::Divide => left / right,
            Op::Remainder => left % right,
            Op::Power => left.powf(right),
        };
        self.finite(at, value)
    }

    fn finite(&mut self, at: usize, value: f64) -> Result<f64, CalcError> {
        self.inexact |= value.abs() >= EXACT_INTEGER_LIMIT;
        if value.is_nan() {
            Err(self.error(at, "the result is not a real number"))
        } else if value.is_infinite() {
            Err(self.error(at, "the result is too large"))
        } else {
            Ok(value)
        }
    }

    fn check_depth(&self, depth: usize) -> Result<(), CalcError> {
        if depth > MAX_DEPTH {
            return Err(self.error(
                self.at,
                format!("the expression is nested more than {MAX_DEPTH} levels deep"),
            ));
        }
        Ok(())
    }

    fn expect(&mut self, wanted: char) -> Result<(), CalcError> {
        match self.peek() {
            Some(c) if c == wanted => {
                self.bump();
                Ok(())
            }
            Some(c) => Err(self.error(self.at, format!("expected `{wanted}`, found `{c}`"))),
            None => Err(self.error(self.at, format!("expected `{wanted}`"))),
        }
    }

    /// Skips whitespace and returns the next character without consuming it.
    fn peek(&mut self) -> Option<char> {
        let rest = &self.text[self.at..];
        let trimmed = rest.trim_start();
        self.at += rest.len() - trimmed.len();
        trimmed.chars().next()
    }

    /// Consumes the next character (after `peek` has skipped whitespace) and returns its offset.
    fn bump(&mut self) -> usize {
        let at = self.at;
        self.at += self.text[at..].chars().next().map_or(0, char::len_utf8);
        at
    }

    fn error(&self, at: usize, message: impl Into<String>) -> CalcError {
        CalcError {
            column: self
                .text
                .get(..at)
                .map_or(0, |before| before.chars().count())
                + 1,
            message: message.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn evaluates_arithmetic_with_the_usual_precedence() {
        let deepest = format!("{}1{}", "(".repeat(64), ")".repeat(64));
        let cases = [
            (deepest.as_str(), 1.0),
            ("2 * (3 + 4) ^ 2", 98.0),
            ("1 + 2 * 3", 7.0),
            ("(1 + 2) * 3", 9.0),
            ("8 - 3 - 2", 3.0),
            ("64 / 4 / 2", 8.0),
            ("2 ^ 3 ^ 2", 512.0),
            ("-2 ^ 2", -4.0),
            ("2 ^ -1", 0.5),
            ("--3", 3.0),
            ("+3", 3.0),
            ("2 * -3", -6.0),
            ("7 % 3", 1.0),
            ("-7 % 3", -1.0),
            ("10 / 4", 2.5),
            ("1.5 + .5 + 2.", 4.0),
            ("  1+1  ", 2.0),
            ("sqrt(16)", 4.0),
            ("abs(-3)", 3.0),
            ("round(2.5)", 3.0),
            ("floor(-1.5)", -2.0),
            ("ceil(1.2)", 2.0),
            ("min(3, 1, 2)", 1.0),
            ("max(3, 1, 2)", 3.0),
            ("max(7)", 7.0),
            ("sqrt(min(16, 25) + 9)", 5.0),
            ("2 * pi", std::f64::consts::TAU),
            ("e ^ 1", std::f64::consts::E),
            ("0.1 + 0.2", 0.1 + 0.2),
        ];
        for (expression, expected) in cases {
            let evaluated = evaluate(expression).map(|e| e.value);
            assert_eq!(evaluated, Ok(expected), "{expression}");
        }
    }

    #[test]
    fn rejects_bad_input_with_its_column() {
        let deep_parens = format!("{}1{}", "(".repeat(100), ")".repeat(100));
        let deep_minus = format!("{}1", "-".repeat(10_000));
        let deep_power = format!("{}2", "2^".repeat(10_000));
        let cases = [
            ("1 / 0", 3, "division by zero"),
            ("1 % (2 - 2)", 3, "division by zero"),
            ("", 1, "unexpected end of the expression"),
            ("   ", 4, "unexpected end of the expression"),
            ("1 +", 4, "unexpected end of the expression"),
            ("(1 + 2", 7, "expected `)`"),
            ("(1 + 2]", 7, "expected `)`, found `]`"),
            ("1 2", 3, "unexpected `2`"),
            ("1 $ 2", 3, "unexpected `$`"),
            ("1..2", 3, "unexpected `.`"),
            (".", 1, "`.` is not a number"),
            ("é + 1", 1, "unexpected `é`"),
            ("ü + é", 1, "unexpected `ü`"),
            ("2 * ü", 5, "unexpected `ü`"),
            ("foo(1)", 1, "unknown name `foo`; known names: pi, e, sqrt"),
            ("2 * x", 5, "unknown name `x`"),
            ("pi(2)", 1, "`pi` is a constant, not a function"),
            ("sqrt 4", 6, "expected `(` after `sqrt`"),
            ("sqrt(1, 2)", 1, "`sqrt` takes exactly 1 argument"),
            ("abs()", 1, "`abs` takes exactly 1 argument"),
            ("min()", 1, "`min` takes at least 1 argument"),
            ("max(1, 2", 9, "expected `)`"),
            ("sqrt(-1)", 1, "the result is not a real number"),
            ("(-8) ^ 0.5", 6, "the result is not a real number"),
            ("10 ^ 400", 4, "the result is too large"),
            ("0 ^ -1", 3, "the result is too large"),
            (&"9".repeat(400), 1, "is too large"),
            (&deep_parens, 66, "nested more than 64 levels deep"),
            (&deep_minus, 66, "nested more than 64 levels deep"),
            (&deep_power, 131, "nested more than 64 levels deep"),
        ];
        for (expression, column, message) in cases {
            let error = evaluate(expression).unwrap_err();
            assert_eq!(error.column, column, "{expression}: {error}");
            assert!(error.message.contains(message), "{expression}: {error}");
        }
    }
}
