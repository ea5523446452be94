//! Property tests of the rate-limit math: random configurations, random
//! sequences of calls and clock moves (including steps backwards).

mod common;

use common::{config, kind};

use proptest::prelude::*;
use rate_limiter_algorithm::{evaluate, shown, Config, LimitId, Micros, Request, State};

const ID: LimitId<'static> = LimitId {
    name: b"prop",
    key: Some(b"k"),
};
const SECOND: Micros = 1_000_000;

/// One step of a scenario: move the clock by `dt` (may be negative), then
/// ask for `fraction * capacity` tokens (a little beyond, with reserve).
#[derive(Debug, Clone, Copy)]
struct Step {
    dt: Micros,
    fraction: f64,
    reserve: bool,
}

fn steps(period: Micros) -> impl Strategy<Value = Vec<Step>> {
    let step = (
        prop_oneof![
            3 => 0..period / 4 + 1,
            2 => 0..period * 2,
            1 => -(period / 2)..0,
            1 => Just(0i64),
        ],
        0.0f64..1.3,
        proptest::bool::weighted(0.3),
    )
        .prop_map(|(dt, fraction, reserve)| Step {
            dt,
            fraction,
            reserve,
        });
    proptest::collection::vec(step, 1..60)
}

/// Runs a scenario; returns (tokens admitted, time of the call that
/// created the state (a full limit), latest time seen from then on, tokens
/// stored at the end (capacity when no state was written)).
fn run(config: &Config, t0: Micros, steps: &[Step]) -> (f64, Micros, Micros, f64) {
    let mut state: Option<State> = None;
    let (mut now, mut admitted) = (t0, 0.0);
    let (mut first, mut latest) = (t0, t0);
    for step in steps {
        now += step.dt;
        if state.is_none() {
            first = now;
            latest = now;
        }
        latest = latest.max(now);
        let count = step.fraction * config.capacity().max(1.0);
        let request = Request {
            count,
            reserve: step.reserve,
        };
        // Counts that can never succeed are errors; skip them.
        if let Ok(decision) = evaluate(config, ID, state, now, request) {
            if decision.ok {
                admitted += count;
            }
            if let Some(new_state) = decision.new_state {
                state = Some(new_state);
            }
        }
    }
    let left = state.map_or(config.capacity(), |state| state.value);
    (admitted, first, latest, left)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// Admitted tokens never exceed capacity + max_reserved + what the rate
    /// granted since the first call: `rate * elapsed / period` (token
    /// bucket) or `rate * windows started` (fixed window), however the
    /// clock moves. Without reservations max_reserved does not count.
    #[test]
    fn admitted_never_exceeds_the_bound(
        (config, steps) in config().prop_flat_map(|config| (Just(config), steps(config.period))),
        t0 in -(1i64 << 40)..(1i64 << 40),
    ) {
        let (admitted, first, latest, left) = run(&config, t0, &steps);
        let any_reserve = steps.iter().any(|step| step.reserve);
        let bound = common::bound(&config, ID, first, latest, any_reserve, left);
        prop_assert!(bound.is_finite(), "the bound checked must be finite");
        prop_assert!(admitted <= bound + common::slack(bound), "admitted {admitted} > bound {bound}");
    }

    /// A refused call succeeds when repeated exactly `retry_after` later
    /// (nothing else consuming), and not one microsecond earlier.
    #[test]
    fn retrying_exactly_retry_after_later_succeeds(
        config in config(),
        value_fraction in -1.0f64..0.5,
        age in 0i64..(3600 * SECOND),
        now in -(1i64 << 40)..(1i64 << 40),
        count_fraction in 0.5f64..1.5,
        reserve in any::<bool>(),
    ) {
        // Unlimited reservations are never refused.
        let reserve = reserve && config.max_reserved.is_some();
        let capacity = config.capacity();
        let state = State { value: value_fraction * capacity.max(1.0), ts: now - age, previous: 0.0 };
        let request = Request { count: count_fraction * capacity, reserve };
        let Ok(decision) = evaluate(&config, ID, Some(state), now, request) else { return Ok(()) };
        prop_assume!(!decision.ok);
        let retry = decision.retry_after.expect("a refusal has a retry_after");
        prop_assert!(retry > 0);
        let later = evaluate(&config, ID, Some(state), now + retry, request).unwrap();
        prop_assert!(later.ok, "refused again at retry_after {retry}: {later:?}");
        let earlier = evaluate(&config, ID, Some(state), now + retry - 1, request).unwrap();
        prop_assert!(!earlier.ok, "admitted 1 µs before retry_after {retry}");
    }

    /// A reservation's retry_after is when its debt is paid back: a call
    /// for nothing is admitted then without debt, and not a microsecond before.
    #[test]
    fn reserved_work_may_run_at_retry_after(
        config in config(),
        now in -(1i64 << 40)..(1i64 << 40),
        count_fraction in 0.0f64..3.0,
    ) {
        let config = Config { max_reserved: None, ..config };
        let request = Request { count: count_fraction * config.capacity() + 0.5, reserve: true };
        let empty = State { value: 0.0, ts: now, previous: 0.0 };
        let decision = evaluate(&config, ID, Some(empty), now, request).unwrap();
        prop_assert!(decision.ok);
        let retry = decision.retry_after.expect("debt means a retry_after");
        let state = decision.new_state.unwrap();
        let nothing = Request { count: 0.0, reserve: false };
        prop_assert!(evaluate(&config, ID, Some(state), now + retry, nothing).unwrap().ok);
        prop_assert!(!evaluate(&config, ID, Some(state), now + retry - 1, nothing).unwrap().ok);
    }

    /// A call asking for exactly the `remaining` it was shown (at most
    /// nine decimals: docs/semantics.md, "What a call shows") is admitted,
    /// at once and later, without reserving, after an admission or a
    /// refusal; and it never leaves the limit more than noise (10^-12,
    /// relative above one token) below zero.
    #[test]
    fn a_count_equal_to_the_shown_remaining_is_admitted(
        config in config(),
        value_fraction in 0.0f64..1.0,
        noise in -1e-12f64..1e-12,
        age in 0i64..(3600 * SECOND),
        now in -(1i64 << 40)..(1i64 << 40),
        count_fraction in 0.0f64..1.5,
        later in 0i64..(60 * SECOND),
    ) {
        let capacity = config.capacity();
        let state = State { value: value_fraction * capacity + noise, ts: now - age, previous: 0.0 };
        let first = Request { count: count_fraction * capacity, reserve: false };
        let Ok(decision) = evaluate(&config, ID, Some(state), now, first) else { return Ok(()) };
        let after = decision.new_state.unwrap_or(state);
        let remaining = shown(decision.remaining);
        prop_assume!(remaining > 0.0 && remaining <= capacity);
        let exactly = Request { count: remaining, reserve: false };
        for at in [now, now + later] {
            let call = evaluate(&config, ID, Some(after), at, exactly).unwrap();
            prop_assert!(call.ok, "count {remaining} = the shown remaining refused at {at}: {call:?}");
            let left = call.new_state.unwrap().value;
            prop_assert!(left >= -1e-12 * remaining.max(1.0), "left {left} tokens");
        }
    }

    /// A clock step backwards adds no tokens and never moves ts back.
    #[test]
    fn the_clock_moving_backwards_never_adds_tokens(
        config in config(),
        value_fraction in -1.0f64..1.0,
        ts in -(1i64 << 40)..(1i64 << 40),
        back in 1i64..(3600 * SECOND),
    ) {
        let state = State { value: value_fraction * config.capacity(), ts, previous: 0.0 };
        let nothing = Request { count: 0.0, reserve: true };
        let decision = evaluate(&config, ID, Some(state), ts - back, nothing).unwrap();
        prop_assert!(decision.remaining <= state.value.min(config.capacity()));
        if let Some(new_state) = decision.new_state {
            prop_assert!(new_state.ts >= state.ts);
        }
    }

    /// Extreme floats and times never panic: every call returns a decision
    /// or an error.
    #[test]
    fn extreme_inputs_never_panic(
        kind in kind(),
        rate in prop_oneof![Just(f64::MIN_POSITIVE), Just(1e-300), Just(1e308), Just(f64::MAX), 1e-9f64..1e9],
        period in prop_oneof![Just(1i64), Just(i64::MAX), 1i64..i64::MAX],
        capacity in proptest::option::of(prop_oneof![Just(0.0), Just(f64::MAX), 0.0f64..1e300]),
        max_reserved in proptest::option::of(prop_oneof![Just(0.0), Just(f64::MAX), 0.0f64..1e300]),
        value in prop_oneof![Just(-f64::MAX), Just(f64::MAX), Just(0.0), -1e300f64..1e300],
        ts in prop_oneof![Just(i64::MIN), Just(i64::MAX), any::<i64>()],
        now in prop_oneof![Just(i64::MIN), Just(i64::MAX), any::<i64>()],
        count in prop_oneof![Just(0.0), Just(f64::MAX), Just(f64::NAN), Just(f64::INFINITY), Just(-1.0), 0.0f64..1e300],
        reserve in any::<bool>(),
        start in proptest::option::of(any::<i64>()),
    ) {
        let config = Config { kind, rate, period, capacity, max_reserved, shards: 1, start, block: None, calendar: None };
        prop_assume!(config.validate().is_ok());
        let request = Request { count, reserve };
        let _ = evaluate(&config, ID, Some(State { value, ts, previous: 0.0 }), now, request);
        let _ = evaluate(&config, ID, None, now, request);
    }
}
