//! The current state of a limit, without consuming: what a UI shows (SQL
//! `rate_limiter.status`) and what the `RateLimit` HTTP header reports.

use crate::config::Config;
use crate::decision::{initial_state, refill, retry_after, tokens};
use crate::error::LimitError;
use crate::state::{LimitId, State};
use crate::time::Micros;

/// A limit as it stands at some instant.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Status {
    /// Tokens available now, summed over the shards (negative in debt).
    pub value: f64,
    /// The most tokens the limit holds (all shards together).
    pub capacity: f64,
    /// When the limit is full again if nothing consumes: `now` when full,
    /// else the latest of its shards' full times (microseconds since
    /// 2000-01-01 UTC).
    pub full_at: Micros,
}

/// The status of a limit at `now`, from the stored state of each of its
/// shards (`stored[i]` is shard `i`; `None` = no row = full; one element
/// for an unsharded limit). `config` must be valid.
///
/// Errors: `OutOfRange` when `full_at` does not fit (extreme configs).
pub fn status(
    config: &Config,
    id: LimitId<'_>,
    stored: &[Option<State>],
    now: Micros,
) -> Result<Status, LimitError> {
    let shard = config.shard();
    let mut value = 0.0;
    let mut full_at = now;
    for state in stored {
        let state = state.unwrap_or_else(|| initial_state(&shard, id, now));
        let tokens = tokens(&shard, refill(&shard, state, now), now);
        value += tokens;
        if tokens < shard.capacity() {
            // The first instant at which this shard holds its capacity.
            let wait = retry_after(&shard, state, shard.capacity(), 0.0, now)?;
            full_at = full_at.max(now.saturating_add(wait));
        }
    }
    Ok(Status {
        value,
        capacity: config.capacity(),
        full_at,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Kind;

    const SECOND: Micros = 1_000_000;
    const ID: LimitId<'static> = LimitId {
        name: b"ui",
        key: None,
    };

    fn bucket(shards: i32) -> Config {
        Config {
            kind: Kind::TokenBucket,
            rate: 10.0,
            period: SECOND,
            capacity: None,
            max_reserved: None,
            shards,
            start: None,
            block: None,
            calendar: None,
        }
    }

    #[test]
    fn a_full_limit_is_full_now() {
        let status = status(&bucket(1), ID, &[None], 5 * SECOND).unwrap();
        assert_eq!(
            status,
            Status {
                value: 10.0,
                capacity: 10.0,
                full_at: 5 * SECOND
            }
        );
    }

    #[test]
    fn a_bucket_in_debt_is_full_once_debt_and_capacity_have_refilled() {
        let state = State {
            value: -5.0,
            ts: 0,
            previous: 0.0,
        };
        let status = status(&bucket(1), ID, &[Some(state)], SECOND / 2).unwrap();
        assert_eq!(status.value, 0.0);
        // 15 tokens at 10 per second from ts 0.
        assert_eq!(status.full_at, 3 * SECOND / 2);
    }

    #[test]
    fn shards_sum_and_the_slowest_decides_full_at() {
        // Two shards of 5 tokens, 5 per second each.
        let stored = [
            Some(State {
                value: 0.0,
                ts: 0,
                previous: 0.0,
            }),
            None,
        ];
        let status = status(&bucket(2), ID, &stored, 0).unwrap();
        assert_eq!(status.value, 5.0);
        assert_eq!(status.capacity, 10.0);
        assert_eq!(status.full_at, SECOND);
    }

    #[test]
    fn a_fixed_window_is_full_at_a_window_start() {
        let config = Config {
            kind: Kind::FixedWindow,
            start: Some(0),
            ..bucket(1)
        };
        let stored = [Some(State {
            value: 3.0,
            ts: 0,
            previous: 0.0,
        })];
        let status = status(&config, ID, &stored, SECOND / 4).unwrap();
        assert_eq!(status.value, 3.0);
        assert_eq!(status.full_at, SECOND);
    }
}
