//! Property tests of the sliding window through [`evaluate`], the function
//! every call uses: `retry_after` (of a refusal, and of a reservation)
//! against a brute-force search, and the bound of "at most 2 * rate
//! admitted in any span of one period" against a simulated log of
//! admitted calls.

use proptest::prelude::*;
use rate_limiter_algorithm::{evaluate, Config, Kind, LimitId, Micros, Request, State};

const ID: LimitId<'static> = LimitId {
    name: b"sliding",
    key: Some(b"k"),
};

/// Short periods, so that a search over every microsecond is quick; the
/// windows start at `start` plus whole periods.
fn config() -> impl Strategy<Value = Config> {
    (
        1u32..12,
        20i64..400,
        0i64..400,
        proptest::option::of(0.0f64..6.0),
    )
        .prop_map(|(rate, period, start, max_reserved)| Config {
            kind: Kind::SlidingWindow,
            rate: f64::from(rate),
            period,
            capacity: None,
            max_reserved,
            shards: 1,
            start: Some(start % period),
            block: None,
            calendar: None,
        })
}

/// The first microsecond in `[now, now + 3 periods)` at which `request` is
/// admitted, from the same stored state.
fn first_success(config: &Config, stored: State, now: Micros, request: Request) -> Option<Micros> {
    (now..now + 3 * config.period)
        .find(|&t| evaluate(config, ID, Some(stored), t, request).is_ok_and(|d| d.ok))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// A refused call's retry_after is the first microsecond at which the
    /// same call is admitted, if nothing else consumed, and the refusal
    /// writes nothing; a reservation's is when the same call without
    /// reserve would have succeeded; an outright admission has none.
    #[test]
    fn retry_after_is_the_first_instant_the_call_succeeds(
        config in config(),
        previous in 0.0f64..16.0,
        current in 0.0f64..16.0,
        into in 0.0f64..1.0,
        count in 0.1f64..12.0,
        reserve in any::<bool>(),
    ) {
        let start = config.start.unwrap() + 3 * config.period;
        let stored = State { value: current, ts: start, previous };
        let now = start + (into * config.period as f64) as Micros;
        let Ok(decision) = evaluate(&config, ID, Some(stored), now, Request { count, reserve }) else {
            prop_assert!(count > config.rate);
            return Ok(());
        };
        let outright = first_success(&config, stored, now, Request { count, reserve: false });
        if !decision.ok {
            prop_assert_eq!(decision.new_state, None);
            let first = first_success(&config, stored, now, Request { count, reserve });
            prop_assert_eq!(decision.retry_after.map(|after| now + after), first);
        } else if decision.retry_after.is_none() {
            prop_assert_eq!(outright, Some(now));
        } else {
            prop_assert_eq!(decision.retry_after.map(|after| now + after), outright);
        }
    }

    /// In any span of one period at most 2 * rate tokens are admitted,
    /// whatever the calls' times and counts.
    #[test]
    fn at_most_twice_the_rate_in_any_span_of_one_period(
        config in config(),
        calls in proptest::collection::vec((0i64..200, 1u32..4), 1..120),
    ) {
        let mut stored: Option<State> = None;
        let mut now: Micros = config.start.unwrap();
        let mut admitted: Vec<(Micros, f64)> = Vec::new();
        for (gap, count) in calls {
            now += gap % (config.period / 2 + 1);
            let count = f64::from(count);
            let request = Request { count, reserve: false };
            let Ok(decision) = evaluate(&config, ID, stored, now, request) else { continue };
            if decision.ok {
                stored = decision.new_state;
                admitted.push((now, count));
            }
        }
        for &(from, _) in &admitted {
            let in_span: f64 = admitted
                .iter()
                .filter(|(t, _)| *t >= from && *t < from + config.period)
                .map(|(_, count)| count)
                .sum();
            prop_assert!(in_span <= 2.0 * config.rate, "{} in a span from {}", in_span, from);
        }
    }
}
