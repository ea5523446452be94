//! Debian's prometheus-postgres-exporter, run with the shipped query file
//! (`monitoring/postgres_exporter.yml`), scraped over HTTP: every
//! rate_limiter metric equals the view's value, and names that once broke
//! the exporter (two names cut alike, a name whose bytes have no UTF-8
//! equivalent, in a SQL_ASCII and a WIN1252 database) still give one
//! distinct series each and an HTTP 200.

use postgres::{Client, NoTls};
use rate_limiter_integration_tests::stats::counted;
use rate_limiter_integration_tests::{connect, test_env, unique_name};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

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

/// A database of `encoding` (dropped first if it exists) with the
/// extension, and a connection to it.
fn database(name: &str, encoding: &str) -> Client {
    let base = test_env("RATE_LIMITER_TEST_URL");
    let mut admin = Client::connect(&base, NoTls).expect("connect to the test server");
    for sql in [
        format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"),
        format!("CREATE DATABASE {name} ENCODING '{encoding}' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0"),
    ] {
        admin.batch_execute(&sql).expect("create the database");
    }
    let mut client =
        Client::connect(&format!("{base} dbname={name}"), NoTls).expect("connect to it");
    client
        .batch_execute("CREATE EXTENSION rate_limiter")
        .expect("create the extension");
    client
}

const ASCII: &str = "rate_limiter_exporter_ascii";
const WIN1252: &str = "rate_limiter_exporter_win1252";

/// The series of a scrape, `name{labels}` without the value, of the
/// metrics whose name starts with `prefix`.
fn series<'a>(metrics: &'a str, prefix: &str) -> Vec<&'a str> {
    metrics
        .lines()
        .filter(|line| line.starts_with(prefix))
        .filter_map(|line| line.rsplit_once(' ').map(|(series, _)| series))
        .collect()
}

