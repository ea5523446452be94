//! rate_limit_all under real concurrency, with the clock stopped
//! (`rate_limiter.now_override`) so nothing refills. Three limits (one of
//! them sharded); the tests run in rounds, each on a new key, so every
//! round starts with no state rows at all and the connections race to
//! create them: the moment when some rows exist and others are still
//! missing is where a call that did not hold its missing rows deadlocked
//! (40P01) against one that had locked a row inserted meanwhile.
//!
//! In every round no call fails, and every limit lost exactly the tokens
//! the admitted calls took (less what was credited back).

use postgres::Client;
use rand::seq::{IndexedRandom, SliceRandom};
use rand::Rng;
use rate_limiter_integration_tests::{connect, unique_name};
use std::sync::{Arc, Barrier};
use std::thread;

const CONNECTIONS: usize = 8;
const ROUNDS: usize = 40;
/// Calls per connection per round: 48 calls a round.
const CALLS: usize = 6;
/// (config, capacity, shards) of the three limits.
const LIMITS: [(&str, f64, i64); 3] = [
    (
        "rate_limiter.token_bucket(50, '1 second', capacity => 10)",
        10.0,
        1,
    ),
    (
        "rate_limiter.token_bucket(100, '1 second', capacity => 20)",
        20.0,
        1,
    ),
    (
        "rate_limiter.token_bucket(200, '1 second', capacity => 40, shards => 4)",
        40.0,
        4,
    ),
];
const ALL: &str = "SELECT bool_and(ok) FROM rate_limiter.rate_limit_all(\
     ARRAY(SELECT ROW(n, $2, 1, NULL)::rate_limiter.request FROM unnest($1::text[]) AS n))";

/// Tokens taken from each of the three limits by one call (credits
/// negative).
type Taken = [i64; 3];

/// Charges 1 to each limit of `chosen` (indexes into `names`) in one
/// rate_limit_all call, in the order given, in a transaction of its own.
fn charge_all(
    client: &mut Client,
    names: &[String],
    chosen: &[usize],
    key: &str,
) -> Result<Taken, postgres::Error> {
    let order: Vec<&str> = chosen.iter().map(|&i| names[i].as_str()).collect();
    let mut transaction = client.transaction()?;
    let ok: bool = transaction.query_one(ALL, &[&order, &key])?.get(0);
    transaction.commit()?;
    let mut taken = [0; 3];
    if ok {
        for &i in chosen {
            taken[i] += 1;
        }
    }
    Ok(taken)
}

