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
//!
//! Integers are exact: `+ - * %`, unary minus and whole powers of integers are computed with
//! arbitrary precision (up to [`MAX_INTEGER_BITS`], about the range of a double), and `/` yields
//! an integer when it divides evenly. Everything else is a double, which carries whether it is
//! exactly the value it stands for (`10 / 4` is; `1 / 3`, `0.1` and `pi` are not).

use std::cmp::Ordering;
use std::fmt;

use num_bigint::BigInt;
use num_traits::{FromPrimitive, Signed, ToPrimitive, Zero};

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

/// Most bits an integer may have: about the range of a double, past which the result is too large.
pub(super) const MAX_INTEGER_BITS: u64 = 1024;

/// Most significant digits the decimal expansion of any double has; a decimal literal with more
/// cannot be one exactly.
const MAX_EXACT_DECIMAL_DIGITS: usize = 800;

/// A value: an exact integer, or a double and whether it is exactly the value it stands for.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Number {
    Integer(BigInt),
    Real { value: f64, exact: bool },
}

impl Number {
    /// The value as a double, and whether the double is exactly it.
    fn real(&self) -> (f64, bool) {
        match self {
            Number::Integer(n) => {
                let value = n.to_f64().unwrap_or(f64::INFINITY);
                (value, BigInt::from_f64(value).as_ref() == Some(n))
            }
            Number::Real { value, exact } => (*value, *exact),
        }
    }

    fn negate(self) -> Number {
        match self {
            Number::Integer(n) => Number::Integer(-n),
            Number::Real { value, exact } => Number::Real {
                value: -value,
                exact,
            },
        }
    }
}

/// Evaluates an arithmetic expression.
pub(super) fn evaluate(text: &str) -> Result<Number, CalcError> {
    let mut parser = Parser { text, at: 0 };
    let value = parser.expression(0)?;
    match parser.peek() {
        None => Ok(value),
        Some(c) => Err(parser.error(parser.at, format!("unexpected `{c}`"))),
    }
}

/// Whether `value` is exactly `numerator / denominator` (`denominator` positive).
fn is_ratio(value: f64, numerator: &BigInt, denominator: &BigInt) -> bool {
    if !value.is_finite() {
        return false;
    }
    // value = ±mantissa · 2^exponent
    let bits = value.to_bits();
    let biased = ((bits >> 52) & 0x7ff) as i64;
    let fraction = bits & ((1 << 52) - 1);
    let (mantissa, exponent) = match biased {
        0 => (fraction, -1074),
        _ => (fraction | (1 << 52), biased - 1075),
    };
    let mut scaled = BigInt::from(mantissa) * denominator;
    if value.is_sign_negative() {
        scaled = -scaled;
    }
    match exponent {
        e if e >= 0 => scaled << e.unsigned_abs() == *numerator,
        e => scaled == numerator << e.unsigned_abs(),
    }
}

/// `a / b` for integers: an integer when `b` divides `a`, else the nearest double, exact or not.
fn divide(a: &BigInt, b: &BigInt) -> Number {
    if (a % b).is_zero() {
        return Number::Integer(a / b);
    }
    let (numerator, denominator) = match b.is_negative() {
        true => (-a, -b),
        false => (a.clone(), b.clone()),
    };
    let value = match (numerator.to_f64(), denominator.to_f64()) {
        (Some(n), Some(d)) => n / d,
        _ => f64::NAN,
    };
    Number::Real {
        value,
        exact: is_ratio(value, &numerator, &denominator),
    }
}

