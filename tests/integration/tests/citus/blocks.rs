//! Blocks on a cluster (docs/blocks.md, "Citus"): not yet, and fail
//! closed. On a distributed install `block` and `unblock`, and calls of a
//! limit with automatic blocks (defined, overridden or inline), are 0A000
//! on every node and write nothing; `distribute()` refuses while keys are
//! blocked (55000), and once they are unblocked distributes.

use super::*;

/// The SQLSTATE of `sql` through `client` (`None`: it succeeded).
fn state_of(client: &mut Client, sql: &str) -> Option<SqlState> {
    client
        .batch_execute(sql)
        .err()
        .map(|error| error.code().cloned().unwrap_or(SqlState::INTERNAL_ERROR))
}

#[test]
#[ignore = "needs the Citus cluster of scripts/test.sh"]
fn blocks_fail_closed_on_a_distributed_install() {
    make_distributed();
    forget("blc");
    let mut clients: Vec<Client> = urls().iter().map(|url| connect(url)).collect();
    define(&mut clients[0], "blc", 3.0);
    define(&mut clients[0], "blc_pro", 5.0);
    for (node, client) in clients.iter_mut().enumerate() {
        for sql in [
            "SELECT rate_limiter.block('blc', 'k', '1 hour')",
            "SELECT rate_limiter.unblock('blc', 'k')",
            "SELECT rate_limiter.define('blc_auto', rate_limiter.with_block(rate_limiter.token_bucket(3, '1 hour'), '1 minute'))",
            "SELECT rate_limiter.override('blc', 'k', config => rate_limiter.with_block(rate_limiter.token_bucket(3, '1 hour'), '1 minute'))",
            "SELECT * FROM rate_limiter.rate_limit('blc_inline', 'k', config => rate_limiter.with_block(rate_limiter.token_bucket(3, '1 hour'), '1 minute'))",
            "SELECT * FROM rate_limiter.rate_limit_all(ARRAY[('blc_inline', 'k', 1, rate_limiter.with_block(rate_limiter.token_bucket(3, '1 hour'), '1 minute'))]::rate_limiter.request[])",
        ] {
            assert_eq!(
                state_of(client, sql),
                Some(SqlState::FEATURE_NOT_SUPPORTED),
                "{}: {sql}",
                NODES[node]
            );
        }
        // Nothing was written; the limit itself works, and blocked() reads.
        assert!(consume(client, "blc", Some("k")), "{}", NODES[node]);
        assert_eq!(
            state_of(client, "SELECT * FROM rate_limiter.blocked('blc', 'k')"),
            None
        );
    }
    let written: i64 = clients[0]
        .query_one(
            "SELECT (SELECT count(*) FROM rate_limiter.blocks)
                  + (SELECT count(*) FROM rate_limiter.definitions WHERE name = 'blc_auto')
                  + (SELECT count(*) FROM rate_limiter.overrides WHERE name = 'blc')",
            &[],
        )
        .expect("count")
        .get(0);
    assert_eq!(written, 0, "nothing written");

    // A key blocked while the tables are local keeps distribute() from
    // running, until it is unblocked.
    make_local();
    let mut coordinator = coordinator();
    coordinator
        .batch_execute("SELECT rate_limiter.block('blc', 'k', '1 hour', 'local')")
        .expect("block on a local install");
    assert_eq!(
        state_of(&mut coordinator, "SELECT rate_limiter.distribute()"),
        Some(SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE)
    );
    coordinator
        .batch_execute("SELECT rate_limiter.unblock('blc', 'k')")
        .expect("unblock");
    coordinator
        .batch_execute("SELECT rate_limiter.distribute()")
        .expect("distribute() once no key is blocked");
    forget("blc");
}
