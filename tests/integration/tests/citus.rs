//! A real Citus cluster (a coordinator and two workers on loopback, started
//! by `scripts/citus.sh`; their connection strings, coordinator first, in
//! `RATE_LIMITER_TEST_CITUS_URLS`, separated by `;`), with Citus 13.2.2 on
//! PostgreSQL 15 and 14.0.1 on 18. SPEC §10:
//! - `CREATE EXTENSION` on the coordinator creates the extension on every
//!   node, at the same version; `ALTER EXTENSION ... UPDATE` from 0.4.0
//!   keeps every row, and then `distribute()` works;
//! - `distribute()` / `undistribute()`: rows and answers kept, nothing left
//!   in a node's own table, extension membership and `pg_dump`
//!   registration kept, idempotent, refused where they cannot run;
//! - every row is in the shard Citus itself looks in for its value;
//! - calls on any node reach the row's node inside the caller's
//!   transaction: rollback and savepoints undo them, a transaction that
//!   wrote on two nodes commits with two-phase commit, one that wrote on
//!   one node does not; a colocated tenant transaction stays on one node,
//!   with a text or a bigint tenant column;
//! - exactness: 16 connections over the three nodes admit exactly the
//!   capacity of each limit, a global limit with 8 shards included;
//! - a sharded global limit uses the shards of the caller's node first,
//!   then the other nodes' (rollback and 2PC on both workers), and never
//!   waits for another node's busy shard;
//! - a definition made on any node is used by every node's next call;
//! - `status`, `http_headers`, `postgrest_limit` and `rate_credit` reach
//!   the rows where they live; `prune()` on any node prunes every node's
//!   shards;
//! - a state table distributed otherwise fails closed with `55000`, and the
//!   hint's `undistribute()` brings it back;
//! - a shard moved under load loses no row and admits no more than its
//!   capacity;
//! - a worker killed with SIGKILL between PREPARE and COMMIT PREPARED: the
//!   prepared transaction holds its row until Citus's recovery commits it,
//!   and then the state is what committed;
//! - a call that is its transaction's only work reaches the row's node in
//!   one round trip (no transaction block there); a call with anything
//!   after it in its transaction (a failing output column, a second
//!   statement of a simple query or a pipeline, a DO block, a function, an
//!   INSERT ... SELECT) keeps the block, and its failure undoes the call.
//!
//! Ignored by default; `scripts/test.sh` runs them with `--ignored`, one at
//! a time, against the cluster it starts. Each test sets up the state it
//! needs (local or distributed) and uses limit names of its own.

use postgres::error::SqlState;
use postgres::{Client, NoTls};
use rand::Rng;
use rate_limiter_integration_tests::citus::{
    calls_under_load, connect, connect_with_notices, consume, coordinator, define, distribution,
    extension_version, forget, keys_on_each_worker, make_distributed, make_local, node_of, nodes,
    port_of, stored, taken, urls, NODES,
};

/// Runs a tenant transaction through `url` (`BEGIN`, `rate_limit(name,
/// key)`, then `insert` with the tenant as `$1`, `COMMIT`) with Citus's
/// remote commands logged, and checks that the call was admitted, that the
/// commit was one-phase and that nothing ran on worker 2 (the tenant's
/// rows are on worker 1).
fn tenant_transaction_stays_on_one_worker(
    url: &str,
    name: &str,
    key: &str,
    insert: &str,
    tenant: &(dyn postgres::types::ToSql + Sync),
) {
    let (mut client, notices) = connect_with_notices(url);
    client
        .batch_execute("SET citus.log_remote_commands = on")
        .expect("log remote commands");
    taken(&notices);
    let mut transaction = client.transaction().expect("begin");
    let ok: bool = transaction
        .query_one(
            "SELECT ok FROM rate_limiter.rate_limit($1, $2)",
            &[&name, &key],
        )
        .expect("rate_limit")
        .get(0);
    assert!(ok);
    transaction
        .execute(insert, &[tenant])
        .expect("the tenant's insert");
    transaction.commit().expect("commit");
    let log = taken(&notices);
    assert!(
        !log.iter().any(|line| line.contains("PREPARE TRANSACTION")),
        "one node, one-phase commit ({url}): {log:#?}"
    );
    // Citus names the node of each remote command ("on server
    // postgres@127.0.0.1:PORT").
    let worker_2 = format!("127.0.0.1:{}", port_of(&urls()[2]));
    assert!(
        !log.iter().any(|line| line.contains(&worker_2)),
        "nothing ran on the other worker, {worker_2} ({url}): {log:#?}"
    );
}

#[test]
#[ignore = "needs the Citus cluster of scripts/test.sh"]
fn the_extension_is_created_on_every_node_at_one_version() {
    let mut versions = Vec::new();
    for (node, mut client) in nodes() {
        let version = extension_version(&mut client);
        assert!(version.is_some(), "rate_limiter is missing on the {node}");
        versions.push(version);
    }
    assert!(
        versions.windows(2).all(|pair| pair[0] == pair[1]),
        "one version on every node: {versions:?}"
    );
}

#[test]
#[ignore = "needs the Citus cluster of scripts/test.sh"]
fn distribute_keeps_rows_answers_and_ownership_and_undistribute_goes_back() {
    make_local();
    forget("keep");
    let mut coordinator = coordinator();
    define(&mut coordinator, "keep", 10.0);
    for (key, calls) in [("a", 3), ("b", 1)] {
        for _ in 0..calls {
            assert!(consume(&mut coordinator, "keep", Some(key)));
        }
    }
    assert!(consume(&mut coordinator, "keep", None));
    let answers = |client: &mut Client| -> Vec<f64> {
        ["a", "b", "c"]
            .iter()
            .map(|key| {
                client
                    .query_one(
                        "SELECT remaining FROM rate_limiter.rate_check('keep', $1)",
                        &[key],
                    )
                    .expect("rate_check")
                    .get::<_, f64>(0)
                    .floor()
            })
            .collect()
    };
    let before = answers(&mut coordinator);
    assert_eq!(
        before,
        vec![6.0, 8.0, 9.0],
        "remaining after one more token"
    );

    coordinator
        .batch_execute("SELECT rate_limiter.distribute()")
        .expect("distribute()");
    coordinator
        .batch_execute("SELECT rate_limiter.distribute()")
        .expect("distribute() again does nothing");
    for (node, mut client) in nodes() {
        assert_eq!(
            distribution(&mut client),
            Some(("h".to_string(), Some("dkey".to_string()))),
            "the {node} sees the state table distributed by dkey"
        );
        assert_eq!(
            answers(&mut client),
            before,
            "the same answers on the {node}"
        );
        let local_bytes: i64 = client
            .query_one(
                "SELECT pg_relation_size('rate_limiter.rate_limits') + pg_relation_size('rate_limiter.definitions')",
                &[],
            )
            .expect("size")
            .get(0);
        assert_eq!(local_bytes, 0, "nothing left in the {node}'s own tables");
        let reference: String = client
            .query_one(
                "SELECT partmethod::text FROM pg_dist_partition WHERE logicalrelid = 'rate_limiter.definitions'::regclass",
                &[],
            )
            .expect("definitions")
            .get(0);
        assert_eq!(
            reference, "n",
            "definitions is a reference table on the {node}"
        );
    }
    let membership = |client: &mut Client| -> (i64, Vec<String>) {
        let row = client
            .query_one(
                "SELECT (SELECT count(*) FROM pg_depend WHERE deptype = 'e' AND classid = 'pg_class'::regclass \
                     AND objid IN ('rate_limiter.rate_limits'::regclass, 'rate_limiter.definitions'::regclass) \
                     AND refobjid = e.oid), \
                    (SELECT array_agg(c::regclass::text ORDER BY c::regclass::text) FROM unnest(e.extconfig) AS c) \
                 FROM pg_extension AS e WHERE extname = 'rate_limiter'",
                &[],
            )
            .expect("membership");
        (row.get(0), row.get(1))
    };
    let expected = (
        2,
        vec![
            "rate_limiter.definitions".to_string(),
            "rate_limiter.rate_limits".to_string(),
        ],
    );
    assert_eq!(
        membership(&mut coordinator),
        expected,
        "distributed: still the extension's, still dumped"
    );
    let state: i64 = coordinator
        .query_one(
            "SELECT count(*) FROM rate_limiter.rate_limits WHERE name = 'keep'",
            &[],
        )
        .expect("count")
        .get(0);
    assert_eq!(state, 3, "every row is kept (a, b and the global limit)");

    coordinator
        .batch_execute("SELECT rate_limiter.undistribute()")
        .expect("undistribute()");
    coordinator
        .batch_execute("SELECT rate_limiter.undistribute()")
        .expect("undistribute() again does nothing");
    for (node, mut client) in nodes() {
        assert_eq!(distribution(&mut client), None, "local again on the {node}");
    }
    assert_eq!(
        answers(&mut coordinator),
        before,
        "the same answers after undistribute()"
    );
    assert_eq!(membership(&mut coordinator), expected);
    assert!(
        consume(&mut coordinator, "keep", Some("a")),
        "calls write locally again"
    );
    forget("keep");
}

#[test]
#[ignore = "needs the Citus cluster of scripts/test.sh"]
fn distribute_refuses_where_it_cannot_run() {
    make_local();
    let urls = urls();
    let mut worker = connect(&urls[1]);
    let error = worker
        .batch_execute("SELECT rate_limiter.distribute()")
        .expect_err("distribute() on a worker");
    let db = error.as_db_error().expect("a server error");
    assert_eq!(
        db.code(),
        &SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE,
        "{db:?}"
    );
    assert!(db.message().contains("coordinator"), "{}", db.message());

    let mut coordinator = coordinator();
    coordinator
        .batch_execute(
            "DROP ROLE IF EXISTS citus_app; CREATE ROLE citus_app LOGIN; \
             GRANT USAGE ON SCHEMA rate_limiter TO citus_app; \
             GRANT EXECUTE ON FUNCTION rate_limiter.distribute(regclass) TO citus_app",
        )
        .expect("a role that may call distribute() but owns nothing");
    let error = coordinator
        .batch_execute("SET ROLE citus_app; SELECT rate_limiter.distribute()")
        .expect_err("distribute() by a role that is not the owner");
    coordinator.batch_execute("RESET ROLE").expect("reset role");
    assert_eq!(
        error.as_db_error().expect("a server error").code(),
        &SqlState::INSUFFICIENT_PRIVILEGE
    );
    assert_eq!(
        distribution(&mut coordinator),
        None,
        "nothing was distributed"
    );

    // After a write in the same transaction: the workers' answers would
    // wait for its locks.
    let error = coordinator
        .batch_execute(
            "BEGIN; CREATE TEMPORARY TABLE written (); SELECT rate_limiter.distribute(); COMMIT",
        )
        .expect_err("distribute() after a write");
    coordinator.batch_execute("ROLLBACK").expect("rollback");
    assert_eq!(
        error.as_db_error().expect("a server error").code(),
        &SqlState::ACTIVE_SQL_TRANSACTION
    );

    // A worker whose own table has rows: state nobody would read.
    worker
        .batch_execute(
            "INSERT INTO rate_limiter.rate_limits (name, key, shard, value, ts) VALUES ('stray', 'k', 0, 1, now())",
        )
        .expect("a row in a worker's own table");
    let error = coordinator
        .batch_execute("SELECT rate_limiter.distribute()")
        .expect_err("distribute() with a worker's rows");
    let db = error.as_db_error().expect("a server error");
    assert_eq!(
        db.code(),
        &SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE,
        "{db:?}"
    );
    assert!(db.message().contains("rows in its own"), "{}", db.message());
    worker
        .batch_execute("DELETE FROM rate_limiter.rate_limits WHERE name = 'stray'")
        .expect("clean up");
    coordinator
        .batch_execute(
            "REVOKE ALL ON FUNCTION rate_limiter.distribute(regclass) FROM citus_app; \
                        REVOKE ALL ON SCHEMA rate_limiter FROM citus_app; DROP ROLE citus_app",
        )
        .expect("drop the role");
}

/// Restarts the server of `url` with `from` replaced by `to` in the
/// command line it was started with (its `postmaster.opts`, which `pg_ctl
/// restart` reuses), and waits until it accepts connections.
fn restart_with(url: &str, from: &str, to: &str) {
    let mut client = connect(url);
    let data: String = client
        .query_one("SHOW data_directory", &[])
        .expect("data_directory")
        .get(0);
    let bin: String = client
        .query_one("SELECT setting FROM pg_config WHERE name = 'BINDIR'", &[])
        .expect("BINDIR")
        .get(0);
    drop(client);
    let options = format!("{data}/postmaster.opts");
    let started = std::fs::read_to_string(&options).expect("read postmaster.opts");
    assert!(started.contains(from), "{from} in {started}");
    std::fs::write(&options, started.replace(from, to)).expect("write postmaster.opts");
    let restarted = std::process::Command::new("sudo")
        .args(["-u", "postgres", "env", "-u", "RUST_BACKTRACE"])
        .arg(format!("LD_LIBRARY_PATH={bin}/../lib"))
        .arg(format!("{bin}/pg_ctl"))
        .args([
            "-D",
            &data,
            "-l",
            &format!("{data}.restarted.log"),
            "-m",
            "fast",
            "-w",
            "restart",
        ])
        .output()
        .expect("run pg_ctl restart");
    assert!(
        restarted.status.success(),
        "pg_ctl restart: {}",
        String::from_utf8_lossy(&restarted.stderr)
    );
    reconnect(url);
}

/// Worker 2 restarted without `rate_limiter` in its
/// `shared_preload_libraries`, until dropped (then restarted as before).
struct WithoutPreload;

const PRELOADED: &str = "shared_preload_libraries=citus,rate_limiter";
const NOT_PRELOADED: &str = "shared_preload_libraries=citus";

impl WithoutPreload {
    fn start() -> Self {
        restart_with(&urls()[2], PRELOADED, NOT_PRELOADED);
        WithoutPreload
    }
}

impl Drop for WithoutPreload {
    fn drop(&mut self) {
        restart_with(&urls()[2], NOT_PRELOADED, PRELOADED);
    }
}

#[test]
#[ignore = "needs the Citus cluster of scripts/test.sh"]
fn distribute_refuses_a_node_that_does_not_preload_rate_limiter() {
    make_local();
    let mut coordinator = coordinator();
    {
        let _worker = WithoutPreload::start();
        let error = coordinator
            .batch_execute("SELECT rate_limiter.distribute()")
            .expect_err("distribute() with worker 2 not preloading the library");
        let db = error.as_db_error().expect("a server error");
        assert_eq!(
            db.code(),
            &SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE,
            "{db:?}"
        );
        assert!(
            db.message().contains("shared_preload_libraries on worker")
                && db.message().contains(&port_of(&urls()[2]).to_string()),
            "{}",
            db.message()
        );
        assert_eq!(distribution(&mut coordinator), None, "nothing distributed");
    }
    make_distributed();
    assert_eq!(
        distribution(&mut coordinator).map(|(method, _)| method),
        Some("h".to_string())
    );
}

#[test]
#[ignore = "needs the Citus cluster of scripts/test.sh"]
fn every_row_is_in_the_shard_citus_looks_in_for_its_value() {
    make_distributed();
    forget("anchor");
    let urls = urls();
    let mut clients: Vec<Client> = urls.iter().map(|url| connect(url)).collect();
    define(&mut clients[0], "anchor", 5.0);
    let mut rng = rand::rng();
    let mut keys = Vec::new();
    for n in 0..600 {
        // Any text: ASCII, accents, CJK, emoji, spaces, slashes.
        let length = rng.random_range(0..24);
        let key: String = (0..length)
            .map(|_| {
                let pool = ['a', 'Z', '7', '/', ' ', 'é', 'ß', '中', '🙂', '\'', '%'];
                pool[rng.random_range(0..pool.len())]
            })
            .collect();
        let key = format!("{key}{n}");
        assert!(consume(&mut clients[n % 3], "anchor", Some(&key)));
        keys.push(key);
    }
    for key in &keys {
        // Citus routes this query by dkey = key: it finds the row only in
        // the shard its own hash names.
        assert_eq!(
            stored(&mut clients[0], "anchor", key),
            Some(4.0),
            "key {key:?}"
        );
    }
    // The global limit's row: dkey = name/0.
    assert!(consume(&mut clients[1], "anchor", None));
    let global: f64 = clients[0]
        .query_one(
            "SELECT value FROM rate_limiter.rate_limits WHERE dkey = 'anchor/0' AND key IS NULL",
            &[],
        )
        .expect("the global row, routed")
        .get(0);
    assert_eq!(global, 4.0);
    let total: i64 = clients[0]
        .query_one(
            "SELECT count(*) FROM rate_limiter.rate_limits WHERE name = 'anchor'",
            &[],
        )
        .expect("count")
        .get(0);
    assert_eq!(
        total,
        keys.len() as i64 + 1,
        "one row per key, nothing else"
    );
    forget("anchor");
}

