//! rate_limiter.stats against real concurrent connections (the test server
//! preloads the library): the counters equal what the calls answered,
//! exactly, after a mixed workload from 8 connections; a limit in shadow
//! mode ends with the state and counts of an enforcing twin; counters
//! survive a backend exiting, evict past rate_limiter.stats_max, start from
//! zero after a restart, and are 55000 without shared_preload_libraries.
//! And the real Prometheus postgres_exporter, with the shipped query file,
//! reports the view's values.

use postgres::error::SqlState;
use postgres::{Client, NoTls};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rate_limiter_integration_tests::{
    connect, restart_server, server_options, test_env, unique_name, url,
};
use std::collections::HashMap;
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

/// What the calls of one limit name answered, counted as the view counts.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
struct Counts {
    calls: i64,
    admitted: i64,
    refused: i64,
    reserved: i64,
    tokens: f64,
    credited: f64,
    near_limit: i64,
    shadow_refused: i64,
}

impl Counts {
    /// One answer of a call asking `count` tokens of a limit of `capacity`.
    fn answer(&mut self, count: f64, capacity: f64, ok: bool, reserved: bool, remaining: f64) {
        self.calls += 1;
        if ok {
            self.admitted += 1;
            self.tokens += count;
            if reserved {
                self.reserved += 1;
            }
            if remaining < 0.2 * capacity {
                self.near_limit += 1;
            }
        } else {
            self.refused += 1;
        }
    }

    fn add(&mut self, other: &Counts) {
        self.calls += other.calls;
        self.admitted += other.admitted;
        self.refused += other.refused;
        self.reserved += other.reserved;
        self.tokens += other.tokens;
        self.credited += other.credited;
        self.near_limit += other.near_limit;
        self.shadow_refused += other.shadow_refused;
    }
}

/// The view's row for `name` (zeros when there is none), and `contended`.
fn counted(client: &mut Client, name: &str) -> (Counts, i64) {
    let row = client
        .query_opt(
            "SELECT calls, admitted, refused, reserved, tokens, credited, near_limit, shadow_refused, contended
             FROM rate_limiter.stats WHERE name = $1",
            &[&name],
        )
        .expect("read rate_limiter.stats");
    match row {
        None => (Counts::default(), 0),
        Some(row) => (
            Counts {
                calls: row.get(0),
                admitted: row.get(1),
                refused: row.get(2),
                reserved: row.get(3),
                tokens: row.get(4),
                credited: row.get(5),
                near_limit: row.get(6),
                shadow_refused: row.get(7),
            },
            row.get(8),
        ),
    }
}

const CONNECTIONS: usize = 8;
const ITERATIONS: usize = 250;

/// The limits of the workload (names unique to this run).
struct Limits {
    keyed: String,
    global: String,
    twin: String,
    shadow: String,
    wait: String,
    /// A guard() trigger's limit, on the table `guarded`.
    guard: String,
    guarded: String,
    postgrest: String,
}

// Capacities (the clock is stopped: tokens come back only by rate_credit
// and rollbacks).
const KEYED: f64 = 20.0;
const GLOBAL: f64 = 80.0;
const TWIN: f64 = 30.0;
const WAIT: f64 = 15.0;
const GUARD: f64 = 25.0;
const POSTGREST: f64 = 25.0;

