//! Running the documentation's SQL blocks as a reader copies them: the
//! ```sql blocks of a Markdown file, run through psql as written, and what
//! a block claims (its comment lines that start with two spaces, psql's
//! aligned output: `--  ok | retry_after`) checked against psql's output.
//! Used by `readme.rs` (the README, in order, as the role each block
//! names) and `docs_blocks.rs` (every other page).

use crate::test_env;
use std::path::{Path, PathBuf};
use std::process::Command;

/// One ```sql block of a document.
pub struct Block {
    /// The document's line where the block's fence opens, for messages.
    pub line: usize,
    /// The block's text, as written.
    pub sql: String,
    /// The `<!-- NAME:begin -->` marker the block is inside, if any.
    pub marker: Option<String>,
}

/// The repository's file `relative` (e.g. `README.md`, `docs/reference.md`).
pub fn repository_file(relative: &str) -> PathBuf {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../..")).join(relative)
}

/// Every ```sql block of the Markdown file at `path`, in order.
pub fn sql_blocks(path: &Path) -> Vec<Block> {
    let text =
        std::fs::read_to_string(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    let mut blocks = Vec::new();
    let mut current: Option<Block> = None;
    let mut marker: Option<String> = None;
    for (index, line) in text.lines().enumerate() {
        if let Some(block) = current.as_mut() {
            if line.starts_with("```") {
                blocks.push(current.take().expect("the open block"));
            } else {
                block.sql.push_str(line);
                block.sql.push('\n');
            }
            continue;
        }
        if let Some(name) = line
            .strip_prefix("<!-- ")
            .and_then(|rest| rest.strip_suffix(":begin -->"))
        {
            marker = Some(name.to_string());
        } else if line.ends_with(":end -->") {
            marker = None;
        } else if line == "```sql" {
            current = Some(Block {
                line: index + 1,
                sql: String::new(),
                marker: marker.clone(),
            });
        }
    }
    assert!(
        current.is_none(),
        "{} ends inside a ```sql block",
        path.display()
    );
    blocks
}

/// Runs `sql` with psql from standard input in `database` as `role`,
/// stopping at the first error: whether it succeeded, and what it printed
/// (standard output, then standard error).
pub fn psql(database: &str, role: &str, sql: &str) -> (bool, String) {
    psql_with(database, role, sql, &["-v", "ON_ERROR_STOP=1"])
}

/// [`psql`] with psql's `options` (after `-X`) instead of stopping at the
/// first error.
pub fn psql_with(database: &str, role: &str, sql: &str, options: &[&str]) -> (bool, String) {
    let bin = test_env("RATE_LIMITER_TEST_PG_BIN");
    let mut command = Command::new(format!("{bin}/psql"));
    let lib = PathBuf::from(&bin).join("../lib");
    if lib.join("libpq.so.5").exists() {
        command.env("LD_LIBRARY_PATH", lib);
    }
    let url = format!(
        "{} dbname={database} user={role}",
        test_env("RATE_LIMITER_TEST_URL")
    );
    let mut child = command
        .arg("-X")
        .args(options)
        .args(["-d", &url])
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

/// A line as compared: trimmed, runs of spaces made one.
fn normal(line: &str) -> String {
    line.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Checks that every line `sql` claims (`--  ...`) appears in `output`, in
/// order; `place` names the block in the message.
pub fn check_claims(place: &str, sql: &str, output: &str) {
    let lines: Vec<String> = output.lines().map(normal).collect();
    let mut from = 0;
    for claim in sql.lines().filter_map(|line| line.strip_prefix("--  ")) {
        let claim = normal(claim);
        match lines[from..].iter().position(|line| *line == claim) {
            Some(at) => from += at + 1,
            None => panic!(
                "{place}: the block claims\n  {claim}\nbut psql printed (from the claim before on):\n{}",
                lines[from..].join("\n")
            ),
        }
    }
}

/// Drops `role` if it exists, with what it owns and was granted in every
/// database (left by another test's run).
pub fn drop_role(role: &str) {
    let mut admin = postgres::Client::connect(&test_env("RATE_LIMITER_TEST_URL"), postgres::NoTls)
        .expect("connect to the test server");
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
