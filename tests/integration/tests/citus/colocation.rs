//! The state table colocated with an application's table by its tenant
//! column (text, bigint, integer, uuid): a tenant transaction stays on one
//! worker.

use super::*;

/// The node (0 coordinator, 1 and 2 workers) holding `table`'s rows of
/// `value` (as text; its distribution column is of type `column_type`).
fn node_of_value(client: &mut Client, table: &str, value: &str, column_type: &str) -> usize {
    let port: i32 = client
        .query_one(
            &format!(
                "SELECT n.nodeport FROM pg_dist_placement AS p JOIN pg_dist_node AS n USING (groupid) \
                 WHERE p.shardid = get_shard_id_for_distribution_column($1::text::regclass, $2::text::{column_type})"
            ),
            &[&table, &value],
        )
        .expect("find the value's node")
        .get(0);
    urls()
        .iter()
        .position(|url| url.contains(&format!("port={port} ")))
        .unwrap_or_else(|| panic!("no node listens on {port}"))
}

/// The stored tokens of (name, key) on a state table distributed by a
/// column of type `column_type`, `dkey` its value as text, read through a
/// query Citus routes by that value.
fn stored_typed(
    client: &mut Client,
    name: &str,
    key: Option<&str>,
    dkey: &str,
    column_type: &str,
) -> Option<f64> {
    client
        .query_opt(
            &format!(
                "SELECT round(value::numeric, 3)::float8 FROM rate_limiter.rate_limits \
                 WHERE dkey = $3::text::{column_type} AND name = $1 AND key IS NOT DISTINCT FROM $2"
            ),
            &[&name, &key, &dkey],
        )
        .expect("read the state")
        .map(|row| row.get(0))
}

/// The type of the state table's `dkey`, and whether it is in the
/// colocation group of `table`.
fn dkey_type_and_colocation(client: &mut Client, table: &str) -> (String, bool) {
    let row = client
        .query_one(
            "SELECT format_type(atttypid, atttypmod), \
                    (SELECT colocationid FROM pg_dist_partition WHERE logicalrelid = $1::text::regclass) \
                  IS NOT DISTINCT FROM \
                    (SELECT colocationid FROM pg_dist_partition WHERE logicalrelid = 'rate_limiter.rate_limits'::regclass) \
             FROM pg_attribute WHERE attrelid = 'rate_limiter.rate_limits'::regclass AND attname = 'dkey'",
            &[&table],
        )
        .expect("dkey's type and the colocation");
    (row.get(0), row.get(1))
}

/// Local tables with no state (every stored key must be a tenant id to
/// colocate, and a test that failed leaves its rows), the application
/// table `table` (`tenant_id column_type`, `body text`) distributed by its
/// tenant column, and the limits `name` and `name-global` (10 tokens each)
/// defined: a coordinator connection.
fn colocation_setup(table: &str, column_type: &str, name: &str) -> Client {
    make_local();
    forget(name);
    let mut coordinator = coordinator();
    coordinator
        .batch_execute(&format!(
            "DELETE FROM rate_limiter.rate_limits; \
             DROP SCHEMA IF EXISTS app CASCADE; CREATE SCHEMA app; \
             CREATE TABLE {table} (tenant_id {column_type} NOT NULL, body text); \
             SELECT create_distributed_table('{table}', 'tenant_id')"
        ))
        .expect("an application table distributed by its tenant id");
    define(&mut coordinator, name, 10.0);
    define(&mut coordinator, &format!("{name}-global"), 10.0);
    coordinator
}

