//! Long sessions over PostgreSQL's extended query protocol (Parse, Bind,
//! Execute, Sync: what psycopg 3, JDBC, node-postgres with parameters and
//! pgx use, and what the `postgres` crate uses here) through every
//! function, errors included: a statement that fails must leave nothing
//! open behind it (docs/guarantees.md, "Errors"). The server warns at the
//! end of a transaction that finds a relation, a TupleDesc, a buffer or a
//! snapshot still referenced ("... reference leak", "resource was not
//! closed"), and it sends that WARNING to the session: here any such
//! notice fails the test, as does a session that the server drops (a
//! backend that crashed) or a server that restarted.
//!
//! Each session draws its calls from a seeded generator (the differential
//! test's, with the edge cases: `calls::statement`), in autocommit and in
//! transaction blocks with savepoints, with literal arguments, with bound
//! parameters and through named prepared statements, with plain SQL
//! statements between them. `RATE_LIMITER_TEST_SEED` replays a run; the
//! seed used is printed.

use postgres::{Client, NoTls};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rate_limiter_integration_tests::calls::{literal, statement, KEYS, NAMES};
use rate_limiter_integration_tests::{config_of, fresh_database};
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

const DATABASE: &str = "rate_limiter_extended_protocol";
const SESSIONS: u64 = 6;
const CALLS: usize = 2_500;

/// A session whose WARNING notices are collected in `warnings`.
fn session(warnings: &Arc<Mutex<Vec<String>>>) -> Client {
    let mut config = config_of(DATABASE);
    let sink = Arc::clone(warnings);
    config.notice_callback(move |notice| {
        if notice.severity() == "WARNING" {
            sink.lock().unwrap().push(notice.message().to_string());
        }
    });
    config.connect(NoTls).expect("connect to the test database")
}

/// Whether a WARNING says that something was left open.
fn is_leak(message: &str) -> bool {
    message.contains("leak") || message.contains("not closed")
}

/// Runs one statement of `sql` over the extended protocol: `Ok` when it
/// ran or failed with an SQL error (the session lives on), `Err` with the
/// client's error when the session itself broke.
fn run(client: &mut Client, sql: &str) -> Result<(), String> {
    match client.query(sql, &[]) {
        Ok(_) => Ok(()),
        Err(error) if error.as_db_error().is_some() => Ok(()),
        Err(error) => Err(error.to_string()),
    }
}

/// The extra statements a session makes between calls: plain SQL (the
/// statement after which the leak showed), bound parameters, a prepared
/// statement run again, `status`.
fn plain(rng: &mut StdRng, client: &mut Client, trace: &mut Trace) -> Result<(), String> {
    let name = NAMES[rng.random_range(0..NAMES.len())];
    let key = KEYS[rng.random_range(0..KEYS.len())];
    let choice = rng.random_range(0..5);
    trace.note(&format!("(plain statement {choice} for {name}, {key:?})"));
    trace.statements += 1;
    let outcome = match choice {
        0 => client
            .query("DELETE FROM scratch WHERE id < 0", &[])
            .map(drop),
        1 => client
            .query(
                "SELECT * FROM rate_limiter.rate_check($1, $2, $3, throws => true)",
                &[&name, &key, &rng.random_range(0.0..5.0f64)],
            )
            .map(drop),
        2 => client
            .query(
                "SELECT * FROM rate_limiter.rate_limit($1, $2, $3, reserve => $4)",
                &[
                    &name,
                    &key,
                    &rng.random_range(0.0..3.0f64),
                    &rng.random_bool(0.3),
                ],
            )
            .map(drop),
        3 => client
            .prepare("SELECT * FROM rate_limiter.rate_check($1, $2, 1, throws => true)")
            .and_then(|prepared| {
                for _ in 0..3 {
                    match client.query(&prepared, &[&name, &key]) {
                        Err(error) if error.as_db_error().is_none() => return Err(error),
                        _ => {}
                    }
                }
                Ok(())
            }),
        _ => client
            .query(
                &format!(
                    "SELECT * FROM rate_limiter.status({}, {})",
                    literal(Some(name)),
                    literal(key)
                ),
                &[],
            )
            .map(drop),
    };
    match outcome {
        Err(error) if error.as_db_error().is_none() => Err(error.to_string()),
        _ => trace.check(),
    }
}

/// The statements a session ran: how many, and the last few (for the
/// message of a failure).
struct Trace {
    warnings: Arc<Mutex<Vec<String>>>,
    recent: VecDeque<String>,
    statements: usize,
}

