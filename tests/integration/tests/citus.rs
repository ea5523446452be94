//! A real Citus cluster (a coordinator and two workers on loopback, started
//! by `scripts/citus.sh`; their connection strings, coordinator first, in
//! `RATE_LIMITER_TEST_CITUS_URLS`, separated by `;`), with Citus 13.2.2 on
//! PostgreSQL 15 and 14.0.1 on 18. These tests pin what this version does
//! on a cluster (SPEC §7, §10), before the Citus support of issue 16:
//! - `CREATE EXTENSION` on the coordinator creates the extension on every
//!   node, at the same version;
//! - once Citus distributes the state table, every call fails closed with
//!   `55000`, on the coordinator and on a worker, and the error's hint
//!   (drop and re-create the extension) really brings the limits back on
//!   every node.
//!
//! Ignored by default; `scripts/test.sh` runs them with `--ignored` against
//! the cluster it starts.

use postgres::error::SqlState;
use postgres::{Client, NoTls};

/// Connection strings of the coordinator, then the two workers.
fn urls() -> Vec<String> {
    let urls = std::env::var("RATE_LIMITER_TEST_CITUS_URLS")
        .expect("RATE_LIMITER_TEST_CITUS_URLS is not set: run these tests through scripts/test.sh");
    let urls: Vec<String> = urls.split(';').map(str::to_string).collect();
    assert_eq!(urls.len(), 3, "a coordinator and two workers: {urls:?}");
    urls
}

fn connect(url: &str) -> Client {
    Client::connect(url, NoTls).unwrap_or_else(|error| panic!("connect to {url}: {error}"))
}

/// Every node of the cluster: (what it is, a connection).
fn nodes() -> Vec<(&'static str, Client)> {
    ["coordinator", "worker 1", "worker 2"]
        .into_iter()
        .zip(urls())
        .map(|(node, url)| (node, connect(&url)))
        .collect()
}

fn extension_version(client: &mut Client) -> Option<String> {
    client
        .query_opt(
            "SELECT extversion FROM pg_extension WHERE extname = 'rate_limiter'",
            &[],
        )
        .expect("read pg_extension")
        .map(|row| row.get(0))
}

/// Whether Citus lists the state table as distributed (metadata is kept on
/// every node).
fn distributed(client: &mut Client) -> bool {
    client
        .query_one(
            "SELECT count(*) > 0 FROM pg_dist_partition WHERE logicalrelid = 'rate_limiter.rate_limits'::regclass",
            &[],
        )
        .expect("read pg_dist_partition")
        .get(0)
}

/// An inline config, so that no node depends on another's definitions.
const CALL: &str = "SELECT ok FROM rate_limiter.rate_limit('citus', $1, \
                    config => rate_limiter.token_bucket(10, '1 minute'))";

#[test]
#[ignore = "needs the Citus cluster of scripts/test.sh"]
fn the_extension_is_created_on_every_node_at_one_version() {
    let mut versions = Vec::new();
    for (node, mut client) in nodes() {
        let version = extension_version(&mut client);
        assert!(version.is_some(), "rate_limiter is missing on the {node}");
        versions.push(version);
    }
    assert!(
        versions.windows(2).all(|pair| pair[0] == pair[1]),
        "one version on every node: {versions:?}"
    );
}

#[test]
#[ignore = "needs the Citus cluster of scripts/test.sh"]
fn a_distributed_state_table_fails_closed_until_the_extension_is_re_created() {
    let urls = urls();
    let mut coordinator = connect(&urls[0]);
    for (node, mut client) in nodes() {
        let ok: bool = client
            .query_one(CALL, &[&format!("before {node}")])
            .unwrap_or_else(|error| panic!("a call on the {node}: {error}"))
            .get(0);
        assert!(ok, "a first call on the {node} is admitted");
    }

    coordinator
        .batch_execute("SELECT create_distributed_table('rate_limiter.rate_limits', 'key')")
        .expect("Citus accepts distributing the state table");
    for (node, mut client) in nodes() {
        assert!(distributed(&mut client), "the {node} sees the distribution");
        let error = client
            .query_one(CALL, &[&format!("after {node}")])
            .expect_err("a call on a distributed state table fails");
        let db = error.as_db_error().expect("a server error");
        assert_eq!(
            db.code(),
            &SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE,
            "on the {node}: {db:?}"
        );
        assert!(
            db.message().contains("distributed by Citus"),
            "on the {node}: {}",
            db.message()
        );
        let hint = db.hint().unwrap_or_default();
        assert!(
            hint.contains("DROP EXTENSION rate_limiter")
                && hint.contains("CREATE EXTENSION rate_limiter"),
            "on the {node}, the hint names what works: {hint}"
        );
    }

    // What the hint says, on the coordinator.
    coordinator
        .batch_execute("DROP EXTENSION rate_limiter; CREATE EXTENSION rate_limiter")
        .expect("drop and re-create the extension on the coordinator");
    for (node, mut client) in nodes() {
        assert!(
            !distributed(&mut client),
            "the {node} forgot the distribution"
        );
        assert!(
            extension_version(&mut client).is_some(),
            "rate_limiter is back on the {node}"
        );
        let ok: bool = client
            .query_one(CALL, &[&format!("again {node}")])
            .unwrap_or_else(|error| panic!("a call on the {node} after re-creating: {error}"))
            .get(0);
        assert!(ok, "calls answer again on the {node}");
    }
}