#[test]
#[ignore = "needs the Citus cluster of scripts/test.sh"]
fn rollback_savepoints_and_two_phase_commit_across_workers() {
    make_distributed();
    forget("tx");
    let urls = urls();
    let (mut client, notices) = connect_with_notices(&urls[0]);
    define(&mut client, "tx", 10.0);
    let (one, two) = keys_on_each_worker(&mut client, "tx-");
    client
        .batch_execute("SET citus.log_remote_commands = on")
        .expect("log remote commands");

    // ROLLBACK: nothing consumed on either worker.
    let mut transaction = client.transaction().expect("begin");
    for key in [&one, &two] {
        let ok: bool = transaction
            .query_one("SELECT ok FROM rate_limiter.rate_limit('tx', $1)", &[key])
            .expect("rate_limit")
            .get(0);
        assert!(ok);
    }
    transaction.rollback().expect("rollback");
    assert_eq!(
        stored(&mut client, "tx", &one),
        None,
        "rolled back on worker 1"
    );
    assert_eq!(
        stored(&mut client, "tx", &two),
        None,
        "rolled back on worker 2"
    );

    // ROLLBACK TO SAVEPOINT undoes the second; COMMIT keeps the first.
    taken(&notices);
    let mut transaction = client.transaction().expect("begin");
    transaction
        .execute("SELECT * FROM rate_limiter.rate_limit('tx', $1)", &[&one])
        .expect("rate_limit");
    let mut savepoint = transaction.savepoint("s").expect("savepoint");
    savepoint
        .execute(
            "SELECT * FROM rate_limiter.rate_limit('tx', $1, 3)",
            &[&two],
        )
        .expect("rate_limit");
    savepoint.rollback().expect("rollback to savepoint");
    transaction.commit().expect("commit");
    assert_eq!(stored(&mut client, "tx", &one), Some(9.0));
    assert_eq!(
        stored(&mut client, "tx", &two),
        None,
        "undone by the savepoint"
    );

    // COMMIT of both: two-phase commit over the two workers.
    taken(&notices);
    let mut transaction = client.transaction().expect("begin");
    for key in [&one, &two] {
        transaction
            .execute("SELECT * FROM rate_limiter.rate_limit('tx', $1)", &[key])
            .expect("rate_limit");
    }
    transaction.commit().expect("commit");
    let log = taken(&notices);
    assert_eq!(
        log.iter()
            .filter(|line| line.contains("PREPARE TRANSACTION"))
            .count(),
        2,
        "both workers prepared: {log:#?}"
    );
    assert_eq!(stored(&mut client, "tx", &one), Some(8.0));
    assert_eq!(stored(&mut client, "tx", &two), Some(9.0));

    // On worker 1: its own row written directly, worker 2's through Citus;
    // the commit is two-phase too (Citus is told about the direct write).
    let (mut worker, worker_notices) = connect_with_notices(&urls[1]);
    worker
        .batch_execute("SET citus.log_remote_commands = on")
        .expect("log remote commands");
    let mut transaction = worker.transaction().expect("begin");
    for key in [&one, &two] {
        transaction
            .execute("SELECT * FROM rate_limiter.rate_limit('tx', $1)", &[key])
            .expect("rate_limit");
    }
    transaction.commit().expect("commit");
    let log = taken(&worker_notices);
    assert!(
        log.iter().any(|line| line.contains("PREPARE TRANSACTION")),
        "a local write and a remote one commit with 2PC: {log:#?}"
    );
    assert!(
        !log.iter()
            .any(|line| line.contains("issuing COMMIT on server")),
        "no one-phase commit of the remote part: {log:#?}"
    );
    assert_eq!(stored(&mut client, "tx", &one), Some(7.0));
    assert_eq!(stored(&mut client, "tx", &two), Some(8.0));

    // One node only: no 2PC, no marker statement.
    let mut transaction = worker.transaction().expect("begin");
    transaction
        .execute("SELECT * FROM rate_limiter.rate_limit('tx', $1)", &[&one])
        .expect("rate_limit");
    transaction.commit().expect("commit");
    let log = taken(&worker_notices);
    assert!(
        !log.iter()
            .any(|line| line.contains("PREPARE") || line.contains("DELETE")),
        "a one-node transaction: {log:#?}"
    );
    assert_eq!(stored(&mut client, "tx", &one), Some(6.0));
    forget("tx");
}

#[test]
#[ignore = "needs the Citus cluster of scripts/test.sh"]
fn a_colocated_tenant_transaction_stays_on_one_worker_without_two_phase_commit() {
    make_local();
    forget("messages");
    let urls = urls();
    let mut coordinator = coordinator();
    coordinator
        .batch_execute(
            "DROP SCHEMA IF EXISTS app CASCADE; CREATE SCHEMA app; \
             CREATE TABLE app.messages (tenant_id text COLLATE \"C\" NOT NULL, body text); \
             SELECT create_distributed_table('app.messages', 'tenant_id')",
        )
        .expect("an application table");
    coordinator
        .batch_execute("SELECT rate_limiter.distribute(colocate_with => 'app.messages')")
        .expect("the limiter colocated with it");
    define(&mut coordinator, "messages", 2.0);
    let together: bool = coordinator
        .query_one(
            "SELECT (SELECT colocationid FROM pg_dist_partition WHERE logicalrelid = 'app.messages'::regclass) \
                  = (SELECT colocationid FROM pg_dist_partition WHERE logicalrelid = 'rate_limiter.rate_limits'::regclass)",
            &[],
        )
        .expect("colocation")
        .get(0);
    assert!(together, "one colocation group");

    // An application role that is not the extension's owner, with the
    // README's grants.
    coordinator
        .batch_execute(
            "DROP ROLE IF EXISTS citus_tenant; CREATE ROLE citus_tenant LOGIN; \
             GRANT USAGE ON SCHEMA app, rate_limiter TO citus_tenant; \
             GRANT INSERT, SELECT ON app.messages TO citus_tenant; \
             GRANT EXECUTE ON FUNCTION \
                 rate_limiter.rate_limit(text, text, float8, boolean, boolean, rate_limiter.config), \
                 rate_limiter._rate_limit_at(text, text, text, float8, boolean, rate_limiter.config, boolean, timestamptz, boolean) \
             TO citus_tenant",
        )
        .expect("an application role");
    // Citus propagates the grant on the distributed function only; the
    // workers' own connections see the role once it is committed.
    let granted: bool = coordinator
        .query_one(
            "SELECT bool_and(success) FROM run_command_on_workers($$GRANT EXECUTE ON FUNCTION \
                 rate_limiter.rate_limit(text, text, float8, boolean, boolean, rate_limiter.config) \
                 TO citus_tenant$$)",
            &[],
        )
        .expect("grant on the workers")
        .get(0);
    assert!(granted, "granted on every worker");
    let (tenant, _) = keys_on_each_worker(&mut coordinator, "tenant-");
    // From the coordinator and from the tenant's worker.
    for url in [&urls[0], &urls[1]] {
        let url = url.replace("user=postgres", "user=citus_tenant");
        tenant_transaction_stays_on_one_worker(
            &url,
            "messages",
            &tenant,
            "INSERT INTO app.messages VALUES ($1, 'hello')",
            &tenant,
        );
    }
    // The third call of a 2-token limit is refused, and rolled back with it.
    assert!(!consume(&mut coordinator, "messages", Some(&tenant)));
    let messages: i64 = coordinator
        .query_one(
            "SELECT count(*) FROM app.messages WHERE tenant_id = $1",
            &[&tenant],
        )
        .expect("count")
        .get(0);
    assert_eq!(messages, 2);
    make_local();
    coordinator
        .batch_execute(
            "DROP SCHEMA app CASCADE; \
             REVOKE ALL ON FUNCTION \
                 rate_limiter.rate_limit(text, text, float8, boolean, boolean, rate_limiter.config), \
                 rate_limiter._rate_limit_at(text, text, text, float8, boolean, rate_limiter.config, boolean, timestamptz, boolean) \
             FROM citus_tenant; \
             SELECT run_command_on_workers($$REVOKE ALL ON FUNCTION \
                 rate_limiter.rate_limit(text, text, float8, boolean, boolean, rate_limiter.config) \
                 FROM citus_tenant$$); \
             REVOKE ALL ON SCHEMA rate_limiter FROM citus_tenant; DROP ROLE citus_tenant",
        )
        .expect("drop the application and its role");
    forget("messages");
}

#[test]
#[ignore = "needs the Citus cluster of scripts/test.sh"]
fn sixteen_connections_over_three_nodes_admit_exactly_the_capacity() {
    make_distributed();
    forget("exact");
    const CAPACITY: f64 = 20.0;
    const KEYS: usize = 100;
    let mut coordinator = coordinator();
    define(&mut coordinator, "exact", CAPACITY);
    // A global limit with 8 shards (10 tokens each): they spread over the
    // workers.
    coordinator
        .execute(
            "SELECT rate_limiter.define('exact-global', rate_limiter.token_bucket(80, '1000 days', shards => 8))",
            &[],
        )
        .expect("define");
    let urls = urls();
    let admitted: Vec<(Vec<u32>, u32)> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..16)
            .map(|thread| {
                let url = urls[thread % 3].clone();
                scope.spawn(move || {
                    let mut client = connect(&url);
                    let mut per_key = vec![0u32; KEYS];
                    let mut global = 0u32;
                    // Every thread asks every key more than its capacity, and the global
                    // limit about 600 times in all.
                    for round in 0..3 {
                        for (key, admitted) in per_key.iter_mut().enumerate() {
                            let key_text = format!("k{key}");
                            if consume(&mut client, "exact", Some(&key_text)) {
                                *admitted += 1;
                            }
                            if (key + round + thread) % 8 == 0
                                && consume(&mut client, "exact-global", None)
                            {
                                global += 1;
                            }
                        }
                    }
                    (per_key, global)
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|worker| worker.join().expect("a thread"))
            .collect()
    });
    for key in 0..KEYS {
        let total: u32 = admitted.iter().map(|(per_key, _)| per_key[key]).sum();
        assert_eq!(
            f64::from(total),
            CAPACITY,
            "key k{key}: admitted exactly the capacity"
        );
    }
    let global: u32 = admitted.iter().map(|(_, global)| global).sum();
    assert_eq!(global, 80, "the global limit: exactly its capacity");
    forget("exact");
}

/// The node (0 coordinator, 1 and 2 workers) of each shard of the global
/// limit `name` with `shards` shards.
fn shard_nodes(client: &mut Client, name: &str, shards: i16) -> Vec<usize> {
    (0..shards)
        .map(|shard| node_of(client, &format!("{name}/{shard}")))
        .collect()
}

/// A name starting with `prefix` whose global limit of 8 shards has at
/// least two shards on each worker, and where its shards are.
fn name_spread_over_both_workers(client: &mut Client, prefix: &str) -> (String, Vec<usize>) {
    for n in 0..100 {
        let name = format!("{prefix}{n}");
        let nodes = shard_nodes(client, &name, 8);
        if (1..=2).all(|worker| nodes.iter().filter(|node| **node == worker).count() >= 2) {
            return (name, nodes);
        }
    }
    panic!("no name with two shards on each worker");
}

/// A distributed install with a global limit of 8 shards, `capacity`
/// tokens per 1000 days, named `prefix-N` with two shards or more on each
/// worker (the state of names starting with `prefix` forgotten first): a
/// coordinator connection, the name and the node of each shard.
fn sharded_global_limit(prefix: &str, capacity: f64) -> (Client, String, Vec<usize>) {
    make_distributed();
    forget(prefix);
    let mut coordinator = coordinator();
    let (name, nodes) = name_spread_over_both_workers(&mut coordinator, &format!("{prefix}-"));
    coordinator
        .execute(
            "SELECT rate_limiter.define($1, rate_limiter.token_bucket($2, '1000 days', shards => 8))",
            &[&name, &capacity],
        )
        .expect("define");
    (coordinator, name, nodes)
}

/// The stored tokens of each shard of the global limit `name` (`None`: no
/// row), to 3 decimals, read through Citus.
fn shard_values(client: &mut Client, name: &str, shards: i16) -> Vec<Option<f64>> {
    (0..shards)
        .map(|shard| {
            client
                .query_opt(
                    "SELECT round(value::numeric, 3)::float8 FROM rate_limiter.rate_limits \
                     WHERE dkey = $1 AND name = $2 AND key IS NULL AND shard = $3",
                    &[&format!("{name}/{shard}"), &name, &shard],
                )
                .expect("read a shard")
                .map(|row| row.get(0))
        })
        .collect()
}

#[test]
#[ignore = "needs the Citus cluster of scripts/test.sh"]
fn a_sharded_global_limit_prefers_the_shards_of_the_node_it_runs_on() {
    let (mut coordinator, name, nodes) = sharded_global_limit("spread", 80.0);
    let urls = urls();
    for url in &urls {
        connect(url)
            .execute("SELECT rate_limiter.stats_reset($1)", &[&name])
            .expect("stats_reset");
    }
    let mut worker1 = connect(&urls[1]);
    // More than two shards (10 tokens each) could ever serve: 22023, as
    // on one server, and nothing consumed.
    let error = worker1
        .query_one(
            "SELECT ok FROM rate_limiter.rate_limit($1, NULL, 21)",
            &[&name],
        )
        .expect_err("a count no two shards can serve");
    assert_eq!(
        error.code(),
        Some(&SqlState::INVALID_PARAMETER_VALUE),
        "{error}"
    );
    let left = |client: &mut Client, worker: usize| -> (f64, usize) {
        let values = shard_values(client, &name, 8);
        let shards = (0..8).filter(|shard| nodes[*shard] == worker);
        let tokens = shards
            .clone()
            .map(|shard| values[shard].unwrap_or(10.0))
            .sum();
        (
            tokens,
            shards.filter(|shard| values[*shard].is_some()).count(),
        )
    };
    // Worker 1 holds two shards or more, of 10 tokens each: a pair of them
    // can serve each of its first 19 calls (both empty takes 20), so none
    // goes to worker 2.
    for _ in 0..19 {
        assert!(consume(&mut worker1, &name, None));
    }
    let (local_left, _) = left(&mut coordinator, 1);
    let (_, touched) = left(&mut coordinator, 2);
    assert_eq!(touched, 0, "worker 2's shards untouched");
    assert_eq!(
        local_left,
        10.0 * nodes.iter().filter(|node| **node == 1).count() as f64 - 19.0
    );
    // It goes on until its own shards are empty. A pair of them that
    // cannot serve a call sends it to worker 2, whose own drawn pair may
    // be empty too (§6: two shards are looked at, not all), so some calls
    // may be refused on the way.
    let mut admitted = 19;
    for _ in 0..1000 {
        if left(&mut coordinator, 1).0 < 0.5 {
            break;
        }
        if consume(&mut worker1, &name, None) {
            admitted += 1;
        }
    }
    assert!(
        left(&mut coordinator, 1).0 < 0.5,
        "worker 1's shards drained"
    );
    // Then every admission of worker 1's calls comes from worker 2.
    let (before, _) = left(&mut coordinator, 2);
    let mut served = 0;
    for _ in 0..20 {
        if consume(&mut worker1, &name, None) {
            served += 1;
        }
    }
    admitted += served;
    assert!(
        served > 0 || before < 0.5,
        "worker 2 serves worker 1's calls"
    );
    assert_eq!(
        left(&mut coordinator, 2).0,
        before - f64::from(served),
        "served by worker 2"
    );
    // The coordinator holds no shard: its calls go to the workers. In all,
    // exactly the capacity.
    for _ in 0..200 {
        if consume(&mut coordinator, &name, None) {
            admitted += 1;
        }
    }
    assert_eq!(admitted, 80, "exactly the capacity");
    // Each call is counted once, on the node it was made on (a call served
    // by another node is not counted there too).
    let counted: i64 = urls
        .iter()
        .map(|url| {
            connect(url)
                .query_opt(
                    "SELECT admitted FROM rate_limiter.stats WHERE name = $1",
                    &[&name],
                )
                .expect("stats")
                .map_or(0, |row| row.get::<_, i64>(0))
        })
        .sum();
    assert_eq!(counted, 80, "admissions counted once each");
    assert!(!consume(&mut worker1, &name, None));
    let refused = worker1
        .query_one(
            "SELECT ok, extract(epoch FROM retry_after)::float8 FROM rate_limiter.rate_limit($1)",
            &[&name],
        )
        .expect("rate_limit");
    assert!(!refused.get::<_, bool>(0));
    assert!(
        refused
            .get::<_, Option<f64>>(1)
            .is_some_and(|seconds| seconds > 0.0),
        "a refusal says when to retry"
    );
    forget("spread");
}

