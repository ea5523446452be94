//! Limit shapes on a cluster (docs/shapes.md, "On a Citus cluster"): a
//! sliding window is decided on its key's node from any node, and
//! `status`, `http_headers` and a refusal's `retry_after` read the same
//! counts from every node, the previous window's count included (which
//! `_rate_state_at` carries from another node in a row of its own); for a
//! keyed sharded sliding window and for a global one whose shards spread
//! over the nodes too. A calendar window reads the same window from
//! every node.

use super::*;

/// (value, full_at in seconds since the epoch) of `status(name, key)`.
fn status(client: &mut Client, name: &str, key: Option<&str>) -> (f64, f64) {
    let row = client
        .query_one(
            "SELECT value, extract(epoch FROM full_at)::float8 FROM rate_limiter.status($1, $2)",
            &[&name, &key],
        )
        .unwrap_or_else(|error| panic!("status({name}, {key:?}): {error}"));
    (row.get(0), row.get(1))
}

/// (ok, retry_after in seconds, remaining) of `rate_check(name, key, count)`.
fn check(client: &mut Client, name: &str, key: Option<&str>, count: f64) -> (bool, f64, f64) {
    let row = client
        .query_one(
            "SELECT ok, coalesce(extract(epoch FROM retry_after), 0)::float8, remaining \
             FROM rate_limiter.rate_check($1, $2, $3)",
            &[&name, &key, &count],
        )
        .unwrap_or_else(|error| panic!("rate_check({name}, {key:?}): {error}"));
    (row.get(0), row.get(1), row.get(2))
}

fn at(client: &mut Client, time: &str) {
    client
        .batch_execute(&format!("SET rate_limiter.now_override = '{time}'"))
        .expect("set the clock");
}

