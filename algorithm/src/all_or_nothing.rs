//! Several limits at once, all or nothing (SQL `rate_limiter.rate_limit_all`):
//! every request is admitted and consumed, or nothing is.
//!
//! The requests are evaluated in the order given, at one instant `now`, each
//! on the state its limit would have after the requests before it (so a
//! limit named twice is charged twice). Each request gets its own answer,
//! as [`evaluate`] (or, for a sharded limit, [`evaluate_fullest`]: the two
//! fullest shards) would give it on that state. If any request is refused,
//! no state changes; the answers of the others still say whether they alone
//! could have been admitted.
//!
//! A limit in shadow mode (`enforce = false`, see [`crate::verdict`]) never
//! makes the call fail: its refused requests consume nothing and answer as
//! admitted, and the other requests go on as if it had not been named.

use crate::config::Config;
use crate::decision::evaluate;
use crate::error::LimitError;
use crate::shards::evaluate_fullest;
use crate::state::{LimitId, Request, State};
use crate::time::Micros;
use crate::verdict::{shadow, Verdict};

/// One distinct limit of the call, with its stored state.
#[derive(Debug, Clone, PartialEq)]
pub struct Limit<'a> {
    /// Which limit (for a fixed window's phase).
    pub id: LimitId<'a>,
    /// Its config; must be valid ([`Config::validate`]).
    pub config: Config,
    /// The stored state of each shard (`stored[i]` is shard `i`; one element
    /// for an unsharded limit; `None` = no row = full).
    pub stored: Vec<Option<State>>,
    /// Whether the limit's refusals refuse (`false`: shadow mode).
    pub enforce: bool,
    /// The end of the key's block, when it is blocked ([`crate::blocked`]):
    /// until then its requests are refused whatever its tokens.
    pub blocked_until: Option<Micros>,
}

/// One request: `request` against `limits[limit]`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Member {
    pub limit: usize,
    pub request: Request,
}

/// One request's answer, as in [`crate::Decision`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Answer {
    pub ok: bool,
    /// Microseconds from `now`, rounded up; `None` when admitted without debt.
    pub retry_after: Option<Micros>,
    /// Tokens left in the limit after this request (when admitted) or
    /// before it (when refused); for a sharded limit, summed over shards.
    pub remaining: f64,
    /// What the request counts as: a shadow refusal answers `ok = true`.
    pub verdict: Verdict,
}

/// The outcome of an all-or-nothing call.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    /// One answer per member, in the order given.
    pub answers: Vec<Answer>,
    /// `None` when any member was refused: write nothing. Otherwise, per
    /// limit and shard (as `Limit::stored`), the state to write, `None`
    /// where the shard is not consumed from.
    pub new_states: Option<Vec<Vec<Option<State>>>>,
}

