//! The configuration of a limit and its validation.

use crate::block_policy::BlockPolicy;
use crate::calendar_window::CalendarRef;
use crate::error::{show, LimitError};
use crate::time::Micros;

/// The algorithm of a limit (SQL enum `rate_limiter.kind`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Tokens arrive continuously at `rate / period`, up to `capacity`.
    TokenBucket,
    /// `rate` tokens are granted at the start of each window of length `period`.
    FixedWindow,
    /// At most `rate` in the current window plus the previous one's count
    /// weighted by how much of it still overlaps the last `period`
    /// ([`crate::sliding_window`]).
    SlidingWindow,
    /// `rate` tokens at the start of each calendar minute, hour, day, week,
    /// month, quarter or year in a time zone ([`crate::calendar_window`]).
    CalendarWindow,
}

impl Kind {
    /// The SQL enum label: `'token bucket'` or `'fixed window'`.
    pub fn label(self) -> &'static str {
        match self {
            Kind::TokenBucket => "token bucket",
            Kind::FixedWindow => "fixed window",
            Kind::SlidingWindow => "sliding window",
            Kind::CalendarWindow => "calendar window",
        }
    }

    /// Parses an SQL enum label; `None` for anything else.
    pub fn from_label(label: &str) -> Option<Kind> {
        match label {
            "token bucket" => Some(Kind::TokenBucket),
            "fixed window" => Some(Kind::FixedWindow),
            "sliding window" => Some(Kind::SlidingWindow),
            "calendar window" => Some(Kind::CalendarWindow),
            _ => None,
        }
    }
}

/// The most shards a limit may have: the state table's `shard` column is a
/// `smallint`, numbered `0..shards`.
pub const MAX_SHARDS: i32 = i16::MAX as i32;

/// The HINT of a count no call could ever be admitted with: its first
/// remedy works from every function that takes a count (`guard()` and
/// `rate_wait` have no `reserve`), the second names the ones that can
/// reserve.
pub const COUNT_HINT: &str = "Ask for at most that much in one call, or raise the limit's capacity (rate_limiter.define, or the inline config). rate_limit, rate_check and rate_limit_all can also pass reserve => true, to go into debt up to max_reserved.";

/// A limit's configuration (SQL composite `rate_limiter.config`).
///
/// Invariants after [`Config::validate`]: `rate` finite and > 0, `period`
/// > 0 microseconds, `capacity` and `max_reserved` (when given) finite and
/// >= 0, `shards` >= 1.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Config {
    /// The algorithm.
    pub kind: Kind,
    /// Tokens granted per `period`.
    pub rate: f64,
    /// The period, in microseconds.
    pub period: Micros,
    /// Most tokens that can accumulate; `None` means `rate`.
    pub capacity: Option<f64>,
    /// Most tokens a reservation may owe; `None` means unlimited, `Some(0)`
    /// means no debt at all.
    pub max_reserved: Option<f64>,
    /// Number of rows the limit is split over, `1..=MAX_SHARDS`; each holds
    /// `1 / shards` of the rate, capacity and max_reserved ([`Config::shard`]).
    pub shards: i32,
    /// Fixed window only: a time at which a window starts (any window start
    /// works as anchor, past or future); `None` means a per-key phase.
    pub start: Option<Micros>,
    /// Automatic blocks (`with_block`, [`BlockPolicy`]); `None`: none.
    pub block: Option<BlockPolicy>,
    /// Calendar window only: where its windows start (the unit and time
    /// zone); `None` for every other kind.
    pub calendar: Option<CalendarRef>,
}

impl Config {
    /// The effective capacity: `capacity`, or `rate` when it is not set.
    pub fn capacity(&self) -> f64 {
        self.capacity.unwrap_or(self.rate)
    }

    /// The configuration of one of the `shards` rows of a sharded limit:
    /// `rate / shards`, `capacity / shards`, `max_reserved / shards`, one
    /// shard. (The identity for an unsharded limit.)
    pub fn shard(&self) -> Config {
        let shards = f64::from(self.shards.max(1));
        Config {
            rate: self.rate / shards,
            capacity: Some(self.capacity() / shards),
            max_reserved: self.max_reserved.map(|max_reserved| max_reserved / shards),
            shards: 1,
            ..*self
        }
    }

