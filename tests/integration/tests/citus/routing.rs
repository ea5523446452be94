//! Calls on any node reach the row's node inside the caller's transaction:
//! where rows land, rollback, savepoints and two-phase commit, a
//! colocated tenant transaction, exactness over three nodes, and
//! definitions seen by every node.

use super::*;

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
