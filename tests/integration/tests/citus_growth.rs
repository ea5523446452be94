//! Citus, day two (docs/guarantees.md, "Citus", "Shard moves,
//! splits and new nodes"): a cluster that grows and rebalances after
//! `distribute()`, on the real cluster of `scripts/citus.sh` (Citus 13.2.2
//! on PostgreSQL 15, 14.0.1 on 18), each under load: a node added with
//! `prepare_node()` for every type of tenant column the limiter may be
//! colocated with, takes shards and is drained and removed; splits and
//! tenant isolation keep every row in the mode that works and are refused
//! at once in the others; the rebalancer.
//!
//! Ignored by default; `scripts/test.sh` runs them with `--ignored`, one at
//! a time, after `citus/`.

use postgres::error::SqlState;
use rate_limiter_integration_tests::citus::{connect, coordinator, define, forget, port_of, urls};

/// `scripts/citus.sh` with `arguments` (the cluster's environment comes
/// from scripts/test.sh): what it printed.
fn citus_sh(arguments: &[&str]) -> String {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/citus.sh");
    let output = std::process::Command::new("bash")
        .arg(script)
        .args(arguments)
        .output()
        .expect("run scripts/citus.sh");
    assert!(
        output.status.success(),
        "citus.sh {arguments:?}: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).trim().to_string()
}

/// The directory of the cluster `scripts/test.sh` started.
fn cluster_dir() -> String {
    std::env::var("RATE_LIMITER_TEST_CITUS_DIR")
        .expect("RATE_LIMITER_TEST_CITUS_DIR is not set: run these tests through scripts/test.sh")
}

/// The application table `app.grow` (`tenant_id column_type`, replica
/// identity full, so that its shards move logically), the limiter
/// colocated with it, and the limit `grow` (100,000 tokens) defined.
fn colocated_with(column_type: &str) -> postgres::Client {
    rate_limiter_integration_tests::citus::make_local();
    forget("grow");
    let mut coordinator = coordinator();
    let collation = if column_type == "text" {
        " COLLATE \"C\""
    } else {
        ""
    };
    coordinator
        .batch_execute(&format!(
            "DELETE FROM rate_limiter.rate_limits; \
             DROP SCHEMA IF EXISTS app CASCADE; CREATE SCHEMA app; \
             CREATE TABLE app.grow (tenant_id {column_type}{collation} NOT NULL, body text); \
             ALTER TABLE app.grow REPLICA IDENTITY FULL; \
             SELECT create_distributed_table('app.grow', 'tenant_id')"
        ))
        .expect("an application table distributed by its tenant column");
    coordinator
        .batch_execute("SELECT rate_limiter.distribute(colocate_with => 'app.grow')")
        .expect("the limiter colocated with it");
    define(&mut coordinator, "grow", 100_000.0);
    coordinator
}

/// A tenant of `column_type` (as text).
fn tenant(column_type: &str) -> &'static str {
    match column_type {
        "uuid" => "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
        "text" => "tenant-42",
        _ => "42",
    }
}

