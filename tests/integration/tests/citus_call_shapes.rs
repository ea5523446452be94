//! Citus, day two (docs/guarantees.md, "Citus": "Transactions
//! across nodes" and "Call shapes and node states"): call shapes that must
//! keep the transaction contract or fail closed, on the real cluster of
//! `scripts/citus.sh` (Citus 13.2.2 on PostgreSQL 15, 14.0.1 on 18):
//! - a consuming or crediting call in a read-only transaction is `25006`
//!   on every node, before it is routed anywhere, and consumes nothing;
//! - a call Citus would run inside its per-shard queries is `0A000`, and
//!   the hint's form works inside the caller's transaction;
//! - a worker whose Citus metadata was cleared fails closed (`55000`);
//! - with `citus.enable_local_execution = off` every call fails at once
//!   (`55000`), instead of waiting for the locks Citus's own connection
//!   holds;
//! - colocation with a tenant schema's single-shard table is `0A000`, with
//!   a hint.
//!
//! Ignored by default; `scripts/test.sh` runs them with `--ignored`, one at
//! a time, after `citus/`.

use postgres::error::SqlState;
use rate_limiter_integration_tests::citus::{
    connect, coordinator, define, forget, keys_on_each_worker, make_distributed, port_of, stored,
    urls, NODES,
};

/// docs/guarantees.md, "Citus", "Transactions across nodes": every
/// consuming and crediting entry point raises 25006 in a read-only
/// transaction, whichever node the call is made on and wherever its row
/// lives (before, a call for another node's row consumed there: that node's
/// part of the transaction was not read-only); reading (`rate_check`,
/// `status`) works.
#[test]
#[ignore = "needs the Citus cluster of scripts/test.sh"]
fn a_read_only_transaction_consumes_nowhere() {
    make_distributed();
    forget("readonly");
    let mut coordinator = coordinator();
    define(&mut coordinator, "readonly", 10.0);
    let (one, two) = keys_on_each_worker(&mut coordinator, "readonly-");
    for key in [&one, &two] {
        assert!(rate_limiter_integration_tests::citus::consume(
            &mut coordinator,
            "readonly",
            Some(key)
        ));
    }
    let calls = [
        "SELECT ok FROM rate_limiter.rate_limit('readonly', $1)",
        "SELECT rate_limiter.rate_credit('readonly', $1, 1) IS NOT NULL",
        "SELECT bool_and(ok) FROM rate_limiter.rate_limit_all(ARRAY[('readonly', $1, 1, NULL)]::rate_limiter.request[])",
        "SELECT ok FROM rate_limiter.rate_wait('readonly', $1, timeout => '0')",
    ];
    for (node, url) in NODES.iter().zip(urls()) {
        // Both ways of making a transaction read-only. (Each statement of
        // a setup is sent on its own: in one simple query, the SET would
        // not reach the transaction the BEGIN opens.)
        for setup in [
            "SET default_transaction_read_only = on; BEGIN",
            "BEGIN; SET TRANSACTION READ ONLY",
        ] {
            let mut client = connect(&url);
            for key in [&one, &two] {
                for call in calls {
                    for statement in setup.split("; ") {
                        client
                            .batch_execute(statement)
                            .expect("a read-only transaction");
                    }
                    let error = client.query_one(call, &[key]).err().unwrap_or_else(|| {
                        panic!("{node}, {setup}: {call} for {key}: consumed in a read-only transaction")
                    });
                    assert_eq!(
                        error.code(),
                        Some(&SqlState::READ_ONLY_SQL_TRANSACTION),
                        "{node}, {setup}: {call} for {key}: {error}"
                    );
                    client.batch_execute("ROLLBACK").expect("rollback");
                }
                // Reading works there.
                for statement in setup.split("; ") {
                    client
                        .batch_execute(statement)
                        .expect("a read-only transaction");
                }
                let ok: bool = client
                    .query_one(
                        "SELECT ok FROM rate_limiter.rate_check('readonly', $1)",
                        &[key],
                    )
                    .expect("rate_check in a read-only transaction")
                    .get(0);
                assert!(ok, "{node}");
                client.batch_execute("ROLLBACK").expect("rollback");
            }
        }
    }
    // Nothing was consumed, on either worker.
    for key in [&one, &two] {
        assert_eq!(
            stored(&mut coordinator, "readonly", key),
            Some(9.0),
            "{key}"
        );
    }
    forget("readonly");
}

