//! Calendar windows' calendars (docs/shapes.md, "Calendar window"): where
//! the windows of a unit (minute ... year) start in a time zone, from
//! PostgreSQL's own time zone conversions, `timestamptz AT TIME ZONE zone`
//! and `timestamp AT TIME ZONE zone` (`timestamptz_zone`,
//! `timestamp_zone`), so that a zone means exactly what it means in SQL
//! and the portable edition (portable/sql/15_calendar.sql) computes the
//! same instants. Local-time arithmetic (date_trunc, adding and counting
//! units) is the algorithm crate's `calendar_unit`.
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
use rate_limiter_algorithm::calendar_unit::{add, index, truncate, Unit, DAY, HOUR, MINUTE};
use rate_limiter_algorithm::calendar_window::{Calendar, CalendarRef};
use rate_limiter_algorithm::{period_micros, LimitError, Micros};
use std::cell::{Cell, RefCell};
use std::collections::HashMap;

/// The end of PostgreSQL's timestamps (microseconds since 2000-01-01).
const END_OF_TIME: i128 = 9_224_318_016_000_000_000;

/// Most distinct (unit, time zone) calendars one backend keeps (each a few
/// hundred bytes for the life of the process); more is a 22023 error.
pub const MAX_CALENDARS: usize = 1000;

/// The period of a calendar window of `unit`, as an interval.
pub fn period(unit: Unit) -> Interval {
    let (months, days, micros) = unit.period_parts();
    Interval::new(months, days, micros).unwrap_or_else(|_| unreachable!("no signs to mismatch"))
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
    let (months, days, micros) = unit.period_parts();
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
