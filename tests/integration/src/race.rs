//! The race of new keys' inserts (docs/guarantees.md, "Concurrency and
//! exactness"), shared by the native and the portable edition's tests:
//! sessions that insert the same new state rows at once lose no call and
//! duplicate no row.

use postgres::{Client, NoTls};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

/// Hammers `call` (SQL with `$1` = `name` and `k.key` a key from the
/// server's clock) from 4 sessions in rounds of 2 s until a speculative
/// insert was withdrawn, then checks every limit of `limits`: one row per
/// key called, its consumption the calls admitted on the key.
pub fn race_new_keys(url: &str, name: &str, call: &str, limits: &[String]) {
    let mut admin = Client::connect(url, NoTls).expect("connect to the test server");
    let withdrawn = Arc::new(AtomicU64::new(0));
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut admitted: HashMap<String, i64> = HashMap::new();
    let sql = format!(
        "SELECT k.key, r.ok \
         FROM (SELECT (extract(epoch FROM clock_timestamp()) * 2000)::bigint::text AS key) AS k, \
         LATERAL {call} AS r"
    );
    // Hammer in rounds of 2 s until the withdrawal path has been taken.
    while withdrawn.load(Ordering::SeqCst) == 0 {
        assert!(
            Instant::now() < deadline,
            "no insert was ever withdrawn: the race was not exercised"
        );
        let workers: Vec<_> = (0..4)
            .map(|_| {
                let (url, name, sql, withdrawn) = (
                    url.to_string(),
                    name.to_string(),
                    sql.clone(),
                    withdrawn.clone(),
                );
                thread::spawn(move || {
                    let mut config: postgres::Config = url.parse().unwrap();
                    config.notice_callback(move |notice| {
                        if notice.message().contains("inserted the same state row") {
                            withdrawn.fetch_add(1, Ordering::SeqCst);
                        }
                    });
                    let mut client = config.connect(postgres::NoTls).unwrap();
                    client
                        .batch_execute("SET client_min_messages = debug1")
                        .unwrap();
                    let statement = client.prepare(&sql).unwrap();
                    let mut admitted: HashMap<String, i64> = HashMap::new();
                    let stop = Instant::now() + Duration::from_secs(2);
                    while Instant::now() < stop {
                        let row = client.query_one(&statement, &[&name]).unwrap();
                        assert!(row.get::<_, bool>(1), "a call was refused");
                        *admitted.entry(row.get(0)).or_default() += 1;
                    }
                    admitted
                })
            })
            .collect();
        for worker in workers {
            for (key, calls) in worker.join().unwrap() {
                *admitted.entry(key).or_default() += calls;
            }
        }
    }
    for limit in limits {
        let rows = admin
            .query(
                "SELECT key, value FROM rate_limiter.rate_limits WHERE name = $1",
                &[limit],
            )
            .unwrap();
        assert_eq!(rows.len(), admitted.len(), "{limit}: one row per key");
        for row in rows {
            let (key, value): (String, f64) = (row.get(0), row.get(1));
            assert_eq!(
                1_000_000.0 - value,
                admitted[&key] as f64,
                "{limit}, key {key}: stored consumption equals the admitted calls"
            );
        }
    }
    eprintln!(
        "{} keys, {} calls, {} inserts withdrawn",
        admitted.len(),
        admitted.values().sum::<i64>(),
        withdrawn.load(Ordering::SeqCst)
    );
}
