//! `rate_limit_all` across workers: all or nothing, shadow members, no
//! deadlock, exactness, and a refusal that leaves a committable
//! transaction.

use super::*;

#[test]
#[ignore = "needs the Citus cluster of scripts/test.sh"]
fn rate_limit_all_is_all_or_nothing_across_workers() {
    make_distributed();
    forget("every");
    let urls = urls();
    let mut coordinator = coordinator();
    define(&mut coordinator, "every", 10.0);
    let (one, two) = keys_on_each_worker(&mut coordinator, "every-");
    // The stored values of one and two, and what they should be.
    let both = |coordinator: &mut Client| {
        (
            stored(coordinator, "every", &one),
            stored(coordinator, "every", &two),
        )
    };
    let (mut on_one, mut on_two) = (10.0, 10.0);
    // Statistics: every node's counters of the limit zeroed once, here.
    for url in &urls {
        connect(url)
            .execute("SELECT rate_limiter.stats_reset('every')", &[])
            .expect("stats_reset");
    }
    for (node, url) in NODES.iter().zip(&urls) {
        let (mut client, notices) = connect_with_notices(url);
        client
            .batch_execute("SET citus.log_remote_commands = on")
            .expect("log remote commands");
        // Admitted: both consumed, the limit named twice charged twice,
        // and a commit over both workers is two-phase.
        taken(&notices);
        let answers = consume_all(
            &mut client,
            "every",
            &[(&two, 1.0), (&one, 2.0), (&two, 1.0)],
        )
        .expect("rate_limit_all");
        assert_eq!(answers, [true, true, true], "{node}");
        let log = taken(&notices);
        if *node == "coordinator" {
            assert_eq!(
                log.iter()
                    .filter(|line| line.contains("PREPARE TRANSACTION"))
                    .count(),
                2,
                "both workers prepared: {log:#?}"
            );
        } else {
            assert!(
                log.iter().any(|line| line.contains("PREPARE TRANSACTION")),
                "a local write and a remote one commit with 2PC ({node}): {log:#?}"
            );
        }
        (on_one, on_two) = (on_one - 2.0, on_two - 2.0);
        assert_eq!(
            both(&mut coordinator),
            (Some(on_one), Some(on_two)),
            "{node}"
        );
        // Refused on worker 2 (9 > 8 tokens), in either order: nothing consumed on
        // either worker; each row is its own request's answer.
        for requests in [[(&one, 1.0), (&two, 9.0)], [(&two, 9.0), (&one, 1.0)]] {
            let requests: Vec<(&str, f64)> = requests
                .iter()
                .map(|(key, count)| (key.as_str(), *count))
                .collect();
            let answers = consume_all(&mut client, "every", &requests).expect("rate_limit_all");
            let expected: Vec<bool> = requests.iter().map(|(_, count)| *count == 1.0).collect();
            assert_eq!(answers, expected, "{node}");
            assert_eq!(
                both(&mut coordinator),
                (Some(on_one), Some(on_two)),
                "{node}"
            );
        }
        // A refusal raised (throws => true): nothing consumed either.
        let error = client
            .query(
                "SELECT * FROM rate_limiter.rate_limit_all(ARRAY[('every', $1, 1, NULL), ('every', $2, 9, NULL)]::rate_limiter.request[], throws => true)",
                &[&one, &two],
            )
            .expect_err("throws");
        assert!(error.as_db_error().is_some(), "{error}");
        assert_eq!(
            both(&mut coordinator),
            (Some(on_one), Some(on_two)),
            "{node}"
        );
        // Admitted, then rolled back: nothing consumed; to a savepoint:
        // only what came before it stays.
        let mut transaction = client.transaction().expect("begin");
        let answers = consume_all(&mut transaction, "every", &[(&one, 1.0), (&two, 1.0)])
            .expect("rate_limit_all");
        assert_eq!(answers, [true, true]);
        transaction.rollback().expect("rollback");
        let mut transaction = client.transaction().expect("begin");
        consume_all(&mut transaction, "every", &[(&one, 1.0)]).expect("rate_limit_all");
        let mut savepoint = transaction.savepoint("s").expect("savepoint");
        consume_all(&mut savepoint, "every", &[(&one, 1.0), (&two, 1.0)]).expect("rate_limit_all");
        savepoint.rollback().expect("rollback to savepoint");
        // A refusal inside the transaction leaves it usable.
        let answers = consume_all(&mut transaction, "every", &[(&two, 1.0), (&one, 9.0)])
            .expect("rate_limit_all");
        assert_eq!(answers, [true, false]);
        transaction.commit().expect("commit");
        on_one -= 1.0;
        assert_eq!(
            both(&mut coordinator),
            (Some(on_one), Some(on_two)),
            "{node}"
        );
    }
    // Each request's decision is counted once, on the node called, not
    // again on the node that decided it; in a call refused as a whole only
    // the refused request counts (docs/guarantees.md, "Statistics and
    // shadow mode"): 3 + 1 + 1 + 1 + 2 + 1 + 2 + 1
    // = 12 per node, 36 summed over every node.
    let calls: Vec<i64> = urls
        .iter()
        .map(|url| {
            connect(url)
                .query_opt(
                    "SELECT calls FROM rate_limiter.stats WHERE name = 'every'",
                    &[],
                )
                .expect("stats")
                .map_or(0, |row| row.get(0))
        })
        .collect();
    assert_eq!(calls, [12, 12, 12], "counted once each, on the node called");
    forget("every");
}

