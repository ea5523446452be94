//! prune() scheduled with real pg_cron (Debian's postgresql-15-cron, loaded
//! through shared_preload_libraries by scripts/lib.sh on PostgreSQL 15):
//! the README's `cron.schedule` line, run exactly as written, is accepted,
//! and the scheduled command runs and prunes. Run by scripts/test.sh on
//! PostgreSQL 15 only (`--ignored`): pg_cron is not built for the other
//! versions here.

use postgres::{Client, NoTls};
use rate_limiter_integration_tests::{readme_sql, unique_name};
use std::time::{Duration, Instant};

#[test]
#[ignore = "needs pg_cron: scripts/test.sh runs it on PostgreSQL 15"]
fn the_readme_schedule_runs_prune() {
    assert_eq!(
        std::env::var("RATE_LIMITER_TEST_CRON").as_deref(),
        Ok("1"),
        "the test server does not load pg_cron"
    );
    // pg_cron lives in the database named by cron.database_name (postgres).
    let url = std::env::var("RATE_LIMITER_TEST_URL").expect("RATE_LIMITER_TEST_URL");
    let mut client = Client::connect(&url, NoTls).expect("connect");
    client
        .batch_execute(
            "CREATE EXTENSION IF NOT EXISTS pg_cron; CREATE EXTENSION IF NOT EXISTS rate_limiter;",
        )
        .unwrap();
    // A row that prune removes: full again at once (count 0).
    let name = unique_name("cron");
    client
        .execute(
            "SELECT rate_limiter.define($1, rate_limiter.token_bucket(10, '1 minute'))",
            &[&name],
        )
        .unwrap();
    client
        .query_one(
            "SELECT ok FROM rate_limiter.rate_limit($1, 'k', 0)",
            &[&name],
        )
        .unwrap();

    // Runs from before this test (a job of the same name is replaced by
    // cron.schedule, keeping its id) do not count.
    let since: std::time::SystemTime = client.query_one("SELECT now()", &[]).unwrap().get(0);
    let line = readme_sql("cron");
    let job: i64 = client
        .query_one(line.trim().trim_end_matches(';'), &[])
        .unwrap()
        .get(0);
    let command: String = client
        .query_one("SELECT command FROM cron.job WHERE jobid = $1", &[&job])
        .unwrap()
        .get(0);
    assert_eq!(command, "SELECT rate_limiter.prune()");

    // Run it every minute rather than every ten, to see it run.
    client
        .execute(
            "SELECT cron.alter_job($1, schedule => '* * * * *')",
            &[&job],
        )
        .unwrap();
    let started = Instant::now();
    let outcome = loop {
        let run = client
            .query_opt(
                "SELECT status, return_message FROM cron.job_run_details \
                 WHERE jobid = $1 AND start_time >= $2 AND status IN ('succeeded', 'failed') LIMIT 1",
                &[&job, &since],
            )
            .unwrap();
        if let Some(run) = run {
            break (run.get::<_, String>(0), run.get::<_, Option<String>>(1));
        }
        assert!(
            started.elapsed() < Duration::from_secs(180),
            "the job did not run"
        );
        std::thread::sleep(Duration::from_millis(500));
    };
    client
        .execute("SELECT cron.unschedule($1::bigint)", &[&job])
        .unwrap();
    assert_eq!(outcome.0, "succeeded", "{outcome:?}");
    let left: i64 = client
        .query_one(
            "SELECT count(*) FROM rate_limiter.rate_limits WHERE name = $1",
            &[&name],
        )
        .unwrap()
        .get(0);
    assert_eq!(left, 0, "prune did not delete the full row");
    client
        .execute("SELECT rate_limiter.undefine($1)", &[&name])
        .unwrap();
}
