//! Calendar windows' calendars (docs/shapes.md, "Calendar window"): where
//! the windows of a unit (minute ... year) start in a time zone, from
//! PostgreSQL's own time zone conversions, `timestamptz AT TIME ZONE zone`
//! and `timestamp AT TIME ZONE zone` (`timestamptz_zone`,
//! `timestamp_zone`), so that a zone means exactly what it means in SQL
//! and the portable edition (portable/sql/23_calendar.sql) computes the
//! same instants. Local dates are proleptic Gregorian, as PostgreSQL's.
//!
//! The rule, for an instant `t`, its local time `l = t AT TIME ZONE zone`
//! and `trunc = date_trunc(unit, l)`:
//! - minute, hour: the window starts `l - trunc` before `t` (the local
//!   clock's minute or hour, so an hour that occurs twice when clocks go
//!   back is two windows);
//! - day, week (from Monday), month, quarter, year: at `trunc AT TIME ZONE
//!   zone`, the local midnight; where that instant is after `t` (a
//!   midnight that occurs twice), `l - trunc` before `t`.
//!
//! Calendars are kept per backend, one per (unit, zone), for the life of
//! the process: the algorithm's [`Config`](rate_limiter_algorithm::Config)
//! refers to them. At most [`MAX_CALENDARS`] are kept.

use pgrx::prelude::*;
use rate_limiter_algorithm::calendar_window::{Calendar, CalendarRef};
use rate_limiter_algorithm::{period_micros, LimitError, Micros};
use std::cell::{Cell, RefCell};
use std::collections::HashMap;

const MINUTE: Micros = 60_000_000;
const HOUR: Micros = 60 * MINUTE;
const DAY: Micros = 24 * HOUR;
/// The end of PostgreSQL's timestamps (microseconds since 2000-01-01).
const END_OF_TIME: i128 = 9_224_318_016_000_000_000;

/// Most distinct (unit, time zone) calendars one backend keeps (each a few
/// hundred bytes for the life of the process); more is a 22023 error.
pub const MAX_CALENDARS: usize = 1000;

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

    /// The period of a calendar window of this unit, as an interval.
    pub fn period(self) -> Interval {
        let (_, _, months, days, micros) = UNITS[self as usize];
        Interval::new(months, days, micros).unwrap_or_else(|_| unreachable!("no signs to mismatch"))
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

/// The windows of one unit in one time zone.
#[derive(Debug)]
struct ZoneCalendar {
    unit: Unit,
    /// The unit's nominal length (its period, microseconds).
    nominal: Micros,
    /// The zone's name as a `text` datum in TopMemoryContext.
    zone: pg_sys::Datum,
    /// The last window whose end was computed: (start, next start), so
    /// that the calls of one window pay no conversion. (0, 0): none.
    last: Cell<(Micros, Micros)>,
}

thread_local! {
    /// The time zone names this backend has checked, kept for its life.
    static ZONES: RefCell<HashMap<String, &'static str>> = RefCell::new(HashMap::new());
    /// One calendar per (unit, zone name).
    static CALENDARS: RefCell<HashMap<(Unit, &'static str), &'static ZoneCalendar>> =
        RefCell::new(HashMap::new());
}

/// `zone`, checked: a name PostgreSQL's `AT TIME ZONE` knows (a name of
/// its time zone database, an abbreviation it knows, a POSIX zone), kept
/// for the life of the backend.
///
/// Errors: 22023 naming `time_zone` for a zone `AT TIME ZONE` does not
/// know, or when this backend already keeps [`MAX_CALENDARS`] zones.
pub fn zone(zone: &str) -> Result<&'static str, LimitError> {
    if let Some(found) = ZONES.with(|zones| zones.borrow().get(zone).copied()) {
        return Ok(found);
    }
    check_zone(zone)?;
    if ZONES.with(|zones| zones.borrow().len()) >= MAX_CALENDARS {
        return Err(LimitError::invalid(
            "time_zone",
            format!("this session already uses {MAX_CALENDARS} time zones"),
        ));
    }
    let kept: &'static str = Box::leak(zone.to_string().into_boxed_str());
    ZONES.with(|zones| zones.borrow_mut().insert(zone.to_string(), kept));
    Ok(kept)
}

/// The calendar of `unit` windows in `zone` (a zone [`zone`] returned).
pub fn calendar(unit: Unit, zone: &'static str) -> CalendarRef {
    if let Some(found) = CALENDARS.with(|calendars| calendars.borrow().get(&(unit, zone)).copied())
    {
        return CalendarRef(found);
    }
    // SAFETY: a text palloc'd in TopMemoryContext lives as long as the backend.
    let datum =
        unsafe { pgrx::PgMemoryContexts::TopMemoryContext.switch_to(|_| zone.into_datum()) }
            .unwrap_or_else(|| unreachable!("a text is never NULL"));
    let (_, _, months, days, micros) = UNITS[unit as usize];
    let made: &'static ZoneCalendar = Box::leak(Box::new(ZoneCalendar {
        unit,
        nominal: period_micros(months, days, micros).unwrap_or(DAY),
        zone: datum,
        last: Cell::new((0, 0)),
    }));
    CALENDARS.with(|calendars| calendars.borrow_mut().insert((unit, zone), made));
    CalendarRef(made)
}

