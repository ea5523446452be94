//! `define` on one server: the definition written and, when its meaning
//! changes, the limit's state rows deleted, in two statements that lock
//! rows in the order consuming calls lock them. On a distributed install
//! the cluster writes it its own way (`crate::placement`), with the same
//! [`arguments`].

use crate::config::ConfigValues;
use crate::errors::CallError;
use crate::storage::text_argument;
use pgrx::datum::DatumWithOid;
use pgrx::spi::SpiClient;

/// Inserts or replaces a definition. When the `kind`, `period` or `shards`
/// change, the limit's state rows are deleted (they would mean something
/// else); other changes keep the state, capped at the new capacity when
/// next evaluated.
///
/// Two statements: [`LOCK_DISCARDED`] locks the definition and then the
/// state rows to discard, in the order every consuming call locks rows
/// (key bytewise with the global limit first, then shard: `key` is
/// `COLLATE "C"`), so a `define` and a `rate_limit_all` or `rate_credit`
/// holding several of them never deadlock; then [`DEFINE`], with a new
/// snapshot that sees what those rows' last holders committed, writes the
/// definition and deletes the rows it holds. (One statement could not do
/// both: under READ COMMITTED its `DELETE` would look for the versions its
/// own snapshot sees, not the ones the lock waited for.) A call that
/// resolved the old definition and then waited for these rows notices the
/// change once it holds them (`definitions::recheck`) and starts again.
const LOCK_DISCARDED: &str = "
    WITH previous AS (
        SELECT kind, period, shards FROM rate_limiter.definitions WHERE name = $1 FOR UPDATE
    )
    SELECT count(*) FROM (
        SELECT 1
        FROM rate_limiter.rate_limits AS r, previous AS p
        WHERE r.name = $1
          AND (p.kind::text, p.period, p.shards) IS DISTINCT FROM ($2::text, $3::interval, $4::int4)
        ORDER BY r.key NULLS FIRST, r.shard
        FOR UPDATE OF r
    ) AS locked";

const DEFINE: &str = "
    WITH previous AS (
        SELECT kind, period, shards FROM rate_limiter.definitions WHERE name = $1 FOR UPDATE
    ), upsert AS (
        INSERT INTO rate_limiter.definitions AS d
            (name, kind, rate, period, capacity, max_reserved, shards, start, enforce)
        VALUES ($1, $2::rate_limiter.kind, $3, $4, $5, $6, $7, $8, $9)
        ON CONFLICT (name) DO UPDATE SET
            kind = excluded.kind, rate = excluded.rate, period = excluded.period,
            capacity = excluded.capacity, max_reserved = excluded.max_reserved,
            shards = excluded.shards, start = excluded.start, enforce = excluded.enforce
        RETURNING 1
    )
    DELETE FROM rate_limiter.rate_limits AS r
    USING previous AS p
    WHERE r.name = $1
      AND (p.kind::text, p.period, p.shards) IS DISTINCT FROM ($2, $4, $7)";

/// [`DEFINE`] on the tables of a version before 0.4.0 (no column
/// `enforce`), until `ALTER EXTENSION ... UPDATE`.
const DEFINE_BEFORE_0_4: &str = "
    WITH previous AS (
        SELECT kind, period, shards FROM rate_limiter.definitions WHERE name = $1 FOR UPDATE
    ), upsert AS (
        INSERT INTO rate_limiter.definitions AS d
            (name, kind, rate, period, capacity, max_reserved, shards, start)
        VALUES ($1, $2::rate_limiter.kind, $3, $4, $5, $6, $7, $8)
        ON CONFLICT (name) DO UPDATE SET
            kind = excluded.kind, rate = excluded.rate, period = excluded.period,
            capacity = excluded.capacity, max_reserved = excluded.max_reserved,
            shards = excluded.shards, start = excluded.start
        RETURNING 1
    )
    DELETE FROM rate_limiter.rate_limits AS r
    USING previous AS p
    WHERE r.name = $1
      AND (p.kind::text, p.period, p.shards) IS DISTINCT FROM ($2, $4, $7)";

/// The arguments of `define`'s statements: (name, kind, rate, period,
/// capacity, max_reserved, shards, start, enforce) to write the
/// definition, and (name, kind, period, shards) to lock it and the rows a
/// change of meaning discards.
pub fn arguments<'a>(
    name: &'a [u8],
    values: &ConfigValues,
    enforce: bool,
) -> ([DatumWithOid<'a>; 9], [DatumWithOid<'a>; 4]) {
    (
        [
            text_argument(name),
            values.kind.label().into(),
            values.rate.into(),
            values.period.into(),
            values.capacity.into(),
            values.max_reserved.into(),
            values.shards.into(),
            values.start.into(),
            enforce.into(),
        ],
        [
            text_argument(name),
            values.kind.label().into(),
            values.period.into(),
            values.shards.into(),
        ],
    )
}

/// Writes the definition of `name` (see [`LOCK_DISCARDED`] and
/// [`DEFINE`]), as the extension's owner through `client`.
///
/// Errors: those of the statements (SPI).
pub fn define(
    client: &mut SpiClient<'_>,
    name: &[u8],
    values: &ConfigValues,
    enforce: bool,
) -> Result<(), CallError> {
    let (args, lock_args) = arguments(name, values, enforce);
    client.update(LOCK_DISCARDED, None, &lock_args)?;
    if crate::catalog::objects().enforce_column {
        client.update(DEFINE, None, &args)?;
    } else {
        client.update(DEFINE_BEFORE_0_4, None, &args[..8])?;
    }
    Ok(())
}
