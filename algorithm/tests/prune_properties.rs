//! Property test of `prune`: random calls, clock moves and prunes give the
//! same answers as the same calls on a store that is never pruned.

mod common;

use common::config;
use proptest::prelude::*;
use rate_limiter_algorithm::{evaluate, prunable, LimitId, Micros, Request, State};

#[derive(Debug, Clone, Copy)]
enum Step {
    /// Move the clock (may be negative; never before the last prune).
    Move(Micros),
    /// Ask for `fraction * capacity` tokens (0 too: it stamps the row
    /// with the current time without consuming).
    Call {
        fraction: f64,
        reserve: bool,
    },
    Prune,
}

fn steps(period: Micros) -> impl Strategy<Value = Vec<Step>> {
    let step = prop_oneof![
        3 => prop_oneof![0..period / 3 + 1, 0..period * 3, -(period / 2)..0].prop_map(Step::Move),
        4 => (0.0f64..1.0, proptest::bool::weighted(0.3))
            .prop_map(|(fraction, reserve)| Step::Call { fraction, reserve }),
        1 => Just(Step::Call { fraction: 0.0, reserve: false }),
        2 => Just(Step::Prune),
    ];
    proptest::collection::vec(step, 1..80)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]

    #[test]
    fn prune_changes_no_later_answer(
        (config, steps) in config().prop_flat_map(|c| (Just(c), steps(c.period))),
        key in proptest::option::of("[a-c]{0,2}"),
        t0 in -(1i64 << 40)..(1i64 << 40),
    ) {
        let id = LimitId { name: b"pruned", key: key.as_deref().map(str::as_bytes) };
        let (mut kept, mut pruned): (Option<State>, Option<State>) = (None, None);
        let (mut now, mut floor) = (t0, i64::MIN);
        for step in steps {
            match step {
                Step::Move(dt) => now = (now + dt).max(floor),
                Step::Prune => {
                    floor = now;
                    if pruned.is_some_and(|state| prunable(&config, id, state, now)) {
                        pruned = None;
                    }
                }
                Step::Call { fraction, reserve } => {
                    let request = Request { count: fraction * config.capacity(), reserve };
                    let a = evaluate(&config, id, kept, now, request).unwrap();
                    let b = evaluate(&config, id, pruned, now, request).unwrap();
                    prop_assert_eq!(a.ok, b.ok);
                    prop_assert_eq!(a.retry_after, b.retry_after);
                    prop_assert_eq!(a.remaining, b.remaining);
                    if let Some(state) = a.new_state { kept = Some(state); }
                    if let Some(state) = b.new_state { pruned = Some(state); }
                }
            }
        }
    }
}
