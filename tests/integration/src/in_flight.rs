//! The in-flight exactness run of docs/concurrency.md, "Guarantees",
//! shared by `concurrency_limits.rs` (one server, both editions) and the
//! Citus tests (`citus/concurrency.rs`, connections spread over the
//! nodes): workers take transaction and timed leases of one limit at
//! random isolation levels, commit or roll back at random, and a killer
//! terminates holders with `pg_terminate_backend`; never more than `max`
//! may be in flight.
//!
//! The count of holders is taken from inside the critical section: a
//! worker adds itself after `acquire` answered `ok` (its slot is held) and
//! takes itself off before its slot can be freed (before its transaction
//! ends, or before it releases its timed lease). A holder the killer
//! terminates is taken off by the killer before the backend dies. So the
//! count never exceeds the holders the server let in, and it must never
//! exceed `max`.

use crate::unique_name;
use postgres::{Client, IsolationLevel, NoTls};
use rand::{Rng, SeedableRng};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const MAX: usize = 4;
const WORKERS: usize = 12;
const RUN_FOR: Duration = Duration::from_secs(4);

/// Outside the critical section, inside it, or taken off by the killer.
const OUT: u8 = 0;
const IN: u8 = 1;
const KILLED: u8 = 2;

struct Shared {
    holders: AtomicUsize,
    most: AtomicUsize,
    admitted: AtomicUsize,
    refused: AtomicUsize,
    killed: AtomicUsize,
    stop: AtomicBool,
    state: Vec<AtomicU8>,
    pid: Vec<AtomicI32>,
}

impl Shared {
    fn enter(&self, worker: usize) {
        self.state[worker].store(IN, Ordering::SeqCst);
        let now = self.holders.fetch_add(1, Ordering::SeqCst) + 1;
        self.most.fetch_max(now, Ordering::SeqCst);
        self.admitted.fetch_add(1, Ordering::SeqCst);
    }

