//! docs/guarantees.md, "Portable edition" (switching editions): the
//! README's two procedures, run as written (the blocks between
//! `<!-- switch-to-portable:begin -->` / `end` and
//! `<!-- switch-to-native:begin -->` / `end`, with psql, as the README
//! says), keep every definition, override and state row (its regime
//! included) and every answer.
//!
//! Two databases get the same calls at the same (overridden) times: one
//! keeps the native extension throughout, the other switches to the
//! portable edition and back. Before and after each switch their
//! definitions and state rows are the same, and so is every answer.

use postgres::{Client, NoTls};
use rate_limiter_integration_tests::{fresh_database, portable, readme_sql};

const STAYS: &str = "rate_limiter_switch_stays";
const SWITCHES: &str = "rate_limiter_switch_switches";

/// Calls at the clock `at` (seconds after 2026-01-01): their answers as text.
fn calls(client: &mut Client, at: u32) -> Vec<String> {
    client
        .batch_execute(&format!(
            "SET rate_limiter.now_override = '{}'; SET rate_limiter.random_seed = 3",
            chrono(at)
        ))
        .expect("the clock");
    let mut answers = Vec::new();
    for sql in [
        "SELECT ok, retry_after, remaining FROM rate_limiter.rate_limit('switch_bucket', 'alice', 3)",
        "SELECT ok, retry_after, remaining FROM rate_limiter.rate_limit('switch_bucket', 'bob', 4, reserve => true)",
        "SELECT ok, retry_after, remaining FROM rate_limiter.rate_limit('switch_window')",
        "SELECT ok, retry_after, remaining FROM rate_limiter.rate_limit('switch_sharded')",
        "SELECT ok, retry_after, remaining FROM rate_limiter.rate_limit('switch_shadow', 'k', 2)",
        "SELECT ok, retry_after, remaining FROM rate_limiter.rate_limit('switch_inline', 'k', config => rate_limiter.token_bucket(2, '1 minute'))",
        "SELECT value, capacity, full_at, shards FROM rate_limiter.status('switch_bucket', 'alice')",
        // Keys with overrides: a plan of the same kind, a config of
        // another kind (its rows carry a regime).
        "SELECT ok, retry_after, remaining FROM rate_limiter.rate_limit('switch_bucket', 'vip', 4)",
        "SELECT ok, retry_after, remaining FROM rate_limiter.rate_limit('switch_bucket', 'windowed')",
        // Blocks: by hand, and automatic ones (each call here uses up a
        // limit of 2 an hour every second call, longer each time).
        "SELECT ok, retry_after, remaining FROM rate_limiter.rate_limit('switch_window', 'mallory')",
        "SELECT ok, retry_after, remaining FROM rate_limiter.rate_limit('switch_login', 'eve')",
        "SELECT until, strikes, reason FROM rate_limiter.blocked('switch_login', 'eve')",
        // The shapes (a sliding window's previous count, a calendar
        // window's zone) and a composite of them.
        "SELECT ok, retry_after, remaining FROM rate_limiter.rate_limit('switch_both', 'k', 2)",
        "SELECT value, capacity, full_at, shards FROM rate_limiter.status('switch_calendar', 'k')",
        "SELECT ok, retry_after, remaining FROM rate_limiter.rate_check('switch_sliding', 'k', 1)",
    ] {
        for row in client.simple_query(sql).expect(sql) {
            if let postgres::SimpleQueryMessage::Row(row) = row {
                answers.push(
                    (0..row.len())
                        .map(|i| row.get(i).unwrap_or("NULL").to_string())
                        .collect::<Vec<_>>()
                        .join("|"),
                );
            }
        }
    }
    answers
}

fn chrono(seconds: u32) -> String {
    format!(
        "2026-01-01 {:02}:{:02}:{:02}+00",
        seconds / 3600,
        seconds / 60 % 60,
        seconds % 60
    )
}

/// The definitions, the overrides, the state rows, the blocks and the
/// composites, as text.
#[allow(clippy::type_complexity)]
fn contents(
    client: &mut Client,
) -> (
    Vec<String>,
    Vec<String>,
    Vec<String>,
    Vec<String>,
    Vec<String>,
) {
    let text = |client: &mut Client, sql: &str| -> Vec<String> {
        client
            .query(sql, &[])
            .expect(sql)
            .iter()
            .map(|row| row.get::<_, String>(0))
            .collect()
    };
    (
        text(client, "SELECT d::text FROM rate_limiter.definitions AS d ORDER BY name"),
        text(client, "SELECT o::text FROM rate_limiter.overrides AS o ORDER BY name, key"),
        text(
            client,
            "SELECT (name, key, shard, value, ts, regime, prev)::text FROM rate_limiter.rate_limits ORDER BY name, key, shard",
        ),
        text(client, "SELECT b::text FROM rate_limiter.blocks AS b ORDER BY name, key"),
        text(client, "SELECT c::text FROM rate_limiter.composites AS c ORDER BY name"),
    )
}

