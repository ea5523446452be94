//! Released versions: their install scripts are kept and never edited, and
//! a database that uses the extension survives `pg_dump` and `pg_restore`
//! with every definition, override and state row (a restore must not hand
//! everyone a full bucket, nor take a customer's plan away).

use postgres::{Client, NoTls};
use sha2::{Digest, Sha256};
use std::path::Path;
use std::process::Command;

fn base_url() -> String {
    std::env::var("RATE_LIMITER_TEST_URL")
        .expect("RATE_LIMITER_TEST_URL is not set: run the tests through scripts/test.sh")
}

/// Every install script in sql/released/ is listed in its SHA256SUMS with
/// the hash it was released with: a released script is never edited (fix
/// it with an upgrade script instead).
#[test]
fn released_install_scripts_are_never_edited() {
    let released = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../sql/released");
    let sums = std::fs::read_to_string(released.join("SHA256SUMS")).expect("SHA256SUMS");
    let mut listed = Vec::new();
    for line in sums.lines().filter(|line| !line.trim().is_empty()) {
        let (hash, file) = line.split_once("  ").expect("'<sha256>  <file>' lines");
        let script = std::fs::read(released.join(file)).unwrap_or_else(|e| panic!("{file}: {e}"));
        let actual = format!("{:x}", Sha256::digest(&script));
        assert_eq!(actual, hash, "{file} was edited after its release");
        listed.push(file.to_string());
    }
    for entry in std::fs::read_dir(&released).expect("sql/released") {
        let name = entry
            .expect("entry")
            .file_name()
            .to_string_lossy()
            .to_string();
        if name.ends_with(".sql") {
            assert!(listed.contains(&name), "{name} is not listed in SHA256SUMS");
        }
    }
    assert!(listed.iter().any(|file| file == "rate_limiter--0.1.0.sql"));
}

/// The definitions, overrides, state, answers and blocks of a database, as
/// text, in a stable order.
type Snapshot = (
    Vec<String>,
    Vec<String>,
    Vec<String>,
    Vec<String>,
    Vec<String>,
);

fn snapshot(client: &mut Client) -> Snapshot {
    let rows = |client: &mut Client, sql: &str| -> Vec<String> {
        client
            .query(sql, &[])
            .expect(sql)
            .iter()
            .map(|row| row.get::<_, String>(0))
            .collect()
    };
    let definitions = rows(
        client,
        "SELECT d::text FROM rate_limiter.definitions d ORDER BY name",
    );
    let overrides = rows(
        client,
        "SELECT o::text FROM rate_limiter.overrides o ORDER BY name, key",
    );
    let state = rows(
        client,
        "SELECT s::text FROM rate_limiter.rate_limits s ORDER BY name, key NULLS FIRST, shard",
    );
    client
        .batch_execute("SET rate_limiter.now_override = '2026-01-01 00:00:07+00'")
        .expect("set the clock");
    let answers = rows(
        client,
        "SELECT format('%s %s %s', p.name, coalesce(p.key, '(global)'), r)
         FROM (VALUES ('chat', 'alice'), ('chat', NULL), ('llm', 'org'), ('hot', NULL), ('window', 'w'),
                      ('chat', 'vip'), ('chat', 'boosted'), ('chat', 'mallory'), ('login', 'eve')) p(name, key),
         LATERAL rate_limiter.rate_check(p.name, p.key, 1) r ORDER BY 1",
    );
    let blocks = rows(
        client,
        "SELECT b::text FROM rate_limiter.blocks b ORDER BY name, key",
    );
    (definitions, overrides, state, answers, blocks)
}

