//! rate_limiter.stats against real concurrent connections (the test server
//! preloads the library): the counters equal what the calls answered and
//! the number of calls made, exactly, after a mixed workload from 8
//! connections; a limit in shadow mode refuses (in its counters and its
//! state) exactly where an enforcing twin refuses; `contended` counts a
//! sharded call that met a held shard (`stats_contended.rs`, with
//! `rate_wait` counting once when it sleeps and loses a race). (The
//! table's room: `stats_room.rs`; the exporter: `exporter.rs`.)

use postgres::Client;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rate_limiter_integration_tests::stats::{counted, Counts};
use rate_limiter_integration_tests::{connect, unique_name};
use std::collections::HashMap;
use std::thread;

const CONNECTIONS: usize = 8;
const ITERATIONS: usize = 250;

/// The limits of the workload (names unique to this run).
struct Limits {
    keyed: String,
    global: String,
    twin: String,
    shadow: String,
    wait: String,
    /// A guard() trigger's limit, on the table `guarded`.
    guard: String,
    guarded: String,
    postgrest: String,
}

// Capacities (the clock is stopped: tokens come back only by rate_credit
// and rollbacks).
const KEYED: f64 = 20.0;
const GLOBAL: f64 = 80.0;
const TWIN: f64 = 30.0;
const WAIT: f64 = 15.0;
const GUARD: f64 = 25.0;
const POSTGREST: f64 = 25.0;

/// What one connection saw, per name: what it was answered, how many
/// consuming calls it made (counted before each call, whatever it
/// answered), and how many of the shadow limit's calls it saw leave the
/// shadow's stored tokens unchanged (read from the state, not from the
/// answer, which is always ok).
#[derive(Default)]
struct Observed {
    answered: HashMap<String, Counts>,
    invoked: HashMap<String, i64>,
    shadow_unchanged: i64,
}

