//! Calendar window: `rate` tokens at the start of each calendar minute,
//! hour, day, week, month, quarter or year in a time zone, up to
//! `capacity` (docs/shapes.md). Tokens carry over windows not used as the
//! fixed window's do; what differs is where windows start: not at
//! `anchor + k * period` but where the calendar says, so a month is a month
//! and a day around a change of daylight saving time has 23 or 25 hours.
//!
//! The calendar itself (time zones, month lengths) is not here: the math
//! is given a [`Calendar`], which the extension implements with
//! PostgreSQL's own time zone functions (`date_trunc(unit, now AT TIME
//! ZONE time_zone) AT TIME ZONE time_zone`), and the tests with a civil
//! calendar in UTC.

use crate::error::LimitError;
use crate::state::State;
use crate::time::Micros;

/// Where a limit's calendar windows start. Instants are microseconds since
/// 2000-01-01 UTC; a "window start" is a value `window_start` returns.
///
/// Invariants an implementation keeps: `window_start(at) <= at`, and it
/// never decreases as `at` grows; `nth_start(s, n) > s` for a window start
/// `s`; `windows_between(s, nth_start(s, n)) == n`.
pub trait Calendar: std::fmt::Debug {
    /// The start of the window that contains `at`: at most `at`, and the
    /// latest window start that is.
    fn window_start(&self, at: Micros) -> Micros;
    /// How many windows start after the window start `from` up to and
    /// including the window start `to` (0 when `to <= from`).
    fn windows_between(&self, from: Micros, to: Micros) -> i64;
    /// The start of the `n`-th window after the window start `start`
    /// (`n >= 1`), saturating at the end of the range.
    fn nth_start(&self, start: Micros, n: i64) -> Micros;
}