#[test]
#[ignore = "needs the Citus cluster of scripts/test.sh"]
fn rate_limit_all_across_workers_with_a_shadow_member() {
    make_distributed();
    forget("mixed");
    let urls = urls();
    let mut coordinator = coordinator();
    define(&mut coordinator, "mixed", 10.0);
    coordinator
        .execute(
            "SELECT rate_limiter.define('mixed-shadow', rate_limiter.token_bucket(1, '1000 days'), enforce => false)",
            &[],
        )
        .expect("define a limit in shadow mode");
    let (one, two) = keys_on_each_worker(&mut coordinator, "mixed-");
    // The shadow limit's only token taken (its row on worker 2), then the
    // counters of both limits zeroed on every node.
    assert!(consume(&mut coordinator, "mixed-shadow", Some(&two)));
    for url in &urls {
        connect(url)
            .batch_execute(
                "SELECT rate_limiter.stats_reset('mixed'); SELECT rate_limiter.stats_reset('mixed-shadow')",
            )
            .expect("stats_reset");
    }
    let mut on_one = 10.0;
    for (node, url) in NODES.iter().zip(&urls) {
        let mut client = connect(url);
        // The shadow limit refuses its request (no token left on worker
        // 2), which answers as admitted and does not fail the call: the
        // enforcing request is consumed on worker 1.
        let rows = client
            .query(
                "SELECT name, ok, retry_after IS NULL FROM rate_limiter.rate_limit_all(ARRAY[
                     ('mixed', $1, 1, NULL), ('mixed-shadow', $2, 1, NULL)]::rate_limiter.request[])",
                &[&one, &two],
            )
            .expect("rate_limit_all");
        let answers: Vec<(String, bool, bool)> = rows
            .iter()
            .map(|row| (row.get(0), row.get(1), row.get(2)))
            .collect();
        assert_eq!(
            answers,
            [
                ("mixed".to_string(), true, true),
                ("mixed-shadow".to_string(), true, true)
            ],
            "{node}"
        );
        on_one -= 1.0;
        assert_eq!(
            stored(&mut coordinator, "mixed", &one),
            Some(on_one),
            "{node}"
        );
        assert_eq!(
            stored(&mut coordinator, "mixed-shadow", &two),
            Some(0.0),
            "the shadow refusal consumed nothing ({node})"
        );
    }
    // Counted once each, on the node called: the enforcing request as
    // admitted, the shadow one as shadow_refused.
    for (node, url) in NODES.iter().zip(&urls) {
        let rows = connect(url)
            .query(
                "SELECT name, calls, admitted, shadow_refused FROM rate_limiter.stats
                 WHERE name IN ('mixed', 'mixed-shadow') ORDER BY name",
                &[],
            )
            .expect("stats");
        let counts: Vec<(String, i64, i64, i64)> = rows
            .iter()
            .map(|row| (row.get(0), row.get(1), row.get(2), row.get(3)))
            .collect();
        assert_eq!(
            counts,
            [
                ("mixed".to_string(), 1, 1, 0),
                ("mixed-shadow".to_string(), 1, 0, 1)
            ],
            "{node}"
        );
    }
    forget("mixed");
}