/// One connection's share of the workload: each iteration is one
/// transaction doing one of the consuming calls (every consuming path:
/// rate_limit keyed, global with shards and reserving, rate_limit_all,
/// rate_wait, rate_credit, guard(), postgrest_limit(), a shadow limit), a
/// quarter of them rolled back. Returns what it observed.
fn work(limits: &Limits, seed: u64) -> Observed {
    let mut client = connect();
    client
        .batch_execute("SET rate_limiter.now_override = '2026-01-01 00:00:00+00'")
        .expect("stop the clock");
    let mut rng = StdRng::seed_from_u64(seed);
    let mut counts: HashMap<String, Counts> = HashMap::new();
    let mut invoked: HashMap<String, i64> = HashMap::new();
    let mut shadow_unchanged = 0;
    let mut invoke = |name: &String| *invoked.entry(name.clone()).or_default() += 1;
    for _ in 0..ITERATIONS {
        let mut transaction = client.transaction().expect("begin");
        let key = format!("k{}", rng.random_range(0..4));
        let mut aborted = false;
        match rng.random_range(0..9) {
            // rate_limit, keyed, sometimes a reservation of 2.
            0 | 1 => {
                let reserve = rng.random_bool(0.3);
                let count = if reserve { 2.0 } else { 1.0 };
                invoke(&limits.keyed);
                let row = transaction
                    .query_one(
                        "SELECT ok, coalesce(extract(epoch FROM retry_after) > 0, false), remaining
                         FROM rate_limiter.rate_limit($1, $2, $3, reserve => $4)",
                        &[&limits.keyed, &key, &count, &reserve],
                    )
                    .expect("rate_limit keyed");
                counts.entry(limits.keyed.clone()).or_default().answer(
                    count,
                    KEYED,
                    row.get(0),
                    row.get(1),
                    row.get(2),
                );
            }
            // rate_limit of the global limit with 8 shards.
            2 => {
                invoke(&limits.global);
                let row = transaction
                    .query_one(
                        "SELECT ok, remaining FROM rate_limiter.rate_limit($1)",
                        &[&limits.global],
                    )
                    .expect("rate_limit sharded");
                counts.entry(limits.global.clone()).or_default().answer(
                    1.0,
                    GLOBAL,
                    row.get(0),
                    false,
                    row.get(1),
                );
            }
            // The enforcing twin, then the shadow limit, in one
            // transaction: every transaction locks the twin's row first
            // and holds it to the end, so both rows see the same
            // sequence of decisions.
            3 => {
                invoke(&limits.twin);
                invoke(&limits.shadow);
                let twin = transaction
                    .query_one(
                        "SELECT ok, remaining FROM rate_limiter.rate_limit($1)",
                        &[&limits.twin],
                    )
                    .expect("rate_limit twin");
                // The shadow's tokens before its call: every call of it
                // runs under the twin's row lock, which this transaction
                // holds, and the clock is stopped.
                let before: f64 = transaction
                    .query_one(
                        "SELECT value FROM rate_limiter.status($1)",
                        &[&limits.shadow],
                    )
                    .expect("status of the shadow limit")
                    .get(0);
                let shadow = transaction
                    .query_one(
                        "SELECT ok, retry_after IS NULL, remaining FROM rate_limiter.rate_limit($1, throws => true)",
                        &[&limits.shadow],
                    )
                    .expect("shadow mode never raises");
                let (twin_ok, twin_remaining): (bool, f64) = (twin.get(0), twin.get(1));
                assert!(shadow.get::<_, bool>(0) && shadow.get::<_, bool>(1));
                assert_eq!(shadow.get::<_, f64>(2), twin_remaining);
                let after: f64 = transaction
                    .query_one(
                        "SELECT value FROM rate_limiter.status($1)",
                        &[&limits.shadow],
                    )
                    .expect("status of the shadow limit")
                    .get(0);
                if after == before {
                    shadow_unchanged += 1;
                } else {
                    assert_eq!(after, before - 1.0, "a shadow admission takes its token");
                }
                counts.entry(limits.twin.clone()).or_default().answer(
                    1.0,
                    TWIN,
                    twin_ok,
                    false,
                    twin_remaining,
                );
                let shadow = counts.entry(limits.shadow.clone()).or_default();
                if twin_ok {
                    shadow.answer(1.0, TWIN, true, false, twin_remaining);
                } else {
                    shadow.calls += 1;
                    shadow.shadow_refused += 1;
                }
            }
            // rate_limit_all over a keyed limit and the global one: a row
            // per request, as answered.
            // A call refused as a whole consumed nothing: only its
            // refused requests count (docs/guarantees.md, "Statistics and
            // shadow mode").
            4 => {
                let rows = transaction
                    .query(
                        "SELECT name, ok, remaining FROM rate_limiter.rate_limit_all(
                             ARRAY[($1, $2, 1, NULL), ($3, NULL, 1, NULL)]::rate_limiter.request[])",
                        &[&limits.keyed, &key, &limits.global],
                    )
                    .expect("rate_limit_all");
                let refused = rows.iter().any(|row| !row.get::<_, bool>(1));
                for row in rows {
                    let name: String = row.get(0);
                    if refused && row.get::<_, bool>(1) {
                        continue;
                    }
                    invoke(&name);
                    let capacity = if name == limits.keyed { KEYED } else { GLOBAL };
                    counts.entry(name).or_default().answer(
                        1.0,
                        capacity,
                        row.get(1),
                        false,
                        row.get(2),
                    );
                }
            }
            // rate_wait: its final answer (no waiting: timeout 0).
            5 => {
                invoke(&limits.wait);
                let row = transaction
                    .query_one(
                        "SELECT ok, remaining FROM rate_limiter.rate_wait($1, timeout => '0')",
                        &[&limits.wait],
                    )
                    .expect("rate_wait");
                counts.entry(limits.wait.clone()).or_default().answer(
                    1.0,
                    WAIT,
                    row.get(0),
                    false,
                    row.get(1),
                );
            }
            // guard(): an insert the trigger admits, or refuses (RL429,
            // which aborts the transaction). What an admitted call left is
            // the limit's value right after it (the row is ours, locked).
            7 => {
                invoke(&limits.guard);
                let inserted = transaction.execute(
                    &format!("INSERT INTO {} (k) VALUES ($1)", limits.guarded),
                    &[&key],
                );
                let counts = counts.entry(limits.guard.clone()).or_default();
                match inserted {
                    Ok(_) => {
                        let remaining: f64 = transaction
                            .query_one(
                                "SELECT value FROM rate_limiter.status($1, $2)",
                                &[&limits.guard, &key],
                            )
                            .expect("status")
                            .get(0);
                        counts.answer(1.0, GUARD, true, false, remaining);
                    }
                    Err(error) => {
                        assert_eq!(error.code().map(|c| c.code()), Some("RL429"), "{error}");
                        counts.answer(1.0, GUARD, false, false, 0.0);
                        aborted = true;
                    }
                }
            }
            // postgrest_limit(): admitted (the RateLimit header says what
            // is left: whole tokens, the clock being stopped), or refused
            // (SQLSTATE PGRST, which aborts the transaction).
            8 => {
                invoke(&limits.postgrest);
                let answered = transaction.query_one(
                    "SELECT rate_limiter.postgrest_limit($1, $2), current_setting('response.headers')",
                    &[&limits.postgrest, &key],
                );
                let counts = counts.entry(limits.postgrest.clone()).or_default();
                match answered {
                    Ok(row) => {
                        let headers: String = row.get(1);
                        let remaining: f64 = headers
                            .split(";r=")
                            .nth(1)
                            .and_then(|rest| rest.split(';').next())
                            .and_then(|r| r.parse().ok())
                            .unwrap_or_else(|| panic!("r= in {headers}"));
                        counts.answer(1.0, POSTGREST, true, false, remaining);
                    }
                    Err(error) => {
                        assert_eq!(error.code().map(|c| c.code()), Some("PGRST"), "{error}");
                        counts.answer(1.0, POSTGREST, false, false, 0.0);
                        aborted = true;
                    }
                }
            }
            // rate_credit: tokens given back.
            _ => {
                transaction
                    .execute(
                        "SELECT rate_limiter.rate_credit($1, $2, 1)",
                        &[&limits.keyed, &key],
                    )
                    .expect("rate_credit");
                counts.entry(limits.keyed.clone()).or_default().credited += 1.0;
            }
        }
        // Counting is not transactional: a rolled-back decision counts.
        if aborted || rng.random_bool(0.25) {
            transaction.rollback().expect("rollback");
        } else {
            transaction.commit().expect("commit");
        }
    }
    Observed {
        answered: counts,
        invoked,
        shadow_unchanged,
    }
}