/// Debian's prometheus-postgres-exporter, run with the shipped query file
/// against three databases, scraped over HTTP: every rate_limiter metric
/// of our names equals the view's value; two names longer than the 256
/// bytes a counter keeps, alike in those, and names whose bytes have no
/// UTF-8 equivalent (in SQL_ASCII and WIN1252 databases), each give one
/// distinct series, and the scrape answers HTTP 200 (two series with the
/// same labels made the exporter answer 500 for every metric).
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
    // A blocked key's refusals (docs/blocks.md): rate_limiter_blocked_total.
    let blocked = unique_name("stats_blocked");
    client
        .batch_execute(&format!(
            "SELECT rate_limiter.define('{blocked}', rate_limiter.token_bucket(4, '1 hour'));
             SELECT rate_limiter.block('{blocked}', 'k', '1 hour');
             SELECT rate_limiter.rate_limit('{blocked}', 'k') FROM generate_series(1, 3);"
        ))
        .expect("a blocked key's calls");
    let config = "rate_limiter.token_bucket(4, '1 hour')";
    let long = format!("{}_{}", unique_name("stats_long"), "x".repeat(300));
    for suffix in ["a", "b"] {
        client
            .query_one(
                &format!("SELECT ok FROM rate_limiter.rate_limit($1 || $2, config => {config})"),
                &[&long, &suffix],
            )
            .expect("a long name");
    }
    // 'bad' || byte 0xff, and the name written 'bad\xff' (with a
    // backslash), in a SQL_ASCII database; byte 0x81 in WIN1252.
    let mut ascii = database(ASCII, "SQL_ASCII");
    for name in ["'bad' || chr(255)", "'bad\\xff'"] {
        ascii
            .batch_execute(&format!(
                "SELECT rate_limiter.rate_limit({name}, config => {config})"
            ))
            .expect("a name that is not UTF-8");
    }
    let mut win1252 = database(WIN1252, "WIN1252");
    win1252
        .batch_execute(&format!(
            "SELECT rate_limiter.rate_limit('w' || chr(129), config => {config})"
        ))
        .expect("a name with no Unicode equivalent");

    let port = free_port();
    let queries = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../monitoring/postgres_exporter.yml"
    );
    let server_port = test_env("RATE_LIMITER_TEST_URL")
        .split_whitespace()
        .find_map(|part| part.strip_prefix("port="))
        .expect("a port in RATE_LIMITER_TEST_URL")
        .to_string();
    let source = [rate_limiter_integration_tests::DATABASE, ASCII, WIN1252]
        .map(|database| {
            format!("postgresql://postgres@127.0.0.1:{server_port}/{database}?sslmode=disable")
        })
        .join(",");
    let _exporter = Exporter(
        Command::new("prometheus-postgres-exporter")
            .env("DATA_SOURCE_NAME", &source)
            .args([
                &format!("--extend.query-path={queries}"),
                &format!("--web.listen-address=127.0.0.1:{port}"),
                "--disable-default-metrics",
                "--disable-settings-metrics",
                // The exporter's own collectors of server-wide metrics
                // would report each of them once per database of the
                // same server, which it refuses (README, Monitoring).
                "--no-collector.database",
                "--no-collector.bgwriter",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start prometheus-postgres-exporter (Debian's package)"),
    );
    let url = format!("http://127.0.0.1:{port}/metrics");
    let deadline = Instant::now() + Duration::from_secs(30);
    let wanted = [names[1].as_str(), "w\\\\x81", "bad\\\\xff"];
    let metrics = loop {
        match ureq::get(&url).call() {
            // ureq answers Err for a status other than 2xx.
            Ok(mut response) => {
                let body = response.body_mut().read_to_string().expect("the metrics");
                if wanted
                    .iter()
                    .all(|name| body.contains(&format!("name=\"{name}\"")))
                {
                    break body;
                }
            }
            Err(_) if Instant::now() < deadline => {}
            Err(error) => panic!("scrape {url}: {error}"),
        }
        assert!(
            Instant::now() < deadline,
            "no rate_limiter metrics of every database at {url}"
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
    let blocked_count: i64 = client
        .query_one(
            "SELECT blocked FROM rate_limiter.stats WHERE name = $1",
            &[&blocked],
        )
        .expect("the blocked name's row")
        .get(0);
    assert_eq!(blocked_count, 3);
    let line = metrics
        .lines()
        .find(|line| {
            line.starts_with("rate_limiter_blocked_total{")
                && line.contains(&format!("name=\"{blocked}\""))
        })
        .unwrap_or_else(|| panic!("rate_limiter_blocked_total for {blocked} in:\n{metrics}"));
    assert!(line.ends_with(" 3"), "{line}");
    // Both kinds of refusal were exported.
    assert!(counted(&mut client, &names[0]).0.refused > 0);
    assert!(counted(&mut client, &names[1]).0.shadow_refused > 0);
    // The two long names: two series, each with a name cut alike and
    // ended by its length and hash.
    let calls = series(&metrics, "rate_limiter_calls_total{");
    let cut: Vec<&&str> = calls
        .iter()
        .filter(|series| series.contains(&long[..250]))
        .collect();
    assert_eq!(cut.len(), 2, "{cut:#?}");
    assert!(cut.iter().all(|series| series.contains(" bytes #")));
    // Both SQL_ASCII names, shown apart.
    for name in ["bad\\\\xff", "bad\\\\\\\\xff"] {
        assert_eq!(
            calls
                .iter()
                .filter(|series| series.contains(&format!("name=\"{name}\""))
                    && series.contains(&format!("datname=\"{ASCII}\"")))
                .count(),
            1,
            "{name} in {calls:#?}"
        );
    }
    assert!(metrics.lines().any(|line| line == "pg_up 1"), "pg_up 1");
    // No two series alike, of any rate_limiter metric.
    let mut every = series(&metrics, "rate_limiter");
    let total = every.len();
    every.sort_unstable();
    every.dedup();
    assert_eq!(every.len(), total, "two series with the same labels");
    // stats_info is exported from each database.
    assert_eq!(
        series(&metrics, "rate_limiter_stats_evicted_total{").len(),
        3
    );
    drop((ascii, win1252));
    let mut admin = Client::connect(&test_env("RATE_LIMITER_TEST_URL"), NoTls).expect("connect");
    for database in [ASCII, WIN1252] {
        admin
            .batch_execute(&format!("DROP DATABASE {database} WITH (FORCE)"))
            .expect("drop the database");
    }
}