    /// Before the slot can be freed: off the count, unless the killer
    /// took it off already. True when it did: then the worker waits until
    /// the killer has signalled its backend, and drops its connection
    /// without another statement (a later transaction of a backend about
    /// to die could otherwise hold a slot the count shows).
    fn leave(&self, worker: usize) -> bool {
        if self.state[worker]
            .compare_exchange(IN, OUT, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
        {
            self.holders.fetch_sub(1, Ordering::SeqCst);
            return false;
        }
        let since = Instant::now();
        while self.state[worker].load(Ordering::SeqCst) == KILLED {
            assert!(
                since.elapsed() < Duration::from_secs(60),
                "worker {worker}: the killer never signalled its backend"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        true
    }
}

fn connect(url: &str) -> Client {
    Client::connect(url, NoTls).unwrap_or_else(|error| panic!("connect to {url}: {error}"))
}

/// Where worker `worker` connects: the nodes in turn.
fn node_of(urls: &[String], worker: usize) -> &str {
    &urls[worker % urls.len()]
}

/// One worker's loop until the run ends: a transaction lease (committed or
/// rolled back at random) or a timed lease (released after the work), at a
/// random isolation level.
fn work(shared: &Shared, urls: &[String], name: &str, key: Option<&str>, worker: usize, seed: u64) {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut client: Option<Client> = None;
    while !shared.stop.load(Ordering::SeqCst) {
        let connection = match client.as_mut() {
            Some(connection) if !connection.is_closed() => connection,
            _ => {
                let mut fresh = connect(node_of(urls, worker));
                let pid: i32 = fresh
                    .query_one("SELECT pg_backend_pid()", &[])
                    .expect("pid")
                    .get(0);
                shared.pid[worker].store(pid, Ordering::SeqCst);
                client = Some(fresh);
                client.as_mut().unwrap()
            }
        };
        let isolation = match rng.random_range(0..3) {
            0 => IsolationLevel::ReadCommitted,
            1 => IsolationLevel::RepeatableRead,
            _ => IsolationLevel::Serializable,
        };
        let timed = rng.random_bool(0.3);
        let hold = Duration::from_micros(rng.random_range(1000..4000));
        let result: Result<bool, postgres::Error> = (|| {
            let mut transaction = connection
                .build_transaction()
                .isolation_level(isolation)
                .start()?;
            let row = transaction.query_one(
                "SELECT ok, lease_id FROM rate_limiter.acquire($1, $3, lease => $2::text::interval)",
                &[&name, &if timed { Some("2 seconds") } else { None }, &key],
            )?;
            let ok: bool = row.get(0);
            if !ok {
                shared.refused.fetch_add(1, Ordering::SeqCst);
                transaction.rollback()?;
                return Ok(false);
            }
            if timed {
                let lease_id: i64 = row.get(1);
                transaction.commit()?;
                shared.enter(worker);
                std::thread::sleep(hold);
                if shared.leave(worker) {
                    return Ok(true);
                }
                connection.query_one("SELECT rate_limiter.release($1, $2)", &[&name, &lease_id])?;
                return Ok(false);
            }
            shared.enter(worker);
            std::thread::sleep(hold);
            let rollback = rng.random_bool(0.3);
            if shared.leave(worker) {
                return Ok(true);
            }
            if rollback {
                transaction.rollback()?;
            } else {
                transaction.commit()?;
            }
            Ok(false)
        })();
        match result {
            Ok(false) => {}
            Ok(true) => client = None,
            Err(error) => {
                // (Not in the critical section: an error comes from a
                // statement, and none runs inside it.)
                let code = error.code().map(|code| code.code().to_string());
                match code.as_deref() {
                    Some("40001") | Some("40P01") => {}
                    _ if client.as_ref().is_none_or(|c| c.is_closed()) => client = None,
                    Some("57P01") => client = None,
                    _ => panic!("worker {worker}: unexpected error: {error}"),
                }
            }
        }
    }
}

/// Terminates a holder every 100 ms (the first one found holding, from a
/// random worker on): takes it off the count first (its slot is held
/// until its backend is gone).
fn kill(shared: &Shared, urls: &[String]) {
    let mut clients: Vec<Client> = urls.iter().map(|url| connect(url)).collect();
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    while !shared.stop.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(100));
        let first = rng.random_range(0..WORKERS);
        let holder = (0..WORKERS)
            .map(|offset| (first + offset) % WORKERS)
            .find(|&worker| {
                shared.state[worker]
                    .compare_exchange(IN, KILLED, Ordering::SeqCst, Ordering::SeqCst)
                    .is_ok()
            });
        if let Some(worker) = holder {
            shared.holders.fetch_sub(1, Ordering::SeqCst);
            let pid = shared.pid[worker].load(Ordering::SeqCst);
            clients[worker % urls.len()]
                // (int4: Citus adds a pg_terminate_backend(bigint) of its
                // global process ids.)
                .query_one("SELECT pg_terminate_backend($1::int4)", &[&pid])
                .expect("terminate a holder");
            shared.killed.fetch_add(1, Ordering::SeqCst);
            shared.state[worker].store(OUT, Ordering::SeqCst);
        }
    }
}

/// The run against `urls` (worker i connects to `urls[i % len]`; one
/// server: one URL) on a new limit of `owner`'s database, on `key` (None:
/// a global limit); then every slot must be free again, and only `max`.
pub fn never_more_than_max(urls: &[String], owner: &mut Client, key: Option<&str>) {
    let name = unique_name("in_flight");
    owner
        .execute(
            &format!("SELECT rate_limiter.define($1, rate_limiter.concurrency({MAX}))"),
            &[&name],
        )
        .expect("define the limit");
    let shared = Arc::new(Shared {
        holders: AtomicUsize::new(0),
        most: AtomicUsize::new(0),
        admitted: AtomicUsize::new(0),
        refused: AtomicUsize::new(0),
        killed: AtomicUsize::new(0),
        stop: AtomicBool::new(false),
        state: (0..WORKERS).map(|_| AtomicU8::new(OUT)).collect(),
        pid: (0..WORKERS).map(|_| AtomicI32::new(0)).collect(),
    });
    let mut threads = Vec::new();
    for worker in 0..WORKERS {
        let (shared, urls, name) = (shared.clone(), urls.to_vec(), name.clone());
        let key = key.map(str::to_string);
        threads.push(std::thread::spawn(move || {
            work(
                &shared,
                &urls,
                &name,
                key.as_deref(),
                worker,
                1000 + worker as u64,
            )
        }));
    }
    {
        let (shared, urls) = (shared.clone(), urls.to_vec());
        threads.push(std::thread::spawn(move || kill(&shared, &urls)));
    }
    let started = Instant::now();
    while started.elapsed() < RUN_FOR {
        std::thread::sleep(Duration::from_millis(50));
    }
    shared.stop.store(true, Ordering::SeqCst);
    for thread in threads {
        thread.join().expect("a worker panicked");
    }
    let most = shared.most.load(Ordering::SeqCst);
    eprintln!(
        "{} (key {key:?}): most in flight {most} of {MAX}; admitted {}, refused {}, killed {}",
        urls[0],
        shared.admitted.load(Ordering::SeqCst),
        shared.refused.load(Ordering::SeqCst),
        shared.killed.load(Ordering::SeqCst)
    );
    assert!(most <= MAX, "{most} in flight, more than max = {MAX}");
    // (Not necessarily all max at once: a killed holder's timed lease keeps
    // its slot until it ends, uncounted.)
    assert!(most >= 2, "holders overlapped ({most} at most)");
    assert!(shared.refused.load(Ordering::SeqCst) > 0);
    assert!(
        shared.killed.load(Ordering::SeqCst) > 0,
        "some holder was killed"
    );
    // Nothing leaked: once the killed holders' timed leases have expired
    // (2 s, a clock a minute on), all max slots are free, and no more.
    let mut transaction = owner.transaction().expect("begin");
    transaction
        .batch_execute("SELECT set_config('rate_limiter.now_override', (clock_timestamp() + interval '1 minute')::text, true)")
        .expect("move the clock on");
    for slot in 0..=MAX {
        let ok: bool = transaction
            .query_one(
                "SELECT ok FROM rate_limiter.acquire($1, $2)",
                &[&name, &key],
            )
            .expect("acquire")
            .get(0);
        assert_eq!(
            ok,
            slot < MAX,
            "slot {slot}: every slot is free again, and only max"
        );
    }
    transaction.rollback().expect("rollback");
}