#[test]
fn counters_equal_what_the_calls_answered() {
    let limits = Limits {
        keyed: unique_name("stats_keyed"),
        global: unique_name("stats_global"),
        twin: unique_name("stats_twin"),
        shadow: unique_name("stats_shadow"),
        wait: unique_name("stats_wait"),
        guard: unique_name("stats_guard"),
        guarded: unique_name("stats_guarded"),
        postgrest: unique_name("stats_postgrest"),
    };
    let mut client = connect();
    for (name, config, enforce) in [
        (
            &limits.keyed,
            format!("rate_limiter.token_bucket({KEYED}, '1 hour', max_reserved => 2)"),
            true,
        ),
        (
            &limits.global,
            format!("rate_limiter.token_bucket({GLOBAL}, '1 hour', shards => 8)"),
            true,
        ),
        (
            &limits.twin,
            format!("rate_limiter.token_bucket({TWIN}, '1 hour')"),
            true,
        ),
        (
            &limits.shadow,
            format!("rate_limiter.token_bucket({TWIN}, '1 hour')"),
            false,
        ),
        (
            &limits.wait,
            format!("rate_limiter.token_bucket({WAIT}, '1 hour')"),
            true,
        ),
        (
            &limits.guard,
            format!("rate_limiter.token_bucket({GUARD}, '1 hour')"),
            true,
        ),
        (
            &limits.postgrest,
            format!("rate_limiter.token_bucket({POSTGREST}, '1 hour')"),
            true,
        ),
    ] {
        client
            .execute(
                &format!("SELECT rate_limiter.define($1, {config}, enforce => $2)"),
                &[name, &enforce],
            )
            .expect("define");
    }
    client
        .batch_execute(&format!(
            "CREATE TABLE {0} (k text);
             CREATE TRIGGER guard BEFORE INSERT ON {0}
                 FOR EACH ROW EXECUTE FUNCTION rate_limiter.guard('{1}', 'k');",
            limits.guarded, limits.guard
        ))
        .expect("a guarded table");
    let limits = std::sync::Arc::new(limits);
    let workers: Vec<_> = (0..CONNECTIONS)
        .map(|index| {
            let limits = limits.clone();
            thread::spawn(move || work(&limits, 1000 + index as u64))
        })
        .collect();
    let mut answered: HashMap<String, Counts> = HashMap::new();
    let mut invoked: HashMap<String, i64> = HashMap::new();
    let mut shadow_unchanged = 0;
    for worker in workers {
        let observed = worker.join().expect("a connection failed");
        for (name, counts) in observed.answered {
            answered.entry(name).or_default().add(&counts);
        }
        for (name, calls) in observed.invoked {
            *invoked.entry(name).or_default() += calls;
        }
        shadow_unchanged += observed.shadow_unchanged;
    }
    let every = [
        &limits.keyed,
        &limits.global,
        &limits.twin,
        &limits.shadow,
        &limits.wait,
        &limits.guard,
        &limits.postgrest,
    ];
    for name in every {
        let expected = answered.get(name.as_str()).copied().unwrap_or_default();
        let (counts, contended) = counted(&mut client, name);
        println!("{name}: {counts:?}, contended {contended}");
        assert_eq!(counts, expected, "{name}: the view against the answers");
        // Every consuming call counted exactly once, whatever it answered:
        // the calls the clients made, counted before each call.
        assert_eq!(
            counts.calls,
            invoked.get(name.as_str()).copied().unwrap_or(0),
            "{name}: the view against the calls made"
        );
        assert!(contended <= counts.calls);
        if name != &limits.global {
            assert_eq!(contended, 0, "{name} has no shards");
        }
    }
    // Refusals happened on every limit (the workload reaches its bounds)...
    for name in every.iter().filter(|name| **name != &limits.shadow) {
        assert!(answered[name.as_str()].refused > 0, "{name} never refused");
    }
    // ...and the shadow limit refused nobody; what the view counts as its
    // shadow refusals are the calls that left its stored tokens as they
    // were (seen in the state), and those are exactly the calls its
    // enforcing twin refused (seen in the twin's answers).
    let (twin, _) = counted(&mut client, &limits.twin);
    let (shadow, _) = counted(&mut client, &limits.shadow);
    assert_eq!(shadow.refused, 0);
    assert_eq!(shadow.shadow_refused, shadow_unchanged);
    assert_eq!(
        shadow_unchanged,
        answered[limits.twin.as_str()].refused,
        "the shadow refused where its twin did"
    );
    assert!(twin.refused > 0);
    let state = |client: &mut Client, name: &str| -> Vec<(f64, String)> {
        client
            .query(
                "SELECT value, ts::text FROM rate_limiter.rate_limits WHERE name = $1",
                &[&name],
            )
            .expect("state")
            .iter()
            .map(|row| (row.get(0), row.get(1)))
            .collect()
    };
    assert_eq!(
        state(&mut client, &limits.shadow),
        state(&mut client, &limits.twin)
    );
    client
        .batch_execute(&format!("DROP TABLE {}", limits.guarded))
        .expect("drop the guarded table");
}
