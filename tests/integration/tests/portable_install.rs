//! docs/guarantees.md, "Portable edition" (its install through pg_tle and
//! as plain SQL): the portable edition's plain SQL file, run with psql by a
//! database owner who is not superuser, creates the schema in one
//! transaction; a later version's file (built from the same SQL with
//! another version, as `scripts/portable.sh` builds releases) upgrades it
//! in place, keeping every definition, state row and grant; the file
//! refuses a database where the native extension is installed or where a
//! schema `rate_limiter` is something else, changing nothing. (Through
//! pg_tle: `tests/portable/pg_tle.sh`.)

use postgres::{Client, NoTls};
use rate_limiter_integration_tests::{connect_to, drop_database, portable, test_env};
use std::process::Command;

const DATABASE: &str = "rate_limiter_portable_install";
const OWNER: &str = "rl_portable_installer";

fn superuser() -> Client {
    Client::connect(&test_env("RATE_LIMITER_TEST_URL"), NoTls).expect("connect as superuser")
}

/// The release files of version `version`, built into a directory of
/// their own: the plain file's path.
fn build(version: &str) -> std::path::PathBuf {
    let dist = std::env::temp_dir().join(format!("rate_limiter_dist_{version}"));
    let status = Command::new("bash")
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../scripts/portable.sh"
        ))
        .env("RL_PORTABLE_VERSION", version)
        .env("RL_PORTABLE_DIST", &dist)
        .status()
        .expect("run scripts/portable.sh");
    assert!(status.success(), "scripts/portable.sh");
    dist.join("rate_limiter-portable.sql")
}

fn version(client: &mut Client) -> String {
    client
        .query_one(
            "SELECT obj_description('rate_limiter'::regnamespace, 'pg_namespace')",
            &[],
        )
        .expect("the schema's comment")
        .get(0)
}

fn rows(client: &mut Client) -> Vec<String> {
    client
        .query(
            "SELECT r::text FROM rate_limiter.rate_limits AS r \
             UNION ALL SELECT d::text FROM rate_limiter.definitions AS d ORDER BY 1",
            &[],
        )
        .expect("the rows")
        .iter()
        .map(|row| row.get(0))
        .collect()
}

#[test]
fn a_database_owner_installs_and_upgrades_it_in_place() {
    let mut admin = superuser();
    for sql in [
        format!("DROP DATABASE IF EXISTS {DATABASE}"),
        format!("DROP ROLE IF EXISTS {OWNER}"),
        "DROP ROLE IF EXISTS rl_portable_caller".to_string(),
        format!("CREATE ROLE {OWNER} LOGIN"),
        "CREATE ROLE rl_portable_caller LOGIN".to_string(),
    ] {
        admin.batch_execute(&sql).expect("roles");
    }
    let mut owner = portable::fresh_database(DATABASE, OWNER);
    assert_eq!(version(&mut owner), "rate_limiter 0.6.0 (portable edition)");
    owner
        .batch_execute(
            "SELECT rate_limiter.define('upgrade', rate_limiter.fixed_window(5, '1 hour', start => now() - interval '1 minute'));
             SELECT * FROM rate_limiter.rate_limit('upgrade', 'k', 2);
             SELECT * FROM rate_limiter.rate_limit('inline', config => rate_limiter.token_bucket(3, '1 day'));
             GRANT USAGE ON SCHEMA rate_limiter TO rl_portable_caller;
             GRANT EXECUTE ON FUNCTION rate_limiter.rate_limit(text, text, float8, boolean, boolean, rate_limiter.config)
                 TO rl_portable_caller;",
        )
        .expect("use it");
    let before = rows(&mut owner);

    // The same file again, and a later version's: in place, nothing lost.
    for (file, expected) in [
        (
            portable::plain_file(),
            "rate_limiter 0.6.0 (portable edition)",
        ),
        (
            build("0.6.1-test"),
            "rate_limiter 0.6.1-test (portable edition)",
        ),
    ] {
        portable::psql_file(DATABASE, OWNER, &file)
            .unwrap_or_else(|output| panic!("{}: {output}", file.display()));
        assert_eq!(version(&mut owner), expected);
        assert_eq!(rows(&mut owner), before, "{expected}: every row kept");
        let mut caller = connect_to(DATABASE, "rl_portable_caller");
        let ok: bool = caller
            .query_one(
                "SELECT ok FROM rate_limiter.rate_limit('upgrade', 'k', 3)",
                &[],
            )
            .expect("the grant kept")
            .get(0);
        let again: bool = caller
            .query_one(
                "SELECT ok FROM rate_limiter.rate_limit('upgrade', 'k', 3)",
                &[],
            )
            .expect("the grant kept")
            .get(0);
        // 3 of the 3 tokens left, then nothing: the state went on.
        assert!(ok && !again, "{expected}: the state went on");
        caller
            .batch_execute("SELECT * FROM rate_limiter.rate_limits")
            .expect_err("and still no access to the table");
        owner
            .batch_execute("SELECT rate_limiter.rate_reset('upgrade', 'k'); SELECT * FROM rate_limiter.rate_limit('upgrade', 'k', 2)")
            .expect("back to the state before");
        assert_eq!(rows(&mut owner), before);
    }

    // Inside a transaction that rolls back, the file leaves nothing.
    drop(owner);
    drop_database(DATABASE);
    admin
        .batch_execute(&format!("CREATE DATABASE {DATABASE} OWNER {OWNER}"))
        .expect("create the database");
    let rolled_back = std::env::temp_dir().join("rate_limiter_portable_rolled_back.sql");
    std::fs::write(
        &rolled_back,
        format!(
            "BEGIN;\n\\i {}\nROLLBACK;\n",
            portable::plain_file().display()
        ),
    )
    .expect("write the script");
    portable::psql_file(DATABASE, OWNER, &rolled_back).expect("run it");
    let mut owner = connect_to(DATABASE, OWNER);
    let schema: Option<String> = owner
        .query_one("SELECT to_regnamespace('rate_limiter')::text", &[])
        .expect("look")
        .get(0);
    assert_eq!(schema, None, "rolled back with the caller's transaction");

    // A schema rate_limiter that is something else: refused, untouched.
    owner
        .batch_execute("CREATE SCHEMA rate_limiter; CREATE TABLE rate_limiter.mine (x int)")
        .expect("someone else's schema");
    let error = portable::psql_file(DATABASE, OWNER, &portable::plain_file())
        .expect_err("refused: the schema is not the portable edition");
    assert!(error.contains("is not the portable edition"), "{error}");
    let tables: i64 = owner
        .query_one(
            "SELECT count(*) FROM pg_class WHERE relnamespace = 'rate_limiter'::regnamespace",
            &[],
        )
        .expect("count")
        .get(0);
    assert_eq!(tables, 1, "nothing created");
    owner
        .batch_execute("DROP SCHEMA rate_limiter CASCADE")
        .expect("drop it");

    // The native extension installed: refused, untouched.
    owner
        .batch_execute("CREATE EXTENSION rate_limiter")
        .expect("the native extension");
    let error = portable::psql_file(DATABASE, OWNER, &portable::plain_file())
        .expect_err("refused: the native extension is installed");
    assert!(error.contains("extension is installed"), "{error}");
    drop(owner);
    drop_database(DATABASE);
    admin
        .batch_execute(&format!("DROP ROLE {OWNER}; DROP ROLE rl_portable_caller"))
        .expect("drop the roles");
}
