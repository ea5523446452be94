//! A refusal raised with `throws => true` frees everything the call
//! allocated: 100,000 caught refusals of `rate_limit_all` (and of
//! `rate_limit`) with 2 kB keys in one backend leave its private memory
//! (RssAnon in /proc/<pid>/status) where it was after a warm-up. Before the
//! fix the error jumped past live Rust vectors and each refusal leaked
//! about 2 kB for the life of the backend.

use rate_limiter_integration_tests::{connect, unique_name};

/// Private resident memory of process `pid`, in kB.
fn rss_anon_kb(pid: i32) -> i64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .expect("read the backend's /proc status (the tests run on the server's machine)");
    status
        .lines()
        .find_map(|line| line.strip_prefix("RssAnon:"))
        .and_then(|value| value.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("RssAnon in /proc/<pid>/status")
}

/// Runs `call` (SQL raising the refusal; `$name` is the limit) `times`
/// times in DO blocks of 10,000, each refusal caught.
fn refuse(client: &mut postgres::Client, name: &str, call: &str, times: usize) {
    let call = call.replace("$name", &format!("'{name}'"));
    for _ in 0..times / 10_000 {
        client
            .batch_execute(&format!(
                "DO $$ BEGIN FOR i IN 1..10000 LOOP
                     BEGIN {call}; RAISE 'admitted'; EXCEPTION WHEN SQLSTATE 'RL429' THEN NULL; END;
                 END LOOP; END $$"
            ))
            .unwrap();
    }
}

fn stays_flat(call: &str) {
    let mut client = connect();
    let name = unique_name("leak");
    client
        .execute(
            "SELECT rate_limiter.define($1, rate_limiter.token_bucket(1, '1 day'))",
            &[&name],
        )
        .unwrap();
    client
        .execute(
            "SELECT rate_limiter.rate_limit($1, repeat('k', 2000))",
            &[&name],
        )
        .unwrap();
    let pid: i32 = client
        .query_one("SELECT pg_backend_pid()", &[])
        .unwrap()
        .get(0);
    refuse(&mut client, &name, call, 10_000);
    let before = rss_anon_kb(pid);
    refuse(&mut client, &name, call, 100_000);
    let after = rss_anon_kb(pid);
    println!("{call}: RssAnon {before} kB -> {after} kB");
    // A leak of 2 kB per refusal would be 200 MB.
    assert!(
        after - before < 10_000,
        "the backend grew by {} kB over 100,000 refusals",
        after - before
    );
}

#[test]
fn caught_refusals_of_rate_limit_all_leak_nothing() {
    stays_flat(
        "PERFORM * FROM rate_limiter.rate_limit_all(ARRAY[ROW($name, repeat('k', 2000), 1, NULL)::rate_limiter.request], throws => true)",
    );
}

#[test]
fn caught_refusals_of_rate_limit_leak_nothing() {
    stays_flat("PERFORM * FROM rate_limiter.rate_limit($name, repeat('k', 2000), throws => true)");
}

/// The per-backend cache of definitions is bounded: looking up 20,000
/// unknown names of 2 kB each (42704 for each, caught) leaves the backend
/// about where it was, instead of holding every name (40 MB).
#[test]
fn looking_up_many_unknown_names_keeps_the_cache_bounded() {
    let mut client = connect();
    let pid: i32 = client
        .query_one("SELECT pg_backend_pid()", &[])
        .unwrap()
        .get(0);
    let lookups = |client: &mut postgres::Client, from: i32| {
        client
            .batch_execute(&format!(
                "DO $$ BEGIN FOR i IN {from}..{from} + 9999 LOOP
                     BEGIN
                         PERFORM * FROM rate_limiter.rate_check(i::text || repeat('n', 2000));
                         RAISE 'found';
                     EXCEPTION WHEN undefined_object THEN NULL;
                     END;
                 END LOOP; END $$"
            ))
            .unwrap();
    };
    lookups(&mut client, 0);
    let before = rss_anon_kb(pid);
    lookups(&mut client, 10_000);
    lookups(&mut client, 20_000);
    let after = rss_anon_kb(pid);
    println!("20,000 unknown names: RssAnon {before} kB -> {after} kB");
    assert!(
        after - before < 10_000,
        "the backend grew by {} kB",
        after - before
    );
}
