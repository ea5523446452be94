//! Composite limits (docs/composites.md): a name made of defined limits,
//! the table `rate_limiter.composites` (written by `define_all()` and
//! `undefine()`, both in sql/functions.sql).
//!
//! A call looks a name up here only when it has no definition (the 42704
//! path of `crate::definitions`), so a call of a defined limit pays
//! nothing for composites. Lookups are cached per backend as the
//! definitions are, and dropped with them: the table's statement trigger
//! sends the same relcache invalidation (`definitions::forget_definitions`
//! calls [`forget`]), and a miss reads the table with the latest snapshot.

use crate::bounded_cache::BoundedCache;
use crate::errors::CallError;
use crate::plans::kept_plan;
use crate::storage::text_argument;
use pgrx::prelude::*;
use pgrx::PgOid;
use std::cell::RefCell;
use std::rc::Rc;

/// A composite: its members (defined limits, each named once, in the
/// order `define_all` was given them) and whether it enforces (`false`:
/// shadow mode, a refusal is answered as admitted).
#[derive(Debug, PartialEq)]
pub struct Composite {
    pub members: Vec<Vec<u8>>,
    pub enforce: bool,
}

/// The members of `name` and its `enforce`, one row per member in order.
/// (textsend: a member's bytes as they are stored, in any encoding.)
const LOOKUP: &str = "SELECT c.enforce, pg_catalog.textsend(m.member) \
     FROM rate_limiter.composites AS c, \
          pg_catalog.unnest(c.members) WITH ORDINALITY AS m(member, position) \
     WHERE c.name = $1 ORDER BY m.position";

const TEXT: PgOid = PgOid::BuiltIn(pg_sys::PgBuiltInOids::TEXTOID);

type Names = BoundedCache<Vec<u8>, Option<Rc<Composite>>>;

thread_local! {
    /// Composites looked up in this backend, by name (`None`: not one).
    static CACHE: RefCell<Names> = RefCell::new(Names::new(MAX_CACHED_NAMES, MAX_CACHED_BYTES));
}

/// The most names, and bytes of names and members, the cache holds (as
/// the definitions' cache: then it is emptied, so its memory is bounded).
const MAX_CACHED_NAMES: usize = 10_000;
const MAX_CACHED_BYTES: usize = 1 << 20;

/// Forgets every cached composite (on any relcache invalidation).
pub fn forget() {
    CACHE.with(|cache| {
        if let Ok(mut cache) = cache.try_borrow_mut() {
            cache.clear();
        }
    });
}

fn remember(name: &[u8], found: Option<Rc<Composite>>) {
    let bytes = name.len()
        + found
            .as_ref()
            .map_or(0, |composite| composite.members.iter().map(Vec::len).sum());
    CACHE.with(|cache| cache.borrow_mut().insert(name.to_vec(), bytes, found));
}

/// The composite named `name`, or `None` (also when the database has no
/// composites table: a version before 0.6.0).
///
/// Errors: SPI failures (XX000).
pub fn find(name: &[u8]) -> Result<Option<Rc<Composite>>, CallError> {
    if crate::catalog::objects().composites == pg_sys::InvalidOid {
        return Ok(None);
    }
    // SAFETY: processes pending invalidations; cheap when there are none.
    unsafe { pg_sys::AcceptInvalidationMessages() };
    if let Some(cached) = CACHE.with(|cache| cache.borrow().get(name).cloned()) {
        return Ok(cached);
    }
    // As definitions::lookup_named: a read overtaken by an invalidation is
    // not cached.
    for _ in 0..8 {
        let generation = crate::catalog::generation();
        let found = read_latest(name)?;
        if crate::catalog::generation() == generation {
            remember(name, found.clone());
            return Ok(found);
        }
    }
    read_latest(name)
}

/// Whether `error` is the 42704 of `name` and `name` is a composite: then
/// the composite.
pub fn instead_of(error: &CallError, name: &[u8]) -> Result<Option<Rc<Composite>>, CallError> {
    match error {
        CallError::Undefined(undefined) if undefined == name => find(name),
        _ => Ok(None),
    }
}

/// Reads the composite `name` with the latest snapshot, as the owner.
fn read_latest(name: &[u8]) -> Result<Option<Rc<Composite>>, CallError> {
    crate::security::as_owner(|| {
        // SAFETY: pushed and popped around the read; an error pops it in
        // the abort.
        unsafe { pg_sys::PushActiveSnapshot(pg_sys::GetLatestSnapshot()) };
        let found = Spi::connect(|client| {
            let plan = kept_plan(client, LOOKUP, &[TEXT], false)?;
            let table = client.select(plan, None, &[text_argument(name)])?;
            let mut enforce = true;
            let mut members = Vec::with_capacity(table.len());
            for row in table {
                enforce = row.get::<bool>(1)?.unwrap_or(true);
                if let Some(member) = row.get::<Vec<u8>>(2)? {
                    members.push(member);
                }
            }
            Ok::<_, CallError>(
                (!members.is_empty()).then(|| Rc::new(Composite { members, enforce })),
            )
        });
        unsafe { pg_sys::PopActiveSnapshot() };
        found
    })
}
