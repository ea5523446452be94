//! Blocks on a cluster (docs/blocks.md, "Citus"): `distribute()`
//! distributes `rate_limiter.blocks` by `dkey`, colocated with the state,
//! keeping every block; a key's block lives in the shard beside its state
//! rows. A block made on any node refuses every node's calls of the key
//! (with the DETAIL's reason and the `blocked` statistic on the node
//! called); an automatic block starts on the key's node, in the caller's
//! transaction (a colocated transaction stays on one node, a rollback
//! undoes it), from `rate_limit` and `rate_limit_all`; `undistribute()`
//! keeps the blocks; a global limit whose shards spread over the nodes
//! cannot be blocked (0A000).

use super::*;

/// The SQLSTATE of `sql` through `client` (`None`: it succeeded).
fn state_of(client: &mut Client, sql: &str) -> Option<SqlState> {
    client
        .batch_execute(sql)
        .err()
        .map(|error| error.code().cloned().unwrap_or(SqlState::INTERNAL_ERROR))
}

/// (ok, retry_after in seconds) of a `rate_limit` of (name, key).
fn call(client: &mut impl postgres::GenericClient, name: &str, key: Option<&str>) -> (bool, f64) {
    let row = client
        .query_one(
            "SELECT ok, coalesce(extract(epoch FROM retry_after), 0)::float8 \
             FROM rate_limiter.rate_limit($1, $2)",
            &[&name, &key],
        )
        .unwrap_or_else(|error| panic!("rate_limit({name}, {key:?}): {error}"));
    (row.get(0), row.get(1))
}

/// The RL429 DETAIL of a refused `rate_limit(..., throws => true)`.
fn refusal_detail(client: &mut Client, name: &str, key: &str) -> String {
    let error = client
        .query_one(
            "SELECT ok FROM rate_limiter.rate_limit($1, $2, throws => true)",
            &[&name, &key],
        )
        .expect_err("a refusal raises");
    error
        .as_db_error()
        .and_then(|error| error.detail())
        .unwrap_or_default()
        .to_string()
}

/// The `blocked` statistic of `name` on the node of `client`.
fn blocked_count(client: &mut Client, name: &str) -> i64 {
    client
        .query_opt(
            "SELECT blocked FROM rate_limiter.stats WHERE name = $1",
            &[&name],
        )
        .expect("stats")
        .map_or(0, |row| row.get(0))
}

/// Whether the block of `key` (a keyed limit's) is stored on the node of
/// the key's state, as Citus places both.
fn beside_its_state(client: &mut Client, key: &str) -> bool {
    client
        .query_one(
            "SELECT (SELECT groupid FROM pg_dist_placement WHERE shardid = \
                     get_shard_id_for_distribution_column('rate_limiter.blocks', $1::text)) \
                  = (SELECT groupid FROM pg_dist_placement WHERE shardid = \
                     get_shard_id_for_distribution_column('rate_limiter.rate_limits', $1::text))",
            &[&key],
        )
        .expect("placements")
        .get(0)
}

