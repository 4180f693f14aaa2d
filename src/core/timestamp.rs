//! Wall-clock timestamps for events and records, written as RFC 3339 in UTC with milliseconds
//! (`2026-11-27T00:15:03.123Z`): durations say how long, these say when, so a run's lines can be
//! laid beside a server's log or another machine's. Formatted here from `SystemTime` (the
//! civil-from-days algorithm) rather than by a date crate, as only this one format is needed.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Serialize;

/// A moment, to the millisecond, as milliseconds since the Unix epoch (a clock set before 1970
/// reads as the epoch).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Timestamp {
    millis: u64,
}

impl Timestamp {
    /// Now, by the system clock.
    pub fn now() -> Self {
        Self::at(SystemTime::now())
    }

    /// The moment `time`.
    pub fn at(time: SystemTime) -> Self {
        let since_epoch = time.duration_since(UNIX_EPOCH).unwrap_or(Duration::ZERO);
        Timestamp {
            millis: u64::try_from(since_epoch.as_millis()).unwrap_or(u64::MAX),
        }
    }

    /// The moment `before` this one (the start of something that has run for `before`).
    pub fn before(self, before: Duration) -> Self {
        let back = u64::try_from(before.as_millis()).unwrap_or(u64::MAX);
        Timestamp {
            millis: self.millis.saturating_sub(back),
        }
    }
}

/// Year, month and day of a day count since 1970-01-01, by Howard Hinnant's `civil_from_days`
/// (proleptic Gregorian calendar; eras of 400 years starting on March 1st).
pub fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let shifted = days + 719_468; // days since 0000-03-01
    let era = shifted / 146_097;
    let day_of_era = shifted % 146_097;
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_from_march = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_from_march + 2) / 5 + 1;
    let month = if month_from_march < 10 {
        month_from_march + 3
    } else {
        month_from_march - 9
    };
    let year = era * 400 + year_of_era + u64::from(month <= 2);
    (year, month, day)
}

impl std::fmt::Display for Timestamp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        const MILLIS_PER_DAY: u64 = 86_400_000;
        let days = self.millis / MILLIS_PER_DAY;
        let of_day = self.millis % MILLIS_PER_DAY;
        let (year, month, day) = civil_from_days(days);
        let (seconds, millis) = (of_day / 1000, of_day % 1000);
        write!(
            f,
            "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{millis:03}Z",
            seconds / 3600,
            seconds / 60 % 60,
            seconds % 60
        )
    }
}

impl Serialize for Timestamp {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at_millis(millis: u64) -> String {
        Timestamp::at(UNIX_EPOCH + Duration::from_millis(millis)).to_string()
    }

    #[test]
    fn the_epoch_and_known_moments_read_as_rfc_3339_utc_with_milliseconds() {
        assert_eq!(at_millis(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(at_millis(951_782_400_000), "2000-02-29T00:00:00.000Z");
        assert_eq!(at_millis(1_709_251_199_999), "2024-02-29T23:59:59.999Z");
        assert_eq!(at_millis(1_798_416_903_123), "2026-12-28T00:15:03.123Z");
        assert_eq!(at_millis(4_102_444_800_000), "2100-01-01T00:00:00.000Z");
    }

    #[test]
    fn every_day_follows_the_last_across_four_centuries() {
        let mut last = (1969, 12, 31);
        for days in 0..146_097 {
            let (year, month, day) = civil_from_days(days);
            let next_day = (year, month, day) == (last.0, last.1, last.2 + 1);
            let next_month = (year, month, day) == (last.0, last.1 + 1, 1);
            let next_year = (year, month, day) == (last.0 + 1, 1, 1) && last.1 == 12;
            assert!(
                next_day || next_month || next_year,
                "{last:?} then {:?}",
                (year, month, day)
            );
            last = (year, month, day);
        }
        assert_eq!(
            last,
            (2369, 12, 31),
            "400 years after 1970 end on the day before 2370"
        );
    }

    #[test]
    fn a_clock_before_the_epoch_reads_as_the_epoch_and_before_saturates() {
        let early = Timestamp::at(UNIX_EPOCH - Duration::from_secs(5));
        assert_eq!(early.to_string(), "1970-01-01T00:00:00.000Z");
        let later = Timestamp::at(UNIX_EPOCH + Duration::from_millis(2_500));
        assert_eq!(
            later.before(Duration::from_millis(500)).to_string(),
            "1970-01-01T00:00:02.000Z"
        );
        assert_eq!(later.before(Duration::from_secs(10)), early);
    }

    #[test]
    fn it_serializes_as_its_text() {
        let json = serde_json::to_string(&Timestamp::at(UNIX_EPOCH)).expect("serializes");
        assert_eq!(json, "\"1970-01-01T00:00:00.000Z\"");
    }
}