#[test]
#[ignore = "needs the Citus cluster of scripts/test.sh"]
fn a_sliding_window_answers_alike_from_every_node() {
    forget("slw");
    make_distributed();
    let mut coordinator = coordinator();
    coordinator
        .batch_execute(
            "SELECT rate_limiter.define('slw', rate_limiter.sliding_window(10, '1 minute', start => '2026-01-01'));
             SELECT rate_limiter.define('slw_sharded', rate_limiter.sliding_window(40, '1 minute', shards => 4,
                                                                                   start => '2026-01-01'));
             SELECT rate_limiter.define('slw_global', rate_limiter.sliding_window(40, '1 minute', shards => 4,
                                                                                  start => '2026-01-01'));",
        )
        .expect("define the sliding windows");
    let mut clients: Vec<Client> = urls().iter().map(|url| connect(url)).collect();
    let (on_worker1, on_worker2) = keys_on_each_worker(&mut clients[0], "slw-key-");
    // 6 of each key in the first window, from another node than its own;
    // 24 of the sharded limits' 40.
    at(&mut clients[0], "2026-01-01 00:00:30+00");
    for key in [&on_worker1, &on_worker2] {
        let ok: bool = clients[0]
            .query_one(
                "SELECT ok FROM rate_limiter.rate_limit('slw', $1, 6)",
                &[key],
            )
            .expect("rate_limit")
            .get(0);
        assert!(ok);
    }
    for (name, key) in [
        ("slw_sharded", Some(on_worker2.as_str())),
        ("slw_global", None),
    ] {
        // A call looks at two random shards of 10 (docs/sharding.md): a
        // call of 6 may draw two that hold 1 each and be refused, which
        // writes nothing; ask again until 4 are admitted.
        let mut admitted = 0;
        for _ in 0..40 {
            let ok: bool = clients[0]
                .query_one(
                    "SELECT ok FROM rate_limiter.rate_limit($1, $2, 6)",
                    &[&name, &key],
                )
                .expect("rate_limit")
                .get(0);
            admitted += usize::from(ok);
            if admitted == 4 {
                break;
            }
        }
        assert_eq!(admitted, 4, "{name}");
    }
    // 1 more of each in the next window, so that every row stores the
    // previous window's count (prev), which a read from another node
    // must carry.
    at(&mut clients[0], "2026-01-01 00:01:05+00");
    for (name, key) in [
        ("slw", Some(on_worker1.as_str())),
        ("slw", Some(on_worker2.as_str())),
        ("slw_sharded", Some(on_worker2.as_str())),
        ("slw_global", None),
    ] {
        let ok: bool = clients[0]
            .query_one(
                "SELECT ok FROM rate_limiter.rate_limit($1, $2, 1)",
                &[&name, &key],
            )
            .expect("rate_limit")
            .get(0);
        assert!(ok, "{name}");
    }
    let prev: Option<f64> = coordinator
        .query_one(
            "SELECT prev FROM rate_limiter.rate_limits WHERE name = 'slw' AND key = $1",
            &[&on_worker2],
        )
        .expect("the key's row")
        .get(0);
    assert_eq!(prev, Some(6.0));
    // 15 s into the window the previous one weighs 0.75: 6 · 0.75 + 1 is
    // 5.5 of 10, leaving 4.5; a call of 6 fits once 6 · (1 − f) + 1 ≤ 4,
    // at f = 1/2 (00:01:30), 15 s from now. Every node reads the same, its
    // own rows or another node's.
    for (node, client) in clients.iter_mut().enumerate() {
        at(client, "2026-01-01 00:01:15+00");
        for key in [&on_worker1, &on_worker2] {
            let (value, full_at) = status(client, "slw", Some(key));
            assert_eq!(value, 4.5, "{}: status of {key}", NODES[node]);
            // Full once this window's 1 weighs nothing: 00:03:00.
            assert_eq!(full_at, 1767225780.0, "{}: full_at of {key}", NODES[node]);
            let (ok, retry_after, remaining) = check(client, "slw", Some(key), 6.0);
            assert!(!ok, "{}", NODES[node]);
            assert_eq!(
                (retry_after, remaining),
                (15.0, 4.5),
                "{}: {key}",
                NODES[node]
            );
            let headers: String = client
                .query_one("SELECT rate_limiter.http_headers('slw', $1)::text", &[key])
                .expect("http_headers")
                .get(0);
            assert!(
                headers.contains(r#""slw\";r=4;t=105"#) && headers.contains("q=10;w=60"),
                "{}: {headers}",
                NODES[node]
            );
        }
        // The sharded ones: 24 of 40 a window ago weigh 18, and 1 now:
        // 21 left.
        for (name, key) in [
            ("slw_sharded", Some(on_worker2.as_str())),
            ("slw_global", None),
        ] {
            let (value, _) = status(client, name, key);
            assert!(
                (value - 21.0).abs() < 1e-9,
                "{}: status of {name}: {value}",
                NODES[node]
            );
        }
    }
    // A call from worker 2 of the key on worker 1 at 00:01:30 fits exactly.
    at(&mut clients[2], "2026-01-01 00:01:30+00");
    let ok: bool = clients[2]
        .query_one(
            "SELECT ok FROM rate_limiter.rate_limit('slw', $1, 6)",
            &[&on_worker1],
        )
        .expect("rate_limit")
        .get(0);
    assert!(ok, "admitted at retry_after");
    let stored: (f64, Option<f64>) = {
        let row = coordinator
            .query_one(
                "SELECT value, prev FROM rate_limiter.rate_limits WHERE name = 'slw' AND key = $1",
                &[&on_worker1],
            )
            .expect("the key's row");
        (row.get(0), row.get(1))
    };
    assert_eq!(
        stored,
        (7.0, Some(6.0)),
        "this window's count and the last one's"
    );
    forget("slw");
}

/// A calendar window (docs/shapes.md) is decided on its key's node from
/// any node, and every node reads the same window: used up at 23:59 on
/// January 31st, New York time, each node's `status`, `rate_check` and
/// `http_headers` say 60 s to February (January's window: 744 hours),
/// and a call from another node is admitted at midnight.
#[test]
#[ignore = "needs the Citus cluster of scripts/test.sh"]
fn a_calendar_window_answers_alike_from_every_node() {
    forget("cal");
    make_distributed();
    let mut coordinator = coordinator();
    coordinator
        .batch_execute(
            "SELECT rate_limiter.define('cal', rate_limiter.calendar_window(10, 'month', 'America/New_York'));",
        )
        .expect("define the calendar window");
    let mut clients: Vec<Client> = urls().iter().map(|url| connect(url)).collect();
    let (on_worker1, on_worker2) = keys_on_each_worker(&mut clients[0], "cal-key-");
    let keys = [Some(on_worker1.as_str()), Some(on_worker2.as_str()), None];
    at(&mut clients[0], "2026-01-31 23:59:00-05");
    for key in keys {
        let ok: bool = clients[0]
            .query_one(
                "SELECT ok FROM rate_limiter.rate_limit('cal', $1, 10)",
                &[&key],
            )
            .expect("rate_limit")
            .get(0);
        assert!(ok, "{key:?}");
    }
    // February 1st, 00:00 New York time, in seconds since the epoch.
    let february = 1_769_922_000.0;
    for (node, client) in clients.iter_mut().enumerate() {
        at(client, "2026-01-31 23:59:00-05");
        for key in keys {
            assert_eq!(
                status(client, "cal", key),
                (0.0, february),
                "{}: status of {key:?}",
                NODES[node]
            );
            assert_eq!(
                check(client, "cal", key, 1.0),
                (false, 60.0, 0.0),
                "{}: {key:?}",
                NODES[node]
            );
            let headers: String = client
                .query_one("SELECT rate_limiter.http_headers('cal', $1)::text", &[&key])
                .expect("http_headers")
                .get(0);
            assert!(
                headers.contains(r#""cal\";r=0;t=60"#) && headers.contains("q=10;w=2678400"),
                "{}: {headers}",
                NODES[node]
            );
        }
    }
    at(&mut clients[2], "2026-02-01 00:00:00-05");
    let remaining: f64 = clients[2]
        .query_one(
            "SELECT remaining FROM rate_limiter.rate_limit('cal', $1, 1) WHERE ok",
            &[&on_worker1],
        )
        .expect("admitted at retry_after")
        .get(0);
    assert_eq!(remaining, 9.0);
    forget("cal");
}
