//! The portable edition (docs/guarantees.md, "Portable edition") on the
//! test server: databases where it is installed from its plain SQL release
//! file (`dist/rate_limiter-portable.sql`, built by `scripts/portable.sh`),
//! run with psql as a user would run it. The native extension's files on
//! the server change nothing for it, so it runs beside the native
//! extension's databases.

use postgres::{Client, NoTls};
use std::path::PathBuf;
use std::process::Command;

/// The plain release file, built by `scripts/portable.sh`.
pub fn plain_file() -> PathBuf {
    let path = PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../dist/rate_limiter-portable.sql"
    ));
    assert!(
        path.exists(),
        "{} is missing: run scripts/portable.sh (scripts/test.sh does)",
        path.display()
    );
    path
}

fn base_url() -> String {
    crate::test_env("RATE_LIMITER_TEST_URL")
}

/// Runs `file` with psql (`-v ON_ERROR_STOP=1 -f`, as the README says) in
/// `database` as `user`: psql's output, or what it printed when it failed.
pub fn psql_file(database: &str, user: &str, file: &std::path::Path) -> Result<String, String> {
    let bin = crate::test_env("RATE_LIMITER_TEST_PG_BIN");
    let mut command = Command::new(format!("{bin}/psql"));
    // PostgreSQL 16-18 are relocatable trees: their psql needs their libpq.
    let lib = PathBuf::from(&bin).join("../lib");
    if lib.join("libpq.so.5").exists() {
        command.env("LD_LIBRARY_PATH", lib);
    }
    let output = command
        .arg("-X")
        .arg("-v")
        .arg("ON_ERROR_STOP=1")
        .arg("-d")
        .arg(format!("{} dbname={database} user={user}", base_url()))
        .arg("-f")
        .arg(file)
        .output()
        .expect("run psql");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    if output.status.success() {
        Ok(text)
    } else {
        Err(text)
    }
}

/// Database `name` created anew (dropped first), owned by `owner`, with
/// the portable edition installed by `owner` from the plain file; a
/// connection to it as `owner`.
pub fn fresh_database(name: &str, owner: &str) -> Client {
    crate::drop_database(name);
    let mut admin = Client::connect(&base_url(), NoTls).expect("connect to the test server");
    admin
        .batch_execute(&format!("CREATE DATABASE {name} OWNER {owner}"))
        .expect("create the database");
    if let Err(output) = psql_file(name, owner, &plain_file()) {
        panic!("installing the portable edition in {name} as {owner} failed:\n{output}");
    }
    crate::connect_to(name, owner)
}
