//! Composites on a cluster (docs/composites.md, "On a Citus cluster"): the
//! composites are a reference table, so a call of a composite's name from
//! any node is one all-or-nothing `rate_limit_all` of its members, whose
//! rows live on the key's node; `status`, `http_headers`, `rate_check`,
//! `rate_credit` and `rate_reset` of the name act on the members from
//! every node alike.

use super::*;

/// (ok, remaining) of `rate_limit(name, key, 1)`.
fn take(client: &mut Client, name: &str, key: Option<&str>) -> (bool, f64) {
    let row = client
        .query_one(
            "SELECT ok, remaining FROM rate_limiter.rate_limit($1, $2)",
            &[&name, &key],
        )
        .unwrap_or_else(|error| panic!("rate_limit({name}, {key:?}): {error}"));
    (row.get(0), row.get(1))
}

#[test]
#[ignore = "needs the Citus cluster of scripts/test.sh"]
fn a_composite_is_all_or_nothing_from_every_node() {
    forget("cmp");
    make_distributed();
    let mut coordinator = coordinator();
    define(&mut coordinator, "cmp_five", 5.0);
    define(&mut coordinator, "cmp_three", 3.0);
    coordinator
        .batch_execute(
            "SELECT rate_limiter.define_all('cmp', ARRAY['cmp_five', 'cmp_three']);
             SELECT rate_limiter.define_all('cmp_shadow', ARRAY['cmp_three'], enforce => false);",
        )
        .expect("define_all");
    let method: String = coordinator
        .query_one(
            "SELECT partmethod::text FROM pg_catalog.pg_dist_partition \
             WHERE logicalrelid = 'rate_limiter.composites'::regclass",
            &[],
        )
        .expect("the composites are distributed")
        .get(0);
    assert_eq!(method, "n", "a reference table");
    let mut clients: Vec<Client> = urls().iter().map(|url| connect(url)).collect();
    // A stopped clock: the members refill nothing between calls.
    for client in clients.iter_mut() {
        client
            .batch_execute("SET rate_limiter.now_override = '2026-01-01 00:00:00+00'")
            .expect("set the clock");
    }
    let (on_worker1, on_worker2) = keys_on_each_worker(&mut clients[0], "cmp-key-");
    let keys = [Some(on_worker1.as_str()), Some(on_worker2.as_str()), None];
    for key in keys {
        // One call from each node: the three tokens of cmp_three.
        for (node, client) in clients.iter_mut().enumerate() {
            assert_eq!(
                take(client, "cmp", key),
                (true, 2.0 - node as f64),
                "{key:?} from {}",
                NODES[node]
            );
        }
        // The fourth is refused everywhere, and consumes nothing of cmp_five.
        for (node, client) in clients.iter_mut().enumerate() {
            assert_eq!(
                take(client, "cmp", key),
                (false, 0.0),
                "{key:?} from {}",
                NODES[node]
            );
            let error = client
                .query_one(
                    "SELECT * FROM rate_limiter.rate_limit('cmp', $1, throws => true)",
                    &[&key],
                )
                .expect_err("refused");
            let detail = error
                .as_db_error()
                .and_then(|db| db.detail())
                .unwrap_or_default();
            assert!(
                detail.contains(r#""name":"cmp_three""#),
                "{}: {detail}",
                NODES[node]
            );
            // Shadow mode: answered as admitted.
            assert_eq!(
                take(client, "cmp_shadow", key),
                (true, 0.0),
                "{}",
                NODES[node]
            );
            let status: (f64, f64) = {
                let row = client
                    .query_one(
                        "SELECT value, capacity FROM rate_limiter.status('cmp', $1)",
                        &[&key],
                    )
                    .expect("status");
                (row.get(0), row.get(1))
            };
            assert_eq!(status, (0.0, 3.0), "{}: the tightest member", NODES[node]);
            let headers: String = client
                .query_one("SELECT rate_limiter.http_headers('cmp', $1)::text", &[&key])
                .expect("http_headers")
                .get(0);
            assert!(
                headers.contains(r#"\"cmp_five\";r=2;"#)
                    && headers.contains(r#"\"cmp_three\";r=0;"#),
                "{}: {headers}",
                NODES[node]
            );
        }
        let five: f64 = clients[1]
            .query_one(
                "SELECT value FROM rate_limiter.status('cmp_five', $1)",
                &[&key],
            )
            .expect("status")
            .get(0);
        assert_eq!(five, 2.0, "{key:?}: refusals consumed nothing");
        // A credit from worker 2 gives every member one back; a reset from
        // worker 1 forgets both.
        let least: f64 = clients[2]
            .query_one("SELECT rate_limiter.rate_credit('cmp', $1, 1)", &[&key])
            .expect("rate_credit")
            .get(0);
        assert_eq!(least, 1.0);
        assert_eq!(take(&mut clients[0], "cmp", key), (true, 0.0));
        clients[1]
            .execute("SELECT rate_limiter.rate_reset('cmp', $1)", &[&key])
            .expect("rate_reset");
        for (node, client) in clients.iter_mut().enumerate() {
            let ok: bool = client
                .query_one(
                    "SELECT ok FROM rate_limiter.rate_check('cmp', $1, 3)",
                    &[&key],
                )
                .expect("rate_check")
                .get(0);
            assert!(ok, "{key:?} from {}: reset", NODES[node]);
        }
    }
    // undefine of a member is refused from any node while the composite
    // names it.
    let error = clients[2]
        .execute("SELECT rate_limiter.undefine('cmp_three')", &[])
        .expect_err("a member");
    assert_eq!(
        error.code(),
        Some(&postgres::error::SqlState::DEPENDENT_OBJECTS_STILL_EXIST)
    );
    forget("cmp");
}

/// A composite whose members are sharded (docs/composites.md, "On a Citus
/// cluster"): a token bucket of 4 shards and one unsharded, called from
/// every node on a key of each worker, admits exactly the unsharded
/// member's capacity all or nothing: the sharded member's shards, on the
/// key's node, lose exactly the admitted calls together.
#[test]
#[ignore = "needs the Citus cluster of scripts/test.sh"]
fn a_composite_of_sharded_members_is_all_or_nothing_from_every_node() {
    forget("cmps");
    make_distributed();
    let mut coordinator = coordinator();
    coordinator
        .batch_execute(
            "SELECT rate_limiter.define('cmps_sharded', rate_limiter.token_bucket(40, '1000 days', shards => 4));
             SELECT rate_limiter.define('cmps_six', rate_limiter.token_bucket(6, '1000 days'));
             SELECT rate_limiter.define_all('cmps', ARRAY['cmps_sharded', 'cmps_six']);",
        )
        .expect("define the composite");
    let mut clients: Vec<Client> = urls().iter().map(|url| connect(url)).collect();
    for client in clients.iter_mut() {
        client
            .batch_execute("SET rate_limiter.now_override = '2026-01-01 00:00:00+00'")
            .expect("set the clock");
    }
    let (on_worker1, on_worker2) = keys_on_each_worker(&mut clients[0], "cmps-key-");
    for key in [on_worker1.as_str(), on_worker2.as_str()] {
        let mut admitted = 0;
        for _ in 0..4 {
            for client in clients.iter_mut() {
                if take(client, "cmps", Some(key)).0 {
                    admitted += 1;
                }
            }
        }
        assert_eq!(admitted, 6, "{key}: exactly cmps_six's capacity");
        let sharded: f64 = coordinator
            .query_one(
                "SELECT sum(value) FROM rate_limiter.rate_limits WHERE name = 'cmps_sharded' AND key = $1",
                &[&key],
            )
            .expect("the shards' rows")
            .get(0);
        // (Missing shards are full: 10 each.)
        let rows: i64 = coordinator
            .query_one(
                "SELECT count(*) FROM rate_limiter.rate_limits WHERE name = 'cmps_sharded' AND key = $1",
                &[&key],
            )
            .expect("the shards' rows")
            .get(0);
        assert_eq!(
            sharded + 10.0 * (4 - rows) as f64,
            34.0,
            "{key}: the sharded member lost exactly the 6 admitted calls"
        );
    }
    forget("cmps");
}
