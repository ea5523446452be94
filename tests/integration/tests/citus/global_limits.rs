//! Sharded global limits on a cluster: the caller's node's shards first,
//! rollback and two-phase commit on both workers, no wait for another
//! node's busy shard, `rate_credit` and `rate_limit_all` of them.

use super::*;

#[test]
#[ignore = "needs the Citus cluster of scripts/test.sh"]
fn a_sharded_global_limit_prefers_the_shards_of_the_node_it_runs_on() {
    let (mut coordinator, name, nodes) = sharded_global_limit("spread", 80.0);
    let urls = urls();
    for url in &urls {
        connect(url)
            .execute("SELECT rate_limiter.stats_reset($1)", &[&name])
            .expect("stats_reset");
    }
    let mut worker1 = connect(&urls[1]);
    // More than two shards (10 tokens each) could ever serve: 22023, as
    // on one server, and nothing consumed.
    let error = worker1
        .query_one(
            "SELECT ok FROM rate_limiter.rate_limit($1, NULL, 21)",
            &[&name],
        )
        .expect_err("a count no two shards can serve");
    assert_eq!(
        error.code(),
        Some(&SqlState::INVALID_PARAMETER_VALUE),
        "{error}"
    );
    let left = |client: &mut Client, worker: usize| -> (f64, usize) {
        let values = shard_values(client, &name, 8);
        let shards = (0..8).filter(|shard| nodes[*shard] == worker);
        let tokens = shards
            .clone()
            .map(|shard| values[shard].unwrap_or(10.0))
            .sum();
        (
            tokens,
            shards.filter(|shard| values[*shard].is_some()).count(),
        )
    };
    // Worker 1 holds two shards or more, of 10 tokens each: a pair of them
    // can serve each of its first 19 calls (both empty takes 20), so none
    // goes to worker 2.
    for _ in 0..19 {
        assert!(consume(&mut worker1, &name, None));
    }
    let (local_left, _) = left(&mut coordinator, 1);
    let (_, touched) = left(&mut coordinator, 2);
    assert_eq!(touched, 0, "worker 2's shards untouched");
    assert_eq!(
        local_left,
        10.0 * nodes.iter().filter(|node| **node == 1).count() as f64 - 19.0
    );
    // It goes on until its own shards are empty. A pair of them that
    // cannot serve a call sends it to worker 2, whose own drawn pair may
    // be empty too (two shards are looked at, not all: docs/guarantees.md,
    // "Sharding"), so some calls
    // may be refused on the way.
    let mut admitted = 19;
    for _ in 0..1000 {
        if left(&mut coordinator, 1).0 < 0.5 {
            break;
        }
        if consume(&mut worker1, &name, None) {
            admitted += 1;
        }
    }
    assert!(
        left(&mut coordinator, 1).0 < 0.5,
        "worker 1's shards drained"
    );
    // Then every admission of worker 1's calls comes from worker 2.
    let (before, _) = left(&mut coordinator, 2);
    let mut served = 0;
    for _ in 0..20 {
        if consume(&mut worker1, &name, None) {
            served += 1;
        }
    }
    admitted += served;
    assert!(
        served > 0 || before < 0.5,
        "worker 2 serves worker 1's calls"
    );
    assert_eq!(
        left(&mut coordinator, 2).0,
        before - f64::from(served),
        "served by worker 2"
    );
    // The coordinator holds no shard: its calls go to the workers. In all,
    // exactly the capacity.
    for _ in 0..200 {
        if consume(&mut coordinator, &name, None) {
            admitted += 1;
        }
    }
    assert_eq!(admitted, 80, "exactly the capacity");
    // Each call is counted once, on the node it was made on (a call served
    // by another node is not counted there too).
    let counted: i64 = urls
        .iter()
        .map(|url| {
            connect(url)
                .query_opt(
                    "SELECT admitted FROM rate_limiter.stats WHERE name = $1",
                    &[&name],
                )
                .expect("stats")
                .map_or(0, |row| row.get::<_, i64>(0))
        })
        .sum();
    assert_eq!(counted, 80, "admissions counted once each");
    assert!(!consume(&mut worker1, &name, None));
    let refused = worker1
        .query_one(
            "SELECT ok, extract(epoch FROM retry_after)::float8 FROM rate_limiter.rate_limit($1)",
            &[&name],
        )
        .expect("rate_limit");
    assert!(!refused.get::<_, bool>(0));
    assert!(
        refused
            .get::<_, Option<f64>>(1)
            .is_some_and(|seconds| seconds > 0.0),
        "a refusal says when to retry"
    );
    forget("spread");
}

