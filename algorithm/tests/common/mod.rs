//! Shared by the property tests: random configurations, and the bound no
//! sequence of calls may exceed. (Each test binary uses part of it.)
#![allow(dead_code)]

use proptest::prelude::*;
use rate_limiter_algorithm::{fixed_window, Config, Kind, LimitId, Micros};

const SECOND: Micros = 1_000_000;

/// Relative slack for float comparisons of sums of many terms.
pub fn slack(bound: f64) -> f64 {
    1e-9 * bound.abs().max(1.0)
}

/// The most tokens a limit may admit between its first call at `first`
/// (when it was full) and `latest`, when `left` tokens are stored at the
/// end (summed over shards; a shard never written counts as full):
/// capacity, plus what the rate granted (`rate * elapsed / period` for a
/// token bucket, `rate * windows started` for a fixed window), plus the
/// debt the calls may have run up, which is at most `-left` (every token
/// admitted came from the full start or a refill, or is still owed) and,
/// when any call reserved, at most `max_reserved`; without reservations no
/// debt. Always finite, also with unlimited reservations (`max_reserved`
/// NULL), so every generated case checks a real bound.
pub fn bound(
    config: &Config,
    id: LimitId<'_>,
    first: Micros,
    latest: Micros,
    reserved: bool,
    left: f64,
) -> f64 {
    let allowed = if reserved {
        config.max_reserved.unwrap_or(f64::INFINITY)
    } else {
        0.0
    };
    let debt = (-left).min(allowed);
    let granted = match config.kind {
        Kind::TokenBucket => config.rate * (latest - first) as f64 / config.period as f64,
        Kind::FixedWindow => {
            let anchor = fixed_window::anchor(config, id);
            let first_window = fixed_window::window_start(anchor, config.period, first);
            config.rate * ((latest - first_window) / config.period) as f64
        }
        // (Not drawn by kind(): sliding_window_properties.rs and
        // calendar_window_properties.rs check theirs.)
        Kind::SlidingWindow | Kind::CalendarWindow => f64::INFINITY,
    };
    config.capacity() + debt + granted
}

pub fn kind() -> impl Strategy<Value = Kind> {
    prop_oneof![Just(Kind::TokenBucket), Just(Kind::FixedWindow)]
}

prop_compose! {
    pub fn config()(
        kind in kind(),
        rate in 0.01f64..1000.0,
        period in 1_000i64..(24 * 3600 * SECOND),
        capacity_factor in proptest::option::of(0.0f64..3.0),
        max_reserved in proptest::option::of(0.0f64..50.0),
        start in proptest::option::of(-(1i64 << 40)..(1i64 << 40)),
    ) -> Config {
        Config {
            kind,
            rate,
            period,
            capacity: capacity_factor.map(|factor| factor * rate),
            max_reserved,
            shards: 1,
            start: if kind == Kind::FixedWindow { start } else { None },
            block: None,
            calendar: None,
        }
    }
}
