//! Shared helpers for the integration tests: connecting to the test server
//! started by `scripts/test.sh` (connection string in the environment
//! variable `RATE_LIMITER_TEST_URL`), in a database of their own with the
//! extension installed.

pub mod calls;
pub mod citus;
pub mod concurrency_calls;
pub mod doc_blocks;
pub mod in_flight;
pub mod portable;
pub mod race;
pub mod stats;

use postgres::error::SqlState;
use postgres::{Client, IsolationLevel, NoTls};
use std::sync::{Arc, Barrier, Once};
use std::thread;
use std::time::{Duration, Instant};

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

/// The SQL that the documentation shows between `<!-- MARKER:begin -->` and
/// `<!-- MARKER:end -->` (the inside of the ```sql fence there), so tests can
/// run the README's recipes exactly as written. The block is looked for in
/// README.md and in every `docs/*.md`; the marker must be in exactly one of
/// those files, once (a panic says where it is otherwise).
pub fn readme_sql(marker: &str) -> String {
    let root = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."));
    let mut docs: Vec<std::path::PathBuf> = std::fs::read_dir(root.join("docs"))
        .expect("read docs/")
        .map(|entry| entry.expect("read an entry of docs/").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "md"))
        .collect();
    docs.sort();
    let (begin, end) = (
        format!("<!-- {marker}:begin -->"),
        format!("<!-- {marker}:end -->"),
    );
    let mut found = Vec::new();
    for path in std::iter::once(root.join("README.md")).chain(docs) {
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
        if text.contains(&begin) || text.contains(&end) {
            found.push((path, text));
        }
    }
    let (path, text) = match found.as_slice() {
        [only] => only,
        [] => panic!("neither README.md nor any docs/*.md has {begin}"),
        _ => panic!(
            "{begin} is in more than one file: {}",
            found
                .iter()
                .map(|(path, _)| path.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    let name = path.display();
    assert!(
        text.matches(&begin).count() == 1 && text.matches(&end).count() == 1,
        "{name} must have {begin} and {end} once each"
    );
    let start = text.find(&begin).expect("the begin marker");
    let end = text[start..]
        .find(&end)
        .map(|offset| start + offset)
        .unwrap_or_else(|| panic!("{name} has {end} after {begin}"));
    let block = &text[start..end];
    let sql_start = block.find("```sql").expect("a ```sql block") + "```sql".len();
    let sql_end = sql_start + block[sql_start..].find("```").expect("the block's end");
    block[sql_start..sql_end].to_string()
}

/// A new connection to the test database (with the extension installed).
pub fn connect() -> Client {
    setup();
    Client::connect(&url(), NoTls).expect("connect to the test database")
}

/// A connection to database `name`, created anew (dropped first if it
/// exists) with the extension installed: for a test that changes the
/// database in ways other tests must not see.
pub fn fresh_database(name: &str) -> Client {
    let mut admin = Client::connect(&base_url(), NoTls).expect("connect to the test server");
    for sql in [
        format!("DROP DATABASE IF EXISTS {name}"),
        format!("CREATE DATABASE {name}"),
    ] {
        admin.batch_execute(&sql).expect("create the database");
    }
    let mut client = Client::connect(&format!("{} dbname={name}", base_url()), NoTls)
        .expect("connect to the new database");
    client
        .batch_execute("CREATE EXTENSION rate_limiter")
        .expect("create the extension");
    client
}

/// Creates the roles of the README's grant block (`app`, `admin`,
/// `monitor`, `web_anon`, with LOGIN) unless they exist, and runs the
/// block as written in the database of `owner` (see [`readme_sql`]).
pub fn readme_roles(owner: &mut Client) {
    for role in ["app", "admin", "monitor", "web_anon"] {
        owner
            .batch_execute(&format!(
                "DO $$ BEGIN CREATE ROLE {role} LOGIN; EXCEPTION WHEN duplicate_object THEN NULL; END $$"
            ))
            .expect("create the README's roles");
    }
    owner
        .batch_execute(&readme_sql("roles"))
        .expect("the README's grants run as written");
}

/// Drops database `name` (its connections ended first), if it exists.
pub fn drop_database(name: &str) {
    let mut admin = Client::connect(&base_url(), NoTls).expect("connect to the test server");
    admin
        .batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        .expect("drop the database");
}

/// The connection settings of database `name` (as the server's superuser),
/// for a test that sets more of them (a notice callback, say).
pub fn config_of(name: &str) -> postgres::Config {
    format!("{} dbname={name}", base_url())
        .parse()
        .expect("the test server's connection string")
}

/// A connection to database `name` as `user`.
pub fn connect_to(name: &str, user: &str) -> Client {
    Client::connect(&format!("{} dbname={name} user={user}", base_url()), NoTls)
        .unwrap_or_else(|e| panic!("connect to {name} as {user}: {e}"))
}

/// A limit name no other test uses: `prefix` plus a random suffix.
pub fn unique_name(prefix: &str) -> String {
    format!("{prefix}_{:016x}", rand::random::<u64>())
}

/// What one hammering run observed.
#[derive(Debug, Default, Clone, Copy)]
pub struct Tally {
    /// Calls that returned ok = true and whose transaction committed.
    pub admitted: u64,
    /// Calls that returned ok = false.
    pub refused: u64,
    /// Serialization failures (40001), at the call or at COMMIT.
    pub conflicts: u64,
}

impl std::ops::Add for Tally {
    type Output = Tally;
    fn add(self, other: Tally) -> Tally {
        Tally {
            admitted: self.admitted + other.admitted,
            refused: self.refused + other.refused,
            conflicts: self.conflicts + other.conflicts,
        }
    }
}

/// The server's clock, in seconds since the epoch.
pub fn server_now(client: &mut Client) -> f64 {
    client
        .query_one("SELECT extract(epoch FROM clock_timestamp())::float8", &[])
        .expect("read the server clock")
        .get(0)
}

/// `connections` connections run `sql` (a query returning `ok boolean`
/// first, with `$1` bound to `name`) as fast as they can for `duration`,
/// each call in its own transaction at `isolation`, all starting together.
/// A connection that has not yet been refused goes on after `duration`
/// until it is (at most [`HAMMER_LIMIT`] times `duration`): a test of
/// "exactly the capacity" must exhaust the capacity however slow the
/// server is (a build with assertions under REPEATABLE READ, where most
/// calls end in 40001, did not within 3 s). For a sharded limit without
/// refill, see [`hammer_until`]. Errors other than
/// serialization failures (40001) fail the test: a deadlock (40P01) among
/// them.
pub fn hammer(
    connections: usize,
    duration: Duration,
    sql: &str,
    name: &str,
    isolation: IsolationLevel,
) -> Tally {
    setup();
    hammer_until(&url(), connections, duration, sql, name, isolation, 1)
}

/// How many times its `duration` a [`hammer`] connection that has seen no
/// refusal may go on.
pub const HAMMER_LIMIT: u32 = 20;

/// Refusals in a row after which a [`hammer_until`] connection hammering
/// a sharded limit without refill stops once its `duration` is over. With
/// one of 8 shards holding the last tokens, a call is refused with
/// probability 21/28; 20 in a row, about 0.3%, and every connection would
/// have to stop so before the last tokens go.
pub const REFUSALS_TO_STOP: u32 = 20;

/// [`hammer`] in the database of connection string `url` (the portable
/// edition's, say), each connection stopping after `duration` only while
/// its last `refusals_to_stop` calls were all refused (1: once it has been
/// refused at all, [`hammer`]'s rule). An admission after such a run
/// means tokens were left: the connection goes on. For "exactly the capacity" of a
/// sharded limit without refill, pass [`REFUSALS_TO_STOP`]: one refusal is
/// not enough there, as a sharded limit refuses a call whose two drawn
/// shards are empty while another shard still holds tokens
/// (docs/guarantees.md, "Sharding"), and
/// on the assertion build under SERIALIZABLE all 16 connections once
/// stopped on such refusals with 3 of 240 tokens left. (Not for a limit
/// that refills: its refusals may never come 20 in a row.)
pub fn hammer_until(
    url: &str,
    connections: usize,
    duration: Duration,
    sql: &str,
    name: &str,
    isolation: IsolationLevel,
    refusals_to_stop: u32,
) -> Tally {
    let barrier = Arc::new(Barrier::new(connections));
    let workers: Vec<_> = (0..connections)
        .map(|_| {
            let (name, sql, barrier, url) = (
                name.to_string(),
                sql.to_string(),
                barrier.clone(),
                url.to_string(),
            );
            thread::spawn(move || {
                let mut client = Client::connect(&url, NoTls).expect("connect to the database");
                let statement = client.prepare(&sql).expect("prepare the call");
                let mut tally = Tally::default();
                // Refusals since the last admission; whether they are
                // refusals_to_stop or more (for 1: whether any call was
                // refused yet).
                let mut refused_in_a_row = 0;
                let mut may_stop = false;
                barrier.wait();
                let start = Instant::now();
                while start.elapsed() < duration
                    || (!may_stop && start.elapsed() < duration * HAMMER_LIMIT)
                {
                    let mut transaction = client
                        .build_transaction()
                        .isolation_level(isolation)
                        .start()
                        .expect("begin");
                    match transaction.query_one(&statement, &[&name]) {
                        Ok(row) => {
                            let ok: bool = row.get(0);
                            match transaction.commit() {
                                Ok(()) if ok => {
                                    tally.admitted += 1;
                                    refused_in_a_row = 0;
                                    // Tokens were left after all: for a
                                    // run of refusals, the current one
                                    // counts.
                                    may_stop &= refusals_to_stop == 1;
                                }
                                Ok(()) => {
                                    tally.refused += 1;
                                    refused_in_a_row += 1;
                                    may_stop |= refused_in_a_row >= refusals_to_stop;
                                }
                                Err(e)
                                    if e.code() == Some(&SqlState::T_R_SERIALIZATION_FAILURE) =>
                                {
                                    tally.conflicts += 1
                                }
                                Err(e) => panic!("commit failed: {e}"),
                            }
                        }
                        Err(e) if e.code() == Some(&SqlState::T_R_SERIALIZATION_FAILURE) => {
                            tally.conflicts += 1
                        }
                        Err(e) => {
                            panic!("rate_limit failed with something other than 40001: {e:?}")
                        }
                    }
                }
                tally
            })
        })
        .collect();
    workers
        .into_iter()
        .map(|worker| worker.join().expect("a hammering connection failed"))
        .fold(Tally::default(), |total, tally| total + tally)
}

/// An environment variable that `scripts/test.sh` sets.
pub fn test_env(name: &str) -> String {
    std::env::var(name)
        .unwrap_or_else(|_| panic!("{name} is not set: run the tests through scripts/test.sh"))
}

/// The options the test server was started with (`pg_ctl -o`).
pub fn server_options() -> String {
    test_env("RATE_LIMITER_TEST_PG_OPTIONS")
}

/// Stops the test server (fast shutdown) and starts it again with
/// `options`, then waits until it takes connections. For tests that need
/// a restart; they leave the server started with [`server_options`].
pub fn restart_server(options: &str) {
    let (bin, pgdata) = (
        test_env("RATE_LIMITER_TEST_PG_BIN"),
        test_env("RATE_LIMITER_TEST_PGDATA"),
    );
    let pg_ctl = format!("{bin}/pg_ctl");
    let log = format!("{pgdata}/../server.log");
    for arguments in [
        vec!["-D", &pgdata, "-m", "fast", "-w", "stop"],
        vec!["-D", &pgdata, "-l", &log, "-w", "-o", options, "start"],
    ] {
        let status = std::process::Command::new("sudo")
            .args(["-u", "postgres", "env", "-u", "RUST_BACKTRACE", &pg_ctl])
            .args(&arguments)
            .status()
            .expect("run pg_ctl");
        assert!(status.success(), "pg_ctl {arguments:?}");
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    while Client::connect(&base_url(), NoTls).is_err() {
        assert!(Instant::now() < deadline, "the server did not come back");
        thread::sleep(Duration::from_millis(100));
    }
}
