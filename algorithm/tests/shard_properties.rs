//! Property tests of sharded limits: random configurations split over 2 to
//! 40 shards, random pairs of shards (some of them read-only, as when
//! another transaction holds them), random counts and clock moves.

mod common;

use proptest::prelude::*;
use rate_limiter_algorithm::{
    evaluate_pair, Candidate, Config, Kind, LimitId, Micros, Request, State,
};

const ID: LimitId<'static> = LimitId {
    name: b"prop",
    key: None,
};
const SECOND: Micros = 1_000_000;

prop_compose! {
    fn config()(
        fixed in any::<bool>(),
        rate in 0.5f64..1000.0,
        period in 1_000i64..(3600 * SECOND),
        capacity_factor in proptest::option::of(0.1f64..3.0),
        max_reserved in proptest::option::of(0.0f64..50.0),
        shards in 2i32..40,
        start in proptest::option::of(-(1i64 << 40)..(1i64 << 40)),
    ) -> Config {
        let kind = if fixed { Kind::FixedWindow } else { Kind::TokenBucket };
        Config {
            kind,
            rate,
            period,
            capacity: capacity_factor.map(|factor| factor * rate),
            max_reserved,
            shards,
            start: if fixed { start } else { None },
            block: None,
            calendar: None,
        }
    }
}

/// One call: move the clock by `dt`, look at shards `a` and `b` (made
/// distinct), each writable or not, ask for `fraction` of two shards' capacity.
#[derive(Debug, Clone, Copy)]
struct Step {
    dt: Micros,
    a: usize,
    b: usize,
    writable: [bool; 2],
    fraction: f64,
    reserve: bool,
}

fn steps(period: Micros) -> impl Strategy<Value = Vec<Step>> {
    let step = (
        prop_oneof![3 => 0..period / 4 + 1, 2 => 0..period * 2, 1 => -(period / 2)..0, 1 => Just(0i64)],
        0usize..1000,
        0usize..1000,
        (proptest::bool::weighted(0.8), proptest::bool::weighted(0.8)),
        0.0f64..1.2,
        proptest::bool::weighted(0.3),
    )
        .prop_map(|(dt, a, b, writable, fraction, reserve)| Step {
            dt,
            a,
            b,
            writable: [writable.0, writable.1],
            fraction,
            reserve,
        });
    proptest::collection::vec(step, 1..80)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// However the pairs fall, the shards together never admit more than
    /// the unsharded limit: capacity + max_reserved + what the rate granted
    /// since the first call. Read-only shards are never written.
    #[test]
    fn sharded_limits_never_exceed_the_unsharded_bound(
        (config, steps) in config().prop_flat_map(|config| (Just(config), steps(config.period))),
        t0 in -(1i64 << 40)..(1i64 << 40),
    ) {
        let n = config.shards as usize;
        let mut states: Vec<Option<State>> = vec![None; n];
        let (mut now, mut admitted) = (t0, 0.0);
        // The first call need not be the earliest: the clock also moves
        // back, and a shard first used then starts full then. No shard
        // holds tokens from before the earliest call.
        let (mut earliest, mut latest, mut any_reserve) = (i64::MAX, i64::MIN, false);
        for step in &steps {
            now += step.dt;
            earliest = earliest.min(now);
            latest = latest.max(now);
            let a = step.a % n;
            let b = (a + 1 + step.b % (n - 1)) % n;
            let pair = [a, b];
            let candidates = [0, 1].map(|i| Candidate { stored: states[pair[i]], writable: step.writable[i] });
            let count = step.fraction * 2.0 * config.shard().capacity();
            let request = Request { count, reserve: step.reserve };
            let Ok(decision) = evaluate_pair(&config, ID, candidates, now, request) else { continue };
            if decision.ok {
                admitted += count;
                any_reserve |= step.reserve;
            }
            for i in 0..2 {
                if let Some(state) = decision.new_states[i] {
                    prop_assert!(step.writable[i], "wrote a read-only shard");
                    states[pair[i]] = Some(state);
                }
            }
            if !decision.ok {
                prop_assert_eq!(decision.new_states, [None, None]);
            }
        }
        let shard_capacity = config.shard().capacity();
        let left: f64 = states.iter().map(|state| state.map_or(shard_capacity, |s| s.value)).sum();
        let bound = common::bound(&config, ID, earliest, latest, any_reserve, left);
        prop_assert!(bound.is_finite(), "the bound checked must be finite");
        prop_assert!(admitted <= bound + common::slack(bound), "admitted {admitted} > bound {bound}");
    }

    /// A refused call succeeds when repeated exactly `retry_after` later on
    /// the same two shards (both free, nothing else consuming), and not one
    /// microsecond earlier.
    #[test]
    fn retrying_the_same_pair_exactly_retry_after_later_succeeds(
        config in config(),
        fractions in (-1.0f64..0.5, -1.0f64..0.5),
        ages in (0i64..(10 * SECOND), 0i64..(10 * SECOND)),
        now in -(1i64 << 40)..(1i64 << 40),
        count_fraction in 0.6f64..1.0,
        reserve in any::<bool>(),
    ) {
        let reserve = reserve && config.max_reserved.is_some();
        let shard = config.shard();
        let state = |fraction: f64, age: Micros| State { value: fraction * shard.capacity(), ts: now - age, previous: 0.0 };
        let candidates = [
            Candidate { stored: Some(state(fractions.0, ages.0)), writable: true },
            Candidate { stored: Some(state(fractions.1, ages.1)), writable: true },
        ];
        let request = Request { count: count_fraction * 2.0 * shard.capacity(), reserve };
        let Ok(decision) = evaluate_pair(&config, ID, candidates, now, request) else { return Ok(()) };
        prop_assume!(!decision.ok);
        let retry = decision.retry_after.expect("a refusal has a retry_after");
        prop_assert!(retry > 0);
        let later = evaluate_pair(&config, ID, candidates, now + retry, request).unwrap();
        prop_assert!(later.ok, "refused again at retry_after {retry}: {later:?}");
        if retry > 1 {
            let earlier = evaluate_pair(&config, ID, candidates, now + retry - 1, request).unwrap();
            prop_assert!(!earlier.ok, "admitted 1 µs before retry_after {retry}");
        }
    }

    /// Two new (full) shards together serve exactly what two shards hold,
    /// leaving both empty.
    #[test]
    fn a_pair_of_equal_full_shards_serves_what_two_shards_hold(
        config in config(),
        now in -(1i64 << 40)..(1i64 << 40),
    ) {
        let new = Candidate { stored: None, writable: true };
        let all = Request { count: 2.0 * config.shard().capacity(), reserve: false };
        let decision = evaluate_pair(&config, ID, [new, new], now, all).unwrap();
        prop_assert!(decision.ok);
        for state in decision.new_states {
            prop_assert!(state.unwrap().value.abs() <= common::slack(config.capacity()));
        }
    }
}
