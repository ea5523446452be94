//! Calendar windows (docs/shapes.md) through [`evaluate`], over a calendar
//! whose windows have unequal lengths (as months and days around changes
//! of daylight saving time do): a refusal's and a reservation's
//! `retry_after` are the first window start at which a brute-force search
//! finds the call admitted (the debt paid back), and no span of windows
//! admits more than the capacity plus `rate` per window started in it.

use proptest::prelude::*;
use rate_limiter_algorithm::calendar_window::{Calendar, CalendarRef};
use rate_limiter_algorithm::{evaluate, Config, Kind, LimitId, Micros, Request, State};

const SECOND: Micros = 1_000_000;
/// The lengths of consecutive windows, in seconds, repeating from 0.
const LENGTHS: [i64; 5] = [5, 3, 8, 2, 13];
const CYCLE: i64 = 31;
const ID: LimitId<'static> = LimitId {
    name: b"c",
    key: None,
};

/// Windows of [`LENGTHS`] seconds, repeating from instant 0 on.
#[derive(Debug)]
struct Uneven;

impl Uneven {
    /// The number of the window containing `at`.
    fn index(at: Micros) -> i64 {
        let cycles = at.div_euclid(CYCLE * SECOND);
        let mut within = at.rem_euclid(CYCLE * SECOND);
        let mut index = cycles * LENGTHS.len() as i64;
        for length in LENGTHS {
            if within < length * SECOND {
                break;
            }
            within -= length * SECOND;
            index += 1;
        }
        index
    }

    /// The start of window number `index`.
    fn start(index: i64) -> Micros {
        let n = LENGTHS.len() as i64;
        let cycles = index.div_euclid(n);
        let offset: i64 = LENGTHS[..index.rem_euclid(n) as usize].iter().sum();
        (cycles * CYCLE + offset) * SECOND
    }
}

impl Calendar for Uneven {
    fn window_start(&self, at: Micros) -> Micros {
        Self::start(Self::index(at))
    }
    fn windows_between(&self, from: Micros, to: Micros) -> i64 {
        (Self::index(to) - Self::index(from)).max(0)
    }
    fn nth_start(&self, start: Micros, n: i64) -> Micros {
        Self::start(Self::index(start) + n)
    }
}

static UNEVEN: Uneven = Uneven;

fn config(rate: f64, capacity: f64, max_reserved: Option<f64>) -> Config {
    Config {
        kind: Kind::CalendarWindow,
        rate,
        period: 6 * SECOND,
        capacity: Some(capacity),
        max_reserved,
        shards: 1,
        start: None,
        block: None,
        calendar: Some(CalendarRef(&UNEVEN)),
    }
}

/// The first window start after `now` (among the next `windows`) at which
/// `test` holds, less `now`.
fn first(now: Micros, windows: i64, test: impl Fn(Micros) -> bool) -> Option<Micros> {
    (1..=windows)
        .map(|n| Uneven::start(Uneven::index(now) + n))
        .find(|&at| test(at))
        .map(|at| at - now)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn retry_after_is_the_first_window_start_that_admits(
        rate in prop::sample::select(vec![0.5, 1.0, 2.0, 3.0, 7.25]),
        capacity_windows in 1.0f64..4.0,
        value_share in -2.0f64..1.0,
        ts_index in 0i64..20,
        elapsed in 0i64..200,
        count_share in 0.0f64..1.0,
        reserve in any::<bool>(),
        max_reserved in prop::option::of(0.0f64..10.0),
    ) {
        let capacity = rate * capacity_windows;
        let config = config(rate, capacity, max_reserved);
        let ts = Uneven::start(ts_index);
        let stored = State { value: capacity * value_share, ts, previous: 0.0 };
        let now = ts + elapsed * SECOND / 3;
        let count = (capacity * count_share).max(0.0);
        let request = Request { count, reserve };
        let decision = evaluate(&config, ID, Some(stored), now, request).unwrap();
        if !decision.ok {
            let expected = first(now, 100, |at| evaluate(&config, ID, Some(stored), at, request).unwrap().ok);
            prop_assert_eq!(decision.retry_after, expected);
        } else if let (Some(retry_after), Some(new_state)) = (decision.retry_after, decision.new_state) {
            // A reservation: when the debt is paid back (a call of 0 fits).
            let paid = Request { count: 0.0, reserve: false };
            let expected = first(now, 100, |at| evaluate(&config, ID, Some(new_state), at, paid).unwrap().ok);
            prop_assert_eq!(Some(retry_after), expected);
        }
    }

    #[test]
    fn a_span_of_windows_admits_at_most_capacity_plus_rate_per_window(
        rate in prop::sample::select(vec![1.0, 2.0, 3.0]),
        capacity_windows in 1.0f64..3.0,
        calls in prop::collection::vec((0i64..4 * SECOND, 1u8..4), 1..60),
    ) {
        let capacity = rate * capacity_windows;
        let config = config(rate, capacity, None);
        let mut state: Option<State> = None;
        let mut now = 0;
        let mut admitted: Vec<(Micros, f64)> = Vec::new();
        for (step, count) in calls {
            now += step;
            let request = Request { count: f64::from(count).min(capacity), reserve: false };
            let decision = evaluate(&config, ID, state, now, request).unwrap();
            if decision.ok {
                admitted.push((now, request.count));
                state = decision.new_state.or(state);
            }
        }
        // Every span from the start of window i to the end of window j.
        let last = Uneven::index(now);
        for i in 0..=last {
            for j in i..=last {
                let (from, to) = (Uneven::start(i), Uneven::start(j + 1));
                let total: f64 = admitted.iter().filter(|(at, _)| (from..to).contains(at)).map(|(_, c)| c).sum();
                prop_assert!(total <= capacity + (j - i) as f64 * rate + 1e-9,
                    "windows {}..={}: {} admitted", i, j, total);
            }
        }
    }
}