#[test]
#[ignore = "needs the Citus cluster of scripts/test.sh"]
fn a_sharded_global_limit_rolls_back_and_commits_on_both_workers() {
    let (mut coordinator, name, nodes) = sharded_global_limit("spread-tx", 8.0);
    let on_worker1 = nodes.iter().filter(|node| **node == 1).count();
    let (mut worker1, notices) = connect_with_notices(&urls()[1]);
    worker1
        .batch_execute("SET citus.log_remote_commands = on")
        .expect("log remote commands");
    for commit in [false, true] {
        taken(&notices);
        let mut transaction = worker1.transaction().expect("begin");
        // One token per shard: more calls than worker 1's shards can serve.
        let mut admitted = 0;
        for _ in 0..1000 {
            if admitted > on_worker1 {
                break;
            }
            let ok: bool = transaction
                .query_one("SELECT ok FROM rate_limiter.rate_limit($1)", &[&name])
                .expect("rate_limit")
                .get(0);
            if ok {
                admitted += 1;
            }
        }
        if commit {
            transaction.commit().expect("commit");
        } else {
            transaction.rollback().expect("rollback");
        }
        let values = shard_values(&mut coordinator, &name, 8);
        let used: Vec<usize> = (0..8).filter(|shard| values[*shard] == Some(0.0)).collect();
        let log = taken(&notices);
        if commit {
            assert_eq!(used.len(), on_worker1 + 1, "{values:?}");
            // A pair of worker 1's shards that cannot serve a call sends
            // it to worker 2 (worker 1 may have a token left elsewhere).
            assert!(
                used.iter().any(|shard| nodes[*shard] == 2),
                "worker 2's shards too: {values:?}"
            );
            assert!(
                log.iter().any(|line| line.contains("PREPARE TRANSACTION")),
                "wrote on both workers: two-phase commit: {log:#?}"
            );
        } else {
            assert_eq!(
                values.iter().flatten().count(),
                0,
                "nothing kept on either worker: {values:?}"
            );
        }
    }
    forget("spread-tx");
}

#[test]
#[ignore = "needs the Citus cluster of scripts/test.sh"]
fn a_sharded_global_limit_never_waits_for_another_nodes_busy_shards() {
    let (mut coordinator, name, nodes) = sharded_global_limit("spread-busy", 16.0);
    // Every shard full (2 tokens), worker 2's locked by a transaction that
    // stays open.
    for shard in 0..8i16 {
        coordinator
            .execute(
                "INSERT INTO rate_limiter.rate_limits (name, key, shard, value, ts, dkey) \
                 VALUES ($1, NULL, $2, 2, now(), $3)",
                &[&name, &shard, &format!("{name}/{shard}")],
            )
            .expect("a full shard");
    }
    let mut holder = connect(&urls()[2]);
    let mut holding = holder.transaction().expect("begin");
    for shard in (0..8i16).filter(|shard| nodes[*shard as usize] == 2) {
        holding
            .query_one(
                "SELECT 1 FROM rate_limiter.rate_limits \
                 WHERE dkey = $1 AND name = $2 AND key IS NULL AND shard = $3 FOR UPDATE",
                &[&format!("{name}/{shard}"), &name, &shard],
            )
            .expect("lock a shard of worker 2");
    }
    // Worker 1's calls drain its own shards, then find worker 2's busy:
    // refused at once, never waiting. A wait would end the call with
    // statement_timeout (57014, and the test fails): Citus cancels the
    // statement it sent to worker 2 when the caller's is cancelled, where
    // a lock_timeout set here would not reach worker 2's session.
    let mut worker1 = connect(&urls()[1]);
    worker1
        .batch_execute("SET statement_timeout = '5s'")
        .expect("statement_timeout");
    coordinator
        .batch_execute("SET statement_timeout = '5s'")
        .expect("statement_timeout");
    let on_worker1 = nodes.iter().filter(|node| **node == 1).count();
    let mut admitted = 0;
    for _ in 0..(2 * on_worker1 + 40) {
        if consume(&mut worker1, &name, None) {
            admitted += 1;
        }
    }
    assert_eq!(
        admitted,
        2 * on_worker1,
        "worker 1's own tokens, and no more"
    );
    // From the coordinator, which holds no shard: refused too.
    assert!(!consume(&mut coordinator, &name, None));
    holding.rollback().expect("release worker 2's shards");
    assert!(
        consume(&mut worker1, &name, None),
        "worker 2's shards are free again"
    );
    forget("spread-busy");
}

#[test]
#[ignore = "needs the Citus cluster of scripts/test.sh"]
fn rate_credit_of_a_sharded_global_limit_fills_the_emptiest_shards_on_every_node() {
    let (mut coordinator, name, nodes) = sharded_global_limit("credit-spread", 80.0);
    // Shard i holds i tokens (of 10), on whichever worker it lives.
    let fill = |client: &mut Client| {
        client
            .execute(
                "DELETE FROM rate_limiter.rate_limits WHERE name = $1",
                &[&name],
            )
            .expect("forget the state");
        for shard in 0..8i16 {
            client
                .execute(
                    "INSERT INTO rate_limiter.rate_limits (name, key, shard, value, ts, dkey) \
                     VALUES ($1, NULL, $2, $3, now(), $4)",
                    &[&name, &shard, &f64::from(shard), &format!("{name}/{shard}")],
                )
                .expect("a shard");
        }
    };
    let expected = |credited: &[f64]| -> Vec<Option<f64>> {
        (0..8)
            .map(|shard| Some(credited.get(shard).copied().unwrap_or(shard as f64)))
            .collect()
    };
    let urls = urls();
    for (node, url) in urls.iter().enumerate() {
        let (mut client, notices) = connect_with_notices(url);
        client
            .batch_execute("SET citus.log_remote_commands = on")
            .expect("log remote commands");
        for commit in [false, true] {
            fill(&mut coordinator);
            taken(&notices);
            let mut transaction = client.transaction().expect("begin");
            // 12 tokens: the emptiest first: shard 0 gets 10, shard 1 gets 2.
            let value: f64 = transaction
                .query_one("SELECT rate_limiter.rate_credit($1, NULL, 12)", &[&name])
                .unwrap_or_else(|error| panic!("rate_credit on node {node}: {error}"))
                .get(0);
            assert!(
                (value - 40.0).abs() < 0.01,
                "28 + 12 over every shard: {value}"
            );
            if commit {
                transaction.commit().expect("commit");
                assert_eq!(
                    shard_values(&mut coordinator, &name, 8),
                    expected(&[10.0, 3.0]),
                    "node {node}"
                );
                let log = taken(&notices);
                if nodes[0] != nodes[1] {
                    assert!(
                        log.iter().any(|line| line.contains("PREPARE TRANSACTION")),
                        "credited on both workers: 2PC (node {node}): {log:#?}"
                    );
                }
            } else {
                transaction.rollback().expect("rollback");
                assert_eq!(
                    shard_values(&mut coordinator, &name, 8),
                    expected(&[]),
                    "rolled back (node {node})"
                );
            }
        }
        // Never above capacity.
        let value: f64 = client
            .query_one("SELECT rate_limiter.rate_credit($1, NULL, 1000)", &[&name])
            .expect("rate_credit")
            .get(0);
        assert!((value - 80.0).abs() < 0.01, "{value}");
        assert_eq!(
            shard_values(&mut coordinator, &name, 8),
            vec![Some(10.0); 8],
            "node {node}"
        );
    }
    forget("credit-spread");
}

#[test]
#[ignore = "needs the Citus cluster of scripts/test.sh"]
fn a_definition_made_on_any_node_is_used_by_every_node() {
    make_distributed();
    forget("everywhere");
    let mut clients: Vec<Client> = urls().iter().map(|url| connect(url)).collect();
    // Each node answers 42704 first (and caches that).
    for client in &mut clients {
        let error = client
            .query_one(
                "SELECT ok FROM rate_limiter.rate_limit('everywhere', 'k')",
                &[],
            )
            .expect_err("undefined");
        assert_eq!(
            error.as_db_error().expect("db error").code(),
            &SqlState::UNDEFINED_OBJECT
        );
    }
    for (definer, capacity) in [(1, 3.0), (0, 5.0), (2, 7.0)] {
        define(&mut clients[definer], "everywhere", capacity);
        for (node, client) in clients.iter_mut().enumerate() {
            let remaining: f64 = client
                .query_one(
                    "SELECT remaining FROM rate_limiter.rate_check('everywhere', 'fresh')",
                    &[],
                )
                .expect("rate_check")
                .get(0);
            assert_eq!(
                remaining,
                capacity - 1.0,
                "{} sees the definition made on {}",
                NODES[node],
                NODES[definer]
            );
        }
    }
    // A change of period discards the state on every shard.
    assert!(consume(&mut clients[1], "everywhere", Some("k")));
    clients[2]
        .execute(
            "SELECT rate_limiter.define('everywhere', rate_limiter.token_bucket(7, '999 days'))",
            &[],
        )
        .expect("define with another period");
    let rows: i64 = clients[0]
        .query_one(
            "SELECT count(*) FROM rate_limiter.rate_limits WHERE name = 'everywhere'",
            &[],
        )
        .expect("count")
        .get(0);
    assert_eq!(rows, 0, "the state of the old period is gone");
    forget("everywhere");
}

#[test]
#[ignore = "needs the Citus cluster of scripts/test.sh"]
fn a_state_table_distributed_otherwise_fails_closed_and_the_hint_works() {
    make_local();
    let mut coordinator = coordinator();
    coordinator
        .batch_execute(
            "DELETE FROM rate_limiter.rate_limits WHERE key IS NULL; \
             SELECT create_distributed_table('rate_limiter.rate_limits', 'key')",
        )
        .expect("Citus accepts distributing the state table by key");
    const CALL: &str = "SELECT ok FROM rate_limiter.rate_limit('citus', $1, \
                        config => rate_limiter.token_bucket(10, '1 minute'))";
    for (node, mut client) in nodes() {
        let error = client
            .query_one(CALL, &[&format!("after {node}")])
            .expect_err("a call on a state table distributed by key fails");
        let db = error.as_db_error().expect("a server error");
        assert_eq!(
            db.code(),
            &SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE,
            "on the {node}: {db:?}"
        );
        let hint = db.hint().unwrap_or_default();
        assert!(
            hint.contains("rate_limiter.undistribute()"),
            "on the {node}, the hint names what works: {hint}"
        );
    }
    // What the hint says, on the coordinator.
    coordinator
        .batch_execute("SELECT rate_limiter.undistribute()")
        .expect("undistribute()");
    for (node, mut client) in nodes() {
        assert_eq!(
            distribution(&mut client),
            None,
            "the {node} forgot the distribution"
        );
        let ok: bool = client
            .query_one(CALL, &[&format!("again {node}")])
            .unwrap_or_else(|error| panic!("a call on the {node} after undistribute(): {error}"))
            .get(0);
        assert!(ok, "calls answer again on the {node}");
    }
    for (node, mut client) in nodes() {
        client
            .batch_execute("DELETE FROM rate_limiter.rate_limits WHERE name = 'citus'")
            .unwrap_or_else(|error| panic!("clean up on the {node}: {error}"));
    }
}

#[test]
#[ignore = "needs the Citus cluster of scripts/test.sh"]
fn rate_limit_all_of_a_sharded_global_limit_prefers_the_callers_shards_and_is_all_or_nothing() {
    // 8 shards of 10 tokens, at least two on each worker.
    let (mut coordinator, name, nodes) = sharded_global_limit("gall", 80.0);
    define(&mut coordinator, "gall-keyed", 10.0);
    let (_, two) = keys_on_each_worker(&mut coordinator, "gall-");
    let urls = urls();
    let mut worker1 = connect(&urls[1]);
    let all = |client: &mut Client, requests: &[(Option<&str>, f64)]| -> Vec<bool> {
        let names: Vec<&str> = requests
            .iter()
            .map(|(key, _)| {
                if key.is_some() {
                    "gall-keyed"
                } else {
                    name.as_str()
                }
            })
            .collect();
        let keys: Vec<Option<&str>> = requests.iter().map(|(key, _)| *key).collect();
        let counts: Vec<f64> = requests.iter().map(|(_, count)| *count).collect();
        client
            .query(
                "SELECT ok FROM rate_limiter.rate_limit_all(ARRAY(\
                     SELECT (name, key, count, NULL)::rate_limiter.request \
                     FROM unnest($1::text[], $2::text[], $3::float8[]) WITH ORDINALITY AS r(name, key, count, position) \
                     ORDER BY position))",
                &[&names, &keys, &counts],
            )
            .expect("rate_limit_all")
            .iter()
            .map(|row| row.get(0))
            .collect()
    };
    // From worker 1: the global limit's token comes from a shard on
    // worker 1; the keyed row on worker 2 is consumed in the same call.
    assert_eq!(
        all(&mut worker1, &[(None, 1.0), (Some(&two), 1.0)]),
        [true, true]
    );
    let values = shard_values(&mut coordinator, &name, 8);
    let consumed: Vec<usize> = (0..8).filter(|&shard| values[shard].is_some()).collect();
    assert_eq!(consumed.len(), 1, "{values:?}");
    assert_eq!(values[consumed[0]], Some(9.0));
    assert_eq!(nodes[consumed[0]], 1, "a shard of the caller's worker");
    assert_eq!(stored(&mut coordinator, "gall-keyed", &two), Some(9.0));
    // Refused on the keyed row: nothing consumed anywhere, the global
    // limit's shard included.
    assert_eq!(
        all(&mut worker1, &[(None, 1.0), (Some(&two), 10.0)]),
        [true, false]
    );
    assert_eq!(shard_values(&mut coordinator, &name, 8), values);
    assert_eq!(stored(&mut coordinator, "gall-keyed", &two), Some(9.0));
    // Named twice, from worker 2: charged twice, on worker 2's shards.
    let mut worker2 = connect(&urls[2]);
    assert_eq!(all(&mut worker2, &[(None, 1.0), (None, 1.0)]), [true, true]);
    let on_worker2: f64 = shard_values(&mut coordinator, &name, 8)
        .iter()
        .zip(&nodes)
        .filter(|(_, node)| **node == 2)
        .map(|(value, _)| value.unwrap_or(10.0))
        .sum();
    let worker2_shards = nodes.iter().filter(|node| **node == 2).count() as f64;
    assert_eq!(on_worker2, worker2_shards * 10.0 - 2.0);
    // Never more than the capacity: calls from the three nodes until the
    // limit is empty (77 tokens left).
    let mut admitted = 0;
    for call in 0..120 {
        let client = match call % 3 {
            0 => &mut coordinator,
            1 => &mut worker1,
            _ => &mut worker2,
        };
        if all(client, &[(None, 1.0)])[0] {
            admitted += 1;
        }
    }
    let left: f64 = shard_values(&mut coordinator, &name, 8)
        .iter()
        .map(|value| value.unwrap_or(10.0))
        .sum();
    eprintln!("rate_limit_all of a sharded global limit: {admitted} of 77 admitted");
    assert!(admitted <= 77, "{admitted} admitted of 77");
    assert_eq!(
        left,
        77.0 - f64::from(admitted),
        "the stored tokens are what was admitted"
    );
    forget("gall");
}