/// One connection's share of the workload: each iteration is one
/// transaction doing one of the consuming calls (every consuming path:
/// rate_limit keyed, global with shards and reserving, rate_limit_all,
/// rate_wait, rate_credit, guard(), postgrest_limit(), a shadow limit), a
/// quarter of them rolled back. Returns what it was answered, per name.
fn work(limits: &Limits, seed: u64) -> HashMap<String, Counts> {
    let mut client = connect();
    client
        .batch_execute("SET rate_limiter.now_override = '2026-01-01 00:00:00+00'")
        .expect("stop the clock");
    let mut rng = StdRng::seed_from_u64(seed);
    let mut counts: HashMap<String, Counts> = HashMap::new();
    for _ in 0..ITERATIONS {
        let mut transaction = client.transaction().expect("begin");
        let key = format!("k{}", rng.random_range(0..4));
        let mut aborted = false;
        match rng.random_range(0..9) {
            // rate_limit, keyed, sometimes a reservation of 2.
            0 | 1 => {
                let reserve = rng.random_bool(0.3);
                let count = if reserve { 2.0 } else { 1.0 };
                let row = transaction
                    .query_one(
                        "SELECT ok, coalesce(extract(epoch FROM retry_after) > 0, false), remaining
                         FROM rate_limiter.rate_limit($1, $2, $3, reserve => $4)",
                        &[&limits.keyed, &key, &count, &reserve],
                    )
                    .expect("rate_limit keyed");
                counts.entry(limits.keyed.clone()).or_default().answer(
                    count,
                    KEYED,
                    row.get(0),
                    row.get(1),
                    row.get(2),
                );
            }
            // rate_limit of the global limit with 8 shards.
            2 => {
                let row = transaction
                    .query_one(
                        "SELECT ok, remaining FROM rate_limiter.rate_limit($1)",
                        &[&limits.global],
                    )
                    .expect("rate_limit sharded");
                counts.entry(limits.global.clone()).or_default().answer(
                    1.0,
                    GLOBAL,
                    row.get(0),
                    false,
                    row.get(1),
                );
            }
            // The enforcing twin, then the shadow limit, in one
            // transaction: every transaction locks the twin's row first
            // and holds it to the end, so both rows see the same
            // sequence of decisions.
            3 => {
                let twin = transaction
                    .query_one(
                        "SELECT ok, remaining FROM rate_limiter.rate_limit($1)",
                        &[&limits.twin],
                    )
                    .expect("rate_limit twin");
                let shadow = transaction
                    .query_one(
                        "SELECT ok, retry_after IS NULL, remaining FROM rate_limiter.rate_limit($1, throws => true)",
                        &[&limits.shadow],
                    )
                    .expect("shadow mode never raises");
                let (twin_ok, twin_remaining): (bool, f64) = (twin.get(0), twin.get(1));
                assert!(shadow.get::<_, bool>(0) && shadow.get::<_, bool>(1));
                assert_eq!(shadow.get::<_, f64>(2), twin_remaining);
                counts.entry(limits.twin.clone()).or_default().answer(
                    1.0,
                    TWIN,
                    twin_ok,
                    false,
                    twin_remaining,
                );
                let shadow = counts.entry(limits.shadow.clone()).or_default();
                if twin_ok {
                    shadow.answer(1.0, TWIN, true, false, twin_remaining);
                } else {
                    shadow.calls += 1;
                    shadow.shadow_refused += 1;
                }
            }
            // rate_limit_all over a keyed limit and the global one: a row
            // per request, as answered.
            4 => {
                let rows = transaction
                    .query(
                        "SELECT name, ok, remaining FROM rate_limiter.rate_limit_all(
                             ARRAY[($1, $2, 1, NULL), ($3, NULL, 1, NULL)]::rate_limiter.request[])",
                        &[&limits.keyed, &key, &limits.global],
                    )
                    .expect("rate_limit_all");
                for row in rows {
                    let name: String = row.get(0);
                    let capacity = if name == limits.keyed { KEYED } else { GLOBAL };
                    counts.entry(name).or_default().answer(
                        1.0,
                        capacity,
                        row.get(1),
                        false,
                        row.get(2),
                    );
                }
            }
            // rate_wait: its final answer (no waiting: timeout 0).
            5 => {
                let row = transaction
                    .query_one(
                        "SELECT ok, remaining FROM rate_limiter.rate_wait($1, timeout => '0')",
                        &[&limits.wait],
                    )
                    .expect("rate_wait");
                counts.entry(limits.wait.clone()).or_default().answer(
                    1.0,
                    WAIT,
                    row.get(0),
                    false,
                    row.get(1),
                );
            }
            // guard(): an insert the trigger admits, or refuses (RL429,
            // which aborts the transaction). What an admitted call left is
            // the limit's value right after it (the row is ours, locked).
            7 => {
                let inserted = transaction.execute(
                    &format!("INSERT INTO {} (k) VALUES ($1)", limits.guarded),
                    &[&key],
                );
                let counts = counts.entry(limits.guard.clone()).or_default();
                match inserted {
                    Ok(_) => {
                        let remaining: f64 = transaction
                            .query_one(
                                "SELECT value FROM rate_limiter.status($1, $2)",
                                &[&limits.guard, &key],
                            )
                            .expect("status")
                            .get(0);
                        counts.answer(1.0, GUARD, true, false, remaining);
                    }
                    Err(error) => {
                        assert_eq!(error.code().map(|c| c.code()), Some("RL429"), "{error}");
                        counts.answer(1.0, GUARD, false, false, 0.0);
                        aborted = true;
                    }
                }
            }
            // postgrest_limit(): admitted (the RateLimit header says what
            // is left: whole tokens, the clock being stopped), or refused
            // (SQLSTATE PGRST, which aborts the transaction).
            8 => {
                let answered = transaction.query_one(
                    "SELECT rate_limiter.postgrest_limit($1, $2), current_setting('response.headers')",
                    &[&limits.postgrest, &key],
                );
                let counts = counts.entry(limits.postgrest.clone()).or_default();
                match answered {
                    Ok(row) => {
                        let headers: String = row.get(1);
                        let remaining: f64 = headers
                            .split(";r=")
                            .nth(1)
                            .and_then(|rest| rest.split(';').next())
                            .and_then(|r| r.parse().ok())
                            .unwrap_or_else(|| panic!("r= in {headers}"));
                        counts.answer(1.0, POSTGREST, true, false, remaining);
                    }
                    Err(error) => {
                        assert_eq!(error.code().map(|c| c.code()), Some("PGRST"), "{error}");
                        counts.answer(1.0, POSTGREST, false, false, 0.0);
                        aborted = true;
                    }
                }
            }
            // rate_credit: tokens given back.
            _ => {
                transaction
                    .execute(
                        "SELECT rate_limiter.rate_credit($1, $2, 1)",
                        &[&limits.keyed, &key],
                    )
                    .expect("rate_credit");
                counts.entry(limits.keyed.clone()).or_default().credited += 1.0;
            }
        }
        // Counting is not transactional: a rolled-back decision counts.
        if aborted || rng.random_bool(0.25) {
            transaction.rollback().expect("rollback");
        } else {
            transaction.commit().expect("commit");
        }
    }
    counts
}

