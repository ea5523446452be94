//! Logical decoding, which logical replication and change-data-capture
//! tools read, decodes every write of every consuming call, and replaying
//! the decoded changes in order gives exactly the table's contents.
//!
//! This caught a real bug: the direct storage path used to insert several
//! new rows speculatively before finishing any of them (a sharded limit's
//! first call on two shards, `rate_limit_all` on new limits). Logical
//! decoding keeps one pending speculative insertion per transaction and
//! failed with "invalid ordering of speculative insertion changes", which
//! stops every logical slot of the database for good.
//!
//! Also: a `FOR ALL TABLES` publication makes consuming calls fail as the
//! executor fails any UPDATE of a table without a replica identity
//! (`55000`), until `REPLICA IDENTITY FULL` is set (the README says so).

use postgres::error::SqlState;
use postgres::Client;
use rand::seq::SliceRandom;
use rate_limiter_integration_tests::{connect, fresh_database, url};
use std::collections::HashMap;
use std::sync::{Arc, Barrier};
use std::thread;

const SLOT: &str = "rate_limiter_test";
const DATABASE: &str = "rate_limiter_logical";

/// (name, key, shard) -> (value, ts as text).
type Rows = HashMap<(String, String, i16), (f64, String)>;

/// The text after `marker` in a test_decoding tuple: up to the closing
/// quote for a quoted value, up to the next space otherwise.
fn field<'a>(tuple: &'a str, marker: &str) -> &'a str {
    let start = tuple
        .find(marker)
        .unwrap_or_else(|| panic!("no {marker} in {tuple}"))
        + marker.len();
    let rest = &tuple[start..];
    match rest.strip_prefix('\'') {
        Some(quoted) => &quoted[..quoted.find('\'').expect("closing quote")],
        None => rest.split(' ').next().unwrap_or(rest),
    }
}

/// A decoded tuple of rate_limiter.rate_limits (all columns: replica
/// identity FULL).
fn parse(tuple: &str) -> ((String, String, i16), (f64, String)) {
    (
        (
            field(tuple, "name[text]:").to_string(),
            field(tuple, "key[text]:").to_string(),
            field(tuple, "shard[smallint]:").parse().expect("shard"),
        ),
        (
            field(tuple, "value[double precision]:")
                .parse()
                .expect("value"),
            field(tuple, "ts[timestamp with time zone]:").to_string(),
        ),
    )
}

/// Applies the decoded changes in order, checking each against the rows so
/// far: an INSERT of a new row, an UPDATE or DELETE of the row as it is.
fn replay(changes: &[String]) -> Rows {
    let mut rows = Rows::new();
    for change in changes {
        let Some(change) = change.strip_prefix("table rate_limiter.rate_limits: ") else {
            continue;
        };
        if let Some(tuple) = change.strip_prefix("INSERT: ") {
            let (id, state) = parse(tuple);
            assert!(
                rows.insert(id, state).is_none(),
                "INSERT of an existing row: {change}"
            );
        } else if let Some(update) = change.strip_prefix("UPDATE: old-key: ") {
            let (old, new) = update.split_once(" new-tuple: ").expect("new-tuple");
            let ((old_id, old_state), (id, state)) = (parse(old), parse(new));
            assert_eq!(old_id, id, "UPDATE changed the key: {change}");
            assert_eq!(
                rows.insert(id, state),
                Some(old_state),
                "UPDATE of another row: {change}"
            );
        } else if let Some(tuple) = change.strip_prefix("DELETE: ") {
            let (id, state) = parse(tuple);
            assert_eq!(
                rows.remove(&id),
                Some(state),
                "DELETE of another row: {change}"
            );
        } else {
            panic!("unexpected change: {change}");
        }
    }
    rows
}

fn drop_slot(client: &mut Client) {
    client
        .execute(
            "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1",
            &[&SLOT],
        )
        .expect("drop the slot");
}

