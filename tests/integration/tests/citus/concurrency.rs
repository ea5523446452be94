//! Concurrency limits on a cluster (docs/citus.md, "Concurrency limits"):
//! a keyed limit's slots are state rows beside the key's state (its
//! distribution value), a global limit's slot n beside name/n, and the
//! timed leases a reference table. From connections spread over the three
//! nodes, never more than `max` in flight, keyed and global, with
//! transaction and timed leases, rollbacks and holders killed
//! (`rate_limiter_integration_tests::in_flight`); a colocated tenant
//! transaction that takes a slot stays on one worker (one-phase commit);
//! timed leases are released, renewed and pruned from any node, `status`
//! counts the slots from any node, and `undistribute()` / `distribute()`
//! keep slots and leases.

use super::*;
use rate_limiter_integration_tests::in_flight;

#[test]
#[ignore = "needs the Citus cluster of scripts/test.sh"]
fn concurrency_limits_never_more_than_max_over_the_nodes() {
    make_distributed();
    let urls = urls();
    let mut owner = coordinator();
    in_flight::never_more_than_max(&urls, &mut owner, Some("tenant-7"));
    in_flight::never_more_than_max(&urls, &mut owner, None);
    // (The limits' slots and leases: the cluster's tables are shared by
    // the tests.)
    forget("in_flight");
}

/// `status(name, key)`'s free slots through `client`.
fn free(client: &mut impl postgres::GenericClient, name: &str, key: Option<&str>) -> f64 {
    client
        .query_one(
            "SELECT value FROM rate_limiter.status($1, $2)",
            &[&name, &key],
        )
        .unwrap_or_else(|error| panic!("status({name}, {key:?}): {error}"))
        .get(0)
}

/// (ok, lease_id) of an `acquire` of (name, key) through `client`.
fn acquire(
    client: &mut impl postgres::GenericClient,
    name: &str,
    key: Option<&str>,
    lease: Option<&str>,
) -> (bool, Option<i64>) {
    let row = client
        .query_one(
            "SELECT ok, lease_id FROM rate_limiter.acquire($1, $2, lease => $3::text::interval)",
            &[&name, &key, &lease],
        )
        .unwrap_or_else(|error| panic!("acquire({name}, {key:?}): {error}"));
    (row.get(0), row.get(1))
}

#[test]
#[ignore = "needs the Citus cluster of scripts/test.sh"]
fn a_tenant_transaction_that_takes_a_slot_stays_on_one_worker() {
    make_local();
    forget("jobs");
    let mut coordinator = coordinator();
    coordinator
        .batch_execute(
            "DELETE FROM rate_limiter.rate_limits; DELETE FROM rate_limiter.leases; \
             DROP SCHEMA IF EXISTS app CASCADE; CREATE SCHEMA app; \
             CREATE TABLE app.jobs (tenant_id bigint NOT NULL, body text); \
             SELECT create_distributed_table('app.jobs', 'tenant_id')",
        )
        .expect("an application table");
    // (distribute() in a transaction of its own.)
    coordinator
        .batch_execute("SELECT rate_limiter.distribute(colocate_with => 'app.jobs')")
        .expect("the limiter colocated with it");
    coordinator
        .batch_execute("SELECT rate_limiter.define('jobs', rate_limiter.concurrency(1))")
        .expect("define");
    // A tenant on worker 1 ('+N' and ' N ' read as N: the same node).
    let tenant: i64 = (1000..1100)
        .find(|tenant| node_of(&mut coordinator, &tenant.to_string()) == 1)
        .expect("a tenant on worker 1");
    for url in urls() {
        let (mut client, notices) = connect_with_notices(&url);
        client
            .batch_execute("SET citus.log_remote_commands = on")
            .expect("log remote commands");
        taken(&notices);
        let mut transaction = client.transaction().expect("begin");
        let (ok, _) = acquire(&mut transaction, "jobs", Some(&tenant.to_string()), None);
        assert!(ok, "the tenant's one slot ({url})");
        transaction
            .execute("INSERT INTO app.jobs VALUES ($1, 'export')", &[&tenant])
            .expect("the tenant's insert");
        // Held: another node's call finds no free slot, and status says so.
        let mut other = connect(&urls()[2]);
        let (ok, _) = acquire(&mut other, "jobs", Some(&tenant.to_string()), None);
        assert!(!ok, "the slot is held by the open transaction ({url})");
        assert_eq!(free(&mut other, "jobs", Some(&tenant.to_string())), 0.0);
        transaction.commit().expect("commit");
        stayed_off_worker_2(&url, &taken(&notices));
        assert_eq!(free(&mut other, "jobs", Some(&tenant.to_string())), 1.0);
    }
    // The slot's row is in the shard Citus routes the tenant to.
    let rows: i64 = coordinator
        .query_one(
            "SELECT count(*) FROM rate_limiter.rate_limits WHERE name = 'jobs' AND dkey = $1",
            &[&tenant],
        )
        .expect("the slot's row")
        .get(0);
    assert_eq!(rows, 1);
    // A key that is no tenant id is refused (22P02), as rate_limit's.
    let error = coordinator
        .query_one("SELECT ok FROM rate_limiter.acquire('jobs', 'x1')", &[])
        .expect_err("not a decimal bigint");
    assert_eq!(
        error.code(),
        Some(&SqlState::INVALID_TEXT_REPRESENTATION),
        "{error}"
    );
    make_local();
    coordinator
        .batch_execute("DROP SCHEMA app CASCADE")
        .expect("drop the application");
    forget("jobs");
}