/// With one token of `name` consumed for each of `keys`, of the global
/// limit `name-global`, and of the key `not-a-tenant` (no value of
/// `column_type`), `distribute(colocate_with => table)` refuses (22P02)
/// and changes nothing; once that key is `rate_reset`, it distributes,
/// `dkey` of `column_type`, in `table`'s colocation group.
fn distribute_colocated_after_refusing(
    coordinator: &mut Client,
    table: &str,
    column_type: &str,
    name: &str,
    keys: &[&str],
) {
    let bad_key = "not-a-tenant";
    for key in keys.iter().chain([&bad_key]) {
        assert!(consume(coordinator, name, Some(key)));
    }
    assert!(consume(coordinator, &format!("{name}-global"), None));
    let distribute = format!("SELECT rate_limiter.distribute(colocate_with => '{table}')");
    let error = coordinator
        .batch_execute(&distribute)
        .expect_err("a key that is not a tenant id");
    assert_eq!(
        error.code(),
        Some(&SqlState::INVALID_TEXT_REPRESENTATION),
        "{error}"
    );
    assert_eq!(distribution(coordinator), None, "still local");
    coordinator
        .execute("SELECT rate_limiter.rate_reset($1, $2)", &[&name, &bad_key])
        .expect("rate_reset");
    coordinator
        .batch_execute(&distribute)
        .expect("the limiter colocated with the table");
    let (dkey_type, together) = dkey_type_and_colocation(coordinator, table);
    assert_eq!(dkey_type, column_type);
    assert!(together, "one colocation group");
}

/// After `distribute(colocate_with => ...)`, with `dkey` of
/// `column_type`: each of `keys` ((key, its `dkey` as text)) of `name`
/// and the global limit `name-global` (`dkey` as text `global_dkey`),
/// each consumed once before distributing (9 tokens left), is where Citus
/// routes its value, and a call from every node finds it there (6 tokens
/// left afterwards).
fn colocated_rows_are_found_from_every_node(
    coordinator: &mut Client,
    name: &str,
    column_type: &str,
    keys: &[(&str, String)],
    global_dkey: &str,
) {
    let global = format!("{name}-global");
    let expect_tokens = |coordinator: &mut Client, tokens: f64| {
        for (key, dkey) in keys {
            assert_eq!(
                stored_typed(coordinator, name, Some(key), dkey, column_type),
                Some(tokens),
                "{key:?}"
            );
        }
        assert_eq!(
            stored_typed(coordinator, &global, None, global_dkey, column_type),
            Some(tokens)
        );
    };
    expect_tokens(coordinator, 9.0);
    for url in urls() {
        let mut client = connect(&url);
        for (key, _) in keys {
            assert!(consume(&mut client, name, Some(key)), "{key:?} from {url}");
        }
        assert!(consume(&mut client, &global, None), "from {url}");
    }
    expect_tokens(coordinator, 6.0);
}