#[test]
fn every_write_decodes_and_replays_to_the_table() {
    let mut admin = connect();
    let level: String = admin.query_one("SHOW wal_level", &[]).unwrap().get(0);
    assert_eq!(
        level, "logical",
        "scripts/test.sh starts the server with wal_level=logical"
    );
    drop_slot(&mut admin);
    let mut client = fresh_database(DATABASE);
    client
        .batch_execute(
            "ALTER TABLE rate_limiter.rate_limits REPLICA IDENTITY FULL;
             SELECT rate_limiter.define('single', rate_limiter.token_bucket(10, '1 hour'));
             SELECT rate_limiter.define('sharded', rate_limiter.token_bucket(10, '1 hour', capacity => 40, shards => 4));
             SELECT rate_limiter.define('pair', rate_limiter.token_bucket(10, '1 hour', capacity => 20, shards => 2));",
        )
        .unwrap();
    // (a transaction of its own: one that has written cannot create a slot)
    client
        .execute(
            "SELECT pg_create_logical_replication_slot($1, 'test_decoding')",
            &[&SLOT],
        )
        .unwrap();
    client
        .batch_execute(
            "SET timezone = 'UTC';
             SET rate_limiter.now_override = '2026-01-01 00:00:00+00';
             -- a new row, then an update of it
             SELECT rate_limiter.rate_limit('single', 'k');
             SELECT rate_limiter.rate_limit('single', 'k');
             -- a sharded limit's first call, consuming from two new shards
             SELECT rate_limiter.rate_limit('sharded', 'k', 15);
             -- new rows of several limits at once; the shard of 'pair' that
             -- is not consumed from keeps no row
             SELECT * FROM rate_limiter.rate_limit_all(ARRAY[
                 ('single', 'k', 1, NULL), ('pair', 'k', 1, NULL), ('sharded', 'new', 1, NULL)
             ]::rate_limiter.request[]);
             -- refused: the missing row it held stays missing
             SELECT * FROM rate_limiter.rate_limit_all(ARRAY[
                 ('single', 'fresh', 1, NULL), ('single', 'k', 8, NULL)
             ]::rate_limiter.request[]);
             SELECT rate_limiter.rate_credit('single', 'k', 2);
             SELECT rate_limiter.rate_reset('pair', 'k');
             -- a day later everything is full again: prune deletes it all
             SET rate_limiter.now_override = '2026-01-02 00:00:00+00';
             SELECT rate_limiter.prune();",
        )
        .unwrap();
    let pruned: i64 = client
        .query_one("SELECT count(*) FROM rate_limiter.rate_limits", &[])
        .unwrap()
        .get(0);
    assert_eq!(pruned, 0, "prune left rows");

    // Connections racing on new keys: speculative inserts withdrawn after
    // conflicts, rows held by rate_limit_all, sharded calls.
    let connections = 4;
    let barrier = Arc::new(Barrier::new(connections));
    let workers: Vec<_> = (0..connections)
        .map(|connection| {
            let barrier = barrier.clone();
            thread::spawn(move || {
                let mut client =
                    postgres::Client::connect(&format!("{} dbname={DATABASE}", url()), postgres::NoTls)
                        .expect("connect");
                client
                    .batch_execute("SET rate_limiter.now_override = '2026-01-02 00:00:00+00'")
                    .unwrap();
                let mut names = ["single", "sharded", "pair"];
                for round in 0..25 {
                    let key = format!("race{round}");
                    barrier.wait();
                    if (connection + round) % 2 == 0 {
                        names.shuffle(&mut rand::rng());
                        client
                            .query(
                                "SELECT * FROM rate_limiter.rate_limit_all(ARRAY(\
                                 SELECT ROW(n, $2, 1, NULL)::rate_limiter.request FROM unnest($1::text[]) AS n))",
                                &[&names.to_vec(), &key],
                            )
                            .expect("rate_limit_all");
                    } else {
                        client
                            .query("SELECT * FROM rate_limiter.rate_limit('sharded', $1, 12)", &[&key])
                            .expect("rate_limit");
                    }
                }
            })
        })
        .collect();
    for worker in workers {
        worker.join().expect("a connection failed");
    }

    // Decoding fails on what it cannot order; otherwise replay it.
    let changes: Vec<String> = client
        .query(
            "SELECT data FROM pg_logical_slot_get_changes($1, NULL, NULL)",
            &[&SLOT],
        )
        .expect("logical decoding reads every change")
        .iter()
        .map(|row| row.get(0))
        .collect();
    let replayed = replay(&changes);
    let table: Rows = client
        .query(
            "SELECT name, key, shard, value, ts::text FROM rate_limiter.rate_limits",
            &[],
        )
        .unwrap()
        .iter()
        .map(|row| {
            (
                (row.get(0), row.get(1), row.get(2)),
                (row.get(3), row.get(4)),
            )
        })
        .collect();
    assert!(!table.is_empty());
    assert_eq!(replayed, table, "the decoded changes replay to the table");
    drop_slot(&mut client);
}

#[test]
fn a_publication_of_all_tables_needs_replica_identity_full() {
    let mut client = fresh_database("rate_limiter_publication");
    client
        .batch_execute(
            "SELECT rate_limiter.define('published', rate_limiter.token_bucket(10, '1 hour'));
             SELECT rate_limiter.rate_limit('published', 'k');
             CREATE PUBLICATION everything FOR ALL TABLES;",
        )
        .unwrap();
    // An update of a table without a replica identity, in a publication
    // that publishes updates, fails as the executor's UPDATE would.
    let error = client
        .query("SELECT rate_limiter.rate_limit('published', 'k')", &[])
        .expect_err("rate_limit must fail without a replica identity");
    assert_eq!(
        error.code(),
        Some(&SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE),
        "{error:?}"
    );
    // The README's fix.
    client
        .batch_execute("ALTER TABLE rate_limiter.rate_limits REPLICA IDENTITY FULL")
        .unwrap();
    let ok: bool = client
        .query_one(
            "SELECT ok FROM rate_limiter.rate_limit('published', 'k')",
            &[],
        )
        .unwrap()
        .get(0);
    assert!(ok);
}
