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

/// Tokens the rate grants over one forward move of the clock from `from`
/// to `to`: `rate * elapsed / period` (token bucket) or `rate` per window
/// boundary crossed (fixed window).
fn granted(
    config: &rate_limiter_algorithm::Config,
    id: LimitId<'_>,
    from: Micros,
    to: Micros,
) -> f64 {
    use rate_limiter_algorithm::{fixed_window, Kind};
    if to <= from {
        return 0.0;
    }
    match config.kind {
        Kind::TokenBucket => config.rate * (to - from) as f64 / config.period as f64,
        Kind::FixedWindow => {
            let anchor = fixed_window::anchor(config, id);
            let windows = (fixed_window::window_start(anchor, config.period, to)
                - fixed_window::window_start(anchor, config.period, from))
                / config.period;
            config.rate * windows as f64
        }
        // (Not drawn by common::kind().)
        Kind::SlidingWindow | Kind::CalendarWindow => f64::INFINITY,
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]

    /// The clock also steps back to before a prune. A pruned row then
    /// starts again from that earlier time, so later answers may differ
    /// from a store that was never pruned (the README says so); what never
    /// changes is the bound: the pruned store admits at most the capacity,
    /// plus what the rate granted over the clock's forward moves (a step
    /// back grants nothing, and the time it re-runs is granted once), plus
    /// the debt still owed at the end. And while the clock has not gone
    /// back past the latest prune, the answers are those of the store that
    /// was never pruned.
    #[test]
    fn prune_with_the_clock_stepping_back_never_exceeds_the_bound(
        (config, steps) in config().prop_flat_map(|c| (Just(c), steps(c.period))),
        key in proptest::option::of("[a-c]{0,2}"),
        t0 in -(1i64 << 40)..(1i64 << 40),
    ) {
        let id = LimitId { name: b"pruned", key: key.as_deref().map(str::as_bytes) };
        let (mut kept, mut pruned): (Option<State>, Option<State>) = (None, None);
        let mut now = t0;
        // The latest prune time, and whether the clock went back before it
        // since (from then on the two stores may answer differently).
        let (mut pruned_at, mut diverged) = (i64::MIN, false);
        let (mut admitted, mut forward, mut reserved) = (0.0, 0.0, false);
        for step in steps {
            match step {
                Step::Move(dt) => {
                    forward += granted(&config, id, now, now + dt);
                    now += dt;
                    diverged |= now < pruned_at;
                }
                Step::Prune => {
                    if pruned.is_some_and(|state| prunable(&config, id, state, now)) {
                        pruned = None;
                        pruned_at = pruned_at.max(now);
                    }
                }
                Step::Call { fraction, reserve } => {
                    let request = Request { count: fraction * config.capacity(), reserve };
                    let a = evaluate(&config, id, kept, now, request).unwrap();
                    let b = evaluate(&config, id, pruned, now, request).unwrap();
                    if !diverged {
                        prop_assert_eq!(a.ok, b.ok);
                        prop_assert_eq!(a.retry_after, b.retry_after);
                        prop_assert_eq!(a.remaining, b.remaining);
                    }
                    if b.ok {
                        admitted += request.count;
                        reserved |= reserve;
                    }
                    if let Some(state) = a.new_state { kept = Some(state); }
                    if let Some(state) = b.new_state { pruned = Some(state); }
                }
            }
        }
        let left = pruned.map_or(config.capacity(), |state| state.value);
        let allowed = if reserved { config.max_reserved.unwrap_or(f64::INFINITY) } else { 0.0 };
        let bound = config.capacity() + forward + (-left).min(allowed);
        prop_assert!(bound.is_finite());
        prop_assert!(admitted <= bound + 1e-9 * bound.abs().max(1.0), "admitted {admitted} > bound {bound}");
    }
}
