//! Property tests of all-or-nothing calls (`rate_limit_all`): random limits,
//! random stored states, random lists of requests (a limit may be named
//! several times).

use proptest::prelude::*;
use rate_limiter_algorithm::{
    evaluate, evaluate_all, evaluate_all_or_nothing, Config, Kind, Limit, LimitId, Member, Micros,
    Request, State, Verdict,
};

const SECOND: Micros = 1_000_000;
const NAMES: [&[u8]; 3] = [b"a", b"b", b"c"];

prop_compose! {
    fn limit(index: usize)(
        fixed in proptest::bool::ANY,
        rate in 1.0f64..100.0,
        max_reserved in proptest::option::of(0.0f64..20.0),
        shards in prop_oneof![3 => Just(1i32), 1 => 2i32..5],
        fill in proptest::collection::vec(proptest::option::of((-0.5f64..1.0, -2 * SECOND..0)), 4),
    ) -> Limit<'static> {
        let config = Config {
            kind: if fixed { Kind::FixedWindow } else { Kind::TokenBucket },
            rate,
            period: SECOND,
            capacity: None,
            max_reserved,
            shards,
            start: None,
            block: None,
            calendar: None,
        };
        let shard_capacity = rate / f64::from(shards);
        let stored = fill
            .iter()
            .take(shards as usize)
            .map(|f| f.map(|(fraction, ts)| State { value: fraction * shard_capacity, ts: if fixed { 0 } else { ts }, previous: 0.0 }))
            .collect();
        Limit { id: LimitId { name: NAMES[index], key: None }, config, stored, enforce: true, blocked_until: None }
    }
}

fn limits() -> impl Strategy<Value = Vec<Limit<'static>>> {
    (limit(0), limit(1), limit(2)).prop_map(|(a, b, c)| vec![a, b, c])
}

fn members() -> impl Strategy<Value = Vec<Member>> {
    proptest::collection::vec(
        (0usize..3, 0.0f64..1.0, proptest::bool::weighted(0.3)).prop_map(
            |(limit, fraction, reserve)| Member {
                limit,
                request: Request {
                    count: fraction,
                    reserve,
                },
            },
        ),
        1..6,
    )
}

/// A count scaled to what the member's limit can serve.
fn scaled(limits: &[Limit<'_>], members: &[Member]) -> Vec<Member> {
    members
        .iter()
        .map(|m| {
            let config = &limits[m.limit].config;
            let most = if config.shards > 1 {
                2.0 * config.shard().capacity()
            } else {
                config.capacity()
            };
            Member {
                limit: m.limit,
                request: Request {
                    count: m.request.count * most,
                    ..m.request
                },
            }
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// Unsharded limits: each answer is `evaluate`'s on the state left by
    /// the requests before it that were admitted; the states written are
    /// those states exactly when every request is admitted, and nothing is
    /// written otherwise.
    #[test]
    fn answers_and_writes_are_sequential_or_nothing(
        mut limits in limits(),
        members in members(),
        now in 0i64..3 * SECOND,
    ) {
        for limit in &mut limits {
            limit.config.shards = 1;
            limit.stored.truncate(1);
        }
        let members = scaled(&limits, &members);
        let outcome = evaluate_all_or_nothing(&limits, &members, now).unwrap();
        let mut states: Vec<Option<State>> = limits.iter().map(|l| l.stored[0]).collect();
        let mut touched = [false; 3];
        for (member, answer) in members.iter().zip(&outcome.answers) {
            let limit = &limits[member.limit];
            let decision = evaluate(&limit.config, limit.id, states[member.limit], now, member.request).unwrap();
            prop_assert_eq!(answer.ok, decision.ok);
            prop_assert_eq!(answer.retry_after, decision.retry_after);
            prop_assert_eq!(answer.remaining, decision.remaining);
            if decision.ok {
                states[member.limit] = decision.new_state;
                touched[member.limit] = true;
            }
        }
        let all_ok = outcome.answers.iter().all(|a| a.ok);
        prop_assert_eq!(outcome.new_states.is_some(), all_ok);
        if let Some(written) = outcome.new_states {
            for index in 0..3 {
                let expected = if touched[index] { states[index] } else { None };
                prop_assert_eq!(written[index][0], expected);
            }
        }
    }

    /// A sharded limit alone gets the answer `rate_check` gives
    /// (`evaluate_all`), and consumes only when admitted.
    #[test]
    fn one_sharded_member_answers_as_evaluate_all(
        limits in limits(),
        members in members(),
        now in 0i64..3 * SECOND,
    ) {
        let members = scaled(&limits, &members[..1]);
        let limit = &limits[members[0].limit];
        let outcome = evaluate_all_or_nothing(&limits, &members, now).unwrap();
        let answer = outcome.answers[0];
        if limit.config.shards > 1 {
            let expected = evaluate_all(&limit.config, limit.id, &limit.stored, now, members[0].request).unwrap();
            prop_assert_eq!(answer.ok, expected.ok);
            prop_assert_eq!(answer.retry_after, expected.retry_after);
            prop_assert_eq!(answer.remaining, expected.remaining);
        }
        prop_assert_eq!(outcome.new_states.is_some(), answer.ok);
        if let Some(written) = outcome.new_states {
            let consumed = written[members[0].limit].iter().flatten().count();
            prop_assert!((1..=2).contains(&consumed));
            for (index, states) in written.iter().enumerate() {
                if index != members[0].limit {
                    prop_assert!(states.iter().all(Option::is_none));
                }
            }
        }
    }

    /// Shadow mode: limits in shadow mode never fail the call, and a
    /// shadow-refused request changes nothing: the call answers and writes
    /// exactly as the same call of enforcing limits without those requests.
    #[test]
    fn shadow_refusals_are_as_if_the_request_was_not_made(
        limits in limits(),
        members in members(),
        shadows in proptest::collection::vec(proptest::bool::ANY, 3),
        now in 0i64..3 * SECOND,
    ) {
        let members = scaled(&limits, &members);
        let mut shadowed = limits.clone();
        for (limit, shadow) in shadowed.iter_mut().zip(&shadows) {
            limit.enforce = !shadow;
        }
        let outcome = evaluate_all_or_nothing(&shadowed, &members, now).unwrap();
        let mut kept = Vec::new();
        let mut kept_answers = Vec::new();
        for (member, answer) in members.iter().zip(&outcome.answers) {
            if shadows[member.limit] {
                prop_assert!(answer.ok);
                prop_assert_ne!(answer.verdict, Verdict::Refused);
            }
            if answer.verdict == Verdict::ShadowRefused {
                prop_assert_eq!(answer.retry_after, None);
            } else {
                kept.push(*member);
                kept_answers.push(*answer);
            }
        }
        let plain = evaluate_all_or_nothing(&limits, &kept, now).unwrap();
        prop_assert_eq!(plain.new_states, outcome.new_states);
        prop_assert_eq!(plain.answers, kept_answers);
    }
}
