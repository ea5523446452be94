//! A shard moved under load loses no row and admits no more than its
//! capacity.

use super::*;

/// Runs `statement` (its first column `ok`; `$1` = `argument`, if any) over and
/// over from 6 connections spread over the three nodes while the shard
/// `shard` of the state table moves (logically) from worker 1 to worker 2,
/// from 200 calls before the move until 200 calls after it: how many calls
/// were admitted, and how many ended in an error (rolled back).
fn calls_while_a_shard_moves(statement: &str, argument: Option<&str>, shard: i64) -> (u32, u32) {
    let urls = urls();
    calls_under_load(statement, argument, || {
        connect(&urls[0])
            .execute(
                "SELECT citus_move_shard_placement($1, '127.0.0.1', $2, '127.0.0.1', $3, \
                 shard_transfer_mode => 'force_logical')",
                &[&shard, &port_of(&urls[1]), &port_of(&urls[2])],
            )
            .expect("move the shard from worker 1 to worker 2 under load");
    })
}

#[test]
#[ignore = "needs the Citus cluster of scripts/test.sh"]
fn a_shard_moved_under_load_loses_no_row_and_never_over_admits() {
    make_distributed();
    forget("move");
    const CAPACITY: f64 = 100_000.0;
    let mut coordinator = coordinator();
    define(&mut coordinator, "move", CAPACITY);
    let (key, _) = keys_on_each_worker(&mut coordinator, "move-");
    let shard: i64 = coordinator
        .query_one(
            "SELECT get_shard_id_for_distribution_column('rate_limiter.rate_limits', $1::text)",
            &[&key],
        )
        .expect("the key's shard")
        .get(0);
    // Other rows of the same shard, which the move must carry over too.
    let neighbours: Vec<String> = (0..2000)
        .map(|n| format!("move-neighbour-{n}"))
        .filter(|candidate| {
            coordinator
                .query_one(
                    "SELECT get_shard_id_for_distribution_column('rate_limiter.rate_limits', $1::text) = $2",
                    &[candidate, &shard],
                )
                .expect("shard")
                .get(0)
        })
        .take(20)
        .collect();
    for neighbour in &neighbours {
        assert!(consume(&mut coordinator, "move", Some(neighbour)));
    }

    let (admitted, failed) = calls_while_a_shard_moves(
        "SELECT ok FROM rate_limiter.rate_limit('move', $1)",
        Some(&key),
        shard,
    );
    eprintln!("shard move under load: {admitted} admitted, {failed} calls ended in an error");
    assert_eq!(
        node_of(&mut coordinator, &key),
        2,
        "the shard is on worker 2 now"
    );
    assert!(admitted > 0, "calls were admitted ({failed} failed)");
    // What is stored is what committed: capacity minus every admission.
    let remaining = stored(&mut coordinator, "move", &key).expect("the row survived the move");
    assert_eq!(
        remaining.round(),
        CAPACITY - f64::from(admitted),
        "stored state equals the admissions ({admitted} admitted, {failed} failed)"
    );
    for neighbour in &neighbours {
        assert_eq!(
            stored(&mut coordinator, "move", neighbour),
            Some(CAPACITY - 1.0),
            "{neighbour} moved with its shard"
        );
    }
    forget("move");
}

#[test]
#[ignore = "needs the Citus cluster of scripts/test.sh"]
fn a_shard_moved_under_load_of_a_sharded_global_limit_loses_no_row_and_never_over_admits() {
    // 8 shards of 10,000 tokens over both workers, which never refill
    // during the test.
    let (mut coordinator, name, nodes) = sharded_global_limit("gmove", 80_000.0);
    let urls = urls();
    // Consume once from each node, so that rows exist on both workers.
    for url in &urls {
        assert!(consume(&mut connect(url), &name, None));
    }
    // The Citus shard holding one of the limit's shards on worker 1.
    let moved = nodes
        .iter()
        .position(|node| *node == 1)
        .expect("a shard on worker 1");
    let shard: i64 = coordinator
        .query_one(
            "SELECT get_shard_id_for_distribution_column('rate_limiter.rate_limits', $1::text)",
            &[&format!("{name}/{moved}")],
        )
        .expect("its shard")
        .get(0);
    let statement = format!("SELECT ok FROM rate_limiter.rate_limit('{name}')");
    let (admitted, failed) = calls_while_a_shard_moves(&statement, None, shard);
    eprintln!("shard move under load of a sharded global limit: {admitted} admitted, {failed} calls ended in an error");
    assert_eq!(
        node_of(&mut coordinator, &format!("{name}/{moved}")),
        2,
        "the limit's shard {moved} is on worker 2 now"
    );
    assert!(admitted > 0, "calls were admitted ({failed} failed)");
    // What is stored is what committed: the capacity minus every
    // admission (3 before the move), over all 8 shards (a shard without a
    // row is full).
    let stored: f64 = shard_values(&mut coordinator, &name, 8)
        .iter()
        .map(|value| value.unwrap_or(10_000.0))
        .sum();
    assert_eq!(
        stored.round(),
        80_000.0 - f64::from(admitted) - 3.0,
        "stored state equals the admissions ({admitted} admitted, {failed} failed)"
    );
    forget("gmove");
}
