//! Shared by the property tests: the bound no sequence of calls may exceed.

use rate_limiter_algorithm::{fixed_window, Config, Kind, LimitId, Micros};

/// Relative slack for float comparisons of sums of many terms.
pub fn slack(bound: f64) -> f64 {
    1e-9 * bound.abs().max(1.0)
}

/// The most tokens a limit may admit between its first call at `first`
/// (when it was full) and `latest`: capacity, plus max_reserved when any
/// call reserved, plus what the rate granted: `rate * elapsed / period`
/// (token bucket) or `rate * windows started` (fixed window).
pub fn bound(
    config: &Config,
    id: LimitId<'_>,
    first: Micros,
    latest: Micros,
    reserved: bool,
) -> f64 {
    let debt = if reserved {
        config.max_reserved.unwrap_or(f64::INFINITY)
    } else {
        0.0
    };
    let granted = match config.kind {
        Kind::TokenBucket => config.rate * (latest - first) as f64 / config.period as f64,
        Kind::FixedWindow => {
            let anchor = fixed_window::anchor(config, id);
            let first_window = fixed_window::window_start(anchor, config.period, first);
            config.rate * ((latest - first_window) / config.period) as f64
        }
    };
    config.capacity() + debt + granted
}
