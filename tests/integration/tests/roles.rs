//! The README's role recipes, run exactly as written: the GRANT block
//! between `<!-- roles:begin -->` and `<!-- roles:end -->` in README.md is
//! read from the file and executed in a fresh database, then each role
//! does what the README says it may, and is refused (42501) what it may
//! not. If the README's grants stop being enough, or start giving too
//! much, this fails. The same block, unchanged, on the portable edition
//! (docs/guarantees.md, "Portable edition"), installed from its plain SQL
//! file by a database owner who is not superuser: the roles get the same
//! answers but where the portable edition may differ: no statistics
//! (0A000), and the placeholder settings an application role may SET,
//! which then move no clock and raise no bound.

use postgres::error::SqlState;
use postgres::{Client, NoTls};
use rate_limiter_integration_tests::{fresh_database, portable, readme_sql};

const DATABASE: &str = "rate_limiter_roles";

fn base_url() -> String {
    std::env::var("RATE_LIMITER_TEST_URL")
        .expect("RATE_LIMITER_TEST_URL is not set: run the tests through scripts/test.sh")
}

fn connect_as(user: &str) -> Client {
    Client::connect(
        &format!("{} dbname={DATABASE} user={user}", base_url()),
        NoTls,
    )
    .unwrap_or_else(|e| panic!("connect as {user}: {e}"))
}

/// The SQL of the README's role recipes, then the Citus grants that
/// docs/citus.md adds to them (the functions exist on a single server too).
fn readme_grants() -> String {
    format!("{}\n{}", readme_sql("roles"), readme_sql("citus-roles"))
}

/// Runs `sql` as `client` and asserts the outcome: Ok, or the SQLSTATE.
fn expect(client: &mut Client, who: &str, sql: &str, expected: Option<SqlState>) {
    let outcome = client.batch_execute(sql);
    match (outcome, expected) {
        (Ok(()), None) => {}
        (Err(error), Some(code)) if error.code() == Some(&code) => {}
        (outcome, expected) => panic!("{who}: {sql}\n  expected {expected:?}, got {outcome:?}"),
    }
}

/// Which edition the database has.
#[derive(Clone, Copy, PartialEq)]
enum Edition {
    Native,
    Portable,
}

/// The roles of the README's block, created anew.
fn create_roles(superuser: &mut Client) {
    for sql in [
        "DROP ROLE IF EXISTS app",
        "DROP ROLE IF EXISTS admin",
        "DROP ROLE IF EXISTS web_anon",
        "DROP ROLE IF EXISTS monitor",
        "CREATE ROLE app LOGIN",
        "CREATE ROLE admin LOGIN",
        "CREATE ROLE web_anon LOGIN",
        "CREATE ROLE monitor LOGIN",
    ] {
        superuser.batch_execute(sql).expect("create the roles");
    }
}

#[test]
fn each_readme_role_works_with_exactly_its_grants() {
    let mut owner = fresh_database(DATABASE);
    create_roles(&mut owner);
    owner
        .batch_execute(&readme_grants())
        .expect("the README's grants run as written");
    check_roles(owner, Edition::Native);
}

/// docs/guarantees.md, "Portable edition": the portable edition, installed
/// by a database owner who is not superuser (who then owns it), with the
/// README's block run as written by that owner.
#[test]
fn each_readme_role_works_with_exactly_its_grants_on_the_portable_edition() {
    let mut superuser = Client::connect(&base_url(), NoTls).expect("connect as superuser");
    superuser
        .batch_execute(&format!("DROP DATABASE IF EXISTS {DATABASE}"))
        .expect("drop the database");
    create_roles(&mut superuser);
    for sql in [
        "DROP ROLE IF EXISTS rl_portable_owner",
        "CREATE ROLE rl_portable_owner LOGIN",
    ] {
        superuser.batch_execute(sql).expect("the owner");
    }
    let mut owner = portable::fresh_database(DATABASE, "rl_portable_owner");
    let (superuser_owner, owns_everything): (bool, bool) = {
        let row = owner
            .query_one(
                "SELECT (SELECT rolsuper FROM pg_roles WHERE rolname = current_user), \
                        bool_and(c.relowner = (SELECT oid FROM pg_roles WHERE rolname = current_user)) \
                 FROM pg_class AS c WHERE c.relnamespace = 'rate_limiter'::regnamespace",
                &[],
            )
            .expect("the owner");
        (row.get(0), row.get(1))
    };
    assert!(
        !superuser_owner && owns_everything,
        "installed and owned by the database owner"
    );
    owner
        .batch_execute(&readme_grants())
        .expect("the README's grants run as written on the portable edition");
    check_roles(owner, Edition::Portable);
    superuser
        .batch_execute("DROP ROLE rl_portable_owner")
        .expect("drop the owner");
}