/// Whether PostgreSQL's `AT TIME ZONE` knows `zone`.
fn check_zone(zone: &str) -> Result<(), LimitError> {
    let known = PgTryBuilder::new(|| {
        let zone_datum = zone.into_datum();
        unsafe {
            pgrx::direct_function_call::<i64>(
                pg_sys::timestamptz_zone,
                &[zone_datum, Some(pg_sys::Datum::from(0i64))],
            )
        };
        true
    })
    .catch_when(PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE, |_| false)
    .catch_when(PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED, |_| false)
    .execute();
    if known {
        Ok(())
    } else {
        Err(LimitError::invalid(
            "time_zone",
            format!("unknown time zone \"{zone}\": use a name such as 'America/New_York' or 'UTC'"),
        ))
    }
}

impl ZoneCalendar {
    /// `at AT TIME ZONE zone`: the local time, as microseconds since
    /// 2000-01-01 00:00 local.
    fn local(&self, at: Micros) -> Micros {
        unsafe {
            pgrx::direct_function_call::<i64>(
                pg_sys::timestamptz_zone,
                &[Some(self.zone), Some(pg_sys::Datum::from(at))],
            )
        }
        .unwrap_or(at)
    }

    /// `local AT TIME ZONE zone`: the instant of a local time.
    fn instant(&self, local: Micros) -> Micros {
        unsafe {
            pgrx::direct_function_call::<i64>(
                pg_sys::timestamp_zone,
                &[Some(self.zone), Some(pg_sys::Datum::from(local))],
            )
        }
        .unwrap_or(local)
    }

    /// The window start of `at`, computed (see the module documentation).
    fn start_of(&self, at: Micros) -> Micros {
        let local = self.local(at);
        let trunc = truncate(self.unit, local);
        let elapsed = at - (local - trunc);
        if matches!(self.unit, Unit::Minute | Unit::Hour) {
            return elapsed;
        }
        let midnight = self.instant(trunc);
        if midnight <= at {
            midnight
        } else {
            elapsed
        }
    }

    /// The start of the `n`-th window after the window start `start`,
    /// without the cache.
    fn nth_uncached(&self, start: Micros, n: i64) -> Micros {
        match self.unit {
            Unit::Minute => self.start_of(start.saturating_add(n.saturating_mul(MINUTE))),
            Unit::Hour => self.start_of(start.saturating_add(n.saturating_mul(HOUR))),
            unit => self.instant(add(unit, truncate(unit, self.local(start)), n)),
        }
    }
}

impl Calendar for ZoneCalendar {
    fn window_start(&self, at: Micros) -> Micros {
        let (start, next) = self.last.get();
        if start <= at && at < next {
            return start;
        }
        let start = self.start_of(at);
        // Remember the window (two more conversions, once per window),
        // unless its end could be past the end of the timestamps.
        if i128::from(start) + 2 * i128::from(self.nominal) < END_OF_TIME {
            self.last.set((start, self.nth_uncached(start, 1)));
        }
        start
    }

    fn windows_between(&self, from: Micros, to: Micros) -> i64 {
        if to <= from {
            return 0;
        }
        let (start, next) = self.last.get();
        if from == start && to == next {
            return 1;
        }
        let elapsed = |unit: Micros| {
            ((i128::from(to) - i128::from(from) + i128::from(unit / 2)) / i128::from(unit)) as i64
        };
        let count = match self.unit {
            Unit::Minute => elapsed(MINUTE),
            Unit::Hour => elapsed(HOUR),
            unit => index(unit, self.local(to)) - index(unit, self.local(from)),
        };
        count.max(0)
    }

    fn nth_start(&self, start: Micros, n: i64) -> Micros {
        let (cached, next) = self.last.get();
        if n == 1 && start == cached && next > cached {
            return next;
        }
        // (Not remembered: `start` may be a state's ts that is no window
        // start, left by a config of another kind.)
        self.nth_uncached(start, n)
    }
}

/// `date_trunc(unit, local)` of a local time (a week starts on Monday).
fn truncate(unit: Unit, local: Micros) -> Micros {
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
fn add(unit: Unit, local: Micros, n: i64) -> Micros {
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
fn index(unit: Unit, local: Micros) -> i64 {
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

/// Days since 2000-01-01 of the first day of `month` in `year` (proleptic
/// Gregorian; Howard Hinnant's `days_from_civil`).
fn days_from_civil(year: i64, month: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    // Days since 1970-01-01, less the 10,957 days to 2000-01-01.
    era * 146_097 + doe - 719_468 - 10_957
}

/// (year, month, day) of the day `days` since 2000-01-01 (Hinnant's
/// `civil_from_days`).
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 10_957 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(any(test, feature = "pg_test"))]
#[pg_schema]
mod tests {
    use super::*;

    #[test]
    fn civil_dates_round_trip() {
        for days in [-800_000, -1, 0, 59, 60, 365, 9_527, 100_000] {
            let (year, month, day) = civil_from_days(days);
            assert_eq!(days_from_civil(year, month) + day - 1, days);
        }
        assert_eq!(civil_from_days(0), (2000, 1, 1));
        assert_eq!(civil_from_days(59), (2000, 2, 29));
    }

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
        assert_eq!(index(Unit::Quarter, local) - index(Unit::Quarter, 0), 105);
    }
}
