//! Scenario 8: overload. Requests arrive on their own schedule (open loop:
//! Poisson arrivals split over 16 client connections, each keeping its own
//! schedule as pgbench `-R` does), at 50%, 150%, 300% and 1000% of the
//! limit's rate, on (a) one keyed limit and (b) one global limit of 8
//! shards; one call per transaction (autocommit), or `BEGIN`, the call,
//! 2 ms of other work (`pg_sleep`) when admitted, `COMMIT`;
//! synchronous_commit on throughout. Each configuration runs with lock-free
//! refusals (the default: docs/guarantees.md, "Concurrency and exactness")
//! and with `rate_limiter.lock_free_refusals = off` (every call locks the
//! row before it decides, as before), in the same rounds.
//!
//! The client is this program rather than pgbench because the latencies of
//! refused and admitted calls are reported apart: each call records its
//! answer and its latency, counted from its scheduled arrival (so waiting
//! behind a locked row, and the server falling behind the schedule, show).
//! The bound (`admitted ≤ capacity + rate × elapsed`) is checked on every
//! run with elapsed from the first call's decision to the last one's on the
//! server's clock (`clock_timestamp()` returned by each call's statement),
//! and judged on the highest share of all runs.

use crate::report::{percentile, Report, Samples};
use crate::Bench;
use postgres::{Client, NoTls};
use rand::{Rng, SeedableRng};
use std::time::{Duration, Instant};

/// The limits' rate, tokens per second (the issue's measurement before the
/// work: one keyed limit of 500/s).
const RATE: f64 = 500.0;
/// The rate with 2 ms of work in each admitted transaction: such a
/// transaction holds one key's row for 2 ms and its commit's WAL flush, so
/// the row serves only a few hundred of them a second, fewer than RATE (a
/// limit of 500/s would then refuse nothing: the queue on the row, not the
/// limit, would decide).
const RATE_WITH_WORK: f64 = 100.0;
/// The keyed limit's capacity (a tenth of a second of RATE).
const KEYED_CAPACITY: f64 = 50.0;
/// The global limit: 8 shards of 10 tokens (the 10 or more a shard that
/// `define`'s hint advises).
const SHARDS: i32 = 8;
const SHARDED_CAPACITY: f64 = 80.0;
/// Demand as a share of RATE.
const DEMANDS: [f64; 4] = [0.5, 1.5, 3.0, 10.0];
const CLIENTS: usize = 16;
/// Seconds per run.
const SECONDS: usize = 8;
const ROUNDS: usize = 3;

/// One configuration of the grid.
#[derive(Clone, Copy, PartialEq)]
struct Setup {
    sharded: bool,
    demand: f64,
    /// Whether an admitted transaction holds the row for 2 ms of work.
    work: bool,
    lock_free: bool,
}

impl Setup {
    fn name(&self) -> &'static str {
        match (self.sharded, self.work) {
            (false, false) => "overload_keyed",
            (true, false) => "overload_global",
            (false, true) => "overload_keyed_work",
            (true, true) => "overload_global_work",
        }
    }

    /// Tokens per second.
    fn rate(&self) -> f64 {
        if self.work {
            RATE_WITH_WORK
        } else {
            RATE
        }
    }

    fn key(&self) -> Option<&'static str> {
        (!self.sharded).then_some("login:alice")
    }

    fn capacity(&self) -> f64 {
        if self.sharded {
            SHARDED_CAPACITY
        } else {
            KEYED_CAPACITY
        }
    }

    fn limit_label(&self) -> &'static str {
        if self.sharded {
            "global, 8 shards"
        } else {
            "one key"
        }
    }

    fn work_label(&self) -> &'static str {
        if self.work {
            "call + 2 ms"
        } else {
            "call only"
        }
    }
}

/// One call as a client saw it.
struct Call {
    ok: bool,
    /// From the scheduled arrival to the answer (to the COMMIT with work).
    latency_ms: f64,
    /// The server's clock right after the decision, microseconds.
    decided_at: i64,
}