/// A cluster grows after `distribute()`. For each type of
/// tenant column the limiter may be colocated with (text, bigint, integer,
/// uuid: before, adding a node failed for bigint and uuid, "distribution
/// column types don't match"): a new node, prepared on the coordinator
/// with `prepare_node()` (which first refuses a node that does not preload
/// rate_limiter), is added with `citus_add_node()`; the tenant's shards
/// then move to it while 6 clients on the other nodes call the tenant's
/// limit; no row is lost, what is stored is capacity minus every
/// admission, and a call on the new node works; then the node is drained
/// and removed.
#[test]
#[ignore = "needs the Citus cluster of scripts/test.sh"]
fn a_node_added_after_distribute_takes_shards_under_load() {
    let dir = cluster_dir();
    let urls = urls();
    for (index, column_type) in ["text", "bigint", "integer", "uuid"]
        .into_iter()
        .enumerate()
    {
        let mut coordinator = colocated_with(column_type);
        let tenant = tenant(column_type);
        assert!(rate_limiter_integration_tests::citus::consume(
            &mut coordinator,
            "grow",
            Some(tenant)
        ));
        // The first time, a node that does not preload rate_limiter:
        // prepare_node() refuses it.
        if index == 0 {
            citus_sh(&["node", &dir, "3", "citus"]);
            let port = port_of(&urls[0]) + 3;
            let error = coordinator
                .execute(
                    "SELECT rate_limiter.prepare_node('127.0.0.1', $1)",
                    &[&port],
                )
                .expect_err("a node without rate_limiter preloaded");
            assert_eq!(
                error.code(),
                Some(&SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE),
                "{error}"
            );
            assert!(
                error
                    .as_db_error()
                    .is_some_and(|e| e.message().contains("shared_preload_libraries")),
                "{error}"
            );
            citus_sh(&["stop-node", &dir, "3"]);
        }
        // Colocated with a bigint column, a node added without
        // prepare_node() fails in Citus's metadata sync; the error says
        // what to run.
        if column_type == "bigint" {
            let url = citus_sh(&["node", &dir, "3"]);
            let port = port_of(&url);
            let error = coordinator
                .execute("SELECT citus_add_node('127.0.0.1', $1)", &[&port])
                .expect_err("a node added without prepare_node()");
            let hint = error
                .as_db_error()
                .and_then(|e| e.hint())
                .unwrap_or_default();
            assert!(
                hint.contains(&format!("rate_limiter.prepare_node('127.0.0.1', {port})")),
                "the failure names prepare_node(): {error:?}"
            );
            citus_sh(&["stop-node", &dir, "3"]);
            // A new session: Citus keeps this one's connection to the node
            // just stopped in its cache (the failed citus_add_node ended
            // it cleanly), and whether the next citus_add_node notices
            // that the node closed it or reads its "terminating
            // connection" first is a race of Citus's, not the limiter's.
            coordinator = rate_limiter_integration_tests::citus::coordinator();
        }
        let url = citus_sh(&["node", &dir, "3"]);
        let port = port_of(&url);
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            coordinator
                .execute(
                    "SELECT rate_limiter.prepare_node('127.0.0.1', $1)",
                    &[&port],
                )
                .unwrap_or_else(|error| panic!("{column_type}: prepare_node: {error:?}"));
            let marked: bool = connect(&url)
                .query_one(
                    "SELECT EXISTS (SELECT FROM pg_constraint WHERE conname = 'rate_limits_distributed' \
                     AND conrelid = 'rate_limiter.rate_limits'::regclass)",
                    &[],
                )
                .expect("the new node's own table")
                .get(0);
            assert!(marked, "{column_type}: the new node's own table is marked");
            coordinator
                .execute("SELECT citus_add_node('127.0.0.1', $1)", &[&port])
                .unwrap_or_else(|error| panic!("{column_type}: citus_add_node: {error:?}"));
            // A shard move needs the reference tables (the definitions) on
            // the node first (citus_rebalance_start does this itself).
            coordinator
                .batch_execute("SELECT replicate_reference_tables()")
                .unwrap_or_else(|error| {
                    panic!("{column_type}: replicate_reference_tables: {error:?}")
                });
            // The tenant's shard (the application's and the limiter's,
            // colocated) moves to the new node under load.
            let (shard, from): (i64, i32) = {
                let row = coordinator
                    .query_one(
                        &format!(
                            "SELECT p.shardid, n.nodeport FROM pg_dist_placement AS p JOIN pg_dist_node AS n USING (groupid) \
                             WHERE p.shardid = get_shard_id_for_distribution_column('app.grow', $1::text::{column_type})"
                        ),
                        &[&tenant],
                    )
                    .expect("the tenant's shard");
                (row.get(0), row.get(1))
            };
            let (admitted, failed) = rate_limiter_integration_tests::citus::calls_under_load(
                "SELECT ok FROM rate_limiter.rate_limit('grow', $1)",
                Some(tenant),
                || {
                    connect(&urls[0])
                        .execute(
                            "SELECT citus_move_shard_placement($1, '127.0.0.1', $2, '127.0.0.1', $3, \
                             shard_transfer_mode => 'force_logical')",
                            &[&shard, &from, &port],
                        )
                        .unwrap_or_else(|error| panic!("{column_type}: move to the new node: {error:?}"));
                },
            );
            eprintln!("{column_type}: {admitted} admitted, {failed} failed while the shard moved");
            assert!(admitted > 0);
            let remaining: f64 = coordinator
                .query_one(
                    &format!(
                        "SELECT round(value::numeric, 3)::float8 FROM rate_limiter.rate_limits \
                         WHERE dkey = $1::text::{column_type} AND name = 'grow' AND key = $1"
                    ),
                    &[&tenant],
                )
                .expect("the row survived the move")
                .get(0);
            assert_eq!(
                remaining.round(),
                100_000.0 - 1.0 - f64::from(admitted),
                "{column_type}: stored state equals the admissions"
            );
            // A call on the new node, where the row now lives.
            let mut new_node = connect(&url);
            assert!(rate_limiter_integration_tests::citus::consume(
                &mut new_node,
                "grow",
                Some(tenant)
            ));
            let local: i64 = new_node
                .query_one(
                    "SELECT count(*) FROM pg_dist_placement \
                     WHERE groupid = (SELECT groupid FROM pg_dist_local_group) \
                       AND shardid IN (SELECT shardid FROM pg_dist_shard WHERE logicalrelid = 'rate_limiter.rate_limits'::regclass)",
                    &[],
                )
                .expect("the new node's placements")
                .get(0);
            assert!(
                local >= 1,
                "{column_type}: a shard of the limiter lives on the new node"
            );
            // Drained and removed: the shards go back, the rows with them.
            coordinator
                .execute("SELECT citus_drain_node('127.0.0.1', $1, shard_transfer_mode => 'block_writes')", &[&port])
                .unwrap_or_else(|error| panic!("{column_type}: drain: {error:?}"));
            coordinator
                .execute("SELECT citus_remove_node('127.0.0.1', $1)", &[&port])
                .unwrap_or_else(|error| panic!("{column_type}: remove: {error:?}"));
            let after: f64 = coordinator
                .query_one(
                    &format!(
                        "SELECT round(value::numeric, 3)::float8 FROM rate_limiter.rate_limits \
                         WHERE dkey = $1::text::{column_type} AND name = 'grow' AND key = $1"
                    ),
                    &[&tenant],
                )
                .expect("the row after the drain")
                .get(0);
            assert_eq!(after.round(), remaining.round() - 1.0, "{column_type}");
        }));
        // Whatever happened, the cluster is three nodes again.
        let _ = coordinator.execute(
            "SELECT citus_remove_node('127.0.0.1', $1) WHERE EXISTS (SELECT FROM pg_dist_node WHERE nodeport = $1)",
            &[&port],
        );
        citus_sh(&["stop-node", &dir, "3"]);
        if let Err(panic) = outcome {
            std::panic::resume_unwind(panic);
        }
    }
    let mut coordinator = coordinator();
    coordinator
        .batch_execute("DROP SCHEMA app CASCADE")
        .expect("drop the application");
    forget("grow");
}