#[test]
#[ignore = "needs the Citus cluster of scripts/test.sh"]
fn an_update_from_0_4_0_keeps_every_row_and_then_distributes() {
    let mut coordinator = coordinator();
    make_local();
    coordinator
        .batch_execute(
            "DROP EXTENSION rate_limiter; CREATE EXTENSION rate_limiter VERSION '0.4.0'; \
             SELECT rate_limiter.define('old', rate_limiter.token_bucket(10, '1000 days'))",
        )
        .expect("install 0.4.0 on every node");
    for (node, mut client) in nodes() {
        assert_eq!(
            extension_version(&mut client).as_deref(),
            Some("0.4.0"),
            "on the {node}"
        );
    }
    for key in ["a", "b", "b"] {
        assert!(consume(&mut coordinator, "old", Some(key)));
    }
    coordinator
        .batch_execute("ALTER EXTENSION rate_limiter UPDATE")
        .expect("update to the current version");
    let mut versions = Vec::new();
    for (_, mut client) in nodes() {
        versions.push(extension_version(&mut client));
    }
    assert!(
        versions.windows(2).all(|pair| pair[0] == pair[1]),
        "{versions:?}"
    );
    assert_ne!(versions[0].as_deref(), Some("0.4.0"));
    coordinator
        .batch_execute("SELECT rate_limiter.distribute()")
        .expect("distribute() after the update");
    assert_eq!(stored(&mut coordinator, "old", "a"), Some(9.0));
    assert_eq!(stored(&mut coordinator, "old", "b"), Some(8.0));
    assert!(consume(&mut coordinator, "old", Some("b")));
    assert_eq!(stored(&mut coordinator, "old", "b"), Some(7.0));
    forget("old");
}

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

/// Undoes the coordinator's `synchronous_standby_names` when dropped, so a
/// failed test leaves no commit waiting.
struct CommitsWait;

impl CommitsWait {
    /// From now on, every commit on the coordinator that wrote waits for a
    /// synchronous standby that does not exist.
    fn start() -> CommitsWait {
        set_synchronous_standby_names("'rate_limiter_test_nobody'").expect("make commits wait");
        CommitsWait
    }
}

/// `ALTER SYSTEM SET synchronous_standby_names` on the coordinator, then a
/// reload (two statements: `ALTER SYSTEM` runs outside a transaction).
fn set_synchronous_standby_names(value: &str) -> Result<(), postgres::Error> {
    let mut coordinator = coordinator();
    coordinator.batch_execute(&format!(
        "ALTER SYSTEM SET synchronous_standby_names = {value}"
    ))?;
    coordinator.batch_execute("SELECT pg_reload_conf()")
}

impl Drop for CommitsWait {
    fn drop(&mut self) {
        let _ = set_synchronous_standby_names("DEFAULT");
    }
}

