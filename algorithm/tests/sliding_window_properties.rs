//! Property tests of the sliding window (`sliding_window`): its
//! `retry_after` against a brute-force search, and the bound of "at most
//! 2 * rate admitted in any span of one period" against a simulated log of
//! admitted calls.

use proptest::prelude::*;
use rate_limiter_algorithm::sliding_window::{Counts, Window};
use rate_limiter_algorithm::Micros;

/// Short periods, so that a search over every microsecond is quick.
fn window() -> impl Strategy<Value = Window> {
    (1u32..12, 20i64..400, 0i64..400).prop_map(|(rate, period, anchor)| Window {
        rate: f64::from(rate),
        period,
        anchor: anchor % period,
        max_reserved: None,
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// A refused call's retry_after is the first microsecond at which the
    /// same call is admitted, if nothing else consumed; an admitted one has
    /// none.
    #[test]
    fn retry_after_is_the_first_instant_the_call_succeeds(
        window in window(),
        previous in 0.0f64..16.0,
        current in 0.0f64..16.0,
        into in 0.0f64..1.0,
        count in 0.1f64..12.0,
    ) {
        let start = window.anchor + 3 * window.period;
        let stored = Counts { previous, current, start };
        let now = start + (into * window.period as f64) as Micros;
        let outcome = window.decide(Some(stored), now, count, false);
        let first = (now..now + 3 * window.period)
            .find(|&t| window.decide(Some(stored), t, count, false).ok);
        if outcome.ok {
            prop_assert_eq!(first, Some(now));
            prop_assert_eq!(outcome.retry_after, None);
        } else {
            prop_assert_eq!(outcome.counts, None);
            prop_assert_eq!(outcome.retry_after.map(|after| now + after), first);
        }
    }

    /// In any span of one period at most 2 * rate tokens are admitted,
    /// whatever the calls' times and counts.
    #[test]
    fn at_most_twice_the_rate_in_any_span_of_one_period(
        window in window(),
        calls in proptest::collection::vec((0i64..200, 1u32..4), 1..120),
    ) {
        let mut stored: Option<Counts> = None;
        let mut now: Micros = window.anchor;
        let mut admitted: Vec<(Micros, f64)> = Vec::new();
        for (gap, count) in calls {
            now += gap % (window.period / 2 + 1);
            let count = f64::from(count);
            let outcome = window.decide(stored, now, count, false);
            if outcome.ok {
                stored = outcome.counts;
                admitted.push((now, count));
            }
        }
        for &(from, _) in &admitted {
            let in_span: f64 = admitted
                .iter()
                .filter(|(t, _)| *t >= from && *t < from + window.period)
                .map(|(_, count)| count)
                .sum();
            prop_assert!(in_span <= 2.0 * window.rate, "{} in a span from {}", in_span, from);
        }
    }
}
