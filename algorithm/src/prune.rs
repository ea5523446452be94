//! Housekeeping (SQL `rate_limiter.prune`): which state rows can be
//! deleted without changing any later answer.
//!
//! A missing row is a full limit ([`crate::evaluate`] starts from the
//! initial state at `now`). A stored row can go when, at `now`, it says
//! exactly that: its state refilled to `now` equals the initial state at
//! `now` (token bucket: full, with `ts` not after `now`; fixed window: full,
//! in the window a missing row would start). From then on both refill the
//! same way, so every call at `now` or later gets the same answer from the
//! row as from no row. (A clock that later steps back before `now` is not
//! covered: a missing row is full at any time, the row may not have been.)

use crate::config::Config;
use crate::decision::{initial_state, refill};
use crate::state::{LimitId, State};
use crate::time::Micros;

/// Whether the state `stored` of one shard of limit `id` (with the shard's
/// config, [`Config::shard`]) changes no answer of a call at `now` or later.
pub fn prunable(shard: &Config, id: LimitId<'_>, stored: State, now: Micros) -> bool {
    refill(shard, stored, now) == initial_state(shard, id, now)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Kind;

    const SECOND: Micros = 1_000_000;
    const ID: LimitId<'static> = LimitId {
        name: b"p",
        key: None,
    };

    fn config(kind: Kind) -> Config {
        Config {
            kind,
            rate: 10.0,
            period: SECOND,
            capacity: None,
            max_reserved: None,
            shards: 1,
            start: Some(0),
            block: None,
            calendar: None,
        }
    }

    #[test]
    fn token_bucket_full_and_not_ahead() {
        let c = config(Kind::TokenBucket);
        assert!(prunable(
            &c,
            ID,
            State {
                value: 0.0,
                ts: 0,
                previous: 0.0
            },
            SECOND
        ));
        assert!(!prunable(
            &c,
            ID,
            State {
                value: 0.0,
                ts: 0,
                previous: 0.0
            },
            SECOND - 1
        ));
        assert!(prunable(
            &c,
            ID,
            State {
                value: 10.0,
                ts: 5,
                previous: 0.0
            },
            5
        ));
        // Full, but stamped after now (the clock stepped back): not yet.
        assert!(!prunable(
            &c,
            ID,
            State {
                value: 10.0,
                ts: 6,
                previous: 0.0
            },
            5
        ));
        assert!(!prunable(
            &c,
            ID,
            State {
                value: -1.0,
                ts: 0,
                previous: 0.0
            },
            SECOND
        ));
    }

    #[test]
    fn fixed_window_full_in_the_current_window() {
        let c = config(Kind::FixedWindow);
        assert!(!prunable(
            &c,
            ID,
            State {
                value: 3.0,
                ts: 0,
                previous: 0.0
            },
            SECOND - 1
        ));
        assert!(prunable(
            &c,
            ID,
            State {
                value: 3.0,
                ts: 0,
                previous: 0.0
            },
            SECOND
        ));
        assert!(prunable(
            &c,
            ID,
            State {
                value: 10.0,
                ts: 0,
                previous: 0.0
            },
            5
        ));
        // A window ahead of now (the clock stepped back).
        assert!(!prunable(
            &c,
            ID,
            State {
                value: 10.0,
                ts: SECOND,
                previous: 0.0
            },
            5
        ));
    }
}
