//! Scenario 4: storage. Bytes per key (table + indexes) after 1,000,000
//! keys, against the baseline table; then sustained updates of 10,000 keys
//! in phases: the share of HOT updates and the size of the relation after
//! each phase.

use crate::report::Report;
use crate::Bench;
use postgres::Client;

fn total_size(client: &mut Client, table: &str) -> i64 {
    client
        .query_one(
            "SELECT pg_total_relation_size($1::text::regclass)",
            &[&table],
        )
        .unwrap()
        .get(0)
}

/// (n_tup_upd, n_tup_hot_upd) of `table`, after flushing this backend's stats.
fn updates(client: &mut Client, table: &str) -> (i64, i64) {
    client
        .batch_execute("SELECT pg_stat_force_next_flush()")
        .unwrap();
    client.batch_execute("SELECT 1").unwrap();
    let row = client
        .query_one(
            "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE relid = $1::text::regclass",
            &[&table],
        )
        .unwrap();
    (row.get(0), row.get(1))
}

/// Calls `call` (with `g` the key number) once for each key in 1..=keys,
/// `batch` keys per statement.
fn fill(client: &mut Client, call: &str, keys: usize, batch: usize) {
    let mut first = 1;
    while first <= keys {
        let last = (first + batch - 1).min(keys);
        client
            .batch_execute(&format!(
                "SELECT count(*) FROM generate_series({first}, {last}) AS g, LATERAL {call} AS r"
            ))
            .unwrap();
        first = last + 1;
    }
}

struct Sustained {
    sizes: Vec<i64>,
    hot_share: f64,
}

/// How the sustained updates arrive.
#[derive(Clone, Copy)]
enum Pattern {
    /// One call per transaction, random keys, 2 clients (pgbench): what an
    /// application does.
    PerRequest,
    /// One statement (one transaction) calling for 1,000 keys at a time:
    /// every row of a page gets a new version before any old one is dead,
    /// the worst case for HOT updates.
    Batched,
}

/// A contender in the storage scenario.
struct Contender {
    table: &'static str,
    /// The call for key `g` (a SQL expression), for `fill`.
    call: &'static str,
    /// Its pgbench script (bench/pgbench/).
    script: &'static str,
}

const EXTENSION: Contender = Contender {
    table: "rate_limiter.rate_limits",
    call: "rate_limiter.rate_limit('pgbench', g::text)",
    script: "extension.sql",
};
const FLOOR: Contender = Contender {
    table: "baseline.floor_limits",
    call: "baseline.floor_token_bucket('pgbench', g::text, 1, 100, 60000, 100)",
    script: "floor.sql",
};

/// Creates `keys` rows, then sends `phases` phases of `rounds` calls per
/// key (on average, for PerRequest) and measures the size after each.
fn sustained(
    bench: &Bench,
    contender: &Contender,
    pattern: Pattern,
    keys: usize,
    phases: usize,
    rounds: usize,
) -> Sustained {
    let mut client = bench.connect();
    client
        .batch_execute(&format!("TRUNCATE {}", contender.table))
        .unwrap();
    fill(&mut client, contender.call, keys, keys);
    let before = updates(&mut client, contender.table);
    let mut sizes = vec![total_size(&mut client, contender.table)];
    let script = format!(
        "{}/pgbench/{}",
        env!("CARGO_MANIFEST_DIR"),
        contender.script
    );
    for _ in 0..phases {
        match pattern {
            Pattern::PerRequest => {
                let per_client = (keys * rounds / 2).to_string();
                crate::pgbench(bench, &script, "off", &["-t", &per_client], keys);
            }
            Pattern::Batched => {
                for _ in 0..rounds {
                    fill(&mut client, contender.call, keys, 1000);
                }
            }
        }
        sizes.push(total_size(&mut client, contender.table));
    }
    let after = updates(&mut client, contender.table);
    let (updated, hot) = (after.0 - before.0, after.1 - before.1);
    Sustained {
        sizes,
        hot_share: hot as f64 / updated.max(1) as f64,
    }
}

pub fn run(bench: &Bench, report: &mut Report) {
    let mut client = bench.connect();
    let keys = bench.scaled(1_000_000);
    client
        .batch_execute("TRUNCATE rate_limiter.rate_limits, baseline.floor_limits")
        .unwrap();
    fill(
        &mut client,
        "rate_limiter.rate_limit('bench', g::text)",
        keys,
        100_000,
    );
    fill(
        &mut client,
        "baseline.floor_token_bucket('bench', g::text, 1, 100, 60000, 100)",
        keys,
        100_000,
    );
    client
        .batch_execute("VACUUM ANALYZE rate_limiter.rate_limits, baseline.floor_limits")
        .unwrap();
    let ext_bytes = total_size(&mut client, "rate_limiter.rate_limits") as f64 / keys as f64;
    let floor_bytes = total_size(&mut client, "baseline.floor_limits") as f64 / keys as f64;
    report.ratio(
        "S4 bytes per key: extension / baseline table",
        ext_bytes / floor_bytes,
        1.0,
        true,
    );

    let (small, phases, rounds) = (10_000, 5, bench.scaled(10));
    let [ext, floor, ext_batched, floor_batched] = [
        (&EXTENSION, Pattern::PerRequest),
        (&FLOOR, Pattern::PerRequest),
        (&EXTENSION, Pattern::Batched),
        (&FLOOR, Pattern::Batched),
    ]
    .map(|(contender, pattern)| sustained(bench, contender, pattern, small, phases, rounds));
    report.ratio(
        "S4 HOT share of updates (extension) / 90%",
        ext.hot_share / 0.9,
        1.0,
        false,
    );
    let growth = *ext.sizes.last().unwrap() as f64 / ext.sizes[1] as f64;
    report.ratio(
        "S4 size after last / first update phase (extension)",
        growth,
        1.05,
        true,
    );

    let kib = |sizes: &[i64]| {
        sizes
            .iter()
            .map(|s| format!("{}", s / 1024))
            .collect::<Vec<_>>()
            .join(" → ")
    };
    let row = |label: &str, result: &Sustained| {
        format!(
            "| {label} | {:.1}% | {} |\n",
            result.hot_share * 100.0,
            kib(&result.sizes)
        )
    };
    report.section(
        "Scenario 4: storage",
        format!(
            "| after {keys} keys | bytes per key (table + indexes) |\n|---|---:|\n\
             | extension (`rate_limiter.rate_limits`) | {ext_bytes:.1} |\n\
             | baseline table (`name, key, value, ts`, primary key) | {floor_bytes:.1} |\n\n\
             Sustained updates of {small} keys, {phases} phases of {rounds} calls per key each.\n\n\
             Per request (the target): one call per transaction, random keys, `pgbench -c 2`.\n\n\
             | | HOT updates | size in KiB: created → after each phase |\n|---|---:|---|\n{}{}\n\
             Batched (for comparison, not a target): one statement calls for 1,000 keys at a time, \
             so every row of a page gets a new version in the same transaction and no page has room \
             for them all. Both tables use the default fillfactor; `ALTER TABLE ... SET (fillfactor = 80)` \
             suits this pattern at the cost of 25% more space (README, Storage).\n\n\
             | | HOT updates | size in KiB: created → after each phase |\n|---|---:|---|\n{}{}",
            row("extension", &ext),
            row("baseline table (floor)", &floor),
            row("extension", &ext_batched),
            row("baseline table (floor)", &floor_batched),
        ),
    );
}