/// A call Citus would evaluate inside its per-shard queries (`SELECT
/// rate_limit(..., tenant) FROM <distributed table>`: each worker runs the
/// call in a Citus-internal backend, which commits on its own outside a
/// transaction block and without two-phase commit inside one) is refused
/// with 0A000 on every node, in and outside a transaction block, and
/// consumes nothing; the hint's form (the rows collected first, in a
/// materialized CTE) works, inside the caller's transaction.
#[test]
#[ignore = "needs the Citus cluster of scripts/test.sh"]
fn a_call_inside_a_citus_shard_query_is_refused() {
    make_distributed();
    forget("pushed");
    let mut coordinator = coordinator();
    define(&mut coordinator, "pushed", 10.0);
    coordinator
        .batch_execute(
            "DROP SCHEMA IF EXISTS ops CASCADE; CREATE SCHEMA ops; \
             CREATE TABLE ops.tenants (tenant_id text COLLATE \"C\" NOT NULL); \
             SELECT create_distributed_table('ops.tenants', 'tenant_id'); \
             INSERT INTO ops.tenants SELECT 'pushed-' || i FROM generate_series(1, 20) AS i",
        )
        .expect("a distributed table of 20 tenants");
    // The call in the target list, which Citus pushes down into the query
    // it sends for each shard.
    let pushed = "SELECT (rate_limiter.rate_limit('pushed', tenant_id)).ok FROM ops.tenants";
    for (node, url) in NODES.iter().zip(urls()) {
        let mut client = connect(&url);
        for block in [false, true] {
            if block {
                client.batch_execute("BEGIN").expect("begin");
            }
            let error = client
                .query(pushed, &[])
                .expect_err("a call inside Citus's shard queries");
            assert_eq!(
                error.code(),
                Some(&SqlState::FEATURE_NOT_SUPPORTED),
                "{node}, block {block}: {error}"
            );
            let message = error.as_db_error().map(|e| e.message().to_string());
            assert!(
                message.as_deref().unwrap_or("").contains("shard query"),
                "{node}: {message:?}"
            );
            if block {
                client.batch_execute("ROLLBACK").expect("rollback");
            }
        }
    }
    let rows: i64 = coordinator
        .query_one(
            "SELECT count(*) FROM rate_limiter.rate_limits WHERE name = 'pushed'",
            &[],
        )
        .expect("count")
        .get(0);
    assert_eq!(rows, 0, "nothing consumed anywhere");
    // The hint's form: the rows collected on the calling node first.
    let collected = "WITH t AS MATERIALIZED (SELECT tenant_id FROM ops.tenants) \
                     SELECT count(*) FILTER (WHERE r.ok) \
                     FROM t, LATERAL rate_limiter.rate_limit('pushed', t.tenant_id) AS r";
    for (node, url) in NODES.iter().zip(urls()) {
        let mut client = connect(&url);
        let mut transaction = client.transaction().expect("begin");
        let admitted: i64 = transaction
            .query_one(collected, &[])
            .unwrap_or_else(|error| panic!("{node}: {error:?}"))
            .get(0);
        assert_eq!(admitted, 20, "{node}");
        // Inside the caller's transaction: a rollback undoes every call.
        transaction.rollback().expect("rollback");
    }
    let mut transaction = coordinator.transaction().expect("begin");
    transaction.query_one(collected, &[]).expect("the calls");
    transaction.commit().expect("commit");
    for tenant in ["pushed-1", "pushed-20"] {
        assert_eq!(stored(&mut coordinator, "pushed", tenant), Some(9.0));
    }
    coordinator
        .batch_execute("DROP SCHEMA ops CASCADE")
        .expect("drop the table");
    forget("pushed");
}