/// `base ^ exponent` for a non-negative exponent, or `None` past [`MAX_INTEGER_BITS`] — decided
/// before it is computed, so no exponent can make it take long.
fn integer_power(base: &BigInt, exponent: &BigInt) -> Option<BigInt> {
    let one = BigInt::from(1);
    if base.is_zero() || base.abs() == one {
        let odd = exponent.bit(0);
        return Some(match (base.is_zero(), exponent.is_zero()) {
            (_, true) => one,
            (true, false) => BigInt::ZERO,
            (false, false) if base.is_negative() && odd => -one,
            (false, false) => one,
        });
    }
    // |result| ≥ 2^((bits − 1) · exponent), so past the limit when that product reaches it.
    let exponent = exponent.to_u64().filter(|&n| {
        (base.bits() - 1)
            .checked_mul(n)
            .is_some_and(|floor| floor < MAX_INTEGER_BITS)
    })?;
    let result = base.pow(u32::try_from(exponent).ok()?);
    (result.bits() <= MAX_INTEGER_BITS).then_some(result)
}

/// `sqrt`: an integer when the argument is a perfect square.
fn square_root(n: Number) -> Number {
    match n {
        Number::Integer(n) => {
            if !n.is_negative() {
                let root = n.sqrt();
                if &root * &root == n {
                    return Number::Integer(root);
                }
            }
            Number::Real {
                value: Number::Integer(n).real().0.sqrt(),
                exact: false,
            }
        }
        Number::Real { value, exact } => {
            let root = value.sqrt();
            Number::Real {
                value: root,
                exact: exact && root.mul_add(root, -value) == 0.0,
            }
        }
    }
}

/// `round`, `floor`, `ceil`: an integer is already whole.
fn whole(n: Number, function: fn(f64) -> f64) -> Number {
    match n {
        Number::Integer(n) => Number::Integer(n),
        Number::Real { value, exact } => Number::Real {
            value: function(value),
            exact,
        },
    }
}

