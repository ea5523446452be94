//! Two-phase commit: a call's consumption and row lock belong to its
//! transaction also once it is prepared (`PREPARE TRANSACTION`): another
//! caller of the same key waits for it; `ROLLBACK PREPARED` gives the
//! tokens back and `COMMIT PREPARED` keeps them, also when the server
//! restarts in between (the test server runs with max_prepared_transactions).

use postgres::Client;
use rate_limiter_integration_tests::{connect, restart_server, server_options, unique_name};
use std::thread;
use std::time::{Duration, Instant};

/// A limit of 3 tokens an hour, with the clock stopped in every session.
fn setup(client: &mut Client) -> String {
    let name = unique_name("two_phase");
    client
        .execute(
            "SELECT rate_limiter.define($1, rate_limiter.token_bucket(3, '1 hour'))",
            &[&name],
        )
        .expect("define");
    name
}

fn stopped_clock() -> Client {
    let mut client = connect();
    client
        .batch_execute("SET rate_limiter.now_override = '2026-01-01 00:00:00+00'")
        .expect("stop the clock");
    client
}

/// Consumes 2 tokens of (name, key) and prepares the transaction as `gid`.
fn prepare(name: &str, key: &str, gid: &str) {
    let mut client = stopped_clock();
    client.batch_execute("BEGIN").expect("begin");
    let remaining: f64 = client
        .query_one(
            "SELECT remaining FROM rate_limiter.rate_limit($1, $2, 2)",
            &[&name, &key],
        )
        .expect("rate_limit")
        .get(0);
    assert_eq!(remaining, 1.0);
    client
        .batch_execute(&format!("PREPARE TRANSACTION '{gid}'"))
        .expect("prepare");
}

/// Starts a call of 1 token of (name, key) in another session and checks
/// that it waits (for the prepared transaction's row lock); returns the
/// thread, which ends with the call's remaining tokens.
fn waiting_call(name: &str, key: &str) -> thread::JoinHandle<f64> {
    let mut watcher = connect();
    let (name, key) = (name.to_string(), key.to_string());
    let caller = thread::spawn(move || {
        let mut client = stopped_clock();
        client
            .batch_execute("SET application_name = 'two_phase_waiter'")
            .expect("name the session");
        client
            .query_one(
                "SELECT remaining FROM rate_limiter.rate_limit($1, $2)",
                &[&name, &key],
            )
            .expect("the waiting call")
            .get(0)
    });
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let waiting: bool = watcher
            .query_one(
                "SELECT EXISTS (SELECT FROM pg_stat_activity
                                WHERE application_name = 'two_phase_waiter' AND wait_event_type = 'Lock')",
                &[],
            )
            .expect("pg_stat_activity")
            .get(0);
        if waiting {
            break;
        }
        assert!(
            !caller.is_finished(),
            "the call did not wait for the prepared transaction"
        );
        assert!(Instant::now() < deadline, "the call never waited");
        thread::sleep(Duration::from_millis(20));
    }
    // Still waiting a moment later.
    thread::sleep(Duration::from_millis(200));
    assert!(!caller.is_finished(), "the call stopped waiting on its own");
    caller
}

fn finish(gid: &str, verb: &str) {
    connect()
        .batch_execute(&format!("{verb} PREPARED '{gid}'"))
        .expect("finish the prepared transaction");
}

#[test]
fn prepared_transactions_hold_their_consumption_until_they_finish() {
    let mut client = connect();
    let name = setup(&mut client);

    // ROLLBACK PREPARED gives the 2 tokens back: the waiting call then
    // finds 3 and leaves 2.
    prepare(&name, "rollback", "rl_two_phase_rollback");
    let waiter = waiting_call(&name, "rollback");
    finish("rl_two_phase_rollback", "ROLLBACK");
    assert_eq!(waiter.join().expect("the waiting call"), 2.0);

    // COMMIT PREPARED keeps them: the waiting call finds 1 and leaves 0.
    prepare(&name, "commit", "rl_two_phase_commit");
    let waiter = waiting_call(&name, "commit");
    finish("rl_two_phase_commit", "COMMIT");
    assert_eq!(waiter.join().expect("the waiting call"), 0.0);

    // Across a restart: the prepared transactions survive it, still hold
    // their rows, and finish as asked.
    prepare(&name, "restart-commit", "rl_two_phase_restart_commit");
    prepare(&name, "restart-rollback", "rl_two_phase_restart_rollback");
    drop(client);
    restart_server(&server_options());
    let waiter = waiting_call(&name, "restart-commit");
    finish("rl_two_phase_restart_commit", "COMMIT");
    assert_eq!(waiter.join().expect("the waiting call"), 0.0);
    let waiter = waiting_call(&name, "restart-rollback");
    finish("rl_two_phase_restart_rollback", "ROLLBACK");
    assert_eq!(waiter.join().expect("the waiting call"), 2.0);

    // The stored state is what committed.
    let mut client = connect();
    let rows: Vec<(String, f64)> = client
        .query(
            "SELECT key, value FROM rate_limiter.rate_limits WHERE name = $1 ORDER BY key",
            &[&name],
        )
        .expect("state")
        .iter()
        .map(|row| (row.get(0), row.get(1)))
        .collect();
    assert_eq!(
        rows,
        vec![
            ("commit".to_string(), 0.0),
            ("restart-commit".to_string(), 0.0),
            ("restart-rollback".to_string(), 2.0),
            ("rollback".to_string(), 2.0),
        ]
    );
    let left: i64 = client
        .query_one(
            "SELECT count(*) FROM pg_prepared_xacts WHERE gid LIKE 'rl_two_phase%'",
            &[],
        )
        .expect("pg_prepared_xacts")
        .get(0);
    assert_eq!(left, 0);
}
