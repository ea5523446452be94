//! The Citus cluster of `scripts/citus.sh` in the Citus tests (`citus/`,
//! `citus_call_shapes.rs`, `citus_growth.rs`): its nodes, the tables made local or
//! distributed, and the limits and rows the tests look at.

use postgres::{Client, Config, NoTls};
use std::sync::{Arc, Mutex};

/// Connection strings of the coordinator, then the two workers.
pub fn urls() -> Vec<String> {
    let urls = std::env::var("RATE_LIMITER_TEST_CITUS_URLS")
        .expect("RATE_LIMITER_TEST_CITUS_URLS is not set: run these tests through scripts/test.sh");
    let urls: Vec<String> = urls.split(';').map(str::to_string).collect();
    assert_eq!(urls.len(), 3, "a coordinator and two workers: {urls:?}");
    urls
}

pub fn connect(url: &str) -> Client {
    Client::connect(url, NoTls).unwrap_or_else(|error| panic!("connect to {url}: {error}"))
}

/// A connection whose notices (Citus's `citus.log_remote_commands`) are
/// collected.
pub fn connect_with_notices(url: &str) -> (Client, Arc<Mutex<Vec<String>>>) {
    let notices = Arc::new(Mutex::new(Vec::new()));
    let sink = notices.clone();
    let mut config: Config = url.parse().expect("a connection string");
    config.notice_callback(move |notice| {
        sink.lock().expect("notices").push(format!(
            "{} {}",
            notice.message(),
            notice.detail().unwrap_or("")
        ));
    });
    let client = config
        .connect(NoTls)
        .unwrap_or_else(|error| panic!("connect to {url}: {error}"));
    (client, notices)
}

pub const NODES: [&str; 3] = ["coordinator", "worker 1", "worker 2"];

/// Every node of the cluster: (what it is, a connection).
pub fn nodes() -> Vec<(&'static str, Client)> {
    NODES
        .into_iter()
        .zip(urls())
        .map(|(node, url)| (node, connect(&url)))
        .collect()
}

pub fn coordinator() -> Client {
    connect(&urls()[0])
}

pub fn extension_version(client: &mut Client) -> Option<String> {
    client
        .query_opt(
            "SELECT extversion FROM pg_extension WHERE extname = 'rate_limiter'",
            &[],
        )
        .expect("read pg_extension")
        .map(|row| row.get(0))
}

/// How Citus lists the state table (`h` hash-distributed, `n` reference),
/// by its distribution column; `None` when it is local.
pub fn distribution(client: &mut Client) -> Option<(String, Option<String>)> {
    client
        .query_opt(
            "SELECT partmethod::text, column_to_column_name(logicalrelid, partkey) \
             FROM pg_dist_partition WHERE logicalrelid = 'rate_limiter.rate_limits'::regclass",
            &[],
        )
        .expect("read pg_dist_partition")
        .map(|row| (row.get(0), row.get(1)))
}

/// The tables local (as after `CREATE EXTENSION`), whatever they were.
pub fn make_local() {
    coordinator()
        .batch_execute("SELECT rate_limiter.undistribute()")
        .expect("undistribute()");
}

/// The tables distributed by `distribute()`.
pub fn make_distributed() {
    // Two transactions: distribute() asks the workers about their own
    // tables over connections of their own, which would wait for the
    // locks an undistribute() in the same transaction holds.
    let mut coordinator = coordinator();
    coordinator
        .batch_execute("SELECT rate_limiter.undistribute()")
        .expect("undistribute()");
    coordinator
        .batch_execute("SELECT rate_limiter.distribute()")
        .expect("distribute()");
}

/// Removes the definitions and state of names starting with `prefix`.
pub fn forget(prefix: &str) {
    let mut coordinator = coordinator();
    for table in [
        "composites",
        "leases",
        "overrides",
        "blocks",
        "definitions",
        "rate_limits",
    ] {
        coordinator
            .execute(
                &format!("DELETE FROM rate_limiter.{table} WHERE name LIKE $1 || '%'"),
                &[&prefix],
            )
            .expect("forget the test's limits");
    }
}

/// A limit that never refills during a test: `capacity` tokens per 1000 days.
pub fn define(client: &mut Client, name: &str, capacity: f64) {
    client
        .execute(
            "SELECT rate_limiter.define($1, rate_limiter.token_bucket($2, '1000 days'))",
            &[&name, &capacity],
        )
        .expect("define");
}

pub fn consume(client: &mut impl postgres::GenericClient, name: &str, key: Option<&str>) -> bool {
    client
        .query_one(
            "SELECT ok FROM rate_limiter.rate_limit($1, $2)",
            &[&name, &key],
        )
        .unwrap_or_else(|error| panic!("rate_limit({name}, {key:?}): {error}"))
        .get(0)
}