/// A limit's calendar, as its [`Config`](crate::Config) holds it: a
/// reference that lives as long as the process (the extension keeps one
/// per unit and time zone). Two are equal when they are the same calendar.
#[derive(Clone, Copy)]
pub struct CalendarRef(pub &'static dyn Calendar);

impl std::fmt::Debug for CalendarRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl PartialEq for CalendarRef {
    fn eq(&self, other: &Self) -> bool {
        std::ptr::addr_eq(self.0, other.0)
    }
}

/// The state of a limit without a row: full (`capacity`), at the start of
/// the window containing `now`.
pub fn initial_state(capacity: f64, calendar: &dyn Calendar, now: Micros) -> State {
    State {
        value: capacity,
        ts: calendar.window_start(now),
        previous: 0.0,
    }
}

/// The state at `now`: each window started since `ts` (never a negative
/// number: a clock that went back changes nothing) adds `rate`, capped at
/// `capacity`, and `ts` moves to the start of the window containing `now`.
pub fn refill(
    rate: f64,
    capacity: f64,
    calendar: &dyn Calendar,
    state: State,
    now: Micros,
) -> State {
    let start = calendar.window_start(now);
    let windows = calendar.windows_between(state.ts, start);
    if windows <= 0 {
        return state;
    }
    State {
        value: (state.value + windows as f64 * rate).min(capacity),
        ts: start,
        previous: 0.0,
    }
}

/// Microseconds from `now` until `tokens` more tokens have been granted to
/// the refilled state `refilled`: the start of the `ceil(tokens / rate)`-th
/// window after `refilled.ts`, less `now` (0 windows: `now`, nothing to
/// wait for). Infinite when that many windows do not fit an `i64`.
pub fn wait(rate: f64, calendar: &dyn Calendar, refilled: State, tokens: f64, now: Micros) -> f64 {
    let windows = (tokens / rate).ceil();
    if !(windows >= 1.0) {
        return 0.0;
    }
    if windows >= i64::MAX as f64 {
        return f64::INFINITY;
    }
    let start = calendar.nth_start(refilled.ts, windows as i64);
    (i128::from(start) - i128::from(now)) as f64
}

/// The end of PostgreSQL's timestamp range, in microseconds since
/// 2000-01-01 (a window start is never computed within a margin of it).
const END_OF_TIME: i128 = 9_224_318_016_000_000_000;

/// The earliest delay after `now` at which `admitted` holds, among the
/// window starts after the refilled state's: from the estimate (the
/// `ceil(tokens / rate)`-th window start), later by a window (at most
/// four) while it does not hold, then earlier by as many windows as still
/// do (galloping, then bisecting: `admitted` is monotone, as refills only
/// add tokens). `period` is the unit's nominal length (a month 30 days).
///
/// Errors: `OutOfRange` when that many windows of the nominal length do
/// not fit `i64::MAX / 4` microseconds (what [`crate::evaluate`] allows a
/// `retry_after`), or would reach within twice their length of the end of
/// PostgreSQL's timestamps.
pub fn earliest(
    rate: f64,
    period: Micros,
    calendar: &dyn Calendar,
    refilled: State,
    tokens: f64,
    now: Micros,
    admitted: impl Fn(Micros) -> bool,
) -> Result<Micros, LimitError> {
    let limit = i64::MAX / 4;
    let windows = (tokens / rate).ceil();
    if !(windows * (period as f64) < limit as f64) {
        return Err(out_of_range(windows));
    }
    let delay = |n: i64| -> Result<Micros, LimitError> {
        if i128::from(now) + 2 * i128::from(n) * i128::from(period) >= END_OF_TIME {
            return Err(out_of_range(n as f64));
        }
        let delay = i128::from(calendar.nth_start(refilled.ts, n)) - i128::from(now);
        if delay >= i128::from(limit) {
            return Err(out_of_range(n as f64));
        }
        Ok(delay as Micros)
    };
    let mut n = if windows >= 1.0 { windows as i64 } else { 1 };
    for _ in 0..4 {
        if admitted(delay(n)?) {
            break;
        }
        n += 1;
    }
    let earlier =
        |back: i64| -> Result<bool, LimitError> { Ok(back < n && admitted(delay(n - back)?)) };
    let (mut admitted_back, mut refused_back) = (0, 1);
    while earlier(refused_back)? {
        admitted_back = refused_back;
        refused_back = refused_back.saturating_mul(2);
    }
    while refused_back - admitted_back > 1 {
        let middle = admitted_back + (refused_back - admitted_back) / 2;
        if earlier(middle)? {
            admitted_back = middle;
        } else {
            refused_back = middle;
        }
    }
    delay(n - admitted_back)
}

fn out_of_range(windows: f64) -> LimitError {
    LimitError::out_of_range(
        "retry_after",
        format!("retry_after would be {windows} calendar windows away, which is out of range"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::civil::days_from_civil;

    const HOUR: Micros = 3_600_000_000;
    const DAY: Micros = 24 * HOUR;

    /// A calendar of UTC months: the first day of each month, 00:00 UTC,
    /// from the civil date (Howard Hinnant's days_from_civil).
    #[derive(Debug)]
    struct UtcMonths;

    /// (year, month) of the month containing day `days` since 2000-01-01.
    fn month_of(days: i64) -> (i64, i64) {
        let mut year = 2000 + days.div_euclid(366) - 1;
        loop {
            if days_from_civil(year + 1, 1) > days {
                break;
            }
            year += 1;
        }
        let mut month = 12;
        while days_from_civil(year, month) > days {
            month -= 1;
        }
        (year, month)
    }

    impl Calendar for UtcMonths {
        fn window_start(&self, at: Micros) -> Micros {
            let (year, month) = month_of(at.div_euclid(DAY));
            days_from_civil(year, month) * DAY
        }
        fn windows_between(&self, from: Micros, to: Micros) -> i64 {
            let (y1, m1) = month_of(from.div_euclid(DAY));
            let (y2, m2) = month_of(to.div_euclid(DAY));
            ((y2 * 12 + m2) - (y1 * 12 + m1)).max(0)
        }
        fn nth_start(&self, start: Micros, n: i64) -> Micros {
            let (year, month) = month_of(start.div_euclid(DAY));
            let months = year * 12 + (month - 1) + n;
            days_from_civil(months.div_euclid(12), months.rem_euclid(12) + 1) * DAY
        }
    }

    fn at(year: i64, month: i64, day: i64) -> Micros {
        (days_from_civil(year, month) + day - 1) * DAY
    }

    #[test]
    fn the_civil_calendar_of_these_tests_is_right() {
        assert_eq!(days_from_civil(2000, 1), 0);
        assert_eq!(days_from_civil(2000, 3), 60); // 2000 is a leap year
        assert_eq!(
            UtcMonths.window_start(at(2026, 3, 31) + HOUR),
            at(2026, 3, 1)
        );
        assert_eq!(UtcMonths.nth_start(at(2026, 11, 1), 3), at(2027, 2, 1));
        assert_eq!(
            UtcMonths.windows_between(at(2025, 12, 1), at(2026, 2, 1)),
            2
        );
    }

    #[test]
    fn a_month_is_a_month() {
        // 1,000 a month, used up on January 31st at 23:59: the next token
        // comes on February 1st, 60 s later; February's window is 28 days.
        let used_up = State {
            value: 0.0,
            ts: at(2026, 1, 1),
            previous: 0.0,
        };
        let now = at(2026, 2, 1) - 60_000_000;
        let refilled = refill(1000.0, 1000.0, &UtcMonths, used_up, now);
        assert_eq!(refilled, used_up);
        assert_eq!(wait(1000.0, &UtcMonths, refilled, 1.0, now), 60e6);
        let february = refill(1000.0, 1000.0, &UtcMonths, used_up, at(2026, 2, 1));
        assert_eq!(february.value, 1000.0);
        assert_eq!(february.ts, at(2026, 2, 1));
        assert_eq!(UtcMonths.nth_start(february.ts, 1) - february.ts, 28 * DAY);
    }

    #[test]
    fn unused_windows_carry_over_up_to_capacity() {
        let state = State {
            value: 100.0,
            ts: at(2026, 1, 1),
            previous: 0.0,
        };
        // Three months on: + 3 x 1,000, capped at 2,500.
        let later = refill(1000.0, 2500.0, &UtcMonths, state, at(2026, 4, 15));
        assert_eq!((later.value, later.ts), (2500.0, at(2026, 4, 1)));
        // A debt of 1,500 waits two windows (March 1st) for 1 token.
        let debt = State {
            value: -1500.0,
            ..state
        };
        let now = at(2026, 1, 20);
        assert_eq!(
            wait(1000.0, &UtcMonths, debt, 1.0 - debt.value, now),
            (at(2026, 3, 1) - now) as f64
        );
        // The clock went back: nothing changes.
        assert_eq!(
            refill(1000.0, 2500.0, &UtcMonths, state, at(2025, 12, 5)),
            state
        );
    }
}