/// A worker whose Citus metadata was cleared (`stop_metadata_sync_to_node`)
/// no longer sees its state table as distributed: its own table, which
/// distribute() marked, makes every call there fail closed (55000), where
/// before a call with an inline config was admitted from a fresh bucket in
/// that invisible local table. Synced again, the worker calls as before.
#[test]
#[ignore = "needs the Citus cluster of scripts/test.sh"]
fn a_worker_without_citus_metadata_fails_closed() {
    make_distributed();
    forget("nometa");
    let urls = urls();
    let mut coordinator = coordinator();
    define(&mut coordinator, "nometa", 10.0);
    let worker = port_of(&urls[2]);
    coordinator
        .execute(
            "SELECT stop_metadata_sync_to_node('127.0.0.1', $1)",
            &[&worker],
        )
        .expect("stop_metadata_sync_to_node");
    let outcome = std::panic::catch_unwind(|| {
        let mut worker2 = connect(&urls[2]);
        for call in [
            "SELECT ok FROM rate_limiter.rate_limit('nometa-inline', 'k', config => rate_limiter.token_bucket(5, '1 hour'))",
            "SELECT ok FROM rate_limiter.rate_limit('nometa', 'k')",
            "SELECT ok FROM rate_limiter.rate_check('nometa', 'k')",
        ] {
            let error = worker2
                .query_one(call, &[])
                .expect_err("a call on a worker without metadata");
            assert_eq!(
                error.code(),
                Some(&SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE),
                "{call}: {error}"
            );
            assert!(
                error
                    .as_db_error()
                    .is_some_and(|e| e.message().contains("no Citus metadata")),
                "{error}"
            );
        }
        let own: i64 = worker2
            .query_one(
                "SELECT count(*) FROM ONLY rate_limiter.rate_limits WHERE name LIKE 'nometa%'",
                &[],
            )
            .expect("the worker's own table")
            .get(0);
        assert_eq!(own, 0, "nothing written in the worker's own table");
    });
    coordinator
        .execute(
            "SELECT start_metadata_sync_to_node('127.0.0.1', $1)",
            &[&worker],
        )
        .expect("start_metadata_sync_to_node");
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
    let mut worker2 = connect(&urls[2]);
    assert!(rate_limiter_integration_tests::citus::consume(
        &mut worker2,
        "nometa",
        Some("k")
    ));
    assert_eq!(stored(&mut coordinator, "nometa", "k"), Some(9.0));
    forget("nometa");
}