    /// Checks every field; the error names the offending parameter.
    ///
    /// Errors: `InvalidParameter` for a non-finite or out-of-domain value
    /// (`shards` must be in `1..=32767`).
    pub fn validate(&self) -> Result<(), LimitError> {
        if !(self.rate.is_finite() && self.rate > 0.0) {
            return Err(LimitError::invalid(
                "rate",
                format!(
                    "rate must be finite and greater than zero, got {}",
                    show(self.rate)
                ),
            ));
        }
        if self.period <= 0 {
            return Err(LimitError::invalid(
                "period",
                "period must be greater than zero".to_string(),
            ));
        }
        for (parameter, value) in [
            ("capacity", self.capacity),
            ("max_reserved", self.max_reserved),
        ] {
            if let Some(value) = value {
                if !(value.is_finite() && value >= 0.0) {
                    return Err(LimitError::invalid(
                        parameter,
                        format!(
                            "{parameter} must be finite and at least zero, got {}",
                            show(value)
                        ),
                    ));
                }
            }
        }
        if self.shards < 1 {
            return Err(LimitError::invalid(
                "shards",
                format!("shards must be at least 1, got {}", self.shards),
            ));
        }
        if self.kind == Kind::SlidingWindow
            && self.capacity.is_some_and(|capacity| capacity != self.rate)
        {
            return Err(LimitError::invalid(
                "capacity",
                "a sliding window's capacity is its rate: leave capacity NULL".to_string(),
            ));
        }
        if self.kind == Kind::TokenBucket && self.start.is_some() {
            return Err(LimitError::invalid(
                "start",
                "start applies only to fixed and sliding windows: a token bucket has no windows"
                    .to_string(),
            ));
        }
        if self.kind == Kind::CalendarWindow {
            if self.start.is_some() {
                return Err(LimitError::invalid(
                    "start",
                    "a calendar window's windows start where the calendar says: leave start NULL"
                        .to_string(),
                ));
            }
            if self.shards > 1 {
                return Err(LimitError::invalid(
                    "shards",
                    format!(
                        "a calendar window is not sharded: shards must be 1, got {}",
                        self.shards
                    ),
                ));
            }
            if self.calendar.is_none() {
                return Err(LimitError::invalid(
                    "time_zone",
                    "a calendar window needs a unit and a time_zone (rate_limiter.calendar_window)"
                        .to_string(),
                ));
            }
        } else if self.calendar.is_some() {
            return Err(LimitError::invalid(
                "time_zone",
                "time_zone applies only to calendar windows".to_string(),
            ));
        }
        if self.shards > MAX_SHARDS {
            return Err(LimitError::invalid(
                "shards",
                format!(
                    "shards must be at most {MAX_SHARDS} (the state table's shard column is a smallint), got {}",
                    self.shards
                ),
            ));
        }
        if let Some(block) = &self.block {
            block.validate()?;
        }
        if self.shards > 1 && self.shard().rate == 0.0 {
            return Err(LimitError::invalid(
                "rate",
                format!(
                    "rate {} split over {} shards is too small to represent",
                    show(self.rate),
                    self.shards
                ),
            ));
        }
        Ok(())
    }

