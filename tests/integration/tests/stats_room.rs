//! The statistics' room (docs/guarantees.md, "Statistics and shadow mode"),
//! against the real server: counters survive a backend exiting and start
//! from zero after a restart; past `rate_limiter.stats_max` the least-used
//! names are evicted, names that any caller can invent never push out a
//! defined limit's counters, no database takes another's room, and
//! `rate_limiter.stats_info` counts what was evicted and what found no
//! room; without `shared_preload_libraries` calls work and the statistics
//! are 55000. Each test leaves the server as it found it.

use postgres::error::SqlState;
use postgres::{Client, NoTls};
use rate_limiter_integration_tests::stats::{counted, room};
use rate_limiter_integration_tests::{
    connect, connect_to, drop_database, fresh_database, readme_roles, restart_server,
    server_options, test_env, unique_name, url,
};

fn connect_to_server() -> Client {
    Client::connect(&url(), NoTls).expect("connect after the restart")
}

/// Restarts: counters survive backends but not the server; past
/// rate_limiter.stats_max the least-used names are evicted; without
/// shared_preload_libraries calls work and the statistics are 55000.
/// Leaves the server as it found it.
#[test]
fn counters_live_in_the_server_bounded_and_need_preloading() {
    let options = server_options();
    assert!(
        options.contains("shared_preload_libraries=rate_limiter"),
        "the test server preloads the library: {options}"
    );
    let config = "rate_limiter.token_bucket(100, '1 hour')";
    let name = unique_name("stats_survivor");
    // A backend that exits leaves its counts behind.
    {
        let mut client = connect();
        for _ in 0..3 {
            client
                .query_one(
                    &format!("SELECT ok FROM rate_limiter.rate_limit($1, config => {config})"),
                    &[&name],
                )
                .expect("call");
        }
    }
    let mut client = connect();
    assert_eq!(counted(&mut client, &name).0.calls, 3);

    // Past rate_limiter.stats_max (100 here), the least-used names go.
    restart_server(&format!("{options} -c rate_limiter.stats_max=100"));
    let mut client = connect_to_server();
    let max: String = client
        .query_one("SHOW rate_limiter.stats_max", &[])
        .expect("stats_max")
        .get(0);
    assert_eq!(max, "100");
    assert_eq!(
        counted(&mut client, &name).0.calls,
        0,
        "a restart starts from zero"
    );
    let hot = unique_name("stats_hot");
    for _ in 0..20 {
        client
            .query_one(
                &format!("SELECT ok FROM rate_limiter.rate_limit($1, config => {config})"),
                &[&hot],
            )
            .expect("hot call");
    }
    for index in 0..300 {
        client
            .query_one(
                &format!("SELECT ok FROM rate_limiter.rate_limit($1, config => {config})"),
                &[&format!("stats_cold_{index}")],
            )
            .expect("cold call");
    }
    let names: i64 = client
        .query_one("SELECT count(*) FROM rate_limiter.stats", &[])
        .expect("count")
        .get(0);
    assert!(names <= 100, "{names} names kept, more than stats_max");
    assert!(names >= 90, "only {names} names kept");
    assert_eq!(
        counted(&mut client, &hot).0.calls,
        20,
        "the most-used name stays"
    );
    let last: i64 = client
        .query_one(
            "SELECT calls FROM rate_limiter.stats WHERE name = 'stats_cold_299'",
            &[],
        )
        .expect("the newest name is counted")
        .get(0);
    assert_eq!(last, 1);

    // Without preloading: calls work, the statistics are 55000 with a hint.
    restart_server(&test_env("RATE_LIMITER_TEST_PG_OPTIONS_WITHOUT_PRELOAD"));
    let mut client = connect_to_server();
    let ok: bool = client
        .query_one(
            &format!("SELECT ok FROM rate_limiter.rate_limit($1, config => {config})"),
            &[&name],
        )
        .expect("a call without the library preloaded")
        .get(0);
    assert!(ok);
    for sql in [
        "SELECT * FROM rate_limiter.stats",
        "SELECT rate_limiter.stats_reset()",
    ] {
        let error = client.batch_execute(sql).expect_err(sql);
        let db = error.as_db_error().expect("a server error");
        assert_eq!(
            db.code(),
            &SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE,
            "{sql}"
        );
        assert!(
            db.hint().unwrap_or("").contains("shared_preload_libraries"),
            "{sql}: {:?}",
            db.hint()
        );
    }
    drop(client);
    restart_server(&options);
    let mut client = connect_to_server();
    assert_eq!(counted(&mut client, &name).0.calls, 0);
}