/// A connection to `url` once the server accepts connections again (after
/// a crash, its recovery).
fn reconnect(url: &str) -> Client {
    for _ in 0..600 {
        if let Ok(client) = Client::connect(url, NoTls) {
            return client;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    panic!("{url} did not come back within a minute");
}

/// Polls `query` (one boolean) on `client` until it is true.
fn wait_until(client: &mut Client, query: &str, what: &str) {
    for _ in 0..600 {
        if client.query_one(query, &[]).expect(what).get::<_, bool>(0) {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    panic!("waited a minute for {what}");
}

#[test]
#[ignore = "needs the Citus cluster of scripts/test.sh"]
fn a_worker_killed_between_prepare_and_commit_keeps_what_committed_and_never_over_admits() {
    make_distributed();
    forget("crash");
    let urls = urls();
    let mut coordinator = coordinator();
    define(&mut coordinator, "crash", 10.0);
    let (one, two) = keys_on_each_worker(&mut coordinator, "crash-");

    // Between Citus's PREPARE TRANSACTION on the workers (at pre-commit)
    // and its COMMIT PREPARED (after the local commit) the coordinator
    // waits here: its commit record waits for a synchronous standby that
    // does not exist.
    let waiting = CommitsWait::start();
    let committer = {
        let url = urls[0].clone();
        let (one, two) = (one.clone(), two.clone());
        std::thread::spawn(move || {
            let mut client = connect(&url);
            client
                .batch_execute("SET application_name = 'rate_limiter_committer'")
                .expect("application_name");
            let mut transaction = client.transaction().expect("begin");
            for (key, count) in [(&one, 3.0), (&two, 4.0)] {
                let ok: bool = transaction
                    .query_one(
                        "SELECT ok FROM rate_limiter.rate_limit('crash', $1, $2)",
                        &[key, &count],
                    )
                    .expect("rate_limit")
                    .get(0);
                assert!(ok);
            }
            transaction.commit()
        })
    };
    let mut observer = connect(&urls[0]);
    wait_until(
        &mut observer,
        "SELECT EXISTS (SELECT FROM pg_stat_activity \
         WHERE application_name = 'rate_limiter_committer' AND wait_event = 'SyncRep')",
        "the coordinator's commit to wait after PREPARE",
    );
    let mut worker = connect(&urls[2]);
    let prepared: i64 = worker
        .query_one("SELECT count(*) FROM pg_prepared_xacts", &[])
        .expect("prepared transactions")
        .get(0);
    assert_eq!(prepared, 1, "worker 2 prepared the transaction");

    // SIGKILL a process of worker 2: its postmaster kills the others and
    // recovers from WAL, as after a crash; the prepared transaction
    // survives, and the coordinator's connection to worker 2 is gone.
    let pid: i32 = worker
        .query_one("SELECT pg_backend_pid()", &[])
        .expect("pid")
        .get(0);
    let killed = std::process::Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status()
        .expect("run kill");
    assert!(killed.success(), "SIGKILL worker 2's backend {pid}");
    drop(worker);
    let mut worker = reconnect(&urls[2]);
    let prepared: i64 = worker
        .query_one("SELECT count(*) FROM pg_prepared_xacts", &[])
        .expect("prepared transactions")
        .get(0);
    assert_eq!(prepared, 1, "the prepared transaction survived the crash");

    // Let the coordinator commit: it commits worker 1 (COMMIT PREPARED);
    // worker 2's COMMIT PREPARED cannot be sent (its connection died with
    // the crash), which Citus reports as a warning.
    drop(waiting);
    let started = std::time::Instant::now();
    committer
        .join()
        .expect("the committing client")
        .expect("the transaction committed on the coordinator");
    eprintln!(
        "the commit returned {:?} after the standby wait ended",
        started.elapsed()
    );

    // Until Citus's recovery commits it, the prepared transaction holds
    // worker 2's row: no call admits against the old state meanwhile.
    for url in [&urls[0], &urls[2]] {
        let mut client = connect(url);
        client
            .batch_execute("SET lock_timeout = '300ms'")
            .expect("lock_timeout");
        client
            .batch_execute("SET statement_timeout = '2s'")
            .expect("statement_timeout");
        let started = std::time::Instant::now();
        let answer = client.query_one(
            "SELECT ok FROM rate_limiter.rate_limit('crash', $1, 7.0)",
            &[&two],
        );
        eprintln!(
            "while prepared, through {url}: {:?} after {:?}",
            answer
                .as_ref()
                .map(|row| row.get::<_, bool>(0))
                .map_err(|error| error.code().cloned()),
            started.elapsed()
        );
        match answer {
            Ok(row) => assert!(
                !row.get::<_, bool>(0),
                "admitted 7 against a row with 6 left (through {url})"
            ),
            // Waits for the prepared transaction's row lock; through the
            // coordinator, the worker's wait ends at the statement timeout.
            Err(error) => assert!(
                [SqlState::LOCK_NOT_AVAILABLE, SqlState::QUERY_CANCELED]
                    .iter()
                    .any(|code| error.code() == Some(code)),
                "waits for the prepared transaction: {error}"
            ),
        }
    }

    // Citus's recovery (its maintenance daemon runs it every minute; here
    // at once) commits the prepared transaction on worker 2.
    // (A new session: the old one's connection to worker 2 died.)
    connect(&urls[0])
        .execute("SELECT recover_prepared_transactions()", &[])
        .expect("recover_prepared_transactions()");
    wait_until(
        &mut worker,
        "SELECT NOT EXISTS (SELECT FROM pg_prepared_xacts)",
        "worker 2's prepared transaction to be resolved",
    );
    let mut coordinator = connect(&urls[0]);
    assert_eq!(
        stored(&mut coordinator, "crash", &one),
        Some(7.0),
        "worker 1 committed"
    );
    assert_eq!(
        stored(&mut coordinator, "crash", &two),
        Some(6.0),
        "worker 2 holds what committed"
    );
    let ok = |client: &mut Client, count: f64| -> bool {
        client
            .query_one(
                "SELECT ok FROM rate_limiter.rate_limit('crash', $1, $2)",
                &[&two, &count],
            )
            .expect("rate_limit")
            .get(0)
    };
    assert!(!ok(&mut coordinator, 7.0), "7 of 6 left: refused");
    assert!(ok(&mut coordinator, 6.0), "6 of 6 left: admitted");
    assert!(!ok(&mut coordinator, 1.0), "nothing left");
    forget("crash");
}

/// The node (0 coordinator, 1 and 2 workers) holding `table`'s rows of
/// `value` (as text; its distribution column is of type `column_type`).
fn node_of_value(client: &mut Client, table: &str, value: &str, column_type: &str) -> usize {
    let port: i32 = client
        .query_one(
            &format!(
                "SELECT n.nodeport FROM pg_dist_placement AS p JOIN pg_dist_node AS n USING (groupid) \
                 WHERE p.shardid = get_shard_id_for_distribution_column($1::text::regclass, $2::text::{column_type})"
            ),
            &[&table, &value],
        )
        .expect("find the value's node")
        .get(0);
    urls()
        .iter()
        .position(|url| url.contains(&format!("port={port} ")))
        .unwrap_or_else(|| panic!("no node listens on {port}"))
}

/// The stored tokens of (name, key) on a state table distributed by a
/// column of type `column_type`, `dkey` its value as text, read through a
/// query Citus routes by that value.
fn stored_typed(
    client: &mut Client,
    name: &str,
    key: Option<&str>,
    dkey: &str,
    column_type: &str,
) -> Option<f64> {
    client
        .query_opt(
            &format!(
                "SELECT round(value::numeric, 3)::float8 FROM rate_limiter.rate_limits \
                 WHERE dkey = $3::text::{column_type} AND name = $1 AND key IS NOT DISTINCT FROM $2"
            ),
            &[&name, &key, &dkey],
        )
        .expect("read the state")
        .map(|row| row.get(0))
}

/// The type of the state table's `dkey`, and whether it is in the
/// colocation group of `table`.
fn dkey_type_and_colocation(client: &mut Client, table: &str) -> (String, bool) {
    let row = client
        .query_one(
            "SELECT format_type(atttypid, atttypmod), \
                    (SELECT colocationid FROM pg_dist_partition WHERE logicalrelid = $1::text::regclass) \
                  IS NOT DISTINCT FROM \
                    (SELECT colocationid FROM pg_dist_partition WHERE logicalrelid = 'rate_limiter.rate_limits'::regclass) \
             FROM pg_attribute WHERE attrelid = 'rate_limiter.rate_limits'::regclass AND attname = 'dkey'",
            &[&table],
        )
        .expect("dkey's type and the colocation");
    (row.get(0), row.get(1))
}

/// Local tables with no state (every stored key must be a tenant id to
/// colocate, and a test that failed leaves its rows), the application
/// table `table` (`tenant_id column_type`, `body text`) distributed by its
/// tenant column, and the limits `name` and `name-global` (10 tokens each)
/// defined: a coordinator connection.
fn colocation_setup(table: &str, column_type: &str, name: &str) -> Client {
    make_local();
    forget(name);
    let mut coordinator = coordinator();
    coordinator
        .batch_execute(&format!(
            "DELETE FROM rate_limiter.rate_limits; \
             DROP SCHEMA IF EXISTS app CASCADE; CREATE SCHEMA app; \
             CREATE TABLE {table} (tenant_id {column_type} NOT NULL, body text); \
             SELECT create_distributed_table('{table}', 'tenant_id')"
        ))
        .expect("an application table distributed by its tenant id");
    define(&mut coordinator, name, 10.0);
    define(&mut coordinator, &format!("{name}-global"), 10.0);
    coordinator
}

/// With one token of `name` consumed for each of `keys`, of the global
/// limit `name-global`, and of the key `not-a-tenant` (no value of
/// `column_type`), `distribute(colocate_with => table)` refuses (22P02)
/// and changes nothing; once that key is `rate_reset`, it distributes,
/// `dkey` of `column_type`, in `table`'s colocation group.
fn distribute_colocated_after_refusing(
    coordinator: &mut Client,
    table: &str,
    column_type: &str,
    name: &str,
    keys: &[&str],
) {
    let bad_key = "not-a-tenant";
    for key in keys.iter().chain([&bad_key]) {
        assert!(consume(coordinator, name, Some(key)));
    }
    assert!(consume(coordinator, &format!("{name}-global"), None));
    let distribute = format!("SELECT rate_limiter.distribute(colocate_with => '{table}')");
    let error = coordinator
        .batch_execute(&distribute)
        .expect_err("a key that is not a tenant id");
    assert_eq!(
        error.code(),
        Some(&SqlState::INVALID_TEXT_REPRESENTATION),
        "{error}"
    );
    assert_eq!(distribution(coordinator), None, "still local");
    coordinator
        .execute("SELECT rate_limiter.rate_reset($1, $2)", &[&name, &bad_key])
        .expect("rate_reset");
    coordinator
        .batch_execute(&distribute)
        .expect("the limiter colocated with the table");
    let (dkey_type, together) = dkey_type_and_colocation(coordinator, table);
    assert_eq!(dkey_type, column_type);
    assert!(together, "one colocation group");
}

/// After `distribute(colocate_with => ...)`, with `dkey` of
/// `column_type`: each of `keys` ((key, its `dkey` as text)) of `name`
/// and the global limit `name-global` (`dkey` as text `global_dkey`),
/// each consumed once before distributing (9 tokens left), is where Citus
/// routes its value, and a call from every node finds it there (6 tokens
/// left afterwards).
fn colocated_rows_are_found_from_every_node(
    coordinator: &mut Client,
    name: &str,
    column_type: &str,
    keys: &[(&str, String)],
    global_dkey: &str,
) {
    let global = format!("{name}-global");
    let expect_tokens = |coordinator: &mut Client, tokens: f64| {
        for (key, dkey) in keys {
            assert_eq!(
                stored_typed(coordinator, name, Some(key), dkey, column_type),
                Some(tokens),
                "{key:?}"
            );
        }
        assert_eq!(
            stored_typed(coordinator, &global, None, global_dkey, column_type),
            Some(tokens)
        );
    };
    expect_tokens(coordinator, 9.0);
    for url in urls() {
        let mut client = connect(&url);
        for (key, _) in keys {
            assert!(consume(&mut client, name, Some(key)), "{key:?} from {url}");
        }
        assert!(consume(&mut client, &global, None), "from {url}");
    }
    expect_tokens(coordinator, 6.0);
}

/// What a state table colocated with `table` (distributed by a column of
/// `column_type`) shows for tenants on the two workers (the first of
/// `candidates`, values as text, on each), with the keyed limit `name` (10
/// tokens, never used for these tenants) and the global limit
/// `name-global` (6 tokens left, its row's `dkey` as text
/// `global_dkey`) defined:
/// - the tenant transaction (`rate_limit` and an `INSERT` into `table`),
///   from the coordinator and from the tenant's worker, runs on that
///   worker alone, one-phase;
/// - a transaction that consumed on both workers commits with 2PC;
/// - `rate_limit_all` over both tenants and the global limit, from worker
///   2, consumes on both workers, and a refusal on one consumes nothing
///   anywhere;
/// - `undistribute()` makes `dkey` text (NULL) again, keeping the rows.
fn colocated_tenants_on_two_workers(
    table: &str,
    column_type: &str,
    candidates: &[String],
    name: &str,
    global_dkey: &str,
) {
    let urls = urls();
    let mut coordinator = coordinator();
    let global = format!("{name}-global");
    let tenant_on = |coordinator: &mut Client, node: usize| {
        candidates
            .iter()
            .find(|tenant| node_of_value(coordinator, table, tenant, column_type) == node)
            .expect("a tenant on that worker")
            .clone()
    };
    let (one, two) = (
        tenant_on(&mut coordinator, 1),
        tenant_on(&mut coordinator, 2),
    );
    let tokens = |coordinator: &mut Client, key: Option<&str>, dkey: &str| {
        stored_typed(
            coordinator,
            if key.is_some() { name } else { &global },
            key,
            dkey,
            column_type,
        )
    };
    for url in [&urls[0], &urls[1]] {
        tenant_transaction_stays_on_one_worker(
            url,
            name,
            &one,
            &format!("INSERT INTO {table} VALUES ($1::text::{column_type}, 'a row')"),
            &one,
        );
    }
    assert_eq!(tokens(&mut coordinator, Some(&one), &one), Some(8.0));
    // Both workers in one transaction, from worker 1 (a direct write and a
    // delegated one): two-phase commit.
    let (mut worker, notices) = connect_with_notices(&urls[1]);
    worker
        .batch_execute("SET citus.log_remote_commands = on")
        .expect("log remote commands");
    let mut transaction = worker.transaction().expect("begin");
    for tenant in [&one, &two] {
        transaction
            .execute(
                "SELECT * FROM rate_limiter.rate_limit($1, $2)",
                &[&name, tenant],
            )
            .expect("rate_limit");
    }
    transaction.commit().expect("commit");
    let log = taken(&notices);
    assert!(
        log.iter().any(|line| line.contains("PREPARE TRANSACTION")),
        "two workers commit with 2PC: {log:#?}"
    );
    assert_eq!(tokens(&mut coordinator, Some(&one), &one), Some(7.0));
    assert_eq!(tokens(&mut coordinator, Some(&two), &two), Some(9.0));
    // rate_limit_all over both tenants and the global limit, from worker
    // 2: all admitted, then a refusal (9 > 8 on tenant two) that consumes
    // nothing anywhere.
    let mut worker2 = connect(&urls[2]);
    for (count, expected) in [(1.0, [true, true, true]), (9.0, [true, true, false])] {
        let answers: Vec<bool> = worker2
            .query(
                "SELECT ok FROM rate_limiter.rate_limit_all(ARRAY[\
                     ($1, $2, 1, NULL), ($4, NULL, 1, NULL), ($1, $3, $5, NULL)\
                 ]::rate_limiter.request[])",
                &[&name, &one, &two, &global, &count],
            )
            .expect("rate_limit_all")
            .iter()
            .map(|row| row.get(0))
            .collect();
        assert_eq!(answers, expected);
        assert_eq!(tokens(&mut coordinator, Some(&one), &one), Some(6.0));
        assert_eq!(tokens(&mut coordinator, Some(&two), &two), Some(8.0));
        assert_eq!(tokens(&mut coordinator, None, global_dkey), Some(5.0));
    }
    // prune() from the coordinator reaches both workers through
    // _prune_at, delegated by a value of the column's type: the rows of a
    // name without a definition on both tenants go, the others stay.
    let inline = format!("{name}-inline");
    let inline_tokens = |coordinator: &mut Client, tenant: &str| {
        stored_typed(coordinator, &inline, Some(tenant), tenant, column_type)
    };
    for tenant in [&one, &two] {
        coordinator
            .execute(
                "SELECT * FROM rate_limiter.rate_limit($1, $2, \
                 config => rate_limiter.token_bucket(10, '1000 days'))",
                &[&inline, tenant],
            )
            .expect("an inline config");
        assert_eq!(inline_tokens(&mut coordinator, tenant), Some(9.0));
    }
    let deleted: i64 = coordinator
        .query_one("SELECT rate_limiter.prune(older_than => '0 seconds')", &[])
        .expect("prune()")
        .get(0);
    assert!(deleted >= 2, "both tenants' inline rows: {deleted}");
    for tenant in [&one, &two] {
        assert_eq!(
            inline_tokens(&mut coordinator, tenant),
            None,
            "pruned on the tenant's worker"
        );
    }
    assert_eq!(tokens(&mut coordinator, Some(&one), &one), Some(6.0));
    assert_eq!(tokens(&mut coordinator, Some(&two), &two), Some(8.0));
    // undistribute() goes back to a text dkey, keeping the rows.
    make_local();
    assert_eq!(dkey_type_and_colocation(&mut coordinator, table).0, "text");
    assert_eq!(
        stored(&mut coordinator, name, &one),
        None,
        "dkey is NULL when local"
    );
    let remaining: f64 = coordinator
        .query_one(
            "SELECT remaining FROM rate_limiter.rate_check($1, $2)",
            &[&name, &one],
        )
        .expect("rate_check")
        .get(0);
    assert_eq!(remaining.round(), 5.0, "6 stored, minus the checked token");
}

#[test]
#[ignore = "needs the Citus cluster of scripts/test.sh"]
fn colocated_with_a_bigint_tenant_column_a_tenant_transaction_stays_on_one_worker() {
    let mut coordinator = colocation_setup("app.orders", "bigint", "orders");

    // State written before distributing, and a key that is no tenant id:
    // distribute() refuses (22P02) and changes nothing.
    // Keys as distribute() (key::bigint) and the calls read them.
    const TENANT_KEYS: [(&str, i64); 4] = [(" 42", 42), ("+7", 7), ("-3", -3), ("0042\t", 42)];
    distribute_colocated_after_refusing(
        &mut coordinator,
        "app.orders",
        "bigint",
        "orders",
        &TENANT_KEYS.map(|(key, _)| key),
    );

    // The rows kept their state, each in the shard Citus routes its value
    // to: the key as a bigint, hashtextextended(name/shard, 0) for a
    // global limit; calls from every node reach them.
    let global_dkey: i64 = coordinator
        .query_one("SELECT hashtextextended('orders-global/0', 0)", &[])
        .expect("hash")
        .get(0);
    let keys: Vec<(&str, String)> = TENANT_KEYS
        .iter()
        .map(|(key, tenant)| (*key, tenant.to_string()))
        .collect();
    colocated_rows_are_found_from_every_node(
        &mut coordinator,
        "orders",
        "bigint",
        &keys,
        &global_dkey.to_string(),
    );
    // What key::bigint would take but distribute() refuses is refused by
    // the calls too (22P02), as is what is out of range or no integer.
    for key in ["x1", "4_2", "0x2A", "9223372036854775808", "", " ", "1e3"] {
        let error = coordinator
            .query_one(
                "SELECT ok FROM rate_limiter.rate_check('orders', $1)",
                &[&key],
            )
            .expect_err("not a decimal bigint");
        assert_eq!(
            error.code(),
            Some(&SqlState::INVALID_TEXT_REPRESENTATION),
            "{key:?}: {error}"
        );
    }
    colocated_tenants_on_two_workers(
        "app.orders",
        "bigint",
        &(1000..1100)
            .map(|tenant| tenant.to_string())
            .collect::<Vec<_>>(),
        "orders",
        &global_dkey.to_string(),
    );
    coordinator
        .batch_execute("DROP SCHEMA app CASCADE")
        .expect("drop the application");
    forget("orders");
}

/// As the bigint test, with an integer tenant column (issue 32): `dkey`
/// becomes an integer, the key read as a decimal integer in its range,
/// `hashtext(name/shard)` for a global limit.
#[test]
#[ignore = "needs the Citus cluster of scripts/test.sh"]
fn colocated_with_an_integer_tenant_column_a_tenant_transaction_stays_on_one_worker() {
    let mut coordinator = colocation_setup("app.orders", "integer", "iorders");
    const TENANT_KEYS: [(&str, i32); 4] = [(" 42", 42), ("+7", 7), ("-3", -3), ("0042\t", 42)];
    distribute_colocated_after_refusing(
        &mut coordinator,
        "app.orders",
        "integer",
        "iorders",
        &TENANT_KEYS.map(|(key, _)| key),
    );
    let global_dkey: i32 = coordinator
        .query_one("SELECT hashtext('iorders-global/0')", &[])
        .expect("hash")
        .get(0);
    let keys: Vec<(&str, String)> = TENANT_KEYS
        .iter()
        .map(|(key, tenant)| (*key, tenant.to_string()))
        .collect();
    colocated_rows_are_found_from_every_node(
        &mut coordinator,
        "iorders",
        "integer",
        &keys,
        &global_dkey.to_string(),
    );
    // Out of integer's range, or no integer: 22P02.
    for key in [
        "x1",
        "2147483648",
        "-2147483649",
        "9223372036854775807",
        "",
        "1e3",
    ] {
        let error = coordinator
            .query_one(
                "SELECT ok FROM rate_limiter.rate_check('iorders', $1)",
                &[&key],
            )
            .expect_err("not a decimal integer in range");
        assert_eq!(
            error.code(),
            Some(&SqlState::INVALID_TEXT_REPRESENTATION),
            "{key:?}: {error}"
        );
    }
    colocated_tenants_on_two_workers(
        "app.orders",
        "integer",
        &(1000..1100)
            .map(|tenant| tenant.to_string())
            .collect::<Vec<_>>(),
        "iorders",
        &global_dkey.to_string(),
    );
    coordinator
        .batch_execute("DROP SCHEMA app CASCADE")
        .expect("drop the application");
    forget("iorders");
}

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

/// `rate_limiter.prune(older_than)`: how many rows it deleted.
fn prune(client: &mut impl postgres::GenericClient, older_than: Option<&str>) -> i64 {
    client
        .query_one(
            "SELECT rate_limiter.prune($1::text::interval)",
            &[&older_than],
        )
        .expect("prune()")
        .get(0)
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

/// The functions `citus_manager` gets EXECUTE on in
/// [`only_a_role_that_may_credit_or_prune_may_call_their_internal_functions`]:
/// distributed ones (Citus propagates their grants), then the public ones
/// (granted on every node).
const MANAGER_INTERNAL: &str =
    "rate_limiter._rate_credit_at(text, text, text, float8, rate_limiter.config, timestamptz), \
     rate_limiter._prune_at(text, interval, timestamptz)";
const MANAGER_PUBLIC: &str =
    "rate_limiter.rate_credit(text, text, float8, rate_limiter.config), rate_limiter.prune(interval)";

#[test]
#[ignore = "needs the Citus cluster of scripts/test.sh"]
fn only_a_role_that_may_credit_or_prune_may_call_their_internal_functions() {
    make_distributed();
    forget("grants");
    let urls = urls();
    let mut coordinator = coordinator();
    define(&mut coordinator, "grants", 10.0);
    let (one, two) = keys_on_each_worker(&mut coordinator, "grants-");
    for key in [&one, &two] {
        assert!(consume(&mut coordinator, "grants", Some(key)));
    }
    // A role with EXECUTE on the internal functions only (what the README
    // once granted an application role): refused on the node holding the
    // row, inside a transaction block, and nothing credited or pruned.
    coordinator
        .batch_execute(&format!(
            "DROP ROLE IF EXISTS citus_manager; CREATE ROLE citus_manager LOGIN; \
             GRANT USAGE ON SCHEMA rate_limiter TO citus_manager; \
             GRANT EXECUTE ON FUNCTION {MANAGER_INTERNAL} TO citus_manager"
        ))
        .expect("a role");
    let mut worker = connect(&urls[1]);
    for statement in [
        "SELECT rate_limiter._rate_credit_at($1, 'grants', $1, 5, NULL, NULL)",
        "SELECT rate_limiter._prune_at($1::text, '0 seconds', NULL)",
    ] {
        let mut transaction = worker.transaction().expect("begin");
        transaction
            .batch_execute("SET LOCAL ROLE citus_manager")
            .expect("set role");
        let error = transaction
            .query(statement, &[&one])
            .expect_err("not allowed");
        assert_eq!(
            error.code(),
            Some(&SqlState::INSUFFICIENT_PRIVILEGE),
            "{statement}: {error}"
        );
        transaction.rollback().expect("rollback");
    }
    assert_eq!(stored(&mut coordinator, "grants", &one), Some(9.0));
    // With EXECUTE on rate_credit and prune too, on every node (Citus
    // does not propagate grants on functions it does not distribute), the
    // role credits and prunes rows on both workers from the coordinator.
    coordinator
        .batch_execute(&format!(
            "GRANT EXECUTE ON FUNCTION {MANAGER_PUBLIC} TO citus_manager; \
             SELECT run_command_on_workers('GRANT EXECUTE ON FUNCTION {MANAGER_PUBLIC} TO citus_manager')"
        ))
        .expect("grant the public functions");
    let mut manager = connect(&urls[0].replace("user=postgres", "user=citus_manager"));
    for key in [&one, &two] {
        let value: f64 = manager
            .query_one("SELECT rate_limiter.rate_credit('grants', $1, 1)", &[key])
            .expect("rate_credit")
            .get(0);
        assert_eq!(value.round(), 10.0, "credited on the row's worker");
    }
    assert!(
        prune(&mut manager, None) >= 2,
        "both full rows, on both workers"
    );
    assert_eq!(stored(&mut coordinator, "grants", &one), None);
    assert_eq!(stored(&mut coordinator, "grants", &two), None);
    drop(manager);
    coordinator
        .batch_execute(&format!(
            "REVOKE ALL ON FUNCTION {MANAGER_INTERNAL}, {MANAGER_PUBLIC} FROM citus_manager; \
             SELECT run_command_on_workers('REVOKE ALL ON FUNCTION {MANAGER_PUBLIC} FROM citus_manager'); \
             REVOKE ALL ON SCHEMA rate_limiter FROM citus_manager; DROP ROLE citus_manager"
        ))
        .expect("drop the role");
    forget("grants");
}

#[test]
#[ignore = "needs the Citus cluster of scripts/test.sh"]
fn status_http_headers_and_postgrest_limit_read_the_row_where_it_lives() {
    make_distributed();
    forget("status");
    let urls = urls();
    let mut coordinator = coordinator();
    coordinator
        .batch_execute(
            "SELECT rate_limiter.define('status', rate_limiter.token_bucket(10, '1000 days')); \
             SELECT rate_limiter.define('status-sharded', rate_limiter.token_bucket(80, '1000 days', shards => 8))",
        )
        .expect("define");
    let (one, two) = keys_on_each_worker(&mut coordinator, "status-");
    coordinator
        .execute(
            "SELECT * FROM rate_limiter.rate_limit('status', $1, 3)",
            &[&one],
        )
        .expect("rate_limit");
    coordinator
        .execute(
            "SELECT * FROM rate_limiter.rate_limit('status-sharded', $1)",
            &[&two],
        )
        .expect("rate_limit");
    for (node, url) in urls.iter().enumerate() {
        let mut client = connect(url);
        for (name, key, value, capacity, shards) in [
            ("status", &one, 7.0, 10.0, 1),
            ("status", &two, 10.0, 10.0, 1),
            ("status-sharded", &two, 79.0, 80.0, 8),
        ] {
            let row = client
                .query_one(
                    "SELECT round(value::numeric, 3)::float8, capacity, shards \
                     FROM rate_limiter.status($1, $2)",
                    &[&name, key],
                )
                .unwrap_or_else(|error| panic!("status({name}, {key}) on node {node}: {error}"));
            assert_eq!(
                (
                    row.get::<_, f64>(0),
                    row.get::<_, f64>(1),
                    row.get::<_, i32>(2)
                ),
                (value, capacity, shards),
                "status({name}, {key}) on node {node}"
            );
        }
        let headers: String = client
            .query_one(
                "SELECT rate_limiter.http_headers('status', $1)->>'RateLimit'",
                &[&one],
            )
            .expect("http_headers")
            .get(0);
        assert!(
            headers.starts_with("\"status\";r=7;"),
            "node {node}: {headers}"
        );
    }
    // PostgREST: a GET (read-only) reports, a POST consumes and reports.
    let mut client = connect(&urls[0]);
    for (read_only, remaining) in [(true, 7), (false, 6)] {
        let mut transaction = client
            .build_transaction()
            .read_only(read_only)
            .start()
            .expect("begin");
        transaction
            .execute("SELECT rate_limiter.postgrest_limit('status', $1)", &[&one])
            .expect("postgrest_limit");
        let headers: String = transaction
            .query_one("SELECT current_setting('response.headers')", &[])
            .expect("response.headers")
            .get(0);
        assert!(
            headers.contains(&format!("status\\\";r={remaining};t=")),
            "read only {read_only}: {headers}"
        );
        transaction.commit().expect("commit");
    }
    assert_eq!(stored(&mut coordinator, "status", &one), Some(6.0));
    // A global limit with several shards: its shards spread over both
    // workers, and status, rate_check and http_headers read every one of
    // them from any node.
    let nodes = shard_nodes(&mut coordinator, "status-sharded", 8);
    assert!(nodes.contains(&1) && nodes.contains(&2), "{nodes:?}");
    for url in &urls {
        let mut client = connect(url);
        for _ in 0..5 {
            assert!(consume(&mut client, "status-sharded", None));
        }
    }
    let values = shard_values(&mut coordinator, "status-sharded", 8);
    let used: Vec<usize> = (0..8).filter(|shard| values[*shard].is_some()).collect();
    assert!(
        used.iter().any(|shard| nodes[*shard] == 1) && used.iter().any(|shard| nodes[*shard] == 2),
        "calls consumed on both workers: {values:?} on {nodes:?}"
    );
    for (node, url) in urls.iter().enumerate() {
        let mut client = connect(url);
        let row = client
            .query_one(
                "SELECT round(value::numeric, 3)::float8, capacity, shards                  FROM rate_limiter.status('status-sharded')",
                &[],
            )
            .unwrap_or_else(|error| panic!("status on node {node}: {error}"));
        assert_eq!(
            (
                row.get::<_, f64>(0),
                row.get::<_, f64>(1),
                row.get::<_, i32>(2)
            ),
            (65.0, 80.0, 8),
            "status of the sharded global limit on node {node}"
        );
        let check = client
            .query_one(
                "SELECT ok, round(remaining::numeric, 3)::float8 FROM rate_limiter.rate_check('status-sharded')",
                &[],
            )
            .unwrap_or_else(|error| panic!("rate_check on node {node}: {error}"));
        assert!(check.get::<_, bool>(0));
        assert_eq!(
            check.get::<_, f64>(1),
            64.0,
            "rate_check's remaining: the sum over every shard, after the call"
        );
        let headers: String = client
            .query_one(
                "SELECT rate_limiter.http_headers('status-sharded')->>'RateLimit'",
                &[],
            )
            .expect("http_headers")
            .get(0);
        assert!(
            headers.starts_with("\"status-sharded\";r=65;"),
            "node {node}: {headers}"
        );
    }
    // Nothing written by them.
    assert_eq!(shard_values(&mut coordinator, "status-sharded", 8), values);
    forget("status");
}

#[test]
#[ignore = "needs the Citus cluster of scripts/test.sh"]
fn rate_credit_reaches_the_row_where_it_lives_inside_the_transaction() {
    make_distributed();
    forget("credit");
    let urls = urls();
    let (mut client, notices) = connect_with_notices(&urls[0]);
    define(&mut client, "credit", 10.0);
    let (one, two) = keys_on_each_worker(&mut client, "credit-");
    for key in [&one, &two] {
        client
            .execute(
                "SELECT * FROM rate_limiter.rate_limit('credit', $1, 5)",
                &[key],
            )
            .expect("rate_limit");
    }
    let credit = |client: &mut postgres::Transaction<'_>, key: &str, count: f64| -> f64 {
        client
            .query_one(
                "SELECT rate_limiter.rate_credit('credit', $1, $2)",
                &[&key, &count],
            )
            .expect("rate_credit")
            .get(0)
    };
    // Rolled back: nothing credited on either worker.
    let mut transaction = client.transaction().expect("begin");
    assert_eq!(credit(&mut transaction, &one, 2.0).round(), 7.0);
    assert_eq!(credit(&mut transaction, &two, 3.0).round(), 8.0);
    transaction.rollback().expect("rollback");
    assert_eq!(stored(&mut client, "credit", &one), Some(5.0));
    assert_eq!(stored(&mut client, "credit", &two), Some(5.0));
    // Committed: both, with two-phase commit.
    client
        .batch_execute("SET citus.log_remote_commands = on")
        .expect("log remote commands");
    taken(&notices);
    let mut transaction = client.transaction().expect("begin");
    credit(&mut transaction, &one, 2.0);
    credit(&mut transaction, &two, 3.0);
    transaction.commit().expect("commit");
    let log = taken(&notices);
    assert!(
        log.iter().any(|line| line.contains("PREPARE TRANSACTION")),
        "two workers commit with 2PC: {log:#?}"
    );
    assert_eq!(stored(&mut client, "credit", &one), Some(7.0));
    assert_eq!(stored(&mut client, "credit", &two), Some(8.0));
    // From worker 1: its own row (never above capacity) and worker 2's.
    let mut worker = connect(&urls[1]);
    let mut transaction = worker.transaction().expect("begin");
    assert_eq!(credit(&mut transaction, &one, 10.0).round(), 10.0);
    assert_eq!(credit(&mut transaction, &two, 1.0).round(), 9.0);
    transaction.commit().expect("commit");
    assert_eq!(stored(&mut client, "credit", &one), Some(10.0));
    assert_eq!(stored(&mut client, "credit", &two), Some(9.0));
    // An inline config travels to the node holding the row.
    let inline = "rate_limiter.token_bucket(5, '1000 days')";
    client
        .execute(
            &format!(
                "SELECT * FROM rate_limiter.rate_limit('credit-inline', $1, 2, config => {inline})"
            ),
            &[&two],
        )
        .expect("rate_limit with an inline config");
    let value: f64 = client
        .query_one(
            &format!("SELECT rate_limiter.rate_credit('credit-inline', $1, 1, {inline})"),
            &[&two],
        )
        .expect("rate_credit with an inline config")
        .get(0);
    assert_eq!(value.round(), 4.0);
    forget("credit");
}

/// Runs `statement` (with `$1` = `value`) in a transaction of its own,
/// which it must fail with `code`; rolls back.
fn fails_in_a_transaction(client: &mut Client, statement: &str, value: &str, code: SqlState) {
    let mut transaction = client.transaction().expect("begin");
    let error = transaction
        .query(statement, &[&value])
        .expect_err("an error");
    assert_eq!(error.code(), Some(&code), "{statement}: {error}");
    transaction.rollback().expect("rollback");
}

#[test]
#[ignore = "needs the Citus cluster of scripts/test.sh"]
fn the_internal_functions_fail_closed_where_they_must() {
    let calls = [
        "SELECT * FROM rate_limiter._rate_limit_at($1, 'internal', $1, 1, false, NULL, true, NULL)",
        "SELECT * FROM rate_limiter._rate_state_at($1, 'internal', $1, 1::int2)",
        "SELECT rate_limiter._rate_credit_at($1, 'internal', $1, 1, NULL, NULL)",
        "SELECT * FROM rate_limiter._rate_limit_all_at($1, ARRAY[('internal', $1, 1, NULL)]::rate_limiter.request[], false, NULL)",
        "SELECT rate_limiter._prune_at($1::text, NULL, NULL)",
    ];
    let code = |client: &mut Client, statement: &str, dkey: &str| {
        client
            .query(statement, &[&dkey])
            .err()
            .and_then(|error| error.code().cloned())
    };
    // Not distributed: 55000 (and nothing to do).
    make_local();
    let mut coordinator = coordinator();
    define(&mut coordinator, "internal", 10.0);
    for statement in calls {
        assert_eq!(
            code(&mut coordinator, statement, "k"),
            Some(SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE),
            "{statement}"
        );
    }
    make_distributed();
    let urls = urls();
    let (one, _) = keys_on_each_worker(&mut coordinator, "internal-");
    let mut worker = connect(&urls[1]);
    // On the node holding the row, outside a transaction block: the
    // writing ones refuse (they would commit on their own).
    for statement in [calls[0], calls[2], calls[3], calls[4]] {
        assert_eq!(
            code(&mut worker, statement, &one),
            Some(SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE),
            "{statement}"
        );
    }
    // The bound on the work of one call holds for a direct call too: more
    // requests than rate_limiter.max_requests (1,000) is 54000.
    fails_in_a_transaction(
        &mut worker,
        "SELECT * FROM rate_limiter._rate_limit_all_at($1, ARRAY(\
             SELECT ('internal', $1, 1, NULL)::rate_limiter.request FROM generate_series(1, 1001)), false, NULL)",
        &one,
        SqlState::PROGRAM_LIMIT_EXCEEDED,
    );
    // A dkey that is not (name, key)'s (the first request's): 22023.
    for statement in [
        "SELECT * FROM rate_limiter._rate_limit_at($1, 'internal', 'another key', 1, false, NULL, true, NULL)",
        "SELECT * FROM rate_limiter._rate_limit_all_at($1, ARRAY[('internal', 'another key', 1, NULL)]::rate_limiter.request[], false, NULL)",
    ] {
        fails_in_a_transaction(&mut worker, statement, &one, SqlState::INVALID_PARAMETER_VALUE);
    }
    // A call Citus does not delegate (a generic plan) runs where it is
    // made: on worker 2, for a row on worker 1, 55000 and nothing written.
    let mut other = connect(&urls[2]);
    other
        .batch_execute("SET plan_cache_mode = force_generic_plan")
        .expect("generic plans");
    for statement in calls {
        fails_in_a_transaction(
            &mut other,
            statement,
            &one,
            SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE,
        );
    }
    assert_eq!(stored(&mut coordinator, "internal", &one), None);
    // Told that the call is its caller's transaction's only work
    // (`own_transaction`), `_rate_limit_at` commits as a statement of its
    // own on the node holding the row.
    worker
        .query(
            "SELECT * FROM rate_limiter._rate_limit_at($1, 'internal', $1, 1, false, NULL, true, NULL, true)",
            &[&one],
        )
        .expect("a call of its own");
    assert_eq!(stored(&mut coordinator, "internal", &one), Some(9.0));
    forget("internal");
}

/// Every form in which Citus would delegate a call of each internal
/// function with a NULL distribution argument (after the planner folded
/// it: a NULL literal, a parameter bound to NULL, an expression that
/// folds to NULL, a subquery the planner pulls up).
fn null_distribution_arguments() -> Vec<(String, Vec<Option<String>>)> {
    let calls = [
        "rate_limiter._rate_limit_at({dkey}, 'internal', 'k', 1, false, NULL, true, NULL)",
        "rate_limiter._rate_state_at({dkey}, 'internal', 'k', 1::int2)",
        "rate_limiter._rate_credit_at({dkey}, 'internal', 'k', 1, NULL, NULL)",
        "rate_limiter._rate_limit_all_at({dkey}, ARRAY[('internal', 'k', 1, NULL)]::rate_limiter.request[], false, NULL)",
        "rate_limiter._prune_at({dkey}, NULL, NULL)",
    ];
    let mut statements = Vec::new();
    for call in calls {
        for (dkey, parameters) in [
            ("NULL::text", vec![]),
            ("$1::text", vec![None]),
            ("nullif('a'::text, 'a')", vec![]),
        ] {
            let call = call.replace("{dkey}", dkey);
            statements.push((format!("SELECT * FROM {call}"), parameters.clone()));
            statements.push((format!("SELECT {call}"), parameters.clone()));
            statements.push((
                format!("SELECT * FROM (SELECT * FROM {call}) AS pulled_up"),
                parameters,
            ));
        }
    }
    statements
}

#[test]
#[ignore = "needs the Citus cluster of scripts/test.sh"]
fn a_null_distribution_argument_never_reaches_citus() {
    make_distributed();
    let urls = urls();
    // Citus 13.2.2 and 14.0.1 hash the distribution argument of a call
    // they delegate without checking for NULL: a server crash (signal 11).
    // Every such call is 22004 at planning, on the coordinator and on a
    // worker, in a transaction block and outside one, and the server
    // lives on.
    for url in [&urls[0], &urls[1]] {
        let mut client = connect(url);
        for (statement, parameters) in null_distribution_arguments() {
            let parameters: Vec<&(dyn postgres::types::ToSql + Sync)> = parameters
                .iter()
                .map(|value| value as &(dyn postgres::types::ToSql + Sync))
                .collect();
            for in_block in [false, true] {
                let error = if in_block {
                    let mut transaction = client.transaction().expect("begin");
                    let error = transaction
                        .query(statement.as_str(), &parameters)
                        .expect_err("a NULL dkey");
                    transaction.rollback().expect("rollback");
                    error
                } else {
                    client
                        .query(statement.as_str(), &parameters)
                        .expect_err("a NULL dkey")
                };
                assert_eq!(
                    error.code(),
                    Some(&SqlState::NULL_VALUE_NOT_ALLOWED),
                    "{url}: {statement}: {error}"
                );
            }
        }
        assert_eq!(
            client
                .query_one("SELECT 1", &[])
                .expect("the server lives on")
                .get::<_, i32>(0),
            1
        );
    }
    // A call with a NULL dkey that Citus does not delegate (not the only
    // call of its statement) still answers its own error.
    let mut coordinator = coordinator();
    let error = coordinator
        .query(
            "SELECT * FROM rate_limiter._rate_state_at(NULL::text, 'internal', 'k', 1::int2), generate_series(1, 1)",
            &[],
        )
        .expect_err("a NULL dkey");
    assert_eq!(
        error.code(),
        Some(&SqlState::INVALID_PARAMETER_VALUE),
        "{error}"
    );
}

/// `rate_limit_all(name, [(key, count), ...])` through `client`: each
/// row's `ok`, in request order.
fn consume_all(
    client: &mut impl postgres::GenericClient,
    name: &str,
    requests: &[(&str, f64)],
) -> Result<Vec<bool>, postgres::Error> {
    let keys: Vec<&str> = requests.iter().map(|(key, _)| *key).collect();
    let counts: Vec<f64> = requests.iter().map(|(_, count)| *count).collect();
    let rows = client.query(
        "SELECT ok FROM rate_limiter.rate_limit_all(ARRAY(\
             SELECT ($1::text, key, count, NULL)::rate_limiter.request \
             FROM unnest($2::text[], $3::float8[]) WITH ORDINALITY AS r(key, count, position) \
             ORDER BY position))",
        &[&name, &keys, &counts],
    )?;
    Ok(rows.iter().map(|row| row.get(0)).collect())
}

#[test]
#[ignore = "needs the Citus cluster of scripts/test.sh"]
fn rate_limit_all_is_all_or_nothing_across_workers() {
    make_distributed();
    forget("every");
    let urls = urls();
    let mut coordinator = coordinator();
    define(&mut coordinator, "every", 10.0);
    let (one, two) = keys_on_each_worker(&mut coordinator, "every-");
    // The stored values of one and two, and what they should be.
    let both = |coordinator: &mut Client| {
        (
            stored(coordinator, "every", &one),
            stored(coordinator, "every", &two),
        )
    };
    let (mut on_one, mut on_two) = (10.0, 10.0);
    // Statistics: every node's counters of the limit zeroed once, here.
    for url in &urls {
        connect(url)
            .execute("SELECT rate_limiter.stats_reset('every')", &[])
            .expect("stats_reset");
    }
    for (node, url) in NODES.iter().zip(&urls) {
        let (mut client, notices) = connect_with_notices(url);
        client
            .batch_execute("SET citus.log_remote_commands = on")
            .expect("log remote commands");
        // Admitted: both consumed, the limit named twice charged twice,
        // and a commit over both workers is two-phase.
        taken(&notices);
        let answers = consume_all(
            &mut client,
            "every",
            &[(&two, 1.0), (&one, 2.0), (&two, 1.0)],
        )
        .expect("rate_limit_all");
        assert_eq!(answers, [true, true, true], "{node}");
        let log = taken(&notices);
        if *node == "coordinator" {
            assert_eq!(
                log.iter()
                    .filter(|line| line.contains("PREPARE TRANSACTION"))
                    .count(),
                2,
                "both workers prepared: {log:#?}"
            );
        } else {
            assert!(
                log.iter().any(|line| line.contains("PREPARE TRANSACTION")),
                "a local write and a remote one commit with 2PC ({node}): {log:#?}"
            );
        }
        (on_one, on_two) = (on_one - 2.0, on_two - 2.0);
        assert_eq!(
            both(&mut coordinator),
            (Some(on_one), Some(on_two)),
            "{node}"
        );
        // Refused on worker 2 (9 > 8 tokens), in either order: nothing consumed on
        // either worker; each row is its own request's answer.
        for requests in [[(&one, 1.0), (&two, 9.0)], [(&two, 9.0), (&one, 1.0)]] {
            let requests: Vec<(&str, f64)> = requests
                .iter()
                .map(|(key, count)| (key.as_str(), *count))
                .collect();
            let answers = consume_all(&mut client, "every", &requests).expect("rate_limit_all");
            let expected: Vec<bool> = requests.iter().map(|(_, count)| *count == 1.0).collect();
            assert_eq!(answers, expected, "{node}");
            assert_eq!(
                both(&mut coordinator),
                (Some(on_one), Some(on_two)),
                "{node}"
            );
        }
        // A refusal raised (throws => true): nothing consumed either.
        let error = client
            .query(
                "SELECT * FROM rate_limiter.rate_limit_all(ARRAY[('every', $1, 1, NULL), ('every', $2, 9, NULL)]::rate_limiter.request[], throws => true)",
                &[&one, &two],
            )
            .expect_err("throws");
        assert!(error.as_db_error().is_some(), "{error}");
        assert_eq!(
            both(&mut coordinator),
            (Some(on_one), Some(on_two)),
            "{node}"
        );
        // Admitted, then rolled back: nothing consumed; to a savepoint:
        // only what came before it stays.
        let mut transaction = client.transaction().expect("begin");
        let answers = consume_all(&mut transaction, "every", &[(&one, 1.0), (&two, 1.0)])
            .expect("rate_limit_all");
        assert_eq!(answers, [true, true]);
        transaction.rollback().expect("rollback");
        let mut transaction = client.transaction().expect("begin");
        consume_all(&mut transaction, "every", &[(&one, 1.0)]).expect("rate_limit_all");
        let mut savepoint = transaction.savepoint("s").expect("savepoint");
        consume_all(&mut savepoint, "every", &[(&one, 1.0), (&two, 1.0)]).expect("rate_limit_all");
        savepoint.rollback().expect("rollback to savepoint");
        // A refusal inside the transaction leaves it usable.
        let answers = consume_all(&mut transaction, "every", &[(&two, 1.0), (&one, 9.0)])
            .expect("rate_limit_all");
        assert_eq!(answers, [true, false]);
        transaction.commit().expect("commit");
        on_one -= 1.0;
        assert_eq!(
            both(&mut coordinator),
            (Some(on_one), Some(on_two)),
            "{node}"
        );
    }
    // Each request's decision is counted once, on the node called, not
    // again on the node that decided it; in a call refused as a whole only
    // the refused request counts (SPEC §11): 3 + 1 + 1 + 1 + 2 + 1 + 2 + 1
    // = 12 per node, 36 summed over every node.
    let calls: Vec<i64> = urls
        .iter()
        .map(|url| {
            connect(url)
                .query_opt(
                    "SELECT calls FROM rate_limiter.stats WHERE name = 'every'",
                    &[],
                )
                .expect("stats")
                .map_or(0, |row| row.get(0))
        })
        .collect();
    assert_eq!(calls, [12, 12, 12], "counted once each, on the node called");
    forget("every");
}

#[test]
#[ignore = "needs the Citus cluster of scripts/test.sh"]
fn rate_limit_all_across_workers_with_a_shadow_member() {
    make_distributed();
    forget("mixed");
    let urls = urls();
    let mut coordinator = coordinator();
    define(&mut coordinator, "mixed", 10.0);
    coordinator
        .execute(
            "SELECT rate_limiter.define('mixed-shadow', rate_limiter.token_bucket(1, '1000 days'), enforce => false)",
            &[],
        )
        .expect("define a limit in shadow mode");
    let (one, two) = keys_on_each_worker(&mut coordinator, "mixed-");
    // The shadow limit's only token taken (its row on worker 2), then the
    // counters of both limits zeroed on every node.
    assert!(consume(&mut coordinator, "mixed-shadow", Some(&two)));
    for url in &urls {
        connect(url)
            .batch_execute(
                "SELECT rate_limiter.stats_reset('mixed'); SELECT rate_limiter.stats_reset('mixed-shadow')",
            )
            .expect("stats_reset");
    }
    let mut on_one = 10.0;
    for (node, url) in NODES.iter().zip(&urls) {
        let mut client = connect(url);
        // The shadow limit refuses its request (no token left on worker
        // 2), which answers as admitted and does not fail the call: the
        // enforcing request is consumed on worker 1.
        let rows = client
            .query(
                "SELECT name, ok, retry_after IS NULL FROM rate_limiter.rate_limit_all(ARRAY[
                     ('mixed', $1, 1, NULL), ('mixed-shadow', $2, 1, NULL)]::rate_limiter.request[])",
                &[&one, &two],
            )
            .expect("rate_limit_all");
        let answers: Vec<(String, bool, bool)> = rows
            .iter()
            .map(|row| (row.get(0), row.get(1), row.get(2)))
            .collect();
        assert_eq!(
            answers,
            [
                ("mixed".to_string(), true, true),
                ("mixed-shadow".to_string(), true, true)
            ],
            "{node}"
        );
        on_one -= 1.0;
        assert_eq!(
            stored(&mut coordinator, "mixed", &one),
            Some(on_one),
            "{node}"
        );
        assert_eq!(
            stored(&mut coordinator, "mixed-shadow", &two),
            Some(0.0),
            "the shadow refusal consumed nothing ({node})"
        );
    }
    // Counted once each, on the node called: the enforcing request as
    // admitted, the shadow one as shadow_refused.
    for (node, url) in NODES.iter().zip(&urls) {
        let rows = connect(url)
            .query(
                "SELECT name, calls, admitted, shadow_refused FROM rate_limiter.stats
                 WHERE name IN ('mixed', 'mixed-shadow') ORDER BY name",
                &[],
            )
            .expect("stats");
        let counts: Vec<(String, i64, i64, i64)> = rows
            .iter()
            .map(|row| (row.get(0), row.get(1), row.get(2), row.get(3)))
            .collect();
        assert_eq!(
            counts,
            [
                ("mixed".to_string(), 1, 1, 0),
                ("mixed-shadow".to_string(), 1, 0, 1)
            ],
            "{node}"
        );
    }
    forget("mixed");
}

#[test]
#[ignore = "needs the Citus cluster of scripts/test.sh"]
fn rate_limit_all_across_workers_never_deadlocks_and_admits_exactly_the_capacity() {
    make_distributed();
    forget("cross");
    let urls = urls();
    let mut coordinator = coordinator();
    define(&mut coordinator, "cross", 60.0);
    let (one, two) = keys_on_each_worker(&mut coordinator, "cross-");
    // Four connections on three nodes, each asking for both keys, half of
    // them in the opposite order: 60 calls can be admitted, each takes a
    // token from both rows, all or nothing.
    let threads: Vec<_> = (0..4)
        .map(|thread| {
            let url = urls[thread % 3].clone();
            let (one, two) = (one.clone(), two.clone());
            std::thread::spawn(move || {
                let mut client = connect(&url);
                client
                    .batch_execute("SET lock_timeout = '20s'")
                    .expect("lock_timeout");
                let mut admitted = 0;
                for _ in 0..25 {
                    let requests = if thread % 2 == 0 {
                        [(one.as_str(), 1.0), (two.as_str(), 1.0)]
                    } else {
                        [(two.as_str(), 1.0), (one.as_str(), 1.0)]
                    };
                    let mut transaction = client.transaction().expect("begin");
                    let answers = consume_all(&mut transaction, "cross", &requests)
                        .unwrap_or_else(|error| panic!("rate_limit_all ({url}): {error:?}"));
                    transaction.commit().expect("commit");
                    assert_eq!(answers[0], answers[1], "one answer for both");
                    if answers[0] {
                        admitted += 1;
                    }
                }
                admitted
            })
        })
        .collect();
    let admitted: i32 = threads
        .into_iter()
        .map(|thread| thread.join().expect("a client thread"))
        .sum();
    assert_eq!(admitted, 60, "exactly the capacity, in 100 calls");
    assert_eq!(stored(&mut coordinator, "cross", &one), Some(0.0));
    assert_eq!(stored(&mut coordinator, "cross", &two), Some(0.0));
    forget("cross");
}

#[test]
#[ignore = "needs the Citus cluster of scripts/test.sh"]
fn rate_wait_consumes_where_the_row_lives_and_times_out_without_consuming() {
    make_distributed();
    forget("wait");
    let mut coordinator = coordinator();
    define(&mut coordinator, "wait", 10.0);
    let (one, two) = keys_on_each_worker(&mut coordinator, "wait-");
    for (node, url) in NODES.iter().zip(urls()) {
        let mut client = connect(&url);
        for key in [&one, &two] {
            let before = stored(&mut coordinator, "wait", key).unwrap_or(10.0);
            let ok: bool = client
                .query_one(
                    "SELECT ok FROM rate_limiter.rate_wait('wait', $1, 2)",
                    &[key],
                )
                .expect("rate_wait")
                .get(0);
            assert!(ok, "{node}");
            assert_eq!(
                stored(&mut coordinator, "wait", key),
                Some(before - 2.0),
                "{node}"
            );
            // More than the limit holds: refused at once, nothing consumed.
            let ok: bool = client
                .query_one(
                    "SELECT ok FROM rate_limiter.rate_wait('wait', $1, 9, timeout => '0 seconds')",
                    &[key],
                )
                .expect("rate_wait")
                .get(0);
            assert!(!ok, "{node}");
            assert_eq!(
                stored(&mut coordinator, "wait", key),
                Some(before - 2.0),
                "{node}"
            );
        }
    }
    forget("wait");
}

#[test]
#[ignore = "needs the Citus cluster of scripts/test.sh"]
fn a_delegated_call_uses_the_calling_nodes_now_override() {
    make_distributed();
    forget("clock");
    let urls = urls();
    let mut coordinator = coordinator();
    coordinator
        .batch_execute(
            "SELECT rate_limiter.define('clock', rate_limiter.token_bucket(10, '1 hour'))",
        )
        .expect("define");
    let (one, two) = keys_on_each_worker(&mut coordinator, "clock-");
    let stored_ts = |client: &mut Client, key: &str| -> String {
        client
            .query_one(
                "SELECT to_char(ts AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS') FROM rate_limiter.rate_limits \
                 WHERE dkey = $1 AND name = 'clock' AND key = $1",
                &[&key],
            )
            .expect("the stored ts")
            .get(0)
    };
    // The coordinator's override decides the calls it delegates to either
    // worker: consume, check, rate_limit_all and rate_credit.
    coordinator
        .batch_execute("SET rate_limiter.now_override = '2030-01-01 00:00:00+00'")
        .expect("set the clock");
    for key in [&one, &two] {
        assert!(coordinator
            .query_one(
                "SELECT ok FROM rate_limiter.rate_limit('clock', $1, 10)",
                &[key]
            )
            .expect("rate_limit")
            .get::<_, bool>(0));
        assert_eq!(stored_ts(&mut coordinator, key), "2030-01-01 00:00:00");
    }
    coordinator
        .batch_execute("SET rate_limiter.now_override = '2030-01-01 00:06:00+00'")
        .expect("six minutes later: one token");
    let checked: f64 = coordinator
        .query_one(
            "SELECT remaining FROM rate_limiter.rate_check('clock', $1, 0)",
            &[&two],
        )
        .expect("rate_check")
        .get(0);
    assert!((checked - 1.0).abs() < 1e-9, "{checked}");
    let answers = consume_all(&mut coordinator, "clock", &[(&one, 1.0), (&two, 1.0)])
        .expect("rate_limit_all");
    assert_eq!(answers, [true, true]);
    assert_eq!(stored_ts(&mut coordinator, &two), "2030-01-01 00:06:00");
    let retry: String = coordinator
        .query_one(
            "SELECT retry_after::text FROM rate_limiter.rate_limit('clock', $1)",
            &[&two],
        )
        .expect("rate_limit")
        .get(0);
    assert_eq!(retry, "00:06:00", "the next token in exactly 6 minutes");
    coordinator
        .batch_execute("SET rate_limiter.now_override = '2030-01-01 00:12:00+00'")
        .expect("later");
    let value: f64 = coordinator
        .query_one("SELECT rate_limiter.rate_credit('clock', $1, 2)", &[&two])
        .expect("rate_credit")
        .get(0);
    assert!(
        (value - 3.0).abs() < 1e-9,
        "1 refilled + 2 credited: {value}"
    );
    assert_eq!(stored_ts(&mut coordinator, &two), "2030-01-01 00:12:00");
    // Only a superuser may send a clock: a role that may call the
    // internal function but is no superuser gets 42501.
    coordinator
        .batch_execute(
            "DROP ROLE IF EXISTS clock_caller; CREATE ROLE clock_caller; \
             GRANT USAGE ON SCHEMA rate_limiter TO clock_caller; \
             GRANT EXECUTE ON FUNCTION rate_limiter._rate_limit_at(text, text, text, float8, boolean, rate_limiter.config, boolean, timestamptz, boolean) TO clock_caller",
        )
        .expect("a role");
    let mut worker = connect(&urls[2]);
    let mut transaction = worker.transaction().expect("begin");
    transaction
        .batch_execute("SET LOCAL ROLE clock_caller")
        .expect("set role");
    let error = transaction
        .query(
            "SELECT * FROM rate_limiter._rate_limit_at($1, 'clock', $1, 1, false, NULL, true, '2031-01-01')",
            &[&two],
        )
        .expect_err("not a superuser");
    assert_eq!(
        error.code(),
        Some(&SqlState::INSUFFICIENT_PRIVILEGE),
        "{error}"
    );
    transaction.rollback().expect("rollback");
    assert_eq!(stored_ts(&mut coordinator, &two), "2030-01-01 00:12:00");
    coordinator
        .batch_execute(
            "REVOKE ALL ON FUNCTION rate_limiter._rate_limit_at(text, text, text, float8, boolean, rate_limiter.config, boolean, timestamptz, boolean) FROM clock_caller; \
             REVOKE ALL ON SCHEMA rate_limiter FROM clock_caller; DROP ROLE clock_caller",
        )
        .expect("drop the role");
    forget("clock");
}

#[test]
#[ignore = "needs the Citus cluster of scripts/test.sh"]
fn a_global_limit_with_one_shard_per_worker_refuses_without_retry_after_what_only_both_could_serve()
{
    make_distributed();
    forget("halves");
    let urls = urls();
    let mut coordinator = coordinator();
    let name = (0..100)
        .map(|n| format!("halves-{n}"))
        .find(|name| {
            let mut nodes = shard_nodes(&mut coordinator, name, 2);
            nodes.sort();
            nodes == [1, 2]
        })
        .expect("a name with one shard on each worker");
    coordinator
        .execute(
            "SELECT rate_limiter.define($1, rate_limiter.token_bucket(10, '1000 days', shards => 2))",
            &[&name],
        )
        .expect("define");
    for url in &urls {
        let mut client = connect(url);
        // 7 tokens: more than one shard holds (5), less than both (10).
        // On one server the two shards serve it together; on a cluster a
        // call never takes two shards on two nodes, so it is refused, and
        // no retry_after can say when it would be admitted.
        let row = client
            .query_one(
                "SELECT ok, retry_after::text FROM rate_limiter.rate_limit($1, count => 7)",
                &[&name],
            )
            .expect("rate_limit");
        assert!(!row.get::<_, bool>(0), "{url}");
        assert_eq!(row.get::<_, Option<String>>(1), None, "{url}");
        // What one shard can serve is admitted, by rate_wait too.
        let ok: bool = client
            .query_one(
                "SELECT ok FROM rate_limiter.rate_wait($1, count => 1, timeout => '0 seconds')",
                &[&name],
            )
            .expect("rate_wait")
            .get(0);
        assert!(ok, "{url}");
    }
    // Each worker's call took a token from its own shard, the
    // coordinator's from either: 4 and 3 tokens left.
    let values = shard_values(&mut coordinator, &name, 2);
    let mut sorted: Vec<f64> = values.iter().map(|value| value.expect("a row")).collect();
    sorted.sort_by(f64::total_cmp);
    assert_eq!(sorted, [3.0, 4.0], "{values:?}");
    // 5 tokens: no shard holds them now, so rate_wait times out at once
    // and consumes nothing.
    let ok: bool = coordinator
        .query_one(
            "SELECT ok FROM rate_limiter.rate_wait($1, count => 5, timeout => '0 seconds')",
            &[&name],
        )
        .expect("rate_wait")
        .get(0);
    assert!(!ok);
    assert_eq!(shard_values(&mut coordinator, &name, 2), values);
    forget("halves");
}

#[test]
#[ignore = "needs the Citus cluster of scripts/test.sh"]
fn colocated_with_a_uuid_tenant_column_a_tenant_transaction_stays_on_one_worker() {
    let mut coordinator = colocation_setup("app.accounts", "uuid", "accounts");
    // A distribution column of another type (smallint here): 0A000.
    coordinator
        .batch_execute(
            "CREATE TABLE app.other (tenant_id smallint NOT NULL); \
             SELECT create_distributed_table('app.other', 'tenant_id')",
        )
        .expect("a table distributed by a smallint");
    let error = coordinator
        .batch_execute("SELECT rate_limiter.distribute(colocate_with => 'app.other')")
        .expect_err("a smallint column");
    assert_eq!(
        error.code(),
        Some(&SqlState::FEATURE_NOT_SUPPORTED),
        "{error}"
    );
    assert_eq!(distribution(&mut coordinator), None, "still local");
    // One tenant written three ways (uuid_in takes them all), before
    // distributing; and a key that is no uuid: distribute() refuses
    // (22P02) and changes nothing.
    const TENANT: &str = "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11";
    const KEYS: [&str; 3] = [
        "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
        "{A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11}",
        "a0eebc999c0b4ef8bb6d6bb9bd380a11",
    ];
    distribute_colocated_after_refusing(
        &mut coordinator,
        "app.accounts",
        "uuid",
        "accounts",
        &KEYS,
    );
    // The rows kept their state, where Citus routes their value: the key
    // as a uuid, md5(name/shard)::uuid for a global limit; calls from
    // every node reach them.
    let global_dkey: String = coordinator
        .query_one("SELECT md5('accounts-global/0')::uuid::text", &[])
        .expect("md5")
        .get(0);
    let keys: Vec<(&str, String)> = KEYS.iter().map(|key| (*key, TENANT.to_string())).collect();
    colocated_rows_are_found_from_every_node(
        &mut coordinator,
        "accounts",
        "uuid",
        &keys,
        &global_dkey,
    );
    // A key that is no uuid is 22P02 (white space, a misplaced hyphen, one
    // brace), as PostgreSQL's uuid_in refuses it.
    for key in [
        "x1",
        " a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
        "a0eebc9-99c0b-4ef8-bb6d-6bb9bd380a11",
        "{a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
        "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11-",
    ] {
        let error = coordinator
            .query_one(
                "SELECT ok FROM rate_limiter.rate_check('accounts', $1)",
                &[&key],
            )
            .expect_err("not a uuid");
        assert_eq!(
            error.code(),
            Some(&SqlState::INVALID_TEXT_REPRESENTATION),
            "{key:?}: {error}"
        );
        let refused = coordinator
            .query_one("SELECT $1::text::uuid", &[&key])
            .expect_err("uuid_in refuses it");
        assert_eq!(refused.code(), Some(&SqlState::INVALID_TEXT_REPRESENTATION));
    }
    colocated_tenants_on_two_workers(
        "app.accounts",
        "uuid",
        &(0..100)
            .map(|n| format!("00000000-0000-0000-0000-{n:012}"))
            .collect::<Vec<_>>(),
        "accounts",
        &global_dkey,
    );
    coordinator
        .batch_execute("DROP SCHEMA app CASCADE")
        .expect("drop the application");
    forget("accounts");
}

#[test]
#[ignore = "needs the Citus cluster of scripts/test.sh"]
fn a_refused_rate_limit_all_leaves_a_transaction_that_still_commits_with_two_phase_commit() {
    make_distributed();
    forget("after");
    let urls = urls();
    let mut coordinator = coordinator();
    define(&mut coordinator, "after", 10.0);
    let (one, two) = keys_on_each_worker(&mut coordinator, "after-");
    // On worker 1: a direct write of its own row; then a rate_limit_all
    // that writes on both workers inside its subtransaction (telling Citus
    // about the direct write there) and is refused on worker 2, so the
    // subtransaction rolls back; then a call for worker 2's row. The
    // commit must still be two-phase: Citus is told again.
    let (mut worker, notices) = connect_with_notices(&urls[1]);
    worker
        .batch_execute("SET citus.log_remote_commands = on")
        .expect("log remote commands");
    // Worker 2's row down to 5 tokens, so that 6 are refused there.
    coordinator
        .execute(
            "SELECT * FROM rate_limiter.rate_limit('after', $1, 5)",
            &[&two],
        )
        .expect("worker 2's row down to 5");
    taken(&notices);
    let mut transaction = worker.transaction().expect("begin");
    assert!(consume(&mut transaction, "after", Some(&one)));
    let answers = consume_all(&mut transaction, "after", &[(&one, 1.0), (&two, 6.0)])
        .expect("rate_limit_all");
    assert_eq!(answers, [true, false], "refused on worker 2");
    assert!(consume(&mut transaction, "after", Some(&two)));
    transaction.commit().expect("commit");
    let log = taken(&notices);
    assert!(
        log.iter().any(|line| line.contains("PREPARE TRANSACTION")),
        "a direct write and a remote one still commit with 2PC: {log:#?}"
    );
    // The marker statement ran inside the rolled-back subtransaction and
    // again after it: the limiter does not rely on Citus remembering a
    // rolled-back local execution (Citus 13.2.2 and 14.0.1 do).
    assert_eq!(
        log.iter()
            .filter(|line| line
                .contains("executing the command locally: DELETE FROM rate_limiter.rate_limits_"))
            .count(),
        2,
        "{log:#?}"
    );
    assert_eq!(stored(&mut coordinator, "after", &one), Some(9.0));
    assert_eq!(stored(&mut coordinator, "after", &two), Some(4.0));
    forget("after");
}

/// What one statement of a [`pipeline`] answered.
#[derive(Debug, PartialEq)]
enum Answer {
    /// The first column of each row, as text.
    Rows(Vec<String>),
    /// The SQLSTATE of its error.
    Error(String),
    /// Not run: an earlier statement of the pipeline failed.
    Skipped,
}

/// Sends `statements` to the node of `url` as one pipeline of the extended
/// protocol: Parse, Bind, Execute for each, then a single Sync, as libpq's
/// pipeline mode and the batches of several drivers do. Outside a
/// transaction block PostgreSQL runs them in one implicit transaction,
/// unless a statement must commit at once (as `VACUUM` must). `first` runs
/// before, on the same connection, as a pipeline of its own.
fn pipeline(url: &str, first: &str, statements: &[&str]) -> Vec<Answer> {
    use bytes::BytesMut;
    use postgres_protocol::message::{backend::Message, frontend};
    use std::io::{Read, Write};

    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port_of(url) as u16))
        .unwrap_or_else(|error| panic!("connect to {url}: {error}"));
    let mut out = BytesMut::new();
    frontend::startup_message([("user", "postgres"), ("database", "postgres")], &mut out)
        .expect("startup message");
    stream.write_all(&out).expect("send the startup message");
    let mut input = BytesMut::new();
    let mut next = |stream: &mut std::net::TcpStream| loop {
        if let Some(message) = Message::parse(&mut input).expect("a protocol message") {
            return message;
        }
        let mut chunk = [0u8; 8192];
        let read = stream.read(&mut chunk).expect("read from the server");
        assert!(read > 0, "the server closed the connection");
        input.extend_from_slice(&chunk[..read]);
    };
    loop {
        match next(&mut stream) {
            Message::ReadyForQuery(_) => break,
            Message::ErrorResponse(_) => panic!("{url} refused the connection"),
            _ => {}
        }
    }
    let mut answers = Vec::new();
    for statements in [&[first][..], statements] {
        answers = run_pipeline(&mut stream, statements, &mut next);
    }
    let mut out = BytesMut::new();
    frontend::terminate(&mut out);
    let _ = stream.write_all(&out);
    answers
}

