//! A worker killed between PREPARE and COMMIT PREPARED: the prepared
//! transaction holds its row until Citus's recovery commits it.

use super::*;

/// Undoes the coordinator's `synchronous_standby_names` when dropped, so a
/// failed test leaves no commit waiting.
struct CommitsWait;

impl CommitsWait {
    /// From now on, every commit on the coordinator that wrote waits for a
    /// synchronous standby that does not exist.
    fn start() -> CommitsWait {
        set_synchronous_standby_names("'rate_limiter_test_nobody'").expect("make commits wait");
        CommitsWait
    }
}

/// `ALTER SYSTEM SET synchronous_standby_names` on the coordinator, then a
/// reload (two statements: `ALTER SYSTEM` runs outside a transaction).
fn set_synchronous_standby_names(value: &str) -> Result<(), postgres::Error> {
    let mut coordinator = coordinator();
    coordinator.batch_execute(&format!(
        "ALTER SYSTEM SET synchronous_standby_names = {value}"
    ))?;
    coordinator.batch_execute("SELECT pg_reload_conf()")
}

impl Drop for CommitsWait {
    fn drop(&mut self) {
        let _ = set_synchronous_standby_names("DEFAULT");
    }
}

/// Polls `query` (one boolean) on `client` until it is true.
fn wait_until(client: &mut Client, query: &str, what: &str) {
    for _ in 0..600 {
        if client.query_one(query, &[]).expect(what).get::<_, bool>(0) {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    panic!("waited a minute for {what}");
}

#[test]
#[ignore = "needs the Citus cluster of scripts/test.sh"]
fn a_worker_killed_between_prepare_and_commit_keeps_what_committed_and_never_over_admits() {
    make_distributed();
    forget("crash");
    let urls = urls();
    let mut coordinator = coordinator();
    define(&mut coordinator, "crash", 10.0);
    let (one, two) = keys_on_each_worker(&mut coordinator, "crash-");

    // Between Citus's PREPARE TRANSACTION on the workers (at pre-commit)
    // and its COMMIT PREPARED (after the local commit) the coordinator
    // waits here: its commit record waits for a synchronous standby that
    // does not exist.
    let waiting = CommitsWait::start();
    let committer = {
        let url = urls[0].clone();
        let (one, two) = (one.clone(), two.clone());
        std::thread::spawn(move || {
            let mut client = connect(&url);
            client
                .batch_execute("SET application_name = 'rate_limiter_committer'")
                .expect("application_name");
            let mut transaction = client.transaction().expect("begin");
            for (key, count) in [(&one, 3.0), (&two, 4.0)] {
                let ok: bool = transaction
                    .query_one(
                        "SELECT ok FROM rate_limiter.rate_limit('crash', $1, $2)",
                        &[key, &count],
                    )
                    .expect("rate_limit")
                    .get(0);
                assert!(ok);
            }
            transaction.commit()
        })
    };
    let mut observer = connect(&urls[0]);
    wait_until(
        &mut observer,
        "SELECT EXISTS (SELECT FROM pg_stat_activity \
         WHERE application_name = 'rate_limiter_committer' AND wait_event = 'SyncRep')",
        "the coordinator's commit to wait after PREPARE",
    );
    let mut worker = connect(&urls[2]);
    let prepared: i64 = worker
        .query_one("SELECT count(*) FROM pg_prepared_xacts", &[])
        .expect("prepared transactions")
        .get(0);
    assert_eq!(prepared, 1, "worker 2 prepared the transaction");

    // SIGKILL a process of worker 2: its postmaster kills the others and
    // recovers from WAL, as after a crash; the prepared transaction
    // survives, and the coordinator's connection to worker 2 is gone.
    let pid: i32 = worker
        .query_one("SELECT pg_backend_pid()", &[])
        .expect("pid")
        .get(0);
    let killed = std::process::Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status()
        .expect("run kill");
    assert!(killed.success(), "SIGKILL worker 2's backend {pid}");
    drop(worker);
    let mut worker = reconnect(&urls[2]);
    let prepared: i64 = worker
        .query_one("SELECT count(*) FROM pg_prepared_xacts", &[])
        .expect("prepared transactions")
        .get(0);
    assert_eq!(prepared, 1, "the prepared transaction survived the crash");

    // Let the coordinator commit: it commits worker 1 (COMMIT PREPARED);
    // worker 2's COMMIT PREPARED cannot be sent (its connection died with
    // the crash), which Citus reports as a warning.
    drop(waiting);
    let started = std::time::Instant::now();
    committer
        .join()
        .expect("the committing client")
        .expect("the transaction committed on the coordinator");
    eprintln!(
        "the commit returned {:?} after the standby wait ended",
        started.elapsed()
    );

    // Until Citus's recovery commits it, the prepared transaction holds
    // worker 2's row: no call admits against the old state meanwhile.
    for url in [&urls[0], &urls[2]] {
        let mut client = connect(url);
        client
            .batch_execute("SET lock_timeout = '300ms'")
            .expect("lock_timeout");
        client
            .batch_execute("SET statement_timeout = '2s'")
            .expect("statement_timeout");
        let started = std::time::Instant::now();
        let answer = client.query_one(
            "SELECT ok FROM rate_limiter.rate_limit('crash', $1, 7.0)",
            &[&two],
        );
        eprintln!(
            "while prepared, through {url}: {:?} after {:?}",
            answer
                .as_ref()
                .map(|row| row.get::<_, bool>(0))
                .map_err(|error| error.code().cloned()),
            started.elapsed()
        );
        match answer {
            Ok(row) => assert!(
                !row.get::<_, bool>(0),
                "admitted 7 against a row with 6 left (through {url})"
            ),
            // Waits for the prepared transaction's row lock; through the
            // coordinator, the worker's wait ends at the statement timeout.
            Err(error) => assert!(
                [SqlState::LOCK_NOT_AVAILABLE, SqlState::QUERY_CANCELED]
                    .iter()
                    .any(|code| error.code() == Some(code)),
                "waits for the prepared transaction: {error}"
            ),
        }
    }

    // Citus's recovery (its maintenance daemon runs it every minute; here
    // at once) commits the prepared transaction on worker 2.
    // (A new session: the old one's connection to worker 2 died.)
    connect(&urls[0])
        .execute("SELECT recover_prepared_transactions()", &[])
        .expect("recover_prepared_transactions()");
    wait_until(
        &mut worker,
        "SELECT NOT EXISTS (SELECT FROM pg_prepared_xacts)",
        "worker 2's prepared transaction to be resolved",
    );
    let mut coordinator = connect(&urls[0]);
    assert_eq!(
        stored(&mut coordinator, "crash", &one),
        Some(7.0),
        "worker 1 committed"
    );
    assert_eq!(
        stored(&mut coordinator, "crash", &two),
        Some(6.0),
        "worker 2 holds what committed"
    );
    let ok = |client: &mut Client, count: f64| -> bool {
        client
            .query_one(
                "SELECT ok FROM rate_limiter.rate_limit('crash', $1, $2)",
                &[&two, &count],
            )
            .expect("rate_limit")
            .get(0)
    };
    assert!(!ok(&mut coordinator, 7.0), "7 of 6 left: refused");
    assert!(ok(&mut coordinator, 6.0), "6 of 6 left: admitted");
    assert!(!ok(&mut coordinator, 1.0), "nothing left");
    forget("crash");
}
