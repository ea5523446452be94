//! Per-key overrides on a cluster (docs/overrides.md, "Citus"):
//! `distribute()` makes `rate_limiter.overrides` a reference table; an
//! override written on any node is used by every node's next call, the
//! key's state stays on the key's node with its regime, and
//! `undistribute()` / `distribute()` keep overrides and regimes.

use super::*;

/// `remaining` of a `rate_check` of (name, key) through `client`.
fn remaining(client: &mut Client, name: &str, key: &str) -> f64 {
    client
        .query_one(
            "SELECT remaining FROM rate_limiter.rate_check($1, $2)",
            &[&name, &key],
        )
        .unwrap_or_else(|error| panic!("rate_check({name}, {key}): {error:?}"))
        .get(0)
}

/// Whether the state row of (name, key) has a regime, read through the
/// coordinator.
fn has_regime(client: &mut Client, name: &str, key: &str) -> Option<bool> {
    client
        .query_opt(
            "SELECT regime IS NOT NULL FROM rate_limiter.rate_limits WHERE name = $1 AND key = $2",
            &[&name, &key],
        )
        .expect("read the row")
        .map(|row| row.get(0))
}

#[test]
#[ignore = "needs the Citus cluster of scripts/test.sh"]
fn an_override_made_on_any_node_is_used_by_every_node() {
    make_distributed();
    forget("ovc");
    let mut clients: Vec<Client> = urls().iter().map(|url| connect(url)).collect();
    let method: String = clients[0]
        .query_one(
            "SELECT partmethod::text FROM pg_dist_partition WHERE logicalrelid = 'rate_limiter.overrides'::regclass",
            &[],
        )
        .expect("overrides in Citus's metadata")
        .get(0);
    assert_eq!(method, "n", "overrides is a reference table");
    define(&mut clients[0], "ovc", 3.0);
    define(&mut clients[0], "ovc_pro", 5.0);
    let (on_worker1, on_worker2) = keys_on_each_worker(&mut clients[0], "ovc-key-");
    for (writer, key) in [(0, &on_worker1), (1, &on_worker2), (2, &on_worker1)] {
        clients[writer]
            .execute(
                "SELECT rate_limiter.override('ovc', $1, plan => 'ovc_pro')",
                &[key],
            )
            .unwrap_or_else(|error| panic!("override on {}: {error:?}", NODES[writer]));
        for (node, client) in clients.iter_mut().enumerate() {
            assert_eq!(
                remaining(client, "ovc", key),
                4.0,
                "{} uses the override {} made",
                NODES[node],
                NODES[writer]
            );
            assert_eq!(
                remaining(client, "ovc", "plain"),
                2.0,
                "other keys keep the definition"
            );
        }
        clients[writer]
            .execute("SELECT rate_limiter.remove_override('ovc', $1)", &[key])
            .expect("remove_override");
        for client in &mut clients {
            assert_eq!(remaining(client, "ovc", key), 2.0, "the definition again");
        }
    }
    // A config of another kind: the key's row, on its worker, is written
    // under the override's regime, and the key starts full.
    assert!(consume(&mut clients[2], "ovc", Some(&on_worker2)));
    clients[1]
        .execute(
            "SELECT rate_limiter.override('ovc', $1, config => rate_limiter.fixed_window(10, '1 hour'))",
            &[&on_worker2],
        )
        .expect("override with another kind");
    assert_eq!(
        remaining(&mut clients[0], "ovc", &on_worker2),
        9.0,
        "starts full"
    );
    assert!(consume(&mut clients[0], "ovc", Some(&on_worker2)));
    assert_eq!(has_regime(&mut clients[0], "ovc", &on_worker2), Some(true));
    // undistribute() and distribute() keep the override and the regime.
    make_local();
    let mut coordinator = coordinator();
    assert_eq!(has_regime(&mut coordinator, "ovc", &on_worker2), Some(true));
    assert_eq!(
        remaining(&mut coordinator, "ovc", &on_worker2),
        8.0,
        "the same state, local"
    );
    make_distributed();
    let mut clients: Vec<Client> = urls().iter().map(|url| connect(url)).collect();
    for client in &mut clients {
        assert_eq!(
            remaining(client, "ovc", &on_worker2),
            8.0,
            "the same state, distributed"
        );
    }
    clients[0]
        .execute(
            "SELECT rate_limiter.remove_override('ovc', $1)",
            &[&on_worker2],
        )
        .expect("remove_override");
    assert_eq!(
        remaining(&mut clients[2], "ovc", &on_worker2),
        2.0,
        "back to the definition, full"
    );
    forget("ovc");
}
