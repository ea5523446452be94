//! `CREATE EXTENSION` and `ALTER EXTENSION ... UPDATE` on a cluster, and
//! `distribute()` / `undistribute()`: what they keep, what they refuse, and
//! a state table distributed otherwise.

use super::*;

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
                     AND objid IN ('rate_limiter.rate_limits'::regclass, 'rate_limiter.definitions'::regclass, \
                                   'rate_limiter.overrides'::regclass, 'rate_limiter.composites'::regclass) \
                     AND refobjid = e.oid), \
                    (SELECT array_agg(c::regclass::text ORDER BY c::regclass::text) FROM unnest(e.extconfig) AS c) \
                 FROM pg_extension AS e WHERE extname = 'rate_limiter'",
                &[],
            )
            .expect("membership");
        (row.get(0), row.get(1))
    };
    let expected = (
        4,
        vec![
            "rate_limiter.blocks".to_string(),
            "rate_limiter.composites".to_string(),
            "rate_limiter.definitions".to_string(),
            "rate_limiter.leases".to_string(),
            "rate_limiter.overrides".to_string(),
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

#[test]
#[ignore = "needs the Citus cluster of scripts/test.sh"]
fn an_install_distributed_at_0_5_0_updates_and_distribute_again_places_its_overrides_and_blocks() {
    let mut coordinator = coordinator();
    make_local();
    coordinator
        .batch_execute(
            "DROP EXTENSION rate_limiter; CREATE EXTENSION rate_limiter VERSION '0.5.0'; \
             SELECT rate_limiter.define('old5', rate_limiter.token_bucket(10, '1000 days')); \
             SELECT rate_limiter.define('old5_pro', rate_limiter.token_bucket(100, '1000 days'))",
        )
        .expect("install 0.5.0 on every node");
    make_distributed();
    assert!(consume(&mut coordinator, "old5", Some("a")));
    coordinator
        .batch_execute("ALTER EXTENSION rate_limiter UPDATE")
        .expect("update the distributed install");
    // The overrides are the coordinator's own table until distribute():
    // an override would reach no worker, so it fails closed.
    let error = coordinator
        .batch_execute("SELECT rate_limiter.override('old5', 'a', plan => 'old5_pro')")
        .expect_err("an override before distribute()");
    assert_eq!(
        error.as_db_error().expect("db error").code(),
        &SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE,
        "{error}"
    );
    // So do blocks: the blocks table is the coordinator's own too.
    let error = coordinator
        .batch_execute("SELECT rate_limiter.block('old5', 'b', '1 hour')")
        .expect_err("a block before distribute()");
    assert_eq!(
        error.as_db_error().expect("db error").code(),
        &SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE,
        "{error}"
    );
    // And so do composites (docs/composites.md): the composites table,
    // new in 0.6.0, is the coordinator's own.
    let error = coordinator
        .batch_execute("SELECT rate_limiter.define_all('old5_both', ARRAY['old5', 'old5_pro'])")
        .expect_err("a composite before distribute()");
    assert_eq!(
        error.as_db_error().expect("db error").code(),
        &SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE,
        "{error}"
    );
    // And so do timed leases of a concurrency limit (new in 0.6.0): the
    // leases table is the coordinator's own.
    coordinator
        .batch_execute("SELECT rate_limiter.define('old5_slots', rate_limiter.concurrency(1))")
        .expect("define a concurrency limit");
    let error = coordinator
        .batch_execute(
            "SELECT ok FROM rate_limiter.acquire('old5_slots', 't', lease => '1 minute')",
        )
        .expect_err("a timed lease before distribute()");
    assert_eq!(
        error.as_db_error().expect("db error").code(),
        &SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE,
        "{error}"
    );
    coordinator
        .batch_execute("SELECT rate_limiter.distribute()")
        .expect("distribute() again after the update");
    // distribute() made the leases a reference table and the slot locks
    // delegated functions: a timed lease taken on a worker holds the
    // key's one slot for every node.
    let delegated: i64 = coordinator
        .query_one(
            "SELECT count(*) FROM pg_dist_object \
             WHERE classid = 'pg_proc'::regclass AND distribution_argument_index IS NOT NULL \
               AND objid::regprocedure::text LIKE 'rate_limiter._slot_lock%'",
            &[],
        )
        .expect("the distributed slot-lock functions")
        .get(0);
    assert_eq!(delegated, 2, "_slot_lock_on and _slot_locks_held_on");
    let leased: bool = nodes()[1]
        .1
        .query_one(
            "SELECT ok FROM rate_limiter.acquire('old5_slots', 't', lease => '1 minute')",
            &[],
        )
        .expect("a timed lease after distribute()")
        .get(0);
    assert!(leased);
    for (node, mut client) in nodes() {
        let ok: bool = client
            .query_one(
                "SELECT ok FROM rate_limiter.acquire('old5_slots', 't')",
                &[],
            )
            .expect("acquire")
            .get(0);
        assert!(!ok, "{node}: the slot is held by the timed lease");
    }
    coordinator
        .batch_execute(
            "SELECT rate_limiter.override('old5', 'a', plan => 'old5_pro'); \
             SELECT rate_limiter.block('old5', 'b', '1 hour'); \
             SELECT rate_limiter.define_all('old5_both', ARRAY['old5', 'old5_pro'])",
        )
        .expect("an override, a block and a composite after distribute()");
    for (node, mut client) in nodes() {
        assert!(!consume(&mut client, "old5", Some("b")), "{node}: blocked");
        assert!(
            consume(&mut client, "old5_both", Some("c")),
            "{node}: the composite, known on every node"
        );
    }
    for (node, mut client) in nodes() {
        let remaining: f64 = client
            .query_one(
                "SELECT remaining FROM rate_limiter.rate_check('old5', 'a')",
                &[],
            )
            .expect("rate_check")
            .get(0);
        // (The plan refills 100 tokens in 1000 days: a few millionths
        // since the call.)
        assert!(
            (remaining - 8.0).abs() < 0.001,
            "on the {node}: the key's 9 tokens under the plan, not {remaining}"
        );
    }
    forget("old5");
}