/// Splitting the limiter's shards. Citus splits without
/// blocking writes through logical replication, which never finishes for
/// the state table's `REPLICA IDENTITY FULL` (it waits up to
/// `citus.logical_replication_timeout`, 2 h): such a split of the limiter's
/// colocation group is refused at once (0A000, hint `block_writes`), by
/// `isolate_tenant_to_new_shard` and `citus_split_shard_by_split_points`,
/// in the mode `'auto'` (the default) and `'force_logical'`. With
/// `'block_writes'` both run while 6 clients call the tenant's limit: no
/// row lost, the stored state is capacity minus every admission. Then the
/// rebalancer moves shards logically under load (their new pieces have
/// the replica identity too).
#[test]
#[ignore = "needs the Citus cluster of scripts/test.sh"]
fn splits_and_tenant_isolation_keep_every_row_in_the_mode_that_works() {
    let mut coordinator = colocated_with("bigint");
    let tenant = "42";
    let other = "7";
    for key in [tenant, other] {
        assert!(rate_limiter_integration_tests::citus::consume(
            &mut coordinator,
            "grow",
            Some(key)
        ));
    }
    let shard_of = |client: &mut postgres::Client, key: &str| -> i64 {
        client
            .query_one(
                "SELECT get_shard_id_for_distribution_column('app.grow', $1::text::bigint)",
                &[&key],
            )
            .expect("the shard")
            .get(0)
    };
    let shard = shard_of(&mut coordinator, other);
    let (low, high): (i32, i32) = {
        let row = coordinator
            .query_one(
                "SELECT shardminvalue::int, shardmaxvalue::int FROM pg_dist_shard WHERE shardid = $1",
                &[&shard],
            )
            .expect("its hash range");
        (row.get(0), row.get(1))
    };
    let middle = (i64::from(low) + i64::from(high)) / 2;
    let node_ids: Vec<i32> = coordinator
        .query("SELECT nodeid FROM pg_dist_node WHERE noderole = 'primary' AND shouldhaveshards ORDER BY nodeid LIMIT 2", &[])
        .expect("node ids")
        .iter()
        .map(|row| row.get(0))
        .collect();
    let split = |mode: &str| {
        format!(
            "SELECT citus_split_shard_by_split_points({shard}, ARRAY['{middle}'], ARRAY[{}, {}]{mode})",
            node_ids[0], node_ids[1]
        )
    };
    let isolate = |mode: &str| {
        format!("SELECT isolate_tenant_to_new_shard('app.grow', {tenant}::bigint, 'CASCADE'{mode})")
    };
    for mode in [
        "",
        ", shard_transfer_mode => 'auto'",
        ", shard_transfer_mode => 'force_logical'",
    ] {
        for statement in [split(mode), isolate(mode)] {
            let started = std::time::Instant::now();
            let error = coordinator
                .batch_execute(&statement)
                .expect_err("a split that would not finish");
            assert_eq!(
                error.code(),
                Some(&SqlState::FEATURE_NOT_SUPPORTED),
                "{statement}: {error}"
            );
            assert!(
                error
                    .as_db_error()
                    .and_then(|e| e.hint())
                    .is_some_and(|hint| hint.contains("block_writes")),
                "{error}"
            );
            assert!(
                started.elapsed() < std::time::Duration::from_secs(10),
                "at once"
            );
        }
    }
    let remaining = |client: &mut postgres::Client, key: &str| -> f64 {
        client
            .query_one(
                "SELECT round(value::numeric, 3)::float8 FROM rate_limiter.rate_limits \
                 WHERE dkey = $1::text::bigint AND name = 'grow' AND key = $1",
                &[&key],
            )
            .expect("the row")
            .get(0)
    };
    // In the mode that works, under load: isolation, then a split.
    let mut total = [0u32, 0u32];
    for (which, key, statement) in [
        (
            0,
            tenant,
            isolate(", shard_transfer_mode => 'block_writes'"),
        ),
        (1, other, split(", shard_transfer_mode => 'block_writes'")),
    ] {
        let (admitted, failed) = rate_limiter_integration_tests::citus::calls_under_load(
            "SELECT ok FROM rate_limiter.rate_limit('grow', $1)",
            Some(key),
            || {
                connect(&urls()[0])
                    .batch_execute(&statement)
                    .unwrap_or_else(|error| panic!("{statement}: {error:?}"));
            },
        );
        eprintln!("{statement}: {admitted} admitted, {failed} failed under load");
        total[which] += admitted;
        assert_eq!(
            remaining(&mut coordinator, key).round(),
            100_000.0 - 1.0 - f64::from(total[which]),
            "{statement}: stored state equals the admissions"
        );
    }
    assert_ne!(shard_of(&mut coordinator, other), shard, "split");
    // The rebalancer, logically, under load (whatever it moves).
    let (admitted, failed) = rate_limiter_integration_tests::citus::calls_under_load(
        "SELECT ok FROM rate_limiter.rate_limit('grow', $1)",
        Some(tenant),
        || {
            let mut rebalancer = connect(&urls()[0]);
            for statement in [
                "SELECT citus_rebalance_start(shard_transfer_mode => 'force_logical')",
                "SELECT citus_rebalance_wait()",
            ] {
                rebalancer
                    .batch_execute(statement)
                    .unwrap_or_else(|error| panic!("{statement}: {error:?}"));
            }
        },
    );
    eprintln!("rebalance: {admitted} admitted, {failed} failed under load");
    total[0] += admitted;
    assert_eq!(
        remaining(&mut coordinator, tenant).round(),
        100_000.0 - 1.0 - f64::from(total[0])
    );
    coordinator
        .batch_execute("DROP SCHEMA app CASCADE")
        .expect("drop the application");
    forget("grow");
}