#[test]
fn counters_equal_what_the_calls_answered() {
    let limits = Limits {
        keyed: unique_name("stats_keyed"),
        global: unique_name("stats_global"),
        twin: unique_name("stats_twin"),
        shadow: unique_name("stats_shadow"),
        wait: unique_name("stats_wait"),
        guard: unique_name("stats_guard"),
        guarded: unique_name("stats_guarded"),
        postgrest: unique_name("stats_postgrest"),
    };
    let mut client = connect();
    for (name, config, enforce) in [
        (
            &limits.keyed,
            format!("rate_limiter.token_bucket({KEYED}, '1 hour', max_reserved => 2)"),
            true,
        ),
        (
            &limits.global,
            format!("rate_limiter.token_bucket({GLOBAL}, '1 hour', shards => 8)"),
            true,
        ),
        (
            &limits.twin,
            format!("rate_limiter.token_bucket({TWIN}, '1 hour')"),
            true,
        ),
        (
            &limits.shadow,
            format!("rate_limiter.token_bucket({TWIN}, '1 hour')"),
            false,
        ),
        (
            &limits.wait,
            format!("rate_limiter.token_bucket({WAIT}, '1 hour')"),
            true,
        ),
        (
            &limits.guard,
            format!("rate_limiter.token_bucket({GUARD}, '1 hour')"),
            true,
        ),
        (
            &limits.postgrest,
            format!("rate_limiter.token_bucket({POSTGREST}, '1 hour')"),
            true,
        ),
    ] {
        client
            .execute(
                &format!("SELECT rate_limiter.define($1, {config}, enforce => $2)"),
                &[name, &enforce],
            )
            .expect("define");
    }
    client
        .batch_execute(&format!(
            "CREATE TABLE {0} (k text);
             CREATE TRIGGER guard BEFORE INSERT ON {0}
                 FOR EACH ROW EXECUTE FUNCTION rate_limiter.guard('{1}', 'k');",
            limits.guarded, limits.guard
        ))
        .expect("a guarded table");
    let limits = std::sync::Arc::new(limits);
    let workers: Vec<_> = (0..CONNECTIONS)
        .map(|index| {
            let limits = limits.clone();
            thread::spawn(move || work(&limits, 1000 + index as u64))
        })
        .collect();
    let mut answered: HashMap<String, Counts> = HashMap::new();
    for worker in workers {
        for (name, counts) in worker.join().expect("a connection failed") {
            answered.entry(name).or_default().add(&counts);
        }
    }
    let every = [
        &limits.keyed,
        &limits.global,
        &limits.twin,
        &limits.shadow,
        &limits.wait,
        &limits.guard,
        &limits.postgrest,
    ];
    for name in every {
        let expected = answered.get(name.as_str()).copied().unwrap_or_default();
        let (counts, contended) = counted(&mut client, name);
        println!("{name}: {counts:?}, contended {contended}");
        assert_eq!(counts, expected, "{name}: the view against the answers");
        assert_eq!(
            counts.calls,
            counts.admitted + counts.refused + counts.shadow_refused
        );
        assert!(contended <= counts.calls);
        if name != &limits.global {
            assert_eq!(contended, 0, "{name} has no shards");
        }
    }
    // Refusals happened on every limit (the workload reaches its bounds)...
    for name in every.iter().filter(|name| **name != &limits.shadow) {
        assert!(answered[name.as_str()].refused > 0, "{name} never refused");
    }
    // ...and the shadow limit refused nobody, counted what its twin
    // refused, and stored the twin's state.
    let twin = answered[limits.twin.as_str()];
    let shadow = answered[limits.shadow.as_str()];
    assert_eq!(shadow.shadow_refused, twin.refused);
    assert_eq!(shadow.refused, 0);
    let state = |client: &mut Client, name: &str| -> Vec<(f64, String)> {
        client
            .query(
                "SELECT value, ts::text FROM rate_limiter.rate_limits WHERE name = $1",
                &[&name],
            )
            .expect("state")
            .iter()
            .map(|row| (row.get(0), row.get(1)))
            .collect()
    };
    assert_eq!(
        state(&mut client, &limits.shadow),
        state(&mut client, &limits.twin)
    );
    client
        .batch_execute(&format!("DROP TABLE {}", limits.guarded))
        .expect("drop the guarded table");
}