/// What a state table colocated with `table` (distributed by a column of
/// `column_type`) shows for tenants on the two workers (the first of
/// `candidates`, values as text, on each), with the keyed limit `name` (10
/// tokens, never used for these tenants) and the global limit
/// `name-global` (6 tokens left, its row's `dkey` as text
/// `global_dkey`) defined:
/// - the tenant transaction (`rate_limit` and an `INSERT` into `table`),
///   from the coordinator and from the tenant's worker, runs on that
///   worker alone, one-phase;
/// - a transaction that consumed on both workers commits with 2PC;
/// - `rate_limit_all` over both tenants and the global limit, from worker
///   2, consumes on both workers, and a refusal on one consumes nothing
///   anywhere;
/// - `undistribute()` makes `dkey` text (NULL) again, keeping the rows.
fn colocated_tenants_on_two_workers(
    table: &str,
    column_type: &str,
    candidates: &[String],
    name: &str,
    global_dkey: &str,
) {
    let urls = urls();
    let mut coordinator = coordinator();
    let global = format!("{name}-global");
    let tenant_on = |coordinator: &mut Client, node: usize| {
        candidates
            .iter()
            .find(|tenant| node_of_value(coordinator, table, tenant, column_type) == node)
            .expect("a tenant on that worker")
            .clone()
    };
    let (one, two) = (
        tenant_on(&mut coordinator, 1),
        tenant_on(&mut coordinator, 2),
    );
    let tokens = |coordinator: &mut Client, key: Option<&str>, dkey: &str| {
        stored_typed(
            coordinator,
            if key.is_some() { name } else { &global },
            key,
            dkey,
            column_type,
        )
    };
    for url in [&urls[0], &urls[1]] {
        tenant_transaction_stays_on_one_worker(
            url,
            name,
            &one,
            &format!("INSERT INTO {table} VALUES ($1::text::{column_type}, 'a row')"),
            &one,
        );
    }
    assert_eq!(tokens(&mut coordinator, Some(&one), &one), Some(8.0));
    // Both workers in one transaction, from worker 1 (a direct write and a
    // delegated one): two-phase commit.
    let (mut worker, notices) = connect_with_notices(&urls[1]);
    worker
        .batch_execute("SET citus.log_remote_commands = on")
        .expect("log remote commands");
    let mut transaction = worker.transaction().expect("begin");
    for tenant in [&one, &two] {
        transaction
            .execute(
                "SELECT * FROM rate_limiter.rate_limit($1, $2)",
                &[&name, tenant],
            )
            .expect("rate_limit");
    }
    transaction.commit().expect("commit");
    let log = taken(&notices);
    assert!(
        log.iter().any(|line| line.contains("PREPARE TRANSACTION")),
        "two workers commit with 2PC: {log:#?}"
    );
    assert_eq!(tokens(&mut coordinator, Some(&one), &one), Some(7.0));
    assert_eq!(tokens(&mut coordinator, Some(&two), &two), Some(9.0));
    // rate_limit_all over both tenants and the global limit, from worker
    // 2: all admitted, then a refusal (9 > 8 on tenant two) that consumes
    // nothing anywhere.
    let mut worker2 = connect(&urls[2]);
    for (count, expected) in [(1.0, [true, true, true]), (9.0, [true, true, false])] {
        let answers: Vec<bool> = worker2
            .query(
                "SELECT ok FROM rate_limiter.rate_limit_all(ARRAY[\
                     ($1, $2, 1, NULL), ($4, NULL, 1, NULL), ($1, $3, $5, NULL)\
                 ]::rate_limiter.request[])",
                &[&name, &one, &two, &global, &count],
            )
            .expect("rate_limit_all")
            .iter()
            .map(|row| row.get(0))
            .collect();
        assert_eq!(answers, expected);
        assert_eq!(tokens(&mut coordinator, Some(&one), &one), Some(6.0));
        assert_eq!(tokens(&mut coordinator, Some(&two), &two), Some(8.0));
        assert_eq!(tokens(&mut coordinator, None, global_dkey), Some(5.0));
    }
    // prune() from the coordinator reaches both workers through
    // _prune_at, delegated by a value of the column's type: the rows of a
    // name without a definition on both tenants go, the others stay.
    let inline = format!("{name}-inline");
    let inline_tokens = |coordinator: &mut Client, tenant: &str| {
        stored_typed(coordinator, &inline, Some(tenant), tenant, column_type)
    };
    for tenant in [&one, &two] {
        coordinator
            .execute(
                "SELECT * FROM rate_limiter.rate_limit($1, $2, \
                 config => rate_limiter.token_bucket(10, '1000 days'))",
                &[&inline, tenant],
            )
            .expect("an inline config");
        assert_eq!(inline_tokens(&mut coordinator, tenant), Some(9.0));
    }
    let deleted: i64 = coordinator
        .query_one("SELECT rate_limiter.prune(older_than => '0 seconds')", &[])
        .expect("prune()")
        .get(0);
    assert!(deleted >= 2, "both tenants' inline rows: {deleted}");
    for tenant in [&one, &two] {
        assert_eq!(
            inline_tokens(&mut coordinator, tenant),
            None,
            "pruned on the tenant's worker"
        );
    }
    assert_eq!(tokens(&mut coordinator, Some(&one), &one), Some(6.0));
    assert_eq!(tokens(&mut coordinator, Some(&two), &two), Some(8.0));
    // undistribute() goes back to a text dkey, keeping the rows.
    make_local();
    assert_eq!(dkey_type_and_colocation(&mut coordinator, table).0, "text");
    assert_eq!(
        stored(&mut coordinator, name, &one),
        None,
        "dkey is NULL when local"
    );
    let remaining: f64 = coordinator
        .query_one(
            "SELECT remaining FROM rate_limiter.rate_check($1, $2)",
            &[&name, &one],
        )
        .expect("rate_check")
        .get(0);
    assert_eq!(remaining.round(), 5.0, "6 stored, minus the checked token");
}

