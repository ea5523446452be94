//! Unit tests of `decision.rs`: one call of each kind, reservations,
//! retry_after and the errors of impossible or overflowing calls.

use super::*;

const SECOND: Micros = 1_000_000;
const MINUTE: Micros = 60 * SECOND;
const ID: LimitId<'static> = LimitId {
    name: b"send",
    key: Some(b"42"),
};

fn bucket(rate: f64, capacity: Option<f64>, max_reserved: Option<f64>) -> Config {
    Config {
        kind: Kind::TokenBucket,
        rate,
        period: MINUTE,
        capacity,
        max_reserved,
        shards: 1,
        start: None,
        block: None,
        calendar: None,
    }
}

fn call(
    config: &Config,
    state: &mut Option<State>,
    now: Micros,
    count: f64,
    reserve: bool,
) -> Decision {
    let decision = evaluate(config, ID, *state, now, Request { count, reserve }).unwrap();
    if let Some(new_state) = decision.new_state {
        *state = Some(new_state);
    }
    decision
}

#[test]
fn a_retry_after_at_or_beyond_the_timestamp_limit_is_an_error() {
    // One token at 1 per period is one period away: the period is the
    // estimate. The limit is i64::MAX / 4 microseconds (2^61 as a
    // float): at it and beyond it, out of range; just below, an answer.
    let empty = State {
        value: 0.0,
        ts: 0,
        previous: 0.0,
    };
    for period in [1_i64 << 61, 1_i64 << 62] {
        let config = Config {
            period,
            ..bucket(1.0, None, None)
        };
        let error = retry_after(&config, empty, 1.0, 0.0, 0).unwrap_err();
        assert_eq!(error.kind, crate::error::ErrorKind::OutOfRange, "{period}");
        assert_eq!(error.parameter, "retry_after");
    }
    let period = (1_i64 << 61) - 1024;
    let config = Config {
        period,
        ..bucket(1.0, None, None)
    };
    // (At this size a float step is 256 microseconds: about the period.)
    let delay = retry_after(&config, empty, 1.0, 0.0, 0).unwrap();
    assert!((delay - period).abs() <= 1024, "{delay} vs {period}");
}

#[test]
fn retry_after_is_the_first_admitting_microsecond_despite_rounding() {
    // 2.7 tokens at 3 an hour take 54 minutes, but 54.5 - 51.8 is
    // 2.7000000000000028 in floats: the estimate is 3,240,000,000.0000033
    // microseconds, whose ceiling is one microsecond late. The search
    // steps back to the first microsecond that admits.
    let config = Config {
        period: 60 * MINUTE,
        ..bucket(3.0, Some(60.0), None)
    };
    let state = State {
        value: 51.8,
        ts: 0,
        previous: 0.0,
    };
    assert_eq!(retry_after(&config, state, 54.5, 0.0, 0), Ok(54 * MINUTE));
}

#[test]
fn ten_per_minute_with_a_burst_of_three() {
    let config = bucket(10.0, Some(3.0), None);
    let mut state = None;
    for expected in [2.0, 1.0, 0.0] {
        let decision = call(&config, &mut state, 0, 1.0, false);
        assert!(decision.ok);
        assert_eq!(decision.remaining, expected);
        assert_eq!(decision.retry_after, None);
    }
    let refused = call(&config, &mut state, 0, 1.0, false);
    assert!(!refused.ok);
    assert_eq!(refused.retry_after, Some(6 * SECOND));
    assert_eq!(refused.remaining, 0.0);
    assert_eq!(refused.new_state, None);
    // Exactly retry_after later it succeeds; a microsecond earlier it does not.
    assert!(!call(&config, &mut state, 6 * SECOND - 1, 1.0, false).ok);
    assert!(call(&config, &mut state, 6 * SECOND, 1.0, false).ok);
}

#[test]
fn reservations_go_into_debt_and_say_when_to_run() {
    let config = bucket(10.0, None, None);
    let mut state = Some(State {
        value: 3.0,
        ts: 0,
        previous: 0.0,
    });
    let decision = call(&config, &mut state, 0, 5.0, true);
    assert!(decision.ok);
    assert_eq!(decision.remaining, -2.0);
    assert_eq!(decision.retry_after, Some(12 * SECOND));
    assert_eq!(
        state,
        Some(State {
            value: -2.0,
            ts: 0,
            previous: 0.0
        })
    );
}