/// `citus.enable_local_execution = off`: Citus then does the
/// transaction's work on this node's shards through a connection of its
/// own (what `rate_reset` deleted is locked, uncommitted, there), which a
/// call writing those shards directly would wait for (before: a
/// distributed deadlock after about 1.6 s) or not see. Every call fails at
/// once (55000, the setting in the hint) on every node, for its own row
/// and another node's, and changes nothing; with the setting back on, the
/// same transaction's calls work.
#[test]
#[ignore = "needs the Citus cluster of scripts/test.sh"]
fn calls_fail_at_once_with_local_execution_off() {
    make_distributed();
    forget("loopback");
    let urls = urls();
    let mut coordinator = coordinator();
    define(&mut coordinator, "loopback", 10.0);
    let (one, two) = keys_on_each_worker(&mut coordinator, "loopback-");
    for key in [&one, &two] {
        assert!(rate_limiter_integration_tests::citus::consume(
            &mut coordinator,
            "loopback",
            Some(key)
        ));
    }
    let calls = [
        "SELECT rate_limiter.rate_reset('loopback', $1)::text",
        "SELECT ok::text FROM rate_limiter.rate_limit('loopback', $1, 3)",
        "SELECT ok::text FROM rate_limiter.rate_check('loopback', $1)",
        "SELECT bool_and(ok)::text FROM rate_limiter.rate_limit_all(ARRAY[('loopback', $1, 1, NULL)]::rate_limiter.request[])",
        "SELECT rate_limiter.rate_credit('loopback', $1, 2)::text",
        "SELECT value::text FROM rate_limiter.status('loopback', $1)",
    ];
    for url in &urls {
        let mut client = connect(url);
        client
            .batch_execute("SET citus.enable_local_execution = off; SET statement_timeout = '20s'")
            .expect("settings");
        for key in [&one, &two] {
            for call in calls {
                let started = std::time::Instant::now();
                let mut transaction = client.transaction().expect("begin");
                let error = transaction
                    .query_one(call, &[key])
                    .err()
                    .unwrap_or_else(|| {
                        panic!("{url}: {call} for {key}: ran with local execution off")
                    });
                assert_eq!(
                    error.code(),
                    Some(&SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE),
                    "{url}: {call} for {key}: {error:?}"
                );
                assert!(
                    error
                        .as_db_error()
                        .and_then(|e| e.hint())
                        .is_some_and(|hint| hint.contains("citus.enable_local_execution = on")),
                    "{error:?}"
                );
                assert!(
                    started.elapsed() < std::time::Duration::from_secs(5),
                    "at once"
                );
                transaction.rollback().expect("rollback");
            }
        }
        // Back on, in the same session: rate_reset then rate_limit of each
        // row in one transaction.
        client
            .batch_execute("SET citus.enable_local_execution = on")
            .expect("settings");
        let mut transaction = client.transaction().expect("begin");
        for key in [&one, &two] {
            transaction
                .execute("SELECT rate_limiter.rate_reset('loopback', $1)", &[key])
                .expect("rate_reset");
            let ok: bool = transaction
                .query_one(
                    "SELECT ok FROM rate_limiter.rate_limit('loopback', $1, 3)",
                    &[key],
                )
                .expect("rate_limit after rate_reset")
                .get(0);
            assert!(ok);
        }
        transaction.rollback().expect("rollback");
    }
    for key in [&one, &two] {
        assert_eq!(
            stored(&mut coordinator, "loopback", key),
            Some(9.0),
            "unchanged"
        );
    }
    forget("loopback");
}

/// Schema-based sharding (`citus.enable_schema_based_sharding`): a tenant
/// schema's tables have a single shard, which the limiter's state cannot
/// be colocated with: `distribute(colocate_with => ...)` says so (0A000,
/// with a hint) and changes nothing.
#[test]
#[ignore = "needs the Citus cluster of scripts/test.sh"]
fn colocation_with_a_tenant_schema_is_refused_with_a_hint() {
    rate_limiter_integration_tests::citus::make_local();
    let mut coordinator = coordinator();
    coordinator
        .batch_execute(
            "DROP SCHEMA IF EXISTS tenant_ops CASCADE; \
             SET citus.enable_schema_based_sharding = on; \
             CREATE SCHEMA tenant_ops; \
             CREATE TABLE tenant_ops.orders (id bigint); \
             RESET citus.enable_schema_based_sharding",
        )
        .expect("a tenant schema");
    let error = coordinator
        .batch_execute("SELECT rate_limiter.distribute(colocate_with => 'tenant_ops.orders')")
        .expect_err("colocation with a single-shard table");
    assert_eq!(
        error.code(),
        Some(&SqlState::FEATURE_NOT_SUPPORTED),
        "{error}"
    );
    let db = error.as_db_error().expect("a server error");
    assert!(db.message().contains("single-shard"), "{}", db.message());
    assert!(
        db.hint().unwrap_or("").contains("without colocate_with"),
        "{:?}",
        db.hint()
    );
    assert_eq!(
        rate_limiter_integration_tests::citus::distribution(&mut coordinator),
        None,
        "still local"
    );
    coordinator
        .batch_execute("DROP SCHEMA tenant_ops CASCADE")
        .expect("drop the tenant schema");
}
