//! A real Citus cluster (a coordinator and two workers on loopback, started
//! by `scripts/citus.sh`; their connection strings, coordinator first, in
//! `RATE_LIMITER_TEST_CITUS_URLS`, separated by `;`), with Citus 13.2.2 on
//! PostgreSQL 15 and 14.0.1 on 18. docs/guarantees.md, "Citus":
//! - `CREATE EXTENSION` on the coordinator creates the extension on every
//!   node, at the same version; `ALTER EXTENSION ... UPDATE` from 0.4.0
//!   keeps every row, and then `distribute()` works;
//! - `distribute()` / `undistribute()`: rows and answers kept, nothing left
//!   in a node's own table, extension membership and `pg_dump`
//!   registration kept, idempotent, refused where they cannot run;
//! - every row is in the shard Citus itself looks in for its value;
//! - calls on any node reach the row's node inside the caller's
//!   transaction: rollback and savepoints undo them, a transaction that
//!   wrote on two nodes commits with two-phase commit, one that wrote on
//!   one node does not; a colocated tenant transaction stays on one node,
//!   with a text or a bigint tenant column;
//! - exactness: 16 connections over the three nodes admit exactly the
//!   capacity of each limit, a global limit with 8 shards included;
//! - a sharded global limit uses the shards of the caller's node first,
//!   then the other nodes' (rollback and 2PC on both workers), and never
//!   waits for another node's busy shard;
//! - a definition made on any node is used by every node's next call,
//!   and so is an override (a reference table too);
//! - blocks live beside their key's state (distributed, colocated): a block
//!   made on any node refuses every node's calls; an automatic block starts
//!   on the key's node in the caller's transaction; a global limit spread
//!   over the nodes cannot be blocked (0A000);
//! - `status`, `http_headers`, `postgrest_limit` and `rate_credit` reach
//!   the rows where they live; `prune()` on any node prunes every node's
//!   shards;
//! - a state table distributed otherwise fails closed with `55000`, and the
//!   hint's `undistribute()` brings it back;
//! - a shard moved under load loses no row and admits no more than its
//!   capacity;
//! - a worker killed with SIGKILL between PREPARE and COMMIT PREPARED: the
//!   prepared transaction holds its row until Citus's recovery commits it,
//!   and then the state is what committed;
//! - a call that is its transaction's only work reaches the row's node in
//!   one round trip (no transaction block there); a call with anything
//!   after it in its transaction (a failing output column, a second
//!   statement of a simple query or a pipeline, a DO block, a function, an
//!   INSERT ... SELECT) keeps the block, and its failure undoes the call.
//!
//! Ignored by default; `scripts/test.sh` runs them with `--ignored`, one at
//! a time, against the cluster it starts. Each test sets up the state it
//! needs (local or distributed) and uses limit names of its own.

use postgres::error::SqlState;
use postgres::{Client, NoTls};
use rand::Rng;
use rate_limiter_integration_tests::citus::{
    calls_under_load, connect, connect_with_notices, consume, coordinator, define, distribution,
    extension_version, forget, keys_on_each_worker, make_distributed, make_local, node_of, nodes,
    port_of, stored, taken, urls, NODES,
};

mod blocks;
mod colocation;
mod composites;
mod concurrency;
mod delegation;
mod distribute;
mod global_limits;
mod internal_functions;
mod overrides;
mod pruning;
mod rate_limit_all;
mod routing;
mod shapes;
mod shard_moves;
mod transaction_blocks;
mod two_phase_recovery;

/// Runs a tenant transaction through `url` (`BEGIN`, `rate_limit(name,
/// key)`, then `insert` with the tenant as `$1`, `COMMIT`) with Citus's
/// remote commands logged, and checks that the call was admitted, that the
/// commit was one-phase and that nothing ran on worker 2 (the tenant's
/// rows are on worker 1).
fn tenant_transaction_stays_on_one_worker(
    url: &str,
    name: &str,
    key: &str,
    insert: &str,
    tenant: &(dyn postgres::types::ToSql + Sync),
) {
    let (mut client, notices) = connect_with_notices(url);
    client
        .batch_execute("SET citus.log_remote_commands = on")
        .expect("log remote commands");
    taken(&notices);
    let mut transaction = client.transaction().expect("begin");
    let ok: bool = transaction
        .query_one(
            "SELECT ok FROM rate_limiter.rate_limit($1, $2)",
            &[&name, &key],
        )
        .expect("rate_limit")
        .get(0);
    assert!(ok);
    transaction
        .execute(insert, &[tenant])
        .expect("the tenant's insert");
    transaction.commit().expect("commit");
    stayed_off_worker_2(url, &taken(&notices));
}

