//! Human-written durations such as `500ms`, `30s`, `1m30s` or `2h`.
//!
//! Plans and policies write timeouts and backoffs as strings; this type keeps the text the user
//! wrote (for messages) and the parsed [`Duration`] (for the executor and policy comparisons). Its
//! JSON Schema is a string with a pattern, so editors flag a bad duration as it is typed. No
//! duration longer than [`LONGEST`] is accepted, so adding one to a clock cannot overflow.
#![deny(clippy::arithmetic_side_effects)]

use std::borrow::Cow;
use std::fmt;
use std::time::Duration;

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The pattern every duration must match; the schema stage reports a mismatch as `plan::bad_duration`.
pub const DURATION_PATTERN: &str = r"^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$";

/// The longest duration accepted anywhere (a plan field, a command-line flag): a hundred years.
/// Anything longer is a typing error, and adding it to a clock could overflow.
pub const LONGEST: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// A duration written as one or more `<number><unit>` parts, unit `ms`, `s`, `m` or `h`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct DurationSpec(Duration);

impl DurationSpec {
    /// The parsed duration.
    pub fn get(self) -> Duration {
        self.0
    }

    /// Parses `1m30s`-style text; the error says what is wrong in words.
    pub fn parse(text: &str) -> Result<Self, DurationError> {
        let too_long = || DurationError::TooLong(text.to_string());
        let mut total = Duration::ZERO;
        let mut rest = text.trim();
        if rest.is_empty() {
            return Err(DurationError::Empty);
        }
        while !rest.is_empty() {
            let number_len = rest
                .find(|c: char| !(c.is_ascii_digit() || c == '.'))
                .ok_or_else(|| DurationError::NoUnit(text.to_string()))?;
            let (number, after) = rest.split_at(number_len);
            let unit_len = after
                .find(|c: char| c.is_ascii_digit())
                .unwrap_or(after.len());
            let (unit, next) = after.split_at(unit_len);
            let value: f64 = number.parse().map_err(|_| DurationError::NotANumber {
                number: number.to_string(),
                text: text.to_string(),
            })?;
            let seconds_per_unit = match unit {
                "ms" => 0.001,
                "s" => 1.0,
                "m" => 60.0,
                "h" => 3600.0,
                other => {
                    return Err(DurationError::UnknownUnit {
                        unit: other.to_string(),
                        text: text.to_string(),
                    });
                }
            };
            let part =
                Duration::try_from_secs_f64(value * seconds_per_unit).map_err(|_| too_long())?;
            total = total.checked_add(part).ok_or_else(too_long)?;
            rest = next;
        }
        if total > LONGEST {
            return Err(too_long());
        }
        Ok(DurationSpec(total))
    }

    /// A duration given on the command line: a number of seconds (`30`, `0.5`) or a duration as
    /// plans write it (`1m30s`); never negative, infinite or longer than [`LONGEST`]. The error
    /// is what clap prints (and the command exits 2).
    pub fn parse_flag(text: &str) -> Result<Duration, String> {
        let Ok(seconds) = text.trim().parse::<f64>() else {
            return DurationSpec::parse(text)
                .map(DurationSpec::get)
                .map_err(|e| e.to_string());
        };
        if !seconds.is_finite() || seconds < 0.0 {
            return Err(format!(
                "`{text}` is not a duration: give a number of seconds from 0 up, or e.g. `1m30s`"
            ));
        }
        Duration::try_from_secs_f64(seconds)
            .ok()
            .filter(|duration| *duration <= LONGEST)
            .ok_or_else(|| DurationError::TooLong(text.to_string()).to_string())
    }
}

/// Why text is not a duration.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    /// Nothing was written.
    #[error("a duration cannot be empty")]
    Empty,
    /// A number ends the text without a unit after it.
    #[error("`{0}` has a number without a unit (ms, s, m or h)")]
    NoUnit(String),
    /// What stands before a unit does not parse as a number.
    #[error("`{number}` in `{text}` is not a number")]
    NotANumber { number: String, text: String },
    /// A unit other than ms, s, m or h.
    #[error("`{unit}` in `{text}` is not a unit; use ms, s, m or h")]
    UnknownUnit { unit: String, text: String },
    /// Longer than [`LONGEST`].
    #[error("`{0}` is too long a duration (at most 876000h, a hundred years)")]
    TooLong(String),
}

