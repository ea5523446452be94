//! Token bucket: tokens arrive continuously at `rate / period` per
//! microsecond, up to `capacity`.

use crate::config::Config;
use crate::state::State;
use crate::time::Micros;

/// The state of a limit that has no row yet: a full bucket at `now`.
pub fn initial_state(config: &Config, now: Micros) -> State {
    State {
        value: config.capacity(),
        ts: now,
        previous: 0.0,
    }
}

/// The state at `now`: `value + elapsed * rate / period` capped at the
/// capacity, with `ts = max(ts, now)`. Time never runs backwards: a `now`
/// before `ts` adds nothing.
pub fn refill(config: &Config, state: State, now: Micros) -> State {
    let elapsed = now.saturating_sub(state.ts).max(0);
    // Multiply first: exact for whole numbers, no float noise from rate / period.
    let added = (elapsed as f64 * config.rate) / config.period as f64;
    State {
        value: (state.value + added).min(config.capacity()),
        ts: state.ts.max(now),
        previous: 0.0,
    }
}

/// Microseconds from `now` until `tokens` more tokens have arrived in the
/// refilled state `refilled` (not rounded): `(ts - now) + tokens * period / rate`.
pub fn wait(config: &Config, refilled: State, tokens: f64, now: Micros) -> f64 {
    (i128::from(refilled.ts) - i128::from(now)) as f64
        + (tokens * config.period as f64) / config.rate
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Kind;

    const MINUTE: Micros = 60_000_000;
    const SECOND: Micros = 1_000_000;

    fn config(rate: f64, capacity: f64) -> Config {
        Config {
            kind: Kind::TokenBucket,
            rate,
            period: MINUTE,
            capacity: Some(capacity),
            max_reserved: None,
            shards: 1,
            start: None,
            block: None,
            calendar: None,
        }
    }

    #[test]
    fn the_token_bucket_doc_table() {
        // Capacity 20, 10 per minute: 20, send 5 at 1 s -> 15, 15.67 at 5 s,
        // 16.5 at 10 s, full (20) again at 60 s.
        let config = config(10.0, 20.0);
        let full = initial_state(&config, 0);
        assert_eq!(refill(&config, full, SECOND).value, 20.0);
        let after_send = State {
            value: 15.0,
            ts: SECOND,
            previous: 0.0,
        };
        let at5 = refill(&config, after_send, 5 * SECOND).value;
        assert!((at5 - 15.0 - 4.0 / 6.0).abs() < 1e-12, "{at5}");
        assert!((at5 - 15.67).abs() < 0.005);
        assert_eq!(refill(&config, after_send, 10 * SECOND).value, 16.5);
        assert_eq!(refill(&config, after_send, 60 * SECOND).value, 20.0);
    }

    #[test]
    fn clock_moving_backwards_adds_nothing() {
        let config = config(10.0, 20.0);
        let state = State {
            value: 1.0,
            ts: 10 * SECOND,
            previous: 0.0,
        };
        let earlier = refill(&config, state, 2 * SECOND);
        assert_eq!(
            earlier,
            State {
                value: 1.0,
                ts: 10 * SECOND,
                previous: 0.0
            }
        );
    }

    #[test]
    fn wait_is_exact_for_whole_numbers() {
        let config = config(10.0, 3.0);
        let state = State {
            value: 0.0,
            ts: 0,
            previous: 0.0,
        };
        assert_eq!(wait(&config, state, 1.0, 0), 6_000_000.0);
    }
}
