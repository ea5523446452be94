//! How a consuming decision is answered and counted: shadow mode and the
//! statistics' classes (docs/guarantees.md, "Statistics and shadow
//! mode").
//!
//! A limit in **shadow mode** (`define(..., enforce => false)`) decides and
//! writes its state exactly as an enforcing limit does (a refused decision
//! consumes nothing), but answers every call as admitted, with no
//! `retry_after`: its refusals are only counted, as `shadow_refused`. So a
//! new limit can be tried on live traffic before it refuses anyone.

use crate::config::Config;
use crate::decision::Decision;
use crate::time::Micros;

/// What one consuming decision counts as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Admitted (possibly as a reservation).
    Admitted,
    /// Refused by an enforcing limit.
    Refused,
    /// Refused by a limit in shadow mode: answered as admitted.
    ShadowRefused,
}

/// The share of capacity an admitted call must leave, or it is *near the
/// limit*: Envoy's near-limit ratio 0.8 (a call that leaves less than 20%
/// of capacity).
pub const NEAR_LIMIT_RATIO: f64 = 0.8;

/// What a call answers for `decision` of a limit that enforces
/// (`enforce = true`) or is in shadow mode (`false`), and what the
/// decision counts as. In shadow mode a refusal becomes `ok = true` with
/// `retry_after` `None` and the same `remaining` (the tokens the limit
/// has); `new_state` is left as decided, so the stored state is an
/// enforcing limit's.
pub fn answer(decision: Decision, enforce: bool) -> (Decision, Verdict) {
    let (ok, retry_after, verdict) = shadow(decision.ok, decision.retry_after, enforce);
    (
        Decision {
            ok,
            retry_after,
            ..decision
        },
        verdict,
    )
}

/// [`answer`] for the parts of a decision that are answered: `ok` and
/// `retry_after` (microseconds) as answered, and the verdict.
pub fn shadow(
    ok: bool,
    retry_after: Option<Micros>,
    enforce: bool,
) -> (bool, Option<Micros>, Verdict) {
    match (ok, enforce) {
        (true, _) => (true, retry_after, Verdict::Admitted),
        (false, true) => (false, retry_after, Verdict::Refused),
        (false, false) => (true, None, Verdict::ShadowRefused),
    }
}

/// Whether an admitted call that left `remaining` tokens is near the limit:
/// fewer than `(1 - NEAR_LIMIT_RATIO)` of the limit's capacity (all its
/// shards) left.
pub fn near_limit(config: &Config, remaining: f64) -> bool {
    remaining < (1.0 - NEAR_LIMIT_RATIO) * config.capacity()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Kind;
    use crate::state::State;

    fn decision(ok: bool, retry_after: Option<Micros>) -> Decision {
        Decision {
            ok,
            retry_after,
            remaining: 0.5,
            new_state: Some(State {
                value: 0.5,
                ts: 7,
                previous: 0.0,
            }),
        }
    }

    #[test]
    fn an_enforcing_limit_answers_as_decided() {
        let refused = decision(false, Some(100));
        assert_eq!(answer(refused, true), (refused, Verdict::Refused));
        let admitted = decision(true, Some(5));
        assert_eq!(answer(admitted, true), (admitted, Verdict::Admitted));
    }

    #[test]
    fn shadow_mode_admits_what_it_would_refuse_and_keeps_the_state() {
        let (answered, verdict) = answer(decision(false, Some(100)), false);
        assert_eq!(verdict, Verdict::ShadowRefused);
        assert!(answered.ok);
        assert_eq!(answered.retry_after, None);
        assert_eq!(answered.remaining, 0.5);
        assert_eq!(
            answered.new_state,
            Some(State {
                value: 0.5,
                ts: 7,
                previous: 0.0
            })
        );
        // An admitted call is answered as decided, a reservation included.
        let reserved = decision(true, Some(5));
        assert_eq!(answer(reserved, false), (reserved, Verdict::Admitted));
    }

    #[test]
    fn near_limit_is_less_than_a_fifth_of_capacity_left() {
        let config = Config {
            kind: Kind::TokenBucket,
            rate: 100.0,
            period: 1_000_000,
            capacity: Some(50.0),
            max_reserved: None,
            shards: 1,
            start: None,
            block: None,
            calendar: None,
        };
        assert!(!near_limit(&config, 10.0));
        assert!(near_limit(&config, 9.999));
        // Exactly at the threshold (in floats) is not near: "fewer than".
        let threshold = (1.0 - NEAR_LIMIT_RATIO) * config.capacity();
        assert!(!near_limit(&config, threshold));
        assert!(near_limit(&config, threshold - 1e-9));
        assert!(near_limit(&config, -3.0));
        let default_capacity = Config {
            capacity: None,
            ..config
        };
        assert!(!near_limit(&default_capacity, 20.0));
        assert!(near_limit(&default_capacity, 19.0));
    }
}