/// Checks the remote commands `log` of a transaction through `url`
/// (`citus.log_remote_commands`): its commit was one-phase, and nothing
/// ran on worker 2.
fn stayed_off_worker_2(url: &str, log: &[String]) {
    assert!(
        !log.iter().any(|line| line.contains("PREPARE TRANSACTION")),
        "one node, one-phase commit ({url}): {log:#?}"
    );
    // Citus names the node of each remote command ("on server
    // postgres@127.0.0.1:PORT").
    let worker_2 = format!("127.0.0.1:{}", port_of(&urls()[2]));
    assert!(
        !log.iter().any(|line| line.contains(&worker_2)),
        "nothing ran on the other worker, {worker_2} ({url}): {log:#?}"
    );
}

/// The node (0 coordinator, 1 and 2 workers) of each shard of the global
/// limit `name` with `shards` shards.
fn shard_nodes(client: &mut Client, name: &str, shards: i16) -> Vec<usize> {
    (0..shards)
        .map(|shard| node_of(client, &format!("{name}/{shard}")))
        .collect()
}

/// A name starting with `prefix` whose global limit of 8 shards has at
/// least two shards on each worker, and where its shards are.
fn name_spread_over_both_workers(client: &mut Client, prefix: &str) -> (String, Vec<usize>) {
    for n in 0..100 {
        let name = format!("{prefix}{n}");
        let nodes = shard_nodes(client, &name, 8);
        if (1..=2).all(|worker| nodes.iter().filter(|node| **node == worker).count() >= 2) {
            return (name, nodes);
        }
    }
    panic!("no name with two shards on each worker");
}

/// A distributed install with a global limit of 8 shards, `capacity`
/// tokens per 1000 days, named `prefix-N` with two shards or more on each
/// worker (the state of names starting with `prefix` forgotten first): a
/// coordinator connection, the name and the node of each shard.
fn sharded_global_limit(prefix: &str, capacity: f64) -> (Client, String, Vec<usize>) {
    make_distributed();
    forget(prefix);
    let mut coordinator = coordinator();
    let (name, nodes) = name_spread_over_both_workers(&mut coordinator, &format!("{prefix}-"));
    coordinator
        .execute(
            "SELECT rate_limiter.define($1, rate_limiter.token_bucket($2, '1000 days', shards => 8))",
            &[&name, &capacity],
        )
        .expect("define");
    (coordinator, name, nodes)
}

/// The stored tokens of each shard of the global limit `name` (`None`: no
/// row), to 3 decimals, read through Citus.
fn shard_values(client: &mut Client, name: &str, shards: i16) -> Vec<Option<f64>> {
    (0..shards)
        .map(|shard| {
            client
                .query_opt(
                    "SELECT round(value::numeric, 3)::float8 FROM rate_limiter.rate_limits \
                     WHERE dkey = $1 AND name = $2 AND key IS NULL AND shard = $3",
                    &[&format!("{name}/{shard}"), &name, &shard],
                )
                .expect("read a shard")
                .map(|row| row.get(0))
        })
        .collect()
}

/// A connection to `url` once the server accepts connections again (after
/// a crash, its recovery).
fn reconnect(url: &str) -> Client {
    for _ in 0..600 {
        if let Ok(client) = Client::connect(url, NoTls) {
            return client;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    panic!("{url} did not come back within a minute");
}

/// `rate_limiter.prune(older_than)`: how many rows it deleted.
fn prune(client: &mut impl postgres::GenericClient, older_than: Option<&str>) -> i64 {
    client
        .query_one(
            "SELECT rate_limiter.prune($1::text::interval)",
            &[&older_than],
        )
        .expect("prune()")
        .get(0)
}

/// `rate_limit_all(name, [(key, count), ...])` through `client`: each
/// row's `ok`, in request order.
fn consume_all(
    client: &mut impl postgres::GenericClient,
    name: &str,
    requests: &[(&str, f64)],
) -> Result<Vec<bool>, postgres::Error> {
    let keys: Vec<&str> = requests.iter().map(|(key, _)| *key).collect();
    let counts: Vec<f64> = requests.iter().map(|(_, count)| *count).collect();
    let rows = client.query(
        "SELECT ok FROM rate_limiter.rate_limit_all(ARRAY(\
             SELECT ($1::text, key, count, NULL)::rate_limiter.request \
             FROM unnest($2::text[], $3::float8[]) WITH ORDINALITY AS r(key, count, position) \
             ORDER BY position))",
        &[&name, &keys, &counts],
    )?;
    Ok(rows.iter().map(|row| row.get(0)).collect())
}
