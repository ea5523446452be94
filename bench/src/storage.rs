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

fn sustained(
    client: &mut Client,
    call: &str,
    table: &str,
    keys: usize,
    phases: usize,
    rounds_per_phase: usize,
) -> Sustained {
    client.batch_execute(&format!("TRUNCATE {table}")).unwrap();
    fill(client, call, keys, keys);
    let before = updates(client, table);
    let mut sizes = vec![total_size(client, table)];
    for _ in 0..phases {
        for _ in 0..rounds_per_phase {
            fill(client, call, keys, 1000);
        }
        sizes.push(total_size(client, table));
    }
    let after = updates(client, table);
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
    let ext = sustained(
        &mut client,
        "rate_limiter.rate_limit('bench', g::text)",
        "rate_limiter.rate_limits",
        small,
        phases,
        rounds,
    );
    let floor = sustained(
        &mut client,
        "baseline.floor_token_bucket('bench', g::text, 1, 100, 60000, 100)",
        "baseline.floor_limits",
        small,
        phases,
        rounds,
    );
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
    report.section(
        "Scenario 4: storage",
        format!(
            "| after {keys} keys | bytes per key (table + indexes) |\n|---|---:|\n\
             | extension (`rate_limiter.rate_limits`) | {ext_bytes:.1} |\n\
             | baseline table (`name, key, value, ts`, primary key) | {floor_bytes:.1} |\n\n\
             Sustained updates: {small} keys, {phases} phases of {rounds} calls per key.\n\n\
             | | HOT updates | size in KiB: created → after each phase |\n|---|---:|---|\n\
             | extension | {:.1}% | {} |\n\
             | baseline table (floor) | {:.1}% | {} |\n",
            ext.hot_share * 100.0,
            kib(&ext.sizes),
            floor.hot_share * 100.0,
            kib(&floor.sizes)
        ),
    );
}