#[test]
fn max_reserved_bounds_the_debt() {
    let config = bucket(10.0, None, Some(2.0));
    let mut state = Some(State {
        value: 0.0,
        ts: 0,
        previous: 0.0,
    });
    let refused = call(&config, &mut state, 0, 3.0, true);
    assert!(!refused.ok);
    // Must wait until the debt it leaves (3 - refill) fits 2: one token, 6 s.
    assert_eq!(refused.retry_after, Some(6 * SECOND));
    assert_eq!(
        state,
        Some(State {
            value: 0.0,
            ts: 0,
            previous: 0.0
        })
    );
    let later = call(&config, &mut state, 6 * SECOND, 3.0, true);
    assert!(later.ok);
    assert_eq!(later.remaining, -2.0);
    assert_eq!(later.retry_after, Some(12 * SECOND));
    // max_reserved = 0: no debt at all.
    let strict = bucket(10.0, None, Some(0.0));
    let mut state = Some(State {
        value: 0.5,
        ts: 0,
        previous: 0.0,
    });
    assert!(!call(&strict, &mut state, 0, 1.0, true).ok);
}

#[test]
fn fixed_window_refuses_until_the_next_window() {
    let config = Config {
        kind: Kind::FixedWindow,
        rate: 2.0,
        period: MINUTE,
        capacity: None,
        max_reserved: None,
        shards: 1,
        start: Some(0),
        block: None,
        calendar: None,
    };
    let mut state = None;
    assert!(call(&config, &mut state, 10 * SECOND, 1.0, false).ok);
    assert!(call(&config, &mut state, 20 * SECOND, 1.0, false).ok);
    let refused = call(&config, &mut state, 30 * SECOND, 1.0, false);
    assert!(!refused.ok);
    assert_eq!(refused.retry_after, Some(30 * SECOND));
    assert!(call(&config, &mut state, MINUTE, 1.0, false).ok);
    // A reservation of 5 from 1 left: debt 4 = two windows.
    let reserved = call(&config, &mut state, MINUTE, 5.0, true);
    assert!(reserved.ok);
    assert_eq!(reserved.remaining, -4.0);
    assert_eq!(reserved.retry_after, Some(2 * MINUTE));
}

#[test]
fn a_future_start_does_not_block() {
    let config = Config {
        kind: Kind::FixedWindow,
        rate: 1.0,
        period: MINUTE,
        capacity: None,
        max_reserved: None,
        shards: 1,
        start: Some(100 * MINUTE + 5 * SECOND),
        block: None,
        calendar: None,
    };
    let mut state = None;
    let decision = call(&config, &mut state, 0, 1.0, false);
    assert!(decision.ok);
    assert_eq!(state.map(|s| s.ts), Some(-MINUTE + 5 * SECOND));
    let refused = call(&config, &mut state, 0, 1.0, false);
    assert_eq!(refused.retry_after, Some(5 * SECOND));
}

#[test]
fn impossible_counts_are_errors_not_refusals() {
    let config = bucket(10.0, Some(3.0), Some(1.0));
    assert!(evaluate(
        &config,
        ID,
        None,
        0,
        Request {
            count: 4.0,
            reserve: false
        }
    )
    .is_err());
    assert!(evaluate(
        &config,
        ID,
        None,
        0,
        Request {
            count: 4.0,
            reserve: true
        }
    )
    .is_ok());
    assert!(evaluate(
        &config,
        ID,
        None,
        0,
        Request {
            count: 4.5,
            reserve: true
        }
    )
    .is_err());
}

#[test]
fn unbounded_debt_that_overflows_is_an_error() {
    let config = bucket(1.0, Some(0.0), None);
    let state = Some(State {
        value: -f64::MAX,
        ts: 0,
        previous: 0.0,
    });
    let error = evaluate(
        &config,
        ID,
        state,
        0,
        Request {
            count: f64::MAX,
            reserve: true,
        },
    )
    .unwrap_err();
    assert_eq!(error.kind, crate::ErrorKind::OutOfRange);
}

#[test]
fn retry_after_out_of_range_is_an_error() {
    let config = Config {
        period: i64::MAX / 2,
        ..bucket(1e-300, Some(1.0), None)
    };
    let state = Some(State {
        value: 0.0,
        ts: 0,
        previous: 0.0,
    });
    let error = evaluate(
        &config,
        ID,
        state,
        0,
        Request {
            count: 1.0,
            reserve: false,
        },
    )
    .unwrap_err();
    assert_eq!(error.parameter, "retry_after");
}