/// What one run measured.
struct Run {
    admitted_per_second: f64,
    /// Completed calls over scheduled arrivals.
    served: f64,
    p50_refused_ms: f64,
    p99_refused_ms: f64,
    p50_admitted_ms: f64,
    p99_admitted_ms: f64,
    p99_all_ms: f64,
    /// Admissions over `capacity + rate × elapsed`.
    bound_share: f64,
}

/// One client: its share of the Poisson arrivals from `start` for
/// `seconds`, each call made at its scheduled time or as soon as the
/// previous one is done.
fn client(url: String, setup: Setup, number: usize, start: Instant, seconds: f64) -> Vec<Call> {
    let mut db = Client::connect(&url, NoTls).expect("connect a client");
    db.batch_execute(&format!(
        "SET synchronous_commit = on; SET rate_limiter.lock_free_refusals = {}",
        if setup.lock_free { "on" } else { "off" }
    ))
    .unwrap();
    let call = db
        .prepare(
            "SELECT r.ok, (extract(epoch FROM clock_timestamp()) * 1000000)::int8 \
             FROM rate_limiter.rate_limit($1::text, $2::text) AS r",
        )
        .unwrap();
    let work = db.prepare("SELECT pg_sleep(0.002)").unwrap();
    let per_second = setup.demand * setup.rate() / CLIENTS as f64;
    let mut rng = rand::rngs::StdRng::seed_from_u64(1000 + number as u64);
    let end = start + Duration::from_secs_f64(seconds);
    let mut next = start + Duration::from_secs_f64(-(1.0 - rng.random::<f64>()).ln() / per_second);
    let mut calls = Vec::new();
    while next < end {
        let now = Instant::now();
        if now < next {
            std::thread::sleep(next - now);
        }
        if setup.work {
            db.batch_execute("BEGIN").unwrap();
        }
        let row = db
            .query_one(&call, &[&setup.name(), &setup.key()])
            .expect("the call");
        let (ok, decided_at): (bool, i64) = (row.get(0), row.get(1));
        if setup.work {
            if ok {
                db.execute(&work, &[]).unwrap();
            }
            db.batch_execute("COMMIT").unwrap();
        }
        calls.push(Call {
            ok,
            latency_ms: next.elapsed().as_secs_f64() * 1000.0,
            decided_at,
        });
        next += Duration::from_secs_f64(-(1.0 - rng.random::<f64>()).ln() / per_second);
    }
    calls
}

fn measure(bench: &Bench, setup: Setup, seconds: f64) -> Run {
    let mut admin = bench.connect();
    admin
        .batch_execute("TRUNCATE rate_limiter.rate_limits; CHECKPOINT")
        .expect("reset the state");
    // Connect every client first; all start on one schedule.
    let start = Instant::now() + Duration::from_millis(300);
    let threads: Vec<_> = (0..CLIENTS)
        .map(|number| {
            let url = bench.url.clone();
            std::thread::spawn(move || client(url, setup, number, start, seconds))
        })
        .collect();
    let calls: Vec<Call> = threads
        .into_iter()
        .flat_map(|thread| thread.join().expect("a client failed"))
        .collect();
    assert!(!calls.is_empty(), "no call was made");
    let admitted = calls.iter().filter(|call| call.ok).count() as f64;
    let first = calls.iter().map(|call| call.decided_at).min().unwrap();
    let last = calls.iter().map(|call| call.decided_at).max().unwrap();
    let elapsed = (last - first) as f64 / 1e6;
    let latencies = |ok: Option<bool>| -> Vec<f64> {
        calls
            .iter()
            .filter(|call| ok.is_none_or(|ok| call.ok == ok))
            .map(|call| call.latency_ms)
            .collect()
    };
    let (mut refused, mut admitted_ms, mut all) = (
        latencies(Some(false)),
        latencies(Some(true)),
        latencies(None),
    );
    // No refusal at all (low demand): report 0 rather than fail.
    let at = |values: &mut Vec<f64>, p: f64| {
        if values.is_empty() {
            0.0
        } else {
            percentile(values, p)
        }
    };
    Run {
        // Over the server's elapsed time: a run the server fell behind on
        // lasts longer than its schedule.
        admitted_per_second: admitted / elapsed,
        served: calls.len() as f64 / (setup.demand * setup.rate() * seconds),
        p50_refused_ms: at(&mut refused, 50.0),
        p99_refused_ms: at(&mut refused, 99.0),
        p50_admitted_ms: at(&mut admitted_ms, 50.0),
        p99_admitted_ms: at(&mut admitted_ms, 99.0),
        p99_all_ms: at(&mut all, 99.0),
        bound_share: admitted / (setup.capacity() + setup.rate() * elapsed),
    }
}

