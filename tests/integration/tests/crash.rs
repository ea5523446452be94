//! Crash safety: under concurrent load on a small limit, the postmaster is
//! killed with SIGKILL and restarted, and the load continues. Every
//! consumption committed before the crash is still counted: the number of
//! calls admitted in total, across the crash, never exceeds the bound, and
//! the state row is whole afterwards.

use postgres::{Client, NoTls};
use rate_limiter_integration_tests::{connect, unique_name, url};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

fn env(name: &str) -> String {
    std::env::var(name)
        .unwrap_or_else(|_| panic!("{name} is not set: run the tests through scripts/test.sh"))
}

fn server_now(client: &mut Client) -> f64 {
    client
        .query_one("SELECT extract(epoch FROM clock_timestamp())::float8", &[])
        .unwrap()
        .get(0)
}

fn kill_postmaster(pgdata: &str) {
    let pid = std::fs::read_to_string(format!("{pgdata}/postmaster.pid")).expect("postmaster.pid");
    let pid = pid.lines().next().unwrap().trim().to_string();
    let status = Command::new("kill").args(["-9", &pid]).status().unwrap();
    assert!(status.success(), "kill -9 {pid}");
}

/// Starts the server again, retrying while the killed server's backends
/// still hold its shared memory.
fn restart(pgdata: &str) {
    let (bin, options) = (
        env("RATE_LIMITER_TEST_PG_BIN"),
        env("RATE_LIMITER_TEST_PG_OPTIONS"),
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let status = Command::new("sudo")
            .args([
                "-u",
                "postgres",
                "env",
                "-u",
                "RUST_BACKTRACE",
                &format!("{bin}/pg_ctl"),
                "-D",
                pgdata,
            ])
            .args([
                "-l",
                &format!("{pgdata}/../server.log"),
                "-w",
                "-o",
                &options,
                "start",
            ])
            .status()
            .unwrap();
        if status.success() {
            return;
        }
        assert!(Instant::now() < deadline, "the server did not restart");
        thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn committed_consumption_survives_a_postmaster_sigkill() {
    let pgdata = env("RATE_LIMITER_TEST_PGDATA");
    let mut client = connect();
    let name = unique_name("crash");
    let config = "rate_limiter.token_bucket(20, '1 second', capacity => 10)";
    let sql = format!("SELECT ok FROM rate_limiter.rate_limit('{name}', 'k', config => {config})");
    let start = server_now(&mut client);
    drop(client);

    let stop = Arc::new(AtomicBool::new(false));
    let crashed = Arc::new(AtomicBool::new(false));
    let (admitted, admitted_after, failures) = (
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicU64::new(0)),
    );
    let workers: Vec<_> = (0..8)
        .map(|_| {
            let (sql, stop, crashed) = (sql.clone(), stop.clone(), crashed.clone());
            let (admitted, admitted_after, failures) =
                (admitted.clone(), admitted_after.clone(), failures.clone());
            thread::spawn(move || {
                let mut client: Option<Client> = None;
                while !stop.load(Ordering::SeqCst) {
                    let Some(connection) = client.as_mut() else {
                        match Client::connect(&url(), NoTls) {
                            Ok(connection) => client = Some(connection),
                            Err(_) => thread::sleep(Duration::from_millis(50)),
                        }
                        continue;
                    };
                    // Count an admission only once its transaction committed.
                    let outcome = connection.transaction().and_then(|mut transaction| {
                        let ok: bool = transaction.query_one(sql.as_str(), &[])?.get(0);
                        transaction.commit()?;
                        Ok(ok)
                    });
                    match outcome {
                        Ok(true) => {
                            admitted.fetch_add(1, Ordering::SeqCst);
                            if crashed.load(Ordering::SeqCst) {
                                admitted_after.fetch_add(1, Ordering::SeqCst);
                            }
                        }
                        Ok(false) => {}
                        Err(_) => {
                            failures.fetch_add(1, Ordering::SeqCst);
                            client = None;
                        }
                    }
                }
            })
        })
        .collect();

    thread::sleep(Duration::from_millis(1500));
    let before_crash = admitted.load(Ordering::SeqCst);
    kill_postmaster(&pgdata);
    crashed.store(true, Ordering::SeqCst);
    restart(&pgdata);
    thread::sleep(Duration::from_millis(1500));
    stop.store(true, Ordering::SeqCst);
    for worker in workers {
        worker.join().unwrap();
    }

    let mut client = connect();
    let end = server_now(&mut client);
    let total = admitted.load(Ordering::SeqCst);
    let bound = 10.0 + 20.0 * (end - start);
    println!(
        "admitted {total} ({before_crash} before the crash, {} after), {} failed calls, bound {bound:.1}",
        admitted_after.load(Ordering::SeqCst),
        failures.load(Ordering::SeqCst)
    );
    assert!(
        failures.load(Ordering::SeqCst) > 0,
        "the crash interrupted the load"
    );
    assert!(
        before_crash > 10 && admitted_after.load(Ordering::SeqCst) > 0,
        "load ran on both sides of the crash"
    );
    assert!(
        total as f64 <= bound,
        "over-admission across the crash: {total} > {bound}"
    );

    // The state is one whole row.
    let rows = client
        .query(
            "SELECT value, ts <= clock_timestamp() FROM rate_limiter.rate_limits WHERE name = $1",
            &[&name],
        )
        .unwrap();
    assert_eq!(rows.len(), 1);
    let (value, ts_in_past): (f64, bool) = (rows[0].get(0), rows[0].get(1));
    assert!(
        value.is_finite() && (0.0..=10.0).contains(&value),
        "{value}"
    );
    assert!(ts_in_past);
}