/// Defines the three limits, runs `ROUNDS` rounds of `CALLS` calls on each
/// of `CONNECTIONS` connections (`call(connection number, client, names,
/// key)`, started together each round), checks that no call failed and
/// that each limit's stored state on each round's key is its capacity less
/// what the calls took. Returns the tokens taken per round.
fn run_rounds(
    call: fn(usize, &mut Client, &[String], &str) -> Result<Taken, postgres::Error>,
) -> Vec<Taken> {
    let mut client = connect();
    let names: Vec<String> = (0..3).map(|i| unique_name(&format!("all{i}"))).collect();
    for (name, (config, _, _)) in names.iter().zip(LIMITS) {
        client
            .execute(
                &format!("SELECT rate_limiter.define($1, {config})"),
                &[name],
            )
            .unwrap();
    }
    let barrier = Arc::new(Barrier::new(CONNECTIONS));
    let workers: Vec<_> = (0..CONNECTIONS)
        .map(|connection| {
            let (names, barrier) = (names.clone(), barrier.clone());
            thread::spawn(move || {
                let mut client = connect();
                client
                    .batch_execute("SET rate_limiter.now_override = '2026-01-01 00:00:00+00'")
                    .unwrap();
                let mut taken = vec![[0i64; 3]; ROUNDS];
                // A failed call is recorded, not raised: the other
                // connections would wait at the next round's barrier forever.
                let mut failures = Vec::new();
                for (round, taken) in taken.iter_mut().enumerate() {
                    let key = format!("k{round}");
                    barrier.wait();
                    for _ in 0..CALLS {
                        match call(connection, &mut client, &names, &key) {
                            Ok(took) => {
                                for (total, took) in taken.iter_mut().zip(took) {
                                    *total += took;
                                }
                            }
                            Err(error) => failures.push(format!("round {round}: {error:?}")),
                        }
                    }
                }
                (taken, failures)
            })
        })
        .collect();
    let mut taken = vec![[0i64; 3]; ROUNDS];
    let mut failures = Vec::new();
    for worker in workers {
        let (took, failed) = worker.join().expect("a connection failed");
        for (total, took) in taken.iter_mut().zip(took) {
            for (total, took) in total.iter_mut().zip(took) {
                *total += took;
            }
        }
        failures.extend(failed);
    }
    assert!(
        failures.is_empty(),
        "{} calls failed, the first: {}",
        failures.len(),
        failures[0]
    );
    // What is left on each key is the capacity less what was taken (summed
    // over the sharded limit's rows; a shard without a row is full).
    for (i, (name, (_, capacity, shards))) in names.iter().zip(LIMITS).enumerate() {
        for (round, taken) in taken.iter().enumerate() {
            let key = format!("k{round}");
            let row = client
                .query_one(
                    "SELECT coalesce(sum(value), 0), count(*) FROM rate_limiter.rate_limits \
                     WHERE name = $1 AND key = $2",
                    &[name, &key],
                )
                .unwrap();
            let (value, rows): (f64, i64) = (row.get(0), row.get(1));
            let left = value + capacity / shards as f64 * (shards - rows) as f64;
            assert!(
                (left - (capacity - taken[i] as f64)).abs() < 1e-9,
                "{name} {key}: {left} left of {capacity}, {} taken",
                taken[i]
            );
        }
    }
    for name in &names {
        client
            .execute("SELECT rate_limiter.undefine($1)", &[name])
            .unwrap();
    }
    taken
}

/// Every call names all three limits, in a random order: exactly as many
/// calls are admitted as the tightest limit holds (10), and each limit
/// lost exactly 10 tokens (each admitted call consumed from all three,
/// each refused one from none).
#[test]
fn random_orders_never_deadlock_or_over_admit() {
    let taken = run_rounds(|_, client, names, key| {
        let mut chosen = [0, 1, 2];
        chosen.shuffle(&mut rand::rng());
        charge_all(client, names, &chosen, key)
    });
    assert_eq!(taken, vec![[10, 10, 10]; ROUNDS], "tokens taken per round");
}

/// Every consuming call at once on the same rows: rate_limit_all over all
/// three limits or over two of them (random order), rate_limit of one
/// limit (the sharded one takes the sharded path), and rate_credit giving
/// back a token this connection took. No call deadlocks, and the stored
/// state matches what the calls took.
#[test]
fn every_consuming_call_together_never_deadlocks() {
    run_rounds(|connection, client, names, key| {
        let mut rng = rand::rng();
        match connection % 4 {
            0 | 1 => {
                let mut chosen = [0, 1, 2];
                chosen.shuffle(&mut rng);
                charge_all(client, names, &chosen, key)
            }
            2 => {
                let chosen: Vec<usize> = [0, 1, 2].choose_multiple(&mut rng, 2).copied().collect();
                charge_all(client, names, &chosen, key)
            }
            _ => {
                let i = rng.random_range(0..3);
                let mut taken = [0; 3];
                let ok: bool = client
                    .query_one(
                        "SELECT ok FROM rate_limiter.rate_limit($1, $2)",
                        &[&names[i], &key],
                    )?
                    .get(0);
                if ok {
                    taken[i] += 1;
                    if rng.random_bool(0.5) {
                        client.execute(
                            "SELECT rate_limiter.rate_credit($1, $2, 1)",
                            &[&names[i], &key],
                        )?;
                        taken[i] -= 1;
                    }
                }
                Ok(taken)
            }
        }
    });
}
