//! The README as a newcomer uses it: every ```sql block, in order, as
//! written, through psql, in one new database, as the role the block's
//! first line names (`-- As the superuser...`, `-- As admin:`, `-- As
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

use rate_limiter_integration_tests::{drop_database, test_env};
use std::path::PathBuf;
use std::process::Command;

const DATABASE: &str = "rate_limiter_readme";

/// The roles the README's blocks create (and so drop first).
const ROLES: &[&str] = &["admin", "app", "monitor", "llm_worker"];

/// Blocks run by a test of their own, by marker.
const ELSEWHERE: &[&str] = &["cron"];

struct Block {
    /// The role the block runs as (the server's superuser for "the superuser").
    role: String,
    sql: String,
    /// The line of README.md where the block starts, for messages.
    line: usize,
}

/// Every ```sql block of README.md, with its role.
fn blocks() -> Vec<Block> {
    let path = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md"));
    let text = std::fs::read_to_string(&path).expect("read README.md");
    let mut blocks = Vec::new();
    let mut current: Option<Block> = None;
    let mut skipped_marker: Option<String> = None;
    for (index, line) in text.lines().enumerate() {
        if let Some(block) = current.as_mut() {
            if line.starts_with("```") {
                let block = current.take().expect("the open block");
                if skipped_marker.is_none() {
                    blocks.push(block);
                }
            } else {
                block.sql.push_str(line);
                block.sql.push('\n');
            }
            continue;
        }
        if let Some(marker) = line
            .strip_prefix("<!-- ")
            .and_then(|rest| rest.strip_suffix(":begin -->"))
        {
            skipped_marker = ELSEWHERE.contains(&marker).then(|| marker.to_string());
        } else if line.ends_with(":end -->") {
            skipped_marker = None;
        } else if line == "```sql" {
            current = Some(Block {
                role: String::new(),
                sql: String::new(),
                line: index + 1,
            });
        }
    }
    assert!(current.is_none(), "README.md ends inside a ```sql block");
    for block in &mut blocks {
        let first = block.sql.lines().next().unwrap_or("");
        let named = first
            .strip_prefix("-- As ")
            .unwrap_or_else(|| {
                panic!(
                    "README.md:{}: a SQL block's first line names its role (\"-- As app:\"), not {first:?}",
                    block.line
                )
            })
            .split([',', ':', ' '])
            .next()
            .unwrap_or("");
        block.role = match named {
            "the" => "postgres".to_string(),
            role => role.to_string(),
        };
    }
    blocks
}

/// A line as compared: trimmed, runs of spaces made one.
fn normal(line: &str) -> String {
    line.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Runs `sql` with psql from standard input in the README's database as
/// `role`, stopping at the first error: whether it succeeded, and what it
/// printed (standard output, then standard error).
fn psql(role: &str, sql: &str) -> (bool, String) {
    let bin = test_env("RATE_LIMITER_TEST_PG_BIN");
    let mut command = Command::new(format!("{bin}/psql"));
    let lib = PathBuf::from(&bin).join("../lib");
    if lib.join("libpq.so.5").exists() {
        command.env("LD_LIBRARY_PATH", lib);
    }
    let url = format!(
        "{} dbname={DATABASE} user={role}",
        test_env("RATE_LIMITER_TEST_URL")
    );
    let mut child = command
        .args(["-X", "-v", "ON_ERROR_STOP=1", "-d", &url])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run psql");
    use std::io::Write;
    child
        .stdin
        .take()
        .expect("psql's input")
        .write_all(sql.as_bytes())
        .expect("write the block");
    let output = child.wait_with_output().expect("psql's output");
    (
        output.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        ),
    )
}

/// Drops `role` if it exists, with what it owns and was granted in every
/// database (left by another test's run).
fn drop_role(admin: &mut postgres::Client, role: &str) {
    let exists = admin
        .query_opt("SELECT 1 FROM pg_roles WHERE rolname = $1", &[&role])
        .expect("look for the role")
        .is_some();
    if !exists {
        return;
    }
    let databases: Vec<String> = admin
        .query(
            "SELECT datname FROM pg_database WHERE datallowconn ORDER BY datname",
            &[],
        )
        .expect("list the databases")
        .iter()
        .map(|row| row.get(0))
        .collect();
    for database in databases {
        let mut client = postgres::Client::connect(
            &format!("{} dbname={database}", test_env("RATE_LIMITER_TEST_URL")),
            postgres::NoTls,
        )
        .expect("connect to a database");
        client
            .batch_execute(&format!("DROP OWNED BY {role}"))
            .expect("drop what the role owns");
    }
    admin
        .batch_execute(&format!("DROP ROLE {role}"))
        .expect("drop the role");
}

#[test]
fn every_sql_block_of_the_readme_runs_as_written_and_gives_what_it_claims() {
    let blocks = blocks();
    assert!(blocks.len() >= 10, "found {} SQL blocks", blocks.len());
    drop_database(DATABASE);
    let mut admin = postgres::Client::connect(&test_env("RATE_LIMITER_TEST_URL"), postgres::NoTls)
        .expect("connect to the test server");
    for role in ROLES {
        drop_role(&mut admin, role);
    }
    for statement in [
        format!("CREATE DATABASE {DATABASE}"),
        format!("ALTER DATABASE {DATABASE} SET rate_limiter.now_override = '2026-01-01 00:00:00+00'"),
        format!("ALTER DATABASE {DATABASE} SET TimeZone = 'UTC'"),
    ] {
        admin.batch_execute(&statement).expect("create the database");
    }
    for block in &blocks {
        let (ok, output) = psql(&block.role, &block.sql);
        assert!(
            ok,
            "README.md:{}: the block failed as {}:\n{}\n{output}",
            block.line, block.role, block.sql
        );
        let lines: Vec<String> = output.lines().map(normal).collect();
        let mut from = 0;
        for claim in block.sql.lines().filter_map(|line| line.strip_prefix("--  ")) {
            let claim = normal(claim);
            match lines[from..].iter().position(|line| *line == claim) {
                Some(at) => from += at + 1,
                None => panic!(
                    "README.md:{}: the block claims\n  {claim}\nbut psql printed (from the claim before on):\n{}",
                    block.line,
                    lines[from..].join("\n")
                ),
            }
        }
    }
    drop(admin);
    drop_database(DATABASE);
    let mut admin = postgres::Client::connect(&test_env("RATE_LIMITER_TEST_URL"), postgres::NoTls)
        .expect("connect to the test server");
    for role in ROLES {
        drop_role(&mut admin, role);
    }
}

/// Versions in the documentation come from one place, Cargo.toml's
/// `version` (which the control file and the packages take): every
/// package file name and every "version X.Y.Z" of this extension in
/// README.md and docs/*.md says either that version, `<version>`, or a
/// released version that has its script in sql/released/.
#[test]
fn the_documentation_names_only_versions_that_exist() {
    let root = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."));
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
                .take_while(|c| c.is_ascii_digit() || *c == '.' || *c == '<' || *c == '>' || c.is_ascii_lowercase())
                .collect();
            let version = version.trim_end_matches('.');
            assert!(
                version == current || version == "<version>" || released.iter().any(|r| r == version),
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
