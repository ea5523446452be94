//! Unit tests of `shards.rs`: the power of two choices, the shard order,
//! and the decision on one, two or all shards.

use super::*;
use crate::config::Kind;

const SECOND: Micros = 1_000_000;
const ID: LimitId<'static> = LimitId {
    name: b"global",
    key: None,
};

/// 10 per second, capacity 10, split over `shards`.
fn config(shards: i32, max_reserved: Option<f64>) -> Config {
    Config {
        kind: Kind::TokenBucket,
        rate: 10.0,
        period: SECOND,
        capacity: None,
        max_reserved,
        shards,
        start: None,
        block: None,
        calendar: None,
    }
}

fn free(value: f64) -> Candidate {
    Candidate {
        stored: Some(State {
            value,
            ts: 0,
            previous: 0.0,
        }),
        writable: true,
    }
}

fn single(config: &Config, candidate: Candidate, count: f64) -> ShardedDecision {
    let request = Request {
        count,
        reserve: false,
    };
    evaluate_single(config, ID, candidate, 0, request).unwrap()
}

#[test]
fn one_usable_shard_is_a_limit_of_its_own() {
    // 4 shards: each holds 2.5 and refills 2.5 a second.
    let config = config(4, None);
    let served = single(&config, free(2.5), 2.0);
    assert!(served.ok);
    assert_eq!(
        served.new_states,
        [
            Some(State {
                value: 0.5,
                ts: 0,
                previous: 0.0
            }),
            None
        ]
    );
    assert_eq!(served.remaining, 0.5 * 4.0);
    assert_eq!(served.retry_after, None);
    // A new row is a full shard.
    let new = Candidate {
        stored: None,
        writable: true,
    };
    assert!(single(&config, new, 2.5).ok);
    // Not enough: refused with the shard's own retry_after (1.5 tokens
    // missing at 2.5 a second: 0.6 s), as evaluate answers.
    let refused = single(&config, free(0.5), 2.0);
    assert!(!refused.ok);
    assert_eq!(refused.retry_after, Some(600_000));
    assert_eq!(refused.new_states, [None, None]);
    assert_eq!(refused.remaining, 0.5 * 4.0);
}

#[test]
fn one_usable_shard_refuses_what_only_two_could_serve_without_retry_after() {
    let config = config(4, None);
    // 4 is more than one shard's 2.5 but within two shards' 5.
    let refused = single(&config, free(2.5), 4.0);
    assert!(!refused.ok);
    assert_eq!(refused.retry_after, None);
    assert_eq!(refused.new_states, [None, None]);
    // More than two shards hold is an error, as for a pair.
    let request = Request {
        count: 6.0,
        reserve: false,
    };
    assert!(evaluate_single(&config, ID, free(2.5), 0, request).is_err());
}

#[test]
fn one_busy_shard_is_never_consumed_from() {
    let config = config(4, None);
    let busy = Candidate {
        stored: Some(State {
            value: 2.5,
            ts: 0,
            previous: 0.0,
        }),
        writable: false,
    };
    let refused = single(&config, busy, 1.0);
    assert!(!refused.ok);
    assert_eq!(refused.retry_after, Some(1));
    assert_eq!(refused.new_states, [None, None]);
    let empty = Candidate {
        stored: Some(State {
            value: 0.0,
            ts: 0,
            previous: 0.0,
        }),
        writable: false,
    };
    assert_eq!(single(&config, empty, 1.0).retry_after, Some(400_000));
}

#[test]
fn looked_at_decides_on_one_or_two_shards() {
    let config = config(4, None);
    let request = Request {
        count: 1.0,
        reserve: false,
    };
    let pair = [free(2.5), free(1.0)];
    assert_eq!(
        evaluate_looked_at(&config, ID, &pair, 0, request).unwrap(),
        evaluate_pair(&config, ID, pair, 0, request).unwrap()
    );
    assert_eq!(
        evaluate_looked_at(&config, ID, &pair[..1], 0, request).unwrap(),
        evaluate_single(&config, ID, pair[0], 0, request).unwrap()
    );
    assert!(evaluate_looked_at(&config, ID, &[], 0, request).is_err());
    assert!(evaluate_looked_at(&config, ID, &[pair[0]; 3], 0, request).is_err());
}

fn call(config: &Config, candidates: [Candidate; 2], count: f64, reserve: bool) -> ShardedDecision {
    evaluate_pair(config, ID, candidates, 0, Request { count, reserve }).unwrap()
}

#[test]
fn the_order_starts_with_a_random_pair_and_visits_every_shard_once() {
    for shards in [2i16, 3, 8, 16, 1000] {
        for random in [
            [0, 0, 0],
            [7, 3, 5],
            [u32::MAX, u32::MAX, u32::MAX],
            [12, 99, 1],
        ] {
            let order: Vec<i16> = shard_order(shards, random).collect();
            let mut sorted = order.clone();
            sorted.sort();
            assert_eq!(
                sorted,
                (0..shards).collect::<Vec<_>>(),
                "{shards} {random:?}"
            );
            assert_eq!(order[0], (random[0] % shards as u32) as i16);
            assert_ne!(order[0], order[1]);
        }
    }
}

