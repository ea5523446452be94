//! The internal functions a call delegates: who may call them, where they
//! fail closed, and NULL distribution arguments.

use super::*;

/// The functions `citus_manager` gets EXECUTE on in
/// [`only_a_role_that_may_credit_or_prune_may_call_their_internal_functions`]:
/// distributed ones (Citus propagates their grants), then the public ones
/// (granted on every node).
const MANAGER_INTERNAL: &str =
    "rate_limiter._rate_credit_at(text, text, text, float8, rate_limiter.config, timestamptz), \
     rate_limiter._prune_at(text, interval, timestamptz)";
const MANAGER_PUBLIC: &str =
    "rate_limiter.rate_credit(text, text, float8, rate_limiter.config), rate_limiter.prune(interval)";

#[test]
#[ignore = "needs the Citus cluster of scripts/test.sh"]
fn only_a_role_that_may_credit_or_prune_may_call_their_internal_functions() {
    make_distributed();
    forget("grants");
    let urls = urls();
    let mut coordinator = coordinator();
    define(&mut coordinator, "grants", 10.0);
    let (one, two) = keys_on_each_worker(&mut coordinator, "grants-");
    for key in [&one, &two] {
        assert!(consume(&mut coordinator, "grants", Some(key)));
    }
    // A role with EXECUTE on the internal functions only (what the README
    // once granted an application role): refused on the node holding the
    // row, inside a transaction block, and nothing credited or pruned.
    coordinator
        .batch_execute(&format!(
            "DROP ROLE IF EXISTS citus_manager; CREATE ROLE citus_manager LOGIN; \
             GRANT USAGE ON SCHEMA rate_limiter TO citus_manager; \
             GRANT EXECUTE ON FUNCTION {MANAGER_INTERNAL} TO citus_manager"
        ))
        .expect("a role");
    let mut worker = connect(&urls[1]);
    for statement in [
        "SELECT rate_limiter._rate_credit_at($1, 'grants', $1, 5, NULL, NULL)",
        "SELECT rate_limiter._prune_at($1::text, '0 seconds', NULL)",
    ] {
        let mut transaction = worker.transaction().expect("begin");
        transaction
            .batch_execute("SET LOCAL ROLE citus_manager")
            .expect("set role");
        let error = transaction
            .query(statement, &[&one])
            .expect_err("not allowed");
        assert_eq!(
            error.code(),
            Some(&SqlState::INSUFFICIENT_PRIVILEGE),
            "{statement}: {error}"
        );
        transaction.rollback().expect("rollback");
    }
    assert_eq!(stored(&mut coordinator, "grants", &one), Some(9.0));
    // With EXECUTE on rate_credit and prune too, on every node (Citus
    // does not propagate grants on functions it does not distribute), the
    // role credits and prunes rows on both workers from the coordinator.
    coordinator
        .batch_execute(&format!(
            "GRANT EXECUTE ON FUNCTION {MANAGER_PUBLIC} TO citus_manager; \
             SELECT run_command_on_workers('GRANT EXECUTE ON FUNCTION {MANAGER_PUBLIC} TO citus_manager')"
        ))
        .expect("grant the public functions");
    let mut manager = connect(&urls[0].replace("user=postgres", "user=citus_manager"));
    for key in [&one, &two] {
        let value: f64 = manager
            .query_one("SELECT rate_limiter.rate_credit('grants', $1, 1)", &[key])
            .expect("rate_credit")
            .get(0);
        assert_eq!(value.round(), 10.0, "credited on the row's worker");
    }
    assert!(
        prune(&mut manager, None) >= 2,
        "both full rows, on both workers"
    );
    assert_eq!(stored(&mut coordinator, "grants", &one), None);
    assert_eq!(stored(&mut coordinator, "grants", &two), None);
    drop(manager);
    coordinator
        .batch_execute(&format!(
            "REVOKE ALL ON FUNCTION {MANAGER_INTERNAL}, {MANAGER_PUBLIC} FROM citus_manager; \
             SELECT run_command_on_workers('REVOKE ALL ON FUNCTION {MANAGER_PUBLIC} FROM citus_manager'); \
             REVOKE ALL ON SCHEMA rate_limiter FROM citus_manager; DROP ROLE citus_manager"
        ))
        .expect("drop the role");
    forget("grants");
}