#[test]
fn dump_and_restore_keep_definitions_and_state() {
    let bin = std::env::var("RATE_LIMITER_TEST_PG_BIN").expect("RATE_LIMITER_TEST_PG_BIN");
    let port = base_url()
        .split_whitespace()
        .find_map(|part| part.strip_prefix("port="))
        .expect("a port in RATE_LIMITER_TEST_URL")
        .to_string();
    let mut admin = Client::connect(&base_url(), NoTls).expect("connect");
    for sql in [
        "DROP DATABASE IF EXISTS rl_dump_source",
        "DROP DATABASE IF EXISTS rl_dump_target",
        "CREATE DATABASE rl_dump_source",
        "CREATE DATABASE rl_dump_target",
    ] {
        admin.batch_execute(sql).expect(sql);
    }
    let connect = |database: &str| {
        Client::connect(&format!("{} dbname={database}", base_url()), NoTls).expect("connect")
    };
    let mut source = connect("rl_dump_source");
    source
        .batch_execute(
            "CREATE EXTENSION rate_limiter;
             SET rate_limiter.now_override = '2026-01-01 00:00:00+00';
             SELECT rate_limiter.define('chat', rate_limiter.token_bucket(10, '1 minute', capacity => 3));
             SELECT rate_limiter.define('llm', rate_limiter.token_bucket(40000, '1 minute'));
             SELECT rate_limiter.define('hot', rate_limiter.token_bucket(100, '1 second', shards => 4));
             SELECT rate_limiter.define('window', rate_limiter.fixed_window(5, '1 minute'));
             SELECT * FROM rate_limiter.rate_limit('chat', 'alice', 2);
             SELECT * FROM rate_limiter.rate_limit('chat', NULL, 3);
             SELECT * FROM rate_limiter.rate_limit('llm', 'org', 50000, reserve => true);
             SELECT * FROM rate_limiter.rate_limit('hot', NULL, 40);
             SELECT * FROM rate_limiter.rate_limit('window', 'w', 4);
             SELECT rate_limiter.override('chat', 'vip', plan => 'window');
             SELECT rate_limiter.override('chat', 'boosted', config => rate_limiter.token_bucket(100, '1 minute'),
                                          expires_at => '2026-02-01 00:00:00+00');
             SELECT * FROM rate_limiter.rate_limit('chat', 'vip', 2);
             SELECT * FROM rate_limiter.rate_limit('chat', 'boosted', 30);
             SELECT rate_limiter.block('chat', 'mallory', '1 day', 'abuse');
             SELECT rate_limiter.define('login', rate_limiter.with_block(
                 rate_limiter.fixed_window(2, '1 hour', start => '2026-01-01'), '1 minute'));
             SELECT * FROM rate_limiter.rate_limit('login', 'eve', 2);",
        )
        .expect("definitions and state");
    let before = snapshot(&mut source);
    assert!(!before.1.is_empty() && !before.2.is_empty());

    let dump = std::env::temp_dir().join(format!("rl_dump_{}.dump", std::process::id()));
    let status = Command::new(format!("{bin}/pg_dump"))
        .args([
            "-h",
            "127.0.0.1",
            "-p",
            &port,
            "-U",
            "postgres",
            "-Fc",
            "-f",
        ])
        .arg(&dump)
        .arg("rl_dump_source")
        .status()
        .expect("run pg_dump");
    assert!(status.success(), "pg_dump failed");
    let status = Command::new(format!("{bin}/pg_restore"))
        .args([
            "-h",
            "127.0.0.1",
            "-p",
            &port,
            "-U",
            "postgres",
            "--exit-on-error",
            "-d",
            "rl_dump_target",
        ])
        .arg(&dump)
        .status()
        .expect("run pg_restore");
    let _ = std::fs::remove_file(&dump);
    assert!(status.success(), "pg_restore failed");

    let mut target = connect("rl_dump_target");
    let after = snapshot(&mut target);
    assert_eq!(
        before, after,
        "the restore differs from the dumped database"
    );
    drop((source, target));
    for sql in [
        "DROP DATABASE rl_dump_source",
        "DROP DATABASE rl_dump_target",
    ] {
        admin.batch_execute(sql).expect(sql);
    }
}
