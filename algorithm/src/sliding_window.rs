//! Sliding window: the weighted two-window counter (Cloudflare's, Upstash
//! `slidingWindow`'s, the `limits` library's "sliding window counter").
//!
//! Windows of length `period` are aligned as the fixed window's
//! (`crate::fixed_window::window_start`). The state counts what was
//! admitted in the current window (`current`) and in the one before
//! (`previous`). At `now`, with `f = (now - start) / period` in `[0, 1)`,
//!
//! ```text
//! estimate = previous * (1 - f) + current
//! ok       <=> estimate + count <= rate        (exact: no flooring)
//! ```
//!
//! A refused call changes nothing, and `count` is weighed whole. Its
//! `retry_after` is the earliest instant at which the same call would
//! succeed if nothing else consumed: found in this window, else the next
//! (where `previous` is this window's `current`), else the one after (where
//! both are 0). In any span of length `period` at most `2 * rate` are
//! admitted (all of a window's calls at its end, then a full window); with
//! uniform traffic the estimate is the true count.
//!
//! Reservations as the other kinds': `current` may exceed what `rate`
//! allows by at most `max_reserved` (`None`: unbounded), and an admitted
//! reservation's `retry_after` is when the same call without `reserve`
//! would have succeeded.

use crate::config::Config;
use crate::fixed_window::window_start;
use crate::state::State;
use crate::time::Micros;

/// What a sliding window stores for one (name, key, shard).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Counts {
    /// Tokens admitted in the window before `start`'s.
    pub previous: f64,
    /// Tokens admitted in the window starting at `start`.
    pub current: f64,
    /// The start of the current window (microseconds since 2000-01-01 UTC).
    pub start: Micros,
}

/// The parameters of one sliding window.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Window {
    /// Tokens per window (the capacity).
    pub rate: f64,
    /// The window's length, microseconds, > 0.
    pub period: Micros,
    /// A window starts at `anchor + k * period`.
    pub anchor: Micros,
    /// How far `current` may go beyond what `rate` allows with `reserve`
    /// (`None`: unbounded).
    pub max_reserved: Option<f64>,
}

impl Window {
    /// `counts` moved to the window that contains `now`: one window on,
    /// `current` becomes `previous`; two or more, both are 0. A `now`
    /// before `counts.start` (the clock went back) keeps them.
    pub fn advance(&self, counts: Counts, now: Micros) -> Counts {
        // counts.start is a window start: windows start at it plus whole periods.
        let start = window_start(counts.start, self.period, now);
        if start <= counts.start {
            return counts;
        }
        let next = counts.start.saturating_add(self.period);
        Counts {
            previous: if start == next { counts.current } else { 0.0 },
            current: 0.0,
            start,
        }
    }

    /// The fresh counts of a key with no row: nothing admitted.
    pub fn empty(&self, now: Micros) -> Counts {
        Counts {
            previous: 0.0,
            current: 0.0,
            start: window_start(self.anchor, self.period, now),
        }
    }

    /// The estimate of the advanced `counts` at `now` (`f` clamped to
    /// `[0, 1]`).
    pub fn estimate(&self, counts: Counts, now: Micros) -> f64 {
        let elapsed = (now.saturating_sub(counts.start)).clamp(0, self.period);
        let f = elapsed as f64 / self.period as f64;
        counts.previous * (1.0 - f) + counts.current
    }

    /// Whether `count` fits at `now` under `limit` (the rate, or the rate
    /// plus what may be reserved).
    fn fits(&self, counts: Counts, now: Micros, count: f64, limit: f64) -> bool {
        self.estimate(counts, now) + count <= limit
    }