#[test]
#[ignore = "needs the Citus cluster of scripts/test.sh"]
fn a_sharded_global_limit_rolls_back_and_commits_on_both_workers() {
    let (mut coordinator, name, nodes) = sharded_global_limit("spread-tx", 8.0);
    let on_worker1 = nodes.iter().filter(|node| **node == 1).count();
    let (mut worker1, notices) = connect_with_notices(&urls()[1]);
    worker1
        .batch_execute("SET citus.log_remote_commands = on")
        .expect("log remote commands");
    for commit in [false, true] {
        taken(&notices);
        let mut transaction = worker1.transaction().expect("begin");
        // One token per shard: more calls than worker 1's shards can serve.
        let mut admitted = 0;
        for _ in 0..1000 {
            if admitted > on_worker1 {
                break;
            }
            let ok: bool = transaction
                .query_one("SELECT ok FROM rate_limiter.rate_limit($1)", &[&name])
                .expect("rate_limit")
                .get(0);
            if ok {
                admitted += 1;
            }
        }
        if commit {
            transaction.commit().expect("commit");
        } else {
            transaction.rollback().expect("rollback");
        }
        let values = shard_values(&mut coordinator, &name, 8);
        let used: Vec<usize> = (0..8).filter(|shard| values[*shard] == Some(0.0)).collect();
        let log = taken(&notices);
        if commit {
            assert_eq!(used.len(), on_worker1 + 1, "{values:?}");
            // A pair of worker 1's shards that cannot serve a call sends
            // it to worker 2 (worker 1 may have a token left elsewhere).
            assert!(
                used.iter().any(|shard| nodes[*shard] == 2),
                "worker 2's shards too: {values:?}"
            );
            assert!(
                log.iter().any(|line| line.contains("PREPARE TRANSACTION")),
                "wrote on both workers: two-phase commit: {log:#?}"
            );
        } else {
            assert_eq!(
                values.iter().flatten().count(),
                0,
                "nothing kept on either worker: {values:?}"
            );
        }
    }
    forget("spread-tx");
}

#[test]
#[ignore = "needs the Citus cluster of scripts/test.sh"]
fn a_sharded_global_limit_never_waits_for_another_nodes_busy_shards() {
    let (mut coordinator, name, nodes) = sharded_global_limit("spread-busy", 16.0);
    // Every shard full (2 tokens), worker 2's locked by a transaction that
    // stays open.
    for shard in 0..8i16 {
        coordinator
            .execute(
                "INSERT INTO rate_limiter.rate_limits (name, key, shard, value, ts, dkey) \
                 VALUES ($1, NULL, $2, 2, now(), $3)",
                &[&name, &shard, &format!("{name}/{shard}")],
            )
            .expect("a full shard");
    }
    let mut holder = connect(&urls()[2]);
    let mut holding = holder.transaction().expect("begin");
    for shard in (0..8i16).filter(|shard| nodes[*shard as usize] == 2) {
        holding
            .query_one(
                "SELECT 1 FROM rate_limiter.rate_limits \
                 WHERE dkey = $1 AND name = $2 AND key IS NULL AND shard = $3 FOR UPDATE",
                &[&format!("{name}/{shard}"), &name, &shard],
            )
            .expect("lock a shard of worker 2");
    }
    // Worker 1's calls drain its own shards, then find worker 2's busy:
    // refused at once, never waiting. A wait would end the call with
    // statement_timeout (57014, and the test fails): Citus cancels the
    // statement it sent to worker 2 when the caller's is cancelled, where
    // a lock_timeout set here would not reach worker 2's session.
    let mut worker1 = connect(&urls()[1]);
    worker1
        .batch_execute("SET statement_timeout = '5s'")
        .expect("statement_timeout");
    coordinator
        .batch_execute("SET statement_timeout = '5s'")
        .expect("statement_timeout");
    let on_worker1 = nodes.iter().filter(|node| **node == 1).count();
    let mut admitted = 0;
    for _ in 0..(2 * on_worker1 + 40) {
        if consume(&mut worker1, &name, None) {
            admitted += 1;
        }
    }
    assert_eq!(
        admitted,
        2 * on_worker1,
        "worker 1's own tokens, and no more"
    );
    // From the coordinator, which holds no shard: refused too.
    assert!(!consume(&mut coordinator, &name, None));
    holding.rollback().expect("release worker 2's shards");
    assert!(
        consume(&mut worker1, &name, None),
        "worker 2's shards are free again"
    );
    forget("spread-busy");
}