/// Sends `statements` as one pipeline on `stream`, `next` reading the
/// server's messages: what each statement answered.
fn run_pipeline(
    stream: &mut std::net::TcpStream,
    statements: &[&str],
    next: &mut impl FnMut(&mut std::net::TcpStream) -> postgres_protocol::message::backend::Message,
) -> Vec<Answer> {
    use bytes::BytesMut;
    use fallible_iterator::FallibleIterator;
    use postgres_protocol::message::{backend::Message, frontend};
    use std::io::Write;

    let mut out = BytesMut::new();
    for statement in statements {
        frontend::parse("", statement, [], &mut out).expect("Parse");
        frontend::bind(
            "",
            "",
            [],
            std::iter::empty::<i32>(),
            |_, _| Ok(postgres_protocol::IsNull::No),
            [],
            &mut out,
        )
        .map_err(|_| "Bind")
        .expect("Bind");
        frontend::execute("", 0, &mut out).expect("Execute");
    }
    frontend::sync(&mut out);
    stream.write_all(&out).expect("send the pipeline");
    let mut answers = Vec::new();
    let mut rows = Vec::new();
    loop {
        match next(stream) {
            Message::DataRow(row) => {
                // The first column; NULL as an empty string.
                let first = row.ranges().next().expect("a column").flatten();
                rows.push(
                    first
                        .map(|range| String::from_utf8_lossy(&row.buffer()[range]).into_owned())
                        .unwrap_or_default(),
                );
            }
            Message::CommandComplete(_) => answers.push(Answer::Rows(std::mem::take(&mut rows))),
            Message::ErrorResponse(error) => {
                let code = error
                    .fields()
                    .find(|field| Ok(field.type_() == b'C'))
                    .expect("error fields")
                    .map(|field| String::from_utf8_lossy(field.value_bytes()).into_owned());
                answers.push(Answer::Error(code.unwrap_or_default()));
            }
            Message::ReadyForQuery(_) => break,
            _ => {}
        }
    }
    while answers.len() < statements.len() {
        answers.push(Answer::Skipped);
    }
    answers
}

