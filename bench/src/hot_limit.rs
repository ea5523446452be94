//! Scenario 5: one hot limit. A limit's row stays locked until the caller's
//! transaction commits, so every caller of one busy global limit waits for
//! the previous caller's whole transaction; `shards => N` splits the limit
//! over N rows so that up to N transactions can hold one each.
//!
//! CLIENTS connections (one thread each), synchronous_commit on, each
//! running transactions as an application does, statement by statement:
//! `BEGIN`; the prepared `rate_limit` call; `SELECT pg_sleep(0.002)` (2 ms
//! of other work with the row locked); `COMMIT`. For SECONDS seconds per
//! configuration: the global limit with 1, 8 and 16 shards; the ceiling (the
//! same calls on an unsharded limit spread over KEYS keys, so that no two
//! transactions share a row); and 16 shards with the limit set 25% above
//! the demand measured with 16 shards, to see how many calls sharding
//! refuses below the limit. Throughput is in transactions per second (one
//! call per transaction), refusals in % of calls.

use crate::report::Report;
use crate::Bench;
use rand::Rng;
use std::sync::Barrier;
use std::time::{Duration, Instant};

/// Seconds per configuration.
const SECONDS: usize = 10;
/// Client connections, one thread each.
const CLIENTS: usize = 16;
/// Tokens per second of configurations 1-4, well above the demand (at most
/// CLIENTS / 2 ms = 8,000 calls per second), so that nothing is refused.
const RATE: f64 = 10_000.0;
/// The ceiling's keys are drawn from 1..=KEYS.
const KEYS: u32 = 1_000_000;

/// Defines `name` as a token bucket of `rate` tokens per second (capacity
/// `rate`) over `shards` rows, empties the state and checkpoints; then runs
/// CLIENTS clients calling it for `seconds` seconds, on random keys in
/// 1..=`keys` if given, else on the global limit. Returns (transactions per
/// second, calls admitted, calls refused). Panics on any SQL error.
fn measure(
    bench: &Bench,
    seconds: usize,
    name: &str,
    rate: f64,
    shards: i32,
    keys: Option<u32>,
) -> (f64, u64, u64) {
    let mut admin = bench.connect();
    admin
        .execute(
            "SELECT rate_limiter.define($1::text, rate_limiter.token_bucket($2::float8, '1 second', \
             capacity => $2::float8, shards => $3::int4))",
            &[&name, &rate, &shards],
        )
        .expect("define the hot limit");
    admin
        .batch_execute("TRUNCATE rate_limiter.rate_limits; CHECKPOINT")
        .expect("truncate and checkpoint");

    let call = match keys {
        None => "SELECT ok FROM rate_limiter.rate_limit($1::text)",
        Some(_) => "SELECT ok FROM rate_limiter.rate_limit($1::text, key => $2::text)",
    };
    // Connected and prepared here, so that a failure cannot leave the
    // other threads waiting at the barrier.
    let clients: Vec<_> = (0..CLIENTS)
        .map(|_| {
            let mut client = bench.connect();
            client
                .batch_execute("SET synchronous_commit = on")
                .expect("set synchronous_commit");
            let statement = client.prepare(call).expect("prepare the call");
            (client, statement)
        })
        .collect();
    let barrier = Barrier::new(CLIENTS);
    let duration = Duration::from_secs(seconds as u64);

    // Per client: (transactions per second, admitted, refused).
    let results: Vec<(f64, u64, u64)> = std::thread::scope(|scope| {
        let threads: Vec<_> = clients
            .into_iter()
            .map(|(mut client, statement)| {
                let barrier = &barrier;
                scope.spawn(move || {
                    let mut rng = rand::rng();
                    let (mut admitted, mut refused) = (0, 0);
                    barrier.wait();
                    let start = Instant::now();
                    while start.elapsed() < duration {
                        let mut transaction = client.transaction().expect("BEGIN");
                        let key = keys.map(|keys| rng.random_range(1..=keys).to_string());
                        let row = match &key {
                            None => transaction.query_one(&statement, &[&name]),
                            Some(key) => transaction.query_one(&statement, &[&name, key]),
                        }
                        .expect("rate_limit call");
                        transaction
                            .batch_execute("SELECT pg_sleep(0.002)")
                            .expect("pg_sleep");
                        transaction.commit().expect("COMMIT");
                        if row.get::<_, bool>(0) {
                            admitted += 1;
                        } else {
                            refused += 1;
                        }
                    }
                    let transactions = (admitted + refused) as f64;
                    (
                        transactions / start.elapsed().as_secs_f64(),
                        admitted,
                        refused,
                    )
                })
            })
            .collect();
        threads
            .into_iter()
            .map(|thread| thread.join().expect("a client failed (its error is above)"))
            .collect()
    });
    results
        .iter()
        .fold((0.0, 0, 0), |(tps, admitted, refused), client| {
            (tps + client.0, admitted + client.1, refused + client.2)
        })
}