impl Trace {
    fn note(&mut self, sql: &str) {
        self.recent.push_back(sql.to_string());
        if self.recent.len() > 12 {
            self.recent.pop_front();
        }
    }

    /// Runs `sql` (see [`run`]); `Err` also when the server warned that
    /// something was left open.
    fn run(&mut self, client: &mut Client, sql: &str) -> Result<(), String> {
        self.note(sql);
        self.statements += 1;
        run(client, sql)?;
        self.check()
    }

    /// `Err` when the server warned that something was left open.
    fn check(&mut self) -> Result<(), String> {
        let leaks: Vec<String> = self
            .warnings
            .lock()
            .unwrap()
            .drain(..)
            .filter(|message| is_leak(message))
            .collect();
        if leaks.is_empty() {
            Ok(())
        } else {
            Err(format!("the server warned {leaks:?}"))
        }
    }

    fn recent(&self) -> String {
        Vec::from(self.recent.clone()).join("\n    ")
    }
}

#[test]
fn long_sessions_over_the_extended_protocol_leave_nothing_open_and_never_crash() {
    let seed: u64 = std::env::var("RATE_LIMITER_TEST_SEED")
        .ok()
        .and_then(|seed| seed.parse().ok())
        .unwrap_or_else(rand::random);
    eprintln!("RATE_LIMITER_TEST_SEED={seed}");
    let mut admin = fresh_database(DATABASE);
    admin
        .batch_execute("CREATE TABLE scratch (id int); SET TimeZone = 'UTC'")
        .expect("set up");
    let started: String = admin
        .query_one("SELECT pg_postmaster_start_time()::text", &[])
        .unwrap()
        .get(0);
    let warnings = Arc::new(Mutex::new(Vec::new()));
    let mut statements = 0usize;
    for number in 0..SESSIONS {
        let mut rng = StdRng::seed_from_u64(seed.wrapping_add(number));
        let mut client = session(&warnings);
        client
            .batch_execute("SET TimeZone = 'UTC'; SET rate_limiter.random_seed = 7")
            .expect("set up the session");
        let mut clock = 0i64;
        let mut trace = Trace {
            warnings: Arc::clone(&warnings),
            recent: VecDeque::new(),
            statements: 0,
        };
        let mut in_block = false;
        for call in 0..CALLS {
            let (settings, body) = statement(&mut rng, &mut clock, true);
            // Transaction blocks: begun now and then, with a savepoint,
            // ended by COMMIT or ROLLBACK (a failed block rolls back
            // whatever is said).
            let mut outcome = Ok(());
            if !in_block && rng.random_bool(0.05) {
                outcome = trace.run(&mut client, "BEGIN");
                in_block = true;
            } else if in_block && rng.random_bool(0.1) {
                let end = ["COMMIT", "ROLLBACK", "ROLLBACK TO SAVEPOINT s"][rng.random_range(0..3)];
                outcome = trace.run(&mut client, end);
                if end != "ROLLBACK TO SAVEPOINT s" {
                    in_block = false;
                }
            } else if in_block && rng.random_bool(0.1) {
                outcome = trace.run(&mut client, "SAVEPOINT s");
            }
            for setting in settings.split("; ") {
                outcome = outcome.and_then(|_| trace.run(&mut client, setting));
            }
            outcome = outcome.and_then(|_| trace.run(&mut client, &body));
            if outcome.is_ok() && rng.random_bool(0.2) {
                outcome = plain(&mut rng, &mut client, &mut trace);
            }
            // (A leak warning is an Err of the statement that drew it.)
            let recent_text = trace.recent();
            if let Err(error) = outcome {
                panic!(
                    "session {number} (seed {}), call {call}: {error}, after:\n    {recent_text}",
                    seed.wrapping_add(number)
                );
            }
        }
        // The end of the last block, and of the session.
        let _ = run(&mut client, "ROLLBACK");
        statements += trace.statements;
        drop(client);
    }
    let leaks: Vec<String> = warnings
        .lock()
        .unwrap()
        .drain(..)
        .filter(|m| is_leak(m))
        .collect();
    assert!(leaks.is_empty(), "the server warned {leaks:?}");
    let mut after = config_of(DATABASE)
        .connect(NoTls)
        .expect("the server is up");
    let now: String = after
        .query_one("SELECT pg_postmaster_start_time()::text", &[])
        .unwrap()
        .get(0);
    assert_eq!(now, started, "the server restarted during the sessions");
    eprintln!("{SESSIONS} sessions, {statements} statements over the extended protocol");
}