/// What each role of the README's block may and may not do, in the
/// database `owner` is connected to.
fn check_roles(mut owner: Client, edition: Edition) {
    let portable = edition == Edition::Portable;
    // No statistics in the portable edition (0A000; docs/guarantees.md,
    // "Portable edition").
    let statistics = if portable {
        Some(SqlState::FEATURE_NOT_SUPPORTED)
    } else {
        None
    };
    let denied = Some(SqlState::INSUFFICIENT_PRIVILEGE);
    let bucket = "rate_limiter.token_bucket(5, '1 minute')";

    // The admin role manages limits...
    let mut admin = connect_as("admin");
    for sql in [
        format!("SELECT rate_limiter.define('signup', {bucket})"),
        "SELECT rate_limiter.rate_reset('signup', 'k')".to_string(),
        "SELECT rate_limiter.rate_credit('signup', 'k', 1)".to_string(),
        "SELECT rate_limiter.prune()".to_string(),
        "SELECT rate_limiter.undefine('signup')".to_string(),
        format!("SELECT rate_limiter.define('shadow', {bucket}, enforce => false)"),
        format!("SELECT rate_limiter.define('signup', {bucket})"),
        "SELECT rate_limiter.override('signup', 'vip', plan => 'shadow')".to_string(),
        format!("SELECT rate_limiter.override('signup', 'k3', config => {bucket}, expires_at => now() + interval '1 day')"),
        "SELECT rate_limiter.remove_override('signup', 'k3')".to_string(),
        // Blocks (docs/blocks.md): by hand, automatic, and their list.
        "SELECT rate_limiter.block('signup', 'mallory', '1 hour', 'abuse')".to_string(),
        "SELECT rate_limiter.block('signup', 'eve', '1 hour')".to_string(),
        "SELECT rate_limiter.unblock('signup', 'eve')".to_string(),
        "SELECT * FROM rate_limiter.blocked('signup', 'mallory')".to_string(),
        format!("SELECT rate_limiter.define('logins', rate_limiter.with_block({bucket}, '1 minute'))"),
        "SELECT name, key, until, strikes, reason FROM rate_limiter.blocks".to_string(),
    ] {
        expect(&mut admin, "admin", &sql, None);
    }
    expect(
        &mut admin,
        "admin",
        "SELECT rate_limiter.stats_reset('shadow')",
        statistics.clone(),
    );
    // ...and touches no table but reading the blocks.
    for sql in [
        "SELECT * FROM rate_limiter.rate_limits",
        "SELECT * FROM rate_limiter.definitions",
        "DELETE FROM rate_limiter.definitions",
        "SELECT * FROM rate_limiter.overrides",
        "DELETE FROM rate_limiter.blocks",
        "UPDATE rate_limiter.blocks SET until = now()",
        "SELECT * FROM rate_limiter.stats",
    ] {
        expect(&mut admin, "admin", sql, denied.clone());
    }

    // The monitoring role reads the statistics, and does nothing else.
    let mut monitor = connect_as("monitor");
    for sql in [
        "SELECT * FROM rate_limiter.stats",
        "SELECT * FROM rate_limiter.stats_info",
    ] {
        expect(&mut monitor, "monitor", sql, statistics.clone());
    }
    for sql in [
        "SELECT rate_limiter.stats_reset()",
        "SELECT * FROM rate_limiter.rate_check('signup', 'k')",
        "SELECT * FROM rate_limiter.rate_limits",
        "SELECT rate_limiter.undefine('signup')",
    ] {
        expect(&mut monitor, "monitor", sql, denied.clone());
    }

    // The application role uses limits, by name and inline...
    let mut app = connect_as("app");
    for sql in [
        "SELECT * FROM rate_limiter.rate_limit('signup', 'k')".to_string(),
        "SELECT * FROM rate_limiter.rate_check('signup', 'k')".to_string(),
        // A key with an override: the app calls it as any other.
        "SELECT * FROM rate_limiter.rate_limit('signup', 'vip')".to_string(),
        format!("SELECT * FROM rate_limiter.rate_limit('inline', 'k', config => {bucket})"),
        "SELECT * FROM rate_limiter.rate_limit('inline', config => rate_limiter.fixed_window(5, '1 hour'))"
            .to_string(),
        "SELECT * FROM rate_limiter.status('signup', 'k')".to_string(),
        "SELECT rate_limiter.http_headers('signup', 'k')".to_string(),
        "SELECT * FROM rate_limiter.rate_limit_all(ARRAY[('signup', 'k2', 1, NULL)]::rate_limiter.request[])"
            .to_string(),
        "SELECT * FROM rate_limiter.rate_wait('signup', 'k2', timeout => '0')".to_string(),
        "SELECT rate_limiter.postgrest_limit('signup', 'k2')".to_string(),
        // Where a block stands, and a blocked key's refusal (an answer).
        "SELECT * FROM rate_limiter.blocked('signup', 'mallory')".to_string(),
        "SELECT * FROM rate_limiter.rate_limit('signup', 'mallory')".to_string(),
        // A use-up of a limit with automatic blocks writes the block as
        // the owner.
        "SELECT * FROM rate_limiter.rate_limit('logins', 'k', 5)".to_string(),
    ] {
        expect(&mut app, "app", &sql, None);
    }
    expect(
        &mut owner,
        "owner",
        "SELECT 1 / count(*) FROM rate_limiter.blocks WHERE name = 'logins' AND key = 'k'",
        None,
    );
    // ...but cannot manage them, move the clock or touch the tables.
    for sql in [
        format!("SELECT rate_limiter.define('signup', {bucket})"),
        "SELECT rate_limiter.undefine('signup')".to_string(),
        "SELECT rate_limiter.rate_reset('signup', 'k')".to_string(),
        "SELECT rate_limiter.rate_credit('signup', 'k', 1)".to_string(),
        "SELECT rate_limiter.prune()".to_string(),
        "SELECT * FROM rate_limiter.rate_limits".to_string(),
        "UPDATE rate_limiter.rate_limits SET value = 100".to_string(),
        // A key's own limit is managing too.
        "SELECT rate_limiter.override('signup', 'k', plan => 'shadow')".to_string(),
        "SELECT rate_limiter.remove_override('signup', 'vip')".to_string(),
        "SELECT * FROM rate_limiter.overrides".to_string(),
        "DELETE FROM rate_limiter.overrides".to_string(),
        // Blocks are managed by the admin role only.
        "SELECT rate_limiter.block('signup', 'k', '1 hour')".to_string(),
        "SELECT rate_limiter.unblock('signup', 'mallory')".to_string(),
        "SELECT * FROM rate_limiter.blocks".to_string(),
        "DELETE FROM rate_limiter.blocks".to_string(),
        format!("SELECT rate_limiter.with_block({bucket}, '1 minute')"),

        // An inline config for a defined limit overrides the definition:
        // managing the limit (a refill, or a deep debt), refused to a role
        // that may not call define().
        "SELECT * FROM rate_limiter.rate_limit('signup', 'k', 0, config => rate_limiter.token_bucket(1e12, '1 microsecond'))".to_string(),
        format!("SELECT * FROM rate_limiter.rate_limit('signup', 'victim', 1e8, reserve => true, config => {bucket})"),
        format!("SELECT * FROM rate_limiter.rate_check('signup', 'k', config => {bucket})"),
        format!("SELECT * FROM rate_limiter.rate_limit_all(ARRAY[('signup', 'k', 1, {bucket})]::rate_limiter.request[])"),
        format!("SELECT * FROM rate_limiter.rate_wait('signup', 'k', 1, '0', {bucket})"),
        format!("SELECT * FROM rate_limiter.status('signup', 'k', {bucket})"),
        format!("SELECT rate_limiter.http_headers('signup', 'k', config => {bucket})"),

        "SELECT * FROM rate_limiter.stats".to_string(),
        "SELECT rate_limiter.stats_reset()".to_string(),
        format!("SELECT rate_limiter.define('signup', {bucket}, enforce => false)"),
    ] {
        expect(&mut app, "app", &sql, denied.clone());
    }

    // The settings that move the clock or raise a bound. On the native
    // extension the SET is refused; on the portable edition they are
    // placeholders any role may SET, and the calls refuse them (the
    // clock) or never read them (the bound). (Where the native library is
    // loaded on the server, as on the test server, it defines them for
    // every database, and the portable edition's database refuses the SET
    // as the native one does.)
    if portable {
        let set_refused =
            |app: &mut Client, setting: &str| match app.batch_execute(&format!("SET {setting}")) {
                Ok(()) => false,
                Err(error) if error.code() == Some(&SqlState::INSUFFICIENT_PRIVILEGE) => true,
                Err(error) => panic!("app: SET {setting}: {error}"),
            };
        for setting in [
            "rate_limiter.now_override = '2030-01-01'",
            "rate_limiter.random_seed = 1",
        ] {
            if !set_refused(&mut app, setting) {
                expect(
                    &mut app,
                    "app",
                    "SELECT * FROM rate_limiter.rate_limit('inline_sharded', 'k', config => rate_limiter.token_bucket(10, '1 minute', shards => 2))",
                    denied.clone(),
                );
                expect(
                    &mut app,
                    "app",
                    &format!("RESET {}", setting.split(' ').next().unwrap_or_default()),
                    None,
                );
            }
        }
        if !set_refused(&mut app, "rate_limiter.max_requests = 100000") {
            expect(
                &mut app,
                "app",
                "SELECT * FROM rate_limiter.rate_limit_all(ARRAY(SELECT ('inline', 'k', 0, NULL)::rate_limiter.request FROM generate_series(1, 1001)))",
                Some(SqlState::PROGRAM_LIMIT_EXCEEDED),
            );
        }
        if !set_refused(&mut app, "rate_limiter.max_inline_shards = 100000") {
            expect(
                &mut app,
                "app",
                "SELECT * FROM rate_limiter.rate_limit('inline', 'k', config => rate_limiter.token_bucket(1000, '1 minute', shards => 65))",
                Some(SqlState::PROGRAM_LIMIT_EXCEEDED),
            );
        }
        expect(&mut app, "app", "RESET ALL", None);
    } else {
        for sql in [
            "SET rate_limiter.now_override = '2030-01-01'",
            "SET rate_limiter.random_seed = 1",
            "SET rate_limiter.max_requests = 100000",
            "SET rate_limiter.max_inline_shards = 100000",
        ] {
            expect(&mut app, "app", sql, denied.clone());
        }
    }

    // The HTTP API role is granted nothing.
    let mut web = connect_as("web_anon");
    for sql in [
        "SELECT * FROM rate_limiter.rate_limit('signup', 'k')",
        "SELECT * FROM rate_limiter.rate_check('signup', 'k')",
        "SELECT rate_limiter.rate_reset('signup', 'k')",
        "SELECT rate_limiter.postgrest_limit('signup', 'k')",
    ] {
        expect(&mut web, "web_anon", sql, denied.clone());
    }

    // The consumption the app made is there.
    let value: f64 = owner
        .query_one(
            "SELECT value FROM rate_limiter.rate_limits WHERE name = 'signup' AND key = 'k'",
            &[],
        )
        .expect("the app's consumption")
        .get(0);
    assert_eq!(value, 4.0);
    // The admin may override a definition inline (it could redefine the
    // limit anyway).
    expect(
        &mut admin,
        "admin",
        &format!("SELECT rate_limiter.rate_credit('signup', 'k', 0, {bucket})"),
        None,
    );
    drop((admin, app, web, monitor, owner));
    let mut superuser = Client::connect(&base_url(), NoTls).expect("connect as superuser");
    superuser
        .batch_execute(&format!("DROP DATABASE {DATABASE}"))
        .expect("drop the database");
    superuser
        .batch_execute("DROP ROLE app; DROP ROLE admin; DROP ROLE web_anon; DROP ROLE monitor;")
        .expect("drop the roles");
}