/// The counters' row of `name` in the database of `client`: calls, or
/// `None` when the view has no row for it.
fn calls(client: &mut Client, name: &str) -> Option<i64> {
    client
        .query_opt(
            "SELECT calls FROM rate_limiter.stats WHERE name = $1",
            &[&name],
        )
        .expect("read rate_limiter.stats")
        .map(|row| row.get(0))
}

/// How many names the view of `client`'s database shows.
fn names(client: &mut Client) -> i64 {
    client
        .query_one("SELECT count(*) FROM rate_limiter.stats", &[])
        .expect("count the names")
        .get(0)
}

const OTHER: &str = "rate_limiter_stats_other";

/// A review's attack: an application role of another database,
/// with exactly the README's grants, tries to empty this database's view
/// by inventing names (inline configs), first with two `rate_limit_all`
/// calls of 1,000 requests refused as a whole (which now count only their
/// refused request), then with 300 admitted calls of new names. This
/// database's limits, defined ones and its own inline name alike, keep
/// their counters (it holds less than its share, so the other database
/// evicts only its own names); a new name of this database takes the
/// other's room back; `stats_info` counts the evictions. Then the other
/// database fills its share with defined limits: its own invented names
/// can no longer evict anything, and their decisions are counted as
/// uncounted instead.
#[test]
fn no_database_and_no_invented_name_can_push_out_another_limits_counters() {
    let options = server_options();
    drop_database(OTHER);
    restart_server(&format!("{options} -c rate_limiter.stats_max=100"));
    let config = "rate_limiter.token_bucket(100, '1 hour')";

    // This database: a login limit used three times, four more defined
    // limits used once, and one name without a definition.
    let mut here = connect_to_server();
    let login = unique_name("stats_login");
    let defined: Vec<String> = (0..4).map(|_| unique_name("stats_defined")).collect();
    let inline = unique_name("stats_inline");
    for name in defined.iter().chain([&login]) {
        here.execute(
            &format!("SELECT rate_limiter.define($1, {config})"),
            &[name],
        )
        .expect("define");
    }
    for name in defined.iter().chain([&login, &login, &login]) {
        here.query_one("SELECT ok FROM rate_limiter.rate_limit($1)", &[name])
            .expect("call a defined limit");
    }
    for _ in 0..2 {
        here.query_one(
            &format!("SELECT ok FROM rate_limiter.rate_limit($1, config => {config})"),
            &[&inline],
        )
        .expect("call an inline limit");
    }
    let ours = |here: &mut Client| {
        let mut seen: Vec<Option<i64>> = defined.iter().map(|name| calls(here, name)).collect();
        seen.push(calls(here, &login));
        seen.push(calls(here, &inline));
        seen
    };
    let expected = vec![Some(1), Some(1), Some(1), Some(1), Some(3), Some(2)];
    assert_eq!(ours(&mut here), expected);

    // The other database, and its application role with the README's grants.
    let mut owner = fresh_database(OTHER);
    readme_roles(&mut owner);
    let mut app = connect_to(OTHER, "app");
    for round in 0..2 {
        // 1,000 requests (rate_limiter.max_requests), each a new name but
        // the first, named twice: its second request is refused, so the
        // whole call is, and consumes nothing.
        let refused: i64 = app
            .query_one(
                &format!(
                    "SELECT count(*) FILTER (WHERE NOT ok) FROM rate_limiter.rate_limit_all(
                         ARRAY[('flood_drained', NULL, 1, rate_limiter.token_bucket(1, '1 hour')),
                               ('flood_drained', NULL, 1, rate_limiter.token_bucket(1, '1 hour'))]::rate_limiter.request[]
                         || ARRAY(SELECT ('flood_{round}_' || i, NULL, 1, {config})::rate_limiter.request
                                  FROM generate_series(1, 998) AS i))"
                ),
                &[],
            )
            .expect("rate_limit_all of 1,000 requests")
            .get(0);
        assert_eq!(refused, 1, "refused as a whole");
    }
    assert_eq!(
        names(&mut owner),
        1,
        "a call refused as a whole counts only its refused request"
    );
    for index in 0..300 {
        app.query_one(
            &format!("SELECT ok FROM rate_limiter.rate_limit($1, config => {config})"),
            &[&format!("flood_{index}")],
        )
        .expect("a call with a new name");
    }
    // None of this database's counters went.
    assert_eq!(ours(&mut here), expected, "the other database evicted ours");
    let (evicted, uncounted) = room(&mut here);
    assert!(evicted > 0, "the other database evicted its own names");
    assert_eq!(uncounted, 0);
    let theirs = names(&mut owner);
    assert!(theirs + 6 <= 100, "{theirs} names there");
    assert_eq!(
        calls(&mut owner, "flood_299"),
        Some(1),
        "the newest name is counted"
    );
    // New names here take room back from the database over its share
    // (eviction frees 5 entries at a time, so the table may have room
    // for a few first).
    for _ in 0..10 {
        let newcomer = unique_name("stats_newcomer");
        here.query_one(
            &format!("SELECT ok FROM rate_limiter.rate_limit($1, config => {config})"),
            &[&newcomer],
        )
        .expect("a new name here");
        assert_eq!(
            calls(&mut here, &newcomer),
            Some(1),
            "a new name here counts"
        );
        if names(&mut owner) < theirs {
            break;
        }
    }
    assert!(
        names(&mut owner) < theirs,
        "room taken from the other database"
    );
    assert_eq!(ours(&mut here), expected);

    // The other database's share (50 of 100) filled with defined limits
    // (its owner defines them: a managing role): they evict its invented
    // names, and then an invented name finds no room.
    for index in 0..100 {
        let name = format!("defined_{index}");
        owner
            .execute(
                &format!("SELECT rate_limiter.define($1, {config})"),
                &[&name],
            )
            .expect("define");
        owner
            .query_one("SELECT ok FROM rate_limiter.rate_limit($1)", &[&name])
            .expect("call a defined limit");
    }
    let invented: i64 = owner
        .query_one(
            "SELECT count(*) FROM rate_limiter.stats WHERE name NOT LIKE 'defined%'",
            &[],
        )
        .expect("count the invented names")
        .get(0);
    assert_eq!(invented, 0, "defined names evicted the invented ones first");
    // Until the table is full (eviction leaves a few entries free).
    for index in 100..130 {
        if names(&mut here) + names(&mut owner) == 100 {
            break;
        }
        let name = format!("defined_{index}");
        owner
            .execute(
                &format!("SELECT rate_limiter.define($1, {config})"),
                &[&name],
            )
            .expect("define");
        owner
            .query_one("SELECT ok FROM rate_limiter.rate_limit($1)", &[&name])
            .expect("call a defined limit");
    }
    assert_eq!(
        names(&mut here) + names(&mut owner),
        100,
        "the table is full"
    );
    let (_, before) = room(&mut here);
    app.query_one(
        &format!("SELECT ok FROM rate_limiter.rate_limit('one_more', config => {config})"),
        &[],
    )
    .expect("a call with a new name");
    drop(app);
    let (_, after) = room(&mut here);
    assert_eq!(
        after,
        before + 1,
        "its decision was not counted, and said so"
    );
    assert_eq!(calls(&mut owner, "one_more"), None);
    assert_eq!(ours(&mut here), expected);
    assert!(names(&mut owner) >= 40, "the other database kept its share");

    drop(owner);
    drop_database(OTHER);
    restart_server(&options);
}