/// Runs `statement` (with `$1` = `value`) in a transaction of its own,
/// which it must fail with `code`; rolls back.
fn fails_in_a_transaction(client: &mut Client, statement: &str, value: &str, code: SqlState) {
    let mut transaction = client.transaction().expect("begin");
    let error = transaction
        .query(statement, &[&value])
        .expect_err("an error");
    assert_eq!(error.code(), Some(&code), "{statement}: {error}");
    transaction.rollback().expect("rollback");
}

#[test]
#[ignore = "needs the Citus cluster of scripts/test.sh"]
fn the_internal_functions_fail_closed_where_they_must() {
    let calls = [
        "SELECT * FROM rate_limiter._rate_limit_at($1, 'internal', $1, 1, false, NULL, true, NULL)",
        "SELECT * FROM rate_limiter._rate_state_at($1, 'internal', $1, 1::int2)",
        "SELECT rate_limiter._rate_credit_at($1, 'internal', $1, 1, NULL, NULL)",
        "SELECT * FROM rate_limiter._rate_limit_all_at($1, ARRAY[('internal', $1, 1, NULL)]::rate_limiter.request[], false, NULL)",
        "SELECT rate_limiter._prune_at($1::text, NULL, NULL)",
    ];
    let code = |client: &mut Client, statement: &str, dkey: &str| {
        client
            .query(statement, &[&dkey])
            .err()
            .and_then(|error| error.code().cloned())
    };
    // Not distributed: 55000 (and nothing to do).
    make_local();
    let mut coordinator = coordinator();
    define(&mut coordinator, "internal", 10.0);
    for statement in calls {
        assert_eq!(
            code(&mut coordinator, statement, "k"),
            Some(SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE),
            "{statement}"
        );
    }
    make_distributed();
    let urls = urls();
    let (one, _) = keys_on_each_worker(&mut coordinator, "internal-");
    let mut worker = connect(&urls[1]);
    // On the node holding the row, outside a transaction block: the
    // writing ones refuse (they would commit on their own).
    for statement in [calls[0], calls[2], calls[3], calls[4]] {
        assert_eq!(
            code(&mut worker, statement, &one),
            Some(SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE),
            "{statement}"
        );
    }
    // The bound on the work of one call holds for a direct call too: more
    // requests than rate_limiter.max_requests (1,000) is 54000.
    fails_in_a_transaction(
        &mut worker,
        "SELECT * FROM rate_limiter._rate_limit_all_at($1, ARRAY(\
             SELECT ('internal', $1, 1, NULL)::rate_limiter.request FROM generate_series(1, 1001)), false, NULL)",
        &one,
        SqlState::PROGRAM_LIMIT_EXCEEDED,
    );
    // A dkey that is not (name, key)'s (the first request's): 22023.
    for statement in [
        "SELECT * FROM rate_limiter._rate_limit_at($1, 'internal', 'another key', 1, false, NULL, true, NULL)",
        "SELECT * FROM rate_limiter._rate_limit_all_at($1, ARRAY[('internal', 'another key', 1, NULL)]::rate_limiter.request[], false, NULL)",
    ] {
        fails_in_a_transaction(&mut worker, statement, &one, SqlState::INVALID_PARAMETER_VALUE);
    }
    // A call Citus does not delegate (a generic plan) runs where it is
    // made: on worker 2, for a row on worker 1, 55000 and nothing written.
    let mut other = connect(&urls[2]);
    other
        .batch_execute("SET plan_cache_mode = force_generic_plan")
        .expect("generic plans");
    for statement in calls {
        fails_in_a_transaction(
            &mut other,
            statement,
            &one,
            SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE,
        );
    }
    assert_eq!(stored(&mut coordinator, "internal", &one), None);
    // Told that the call is its caller's transaction's only work
    // (`own_transaction`), `_rate_limit_at` commits as a statement of its
    // own on the node holding the row.
    worker
        .query(
            "SELECT * FROM rate_limiter._rate_limit_at($1, 'internal', $1, 1, false, NULL, true, NULL, true)",
            &[&one],
        )
        .expect("a call of its own");
    assert_eq!(stored(&mut coordinator, "internal", &one), Some(9.0));
    forget("internal");
}

