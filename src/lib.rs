//! `rate_limiter`: transactional application-layer rate limiting inside
//! PostgreSQL.
//!
//! Layout, one concept per file:
//! - the math lives in the `rate_limiter_algorithm` crate (`algorithm/`),
//!   pure Rust with no PostgreSQL dependency;
//! - [`storage`]: locking, reading and writing the state rows (directly on
//!   the heap and index);
//! - [`local`]: each call on this node's rows (the single-server path);
//! - [`placement`]: the seam that sends a call to [`local`] or, when the
//!   state table is distributed, to the cluster installed at load;
//! - [`call`]: the checked arguments every layer below the SQL functions
//!   takes;
//! - [`result_row`]: returning the result row of `rate_limit` / `rate_check`;
//! - [`plans`]: SPI statements prepared once and kept;
//! - [`definitions`]: looking a named limit up (cached per backend);
//! - [`config`]: the SQL type `rate_limiter.config` and its constructors;
//! - [`api`]: the SQL functions a caller runs (`rate_limit`, `rate_check`,
//!   `rate_reset`, `rate_limit_all`, `rate_credit`, `rate_wait`, `define`,
//!   `undefine`, `prune`, `status`, `http_headers`), one file each;
//! - [`stats`]: the shared-memory counters behind `rate_limiter.stats`;
//! - [`names`]: names and keys as opaque bytes, and how messages show them;
//! - [`settings`]: the GUCs `rate_limiter.now_override`,
//!   `rate_limiter.sqlstate`, `rate_limiter.random_seed`,
//!   `rate_limiter.lock_free_refusals`, `rate_limiter.max_requests` and
//!   `rate_limiter.max_inline_shards` (and [`stats`] defines
//!   `rate_limiter.stats_max` when preloaded);
//! - [`shard_choice`]: the random numbers behind the choice of shards;
//! - [`clock`]: the current time (real or overridden);
//! - [`security`]: running statements as the extension's owner with a pinned search path;
//! - [`citus`]: the cluster behind [`placement`] on Citus: where a row lives,
//!   and calls run on that node (`_PG_init` lets it install its hooks,
//!   which it does only when Citus is loaded);
//! - [`catalog`]: the OIDs of the extension's schema, table, index and owner;
//! - [`errors`]: turning errors and refusals into PostgreSQL errors;
//! - [`compat`]: what differs between PostgreSQL 15, 16, 17 and 18;
//! - [`transaction_end`]: which transaction-callback events end a transaction.
//!
//! The SQL objects are written by hand in `sql/`: `schema.sql` (types and
//! tables), `functions.sql` (every `CREATE FUNCTION`, pointing at the
//! `*_wrapper` symbols that `#[pg_extern(sql = false)]` generates here, or
//! that `api::rate_limit` defines as plain C entry points),
//! `composites.sql` (`define_all`, PL/pgSQL in both editions),
//! `concurrency.sql`, `concurrency_status.sql` and `concurrency_guard.sql`
//! (concurrency limits, PL/pgSQL in both editions), the Citus
//! functions (`citus_*.sql`) and `privileges.sql`.

use pgrx::prelude::*;

pub mod api;
pub mod blocks;
pub mod bounded_cache;
pub mod calendar;
pub mod call;
pub mod catalog;
pub mod citus;
pub mod clock;
pub mod compat;
pub mod composites;
pub mod config;
pub mod definitions;
pub mod errors;
pub mod local;
pub mod named_lookup;
pub mod names;
pub mod overrides;
pub mod placement;
pub mod plans;
pub mod result_row;
pub mod security;
pub mod settings;
pub mod shard_choice;
pub mod slot_definitions;
pub mod stats;
pub mod storage;
pub mod subtransaction;
pub mod transaction_end;

pgrx::pg_module_magic!();

extension_sql_file!("../sql/schema.sql", name = "schema", bootstrap);
extension_sql_file!(
    "../sql/functions.sql",
    name = "functions",
    requires = ["schema"]
);
extension_sql_file!(
    "../sql/composites.sql",
    name = "composites",
    requires = ["functions"]
);
extension_sql_file!(
    "../sql/concurrency.sql",
    name = "concurrency",
    requires = ["composites"]
);
extension_sql_file!(
    "../sql/concurrency_status.sql",
    name = "concurrency_status",
    requires = ["concurrency"]
);
extension_sql_file!(
    "../sql/concurrency_guard.sql",
    name = "concurrency_guard",
    requires = ["concurrency_status"]
);
extension_sql_file!(
    "../sql/concurrency_leases.sql",
    name = "concurrency_leases",
    requires = ["concurrency_guard"]
);
extension_sql_file!(
    "../sql/concurrency_citus.sql",
    name = "concurrency_citus",
    requires = ["concurrency_leases"]
);
extension_sql_file!(
    "../sql/citus_distribute.sql",
    name = "citus_distribute",
    requires = ["concurrency_citus"]
);
extension_sql_file!(
    "../sql/citus_prepare_node.sql",
    name = "citus_prepare_node",
    requires = ["citus_distribute"]
);
extension_sql_file!(
    "../sql/citus_internal_functions.sql",
    name = "citus_internal_functions",
    requires = ["citus_prepare_node"]
);
extension_sql_file!("../sql/privileges.sql", name = "privileges", finalize);

/// Called once when a backend (or, preloaded, the postmaster) loads the
/// library, and the one place hooks are installed: the statistics' shared
/// memory and transaction callback when preloaded, the GUCs, the
/// invalidation and transaction callbacks of the caches, and (only when
/// Citus is loaded) Citus's hooks.
#[pg_guard]
pub extern "C-unwind" fn _PG_init() {
    // Statistics first: settings::register() ends by reserving the
    // "rate_limiter." prefix, which drops any rate_limiter.* setting not
    // defined by then (rate_limiter.stats_max from postgresql.conf).
    stats::init();
    settings::register();
    definitions::register_cache_invalidation();
    storage::read_cache::register();
    citus::register();
}
