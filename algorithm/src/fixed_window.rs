//! Fixed window: `rate` tokens are granted at the start of each window, up
//! to `capacity`. Windows start at `anchor + k * period` for integer `k`.

use crate::config::Config;
use crate::state::{LimitId, State};
use crate::time::Micros;
use xxhash_rust::xxh3::Xxh3;

/// The anchor of a limit's windows: `start` when given, else a phase in
/// `[0, period)` derived from a hash of (name, key), stable across calls,
/// checks, resets, backends and versions, and spread across keys so that
/// not every key's window opens at the same instant.
pub fn anchor(config: &Config, id: LimitId<'_>) -> Micros {
    match config.start {
        Some(start) => start,
        None => phase(id, config.period),
    }
}

/// The per-key phase: xxh3-64 of the name and key (length-prefixed, with a
/// marker that tells the global limit apart from the key `''`) modulo the period.
fn phase(id: LimitId<'_>, period: Micros) -> Micros {
    let mut hasher = Xxh3::new();
    hasher.update(&(id.name.len() as u64).to_le_bytes());
    hasher.update(id.name);
    match id.key {
        None => hasher.update(&[0]),
        Some(key) => {
            hasher.update(&[1]);
            hasher.update(key);
        }
    }
    // period > 0, so the remainder is in [0, period).
    (hasher.digest() % period as u64) as Micros
}

/// The start of the window that contains `now`: the greatest
/// `anchor + k * period <= now`. Saturates at the ends of the `i64` range.
pub fn window_start(anchor: Micros, period: Micros, now: Micros) -> Micros {
    let (anchor, period, now) = (i128::from(anchor), i128::from(period), i128::from(now));
    let start = anchor + (now - anchor).div_euclid(period) * period;
    start.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as Micros
}

/// The state of a limit that has no row yet: full, at the start of the
/// current window.
pub fn initial_state(config: &Config, anchor: Micros, now: Micros) -> State {
    State {
        value: config.capacity(),
        ts: window_start(anchor, config.period, now),
        previous: 0.0,
    }
}

/// The state at `now`: `k = floor((now - ts) / period)` windows (never
/// negative) have started since `ts`; each adds `rate` tokens, capped at
/// the capacity, and `ts` moves to the start of the current window.
pub fn refill(config: &Config, state: State, now: Micros) -> State {
    let elapsed = now.saturating_sub(state.ts).max(0);
    let windows = elapsed / config.period;
    State {
        value: (state.value + windows as f64 * config.rate).min(config.capacity()),
        // windows * period <= elapsed, so this stays within [ts, now].
        ts: state.ts + windows * config.period,
        previous: 0.0,
    }
}

/// Microseconds from `now` until `tokens` more tokens have been granted in
/// the refilled state `refilled`: `ts + period * ceil(tokens / rate) - now`.
pub fn wait(config: &Config, refilled: State, tokens: f64, now: Micros) -> f64 {
    let windows = (tokens / config.rate).ceil();
    (i128::from(refilled.ts) - i128::from(now)) as f64 + windows * config.period as f64
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Kind;

    const HOUR: Micros = 3_600_000_000;

    fn config(start: Option<Micros>) -> Config {
        Config {
            kind: Kind::FixedWindow,
            rate: 100.0,
            period: HOUR,
            capacity: None,
            max_reserved: None,
            shards: 1,
            start,
            block: None,
            calendar: None,
        }
    }

    #[test]
    fn window_start_handles_anchors_before_and_after_now() {
        assert_eq!(window_start(0, 10, 25), 20);
        assert_eq!(window_start(3, 10, 25), 23);
        assert_eq!(window_start(1_000, 10, 25), 20);
        assert_eq!(window_start(0, 10, -5), -10);
        assert_eq!(window_start(0, 10, 20), 20);
    }

    #[test]
    fn phase_is_stable_and_spread() {
        let config = config(None);
        let a = anchor(
            &config,
            LimitId {
                name: b"api",
                key: Some(b"alice"),
            },
        );
        assert_eq!(
            a,
            anchor(
                &config,
                LimitId {
                    name: b"api",
                    key: Some(b"alice")
                }
            )
        );
        assert!((0..HOUR).contains(&a));
        let global = anchor(
            &config,
            LimitId {
                name: b"api",
                key: None,
            },
        );
        let empty = anchor(
            &config,
            LimitId {
                name: b"api",
                key: Some(b""),
            },
        );
        assert_ne!(global, empty);
        let distinct: std::collections::HashSet<Micros> = (0..100)
            .map(|i| {
                anchor(
                    &config,
                    LimitId {
                        name: b"api",
                        key: Some(i.to_string().as_bytes()),
                    },
                )
            })
            .collect();
        assert!(distinct.len() > 90);
    }

    #[test]
    fn start_is_the_anchor() {
        assert_eq!(
            anchor(
                &config(Some(42)),
                LimitId {
                    name: b"x",
                    key: None
                }
            ),
            42
        );
    }

    #[test]
    fn refill_grants_rate_per_started_window() {
        let config = config(Some(0));
        let state = State {
            value: 0.0,
            ts: 0,
            previous: 0.0,
        };
        assert_eq!(
            refill(&config, state, HOUR - 1),
            State {
                value: 0.0,
                ts: 0,
                previous: 0.0
            }
        );
        assert_eq!(
            refill(&config, state, HOUR),
            State {
                value: 100.0,
                ts: HOUR,
                previous: 0.0
            }
        );
        // Capped at capacity (= rate).
        assert_eq!(
            refill(&config, state, 5 * HOUR + 7),
            State {
                value: 100.0,
                ts: 5 * HOUR,
                previous: 0.0
            }
        );
        // Backwards: nothing.
        assert_eq!(
            refill(
                &config,
                State {
                    value: 1.0,
                    ts: HOUR,
                    previous: 0.0
                },
                0
            ),
            State {
                value: 1.0,
                ts: HOUR,
                previous: 0.0
            }
        );
    }
}