/// The statements of `log` (Citus's `citus.log_remote_commands`) that open
/// or end a transaction block on another node.
fn transaction_blocks(log: &[String]) -> Vec<&String> {
    log.iter()
        .filter(|line| line.contains("issuing BEGIN") || line.contains("issuing COMMIT"))
        .collect()
}

#[test]
#[ignore = "needs the Citus cluster of scripts/test.sh"]
fn a_call_that_is_its_transactions_only_work_reaches_the_row_in_one_round_trip() {
    make_distributed();
    forget("alone");
    let mut coordinator = coordinator();
    define(&mut coordinator, "alone", 100.0);
    let (one, two) = keys_on_each_worker(&mut coordinator, "alone-");
    let urls = urls();
    let statements = [
        "SELECT * FROM rate_limiter.rate_limit($1, $2)",
        "SELECT ok, remaining FROM rate_limiter.rate_limit($1, $2)",
        "SELECT rate_limiter.rate_limit($1, $2)",
        "SELECT * FROM rate_limiter.rate_check($1, $2)",
    ];
    // From the coordinator for rows on both workers, and from worker 2
    // for a row on worker 1.
    for (url, key) in [(&urls[0], &one), (&urls[0], &two), (&urls[2], &one)] {
        let (mut client, notices) = connect_with_notices(url);
        client
            .batch_execute("SET citus.log_remote_commands = on")
            .expect("log remote commands");
        // The session's first call reads the definition: not asserted on.
        assert!(consume(&mut client, "alone", Some(key)));
        for statement in statements {
            taken(&notices);
            client
                .query(statement, &[&"alone", key])
                .unwrap_or_else(|error| panic!("{statement}: {error}"));
            let log = taken(&notices);
            assert!(
                log.iter().any(|line| line.contains("_rate_limit_at(")),
                "the call went to the row's worker ({url}, {statement}): {log:#?}"
            );
            assert_eq!(
                transaction_blocks(&log),
                Vec::<&String>::new(),
                "one statement, no transaction block ({url}, {statement})"
            );
        }
        // The simple protocol too.
        taken(&notices);
        client
            .simple_query(&format!(
                "SELECT * FROM rate_limiter.rate_limit('alone', '{key}')"
            ))
            .expect("rate_limit");
        let log = taken(&notices);
        assert!(
            log.iter().any(|line| line.contains("_rate_limit_at(")),
            "{log:#?}"
        );
        assert_eq!(transaction_blocks(&log), Vec::<&String>::new(), "{log:#?}");
    }
    // Every call committed where its row lives: 5 calls on `two`, 5 from
    // each of two nodes on `one` (rate_check consumes nothing).
    assert_eq!(stored(&mut coordinator, "alone", &two), Some(95.0));
    assert_eq!(stored(&mut coordinator, "alone", &one), Some(90.0));
    // The delegated statement is planned for each call with its arguments
    // as constants, also after many calls in one session and when the
    // session forces generic plans.
    for mode in ["auto", "force_generic_plan"] {
        let mut client = connect(&urls[0]);
        client
            .batch_execute(&format!("SET plan_cache_mode = {mode}"))
            .expect("plan_cache_mode");
        for _ in 0..10 {
            assert!(consume(&mut client, "alone", Some(&two)), "{mode}");
        }
    }
    assert_eq!(stored(&mut coordinator, "alone", &two), Some(75.0));
    forget("alone");
}