#[test]
#[ignore = "needs the Citus cluster of scripts/test.sh"]
fn rate_limit_all_across_workers_never_deadlocks_and_admits_exactly_the_capacity() {
    make_distributed();
    forget("cross");
    let urls = urls();
    let mut coordinator = coordinator();
    define(&mut coordinator, "cross", 60.0);
    let (one, two) = keys_on_each_worker(&mut coordinator, "cross-");
    // Four connections on three nodes, each asking for both keys, half of
    // them in the opposite order: 60 calls can be admitted, each takes a
    // token from both rows, all or nothing.
    let threads: Vec<_> = (0..4)
        .map(|thread| {
            let url = urls[thread % 3].clone();
            let (one, two) = (one.clone(), two.clone());
            std::thread::spawn(move || {
                let mut client = connect(&url);
                client
                    .batch_execute("SET lock_timeout = '20s'")
                    .expect("lock_timeout");
                let mut admitted = 0;
                for _ in 0..25 {
                    let requests = if thread % 2 == 0 {
                        [(one.as_str(), 1.0), (two.as_str(), 1.0)]
                    } else {
                        [(two.as_str(), 1.0), (one.as_str(), 1.0)]
                    };
                    let mut transaction = client.transaction().expect("begin");
                    let answers = consume_all(&mut transaction, "cross", &requests)
                        .unwrap_or_else(|error| panic!("rate_limit_all ({url}): {error:?}"));
                    transaction.commit().expect("commit");
                    assert_eq!(answers[0], answers[1], "one answer for both");
                    if answers[0] {
                        admitted += 1;
                    }
                }
                admitted
            })
        })
        .collect();
    let admitted: i32 = threads
        .into_iter()
        .map(|thread| thread.join().expect("a client thread"))
        .sum();
    assert_eq!(admitted, 60, "exactly the capacity, in 100 calls");
    assert_eq!(stored(&mut coordinator, "cross", &one), Some(0.0));
    assert_eq!(stored(&mut coordinator, "cross", &two), Some(0.0));
    forget("cross");
}

#[test]
#[ignore = "needs the Citus cluster of scripts/test.sh"]
fn a_refused_rate_limit_all_leaves_a_transaction_that_still_commits_with_two_phase_commit() {
    make_distributed();
    forget("after");
    let urls = urls();
    let mut coordinator = coordinator();
    define(&mut coordinator, "after", 10.0);
    let (one, two) = keys_on_each_worker(&mut coordinator, "after-");
    // On worker 1: a direct write of its own row; then a rate_limit_all
    // that writes on both workers inside its subtransaction (telling Citus
    // about the direct write there) and is refused on worker 2, so the
    // subtransaction rolls back; then a call for worker 2's row. The
    // commit must still be two-phase: Citus is told again.
    let (mut worker, notices) = connect_with_notices(&urls[1]);
    worker
        .batch_execute("SET citus.log_remote_commands = on")
        .expect("log remote commands");
    // Worker 2's row down to 5 tokens, so that 6 are refused there.
    coordinator
        .execute(
            "SELECT * FROM rate_limiter.rate_limit('after', $1, 5)",
            &[&two],
        )
        .expect("worker 2's row down to 5");
    taken(&notices);
    let mut transaction = worker.transaction().expect("begin");
    assert!(consume(&mut transaction, "after", Some(&one)));
    let answers = consume_all(&mut transaction, "after", &[(&one, 1.0), (&two, 6.0)])
        .expect("rate_limit_all");
    assert_eq!(answers, [true, false], "refused on worker 2");
    assert!(consume(&mut transaction, "after", Some(&two)));
    transaction.commit().expect("commit");
    let log = taken(&notices);
    assert!(
        log.iter().any(|line| line.contains("PREPARE TRANSACTION")),
        "a direct write and a remote one still commit with 2PC: {log:#?}"
    );
    // The marker statement ran inside the rolled-back subtransaction and
    // again after it: the limiter does not rely on Citus remembering a
    // rolled-back local execution (Citus 13.2.2 and 14.0.1 do).
    assert_eq!(
        log.iter()
            .filter(|line| line
                .contains("executing the command locally: DELETE FROM rate_limiter.rate_limits_"))
            .count(),
        2,
        "{log:#?}"
    );
    assert_eq!(stored(&mut coordinator, "after", &one), Some(9.0));
    assert_eq!(stored(&mut coordinator, "after", &two), Some(4.0));
    forget("after");
}