#[test]
#[ignore = "needs the Citus cluster of scripts/test.sh"]
fn colocated_with_a_bigint_tenant_column_a_tenant_transaction_stays_on_one_worker() {
    let mut coordinator = colocation_setup("app.orders", "bigint", "orders");

    // State written before distributing, and a key that is no tenant id:
    // distribute() refuses (22P02) and changes nothing.
    // Keys as distribute() (key::bigint) and the calls read them.
    const TENANT_KEYS: [(&str, i64); 4] = [(" 42", 42), ("+7", 7), ("-3", -3), ("0042\t", 42)];
    distribute_colocated_after_refusing(
        &mut coordinator,
        "app.orders",
        "bigint",
        "orders",
        &TENANT_KEYS.map(|(key, _)| key),
    );

    // The rows kept their state, each in the shard Citus routes its value
    // to: the key as a bigint, hashtextextended(name/shard, 0) for a
    // global limit; calls from every node reach them.
    let global_dkey: i64 = coordinator
        .query_one("SELECT hashtextextended('orders-global/0', 0)", &[])
        .expect("hash")
        .get(0);
    let keys: Vec<(&str, String)> = TENANT_KEYS
        .iter()
        .map(|(key, tenant)| (*key, tenant.to_string()))
        .collect();
    colocated_rows_are_found_from_every_node(
        &mut coordinator,
        "orders",
        "bigint",
        &keys,
        &global_dkey.to_string(),
    );
    // What key::bigint would take but distribute() refuses is refused by
    // the calls too (22P02), as is what is out of range or no integer.
    for key in ["x1", "4_2", "0x2A", "9223372036854775808", "", " ", "1e3"] {
        let error = coordinator
            .query_one(
                "SELECT ok FROM rate_limiter.rate_check('orders', $1)",
                &[&key],
            )
            .expect_err("not a decimal bigint");
        assert_eq!(
            error.code(),
            Some(&SqlState::INVALID_TEXT_REPRESENTATION),
            "{key:?}: {error}"
        );
    }
    colocated_tenants_on_two_workers(
        "app.orders",
        "bigint",
        &(1000..1100)
            .map(|tenant| tenant.to_string())
            .collect::<Vec<_>>(),
        "orders",
        &global_dkey.to_string(),
    );
    coordinator
        .batch_execute("DROP SCHEMA app CASCADE")
        .expect("drop the application");
    forget("orders");
}

/// As the bigint test, with an integer tenant column: `dkey`
/// becomes an integer, the key read as a decimal integer in its range,
/// `hashtext(name/shard)` for a global limit.
#[test]
#[ignore = "needs the Citus cluster of scripts/test.sh"]
fn colocated_with_an_integer_tenant_column_a_tenant_transaction_stays_on_one_worker() {
    let mut coordinator = colocation_setup("app.orders", "integer", "iorders");
    const TENANT_KEYS: [(&str, i32); 4] = [(" 42", 42), ("+7", 7), ("-3", -3), ("0042\t", 42)];
    distribute_colocated_after_refusing(
        &mut coordinator,
        "app.orders",
        "integer",
        "iorders",
        &TENANT_KEYS.map(|(key, _)| key),
    );
    let global_dkey: i32 = coordinator
        .query_one("SELECT hashtext('iorders-global/0')", &[])
        .expect("hash")
        .get(0);
    let keys: Vec<(&str, String)> = TENANT_KEYS
        .iter()
        .map(|(key, tenant)| (*key, tenant.to_string()))
        .collect();
    colocated_rows_are_found_from_every_node(
        &mut coordinator,
        "iorders",
        "integer",
        &keys,
        &global_dkey.to_string(),
    );
    // Out of integer's range, or no integer: 22P02.
    for key in [
        "x1",
        "2147483648",
        "-2147483649",
        "9223372036854775807",
        "",
        "1e3",
    ] {
        let error = coordinator
            .query_one(
                "SELECT ok FROM rate_limiter.rate_check('iorders', $1)",
                &[&key],
            )
            .expect_err("not a decimal integer in range");
        assert_eq!(
            error.code(),
            Some(&SqlState::INVALID_TEXT_REPRESENTATION),
            "{key:?}: {error}"
        );
    }
    colocated_tenants_on_two_workers(
        "app.orders",
        "integer",
        &(1000..1100)
            .map(|tenant| tenant.to_string())
            .collect::<Vec<_>>(),
        "iorders",
        &global_dkey.to_string(),
    );
    coordinator
        .batch_execute("DROP SCHEMA app CASCADE")
        .expect("drop the application");
    forget("iorders");
}