/// The stored tokens of (name, key) to 3 decimals (the limits of these
/// tests refill about 10^-7 tokens a second), read through Citus (a query
/// it routes by dkey).
pub fn stored(client: &mut Client, name: &str, key: &str) -> Option<f64> {
    client
        .query_opt(
            "SELECT round(value::numeric, 3)::float8 FROM rate_limiter.rate_limits \
             WHERE dkey = $2 AND name = $1 AND key = $2",
            &[&name, &key],
        )
        .expect("read the state")
        .map(|row| row.get(0))
}

/// The node (0 coordinator, 1 and 2 workers) whose port holds the shard of
/// `value`.
pub fn node_of(client: &mut Client, value: &str) -> usize {
    let port: i32 = client
        .query_one(
            "SELECT n.nodeport FROM pg_dist_placement AS p JOIN pg_dist_node AS n USING (groupid) \
             WHERE p.shardid = get_shard_id_for_distribution_column('rate_limiter.rate_limits', $1::text)",
            &[&value],
        )
        .expect("find the shard's node")
        .get(0);
    urls()
        .iter()
        .position(|url| url.contains(&format!("port={port} ")))
        .unwrap_or_else(|| panic!("no node listens on {port}"))
}

/// Keys whose rows live on worker 1 and on worker 2.
pub fn keys_on_each_worker(client: &mut Client, prefix: &str) -> (String, String) {
    let mut found = (None, None);
    for n in 0..100 {
        let key = format!("{prefix}{n}");
        match node_of(client, &key) {
            1 if found.0.is_none() => found.0 = Some(key),
            2 if found.1.is_none() => found.1 = Some(key),
            _ => {}
        }
    }
    (
        found.0.expect("a key on worker 1"),
        found.1.expect("a key on worker 2"),
    )
}

pub fn taken(notices: &Arc<Mutex<Vec<String>>>) -> Vec<String> {
    std::mem::take(&mut *notices.lock().expect("notices"))
}

/// The port in a connection string.
pub fn port_of(url: &str) -> i32 {
    url.split_whitespace()
        .find_map(|part| part.strip_prefix("port="))
        .and_then(|port| port.parse().ok())
        .unwrap_or_else(|| panic!("no port in {url}"))
}

/// Runs `statement` (its first column `ok`; `$1` = `argument`, if any)
/// over and over from 6 connections spread over the three nodes while
/// `operation` runs (200 calls before it starts and after it ends): how
/// many calls were admitted, and how many ended in an error (rolled back:
/// nothing consumed; the first error is printed).
pub fn calls_under_load(
    statement: &str,
    argument: Option<&str>,
    operation: impl FnOnce(),
) -> (u32, u32) {
    use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
    let urls = urls();
    let parameters: Vec<&(dyn postgres::types::ToSql + Sync)> = match &argument {
        Some(argument) => vec![argument],
        None => Vec::new(),
    };
    let parameters = &parameters;
    let stop = AtomicBool::new(false);
    let calls = AtomicU32::new(0);
    std::thread::scope(|scope| {
        let clients: Vec<_> = (0..6)
            .map(|thread| {
                let url = urls[thread % 3].clone();
                let (stop, calls) = (&stop, &calls);
                scope.spawn(move || {
                    let mut client = connect(&url);
                    let (mut admitted, mut failed) = (0u32, 0u32);
                    while !stop.load(Ordering::Relaxed) {
                        match client.query_one(statement, parameters) {
                            Ok(row) => admitted += u32::from(row.get::<_, bool>(0)),
                            // Rolled back: nothing consumed (a lock or
                            // metadata wait that gave up, say).
                            Err(error) => {
                                if failed == 0 {
                                    eprintln!(
                                        "a call during the operation failed: {}",
                                        error.as_db_error().map_or(error.to_string(), |e| format!(
                                            "{} {}",
                                            e.code().code(),
                                            e.message()
                                        ))
                                    );
                                }
                                failed += 1
                            }
                        }
                        calls.fetch_add(1, Ordering::Relaxed);
                    }
                    (admitted, failed)
                })
            })
            .collect();
        let wait_for_calls = |more: u32| {
            let target = calls.load(Ordering::Relaxed) + more;
            while calls.load(Ordering::Relaxed) < target {
                std::thread::yield_now();
            }
        };
        wait_for_calls(200);
        // The clients stop even when the operation panics (the panic is
        // raised again once they have).
        let done = std::panic::catch_unwind(std::panic::AssertUnwindSafe(operation));
        if done.is_ok() {
            wait_for_calls(200);
        }
        stop.store(true, Ordering::Relaxed);
        if let Err(panic) = done {
            for client in clients {
                let _ = client.join();
            }
            std::panic::resume_unwind(panic);
        }
        clients
            .into_iter()
            .map(|client| client.join().expect("a client"))
            .fold((0, 0), |(a, f), (admitted, failed)| {
                (a + admitted, f + failed)
            })
    })
}