#[test]
#[ignore = "needs the Citus cluster of scripts/test.sh"]
fn a_call_with_anything_after_it_in_its_transaction_is_undone_when_that_fails() {
    make_distributed();
    forget("after");
    let mut coordinator = coordinator();
    define(&mut coordinator, "after", 100.0);
    let (one, two) = keys_on_each_worker(&mut coordinator, "after-");
    let url = &urls()[0];
    let (mut client, notices) = connect_with_notices(url);
    client
        .batch_execute(
            "SET citus.log_remote_commands = on;
             CREATE TEMP TABLE refusals (ok boolean CHECK (ok IS NULL));
             CREATE FUNCTION pg_temp.after_a_cursor(key text) RETURNS void
             LANGUAGE plpgsql AS $$
             DECLARE answer record;
             BEGIN
                 FOR answer IN SELECT * FROM rate_limiter.rate_limit('after', key) LOOP
                 END LOOP;
                 RAISE EXCEPTION 'after the call';
             END $$;",
        )
        .expect("set up");
    // Warm up the session: its first call reads the definition.
    assert!(consume(&mut client, "after", Some(&two)));
    // Each fails after the call made its consumption on worker 1's row:
    // the failure undoes it there.
    let failing: [(&str, SqlState); 4] = [
        (
            "SELECT ok, 1 / (remaining * 0)::int FROM rate_limiter.rate_limit('after', $1)",
            SqlState::DIVISION_BY_ZERO,
        ),
        (
            "INSERT INTO refusals SELECT ok FROM rate_limiter.rate_limit('after', $1)",
            SqlState::CHECK_VIOLATION,
        ),
        (
            "SELECT pg_temp.after_a_cursor($1)",
            SqlState::RAISE_EXCEPTION,
        ),
        (
            "WITH answer AS (SELECT * FROM rate_limiter.rate_limit('after', $1)) \
             SELECT 1 / (remaining * 0)::int FROM answer",
            SqlState::DIVISION_BY_ZERO,
        ),
    ];
    for (statement, code) in failing {
        // The notices of the last statement's rollback arrive after its
        // error: read them before.
        client.batch_execute("SELECT 1").expect("SELECT 1");
        taken(&notices);
        let error = client
            .query(statement, &[&one])
            .expect_err("the statement fails after the call");
        assert_eq!(error.code(), Some(&code), "{statement}: {error}");
        let log = taken(&notices);
        assert!(
            log.iter().any(|line| line.contains("_rate_limit_at(")),
            "the call went to worker 1 ({statement}): {log:#?}"
        );
        assert!(
            !transaction_blocks(&log).is_empty(),
            "in a transaction block ({statement}): {log:#?}"
        );
        assert_eq!(stored(&mut coordinator, "after", &one), None, "{statement}");
    }
    // A simple query of two statements (one implicit transaction), and a
    // DO block.
    for statements in [
        format!("SELECT * FROM rate_limiter.rate_limit('after', '{one}'); SELECT 1 / 0"),
        format!(
            "DO $$ BEGIN PERFORM rate_limiter.rate_limit('after', '{one}'); \
             RAISE EXCEPTION 'after the call'; END $$"
        ),
    ] {
        client
            .simple_query(&statements)
            .expect_err("the second part fails");
        assert_eq!(
            stored(&mut coordinator, "after", &one),
            None,
            "{statements}"
        );
    }
    // A pipeline whose call is not its first statement: one transaction,
    // undone. (Each pipeline's session first makes a call that reads the
    // definition.)
    let call = format!("SELECT ok FROM rate_limiter.rate_limit('after', '{one}')");
    let warm_up = format!("SELECT ok FROM rate_limiter.rate_limit('after', '{two}')");
    assert_eq!(
        pipeline(
            url,
            &warm_up,
            &["SELECT 1", &call, "SELECT 1 / (length(version()) * 0)"]
        ),
        [
            Answer::Rows(vec!["1".into()]),
            Answer::Rows(vec!["t".into()]),
            Answer::Error("22012".into()),
        ]
    );
    assert_eq!(stored(&mut coordinator, "after", &one), None);
    // A pipeline that starts with the call: the statements after it share
    // its implicit transaction (the lock the call's planning took on the
    // state table is still held by the next statement), so the call keeps
    // its block there and the later failure undoes it too.
    let locks = "SELECT count(*) FROM pg_locks WHERE pid = pg_backend_pid() \
                 AND locktype = 'relation' AND relation = 'rate_limiter.rate_limits'::regclass";
    assert_eq!(
        pipeline(
            url,
            &warm_up,
            &[&call, locks, "SELECT 1 / (length(version()) * 0)"]
        ),
        [
            Answer::Rows(vec!["t".into()]),
            Answer::Rows(vec!["1".into()]),
            Answer::Error("22012".into()),
        ]
    );
    assert_eq!(stored(&mut coordinator, "after", &one), None);
    // Without a failure, the pipeline commits the call with the rest.
    assert_eq!(
        pipeline(url, &warm_up, &["SELECT 1", &call, locks]),
        [
            Answer::Rows(vec!["1".into()]),
            Answer::Rows(vec!["t".into()]),
            Answer::Rows(vec!["1".into()]),
        ]
    );
    assert_eq!(stored(&mut coordinator, "after", &one), Some(99.0));
    forget("after");
}