pub fn run(bench: &Bench, report: &mut Report) {
    let seconds = bench.scaled(SECONDS).max(2) as f64;
    let mut admin = bench.connect();
    admin
        .batch_execute(&format!(
            "SELECT rate_limiter.define('overload_keyed', rate_limiter.token_bucket({RATE}, '1 second', capacity => {KEYED_CAPACITY}));
             SELECT rate_limiter.define('overload_global', rate_limiter.token_bucket({RATE}, '1 second', capacity => {SHARDED_CAPACITY}, shards => {SHARDS}));
             SELECT rate_limiter.define('overload_keyed_work', rate_limiter.token_bucket({RATE_WITH_WORK}, '1 second', capacity => {KEYED_CAPACITY}));
             SELECT rate_limiter.define('overload_global_work', rate_limiter.token_bucket({RATE_WITH_WORK}, '1 second', capacity => {SHARDED_CAPACITY}, shards => {SHARDS}));"
        ))
        .expect("define the limits");
    let mut setups = Vec::new();
    for work in [false, true] {
        for sharded in [false, true] {
            for demand in DEMANDS {
                for lock_free in [true, false] {
                    setups.push(Setup {
                        sharded,
                        demand,
                        work,
                        lock_free,
                    });
                }
            }
        }
    }
    // Rounds interleave the whole grid, each starting at another place.
    let mut runs: Vec<Vec<Run>> = setups.iter().map(|_| Vec::new()).collect();
    for round in 0..ROUNDS {
        for turn in 0..setups.len() {
            let i = (round * 7 + turn) % setups.len();
            let setup = setups[i];
            let run = measure(bench, setup, seconds);
            eprintln!(
                "  {}, {}, {:.0}%, lock-free {}: {:.0} admitted/s, served {:.0}%, refused p50 {:.2} p99 {:.2} ms, admitted p50 {:.2} p99 {:.2} ms, bound {:.3}",
                setup.limit_label(),
                setup.work_label(),
                setup.demand * 100.0,
                if setup.lock_free { "on" } else { "off" },
                run.admitted_per_second,
                run.served * 100.0,
                run.p50_refused_ms,
                run.p99_refused_ms,
                run.p50_admitted_ms,
                run.p99_admitted_ms,
                run.bound_share
            );
            runs[i].push(run);
        }
    }
    let figure = |i: usize, f: fn(&Run) -> f64| Samples::new(runs[i].iter().map(f).collect());
    let index = |sharded: bool, demand: f64, work: bool, lock_free: bool| {
        setups
            .iter()
            .position(|s| {
                *s == Setup {
                    sharded,
                    demand,
                    work,
                    lock_free,
                }
            })
            .unwrap()
    };
    let table: String = setups
        .iter()
        .enumerate()
        .map(|(i, setup)| {
            format!(
                "| {} | {} | {:.0} | {:.0}% | {} | {} | {} | {} | {} | {} | {} | {} |\n",
                setup.limit_label(),
                setup.work_label(),
                setup.rate(),
                setup.demand * 100.0,
                if setup.lock_free { "on" } else { "off" },
                figure(i, |r| r.admitted_per_second).show(0),
                figure(i, |r| r.served * 100.0).show(0),
                figure(i, |r| r.p50_refused_ms).show(2),
                figure(i, |r| r.p99_refused_ms).show(2),
                figure(i, |r| r.p50_admitted_ms).show(2),
                figure(i, |r| r.p99_admitted_ms).show(2),
                figure(i, |r| r.bound_share).show(3),
            )
        })
        .collect();
    report.scenario(
        "Scenario 8: overload, with and without lock-free refusals",
        format!(
            "A token bucket of {RATE:.0} tokens per second ({RATE_WITH_WORK:.0} with 2 ms of work in each \
             admitted transaction: one key's row serves only a few hundred such transactions a second, so at \
             {RATE:.0}/s the queue on the row, not the limit, would decide): one key (capacity {KEYED_CAPACITY:.0}) \
             and a global limit of {SHARDS} shards (capacity {SHARDED_CAPACITY:.0}), called by {CLIENTS} connections on an open-loop \
             schedule (Poisson arrivals, each connection keeping its share of the schedule as pgbench `-R` does) \
             at 50%, 150%, 300% and 1000% of the rate for {seconds} s per run; synchronous_commit on. \
             \"call only\" is one statement per transaction; \"call + 2 ms\" is `BEGIN`, the call, \
             `SELECT pg_sleep(0.002)` when admitted, `COMMIT`. \"lock-free\" is \
             `rate_limiter.lock_free_refusals`: on (the default), a call the committed state refuses answers \
             without the row lock; off, every call locks the row before it decides. {ROUNDS} rounds over the \
             whole grid in rotated order; median (min–max).\n\n\
             Latency counts from each call's scheduled arrival, so it includes waiting for a locked row and the \
             server falling behind the schedule (served: completed calls over scheduled arrivals); refused and \
             admitted calls are shown apart. Bound is admitted / (capacity + rate × elapsed), elapsed from the \
             first decision to the last on the server's clock; it must never exceed 1.\n\n\
             | limit | transaction | rate/s | demand | lock-free | admitted/s | served % | refused p50 ms | refused p99 ms | admitted p50 ms | admitted p99 ms | bound |\n\
             |---|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|\n{table}"
        ),
        "what a flood on one limit (a botnet on one login key, a global limit at ten times its rate) does to refused and admitted calls, with and without the lock-free refusal.",
        "many keys at once (scenario 2), or a flood spread over a Citus cluster.",
    );
    for sharded in [false, true] {
        let limit = if sharded {
            "global, 8 shards"
        } else {
            "one key"
        };
        for demand in [1.5, 3.0, 10.0] {
            let i = index(sharded, demand, false, true);
            report.ratio(
                &format!(
                    "S8 {limit}, {:.0}% demand, call only: admitted / rate",
                    demand * 100.0
                ),
                Samples::new(
                    runs[i]
                        .iter()
                        .map(|r| r.admitted_per_second / RATE)
                        .collect(),
                ),
                0.95,
                false,
            );
        }
        let calm = index(sharded, 0.5, false, true);
        for demand in [3.0, 10.0] {
            let i = index(sharded, demand, false, true);
            report.ratio(
                &format!(
                    "S8 {limit}, call only: p99 of all calls at {:.0}% / at 50%",
                    demand * 100.0
                ),
                figure(i, |r| r.p99_all_ms).zip(&figure(calm, |r| r.p99_all_ms), |a, b| a / b),
                2.0,
                true,
            );
        }
        let on = index(sharded, 3.0, false, true);
        let off = index(sharded, 3.0, false, false);
        report.ratio_without_target(
            &format!(
                "S8 {limit}, 300% demand, call only: p99 of refused calls, lock-free on / off"
            ),
            figure(on, |r| r.p99_refused_ms).zip(&figure(off, |r| r.p99_refused_ms), |a, b| a / b),
        );
    }
    let highest = runs
        .iter()
        .flatten()
        .map(|run| run.bound_share)
        .fold(0.0, f64::max);
    report.ratio(
        &format!(
            "S8 admitted / bound, the highest of all {} runs",
            runs.iter().map(Vec::len).sum::<usize>()
        ),
        Samples::new(vec![highest]),
        1.0,
        true,
    );
}