/// Orders two numbers: integers exactly, anything with a double as doubles.
fn compare(a: &Number, b: &Number) -> Ordering {
    match (a, b) {
        (Number::Integer(a), Number::Integer(b)) => a.cmp(b),
        _ => a.real().0.total_cmp(&b.real().0),
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
}

impl Parser<'_> {
    fn expression(&mut self, depth: usize) -> Result<Number, CalcError> {
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

    fn term(&mut self, depth: usize) -> Result<Number, CalcError> {
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

    fn unary(&mut self, depth: usize) -> Result<Number, CalcError> {
        self.check_depth(depth)?;
        match self.peek() {
            Some('-') => {
                self.bump();
                Ok(self.unary(depth + 1)?.negate())
            }
            Some('+') => {
                self.bump();
                self.unary(depth + 1)
            }
            _ => self.power(depth),
        }
    }

    fn power(&mut self, depth: usize) -> Result<Number, CalcError> {
        let base = self.primary(depth)?;
        if self.peek() != Some('^') {
            return Ok(base);
        }
        let at = self.bump();
        let exponent = self.unary(depth + 1)?;
        self.apply(Op::Power, at, base, exponent)
    }

    fn primary(&mut self, depth: usize) -> Result<Number, CalcError> {
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

    fn number(&mut self) -> Result<Number, CalcError> {
        let start = self.at;
        let rest = &self.text[start..];
        let digits = |s: &str| s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
        let whole_len = digits(rest);
        let mut len = whole_len;
        if rest[len..].starts_with('.') {
            len += 1 + digits(&rest[len + 1..]);
        }
        let literal = &rest[..len];
        self.at += len;
        let too_large = || {
            self.error(
                start,
                format!("the number `{}` is too large", excerpt(literal, 40)),
            )
        };
        if len == whole_len {
            // An integer: its digit count bounds its size before it is parsed.
            let significant = literal.trim_start_matches('0');
            if significant.len() as u64 > MAX_INTEGER_BITS * 3 / 10 + 2 {
                return Err(too_large());
            }
            let n: BigInt = match significant {
                "" => BigInt::ZERO,
                digits => digits.parse().map_err(|_| too_large())?,
            };
            return match n.bits() <= MAX_INTEGER_BITS {
                true => Ok(Number::Integer(n)),
                false => Err(too_large()),
            };
        }
        let value = match literal.parse::<f64>() {
            Ok(value) if value.is_finite() => value,
            Ok(_) => return Err(too_large()),
            Err(_) => {
                return Err(
                    self.error(start, format!("`{}` is not a number", excerpt(literal, 40)))
                );
            }
        };
        // The decimal is digits / 10^fraction_digits; a double is exactly it only when it has
        // few enough significant digits.
        let (whole, fraction) = literal.split_at(whole_len);
        let fraction = fraction[1..].trim_end_matches('0');
        let digits = format!("{whole}{fraction}");
        let digits = digits.trim_start_matches('0');
        let exact = digits.len() <= MAX_EXACT_DECIMAL_DIGITS && {
            let numerator: BigInt = digits.parse().unwrap_or_default();
            is_ratio(
                value,
                &numerator,
                &BigInt::from(10).pow(fraction.len() as u32),
            )
        };
        Ok(Number::Real { value, exact })
    }

    fn name(&mut self, depth: usize) -> Result<Number, CalcError> {
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
            (Some(value), false) => {
                return Ok(Number::Real {
                    value,
                    exact: false,
                });
            }
            (Some(_), true) => {
                return Err(self.error(start, format!("`{name}` is a constant, not a function")));
            }
            (None, _) => {}
        }
        let arity_one: Option<fn(Number) -> Number> = match name {
            "sqrt" => Some(square_root),
            "abs" => Some(|n| match n {
                Number::Integer(n) => Number::Integer(n.abs()),
                Number::Real { value, exact } => Number::Real {
                    value: value.abs(),
                    exact,
                },
            }),
            "round" => Some(|n| whole(n, f64::round)),
            "floor" => Some(|n| whole(n, f64::floor)),
            "ceil" => Some(|n| whole(n, f64::ceil)),
            _ => None,
        };
        let fold: Option<Ordering> = match name {
            "min" => Some(Ordering::Less),
            "max" => Some(Ordering::Greater),
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
        let mut args = self.arguments(depth)?;
        let value = match (arity_one, fold, args.len()) {
            (Some(function), _, 1) => function(args.remove(0)),
            (Some(_), _, _) => {
                return Err(self.error(start, format!("`{name}` takes exactly 1 argument")));
            }
            (None, Some(wanted), 1..) => args
                .into_iter()
                .reduce(|best, next| match compare(&next, &best) == wanted {
                    true => next,
                    false => best,
                })
                .unwrap_or(Number::Integer(BigInt::ZERO)),
            (None, _, _) => {
                return Err(self.error(start, format!("`{name}` takes at least 1 argument")));
            }
        };
        self.finite(start, value)
    }

    /// `( expression, … )`, the opening parenthesis next.
    fn arguments(&mut self, depth: usize) -> Result<Vec<Number>, CalcError> {
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

    fn apply(&self, op: Op, at: usize, left: Number, right: Number) -> Result<Number, CalcError> {
        let too_large = || self.error(at, "the result is too large");
        if let (Number::Integer(a), Number::Integer(b)) = (&left, &right) {
            let value = match op {
                Op::Divide | Op::Remainder if b.is_zero() => {
                    return Err(self.error(at, "division by zero"));
                }
                Op::Add => Number::Integer(a + b),
                Op::Subtract => Number::Integer(a - b),
                Op::Multiply => Number::Integer(a * b),
                Op::Divide => divide(a, b),
                Op::Remainder => Number::Integer(a % b),
                Op::Power if b.is_negative() && a.is_zero() => return Err(too_large()),
                Op::Power if b.is_negative() => match integer_power(a, &-b) {
                    Some(denominator) => divide(&BigInt::from(1), &denominator),
                    None => Number::Real {
                        value: left.real().0.powf(right.real().0),
                        exact: false,
                    },
                },
                Op::Power => Number::Integer(integer_power(a, b).ok_or_else(too_large)?),
            };
            return self.finite(at, value);
        }
        let ((a, a_exact), (b, b_exact)) = (left.real(), right.real());
        let (value, exact) = match op {
            Op::Divide | Op::Remainder if b == 0.0 => {
                return Err(self.error(at, "division by zero"));
            }
            Op::Add | Op::Subtract => {
                let b = if matches!(op, Op::Add) { b } else { -b };
                let sum = a + b;
                // Knuth's two-sum: the rounding error of `a + b`, itself exact.
                let b_part = sum - a;
                let error = (a - (sum - b_part)) + (b - b_part);
                (sum, error == 0.0)
            }
            Op::Multiply => {
                let product = a * b;
                (product, a.mul_add(b, -product) == 0.0)
            }
            Op::Divide => {
                let quotient = a / b;
                (quotient, quotient.mul_add(b, -a) == 0.0)
            }
            Op::Remainder => (a % b, true),
            Op::Power => (a.powf(b), false),
        };
        self.finite(
            at,
            Number::Real {
                value,
                exact: exact && a_exact && b_exact,
            },
        )
    }

    fn finite(&self, at: usize, value: Number) -> Result<Number, CalcError> {
        match value {
            Number::Integer(n) if n.bits() > MAX_INTEGER_BITS => {
                Err(self.error(at, "the result is too large"))
            }
            Number::Real { value, .. } if value.is_nan() => {
                Err(self.error(at, "the result is not a real number"))
            }
            Number::Real { value, .. } if value.is_infinite() => {
                Err(self.error(at, "the result is too large"))
            }
            value => Ok(value),
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
            let evaluated = evaluate(expression).map(|n| n.real().0);
            assert_eq!(evaluated, Ok(expected), "{expression}");
        }
    }

    /// Integers are exact at any size a double covers; a double says whether it is.
    #[test]
    fn integers_are_exact_and_doubles_say_whether_they_are() {
        let integer = |text: &str| match evaluate(text) {
            Ok(Number::Integer(n)) => n.to_string(),
            other => panic!("{text}: {other:?}"),
        };
        assert_eq!(integer("2^64 + 1"), "18446744073709551617");
        assert_eq!(
            integer("12345678901234567890 * 98765432109876543210"),
            "1219326311370217952237463801111263526900"
        );
        assert_eq!(integer("(2^53 + 1) - 2^53"), "1");
        assert_eq!(integer("9007199254740993"), "9007199254740993");
        assert_eq!(integer("-(3^40) % 7"), "-4");
        assert_eq!(integer("((2^1023 - 1) * 2 + 1) % 10"), "5");
        assert_eq!(integer("2^100 / 2^98"), "4");
        assert_eq!(integer("sqrt(2^100)"), "1125899906842624");
        assert_eq!(integer("(-1)^(10^30 + 1)"), "-1");
        assert_eq!(integer("max(2^70, 3, 2.5)"), "1180591620717411303424");
        let real = |text: &str| match evaluate(text) {
            Ok(Number::Real { value, exact }) => (value, exact),
            other => panic!("{text}: {other:?}"),
        };
        assert_eq!(real("10 / 4"), (2.5, true));
        assert_eq!(real("2 ^ -2"), (0.25, true));
        assert_eq!(real("0.5 + 0.25 * 2"), (1.0, true));
        assert_eq!(real("1 / 3"), (1.0 / 3.0, false));
        assert_eq!(real("0.1"), (0.1, false));
        assert_eq!(real("sqrt(2)"), (std::f64::consts::SQRT_2, false));
        assert_eq!(real("sqrt(6.25)"), (2.5, true));
        assert_eq!(real("pi - pi"), (0.0, false));
        assert_eq!(real("(2^60 + 1) / 2"), (576_460_752_303_423_488.0, false));
        assert_eq!(real("2 ^ 0.5 ^ 2"), (2f64.powf(0.25), false));
        assert_eq!(real("2 ^ -2000"), (0.0, false));
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
            ("10 ^ (10 ^ 300)", 4, "the result is too large"),
            ("2 ^ 1024", 3, "the result is too large"),
            ("2 ^ 1023 * 2", 10, "the result is too large"),
            ("2 ^ 1023 + 2 ^ 1023", 10, "the result is too large"),
            (&"1".repeat(400), 1, "is too large"),
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