/// Every form in which Citus would delegate a call of each internal
/// function with a NULL distribution argument (after the planner folded
/// it: a NULL literal, a parameter bound to NULL, an expression that
/// folds to NULL, a subquery the planner pulls up).
fn null_distribution_arguments() -> Vec<(String, Vec<Option<String>>)> {
    let calls = [
        "rate_limiter._rate_limit_at({dkey}, 'internal', 'k', 1, false, NULL, true, NULL)",
        "rate_limiter._rate_state_at({dkey}, 'internal', 'k', 1::int2)",
        "rate_limiter._rate_credit_at({dkey}, 'internal', 'k', 1, NULL, NULL)",
        "rate_limiter._rate_limit_all_at({dkey}, ARRAY[('internal', 'k', 1, NULL)]::rate_limiter.request[], false, NULL)",
        "rate_limiter._prune_at({dkey}, NULL, NULL)",
    ];
    let mut statements = Vec::new();
    for call in calls {
        for (dkey, parameters) in [
            ("NULL::text", vec![]),
            ("$1::text", vec![None]),
            ("nullif('a'::text, 'a')", vec![]),
        ] {
            let call = call.replace("{dkey}", dkey);
            statements.push((format!("SELECT * FROM {call}"), parameters.clone()));
            statements.push((format!("SELECT {call}"), parameters.clone()));
            statements.push((
                format!("SELECT * FROM (SELECT * FROM {call}) AS pulled_up"),
                parameters,
            ));
        }
    }
    statements
}

#[test]
#[ignore = "needs the Citus cluster of scripts/test.sh"]
fn a_null_distribution_argument_never_reaches_citus() {
    make_distributed();
    let urls = urls();
    // Citus 13.2.2 and 14.0.1 hash the distribution argument of a call
    // they delegate without checking for NULL: a server crash (signal 11).
    // Every such call is 22004 at planning, on the coordinator and on a
    // worker, in a transaction block and outside one, and the server
    // lives on.
    for url in [&urls[0], &urls[1]] {
        let mut client = connect(url);
        for (statement, parameters) in null_distribution_arguments() {
            let parameters: Vec<&(dyn postgres::types::ToSql + Sync)> = parameters
                .iter()
                .map(|value| value as &(dyn postgres::types::ToSql + Sync))
                .collect();
            for in_block in [false, true] {
                let error = if in_block {
                    let mut transaction = client.transaction().expect("begin");
                    let error = transaction
                        .query(statement.as_str(), &parameters)
                        .expect_err("a NULL dkey");
                    transaction.rollback().expect("rollback");
                    error
                } else {
                    client
                        .query(statement.as_str(), &parameters)
                        .expect_err("a NULL dkey")
                };
                assert_eq!(
                    error.code(),
                    Some(&SqlState::NULL_VALUE_NOT_ALLOWED),
                    "{url}: {statement}: {error}"
                );
            }
        }
        assert_eq!(
            client
                .query_one("SELECT 1", &[])
                .expect("the server lives on")
                .get::<_, i32>(0),
            1
        );
    }
    // A call with a NULL dkey that Citus does not delegate (not the only
    // call of its statement) still answers its own error.
    let mut coordinator = coordinator();
    let error = coordinator
        .query(
            "SELECT * FROM rate_limiter._rate_state_at(NULL::text, 'internal', 'k', 1::int2), generate_series(1, 1)",
            &[],
        )
        .expect_err("a NULL dkey");
    assert_eq!(
        error.code(),
        Some(&SqlState::INVALID_PARAMETER_VALUE),
        "{error}"
    );
}
