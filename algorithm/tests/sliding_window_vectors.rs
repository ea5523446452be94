//! The sliding window's golden vectors (docs/shapes.md, the issue's
//! examples) through [`evaluate`], the function every call uses, and its
//! window moves through [`sliding_window::refill`].

use rate_limiter_algorithm::sliding_window::{initial_state, refill};
use rate_limiter_algorithm::{evaluate, Config, Decision, Kind, LimitId, Micros, Request, State};

const SECOND: Micros = 1_000_000;
const MINUTE: Micros = 60 * SECOND;
const ID: LimitId<'static> = LimitId {
    name: b"s",
    key: None,
};

fn config(rate: f64, max_reserved: Option<f64>) -> Config {
    Config {
        kind: Kind::SlidingWindow,
        rate,
        period: MINUTE,
        capacity: None,
        max_reserved,
        shards: 1,
        start: Some(0),
        block: None,
        calendar: None,
    }
}

fn stored(previous: f64, current: f64) -> State {
    State {
        value: current,
        ts: 0,
        previous,
    }
}

fn call(config: &Config, state: State, now: Micros, count: f64, reserve: bool) -> Decision {
    evaluate(config, ID, Some(state), now, Request { count, reserve }).unwrap()
}

#[test]
fn the_issues_vectors() {
    // L = 50, prev 42, cur 17, t = 15 s: 42 * 0.75 + 17 + 1 = 49.5.
    let at = 15 * SECOND;
    let decision = call(&config(50.0, None), stored(42.0, 17.0), at, 1.0, false);
    assert!(decision.ok);
    assert_eq!(decision.remaining, 0.5);
    assert_eq!(decision.new_state, Some(stored(42.0, 18.0)));
    // cur 18: refused, remaining 0.5, retry after 11/42 of the window
    // from its start, rounded up to the microsecond.
    let decision = call(&config(50.0, None), stored(42.0, 18.0), at, 1.0, false);
    assert!(!decision.ok);
    assert_eq!(decision.remaining, 0.5);
    assert_eq!(decision.retry_after, Some(714_286));
    assert_eq!(decision.new_state, None);
    // L = 10, cur 8, count 5: refused, remaining 2, nothing consumed.
    let decision = call(&config(10.0, None), stored(0.0, 8.0), at, 5.0, false);
    assert!(!decision.ok);
    assert_eq!(decision.remaining, 2.0);
    assert_eq!(decision.new_state, None);
}

#[test]
fn windows_advance_by_one_or_start_over() {
    let c = config(10.0, None);
    let state = stored(3.0, 7.0);
    assert_eq!(refill(&c, state, 30 * SECOND), state);
    assert_eq!(
        refill(&c, state, MINUTE + 1),
        State {
            value: 0.0,
            ts: MINUTE,
            previous: 7.0
        }
    );
    assert_eq!(
        refill(&c, state, 2 * MINUTE),
        initial_state(&c, 0, 2 * MINUTE)
    );
    // The clock went back: the counts stand.
    assert_eq!(refill(&c, state, -SECOND), state);
}

#[test]
fn retry_after_reaches_the_next_window_and_the_one_after() {
    let c = config(10.0, None);
    // Full this window (prev 0, cur 10): the next window weighs 10 * (1 - f),
    // so one more fits at f = 0.1.
    let decision = call(&c, stored(0.0, 10.0), 0, 1.0, false);
    assert_eq!(decision.retry_after, Some(MINUTE + 6 * SECOND));
    // A count of the whole rate waits for the window after next.
    let decision = call(&c, stored(0.0, 10.0), 0, 10.0, false);
    assert_eq!(decision.retry_after, Some(2 * MINUTE));
    // More than the rate, even with reserve: an error, never admitted.
    let request = Request {
        count: 11.0,
        reserve: true,
    };
    let error = evaluate(&c, ID, None, 0, request).unwrap_err();
    assert_eq!(error.parameter, "count");
}

#[test]
fn a_reservation_waits_until_the_call_would_have_fit() {
    let c = config(10.0, Some(5.0));
    let decision = call(&c, stored(0.0, 10.0), 0, 1.0, true);
    assert!(decision.ok);
    assert_eq!(decision.retry_after, Some(MINUTE + 6 * SECOND));
    assert_eq!(decision.remaining, -1.0);
    // Beyond max_reserved: refused.
    assert!(!call(&c, stored(0.0, 15.0), 0, 1.0, true).ok);
}
