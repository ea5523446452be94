//! The concurrency test through pgbouncer in transaction pooling mode (8
//! clients multiplexed over 3 server connections): same answers, same
//! bound. Uses the simple query protocol (transaction pooling does not
//! keep named prepared statements) and the real clock (session settings
//! such as rate_limiter.now_override do not survive transaction pooling).

use postgres::{Client, NoTls, SimpleQueryMessage};
use rate_limiter_integration_tests::{connect, unique_name, DATABASE};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

fn pooler_url() -> String {
    let url = std::env::var("RATE_LIMITER_TEST_POOLER_URL")
        .expect("RATE_LIMITER_TEST_POOLER_URL is not set: run the tests through scripts/test.sh");
    format!("{url} dbname={DATABASE}")
}

/// The first column of the first row of a simple query's result.
fn first_value(messages: &[SimpleQueryMessage]) -> Option<String> {
    messages.iter().find_map(|message| match message {
        SimpleQueryMessage::Row(row) => row.get(0).map(str::to_string),
        _ => None,
    })
}

#[test]
fn through_pgbouncer_transaction_pooling_the_bound_holds() {
    connect(); // creates the database and the extension
    let name = unique_name("pooled");
    let sql = format!(
        "BEGIN; SELECT ok FROM rate_limiter.rate_limit('{name}', 'k', \
         config => rate_limiter.token_bucket(100, '10 days')); COMMIT;"
    );
    let barrier = Arc::new(Barrier::new(8));
    let workers: Vec<_> = (0..8)
        .map(|_| {
            let (sql, barrier) = (sql.clone(), barrier.clone());
            thread::spawn(move || {
                let mut client =
                    Client::connect(&pooler_url(), NoTls).expect("connect through pgbouncer");
                let (mut admitted, mut refused) = (0u64, 0u64);
                barrier.wait();
                let begin = Instant::now();
                while begin.elapsed() < Duration::from_secs(3) {
                    let messages = client
                        .simple_query(&sql)
                        .expect("no errors through the pooler");
                    match first_value(&messages).as_deref() {
                        Some("t") => admitted += 1,
                        Some("f") => refused += 1,
                        other => panic!("unexpected result {other:?}"),
                    }
                }
                (admitted, refused)
            })
        })
        .collect();
    let (admitted, refused) = workers
        .into_iter()
        .map(|worker| worker.join().unwrap())
        .fold((0, 0), |total, one| (total.0 + one.0, total.1 + one.1));
    // The limit refills by less than a thousandth of a token during the
    // run: exactly its capacity is admitted, never more, never fewer.
    println!("through pgbouncer: {admitted} admitted, {refused} refused");
    assert_eq!(admitted, 100, "admitted must equal the capacity exactly");
    assert!(refused > 0);
    // The pooler really multiplexed: 8 clients over at most 3 server connections.
    let admin_url = std::env::var("RATE_LIMITER_TEST_POOLER_URL").unwrap() + " dbname=pgbouncer";
    let mut admin = Client::connect(&admin_url, NoTls).expect("connect to the pgbouncer console");
    let servers = admin
        .simple_query("SHOW SERVERS")
        .unwrap()
        .iter()
        .filter(|message| match message {
            SimpleQueryMessage::Row(row) => row.get("database") == Some(DATABASE),
            _ => false,
        })
        .count();
    assert!(
        (1..=3).contains(&servers),
        "{servers} server connections for 8 clients"
    );
}

/// Through transaction pooling, a driver's prepared statements work inside
/// a transaction (prepare, execute and close all go to the one server
/// connection the transaction holds), and a setting made with `SET LOCAL`
/// stays with its transaction: the next transactions, on whichever server
/// connection, see the default again. (A session-level `SET` would stay
/// on the server connection and reach whichever client gets it next: the
/// README's pgbouncer section says to use `SET LOCAL`.)
#[test]
fn prepared_statements_and_set_local_through_transaction_pooling() {
    connect();
    let name = unique_name("pooled_local");
    let mut client = Client::connect(&pooler_url(), NoTls).expect("connect through pgbouncer");
    for round in 0..3 {
        let mut transaction = client.transaction().expect("begin");
        transaction
            .batch_execute("SET LOCAL rate_limiter.sqlstate = 'PT429'")
            .expect("SET LOCAL");
        let statement = transaction
            .prepare(
                "SELECT ok FROM rate_limiter.rate_limit($1, 'k', throws => true, \
                 config => rate_limiter.token_bucket(1, '10 days'))",
            )
            .expect("prepare inside the transaction");
        let outcome = transaction.query_one(&statement, &[&name]);
        match (round, outcome) {
            (0, Ok(row)) => {
                assert!(row.get::<_, bool>(0));
                transaction.commit().expect("commit");
            }
            (_, Err(error)) => {
                assert_eq!(
                    error.code().map(|code| code.code()),
                    Some("PT429"),
                    "{error}"
                );
                transaction.rollback().expect("rollback");
            }
            (round, Ok(_)) => panic!("round {round}: the limit of 1 admitted again"),
        }
    }
    // From other clients, on whichever server connections: the default.
    let mut others: Vec<Client> = (0..4)
        .map(|_| Client::connect(&pooler_url(), NoTls).expect("connect through pgbouncer"))
        .collect();
    for _ in 0..5 {
        for other in others.iter_mut() {
            let messages = other
                .simple_query("SHOW rate_limiter.sqlstate")
                .expect("SHOW through the pooler");
            assert_eq!(first_value(&messages).as_deref(), Some("RL429"));
        }
    }
}
