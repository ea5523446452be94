//! The definitions of concurrency limits (docs/concurrency.md) as the
//! native `acquire`'s common case needs them: the `max` of a defined limit
//! without a default lease, by name. Cached per backend as `definitions.rs`
//! caches a rate limit's definition (also "not such a limit"), and
//! forgotten on the same invalidation (any write to the definitions
//! table), so a committed `define` is seen by the next call in every
//! session.

use crate::bounded_cache::BoundedCache;
use crate::errors::CallError;
use crate::plans::kept_plan;
use crate::storage::text_argument;
use pgrx::prelude::*;
use pgrx::spi::SpiClient;
use pgrx::PgOid;
use std::cell::RefCell;

/// `max` (1 to 32767, `rate` of the row) of a concurrency limit whose
/// `period` is 0 (its leases are transaction leases unless a call asks for
/// a timed one); nothing for any other name.
const LOOKUP: &str = "SELECT rate FROM rate_limiter.definitions \
                      WHERE name = $1 AND kind::text = 'concurrency' AND period = interval '0'";

type Names = BoundedCache<Vec<u8>, Option<i16>>;

thread_local! {
    /// What [`slots`] found, by name; bounded as `definitions.rs`'s cache.
    static CACHE: RefCell<Names> = RefCell::new(Names::new(10_000, 1 << 20));
}

/// The number of slots of `name` when it is a defined concurrency limit
/// without a default lease; `None` for any other name (undefined, a rate
/// limit, a default timed lease: the caller takes the general path).
/// Looked up as definitions are (`crate::named_lookup`).
///
/// Errors: those of reading the table.
pub fn slots(name: &[u8]) -> Result<Option<i16>, CallError> {
    crate::named_lookup::looked_up(&CACHE, name, |client| read(client, name))
}

/// Forgets every cached name (`definitions.rs`'s invalidation callback).
pub fn forget() {
    CACHE.with(|cache| {
        if let Ok(mut cache) = cache.try_borrow_mut() {
            cache.clear();
        }
    });
}

/// [`LOOKUP`]. A stored `rate` outside 1..=32767 or not whole (written by
/// hand) is no common case.
fn read(client: &SpiClient<'_>, name: &[u8]) -> Result<Option<i16>, CallError> {
    let text = PgOid::BuiltIn(pg_sys::PgBuiltInOids::TEXTOID);
    let plan = kept_plan(client, LOOKUP, &[text], false)?;
    let table = client.select(plan, Some(1), &[text_argument(name)])?;
    if table.is_empty() {
        return Ok(None);
    }
    let rate = table.first().get_one::<f64>()?;
    Ok(rate.and_then(|rate| {
        (rate >= 1.0 && rate <= f64::from(i16::MAX) && rate.fract() == 0.0).then_some(rate as i16)
    }))
}