#[test]
fn the_two_fullest_shards_are_chosen_ties_to_the_lower_number() {
    // Capacity 30 over 3 shards: 10 each.
    let config = Config {
        capacity: Some(30.0),
        ..config(3, None)
    };
    let request = Request {
        count: 1.0,
        reserve: false,
    };
    for (values, expected) in [
        ([5.0, 3.0, 4.0], [0, 2]),
        ([3.0, 5.0, 4.0], [1, 2]),
        ([3.0, 4.0, 5.0], [2, 1]),
        ([4.0, 4.0, 4.0], [0, 1]),
        ([4.0, 3.0, 4.0], [0, 2]),
        ([5.0, 3.0, 3.0], [0, 1]),
    ] {
        let stored = values.map(|value| {
            Some(State {
                value,
                ts: 0,
                previous: 0.0,
            })
        });
        let (decision, best) = evaluate_fullest(&config, ID, &stored, 0, request).unwrap();
        assert_eq!(best, expected, "{values:?}");
        // The fullest (the first of the pair) gives the token.
        let fullest = values[expected[0]];
        assert_eq!(
            decision.new_states[0],
            Some(State {
                value: fullest - 1.0,
                ts: 0,
                previous: 0.0
            }),
            "{values:?}"
        );
    }
}

#[test]
fn a_reservation_goes_into_debt_on_the_fuller_shard_alone() {
    // 4 shards of capacity 2.5, each may owe 5: 3 tokens from shards
    // holding 1 and 0.5 leave the fuller one at -2 (within its debt),
    // the other untouched.
    let config = config(4, Some(20.0));
    let decision = call(&config, [free(1.0), free(0.5)], 3.0, true);
    assert!(decision.ok);
    assert_eq!(
        decision.new_states[0],
        Some(State {
            value: -2.0,
            ts: 0,
            previous: 0.0
        })
    );
    assert_eq!(decision.new_states[1], None);
    assert!(decision.retry_after.is_some());
}

#[test]
fn a_shard_left_at_exactly_zero_is_not_in_debt() {
    let decision = call(&config(4, None), [free(1.0), free(1.0)], 1.0, false);
    assert!(decision.ok);
    assert_eq!(
        decision.new_states[0],
        Some(State {
            value: 0.0,
            ts: 0,
            previous: 0.0
        })
    );
    assert_eq!(decision.retry_after, None);
}

#[test]
fn the_second_shard_is_any_other_and_the_rest_starts_at_random() {
    // random[1] picks the second among the n - 1 others, each once in
    // every n - 1 consecutive values.
    let seconds: Vec<i16> = (0..14)
        .map(|r| shard_order(8, [0, r, 0]).nth(1).unwrap())
        .collect();
    assert_eq!(seconds, [1, 2, 3, 4, 5, 6, 7, 1, 2, 3, 4, 5, 6, 7]);
    // random[2] picks where the rest of the round starts.
    let order: Vec<i16> = shard_order(8, [0, 0, 5]).collect();
    assert_eq!(order, vec![0, 1, 5, 6, 7, 2, 3, 4]);
    let order: Vec<i16> = shard_order(8, [0, 0, 13]).collect();
    assert_eq!(order, vec![0, 1, 5, 6, 7, 2, 3, 4]);
}

#[test]
fn each_shard_gets_its_share() {
    let shard = Config {
        capacity: Some(4.0),
        max_reserved: Some(2.0),
        ..config(4, None)
    }
    .shard();
    assert_eq!(shard.rate, 2.5);
    assert_eq!(shard.capacity, Some(1.0));
    assert_eq!(shard.max_reserved, Some(0.5));
    assert_eq!(shard.shards, 1);
}

#[test]
fn one_shard_serves_when_it_can_the_fuller_one() {
    let config = config(2, None);
    let decision = call(&config, [free(2.0), free(4.0)], 1.0, false);
    assert!(decision.ok);
    assert_eq!(
        decision.new_states,
        [
            None,
            Some(State {
                value: 3.0,
                ts: 0,
                previous: 0.0
            })
        ]
    );
    assert_eq!(decision.retry_after, None);
    // mean of (2, 3) times 2 shards
    assert_eq!(decision.remaining, 5.0);
    // A tie goes to the first of the pair.
    let tie = call(&config, [free(3.0), free(3.0)], 1.0, false);
    assert_eq!(
        tie.new_states,
        [
            Some(State {
                value: 2.0,
                ts: 0,
                previous: 0.0
            }),
            None
        ]
    );
}

#[test]
fn a_read_only_shard_is_never_consumed() {
    let config = config(2, None);
    let busy_fuller = [
        free(2.0),
        Candidate {
            writable: false,
            ..free(4.0)
        },
    ];
    let decision = call(&config, busy_fuller, 1.0, false);
    assert_eq!(
        decision.new_states,
        [
            Some(State {
                value: 1.0,
                ts: 0,
                previous: 0.0
            }),
            None
        ]
    );
    // Combining needs both: refused, but retry_after says "both free
    // would serve it now" (1 microsecond).
    let refused = call(&config, busy_fuller, 5.0, false);
    assert!(!refused.ok);
    assert_eq!(refused.new_states, [None, None]);
    assert_eq!(refused.retry_after, Some(1));
}

