//! Deleting a limit's state (`rate_reset`): a kept `DELETE` through SPI;
//! its function has `SET enable_seqscan = off` (sql/functions.sql), so a
//! plan made while the table was empty still uses the index later.

use crate::plans::kept_plan;
use pgrx::datum::DatumWithOid;
use pgrx::pg_sys;
use pgrx::spi::{SpiClient, SpiResult};
use pgrx::PgOid;

const TEXT: PgOid = PgOid::BuiltIn(pg_sys::PgBuiltInOids::TEXTOID);

/// A name or key (bytes) as an SPI argument of type `text`.
pub fn text_argument(bytes: &[u8]) -> DatumWithOid<'_> {
    // SAFETY: the bytes of a text value become a varlena of type text.
    unsafe { DatumWithOid::new(bytes, pg_sys::TEXTOID) }
}
const DELETE_KEYED: &str = "DELETE FROM rate_limiter.rate_limits WHERE name = $1 AND key = $2";
const DELETE_GLOBAL: &str = "DELETE FROM rate_limiter.rate_limits WHERE name = $1 AND key IS NULL";

/// Deletes the state of (name, key) on every shard. (Deleting the global
/// limit, key NULL, needs its own statement: `key = NULL` matches nothing
/// and `key IS NOT DISTINCT FROM $2` cannot use the index.)
pub fn delete(client: &mut SpiClient<'_>, name: &[u8], key: Option<&[u8]>) -> SpiResult<()> {
    match key {
        Some(key) => {
            let plan = kept_plan(client, DELETE_KEYED, &[TEXT, TEXT], true)?;
            client.update(plan, None, &[text_argument(name), text_argument(key)])?;
        }
        None => {
            let plan = kept_plan(client, DELETE_GLOBAL, &[TEXT], true)?;
            client.update(plan, None, &[text_argument(name)])?;
        }
    }
    Ok(())
}
