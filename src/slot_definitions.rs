//! The definitions of concurrency limits (docs/concurrency.md) as the
//! native `acquire`'s common case needs them: the `max` of a defined limit
//! without a default lease, by name. Cached per backend as `definitions.rs`
//! caches a rate limit's definition (also "not such a limit"), and
//! forgotten on the same invalidation (any write to the definitions
//! table), so a committed `define` is seen by the next call in every
//! session.

use crate::errors::CallError;
use crate::plans::kept_plan;
use crate::storage::text_argument;
use pgrx::prelude::*;
use pgrx::PgOid;
use std::cell::{Cell, RefCell};
use std::collections::HashMap;

/// `max` (1 to 32767, `rate` of the row) of a concurrency limit whose
/// `period` is 0 (its leases are transaction leases unless a call asks for
/// a timed one); nothing for any other name.
const LOOKUP: &str = "SELECT rate FROM rate_limiter.definitions \
                      WHERE name = $1 AND kind::text = 'concurrency' AND period = interval '0'";

type Names = HashMap<Vec<u8>, Option<i16>, foldhash::fast::RandomState>;

thread_local! {
    /// What [`slots`] found, by name.
    static CACHE: RefCell<Names> = RefCell::new(Names::default());
    /// The bytes of the names in `CACHE`.
    static CACHED_BYTES: Cell<usize> = const { Cell::new(0) };
}

/// The most names and bytes of names the cache holds before it is
/// emptied (as `definitions.rs`'s: memory bounded however many names a
/// backend is asked about).
const MAX_CACHED_NAMES: usize = 10_000;
const MAX_CACHED_BYTES: usize = 1 << 20;

/// Reads before giving up on caching (each one overtaken by an
/// invalidation).
const MAX_READS: usize = 8;

/// The number of slots of `name` when it is a defined concurrency limit
/// without a default lease; `None` for any other name (undefined, a rate
/// limit, a default timed lease: the caller takes the general path).
/// A miss reads the table with the latest snapshot, as the extension's
/// owner, as `definitions::lookup` does.
///
/// Errors: those of reading the table.
pub fn slots(name: &[u8]) -> Result<Option<i16>, CallError> {
    // SAFETY: processes pending invalidations (cheap when there are none).
    unsafe { pg_sys::AcceptInvalidationMessages() };
    if let Some(cached) = CACHE.with(|cache| cache.borrow().get(name).copied()) {
        return Ok(cached);
    }
    for _ in 0..MAX_READS {
        let generation = crate::catalog::generation();
        let found = read_latest(name)?;
        if crate::catalog::generation() == generation {
            remember(name, found);
            return Ok(found);
        }
    }
    read_latest(name)
}

/// Forgets every cached name (`definitions.rs`'s invalidation callback).
pub fn forget() {
    CACHE.with(|cache| {
        if let Ok(mut cache) = cache.try_borrow_mut() {
            *cache = Names::default();
            CACHED_BYTES.with(|cached| cached.set(0));
        }
    });
}

fn remember(name: &[u8], found: Option<i16>) {
    CACHE.with(|cache| {
        let mut cache = cache.borrow_mut();
        let bytes = CACHED_BYTES.with(Cell::get);
        if cache.len() >= MAX_CACHED_NAMES || bytes + name.len() > MAX_CACHED_BYTES {
            *cache = Names::default();
            CACHED_BYTES.with(|cached| cached.set(0));
        }
        if cache.insert(name.to_vec(), found).is_none() {
            CACHED_BYTES.with(|cached| cached.set(cached.get() + name.len()));
        }
    });
}

/// [`LOOKUP`] with the latest snapshot, as the owner. A stored `rate`
/// outside 1..=32767 or not whole (written by hand) is no common case.
fn read_latest(name: &[u8]) -> Result<Option<i16>, CallError> {
    crate::security::as_owner(|| {
        // SAFETY: pushed and popped around the read; an error pops it in
        // the abort.
        unsafe { pg_sys::PushActiveSnapshot(pg_sys::GetLatestSnapshot()) };
        let found = Spi::connect(|client| {
            let text = PgOid::BuiltIn(pg_sys::PgBuiltInOids::TEXTOID);
            let plan = kept_plan(client, LOOKUP, &[text], false)?;
            let table = client.select(plan, Some(1), &[text_argument(name)])?;
            if table.is_empty() {
                return Ok::<_, CallError>(None);
            }
            let rate = table.first().get_one::<f64>()?;
            Ok(rate.and_then(|rate| {
                (rate >= 1.0 && rate <= f64::from(i16::MAX) && rate.fract() == 0.0)
                    .then_some(rate as i16)
            }))
        });
        unsafe { pg_sys::PopActiveSnapshot() };
        found
    })
}
