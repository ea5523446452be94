//! A backend's cached look-up of a row by name in one of the extension's
//! tables (`crate::definitions`' definitions, `crate::slot_definitions`'
//! concurrency limits): the cache first, else the table read with the
//! latest snapshot, as the extension's owner, and cached unless an
//! invalidation overtook the read.

use crate::bounded_cache::BoundedCache;
use crate::errors::CallError;
use pgrx::prelude::*;
use pgrx::spi::SpiClient;
use std::cell::RefCell;

/// `name`'s entry of `cache`, or what `read` reads of it, cached.
///
/// Pending invalidations are processed first (cheap when there are
/// none). A miss reads the table (as the extension's owner) with the
/// latest snapshot, as PostgreSQL reads its catalogs: every definition
/// whose invalidation has been processed is visible to it. If an
/// invalidation arrives during the read (it waited for the lock of a DROP
/// EXTENSION, say, and a define committed meanwhile), the snapshot may be
/// older than that change: read again rather than cache a stale answer;
/// after [`MAX_READS`] such reads, answer with the latest, uncached.
///
/// Errors: `read`'s.
pub fn looked_up<V: Copy>(
    cache: &'static std::thread::LocalKey<RefCell<BoundedCache<Vec<u8>, V>>>,
    name: &[u8],
    read: impl Fn(&SpiClient<'_>) -> Result<V, CallError>,
) -> Result<V, CallError> {
    // SAFETY: processes pending invalidations.
    unsafe { pg_sys::AcceptInvalidationMessages() };
    if let Some(cached) = cache.with(|cache| cache.borrow().get(name).copied()) {
        return Ok(cached);
    }
    for _ in 0..MAX_READS {
        let generation = crate::catalog::generation();
        let found = read_latest(&read)?;
        if crate::catalog::generation() == generation {
            cache.with(|cache| cache.borrow_mut().insert(name.to_vec(), name.len(), found));
            return Ok(found);
        }
    }
    read_latest(&read)
}

/// Reads before giving up on caching a definition (each one was overtaken
/// by an invalidation).
const MAX_READS: usize = 8;

/// Runs `read` with the latest snapshot, as the owner.
fn read_latest<V>(read: &impl Fn(&SpiClient<'_>) -> Result<V, CallError>) -> Result<V, CallError> {
    crate::security::as_owner(|| {
        // SAFETY: pushed and popped around the read; an error pops it in
        // the abort.
        unsafe { pg_sys::PushActiveSnapshot(pg_sys::GetLatestSnapshot()) };
        let found = Spi::connect(read);
        unsafe { pg_sys::PopActiveSnapshot() };
        found
    })
}