/// Runs the README's block `marker` with psql in `database` (from the
/// repository, where its `\i dist/...` is).
fn run_readme_block(database: &str, marker: &str) {
    let file = std::env::temp_dir().join(format!("rate_limiter_{marker}.sql"));
    std::fs::write(&file, readme_sql(marker)).expect("write the block");
    std::env::set_current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
        .expect("the repository");
    if let Err(output) = portable::psql_file(database, "postgres", &file) {
        panic!("the README's {marker} block failed:\n{output}");
    }
}

#[test]
fn switching_editions_keeps_every_limit_and_answer() {
    let mut stays = fresh_database(STAYS);
    let mut switches = fresh_database(SWITCHES);
    rate_limiter_integration_tests::readme_roles(&mut switches);
    for client in [&mut stays, &mut switches] {
        client
            .batch_execute(
                "SELECT rate_limiter.define('switch_bucket', rate_limiter.token_bucket(10, '1 minute', max_reserved => 5));
                 SELECT rate_limiter.define('switch_window', rate_limiter.fixed_window(3, '1 hour'));
                 SELECT rate_limiter.define('switch_sharded', rate_limiter.token_bucket(40, '1 minute', shards => 4));
                 SELECT rate_limiter.define('switch_shadow', rate_limiter.token_bucket(3, '1 hour'), enforce => false);
                 SELECT rate_limiter.define('switch_pro', rate_limiter.token_bucket(100, '1 minute'));
                 SELECT rate_limiter.override('switch_bucket', 'vip', plan => 'switch_pro');
                 SELECT rate_limiter.override('switch_bucket', 'windowed',
                     config => rate_limiter.fixed_window(5, '1 hour', start => '2026-01-01'),
                     expires_at => '2026-01-01 00:00:50+00');
                 SELECT rate_limiter.define('switch_login', rate_limiter.with_block(
                     rate_limiter.fixed_window(2, '1 hour', start => '2026-01-01'), '1 minute', '1 hour'));
                 SET rate_limiter.now_override = '2026-01-01 00:00:00+00';
                 SELECT rate_limiter.block('switch_window', 'mallory', '1 day', 'by hand');
                 RESET rate_limiter.now_override;
                 SELECT rate_limiter.define('switch_sliding', rate_limiter.sliding_window(5, '10 seconds', start => '2026-01-01'));
                 SELECT rate_limiter.define('switch_calendar', rate_limiter.calendar_window(9, 'hour', 'Asia/Kolkata'));
                 SELECT rate_limiter.define_all('switch_both', ARRAY['switch_sliding', 'switch_calendar']);",
            )
            .expect("define the limits");
    }
    let mut at = 0;
    for _ in 0..3 {
        assert_eq!(calls(&mut stays, at), calls(&mut switches, at));
        at += 7;
    }
    for (marker, edition) in [
        ("switch-to-portable", "portable"),
        ("switch-to-native", "native"),
    ] {
        assert_eq!(
            contents(&mut stays),
            contents(&mut switches),
            "before {marker}"
        );
        drop(switches);
        run_readme_block(SWITCHES, marker);
        switches = rate_limiter_integration_tests::connect_to(SWITCHES, "postgres");
        // "The role block above, again", as the README says.
        rate_limiter_integration_tests::readme_roles(&mut switches);
        let extension: bool = switches
            .query_one(
                "SELECT EXISTS (SELECT FROM pg_extension WHERE extname = 'rate_limiter')",
                &[],
            )
            .expect("the edition")
            .get(0);
        assert_eq!(extension, edition == "native", "{marker}");
        assert_eq!(
            contents(&mut stays),
            contents(&mut switches),
            "after {marker}"
        );
        for _ in 0..3 {
            assert_eq!(
                calls(&mut stays, at),
                calls(&mut switches, at),
                "{marker}, at {at} s"
            );
            at += 7;
        }
        // The README's roles work again.
        let mut app = rate_limiter_integration_tests::connect_to(SWITCHES, "app");
        app.query_one(
            "SELECT ok FROM rate_limiter.rate_check('switch_bucket', 'alice')",
            &[],
        )
        .unwrap_or_else(|e| panic!("the app role after {marker}: {e}"));
        let denied = app
            .query("SELECT * FROM rate_limiter.rate_limits", &[])
            .expect_err("the app role cannot read the table");
        assert_eq!(
            denied.code(),
            Some(&postgres::error::SqlState::INSUFFICIENT_PRIVILEGE)
        );
    }
    drop((stays, switches));
    let mut superuser = Client::connect(
        &rate_limiter_integration_tests::test_env("RATE_LIMITER_TEST_URL"),
        NoTls,
    )
    .expect("connect");
    for database in [STAYS, SWITCHES] {
        superuser
            .batch_execute(&format!("DROP DATABASE {database} WITH (FORCE)"))
            .expect("drop");
    }
}
