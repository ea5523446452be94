//! Scenario 4: storage. Bytes per key (table + indexes) after 1,000,000
//! keys, against the baseline table; then sustained updates of 10,000 keys
//! in phases: the share of HOT updates and the size of the relation after
//! each phase. Both tables' unique indexes have fillfactor 100. ROUNDS
//! rounds, the contenders taking turns.

use crate::report::{Report, Samples};
use crate::{Bench, Pgbench};

/// Rounds of the whole scenario.
const ROUNDS: usize = 3;
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
    /// The call for key `g` that creates the 1,000,000 keys.
    fill_call: &'static str,
    /// The call for key `g` (a SQL expression), for `fill`.
    call: &'static str,
    /// Its pgbench script (bench/pgbench/).
    script: &'static str,
}

const EXTENSION: Contender = Contender {
    table: "rate_limiter.rate_limits",
    fill_call: "rate_limiter.rate_limit('bench', g::text)",
    call: "rate_limiter.rate_limit('pgbench', g::text)",
    script: "extension.sql",
};
const FLOOR: Contender = Contender {
    table: "baseline.floor_limits",
    fill_call: "baseline.floor_token_bucket('bench', g::text, 1, 100, 60000, 100)",
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
                crate::pgbench(
                    bench,
                    &Pgbench {
                        clients: 2,
                        script: &script,
                        synchronous_commit: "off",
                        length: &["-t", &per_client],
                        keys,
                    },
                );
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

/// Bytes per key (table + indexes) of `contender` after `keys` new keys
/// (`fill`s of 100,000) and a VACUUM ANALYZE.
fn bytes_per_key(bench: &Bench, contender: &Contender, keys: usize) -> f64 {
    let mut client = bench.connect();
    client
        .batch_execute(&format!("TRUNCATE {}", contender.table))
        .unwrap();
    fill(&mut client, contender.fill_call, keys, 100_000);
    client
        .batch_execute(&format!("VACUUM ANALYZE {}", contender.table))
        .unwrap();
    total_size(&mut client, contender.table) as f64 / keys as f64
}

pub fn run(bench: &Bench, report: &mut Report) {
    let keys = bench.scaled(1_000_000);
    let (small, phases, rounds) = (10_000, 5, bench.scaled(10));
    let contenders = [&EXTENSION, &FLOOR];
    let sustained_runs = [
        (&EXTENSION, Pattern::PerRequest),
        (&FLOOR, Pattern::PerRequest),
        (&EXTENSION, Pattern::Batched),
        (&FLOOR, Pattern::Batched),
    ];
    let mut bytes: [Vec<f64>; 2] = Default::default();
    let mut runs: [Vec<Sustained>; 4] = Default::default();
    for round in 0..ROUNDS {
        for turn in 0..contenders.len() {
            let i = (round + turn) % contenders.len();
            bytes[i].push(bytes_per_key(bench, contenders[i], keys));
        }
        for turn in 0..sustained_runs.len() {
            let i = (round + turn) % sustained_runs.len();
            let (contender, pattern) = sustained_runs[i];
            runs[i].push(sustained(bench, contender, pattern, small, phases, rounds));
        }
    }
    let [ext_bytes, floor_bytes] = bytes.map(Samples::new);
    report.ratio(
        "S4 bytes per key: extension / baseline table (both fillfactor 100)",
        ext_bytes.ratio_to(&floor_bytes),
        1.0,
        true,
    );
    let hot = |runs: &[Sustained]| Samples::new(runs.iter().map(|r| r.hot_share).collect());
    let growth = |runs: &[Sustained]| {
        Samples::new(
            runs.iter()
                .map(|r| *r.sizes.last().unwrap() as f64 / r.sizes[1] as f64)
                .collect(),
        )
    };
    let ext_hot = hot(&runs[0]);
    report.ratio(
        "S4 HOT share of updates (extension) / 90%",
        Samples::new(ext_hot.values().iter().map(|share| share / 0.9).collect()),
        1.0,
        false,
    );
    report.ratio(
        "S4 size after last / first update phase (extension)",
        growth(&runs[0]),
        1.05,
        true,
    );

    // Sizes of the median round (by final size); HOT share and growth as
    // median (min–max).
    let kib = |runs: &[Sustained]| {
        let mut order: Vec<&Sustained> = runs.iter().collect();
        order.sort_by_key(|r| *r.sizes.last().unwrap());
        order[order.len() / 2]
            .sizes
            .iter()
            .map(|s| format!("{}", s / 1024))
            .collect::<Vec<_>>()
            .join(" → ")
    };
    let row = |label: &str, runs: &[Sustained]| {
        format!(
            "| {label} | {}% | {} | {} |\n",
            Samples::new(hot(runs).values().iter().map(|h| h * 100.0).collect()).show(1),
            growth(runs).show(3),
            kib(runs)
        )
    };
    let header = "| | HOT updates | last / first phase size | size in KiB (median round): created → after each phase |\n|---|---:|---:|---|\n";
    report.scenario(
        "Scenario 4: storage",
        format!(
            "{ROUNDS} rounds, the contenders taking turns; median (min–max).\n\n\
             | after {keys} keys | bytes per key (table + indexes) |\n|---|---:|\n\
             | extension (`rate_limiter.rate_limits`) | {} |\n\
             | baseline table (`name, key, value, ts`, primary key) | {} |\n\n\
             Both unique indexes have fillfactor 100 (the extension's index is created so; a btree's default \
             is 90, so the baseline's is set to match); both tables use the default heap fillfactor (100).\n\n\
             Sustained updates of {small} keys, {phases} phases of {rounds} calls per key each.\n\n\
             Per request (the target): one call per transaction, random keys, `pgbench -c 2`.\n\n\
             {header}{}{}\n\
             Batched (for comparison, not a target): one statement calls for 1,000 keys at a time, \
             so every row of a page gets a new version in the same transaction and no page has room \
             for them all. `ALTER TABLE ... SET (fillfactor = 80)` \
             suits this pattern at the cost of 25% more space (README, Storage).\n\n\
             {header}{}{}",
            ext_bytes.show(1),
            floor_bytes.show(1),
            row("extension", &runs[0]),
            row("baseline table (floor)", &runs[1]),
            row("extension", &runs[2]),
            row("baseline table (floor)", &runs[3]),
        ),
        "the space a key costs, and that per-request updates stay HOT and stop growing.",
        "bloat while a long transaction holds vacuum back.",
    );
}