#[test]
fn two_shards_combine_when_neither_can_alone() {
    let config = config(4, None); // 2.5 tokens per shard
    let decision = call(&config, [free(2.0), free(1.0)], 2.5, false);
    assert!(decision.ok);
    assert_eq!(
        decision.new_states,
        [
            Some(State {
                value: 0.25,
                ts: 0,
                previous: 0.0
            }),
            Some(State {
                value: 0.25,
                ts: 0,
                previous: 0.0
            })
        ]
    );
    assert_eq!(decision.remaining, 1.0);
    // Together they hold 3: a count of 3.5 is refused; both refill at
    // 2.5 per second, so the missing 0.5 takes 0.1 s.
    let refused = call(&config, [free(2.0), free(1.0)], 3.5, false);
    assert!(!refused.ok);
    assert_eq!(refused.retry_after, Some(SECOND / 10));
    assert_eq!(refused.remaining, 6.0);
}

#[test]
fn a_new_limit_serves_more_than_one_shard_holds() {
    let config = config(4, None);
    let new = Candidate {
        stored: None,
        writable: true,
    };
    let decision = call(&config, [new, new], 4.0, false);
    assert!(decision.ok);
    assert_eq!(
        decision.new_states,
        [
            Some(State {
                value: 0.5,
                ts: 0,
                previous: 0.0
            }),
            Some(State {
                value: 0.5,
                ts: 0,
                previous: 0.0
            })
        ]
    );
}

#[test]
fn counts_no_two_shards_could_serve_are_errors() {
    let config = config(4, Some(2.0));
    // 2 shards x 2.5 = 5 without reserve; plus 2 x 0.5 with it.
    assert!(evaluate_pair(
        &config,
        ID,
        [free(2.5), free(2.5)],
        0,
        Request {
            count: 5.0,
            reserve: false
        }
    )
    .is_ok());
    assert!(evaluate_pair(
        &config,
        ID,
        [free(2.5), free(2.5)],
        0,
        Request {
            count: 5.01,
            reserve: false
        }
    )
    .is_err());
    assert!(evaluate_pair(
        &config,
        ID,
        [free(2.5), free(2.5)],
        0,
        Request {
            count: 6.0,
            reserve: true
        }
    )
    .is_ok());
    assert!(evaluate_pair(
        &config,
        ID,
        [free(2.5), free(2.5)],
        0,
        Request {
            count: 6.01,
            reserve: true
        }
    )
    .is_err());
}

#[test]
fn reservations_spread_the_debt_and_wait_for_both_shards() {
    let config = config(2, Some(4.0)); // per shard: 5 tokens, 2 of debt
    let decision = call(&config, [free(1.0), free(1.0)], 4.0, true);
    assert!(decision.ok);
    assert_eq!(
        decision.new_states,
        [
            Some(State {
                value: -1.0,
                ts: 0,
                previous: 0.0
            }),
            Some(State {
                value: -1.0,
                ts: 0,
                previous: 0.0
            })
        ]
    );
    // Each shard refills 5 per second: 1 token of debt takes 0.2 s.
    assert_eq!(decision.retry_after, Some(SECOND / 5));
    // Beyond the debt two shards may owe: refused until it fits.
    let refused = call(&config, [free(0.0), free(0.0)], 6.0, true);
    assert!(!refused.ok);
    // level (0 + 0 - 6) / 2 = -3 must reach -2: 1 token each, 0.2 s.
    assert_eq!(refused.retry_after, Some(SECOND / 5));
}

#[test]
fn check_answers_for_the_two_fullest_and_sums_every_shard() {
    let config = config(4, None);
    let stored = [
        Some(State {
            value: 0.0,
            ts: 0,
            previous: 0.0,
        }),
        Some(State {
            value: 1.0,
            ts: 0,
            previous: 0.0,
        }),
        None, // full: 2.5
        Some(State {
            value: 2.0,
            ts: 0,
            previous: 0.0,
        }),
    ];
    let request = Request {
        count: 4.0,
        reserve: false,
    };
    let decision = evaluate_all(&config, ID, &stored, 0, request).unwrap();
    assert!(decision.ok, "2.5 + 2 >= 4");
    assert_eq!(decision.remaining, 5.5 - 4.0);
    let request = Request {
        count: 5.0,
        reserve: false,
    };
    let refused = evaluate_all(&config, ID, &stored, 0, request).unwrap();
    assert!(!refused.ok);
    assert_eq!(refused.remaining, 5.5);
    // The fullest pair lacks 0.5, at 2.5 per second per shard for the
    // emptier one only (the full one cannot grow): 0.2 s.
    assert_eq!(refused.retry_after, Some(SECOND / 5));
}