fn connect_to_server() -> Client {
    Client::connect(&url(), NoTls).expect("connect after the restart")
}

/// Restarts: counters survive backends but not the server; past
/// rate_limiter.stats_max the least-used names are evicted; without
/// shared_preload_libraries calls work and the statistics are 55000.
/// Leaves the server as it found it.
#[test]
fn counters_live_in_the_server_bounded_and_need_preloading() {
    let options = server_options();
    assert!(
        options.contains("shared_preload_libraries=rate_limiter"),
        "the test server preloads the library: {options}"
    );
    let config = "rate_limiter.token_bucket(100, '1 hour')";
    let name = unique_name("stats_survivor");
    // A backend that exits leaves its counts behind.
    {
        let mut client = connect();
        for _ in 0..3 {
            client
                .query_one(
                    &format!("SELECT ok FROM rate_limiter.rate_limit($1, config => {config})"),
                    &[&name],
                )
                .expect("call");
        }
    }
    let mut client = connect();
    assert_eq!(counted(&mut client, &name).0.calls, 3);

    // Past rate_limiter.stats_max (100 here), the least-used names go.
    restart_server(&format!("{options} -c rate_limiter.stats_max=100"));
    let mut client = connect_to_server();
    let max: String = client
        .query_one("SHOW rate_limiter.stats_max", &[])
        .expect("stats_max")
        .get(0);
    assert_eq!(max, "100");
    assert_eq!(
        counted(&mut client, &name).0.calls,
        0,
        "a restart starts from zero"
    );
    let hot = unique_name("stats_hot");
    for _ in 0..20 {
        client
            .query_one(
                &format!("SELECT ok FROM rate_limiter.rate_limit($1, config => {config})"),
                &[&hot],
            )
            .expect("hot call");
    }
    for index in 0..300 {
        client
            .query_one(
                &format!("SELECT ok FROM rate_limiter.rate_limit($1, config => {config})"),
                &[&format!("stats_cold_{index}")],
            )
            .expect("cold call");
    }
    let names: i64 = client
        .query_one("SELECT count(*) FROM rate_limiter.stats", &[])
        .expect("count")
        .get(0);
    assert!(names <= 100, "{names} names kept, more than stats_max");
    assert!(names >= 90, "only {names} names kept");
    assert_eq!(
        counted(&mut client, &hot).0.calls,
        20,
        "the most-used name stays"
    );
    let last: i64 = client
        .query_one(
            "SELECT calls FROM rate_limiter.stats WHERE name = 'stats_cold_299'",
            &[],
        )
        .expect("the newest name is counted")
        .get(0);
    assert_eq!(last, 1);

    // Without preloading: calls work, the statistics are 55000 with a hint.
    restart_server(&test_env("RATE_LIMITER_TEST_PG_OPTIONS_WITHOUT_PRELOAD"));
    let mut client = connect_to_server();
    let ok: bool = client
        .query_one(
            &format!("SELECT ok FROM rate_limiter.rate_limit($1, config => {config})"),
            &[&name],
        )
        .expect("a call without the library preloaded")
        .get(0);
    assert!(ok);
    for sql in [
        "SELECT * FROM rate_limiter.stats",
        "SELECT rate_limiter.stats_reset()",
    ] {
        let error = client.batch_execute(sql).expect_err(sql);
        let db = error.as_db_error().expect("a server error");
        assert_eq!(
            db.code(),
            &SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE,
            "{sql}"
        );
        assert!(
            db.hint().unwrap_or("").contains("shared_preload_libraries"),
            "{sql}: {:?}",
            db.hint()
        );
    }
    drop(client);
    restart_server(&options);
    let mut client = connect_to_server();
    assert_eq!(counted(&mut client, &name).0.calls, 0);
}

