//! Every ```sql block of the pages in docs/, run as written through psql,
//! in order, page by page, each page in a new database with the extension
//! (as the server's superuser: the pages are reference, not a walk-through
//! with roles, which the README is), and what a block claims checked.
//!
//! What a block assumes but does not create (a table a trigger example
//! guards, a limit it calls) is created first by `SETUP`, named by the
//! page and the block's first line; nothing in a block is changed. Not run
//! here: blocks between `<!-- NAME:begin/end -->` markers, which tests of
//! their own run (doc_examples.rs, portable_switch.rs, postgrest_login.rs,
//! roles.rs and the Citus tests); recipes.md, the README's continuation
//! (readme.rs runs it, as the README's roles); Citus's pages (citus.md,
//! citus-design.md) and the reference's Citus functions (`CITUS_ONLY`),
//! which need a Citus cluster: not run as written anywhere (the Citus tests call the same
//! functions with their own arguments).

use rate_limiter_integration_tests::doc_blocks::{
    check_claims, drop_role, psql, repository_file, sql_blocks,
};
use rate_limiter_integration_tests::{drop_database, test_env};

/// Pages not run here: they need a Citus cluster, or (recipes.md) the
/// README's roles: readme.rs runs it after the README.
const NOT_RUN_HERE: &[&str] = &["citus.md", "citus-design.md", "recipes.md"];

/// Blocks that need a Citus cluster, by page and first line.
const CITUS_ONLY: &[(&str, &str)] = &[
    ("reference.md", "SELECT rate_limiter.distribute("),
    ("reference.md", "SELECT rate_limiter.undistribute();"),
    ("reference.md", "SELECT rate_limiter.prepare_node("),
];

/// What a block assumes, by page and the start of its first line.
const SETUP: &[(&str, &str, &str)] = &[
    (
        "reference.md",
        "SELECT ok, retry_after FROM rate_limiter.rate_limit('llm'",
        "SELECT rate_limiter.define('llm', rate_limiter.token_bucket(40000, '1 minute', max_reserved => 40000));",
    ),
    (
        "reference.md",
        "CREATE TRIGGER guard BEFORE INSERT OR UPDATE ON signups",
        "CREATE TABLE signups (email text); CREATE TABLE members (org text, seats int);
         SELECT rate_limiter.define('seats', rate_limiter.token_bucket(10, '1 day'));",
    ),
    (
        "postgrest.md",
        "-- PostgREST's roles",
        "CREATE ROLE app;",
    ),
];

/// Roles a page's blocks (or their set-up) create, dropped before and after.
const ROLES: &[&str] = &["authenticator", "web_anon", "authenticated", "app"];

#[test]
fn every_sql_block_of_the_docs_runs_as_written_and_gives_what_it_claims() {
    let mut pages: Vec<String> = std::fs::read_dir(repository_file("docs"))
        .expect("read docs/")
        .map(|entry| {
            entry
                .expect("an entry of docs/")
                .file_name()
                .into_string()
                .expect("a name")
        })
        .filter(|name| name.ends_with(".md") && !NOT_RUN_HERE.contains(&name.as_str()))
        .collect();
    pages.sort();
    for role in ROLES {
        drop_role(role);
    }
    let (mut ran, mut citus_only, mut setups) = (0, 0, 0);
    for page in &pages {
        let blocks: Vec<_> = sql_blocks(&repository_file(&format!("docs/{page}")))
            .into_iter()
            .filter(|block| block.marker.is_none())
            .collect();
        if blocks.is_empty() {
            continue;
        }
        let database = format!(
            "rate_limiter_docs_{}",
            page.trim_end_matches(".md").replace('-', "_")
        );
        drop_database(&database);
        let mut admin =
            postgres::Client::connect(&test_env("RATE_LIMITER_TEST_URL"), postgres::NoTls)
                .expect("connect to the test server");
        for statement in [
            format!("CREATE DATABASE {database}"),
            format!("ALTER DATABASE {database} SET rate_limiter.now_override = '2026-01-01 00:00:00+00'"),
            format!("ALTER DATABASE {database} SET TimeZone = 'UTC'"),
        ] {
            admin.batch_execute(&statement).expect("create the database");
        }
        drop(admin);
        let (created, output) = psql(&database, "postgres", "CREATE EXTENSION rate_limiter;");
        assert!(created, "create the extension: {output}");
        for block in &blocks {
            let first = block.sql.lines().next().unwrap_or("");
            let place = format!("docs/{page}:{}", block.line);
            if CITUS_ONLY
                .iter()
                .any(|(p, start)| p == page && first.starts_with(start))
            {
                citus_only += 1;
                continue;
            }
            if let Some((_, _, setup)) = SETUP
                .iter()
                .find(|(p, start, _)| p == page && first.starts_with(start))
            {
                let (ok, output) = psql(&database, "postgres", setup);
                assert!(ok, "{place}: the set-up failed:\n{output}");
                setups += 1;
            }
            let (ok, output) = psql(&database, "postgres", &block.sql);
            assert!(ok, "{place}: the block failed:\n{}\n{output}", block.sql);
            check_claims(&place, &block.sql, &output);
            ran += 1;
        }
        drop_database(&database);
    }
    for role in ROLES {
        drop_role(role);
    }
    // A stale entry (a block renamed or gone) fails here, not silently.
    assert_eq!(
        citus_only,
        CITUS_ONLY.len(),
        "every Citus-only block was found"
    );
    assert_eq!(setups, SETUP.len(), "every set-up was used");
    assert!(ran >= 10, "ran {ran} blocks");
}