impl fmt::Display for DurationSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let millis = self.0.as_millis();
        if millis.is_multiple_of(3_600_000) && millis > 0 {
            write!(f, "{}h", millis / 3_600_000)
        } else if millis.is_multiple_of(60_000) && millis > 0 {
            write!(f, "{}m", millis / 60_000)
        } else if millis.is_multiple_of(1000) {
            write!(f, "{}s", millis / 1000)
        } else {
            write!(f, "{millis}ms")
        }
    }
}

impl<'de> Deserialize<'de> for DurationSpec {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        DurationSpec::parse(&text).map_err(serde::de::Error::custom)
    }
}

impl Serialize for DurationSpec {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl JsonSchema for DurationSpec {
    fn schema_name() -> Cow<'static, str> {
        "Duration".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "type": "string",
            "pattern": DURATION_PATTERN,
            "description": "A duration: one or more <number><unit> parts, unit ms, s, m or h (e.g. 500ms, 30s, 1m30s).",
            "examples": ["500ms", "30s", "1m30s"]
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_units_and_compounds() {
        let cases = [
            ("500ms", 500),
            ("30s", 30_000),
            ("1m30s", 90_000),
            ("2h", 7_200_000),
            ("1.5s", 1_500),
            ("0s", 0),
        ];
        for (text, millis) in cases {
            assert_eq!(
                DurationSpec::parse(text).map(|d| d.get().as_millis()),
                Ok(millis),
                "{text}"
            );
        }
    }

    #[test]
    fn rejects_what_the_pattern_rejects() {
        for text in ["", "30", "30 sec", "s", "1d", "-1s", "1e400h"] {
            assert!(
                DurationSpec::parse(text).is_err(),
                "{text} should be rejected"
            );
        }
    }

    #[test]
    fn each_rejection_says_what_is_wrong() {
        let cases = [
            ("", DurationError::Empty),
            ("30", DurationError::NoUnit("30".into())),
            (
                "1.2.3s",
                DurationError::NotANumber {
                    number: "1.2.3".into(),
                    text: "1.2.3s".into(),
                },
            ),
            (
                "1d",
                DurationError::UnknownUnit {
                    unit: "d".into(),
                    text: "1d".into(),
                },
            ),
            (
                "100000000000000000000h",
                DurationError::TooLong("100000000000000000000h".into()),
            ),
        ];
        for (text, expected) in cases {
            assert_eq!(DurationSpec::parse(text), Err(expected), "{text}");
        }
        assert_eq!(
            DurationError::UnknownUnit {
                unit: "d".into(),
                text: "1d".into()
            }
            .to_string(),
            "`d` in `1d` is not a unit; use ms, s, m or h"
        );
    }

    #[test]
    fn nothing_longer_than_the_longest_is_accepted() {
        assert_eq!(
            DurationSpec::parse("876000h").map(DurationSpec::get),
            Ok(LONGEST)
        );
        assert_eq!(
            DurationSpec::parse("876001h"),
            Err(DurationError::TooLong("876001h".into()))
        );
    }

    #[test]
    fn a_flag_is_seconds_or_a_duration_and_never_out_of_range() {
        for (text, millis) in [("30", 30_000), ("0.2", 200), ("0", 0), ("1m30s", 90_000)] {
            assert_eq!(
                DurationSpec::parse_flag(text).map(|d| d.as_millis()),
                Ok(millis),
                "{text}"
            );
        }
        for text in [
            "inf",
            "-inf",
            "NaN",
            "1e300",
            "-1",
            "3200000000",
            "876001h",
            "soon",
        ] {
            assert!(
                DurationSpec::parse_flag(text).is_err(),
                "{text} should be refused"
            );
        }
    }

    #[test]
    fn displays_in_the_largest_whole_unit() {
        for (text, shown) in [
            ("90s", "90s"),
            ("120s", "2m"),
            ("3600s", "1h"),
            ("1500ms", "1500ms"),
        ] {
            assert_eq!(
                DurationSpec::parse(text).map(|d| d.to_string()).as_deref(),
                Ok(shown)
            );
        }
    }
}
