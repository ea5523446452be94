//! The README as a newcomer uses it: every ```sql block, in order (then
//! those of docs/recipes.md, its continuation), as written, through psql,
//! in one new database, as the role the block's first line names (`-- As the superuser...`, `-- As admin:`, `-- As
//! app:`), and what a block claims (its comment lines that start with two
//! spaces, psql's aligned output as a reader sees it: `--  ok | retry_after`)
//! appears in psql's output in order, runs of spaces made one.
//!
//! The database's clock is stopped at 2026-01-01 00:00:00 UTC (`ALTER
//! DATABASE ... SET rate_limiter.now_override`), so that what a block
//! claims (a `retry_after` of 30 s) is exact; nothing in a block is
//! changed. The roles the README creates are dropped first, everywhere, so
//! that its `CREATE ROLE` block runs as written. The one block not run
//! here is pg_cron's, which needs pg_cron's database: `cron.rs` runs it.
//! (The blocks are read and run by `doc_blocks`, shared with
//! `docs_blocks.rs`.)

use rate_limiter_integration_tests::doc_blocks::{
    check_claims, drop_role, psql, repository_file, sql_blocks,
};
use rate_limiter_integration_tests::{drop_database, test_env};

const DATABASE: &str = "rate_limiter_readme";

/// The roles the README's blocks create (and so drop first).
const ROLES: &[&str] = &["admin", "app", "monitor", "llm_worker"];

/// Blocks run by a test of their own, by marker.
const ELSEWHERE: &[&str] = &["cron"];

/// The role a README block names on its first line: `-- As the
/// superuser...` is the server's superuser, `-- As app:` is `app`.
fn role_of(place: &str, sql: &str) -> String {
    let first = sql.lines().next().unwrap_or("");
    let named = first
        .strip_prefix("-- As ")
        .unwrap_or_else(|| {
            panic!(
                "{place}: a SQL block's first line names its role (\"-- As app:\"), not {first:?}"
            )
        })
        .split([',', ':', ' '])
        .next()
        .unwrap_or("");
    match named {
        "the" => "postgres".to_string(),
        role => role.to_string(),
    }
}

/// The pages read as the README's continuation (its roles, its database),
/// after it, in this order.
const CONTINUED_IN: &[&str] = &["docs/recipes.md"];

#[test]
fn every_sql_block_of_the_readme_runs_as_written_and_gives_what_it_claims() {
    let mut blocks = Vec::new();
    for file in std::iter::once("README.md").chain(CONTINUED_IN.iter().copied()) {
        let found: Vec<_> = sql_blocks(&repository_file(file))
            .into_iter()
            .filter(|block| {
                !block
                    .marker
                    .as_deref()
                    .is_some_and(|m| ELSEWHERE.contains(&m))
            })
            .map(|block| (file, block))
            .collect();
        assert!(!found.is_empty(), "{file}: no SQL block");
        blocks.extend(found);
    }
    assert!(blocks.len() >= 10, "found {} SQL blocks", blocks.len());
    drop_database(DATABASE);
    for role in ROLES {
        drop_role(role);
    }
    let mut admin = postgres::Client::connect(&test_env("RATE_LIMITER_TEST_URL"), postgres::NoTls)
        .expect("connect to the test server");
    for statement in [
        format!("CREATE DATABASE {DATABASE}"),
        format!(
            "ALTER DATABASE {DATABASE} SET rate_limiter.now_override = '2026-01-01 00:00:00+00'"
        ),
        format!("ALTER DATABASE {DATABASE} SET TimeZone = 'UTC'"),
    ] {
        admin
            .batch_execute(&statement)
            .expect("create the database");
    }
    drop(admin);
    for (file, block) in &blocks {
        let place = format!("{file}:{}", block.line);
        let role = role_of(&place, &block.sql);
        let (ok, output) = psql(DATABASE, &role, &block.sql);
        assert!(
            ok,
            "{place}: the block failed as {role}:\n{}\n{output}",
            block.sql
        );
        check_claims(&place, &block.sql, &output);
    }
    drop_database(DATABASE);
    for role in ROLES {
        drop_role(role);
    }
}

/// Versions in the documentation come from one place, Cargo.toml's
/// `version` (which the control file and the packages take): every
/// package file name and every "version X.Y.Z" of this extension in
/// README.md and docs/*.md says either that version, `<version>`, or a
/// released version that has its script in sql/released/.
#[test]
fn the_documentation_names_only_versions_that_exist() {
    let root = repository_file("");
    let cargo = std::fs::read_to_string(root.join("Cargo.toml")).expect("read Cargo.toml");
    let current = cargo
        .lines()
        .find_map(|line| line.strip_prefix("version = \""))
        .and_then(|rest| rest.strip_suffix('"'))
        .expect("Cargo.toml's version");
    let released: Vec<String> = std::fs::read_dir(root.join("sql/released"))
        .expect("read sql/released")
        .filter_map(|entry| {
            let name = entry.expect("an entry").file_name().into_string().ok()?;
            name.strip_prefix("rate_limiter--")?
                .strip_suffix(".sql")
                .map(str::to_string)
        })
        .collect();
    let mut files = vec![root.join("README.md")];
    files.extend(
        std::fs::read_dir(root.join("docs"))
            .expect("read docs/")
            .map(|entry| entry.expect("an entry of docs/").path())
            .filter(|path| path.extension().is_some_and(|ext| ext == "md")),
    );
    for path in files {
        let text = std::fs::read_to_string(&path).expect("read a document");
        for (at, _) in text.match_indices("rate-limiter_") {
            let version: String = text[at + "rate-limiter_".len()..]
                .chars()
                .take_while(|c| {
                    c.is_ascii_digit()
                        || *c == '.'
                        || *c == '<'
                        || *c == '>'
                        || c.is_ascii_lowercase()
                })
                .collect();
            let version = version.trim_end_matches('.');
            assert!(
                version == current
                    || version == "<version>"
                    || released.iter().any(|r| r == version),
                "{}: a package of version {version:?}, which is neither {current} nor released",
                path.display()
            );
        }
    }
    // The README itself names no version of the extension: what it
    // installs is the clone's.
    let readme = std::fs::read_to_string(root.join("README.md")).expect("read README.md");
    assert!(
        !readme.contains(current) && !released.iter().any(|r| readme.contains(&format!(" {r}"))),
        "README.md names a version of the extension; it should name none"
    );
}