/// Evaluates `members` against `limits` at `now`, all or nothing (see the
/// module documentation).
///
/// Errors: as [`evaluate`] for any member (an invalid count, a value out of
/// range); an index `limit` outside `limits` is `InvalidParameter`.
pub fn evaluate_all_or_nothing(
    limits: &[Limit<'_>],
    members: &[Member],
    now: Micros,
) -> Result<Outcome, LimitError> {
    let mut current: Vec<Vec<Option<State>>> = limits.iter().map(|l| l.stored.clone()).collect();
    let mut changed: Vec<Vec<bool>> = limits.iter().map(|l| vec![false; l.stored.len()]).collect();
    let mut answers = Vec::with_capacity(members.len());
    let mut all_ok = true;
    for member in members {
        let (Some(limit), Some(states), Some(written)) = (
            limits.get(member.limit),
            current.get_mut(member.limit),
            changed.get_mut(member.limit),
        ) else {
            return Err(LimitError::invalid(
                "requests",
                format!("request for limit {} of {}", member.limit, limits.len()),
            ));
        };
        let block = limit
            .blocked_until
            .and_then(|until| crate::block::blocked(until, now));
        let answer = if let Some(refused) = block {
            (refused.ok, refused.retry_after, refused.remaining)
        } else if limit.config.shards > 1 && states.len() >= 2 {
            let (decision, shards) =
                evaluate_fullest(&limit.config, limit.id, states, now, member.request)?;
            if decision.ok {
                for (shard, state) in shards.iter().zip(decision.new_states) {
                    if let Some(state) = state {
                        states[*shard] = Some(state);
                        written[*shard] = true;
                    }
                }
            }
            (decision.ok, decision.retry_after, decision.remaining)
        } else {
            let stored = states.first().copied().flatten();
            let decision = evaluate(&limit.config, limit.id, stored, now, member.request)?;
            if let (true, Some(state)) = (decision.ok, decision.new_state) {
                if let (Some(slot), Some(flag)) = (states.first_mut(), written.first_mut()) {
                    *slot = Some(state);
                    *flag = true;
                }
            }
            (decision.ok, decision.retry_after, decision.remaining)
        };
        let (decided_ok, retry_after, remaining) = answer;
        let (ok, retry_after, verdict) = shadow(decided_ok, retry_after, limit.enforce);
        all_ok &= ok;
        answers.push(Answer {
            ok,
            retry_after,
            remaining,
            verdict,
        });
    }
    let new_states = all_ok.then(|| {
        current
            .into_iter()
            .zip(changed)
            .map(|(states, written)| {
                states
                    .into_iter()
                    .zip(written)
                    .map(|(state, written)| state.filter(|_| written))
                    .collect()
            })
            .collect()
    });
    Ok(Outcome {
        answers,
        new_states,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Kind;

    const SECOND: Micros = 1_000_000;

    fn limit(name: &'static [u8], rate: f64, value: Option<f64>) -> Limit<'static> {
        Limit {
            id: LimitId { name, key: None },
            config: Config {
                kind: Kind::TokenBucket,
                rate,
                period: SECOND,
                capacity: None,
                max_reserved: None,
                shards: 1,
                start: None,
                block: None,
                calendar: None,
            },
            stored: vec![value.map(|value| State {
                value,
                ts: 0,
                previous: 0.0,
            })],
            enforce: true,
            blocked_until: None,
        }
    }

    fn member(limit: usize, count: f64) -> Member {
        Member {
            limit,
            request: Request {
                count,
                reserve: false,
            },
        }
    }

    #[test]
    fn all_admitted_consumes_each() {
        let limits = [limit(b"a", 10.0, None), limit(b"b", 5.0, Some(3.0))];
        let outcome =
            evaluate_all_or_nothing(&limits, &[member(0, 4.0), member(1, 2.0)], 0).unwrap();
        assert!(outcome.answers.iter().all(|a| a.ok));
        assert_eq!(outcome.answers[0].remaining, 6.0);
        assert_eq!(outcome.answers[1].remaining, 1.0);
        let states = outcome.new_states.unwrap();
        assert_eq!(
            states[0],
            vec![Some(State {
                value: 6.0,
                ts: 0,
                previous: 0.0
            })]
        );
        assert_eq!(
            states[1],
            vec![Some(State {
                value: 1.0,
                ts: 0,
                previous: 0.0
            })]
        );
    }

    #[test]
    fn one_short_member_consumes_nothing() {
        let limits = [limit(b"a", 10.0, None), limit(b"b", 5.0, Some(1.0))];
        let outcome =
            evaluate_all_or_nothing(&limits, &[member(0, 4.0), member(1, 2.0)], 0).unwrap();
        assert!(outcome.answers[0].ok);
        assert!(!outcome.answers[1].ok);
        assert_eq!(outcome.answers[1].retry_after, Some(200_000));
        assert_eq!(outcome.answers[1].remaining, 1.0);
        assert_eq!(outcome.new_states, None);
    }

    #[test]
    fn a_limit_named_twice_is_charged_twice() {
        let limits = [limit(b"a", 10.0, None)];
        let outcome =
            evaluate_all_or_nothing(&limits, &[member(0, 6.0), member(0, 6.0)], 0).unwrap();
        assert!(outcome.answers[0].ok);
        assert!(!outcome.answers[1].ok);
        assert_eq!(outcome.answers[1].remaining, 4.0);
        assert_eq!(outcome.new_states, None);
    }

    #[test]
    fn a_blocked_member_refuses_the_call_whatever_its_tokens() {
        let blocked = Limit {
            blocked_until: Some(10 * SECOND),
            ..limit(b"b", 5.0, None)
        };
        let limits = [limit(b"a", 10.0, None), blocked];
        let outcome =
            evaluate_all_or_nothing(&limits, &[member(0, 4.0), member(1, 1.0)], SECOND).unwrap();
        assert!(outcome.answers[0].ok);
        let answer = outcome.answers[1];
        assert_eq!(
            (
                answer.ok,
                answer.retry_after,
                answer.remaining,
                answer.verdict
            ),
            (false, Some(9 * SECOND), 0.0, Verdict::Refused)
        );
        assert_eq!(outcome.new_states, None);
        // At its end the block is over.
        let outcome = evaluate_all_or_nothing(&limits, &[member(1, 1.0)], 10 * SECOND).unwrap();
        assert!(outcome.answers[0].ok);
    }

    #[test]
    fn a_shadow_refusal_does_not_fail_the_call() {
        let shadow = Limit {
            enforce: false,
            ..limit(b"b", 5.0, Some(1.0))
        };
        let limits = [limit(b"a", 10.0, None), shadow];
        let outcome =
            evaluate_all_or_nothing(&limits, &[member(0, 4.0), member(1, 2.0)], 0).unwrap();
        assert_eq!(outcome.answers[0].verdict, Verdict::Admitted);
        let answer = outcome.answers[1];
        assert_eq!(
            (
                answer.ok,
                answer.retry_after,
                answer.remaining,
                answer.verdict
            ),
            (true, None, 1.0, Verdict::ShadowRefused)
        );
        // The enforcing limit consumes; the shadow limit's refusal consumes nothing.
        let states = outcome.new_states.unwrap();
        assert_eq!(
            states[0],
            vec![Some(State {
                value: 6.0,
                ts: 0,
                previous: 0.0
            })]
        );
        assert_eq!(states[1], vec![None]);
    }

    #[test]
    fn an_enforced_refusal_still_fails_a_call_with_shadow_limits() {
        let shadow = Limit {
            enforce: false,
            ..limit(b"a", 10.0, None)
        };
        let limits = [shadow, limit(b"b", 5.0, Some(1.0))];
        let outcome =
            evaluate_all_or_nothing(&limits, &[member(0, 4.0), member(1, 2.0)], 0).unwrap();
        assert!(outcome.answers[0].ok);
        assert_eq!(outcome.answers[1].verdict, Verdict::Refused);
        assert_eq!(outcome.new_states, None);
    }

    #[test]
    fn bad_index_is_an_error() {
        assert!(evaluate_all_or_nothing(&[], &[member(0, 1.0)], 0).is_err());
    }
}