#[test]
#[ignore = "needs the Citus cluster of scripts/test.sh"]
fn colocated_with_a_uuid_tenant_column_a_tenant_transaction_stays_on_one_worker() {
    let mut coordinator = colocation_setup("app.accounts", "uuid", "accounts");
    // A distribution column of another type (smallint here): 0A000.
    coordinator
        .batch_execute(
            "CREATE TABLE app.other (tenant_id smallint NOT NULL); \
             SELECT create_distributed_table('app.other', 'tenant_id')",
        )
        .expect("a table distributed by a smallint");
    let error = coordinator
        .batch_execute("SELECT rate_limiter.distribute(colocate_with => 'app.other')")
        .expect_err("a smallint column");
    assert_eq!(
        error.code(),
        Some(&SqlState::FEATURE_NOT_SUPPORTED),
        "{error}"
    );
    assert_eq!(distribution(&mut coordinator), None, "still local");
    // One tenant written three ways (uuid_in takes them all), before
    // distributing; and a key that is no uuid: distribute() refuses
    // (22P02) and changes nothing.
    const TENANT: &str = "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11";
    const KEYS: [&str; 3] = [
        "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
        "{A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11}",
        "a0eebc999c0b4ef8bb6d6bb9bd380a11",
    ];
    distribute_colocated_after_refusing(
        &mut coordinator,
        "app.accounts",
        "uuid",
        "accounts",
        &KEYS,
    );
    // The rows kept their state, where Citus routes their value: the key
    // as a uuid, md5(name/shard)::uuid for a global limit; calls from
    // every node reach them.
    let global_dkey: String = coordinator
        .query_one("SELECT md5('accounts-global/0')::uuid::text", &[])
        .expect("md5")
        .get(0);
    let keys: Vec<(&str, String)> = KEYS.iter().map(|key| (*key, TENANT.to_string())).collect();
    colocated_rows_are_found_from_every_node(
        &mut coordinator,
        "accounts",
        "uuid",
        &keys,
        &global_dkey,
    );
    // A key that is no uuid is 22P02 (white space, a misplaced hyphen, one
    // brace), as PostgreSQL's uuid_in refuses it.
    for key in [
        "x1",
        " a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
        "a0eebc9-99c0b-4ef8-bb6d-6bb9bd380a11",
        "{a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
        "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11-",
    ] {
        let error = coordinator
            .query_one(
                "SELECT ok FROM rate_limiter.rate_check('accounts', $1)",
                &[&key],
            )
            .expect_err("not a uuid");
        assert_eq!(
            error.code(),
            Some(&SqlState::INVALID_TEXT_REPRESENTATION),
            "{key:?}: {error}"
        );
        let refused = coordinator
            .query_one("SELECT $1::text::uuid", &[&key])
            .expect_err("uuid_in refuses it");
        assert_eq!(refused.code(), Some(&SqlState::INVALID_TEXT_REPRESENTATION));
    }
    colocated_tenants_on_two_workers(
        "app.accounts",
        "uuid",
        &(0..100)
            .map(|n| format!("00000000-0000-0000-0000-{n:012}"))
            .collect::<Vec<_>>(),
        "accounts",
        &global_dkey,
    );
    coordinator
        .batch_execute("DROP SCHEMA app CASCADE")
        .expect("drop the application");
    forget("accounts");
}
