//! Crash safety: under concurrent load on a limit, the postmaster is killed
//! with SIGKILL half-way through its capacity and restarted, and the load
//! continues until the limit is exhausted. Every consumption committed
//! before the crash is still counted: admitted-in-total across the crash
//! never exceeds the capacity, the stored state accounts for every
//! committed admission (and for nothing beyond the calls in doubt), and
//! the state row is whole.

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

/// Sends SIGKILL to the postmaster (its pid is the first line of
/// postmaster.pid), with the `kill` system call: no shell tool needed.
fn kill_postmaster(pgdata: &str) {
    let pid = std::fs::read_to_string(format!("{pgdata}/postmaster.pid")).expect("postmaster.pid");
    let pid: libc::pid_t = pid
        .lines()
        .next()
        .and_then(|line| line.trim().parse().ok())
        .expect("a pid on the first line of postmaster.pid");
    // SAFETY: kill(2) with a pid read from the server's own pid file.
    let result = unsafe { libc::kill(pid, libc::SIGKILL) };
    assert_eq!(
        result,
        0,
        "kill -9 {pid}: {}",
        std::io::Error::last_os_error()
    );
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

/// Waits until `done()` or the deadline; false on timeout.
fn wait_for(done: impl Fn() -> bool, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    while !done() {
        if Instant::now() > deadline {
            return false;
        }
        thread::sleep(Duration::from_millis(10));
    }
    true
}

/// A fixed window of CAPACITY tokens a day, anchored an hour ago: no
/// refill during the test, so the exact bound is CAPACITY and every
/// committed admission must show in the stored value.
const CAPACITY: f64 = 3000.0;

#[test]
fn committed_consumption_survives_a_postmaster_sigkill() {
    let pgdata = env("RATE_LIMITER_TEST_PGDATA");
    let mut client = connect();
    let name = unique_name("crash");
    let start: String = client
        .query_one("SELECT (now() - interval '1 hour')::text", &[])
        .unwrap()
        .get(0);
    let sql = format!(
        "SELECT ok FROM rate_limiter.rate_limit('{name}', 'k', \
         config => rate_limiter.fixed_window({CAPACITY}, '1 day', start => '{start}'))"
    );
    drop(client);

    let stop = Arc::new(AtomicBool::new(false));
    let crashed = Arc::new(AtomicBool::new(false));
    let counters: Arc<[AtomicU64; 4]> = Arc::new(Default::default());
    const ADMITTED: usize = 0;
    const ADMITTED_AFTER: usize = 1;
    const REFUSED_AFTER: usize = 2;
    const INTERRUPTED: usize = 3;
    let workers: Vec<_> = (0..8)
        .map(|_| {
            let (sql, stop, crashed, counters) =
                (sql.clone(), stop.clone(), crashed.clone(), counters.clone());
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
                    // An admission counts once its transaction committed.
                    let outcome = connection.transaction().and_then(|mut transaction| {
                        let ok: bool = transaction.query_one(sql.as_str(), &[])?.get(0);
                        transaction.commit()?;
                        Ok(ok)
                    });
                    let after = crashed.load(Ordering::SeqCst);
                    match outcome {
                        Ok(true) => {
                            counters[ADMITTED].fetch_add(1, Ordering::SeqCst);
                            if after {
                                counters[ADMITTED_AFTER].fetch_add(1, Ordering::SeqCst);
                            }
                        }
                        Ok(false) if after => {
                            counters[REFUSED_AFTER].fetch_add(1, Ordering::SeqCst);
                        }
                        Ok(false) => {}
                        Err(_) => {
                            // In doubt: the commit may or may not have happened.
                            counters[INTERRUPTED].fetch_add(1, Ordering::SeqCst);
                            client = None;
                        }
                    }
                }
            })
        })
        .collect();

    // Crash in the middle of the consumption, while admissions are committing.
    assert!(wait_for(
        || counters[ADMITTED].load(Ordering::SeqCst) as f64 >= CAPACITY / 2.0,
        Duration::from_secs(30)
    ));
    let before_crash = counters[ADMITTED].load(Ordering::SeqCst);
    kill_postmaster(&pgdata);
    crashed.store(true, Ordering::SeqCst);
    restart(&pgdata);
    // Continue until the limit is exhausted and refusing.
    let exhausted = wait_for(
        || counters[REFUSED_AFTER].load(Ordering::SeqCst) >= 200,
        Duration::from_secs(30),
    );
    stop.store(true, Ordering::SeqCst);
    for worker in workers {
        worker.join().unwrap();
    }

    let load = |i: usize| counters[i].load(Ordering::SeqCst);
    let mut client = connect();
    let rows = client
        .query(
            "SELECT value, ts <= clock_timestamp() FROM rate_limiter.rate_limits WHERE name = $1",
            &[&name],
        )
        .unwrap();
    println!(
        "admitted {} ({before_crash} before the crash, {} after), {} calls interrupted, {} refused after; capacity {CAPACITY}",
        load(ADMITTED),
        load(ADMITTED_AFTER),
        load(INTERRUPTED),
        load(REFUSED_AFTER)
    );
    assert!(exhausted, "the limit was not exhausted after the restart");
    assert!(load(INTERRUPTED) > 0, "the crash interrupted the load");
    assert!(
        load(ADMITTED_AFTER) > 0,
        "admissions continued after the restart"
    );
    // Never more than the bound, across the crash.
    assert!(
        load(ADMITTED) as f64 <= CAPACITY,
        "over-admission across the crash"
    );
    // The state is one whole row, and every committed admission is in it.
    assert_eq!(rows.len(), 1);
    let (value, ts_in_past): (f64, bool) = (rows[0].get(0), rows[0].get(1));
    assert!(ts_in_past);
    let consumed = CAPACITY - value;
    assert!(
        consumed >= load(ADMITTED) as f64,
        "committed admissions were lost: {consumed} < {}",
        load(ADMITTED)
    );
    assert!(
        consumed <= (load(ADMITTED) + load(INTERRUPTED)) as f64,
        "consumption nobody was admitted for"
    );
    assert_eq!(value, 0.0, "exhausted");
}