#[test]
#[ignore = "needs the Citus cluster of scripts/test.sh"]
fn timed_leases_are_released_renewed_and_pruned_from_every_node() {
    make_distributed();
    forget("leased");
    let mut nodes = nodes();
    let (_, coordinator) = &mut nodes[0];
    for name in ["leased", "leased-global"] {
        coordinator
            .execute(
                "SELECT rate_limiter.define($1, rate_limiter.concurrency(2, '1 minute'))",
                &[&name],
            )
            .expect("define");
    }
    for (name, key) in [("leased", Some("tenant-3")), ("leased-global", None)] {
        let mut leases = Vec::new();
        for index in 0..3 {
            let (_, client) = &mut nodes[index];
            let (ok, lease) = acquire(client, name, key, None);
            assert_eq!(ok, index < 2, "{name}: two slots, from any node");
            leases.extend(lease);
        }
        for (label, client) in nodes.iter_mut() {
            assert_eq!(free(client, name, key), 0.0, "{name}: status on {label}");
            // A refusal's retry_after is when the earliest timed lease
            // ends, read where the slots live: under a minute from now.
            let (ok, retry_after): (bool, Option<f64>) = {
                let row = client
                    .query_one(
                        "SELECT ok, extract(epoch FROM retry_after)::float8 FROM rate_limiter.acquire($1, $2)",
                        &[&name, &key],
                    )
                    .expect("acquire");
                (row.get(0), row.get(1))
            };
            assert!(!ok, "{name} on {label}");
            assert!(
                matches!(retry_after, Some(seconds) if seconds > 0.0 && seconds <= 60.0),
                "{name} on {label}: retry_after {retry_after:?}"
            );
        }
        // Released on worker 2, renewed on worker 1; the released one is
        // gone, a second release is false.
        let (_, worker_2) = &mut nodes[2];
        let released: bool = worker_2
            .query_one("SELECT rate_limiter.release($1, $2)", &[&name, &leases[0]])
            .expect("release")
            .get(0);
        assert!(released);
        let again: bool = worker_2
            .query_one("SELECT rate_limiter.release($1, $2)", &[&name, &leases[0]])
            .expect("release again")
            .get(0);
        assert!(!again);
        let (_, worker_1) = &mut nodes[1];
        assert_eq!(free(worker_1, name, key), 1.0);
        let renewed: bool = worker_1
            .query_one(
                "SELECT rate_limiter.renew($1, $2, '10 minutes')",
                &[&name, &leases[1]],
            )
            .expect("renew")
            .get(0);
        assert!(renewed);
        // Five minutes on, the renewed lease still holds its slot.
        let mut transaction = worker_1.transaction().expect("begin");
        transaction
            .batch_execute("SELECT set_config('rate_limiter.now_override', (clock_timestamp() + interval '5 minutes')::text, true)")
            .expect("move the clock on");
        assert_eq!(free(&mut transaction, name, key), 1.0);
        transaction.rollback().expect("rollback");
    }
    // undistribute() and distribute() keep the slots and the leases.
    let (_, coordinator) = &mut nodes[0];
    let before: i64 = coordinator
        .query_one(
            "SELECT count(*) FROM rate_limiter.leases WHERE name LIKE 'leased%'",
            &[],
        )
        .expect("count the leases")
        .get(0);
    assert_eq!(before, 2);
    make_local();
    make_distributed();
    let mut coordinator = super::coordinator();
    for (name, key) in [("leased", Some("tenant-3")), ("leased-global", None)] {
        assert_eq!(free(&mut coordinator, name, key), 1.0, "{name} kept");
    }
    // Once the leases have ended, prune() deletes their rows.
    let mut transaction = coordinator.transaction().expect("begin");
    transaction
        .batch_execute("SELECT set_config('rate_limiter.now_override', (clock_timestamp() + interval '1 hour')::text, true)")
        .expect("move the clock on");
    transaction
        .batch_execute("SELECT rate_limiter.prune()")
        .expect("prune");
    let left: i64 = transaction
        .query_one(
            "SELECT count(*) FROM rate_limiter.leases WHERE name LIKE 'leased%'",
            &[],
        )
        .expect("count the leases")
        .get(0);
    assert_eq!(left, 0, "the ended leases' rows are pruned");
    transaction.commit().expect("commit");
    forget("leased");
}
