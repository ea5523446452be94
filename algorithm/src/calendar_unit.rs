//! Calendar units (minute ... year) and the arithmetic of local times in
//! them, in microseconds since 2000-01-01 00:00 local: `date_trunc`, adding
//! units, counting them. What a time zone makes of a local time is not
//! here: the extension asks PostgreSQL (`src/calendar.rs`).

use crate::civil::{civil_from_days, days_from_civil};
use crate::error::LimitError;
use crate::time::{period_micros, Micros};

pub const MINUTE: Micros = 60_000_000;
pub const HOUR: Micros = 60 * MINUTE;
pub const DAY: Micros = 24 * HOUR;

/// A calendar unit. Its period (what the config's `period` holds for a
/// calendar window) is its nominal length as PostgreSQL counts an interval:
/// a month 30 days, a year 365.25 days.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Unit {
    Minute,
    Hour,
    Day,
    Week,
    Month,
    Quarter,
    Year,
}

const UNITS: [(Unit, &str, i32, i32, i64); 7] = [
    // (unit, name, months, days, micros) of its period.
    (Unit::Minute, "minute", 0, 0, MINUTE),
    (Unit::Hour, "hour", 0, 0, HOUR),
    (Unit::Day, "day", 0, 1, 0),
    (Unit::Week, "week", 0, 7, 0),
    (Unit::Month, "month", 1, 0, 0),
    (Unit::Quarter, "quarter", 3, 0, 0),
    (Unit::Year, "year", 12, 0, 0),
];

impl Unit {
    /// The unit named `name` (any case: 'month', 'Month').
    ///
    /// Errors: 22023 naming `unit` for any other name.
    pub fn from_name(name: &str) -> Result<Unit, LimitError> {
        UNITS
            .iter()
            .find(|(_, unit_name, ..)| unit_name.eq_ignore_ascii_case(name))
            .map(|(unit, ..)| *unit)
            .ok_or_else(|| {
                LimitError::invalid(
                    "unit",
                    format!("unknown calendar unit \"{name}\": use minute, hour, day, week, month, quarter or year"),
                )
            })
    }

    /// The unit's period as an interval's (months, days, microseconds):
    /// '1 mon', '7 days', ...
    pub fn period_parts(self) -> (i32, i32, i64) {
        let (_, _, months, days, micros) = UNITS[self as usize];
        (months, days, micros)
    }

    /// The unit whose period is `period` microseconds long (the config's
    /// period, as `period_micros` counts it: '1 month' is 30 days, '1
    /// year' 365.25 days).
    ///
    /// Errors: 22023 naming `period` for any other length.
    pub fn from_period(period: Micros) -> Result<Unit, LimitError> {
        UNITS
            .iter()
            .find(|(_, _, months, days, micros)| {
                period_micros(*months, *days, *micros).ok() == Some(period)
            })
            .map(|(unit, ..)| *unit)
            .ok_or_else(|| {
                LimitError::invalid(
                    "period",
                    "a calendar window's period is its unit: 1 minute, 1 hour, 1 day, 7 days, 1 month, 3 months or 1 year (rate_limiter.calendar_window)".to_string(),
                )
            })
    }
}

/// `date_trunc(unit, local)` of a local time (a week starts on Monday).
pub fn truncate(unit: Unit, local: Micros) -> Micros {
    match unit {
        Unit::Minute => local - local.rem_euclid(MINUTE),
        Unit::Hour => local - local.rem_euclid(HOUR),
        Unit::Day => local - local.rem_euclid(DAY),
        // 2000-01-03 (day 2) was a Monday.
        Unit::Week => {
            let day = local.div_euclid(DAY);
            (day - (day - 2).rem_euclid(7)) * DAY
        }
        Unit::Month | Unit::Quarter | Unit::Year => {
            let (year, month, _) = civil_from_days(local.div_euclid(DAY));
            let month = match unit {
                Unit::Quarter => (month - 1) / 3 * 3 + 1,
                Unit::Year => 1,
                _ => month,
            };
            days_from_civil(year, month) * DAY
        }
    }
}

/// A local midnight `n` units after the local midnight `local`
/// (`timestamp + n * interval '1 unit'`).
pub fn add(unit: Unit, local: Micros, n: i64) -> Micros {
    let months = match unit {
        Unit::Day => return local.saturating_add(n.saturating_mul(DAY)),
        Unit::Week => return local.saturating_add(n.saturating_mul(7 * DAY)),
        Unit::Quarter => n.saturating_mul(3),
        Unit::Year => n.saturating_mul(12),
        _ => n,
    };
    let (year, month, _) = civil_from_days(local.div_euclid(DAY));
    let index = (year * 12 + month - 1).saturating_add(months);
    days_from_civil(index.div_euclid(12), index.rem_euclid(12) + 1).saturating_mul(DAY)
}

/// The number of `unit`s from an origin to the local time `local`, for
/// counting windows: days, weeks, months, quarters or years.
pub fn index(unit: Unit, local: Micros) -> i64 {
    let day = local.div_euclid(DAY);
    match unit {
        Unit::Week => (day - 2).div_euclid(7),
        Unit::Month | Unit::Quarter | Unit::Year => {
            let (year, month, _) = civil_from_days(day);
            let months = year * 12 + month - 1;
            match unit {
                Unit::Quarter => months.div_euclid(3),
                Unit::Year => year,
                _ => months,
            }
        }
        _ => day,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truncation_is_date_trunc() {
        // 2026-03-18 (a Wednesday) 13:45:10 local.
        let day = days_from_civil(2026, 3) + 17;
        let local = day * DAY + 13 * HOUR + 45 * MINUTE + 10_000_000;
        assert_eq!(truncate(Unit::Week, local), (day - 2) * DAY);
        assert_eq!(
            truncate(Unit::Quarter, local),
            days_from_civil(2026, 1) * DAY
        );
        assert_eq!(
            add(Unit::Month, days_from_civil(2026, 1) * DAY, 13),
            days_from_civil(2027, 2) * DAY
        );
        // Q1 2026 is 26 years of quarters after Q1 2000.
        assert_eq!(index(Unit::Quarter, local) - index(Unit::Quarter, 0), 104);
    }
}