#[test]
#[ignore = "needs the Citus cluster of scripts/test.sh"]
fn a_block_made_on_any_node_refuses_every_nodes_calls() {
    make_local();
    forget("blc");
    let mut coordinator = coordinator();
    define(&mut coordinator, "blc", 100.0);
    coordinator
        .batch_execute("SELECT rate_limiter.block('blc', 'before', '1 hour', 'made locally')")
        .expect("block on a local install");
    make_distributed();
    let colocated: bool = coordinator
        .query_one(
            "SELECT b.colocationid = s.colocationid AND b.partmethod = 'h' \
             FROM pg_dist_partition AS b, pg_dist_partition AS s \
             WHERE b.logicalrelid = 'rate_limiter.blocks'::regclass \
               AND s.logicalrelid = 'rate_limiter.rate_limits'::regclass",
            &[],
        )
        .expect("blocks in Citus's metadata")
        .get(0);
    assert!(
        colocated,
        "blocks are distributed, colocated with the state"
    );
    assert!(beside_its_state(&mut coordinator, "before"));
    let mut clients: Vec<Client> = urls().iter().map(|url| connect(url)).collect();
    for (node, client) in clients.iter_mut().enumerate() {
        let (ok, retry_after) = call(client, "blc", Some("before"));
        assert!(
            !ok && retry_after > 3500.0,
            "{}: the block kept",
            NODES[node]
        );
        let detail = refusal_detail(client, "blc", "before");
        assert!(
            detail.contains(r#""blocked":true"#) && detail.contains(r#""reason":"made locally""#),
            "{}: {detail}",
            NODES[node]
        );
    }
    let (on_worker1, on_worker2) = keys_on_each_worker(&mut clients[0], "blc-key-");
    for (writer, key) in [(0, &on_worker1), (1, &on_worker2), (2, &on_worker1)] {
        let stats_before: Vec<i64> = clients
            .iter_mut()
            .map(|c| blocked_count(c, "blc"))
            .collect();
        clients[writer]
            .execute(
                "SELECT rate_limiter.block('blc', $1, '10 minutes', 'by hand')",
                &[key],
            )
            .unwrap_or_else(|error| panic!("block on {}: {error:?}", NODES[writer]));
        assert!(beside_its_state(&mut clients[0], key));
        for (node, client) in clients.iter_mut().enumerate() {
            let (ok, retry_after) = call(client, "blc", Some(key));
            assert!(
                !ok && retry_after > 500.0 && retry_after <= 600.0,
                "{} refuses the key {} blocked ({retry_after})",
                NODES[node],
                NODES[writer]
            );
            let checked: bool = client
                .query_one("SELECT ok FROM rate_limiter.rate_check('blc', $1)", &[key])
                .expect("rate_check")
                .get(0);
            assert!(!checked, "rate_check refuses too");
            let value: f64 = client
                .query_one("SELECT value FROM rate_limiter.status('blc', $1)", &[key])
                .expect("status")
                .get(0);
            assert_eq!(value, 0.0, "status shows the block");
            let reason: String = client
                .query_one("SELECT reason FROM rate_limiter.blocked('blc', $1)", &[key])
                .expect("blocked()")
                .get(0);
            assert_eq!(reason, "by hand");
            let headers: String = client
                .query_one("SELECT rate_limiter.http_headers('blc', $1)::text", &[key])
                .expect("http_headers")
                .get(0);
            assert!(headers.contains(";r=0;"), "{headers}");
        }
        for (node, client) in clients.iter_mut().enumerate() {
            assert_eq!(
                blocked_count(client, "blc"),
                stats_before[node] + 1,
                "the refusal counted as blocked on {}",
                NODES[node]
            );
        }
        let reader = (writer + 1) % clients.len();
        let lifted: bool = clients[reader]
            .query_one("SELECT rate_limiter.unblock('blc', $1)", &[key])
            .expect("unblock")
            .get(0);
        assert!(lifted);
        for client in &mut clients {
            assert!(call(client, "blc", Some(key)).0, "admitted again");
        }
    }
    // undistribute() keeps the blocks, and distribute() places them again.
    make_local();
    assert!(!call(&mut coordinator, "blc", Some("before")).0);
    make_distributed();
    assert!(!call(&mut connect(&urls()[2]), "blc", Some("before")).0);
    forget("blc");
}

#[test]
#[ignore = "needs the Citus cluster of scripts/test.sh"]
fn an_automatic_block_starts_on_the_keys_node_in_the_callers_transaction() {
    make_distributed();
    forget("bla");
    let mut clients: Vec<Client> = urls().iter().map(|url| connect(url)).collect();
    clients[0]
        .batch_execute(
            "SELECT rate_limiter.define('bla', rate_limiter.with_block(\
                 rate_limiter.token_bucket(2, '1000 days'), '5 minutes', '1 hour'))",
        )
        .expect("define with automatic blocks");
    let (on_worker1, on_worker2) = keys_on_each_worker(&mut clients[0], "bla-key-");

    // A transaction on the coordinator for a key on worker 1 uses the
    // limit up: the block is written there, and nothing runs elsewhere.
    let (mut client, notices) = connect_with_notices(&urls()[0]);
    client
        .batch_execute("SET citus.log_remote_commands = on")
        .expect("log remote commands");
    taken(&notices);
    let mut transaction = client.transaction().expect("begin");
    assert!(call(&mut transaction, "bla", Some(&on_worker1)).0);
    assert!(call(&mut transaction, "bla", Some(&on_worker1)).0);
    transaction.commit().expect("commit");
    let log = taken(&notices);
    let worker_2 = format!("127.0.0.1:{}", port_of(&urls()[2]));
    assert!(
        !log.iter()
            .any(|line| line.contains("PREPARE TRANSACTION") || line.contains(&worker_2)),
        "one node, one-phase commit: {log:#?}"
    );
    for (node, client) in clients.iter_mut().enumerate() {
        let (ok, retry_after) = call(client, "bla", Some(&on_worker1));
        assert!(!ok && retry_after > 290.0, "{}: blocked 300 s", NODES[node]);
    }
    let strikes: i32 = clients[0]
        .query_one(
            "SELECT strikes FROM rate_limiter.blocks WHERE name = 'bla' AND key = $1",
            &[&on_worker1],
        )
        .expect("the block's row")
        .get(0);
    assert_eq!(strikes, 1);
    assert!(beside_its_state(&mut clients[0], &on_worker1));

    // Rolled back with the caller's work: no block, the tokens back.
    let mut transaction = clients[1].transaction().expect("begin");
    assert!(call(&mut transaction, "bla", Some(&on_worker2)).0);
    assert!(call(&mut transaction, "bla", Some(&on_worker2)).0);
    transaction.rollback().expect("rollback");
    for client in &mut clients {
        let blocked = client
            .query_opt(
                "SELECT FROM rate_limiter.blocked('bla', $1)",
                &[&on_worker2],
            )
            .expect("blocked()");
        assert!(blocked.is_none(), "the rollback undid the block");
    }

    // rate_limit_all over keys on both workers: each used up starts its
    // block on its node; then a call naming a blocked key is refused as a
    // whole, counted as blocked, and says why.
    let (second_on_1, second_on_2) = keys_on_each_worker(&mut clients[0], "bla-all-");
    for _ in 0..2 {
        let admitted: bool = clients[0]
            .query_one(
                "SELECT bool_and(ok) FROM rate_limiter.rate_limit_all(ARRAY[\
                     ('bla', $1, 1, NULL), ('bla', $2, 1, NULL)]::rate_limiter.request[])",
                &[&second_on_1, &second_on_2],
            )
            .expect("rate_limit_all")
            .get(0);
        assert!(admitted);
    }
    for key in [&second_on_1, &second_on_2] {
        for (node, client) in clients.iter_mut().enumerate() {
            assert!(
                !call(client, "bla", Some(key)).0,
                "{}: {key} blocked",
                NODES[node]
            );
        }
    }
    let before = blocked_count(&mut clients[0], "bla");
    let error = clients[0]
        .query_one(
            "SELECT count(*) FROM rate_limiter.rate_limit_all(ARRAY[\
                 ('bla', 'fresh', 1, NULL), ('bla', $1, 1, NULL)]::rate_limiter.request[], throws => true)",
            &[&second_on_2],
        )
        .expect_err("refused as a whole");
    let detail = error
        .as_db_error()
        .and_then(|e| e.detail())
        .unwrap_or_default();
    assert!(detail.contains(r#""blocked":true"#), "{detail}");
    assert_eq!(blocked_count(&mut clients[0], "bla"), before + 1);
    assert!(
        call(&mut clients[2], "bla", Some("fresh")).0,
        "nothing consumed"
    );
    forget("bla");
}

#[test]
#[ignore = "needs the Citus cluster of scripts/test.sh"]
fn a_global_limit_spread_over_the_nodes_cannot_be_blocked() {
    make_distributed();
    forget("blg");
    let mut coordinator = coordinator();
    coordinator
        .batch_execute(
            "SELECT rate_limiter.define('blg_spread', rate_limiter.token_bucket(800, '1 hour', shards => 8)); \
             SELECT rate_limiter.define('blg', rate_limiter.token_bucket(800, '1 hour'))",
        )
        .expect("define");
    assert_eq!(
        state_of(
            &mut coordinator,
            "SELECT rate_limiter.block('blg_spread', NULL, '1 hour')"
        ),
        Some(SqlState::FEATURE_NOT_SUPPORTED)
    );
    assert_eq!(
        state_of(
            &mut coordinator,
            "SELECT * FROM rate_limiter.rate_limit('blg_inline', NULL, config => rate_limiter.with_block(\
                 rate_limiter.token_bucket(800, '1 hour', shards => 8), '1 minute'))"
        ),
        Some(SqlState::FEATURE_NOT_SUPPORTED)
    );
    // A keyed call of it can be blocked: its shards are on the key's node.
    coordinator
        .batch_execute("SELECT rate_limiter.block('blg_spread', 'k', '1 hour')")
        .expect("block a key of a sharded limit");
    assert!(!call(&mut coordinator, "blg_spread", Some("k")).0);
    // The unsharded global limit can; then it cannot be spread.
    coordinator
        .batch_execute("SELECT rate_limiter.block('blg', NULL, '1 hour')")
        .expect("block an unsharded global limit");
    for (node, mut client) in nodes() {
        assert!(!call(&mut client, "blg", None).0, "{node}");
    }
    assert_eq!(
        state_of(
            &mut coordinator,
            "SELECT rate_limiter.define('blg', rate_limiter.token_bucket(800, '1 hour', shards => 8))"
        ),
        Some(SqlState::FEATURE_NOT_SUPPORTED)
    );
    forget("blg");
}

#[test]
#[ignore = "needs the Citus cluster of scripts/test.sh"]
fn an_application_role_reads_a_block_held_elsewhere_inside_its_transaction() {
    make_distributed();
    forget("blr");
    let mut coordinator = coordinator();
    define(&mut coordinator, "blr", 100.0);
    // An application role that is not the extension's owner, with the
    // README's grants (docs/citus.md's included): Citus refuses a query of
    // another role on placements this role's calls wrote in the
    // transaction, so a block elsewhere is read as this role.
    coordinator
        .batch_execute(
            "DROP ROLE IF EXISTS citus_blocks_app; CREATE ROLE citus_blocks_app LOGIN; \
             GRANT USAGE ON SCHEMA rate_limiter TO citus_blocks_app; \
             GRANT EXECUTE ON FUNCTION \
                 rate_limiter.rate_limit(text, text, float8, boolean, boolean, rate_limiter.config), \
                 rate_limiter.status(text, text, rate_limiter.config), \
                 rate_limiter.http_headers(text, text, boolean, interval, float8, rate_limiter.config), \
                 rate_limiter.blocked(text, text), \
                 rate_limiter._rate_limit_at(text, text, text, float8, boolean, rate_limiter.config, boolean, timestamptz, boolean), \
                 rate_limiter._rate_state_at(text, text, text, int2), \
                 rate_limiter._rate_block_at(text, text, text) \
             TO citus_blocks_app",
        )
        .expect("an application role");
    let (first, _) = keys_on_each_worker(&mut coordinator, "blr-a-");
    let (blocked_key, _) = keys_on_each_worker(&mut coordinator, "blr-b-");
    coordinator
        .execute(
            "SELECT rate_limiter.block('blr', $1, '1 hour', 'abuse')",
            &[&blocked_key],
        )
        .expect("block");
    let url = urls()[0].replace("user=postgres", "user=citus_blocks_app");
    let mut app = connect(&url);
    let mut transaction = app.transaction().expect("begin");
    // A call on worker 1 (Citus delegates it as this role, a write there).
    assert!(call(&mut transaction, "blr", Some(&first)).0);
    let value: f64 = transaction
        .query_one(
            "SELECT value FROM rate_limiter.status('blr', $1)",
            &[&blocked_key],
        )
        .expect("status after a call on the same worker")
        .get(0);
    assert_eq!(value, 0.0);
    let headers: String = transaction
        .query_one(
            "SELECT rate_limiter.http_headers('blr', $1)::text",
            &[&blocked_key],
        )
        .expect("http_headers")
        .get(0);
    assert!(headers.contains(";r=0;"), "{headers}");
    let reason: String = transaction
        .query_one(
            "SELECT reason FROM rate_limiter.blocked('blr', $1)",
            &[&blocked_key],
        )
        .expect("blocked()")
        .get(0);
    assert_eq!(reason, "abuse");
    let error = transaction
        .query_one(
            "SELECT ok FROM rate_limiter.rate_limit('blr', $1, throws => true)",
            &[&blocked_key],
        )
        .expect_err("refused");
    let detail = error
        .as_db_error()
        .and_then(|e| e.detail())
        .unwrap_or_default();
    assert!(detail.contains(r#""reason":"abuse""#), "{error:?}");
    drop(transaction);
    drop(app);
    coordinator
        .batch_execute("DROP OWNED BY citus_blocks_app; DROP ROLE citus_blocks_app")
        .expect("drop the role");
    forget("blr");
}