    /// The earliest instant `t >= now` at which `count` fits under `rate`
    /// if nothing else is admitted, or `None` (never: `count > rate`).
    /// Exact to the microsecond: the first whole microsecond where the
    /// estimate allows it.
    pub fn earliest(&self, counts: Counts, now: Micros, count: f64) -> Option<Micros> {
        // (NaN compares false: never.)
        if count.is_nan() || count > self.rate {
            return None;
        }
        if self.fits(counts, now, count, self.rate) {
            return Some(now);
        }
        // This window: previous * (1 - f) <= rate - current - count.
        let room = self.rate - counts.current - count;
        if room >= 0.0 && counts.previous > 0.0 {
            let f = 1.0 - room / counts.previous;
            if let Some(t) = self.first_fit(counts, now, count, f) {
                return Some(t);
            }
        }
        // The next window: current * (1 - f) <= rate - count.
        let next = Counts {
            previous: counts.current,
            current: 0.0,
            start: counts.start.saturating_add(self.period),
        };
        let room = self.rate - count;
        let f = if next.previous > room {
            1.0 - room / next.previous
        } else {
            0.0
        };
        if let Some(t) = self.first_fit(next, next.start.max(now), count, f) {
            return Some(t);
        }
        // The one after: both 0, and count <= rate.
        Some(next.start.saturating_add(self.period))
    }

    /// The first whole microsecond `t >= from` of the window of `counts`
    /// where `count` fits under `rate`, near `f` of the window (where the
    /// arithmetic says; the estimate at whole microseconds decides, since
    /// rounding may put the exact instant a microsecond either way), or
    /// `None` when it does not fit before the window ends.
    fn first_fit(&self, counts: Counts, from: Micros, count: f64, f: f64) -> Option<Micros> {
        let end = counts.start.saturating_add(self.period);
        let offset = (f.max(0.0) * self.period as f64).ceil();
        if offset.is_nan() || offset >= self.period as f64 {
            return None;
        }
        let mut t = counts.start.saturating_add(offset as Micros).max(from);
        // Within a window the estimate only falls: step back while the
        // microsecond before fits too, then on until one fits.
        for _ in 0..4 {
            if t > from && self.fits(counts, t - 1, count, self.rate) {
                t -= 1;
            }
        }
        for _ in 0..4 {
            if t >= end {
                return None;
            }
            if self.fits(counts, t, count, self.rate) {
                return Some(t);
            }
            t += 1;
        }
        None
    }
}

/// The window of a (valid) sliding-window configuration; the anchor is
/// unused by the functions below, which move from a stored window start.
fn window(config: &Config) -> Window {
    Window {
        rate: config.rate,
        period: config.period,
        anchor: 0,
        max_reserved: config.max_reserved,
    }
}

/// A stored state as counts: `value` is what the current window admitted,
/// `previous` what the one before did, `ts` the current window's start
/// (the columns value, prev and ts of `rate_limiter.rate_limits`).
fn counts(state: State) -> Counts {
    Counts {
        previous: state.previous,
        current: state.value,
        start: state.ts,
    }
}

fn state(counts: Counts) -> State {
    State {
        value: counts.current,
        ts: counts.start,
        previous: counts.previous,
    }
}

/// The state of a key without a row: nothing admitted, in the window of
/// `anchor` that contains `now`.
pub fn initial_state(config: &Config, anchor: Micros, now: Micros) -> State {
    let window = Window {
        anchor,
        ..window(config)
    };
    state(window.empty(now))
}

/// The state moved to the window that contains `now` ([`Window::advance`]).
pub fn refill(config: &Config, stored: State, now: Micros) -> State {
    state(window(config).advance(counts(stored), now))
}

/// What a call may take at `now` from a refilled state: `rate - estimate`.
pub fn tokens(config: &Config, refilled: State, now: Micros) -> f64 {
    config.rate - window(config).estimate(counts(refilled), now)
}

/// Microseconds from `now` until `count` fits under the rate in the
/// refilled state if nothing else is admitted ([`Window::earliest`]);
/// infinite when it never does (`count` above the rate).
pub fn wait(config: &Config, refilled: State, count: f64, now: Micros) -> f64 {
    match window(config).earliest(counts(refilled), now, count) {
        Some(at) => (i128::from(at) - i128::from(now)) as f64,
        None => f64::INFINITY,
    }
}
