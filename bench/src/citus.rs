//! Scenario 7 (`bench/citus.sh`): a Citus cluster of this machine, a
//! coordinator and two workers (`scripts/citus.sh`), with
//! `rate_limiter.distribute(colocate_with => 'app.messages')`. Against the
//! plain-SQL upsert (the floor of `baselines/floor.sql`, written the way
//! Citus accepts it: the time comes from the `VALUES` row, since Citus
//! refuses a non-immutable function in `DO UPDATE`) on a table distributed
//! the same way and colocated with the same application table:
//! (a) 8 clients over 10,000 keys through the coordinator, one call per
//! transaction; (b) the tenant transaction (`BEGIN`, the limit, an insert
//! into `app.messages` for that tenant, `COMMIT`).

use crate::report::{rotate, Report};
use crate::{pgbench, Bench, Pgbench};

const SECONDS: usize = 10;
/// Rounds per contender (the contenders take turns).
const RUNS: usize = 3;
const CLIENTS: usize = 8;
/// Keys (tenants) are drawn from 1..=KEYS.
const KEYS: usize = 10_000;

/// The application table, the baseline's table colocated with it, and the
/// limiter distributed beside them. Each `distribute()` in a transaction
/// of its own (it asks the workers over connections of their own).
fn set_up(bench: &Bench) {
    let mut client = bench.connect();
    client
        .batch_execute("SELECT rate_limiter.undistribute()")
        .expect("undistribute()");
    client
        .batch_execute(
            "DROP SCHEMA IF EXISTS app CASCADE; CREATE SCHEMA app; \
             CREATE TABLE app.messages (tenant_id text COLLATE \"C\" NOT NULL, body text); \
             SELECT create_distributed_table('app.messages', 'tenant_id'); \
             DROP TABLE IF EXISTS baseline.citus_limits; \
             CREATE TABLE baseline.citus_limits ( \
                 name text NOT NULL, key text COLLATE \"C\" NOT NULL, \
                 value float8 NOT NULL, ts timestamptz NOT NULL, \
                 PRIMARY KEY (key, name) WITH (fillfactor = 100)); \
             SELECT create_distributed_table('baseline.citus_limits', 'key', colocate_with => 'app.messages')",
        )
        .expect("the application's table and the baseline's");
    client
        .batch_execute("SELECT rate_limiter.distribute(colocate_with => 'app.messages')")
        .expect("distribute()");
}

/// Empties every table (on every node: Citus runs the TRUNCATE on each
/// shard), so that every run starts from the same state.
fn fresh_tables(bench: &Bench) {
    bench
        .connect()
        .batch_execute("TRUNCATE rate_limiter.rate_limits, baseline.citus_limits, app.messages")
        .expect("truncate");
}

pub fn run(bench: &Bench, report: &mut Report) {
    set_up(bench);
    let seconds = bench.scaled(SECONDS).max(2);
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/pgbench");
    let mut rows = String::new();
    let cases = [
        (
            "(a) one call per transaction",
            ["extension.sql", "citus_upsert.sql"],
            "S7a Citus, 8 clients over 10,000 keys: extension / upsert",
        ),
        (
            "(b) the tenant transaction",
            ["citus_tenant_extension.sql", "citus_tenant_upsert.sql"],
            "S7b Citus, the tenant transaction: extension / upsert",
        ),
    ];
    for (case, scripts, label) in cases {
        let scripts = scripts.map(|script| format!("{dir}/{script}"));
        let tps = rotate(scripts.len(), RUNS, |i| {
            fresh_tables(bench);
            pgbench(
                bench,
                &Pgbench {
                    clients: CLIENTS,
                    script: &scripts[i],
                    synchronous_commit: "on",
                    length: &["-T", &seconds.to_string()],
                    keys: KEYS,
                },
            )
        });
        rows.push_str(&format!(
            "| {case} | {} | {} |\n",
            tps[0].show(0),
            tps[1].show(0)
        ));
        report.ratio(label, tps[0].ratio_to(&tps[1]), 1.0, false);
    }
    report.scenario(
        "Scenario 7: Citus (pgbench transactions per second through the coordinator)",
        format!(
            "A coordinator and two workers on this machine (`scripts/citus.sh`), `rate_limiter.distribute(colocate_with => 'app.messages')`; \
             `pgbench -c {CLIENTS} -j 2 -M prepared -T {seconds}` against the coordinator, keys (tenants) random in 1..{KEYS}, synchronous_commit on. \
             The upsert is the floor's statement on `baseline.citus_limits`, distributed by its key and colocated with `app.messages`; \
             its time comes from the `VALUES` row (`EXCLUDED.ts`), because Citus refuses a non-immutable function in `DO UPDATE`.\n\n\
             Median of {RUNS} rounds (min–max), the contenders taking turns.\n\n\
             | case | extension | upsert |\n|---|---:|---:|\n{rows}\n\
             Why (a) is slower: the limiter's call for a row on a worker is a function call that Citus delegates to the worker, and Citus runs a call made inside a function in a transaction block there (`citus.function_opens_transaction_block`): three round trips to the worker (`BEGIN` with `assign_distributed_transaction_id`, the call, `COMMIT`), where the upsert in autocommit is one statement and one round trip (seen with `citus.log_remote_commands`). Without the block, a statement that failed after the call could not undo the consumption. In (b) the tenant's own `INSERT` needs the block anyway, and the call costs one more round trip, as the upsert does.\n\n\
             (c) one global limit with 16 shards and clients on both workers is not measured: a global limit with several shards is `0A000` on a distributed install (not built yet)."
        ),
        "what a call costs through the coordinator against the statement an application would write, alone and inside the tenant's own transaction.",
        "calls sent to the workers directly, a cluster of separate machines (here every node shares 2 cores, so the coordinator's and the workers' work compete), or many clients on few keys.",
    );
}