#[test]
#[ignore = "needs the Citus cluster of scripts/test.sh"]
fn rate_credit_of_a_sharded_global_limit_fills_the_emptiest_shards_on_every_node() {
    let (mut coordinator, name, nodes) = sharded_global_limit("credit-spread", 80.0);
    // Shard i holds i tokens (of 10), on whichever worker it lives.
    let fill = |client: &mut Client| {
        client
            .execute(
                "DELETE FROM rate_limiter.rate_limits WHERE name = $1",
                &[&name],
            )
            .expect("forget the state");
        for shard in 0..8i16 {
            client
                .execute(
                    "INSERT INTO rate_limiter.rate_limits (name, key, shard, value, ts, dkey) \
                     VALUES ($1, NULL, $2, $3, now(), $4)",
                    &[&name, &shard, &f64::from(shard), &format!("{name}/{shard}")],
                )
                .expect("a shard");
        }
    };
    let expected = |credited: &[f64]| -> Vec<Option<f64>> {
        (0..8)
            .map(|shard| Some(credited.get(shard).copied().unwrap_or(shard as f64)))
            .collect()
    };
    let urls = urls();
    for (node, url) in urls.iter().enumerate() {
        let (mut client, notices) = connect_with_notices(url);
        client
            .batch_execute("SET citus.log_remote_commands = on")
            .expect("log remote commands");
        for commit in [false, true] {
            fill(&mut coordinator);
            taken(&notices);
            let mut transaction = client.transaction().expect("begin");
            // 12 tokens: the emptiest first: shard 0 gets 10, shard 1 gets 2.
            let value: f64 = transaction
                .query_one("SELECT rate_limiter.rate_credit($1, NULL, 12)", &[&name])
                .unwrap_or_else(|error| panic!("rate_credit on node {node}: {error}"))
                .get(0);
            assert!(
                (value - 40.0).abs() < 0.01,
                "28 + 12 over every shard: {value}"
            );
            if commit {
                transaction.commit().expect("commit");
                assert_eq!(
                    shard_values(&mut coordinator, &name, 8),
                    expected(&[10.0, 3.0]),
                    "node {node}"
                );
                let log = taken(&notices);
                if nodes[0] != nodes[1] {
                    assert!(
                        log.iter().any(|line| line.contains("PREPARE TRANSACTION")),
                        "credited on both workers: 2PC (node {node}): {log:#?}"
                    );
                }
            } else {
                transaction.rollback().expect("rollback");
                assert_eq!(
                    shard_values(&mut coordinator, &name, 8),
                    expected(&[]),
                    "rolled back (node {node})"
                );
            }
        }
        // Never above capacity.
        let value: f64 = client
            .query_one("SELECT rate_limiter.rate_credit($1, NULL, 1000)", &[&name])
            .expect("rate_credit")
            .get(0);
        assert!((value - 80.0).abs() < 0.01, "{value}");
        assert_eq!(
            shard_values(&mut coordinator, &name, 8),
            vec![Some(10.0); 8],
            "node {node}"
        );
    }
    forget("credit-spread");
}

