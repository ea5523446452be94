//! Time units: microseconds since the PostgreSQL epoch, and the conversion of
//! a PostgreSQL `interval` into a period length.

use crate::error::LimitError;

/// Microseconds. As a point in time: since 2000-01-01 00:00:00 UTC (the
/// PostgreSQL epoch, what a `timestamptz` stores). As a duration: a length.
pub type Micros = i64;

/// Microseconds in one millisecond.
pub const MICROS_PER_MILLISECOND: f64 = 1000.0;

const MICROS_PER_DAY: i128 = 86_400_000_000;
/// PostgreSQL's `extract(epoch from interval)` counts a year as 365.25 days...
const MICROS_PER_YEAR: i128 = MICROS_PER_DAY * 36525 / 100;
/// ...and each month beyond whole years as 30 days.
const MICROS_PER_MONTH: i128 = MICROS_PER_DAY * 30;

/// The length of an `interval` (`months`, `days`, `micros` as PostgreSQL
/// stores it) in microseconds, computed exactly as PostgreSQL's
/// `extract(epoch from period)` does (a year is 365.25 days, a remaining
/// month 30 days, a day 24 hours).
///
/// Errors: `22023` when the length is not positive or does not fit in an
/// `i64` of microseconds.
pub fn period_micros(months: i32, days: i32, micros: i64) -> Result<Micros, LimitError> {
    let months = i128::from(months);
    let total = (months / 12) * MICROS_PER_YEAR
        + (months % 12) * MICROS_PER_MONTH
        + i128::from(days) * MICROS_PER_DAY
        + i128::from(micros);
    if total <= 0 {
        return Err(LimitError::invalid(
            "period",
            "period must be greater than zero".to_string(),
        ));
    }
    Micros::try_from(total)
        .map_err(|_| LimitError::invalid("period", "period is too long".to_string()))
}

/// A duration (an interval's months, days and microseconds) in
/// microseconds, as [`period_micros`] counts it, for the parameter named
/// `parameter`: 0 or more.
///
/// Errors: `InvalidParameter` naming `parameter` when negative or too long
/// for 64 bits (PostgreSQL 17's `infinity`).
pub fn duration_micros(
    months: i32,
    days: i32,
    micros: i64,
    parameter: &'static str,
) -> Result<Micros, LimitError> {
    let months = i128::from(months);
    let total = (months / 12) * MICROS_PER_YEAR
        + (months % 12) * MICROS_PER_MONTH
        + i128::from(days) * MICROS_PER_DAY
        + i128::from(micros);
    if total < 0 {
        return Err(LimitError::invalid(
            parameter,
            format!("{parameter} must not be negative"),
        ));
    }
    Micros::try_from(total)
        .map_err(|_| LimitError::invalid(parameter, format!("{parameter} is too long")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_may_be_zero_but_not_negative() {
        assert_eq!(duration_micros(0, 1, 0, "forget_after"), Ok(86_400_000_000));
        assert_eq!(duration_micros(0, 0, 0, "forget_after"), Ok(0));
        assert_eq!(
            duration_micros(0, 0, -1, "forget_after")
                .unwrap_err()
                .parameter,
            "forget_after"
        );
        assert!(duration_micros(i32::MAX, i32::MAX, i64::MAX, "block_for").is_err());
    }

    #[test]
    fn matches_postgres_epoch_extraction() {
        assert_eq!(period_micros(0, 0, 60_000_000), Ok(60_000_000));
        assert_eq!(period_micros(0, 1, 0), Ok(86_400_000_000));
        // extract(epoch from interval '1 month') = 2592000
        assert_eq!(period_micros(1, 0, 0), Ok(2_592_000_000_000));
        // extract(epoch from interval '1 year') = 31557600
        assert_eq!(period_micros(12, 0, 0), Ok(31_557_600_000_000));
        // extract(epoch from interval '13 months') = 31557600 + 2592000
        assert_eq!(period_micros(13, 0, 0), Ok(34_149_600_000_000));
    }

    #[test]
    fn rejects_zero_and_negative_lengths() {
        assert!(period_micros(0, 0, 0).is_err());
        assert!(period_micros(0, 0, -1).is_err());
        assert!(period_micros(1, -30, 0).is_err());
        assert_eq!(period_micros(1, -29, 0), Ok(86_400_000_000));
    }

    #[test]
    fn rejects_lengths_beyond_i64() {
        assert!(period_micros(i32::MAX, i32::MAX, i64::MAX).is_err());
    }
}