    /// Checks a request's `count` against this (valid) configuration: it
    /// must be finite and >= 0, and it must be able to succeed some day:
    /// `count <= capacity` without reserve, `count <= capacity +
    /// max_reserved` with reserve.
    ///
    /// Errors: `InvalidParameter` naming `count`.
    pub fn validate_count(&self, count: f64, reserve: bool) -> Result<(), LimitError> {
        if !(count.is_finite() && count >= 0.0) {
            return Err(LimitError::invalid(
                "count",
                format!(
                    "count must be finite and at least zero, got {}",
                    show(count)
                ),
            ));
        }
        // A call of a sharded limit is served by at most two shards. (What
        // the message names is made only for an error: a call that passes
        // allocates nothing.)
        // A sliding window's call is never bigger than its rate, reserve or
        // not: a reservation's retry_after is when the same call without
        // reserve would succeed (docs/shapes.md), and a bigger one never would.
        let reserve = reserve && self.kind != Kind::SlidingWindow;
        let (capacity, max_reserved, debt) = if self.shards > 1 {
            let shard = self.shard();
            (
                2.0 * shard.capacity(),
                shard.max_reserved.map(|max_reserved| 2.0 * max_reserved),
                "the debt two shards may owe",
            )
        } else {
            (self.capacity(), self.max_reserved, "max_reserved")
        };
        let what = || {
            if self.shards > 1 {
                format!("what two of its {} shards hold", self.shards)
            } else {
                "the capacity".to_string()
            }
        };
        if !reserve && count > capacity {
            return Err(LimitError::invalid(
                "count",
                format!(
                    "count {count} exceeds {} ({capacity}), so the call could never succeed",
                    what()
                ),
            )
            .with_hint(COUNT_HINT));
        }
        if let (true, Some(max_reserved)) = (reserve, max_reserved) {
            if count > capacity + max_reserved {
                return Err(LimitError::invalid(
                    "count",
                    format!(
                        "count {count} exceeds {} ({capacity}) plus {debt} ({max_reserved}), so the call could never succeed",
                        what()
                    ),
                )
                .with_hint(COUNT_HINT));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bucket() -> Config {
        Config {
            kind: Kind::TokenBucket,
            rate: 10.0,
            period: 60_000_000,
            capacity: None,
            max_reserved: None,
            shards: 1,
            start: None,
            block: None,
            calendar: None,
        }
    }

    #[test]
    fn labels_round_trip() {
        for kind in [Kind::TokenBucket, Kind::FixedWindow, Kind::SlidingWindow] {
            assert_eq!(Kind::from_label(kind.label()), Some(kind));
        }
        assert_eq!(Kind::from_label("leaky bucket"), None);
    }

    #[test]
    fn capacity_defaults_to_rate() {
        assert_eq!(bucket().capacity(), 10.0);
        assert_eq!(
            Config {
                capacity: Some(3.0),
                ..bucket()
            }
            .capacity(),
            3.0
        );
    }

    #[test]
    fn validation_names_the_parameter() {
        let cases = [
            (
                Config {
                    rate: 0.0,
                    ..bucket()
                },
                "rate",
            ),
            (
                Config {
                    rate: -1.0,
                    ..bucket()
                },
                "rate",
            ),
            (
                Config {
                    rate: f64::NAN,
                    ..bucket()
                },
                "rate",
            ),
            (
                Config {
                    rate: f64::INFINITY,
                    ..bucket()
                },
                "rate",
            ),
            (
                Config {
                    period: 0,
                    ..bucket()
                },
                "period",
            ),
            (
                Config {
                    capacity: Some(-1.0),
                    ..bucket()
                },
                "capacity",
            ),
            (
                Config {
                    capacity: Some(f64::INFINITY),
                    ..bucket()
                },
                "capacity",
            ),
            (
                Config {
                    max_reserved: Some(f64::NAN),
                    ..bucket()
                },
                "max_reserved",
            ),
            (
                Config {
                    shards: 0,
                    ..bucket()
                },
                "shards",
            ),
            (
                Config {
                    shards: MAX_SHARDS + 1,
                    ..bucket()
                },
                "shards",
            ),
            (
                Config {
                    rate: 5e-324,
                    shards: 2,
                    ..bucket()
                },
                "rate",
            ),
        ];
        for (config, parameter) in cases {
            let error = config.validate().unwrap_err();
            assert_eq!(error.parameter, parameter, "{config:?}");
            assert!(error.message.contains(parameter));
        }
        assert!(Config {
            shards: MAX_SHARDS,
            ..bucket()
        }
        .validate()
        .is_ok());
        assert!(Config {
            capacity: Some(0.0),
            max_reserved: Some(0.0),
            ..bucket()
        }
        .validate()
        .is_ok());
    }

    #[test]
    fn start_is_for_fixed_windows_only() {
        let error = Config {
            start: Some(0),
            ..bucket()
        }
        .validate()
        .unwrap_err();
        assert_eq!(error.parameter, "start");
        assert!(Config {
            kind: Kind::FixedWindow,
            start: Some(0),
            ..bucket()
        }
        .validate()
        .is_ok());
    }

    #[test]
    fn counts_that_can_never_succeed_are_errors() {
        let config = Config {
            capacity: Some(3.0),
            max_reserved: Some(2.0),
            ..bucket()
        };
        assert!(config.validate_count(3.0, false).is_ok());
        assert!(config.validate_count(3.5, false).is_err());
        assert!(config.validate_count(5.0, true).is_ok());
        assert!(config.validate_count(5.5, true).is_err());
        assert!(config.validate_count(-1.0, false).is_err());
        assert!(config.validate_count(f64::NAN, true).is_err());
        // Unlimited reservations accept any finite count.
        assert!(bucket().validate_count(1e300, true).is_ok());
    }

    #[test]
    fn a_sharded_call_is_bounded_by_two_shards() {
        let config = Config {
            capacity: Some(8.0),
            max_reserved: Some(12.0),
            shards: 4,
            ..bucket()
        };
        // Two shards hold 2 x 2 tokens and may owe 2 x 3 (a share of 3,
        // so that doubling it and halving it give different bounds).
        assert!(config.validate_count(4.0, false).is_ok());
        assert!(config.validate_count(4.5, false).is_err());
        assert!(config.validate_count(10.0, true).is_ok());
        let error = config.validate_count(10.5, true).unwrap_err();
        assert!(error.message.contains("two of its 4 shards"), "{error}");
    }
}