#[test]
#[ignore = "needs the Citus cluster of scripts/test.sh"]
fn rate_limit_all_of_a_sharded_global_limit_prefers_the_callers_shards_and_is_all_or_nothing() {
    // 8 shards of 10 tokens, at least two on each worker.
    let (mut coordinator, name, nodes) = sharded_global_limit("gall", 80.0);
    define(&mut coordinator, "gall-keyed", 10.0);
    let (_, two) = keys_on_each_worker(&mut coordinator, "gall-");
    let urls = urls();
    let mut worker1 = connect(&urls[1]);
    let all = |client: &mut Client, requests: &[(Option<&str>, f64)]| -> Vec<bool> {
        let names: Vec<&str> = requests
            .iter()
            .map(|(key, _)| {
                if key.is_some() {
                    "gall-keyed"
                } else {
                    name.as_str()
                }
            })
            .collect();
        let keys: Vec<Option<&str>> = requests.iter().map(|(key, _)| *key).collect();
        let counts: Vec<f64> = requests.iter().map(|(_, count)| *count).collect();
        client
            .query(
                "SELECT ok FROM rate_limiter.rate_limit_all(ARRAY(\
                     SELECT (name, key, count, NULL)::rate_limiter.request \
                     FROM unnest($1::text[], $2::text[], $3::float8[]) WITH ORDINALITY AS r(name, key, count, position) \
                     ORDER BY position))",
                &[&names, &keys, &counts],
            )
            .expect("rate_limit_all")
            .iter()
            .map(|row| row.get(0))
            .collect()
    };
    // From worker 1: the global limit's token comes from a shard on
    // worker 1; the keyed row on worker 2 is consumed in the same call.
    assert_eq!(
        all(&mut worker1, &[(None, 1.0), (Some(&two), 1.0)]),
        [true, true]
    );
    let values = shard_values(&mut coordinator, &name, 8);
    let consumed: Vec<usize> = (0..8).filter(|&shard| values[shard].is_some()).collect();
    assert_eq!(consumed.len(), 1, "{values:?}");
    assert_eq!(values[consumed[0]], Some(9.0));
    assert_eq!(nodes[consumed[0]], 1, "a shard of the caller's worker");
    assert_eq!(stored(&mut coordinator, "gall-keyed", &two), Some(9.0));
    // Refused on the keyed row: nothing consumed anywhere, the global
    // limit's shard included.
    assert_eq!(
        all(&mut worker1, &[(None, 1.0), (Some(&two), 10.0)]),
        [true, false]
    );
    assert_eq!(shard_values(&mut coordinator, &name, 8), values);
    assert_eq!(stored(&mut coordinator, "gall-keyed", &two), Some(9.0));
    // Named twice, from worker 2: charged twice, on worker 2's shards.
    let mut worker2 = connect(&urls[2]);
    assert_eq!(all(&mut worker2, &[(None, 1.0), (None, 1.0)]), [true, true]);
    let on_worker2: f64 = shard_values(&mut coordinator, &name, 8)
        .iter()
        .zip(&nodes)
        .filter(|(_, node)| **node == 2)
        .map(|(value, _)| value.unwrap_or(10.0))
        .sum();
    let worker2_shards = nodes.iter().filter(|node| **node == 2).count() as f64;
    assert_eq!(on_worker2, worker2_shards * 10.0 - 2.0);
    // Never more than the capacity: calls from the three nodes until the
    // limit is empty (77 tokens left).
    let mut admitted = 0;
    for call in 0..120 {
        let client = match call % 3 {
            0 => &mut coordinator,
            1 => &mut worker1,
            _ => &mut worker2,
        };
        if all(client, &[(None, 1.0)])[0] {
            admitted += 1;
        }
    }
    let left: f64 = shard_values(&mut coordinator, &name, 8)
        .iter()
        .map(|value| value.unwrap_or(10.0))
        .sum();
    eprintln!("rate_limit_all of a sharded global limit: {admitted} of 77 admitted");
    assert!(admitted <= 77, "{admitted} admitted of 77");
    assert_eq!(
        left,
        77.0 - f64::from(admitted),
        "the stored tokens are what was admitted"
    );
    forget("gall");
}

#[test]
#[ignore = "needs the Citus cluster of scripts/test.sh"]
fn a_global_limit_with_one_shard_per_worker_refuses_without_retry_after_what_only_both_could_serve()
{
    make_distributed();
    forget("halves");
    let urls = urls();
    let mut coordinator = coordinator();
    let name = (0..100)
        .map(|n| format!("halves-{n}"))
        .find(|name| {
            let mut nodes = shard_nodes(&mut coordinator, name, 2);
            nodes.sort();
            nodes == [1, 2]
        })
        .expect("a name with one shard on each worker");
    coordinator
        .execute(
            "SELECT rate_limiter.define($1, rate_limiter.token_bucket(10, '1000 days', shards => 2))",
            &[&name],
        )
        .expect("define");
    for url in &urls {
        let mut client = connect(url);
        // 7 tokens: more than one shard holds (5), less than both (10).
        // On one server the two shards serve it together; on a cluster a
        // call never takes two shards on two nodes, so it is refused, and
        // no retry_after can say when it would be admitted.
        let row = client
            .query_one(
                "SELECT ok, retry_after::text FROM rate_limiter.rate_limit($1, count => 7)",
                &[&name],
            )
            .expect("rate_limit");
        assert!(!row.get::<_, bool>(0), "{url}");
        assert_eq!(row.get::<_, Option<String>>(1), None, "{url}");
        // What one shard can serve is admitted, by rate_wait too.
        let ok: bool = client
            .query_one(
                "SELECT ok FROM rate_limiter.rate_wait($1, count => 1, timeout => '0 seconds')",
                &[&name],
            )
            .expect("rate_wait")
            .get(0);
        assert!(ok, "{url}");
    }
    // Each worker's call took a token from its own shard, the
    // coordinator's from either: 4 and 3 tokens left.
    let values = shard_values(&mut coordinator, &name, 2);
    let mut sorted: Vec<f64> = values.iter().map(|value| value.expect("a row")).collect();
    sorted.sort_by(f64::total_cmp);
    assert_eq!(sorted, [3.0, 4.0], "{values:?}");
    // 5 tokens: no shard holds them now, so rate_wait times out at once
    // and consumes nothing.
    let ok: bool = coordinator
        .query_one(
            "SELECT ok FROM rate_limiter.rate_wait($1, count => 5, timeout => '0 seconds')",
            &[&name],
        )
        .expect("rate_wait")
        .get(0);
    assert!(!ok);
    assert_eq!(shard_values(&mut coordinator, &name, 2), values);
    forget("halves");
}
