//! Giving tokens back (SQL `rate_limiter.rate_credit`): "reserve an
//! estimate, settle the actual cost". A credit refills the limit to `now`,
//! then adds the tokens, never above capacity; a sharded limit takes them
//! into its emptiest shards first, each up to its own capacity.

use crate::config::Config;
use crate::config::Kind;
use crate::decision::{refill, tokens};
use crate::error::{show, LimitError};
use crate::state::State;
use crate::time::Micros;

/// Checks a credit's `count`: finite and >= 0.
///
/// Errors: `InvalidParameter` naming `count`.
pub fn validate_credit(count: f64) -> Result<(), LimitError> {
    if count.is_finite() && count >= 0.0 {
        Ok(())
    } else {
        Err(LimitError::invalid(
            "count",
            format!(
                "count must be finite and at least zero, got {}",
                show(count)
            ),
        ))
    }
}

/// Credits `count` tokens to the shards whose stored states are `stored`
/// (each `Some`; a shard without a row is full and takes nothing), under
/// the per-shard config `shard` (`config.shard()`), at `now`. Returns the
/// new state of each shard, in order, filling the emptiest first.
pub fn credit(shard: &Config, stored: &[State], count: f64, now: Micros) -> Vec<State> {
    let mut states: Vec<State> = stored.iter().map(|s| refill(shard, *s, now)).collect();
    let values: Vec<f64> = states.iter().map(|s| tokens(shard, *s, now)).collect();
    let mut order: Vec<usize> = (0..states.len()).collect();
    order.sort_by(|a, b| values[*a].total_cmp(&values[*b]));
    let mut left = count;
    for index in order {
        if left <= 0.0 {
            break;
        }
        let state = &mut states[index];
        // A sliding window gives back at most what its current window
        // admitted: its previous window's count is history.
        let room = match shard.kind {
            Kind::SlidingWindow => state.value,
            Kind::TokenBucket | Kind::FixedWindow | Kind::CalendarWindow => {
                shard.capacity() - state.value
            }
        }
        .max(0.0);
        let taken = room.min(left);
        match shard.kind {
            Kind::SlidingWindow => state.value -= taken,
            Kind::TokenBucket | Kind::FixedWindow | Kind::CalendarWindow => state.value += taken,
        }
        left -= taken;
    }
    states
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: Micros = 1_000_000;

    fn bucket(shards: i32) -> Config {
        Config {
            kind: Kind::TokenBucket,
            rate: 1000.0,
            period: 60 * SECOND,
            capacity: None,
            max_reserved: None,
            shards,
            start: None,
            block: None,
            calendar: None,
        }
    }

    #[test]
    fn settling_an_estimate_gives_the_unused_tokens_back() {
        // Reserved 1,000 of 1,000, used 612: credit 388.
        let after = credit(
            &bucket(1),
            &[State {
                value: 0.0,
                ts: 0,
                previous: 0.0,
            }],
            388.0,
            0,
        );
        assert_eq!(
            after,
            vec![State {
                value: 388.0,
                ts: 0,
                previous: 0.0
            }]
        );
    }

    #[test]
    fn a_credit_refills_first_and_never_exceeds_capacity() {
        // 6 s later 100 tokens have arrived: 900 + 500 caps at 1,000.
        let after = credit(
            &bucket(1),
            &[State {
                value: 800.0,
                ts: 0,
                previous: 0.0,
            }],
            500.0,
            6 * SECOND,
        );
        assert_eq!(
            after,
            vec![State {
                value: 1000.0,
                ts: 6 * SECOND,
                previous: 0.0
            }]
        );
    }

    #[test]
    fn a_debt_is_paid_down() {
        let after = credit(
            &bucket(1),
            &[State {
                value: -300.0,
                ts: 0,
                previous: 0.0,
            }],
            100.0,
            0,
        );
        assert_eq!(after[0].value, -200.0);
    }

    #[test]
    fn shards_fill_emptiest_first_each_to_its_capacity() {
        let shard = bucket(4).shard(); // 250 each
        let stored = [
            State {
                value: 200.0,
                ts: 0,
                previous: 0.0,
            },
            State {
                value: 0.0,
                ts: 0,
                previous: 0.0,
            },
        ];
        // The emptier shard takes 250, the other the 30 left.
        let after = credit(&shard, &stored, 280.0, 0);
        assert_eq!(after[1].value, 250.0);
        assert_eq!(after[0].value, 230.0);
    }

    #[test]
    fn counts_must_be_finite_and_not_negative() {
        assert!(validate_credit(0.0).is_ok());
        assert!(validate_credit(-1.0).is_err());
        assert!(validate_credit(f64::NAN).is_err());
        assert!(validate_credit(f64::INFINITY).is_err());
    }
}