/// Refused calls in % of all calls.
fn refused_percent(admitted: u64, refused: u64) -> f64 {
    100.0 * refused as f64 / (admitted + refused).max(1) as f64
}

pub fn run(bench: &Bench, report: &mut Report) {
    let seconds = bench.scaled(SECONDS).max(2);
    // (configuration, shards, tps, refused %)
    let mut rows: Vec<(String, String, f64, f64)> = Vec::new();
    let mut record = |label: String, shards: String, (tps, admitted, refused): (f64, u64, u64)| {
        let percent = refused_percent(admitted, refused);
        eprintln!(
            "  {label}: {tps:.0} transactions/s, {admitted} admitted, {refused} refused ({percent:.2}%)"
        );
        rows.push((label, shards, tps, percent));
        (tps, percent)
    };

    let (one, _) = record(
        "global limit, 1 shard".to_string(),
        "1".to_string(),
        measure(bench, seconds, "hot_1", RATE, 1, None),
    );
    let (eight, _) = record(
        "global limit, 8 shards".to_string(),
        "8".to_string(),
        measure(bench, seconds, "hot_8", RATE, 8, None),
    );
    let (sixteen, _) = record(
        "global limit, 16 shards".to_string(),
        "16".to_string(),
        measure(bench, seconds, "hot_16", RATE, 16, None),
    );
    record(
        "ceiling: 1,000,000 keys".to_string(),
        "1 per key".to_string(),
        measure(bench, seconds, "hot_keys", RATE, 1, Some(KEYS)),
    );
    // Demand is 80% of the limit: the tps just measured with 16 shards.
    let near = 1.25 * sixteen;
    let (_, near_percent) = record(
        format!("global limit at {near:.0}/s (demand 80%), 16 shards"),
        "16".to_string(),
        measure(bench, seconds, "hot_16_near", near, 16, None),
    );

    let table: String = rows
        .iter()
        .map(|(label, shards, tps, percent)| {
            format!(
                "| {label} | {shards} | {tps:.0} | {:.2}x | {percent:.2} |\n",
                tps / one
            )
        })
        .collect();
    report.section(
        "Scenario 5: one hot limit (transactions per second)",
        format!(
            "{CLIENTS} clients, synchronous_commit on, {seconds} s per configuration; each transaction is \
             `BEGIN`, one `rate_limit` call, `SELECT pg_sleep(0.002)`, `COMMIT`, statement by statement. \
             The limit's row stays locked for the whole transaction, the 2 ms and the commit's WAL flush \
             included, so all callers of one row queue behind each other; with N shards up to N \
             transactions hold different rows at once. The ceiling is the same work on an unsharded limit \
             with random keys in 1..1,000,000, where no two transactions share a row. The limit is \
             {RATE:.0}/s, above the demand (at most {CLIENTS} / 2 ms = 8,000 calls/s), so refusals should \
             be about 0, except in the last row: there it is 25% above the demand measured with 16 shards.\n\n\
             | configuration | shards | transactions/s | ratio to 1 shard | refused (% of calls) |\n\
             |---|---:|---:|---:|---:|\n{table}"
        ),
    );
    report.ratio(
        "S5 hot limit tps: 8 shards / 1 shard",
        eight / one,
        6.0,
        false,
    );
    report.ratio(
        "S5 hot limit tps: 16 shards / 1 shard",
        sixteen / one,
        10.0,
        false,
    );
    report.ratio(
        "S5 refusals at 80% of the limit (16 shards), % / 5%",
        near_percent / 5.0,
        1.0,
        true,
    );
}
