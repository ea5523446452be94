//! `prune()` on any node prunes every node's shards.

use super::*;

/// The ShareLocks on Citus's shard metadata this session holds (taken
/// for a write to a shard), and the shards of the state table placed on
/// its node.
fn metadata_locks_and_local_shards(client: &mut impl postgres::GenericClient) -> (i64, i64) {
    let row = client
        .query_one(
            "SELECT (SELECT count(*) FROM pg_locks WHERE pid = pg_backend_pid() \
                     AND locktype = 'advisory' AND objsubid = 8 AND mode = 'ShareLock'), \
                    (SELECT count(*) FROM pg_dist_shard JOIN pg_dist_placement USING (shardid) \
                     WHERE logicalrelid = 'rate_limiter.rate_limits'::regclass \
                       AND groupid = (SELECT groupid FROM pg_dist_local_group))",
            &[],
        )
        .expect("locks");
    (row.get(0), row.get(1))
}

#[test]
#[ignore = "needs the Citus cluster of scripts/test.sh"]
fn prune_on_any_node_deletes_what_every_nodes_shards_no_longer_need() {
    make_distributed();
    forget("prune");
    let urls = urls();
    let mut coordinator = coordinator();
    // prune-short refills a token every minute: full again within the
    // hour, not within the test's first seconds.
    coordinator
        .batch_execute(
            "SELECT rate_limiter.define('prune-short', rate_limiter.token_bucket(10, '10 minutes')); \
             SELECT rate_limiter.define('prune-long', rate_limiter.token_bucket(10, '1000 days'))",
        )
        .expect("define");
    let keys: Vec<String> = (0..20).map(|n| format!("prune-{n}")).collect();
    let mut on_worker = [0i64; 3];
    for key in &keys {
        assert!(consume(&mut coordinator, "prune-short", Some(key)));
        assert!(consume(&mut coordinator, "prune-long", Some(key)));
        on_worker[node_of(&mut coordinator, key)] += 1;
    }
    assert!(
        on_worker[1] > 0 && on_worker[2] > 0,
        "keys on both workers: {on_worker:?}"
    );
    let count = |client: &mut Client, name: &str| -> i64 {
        client
            .query_one(
                "SELECT count(*) FROM rate_limiter.rate_limits WHERE name = $1",
                &[&name],
            )
            .expect("count")
            .get(0)
    };
    // Now nothing is prunable anywhere.
    assert_eq!(prune(&mut coordinator, None), 0, "every row still counts");
    // An hour later, set in the calling session only (the clock travels
    // with the delegated prunes; the workers' own clocks say now), every
    // prune-short row is full again; the prune-long rows are not.
    let hour: String = coordinator
        .query_one("SELECT (now() + interval '1 hour')::text", &[])
        .expect("an hour later")
        .get(0);
    let set_clock = |client: &mut Client, at: &str| {
        client
            .execute(
                "SELECT set_config('rate_limiter.now_override', $1, false)",
                &[&at],
            )
            .expect("set the clock");
    };

    // From the coordinator (which holds no shard), inside a transaction:
    // every worker's rows; a rollback undoes it on both.
    set_clock(&mut coordinator, &hour);
    let mut transaction = coordinator.transaction().expect("begin");
    assert_eq!(prune(&mut transaction, None), 20, "both workers' full rows");
    transaction.rollback().expect("rollback");
    assert_eq!(count(&mut coordinator, "prune-short"), 20, "rolled back");

    // A read-only transaction: 25006, as on one server.
    let mut transaction = coordinator
        .build_transaction()
        .read_only(true)
        .start()
        .expect("begin read only");
    let error = transaction
        .query_one("SELECT rate_limiter.prune()", &[])
        .expect_err("read only");
    assert_eq!(
        error.code(),
        Some(&SqlState::READ_ONLY_SQL_TRANSACTION),
        "{error}"
    );
    transaction.rollback().expect("rollback");

    // From worker 1: its own shards directly (holding Citus's metadata
    // lock for a write to each, as a call's write holds it), worker 2's
    // through _prune_at; the commit uses 2PC (rows deleted on both).
    let (mut worker, notices) = connect_with_notices(&urls[1]);
    set_clock(&mut worker, &hour);
    worker
        .batch_execute("SET citus.log_remote_commands = on")
        .expect("log remote commands");
    taken(&notices);
    let mut transaction = worker.transaction().expect("begin");
    assert_eq!(prune(&mut transaction, None), 20, "both workers' full rows");
    let (locks, shards) = metadata_locks_and_local_shards(&mut transaction);
    assert!(shards > 0);
    assert_eq!(locks, shards, "one metadata lock per shard of its own");
    transaction.commit().expect("commit");
    let log = taken(&notices);
    assert!(
        log.iter().any(|line| line.contains("_prune_at")),
        "worker 2 reached through _prune_at: {log:#?}"
    );
    assert!(
        log.iter().any(|line| line.contains("PREPARE TRANSACTION")),
        "deleted on two nodes: 2PC: {log:#?}"
    );
    assert_eq!(
        count(&mut coordinator, "prune-short"),
        0,
        "every full row is gone"
    );
    assert_eq!(
        count(&mut coordinator, "prune-long"),
        20,
        "no row that still counts"
    );
    // A pruned limit answers as before: full.
    let remaining: f64 = coordinator
        .query_one(
            "SELECT remaining FROM rate_limiter.rate_limit('prune-short', 'prune-0')",
            &[],
        )
        .expect("rate_limit")
        .get(0);
    assert_eq!(remaining.round(), 9.0);

    // With older_than, an hour later still, from worker 2: also the rows
    // of a name without a definition untouched for longer, on both
    // workers.
    for key in &keys {
        coordinator
            .execute(
                "SELECT * FROM rate_limiter.rate_limit('prune-inline', $1, \
                 config => rate_limiter.token_bucket(10, '1000 days'))",
                &[key],
            )
            .expect("an inline config");
    }
    let two_hours: String = coordinator
        .query_one(
            "SELECT ($1::text::timestamptz + interval '1 hour')::text",
            &[&hour],
        )
        .expect("two hours later")
        .get(0);
    let mut worker = connect(&urls[2]);
    set_clock(&mut worker, &two_hours);
    assert_eq!(
        prune(&mut worker, Some("30 minutes")),
        20 + 1,
        "the inline rows, and prune-short's new one"
    );
    assert_eq!(count(&mut coordinator, "prune-inline"), 0);
    assert_eq!(count(&mut coordinator, "prune-long"), 20);
    forget("prune");
}
