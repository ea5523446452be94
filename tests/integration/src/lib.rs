//! Shared helpers for the integration tests: connecting to the test server
//! started by `scripts/test.sh` (connection string in the environment
//! variable `RATE_LIMITER_TEST_URL`), in a database of their own with the
//! extension installed.

use postgres::{Client, NoTls};
use std::sync::Once;

/// The database the integration tests use.
pub const DATABASE: &str = "rate_limiter_integration";

fn base_url() -> String {
    std::env::var("RATE_LIMITER_TEST_URL").unwrap_or_else(|_| {
        panic!(
            "RATE_LIMITER_TEST_URL is not set: run the integration tests through scripts/test.sh"
        )
    })
}

/// A connection string for the test database.
pub fn url() -> String {
    format!("{} dbname={DATABASE}", base_url())
}

static SETUP: Once = Once::new();

/// Creates the test database and the extension once per test binary.
fn setup() {
    SETUP.call_once(|| {
        let mut admin = Client::connect(&base_url(), NoTls).expect("connect to the test server");
        let exists = admin
            .query_opt("SELECT 1 FROM pg_database WHERE datname = $1", &[&DATABASE])
            .expect("look up the test database")
            .is_some();
        if !exists {
            admin
                .batch_execute(&format!("CREATE DATABASE {DATABASE}"))
                .expect("create the test database");
        }
        let mut client = Client::connect(&url(), NoTls).expect("connect to the test database");
        client
            .batch_execute("CREATE EXTENSION IF NOT EXISTS rate_limiter")
            .expect("create the extension");
    });
}

/// A new connection to the test database (with the extension installed).
pub fn connect() -> Client {
    setup();
    Client::connect(&url(), NoTls).expect("connect to the test database")
}

/// A limit name no other test uses: `prefix` plus a random suffix.
pub fn unique_name(prefix: &str) -> String {
    format!("{prefix}_{:016x}", rand::random::<u64>())
}