/// A free TCP port on loopback.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("address")
        .port()
}

struct Exporter(Child);

impl Drop for Exporter {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Debian's prometheus-postgres-exporter, run with the shipped query file
/// against the test database, scraped over HTTP: every rate_limiter metric
/// of our names equals the view's value.
#[test]
fn the_exporter_reports_the_view() {
    let mut client = connect();
    let names = [unique_name("stats_exported"), unique_name("stats_exported")];
    client
        .execute(
            "SELECT rate_limiter.define($1, rate_limiter.token_bucket(3, '1 hour'), enforce => false)",
            &[&names[1]],
        )
        .expect("define a shadow limit");
    for (index, name) in names.iter().enumerate() {
        for _ in 0..(5 + index) {
            client
                .query_one(
                    "SELECT ok FROM rate_limiter.rate_limit($1, config => CASE WHEN $2 THEN rate_limiter.token_bucket(4, '1 hour') END)",
                    &[name, &(index == 0)],
                )
                .expect("call");
        }
    }
    let port = free_port();
    let queries = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../monitoring/postgres_exporter.yml"
    );
    let source = format!(
        "postgresql://postgres@127.0.0.1:{}/{}?sslmode=disable",
        test_env("RATE_LIMITER_TEST_URL")
            .split_whitespace()
            .find_map(|part| part.strip_prefix("port="))
            .expect("a port in RATE_LIMITER_TEST_URL"),
        rate_limiter_integration_tests::DATABASE
    );
    let _exporter = Exporter(
        Command::new("prometheus-postgres-exporter")
            .env("DATA_SOURCE_NAME", &source)
            .args([
                &format!("--extend.query-path={queries}"),
                &format!("--web.listen-address=127.0.0.1:{port}"),
                "--disable-default-metrics",
                "--disable-settings-metrics",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start prometheus-postgres-exporter (Debian's package)"),
    );
    let url = format!("http://127.0.0.1:{port}/metrics");
    let deadline = Instant::now() + Duration::from_secs(30);
    let metrics = loop {
        match ureq::get(&url).call() {
            Ok(mut response) => {
                let body = response.body_mut().read_to_string().expect("the metrics");
                if body.contains(&names[1]) {
                    break body;
                }
            }
            Err(_) if Instant::now() < deadline => {}
            Err(error) => panic!("scrape {url}: {error}"),
        }
        assert!(
            Instant::now() < deadline,
            "no rate_limiter metrics at {url}"
        );
        thread::sleep(Duration::from_millis(200));
    };
    for name in &names {
        let (counts, _) = counted(&mut client, name);
        for (metric, expected) in [
            ("rate_limiter_calls_total", counts.calls as f64),
            ("rate_limiter_admitted_total", counts.admitted as f64),
            ("rate_limiter_refused_total", counts.refused as f64),
            (
                "rate_limiter_shadow_refused_total",
                counts.shadow_refused as f64,
            ),
            ("rate_limiter_near_limit_total", counts.near_limit as f64),
        ] {
            let line = metrics
                .lines()
                .find(|line| {
                    line.starts_with(&format!("{metric}{{"))
                        && line.contains(&format!("name=\"{name}\""))
                        && line.contains(&format!(
                            "datname=\"{}\"",
                            rate_limiter_integration_tests::DATABASE
                        ))
                })
                .unwrap_or_else(|| panic!("{metric} for {name} in:\n{metrics}"));
            let value: f64 = line
                .rsplit(' ')
                .next()
                .and_then(|value| value.parse().ok())
                .unwrap_or_else(|| panic!("a value in {line}"));
            assert_eq!(value, expected, "{line}");
        }
        println!("{name}: {counts:?}");
    }
    // Both kinds of refusal were exported.
    assert!(counted(&mut client, &names[0]).0.refused > 0);
    assert!(counted(&mut client, &names[1]).0.shadow_refused > 0);
}

/// `contended` counts a sharded call that met a shard another transaction
/// held: with one of two shards locked by an open transaction, every call
/// of the limit passes over it.
#[test]
fn a_call_that_meets_a_held_shard_is_contended() {
    let name = unique_name("stats_contended");
    let mut holder = holding(&name, 1);
    let mut caller = connect();
    // Were both shards held, the calls would wait: fail rather than hang.
    caller
        .batch_execute("SET statement_timeout = '10s'")
        .expect("statement_timeout");
    for _ in 0..3 {
        let ok: bool = caller
            .query_one("SELECT ok FROM rate_limiter.rate_limit($1)", &[&name])
            .expect("a call beside the held shard")
            .get(0);
        assert!(ok);
    }
    holder.batch_execute("COMMIT").expect("commit");
    let (counts, contended) = counted(&mut caller, &name);
    assert_eq!(counts.calls, 4);
    assert_eq!(
        contended, 3,
        "each call beside the held shard passed over it"
    );
}

/// A connection with an open transaction that called the new 2-shard
/// limit `name` (capacity 100, 50 per shard) for `count` tokens, and so
/// holds the shards it consumed from: one for a count one shard can serve,
/// both for a count of more than 50 (only the two together can serve it).
fn holding(name: &str, count: i32) -> Client {
    let mut holder = connect();
    holder
        .execute(
            "SELECT rate_limiter.define($1, rate_limiter.token_bucket(100, '1 hour', shards => 2))",
            &[&name],
        )
        .expect("define");
    holder.batch_execute("BEGIN").expect("begin");
    let ok: bool = holder
        .query_one(
            "SELECT ok FROM rate_limiter.rate_limit($1, count => $2::int4)",
            &[&name, &count],
        )
        .expect("hold shards")
        .get(0);
    assert!(ok, "{count} of 100 tokens");
    holder
}

/// [`holding`] both shards.
fn hold_both_shards(name: &str) -> Client {
    let mut holder = holding(name, 60);
    let rows: i64 = holder
        .query_one(
            "SELECT count(*) FROM rate_limiter.rate_limits WHERE name = $1",
            &[&name],
        )
        .expect("count the rows")
        .get(0);
    assert_eq!(rows, 2, "the call wrote (and holds) both shards");
    holder
}

/// Runs `sql` (one row, `ok` first) with `name` on a new connection in a
/// thread; returns once that connection waits for a lock, with the thread
/// (which answers `ok`).
fn blocked_call(sql: &'static str, name: &str) -> thread::JoinHandle<bool> {
    let name = name.to_string();
    let mut caller = connect();
    let pid: i32 = caller
        .query_one("SELECT pg_backend_pid()", &[])
        .expect("pid")
        .get(0);
    caller
        .batch_execute("SET statement_timeout = '60s'")
        .expect("statement_timeout");
    let call = thread::spawn(move || {
        caller
            .query_one(sql, &[&name])
            .expect("the waiting call")
            .get(0)
    });
    let mut watcher = connect();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let waiting: bool = watcher
            .query_one(
                "SELECT coalesce(wait_event_type = 'Lock', false) FROM pg_stat_activity WHERE pid = $1",
                &[&pid],
            )
            .expect("read pg_stat_activity")
            .get(0);
        if waiting {
            return call;
        }
        assert!(Instant::now() < deadline, "the call never waited");
        thread::sleep(Duration::from_millis(20));
    }
}

/// `rate_limit_all` for one token of the limit `$1`.
const ALL_ONE: &str = "SELECT bool_and(ok) FROM rate_limiter.rate_limit_all(\
                       ARRAY[ROW($1::text, NULL, 1, NULL)::rate_limiter.request])";

/// Runs `sql` (see [`blocked_call`]) on a new limit named from `prefix`
/// while another transaction holds both its shards, then commits that
/// transaction: the call is served, and counted as contended. Returns the
/// limit's name and the holder's connection.
fn call_after_waiting(sql: &'static str, prefix: &str) -> (String, Client) {
    let name = unique_name(prefix);
    let mut holder = hold_both_shards(&name);
    let call = blocked_call(sql, &name);
    holder.batch_execute("COMMIT").expect("commit");
    assert!(
        call.join().expect("the call's thread"),
        "served after the wait"
    );
    let (counts, contended) = counted(&mut holder, &name);
    assert_eq!(counts.calls, 2);
    assert_eq!(contended, 1, "the holder met no one; the waiting call did");
    (name, holder)
}

/// `contended` also counts a sharded call that found every shard held and
/// waited: it waits for one, and once the holder commits it is served.
#[test]
fn a_call_that_waits_for_a_held_shard_is_contended() {
    call_after_waiting("SELECT ok FROM rate_limiter.rate_limit($1)", "stats_waited");
}

/// `rate_limit_all` holds every shard it may use, waiting for busy ones
/// instead of passing over them: a request whose shards it waited for is
/// contended, one that waited for nothing is not.
#[test]
fn rate_limit_all_counts_a_request_that_waited_for_its_shards() {
    let (name, _) = call_after_waiting(ALL_ONE, "stats_all_waited");

    // Nothing held: the same call waits for nothing and is not contended.
    let mut caller = connect();
    let ok: bool = caller
        .query_one(ALL_ONE, &[&name])
        .expect("a call with nothing held")
        .get(0);
    assert!(ok);
    let (counts, contended) = counted(&mut caller, &name);
    assert_eq!(counts.calls, 3);
    assert_eq!(contended, 1, "the free call was not contended");
}
